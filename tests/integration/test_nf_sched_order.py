"""sluiced.nf_sched: fifo keeps the chain order (docs/architecture.md "NFs sharing a core"): a woken
SCHED_FIFO task is queued just before whatever runs on its core, not after its upstream, so sluiced's
order helper requeues the awake fifo NFs of a core in chain order after the worker's kicks. The check
is the kernel's own record of the core's switches (a private tracefs instance): an order, not a timing.

Also: a fifo NF lets go of its thread's rseq area (the kernel's rseq_update events show it).

Not in the ASan and workers passes of `make test`: it tests the kernel's queue order, which neither
changes.
"""

import collections
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import TEST_WORKERS, base_config, sluice, wait_until, workdir  # noqa: F401

NF_CPU = {0}
# sluiced's main lcore beside the worker(s) on CPU 1 (SLUICE_TEST_WORKERS: one lcore each), off the NFs' CPU
LCORES_OFF_NF_CPU = ",".join(["1"] * (1 + TEST_WORKERS))


TRACEFS = Path("/sys/kernel/tracing")


@contextmanager
def trace(cpu, events):
    """A private tracefs instance recording `events` ("sched/sched_switch", ...) on `cpu`; yields a
    function that returns what was recorded so far. The instance goes, whatever happens."""
    if not (TRACEFS / "instances").is_dir():
        pytest.skip(f"no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS})")
    inst = TRACEFS / "instances" / f"sluice-test-{os.getpid()}"
    inst.mkdir()
    enabled = []
    try:
        (inst / "buffer_size_kb").write_text("16384")
        (inst / "tracing_cpumask").write_text(f"{1 << cpu:x}")
        for ev in events:
            (inst / "events" / ev / "enable").write_text("1")
            enabled.append(ev)

        def text():
            (inst / "tracing_on").write_text("0")
            return (inst / "trace").read_text()
        (inst / "tracing_on").write_text("1")
        yield text
    finally:
        (inst / "tracing_on").write_text("0")
        for ev in enabled:
            (inst / "events" / ev / "enable").write_text("0")
        inst.rmdir()


@contextmanager
def switch_trace(cpu):
    """sched_switch on `cpu`; yields a function that returns the next_pid of every switch so far."""
    with trace(cpu, ["sched/sched_switch"]) as text:
        yield lambda: [int(m) for m in re.findall(r"next_pid=(\d+)", text())]


def test_fifo_order_kept_after_wakeups(sluice, workdir):  # noqa: F811
    """gen -> a -> b -> c -> sink, all fifo on CPU 0 and adaptive: asleep between two runs of
    traffic, then woken by the worker's kicks in whatever order those reach CPU 0. The kernel queues
    a woken real-time task just before whatever runs then, so without sluiced's order helper the hops
    were left out of chain order (a packet waiting extra rounds on the way). The kernel's own record
    of CPU 0's switches must show every NF followed by its next hop: an order, not a timing."""
    names = ["gen", "a", "b", "c", "sink"]
    cfg = base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"},
               {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": names, "exit": "out"}],
        nfs=names, ring_size=4096, pool_mbufs=32768, nf_sched="fifo",
        lcores=LCORES_OFF_NF_CPU)  # sluiced's main lcore beside the worker, not starved by the NFs on CPU 0
    sluice.start(cfg)
    kw = {"wakeup": "adaptive", "cpus": NF_CPU}
    procs = {"sink": sluice.start_nf("sink", "sink", extra=["--action", "drop"], **kw)}
    for n in ("c", "b", "a"):
        procs[n] = sluice.start_nf("fwd", n, **kw)
    procs["gen"] = sluice.start_nf("gen", "gen", extra=["--rate-pps", 100000, "--size", 64], **kw)
    chain_next = {procs[x].pid: procs[y].pid for x, y in zip(names, names[1:] + names[:1])}

    name = {procs[n].pid: n for n in names}
    want = {x: y for x, y in zip(names, names[1:] + names[:1])}
    sluice.ok("port_chain_set", port="src", chain="c")
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > 0, 10, "traffic through the chain")
    # Each round: all asleep (adaptive: spin_us after the last packet), then woken by traffic.
    # Without the helper the order came out wrong in about two rounds of three.
    for rnd in range(3):
        sluice.ok("port_chain_set", port="src", chain=None)
        wait_until(lambda: all(sluice.nf(n)["queued"] == 0 for n in names), 10, "the NFs idle")
        time.sleep(0.2)
        passes, rx = sluice.stats()["nf_sched"]["order_passes"], sluice.nf("sink")["rx_pkts"]
        sluice.ok("port_chain_set", port="src", chain="c")
        wait_until(lambda: sluice.nf("sink")["rx_pkts"] > rx, 10, "traffic through the chain again")
        time.sleep(0.3)  # the helper's pass follows the kicks by 200 us
        with switch_trace(min(NF_CPU)) as switches:
            time.sleep(0.2)
            seq = [p for p in switches() if p in chain_next]
        st = sluice.stats()["nf_sched"]
        assert st["order_helper"] and st["fifo_nfs"] == 5, st
        assert st["order_passes"] > passes, st
        assert len(seq) > 100, f"round {rnd}: only {len(seq)} switches between the NFs on CPU {min(NF_CPU)}"
        follows = collections.defaultdict(collections.Counter)
        for x, y in zip(seq, seq[1:]):
            if x != y:
                follows[x][y] += 1
        order = {name[x]: name[c.most_common(1)[0][0]] for x, c in follows.items()}
        assert order == want, f"round {rnd}: the NF each one handed CPU {min(NF_CPU)} to most often: {order}"
    sluice.ok("port_chain_set", port="src", chain=None)
    # sluiced's main lcore is on CPU 1 here, so it does not share the NFs' CPU: nothing stepped aside
    assert "where sluiced's control thread (main lcore) runs" not in sluice.log()


def test_fifo_nfs_let_go_of_rseq(sluice, workdir):  # noqa: F811
    """A real-time NF's SDK unregisters the rseq area glibc gave its thread (src/lib/nf.c): the kernel
    would rewrite it on the way back from every switch, a fifth of a turn on this machine, and nothing
    in the NF loop uses it. The kernel's own rseq_update events on the NFs' CPU show it: none for the
    NFs left as they are, plenty for one started with SLUICE_NF_RSEQ=keep (so the trace can see them).
    A value the SDK does not know is named in the NF's log and the default holds."""
    names = ["gen", "a", "b", "sink"]
    cfg = base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"},
               {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": names, "exit": "out"}],
        nfs=names, nf_sched="fifo", lcores=LCORES_OFF_NF_CPU)
    sluice.start(cfg)
    kw = {"wakeup": "adaptive", "cpus": NF_CPU}
    procs = {"sink": sluice.start_nf("sink", "sink", extra=["--action", "drop"], env={"SLUICE_NF_RSEQ": "kep"}, **kw),
             "b": sluice.start_nf("fwd", "b", env={"SLUICE_NF_RSEQ": "keep"}, **kw),
             "a": sluice.start_nf("fwd", "a", **kw)}
    procs["gen"] = sluice.start_nf("gen", "gen", extra=["--rate-pps", 100000, "--size", 64], **kw)
    sluice.ok("port_chain_set", port="src", chain="c")
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > 1000, 10, "traffic through the chain")
    assert all(n["sched"] == "fifo" for n in sluice.stats()["nfs"]), sluice.stats()["nfs"]
    with trace(min(NF_CPU), ["rseq/rseq_update", "sched/sched_switch"]) as text:
        time.sleep(0.2)
        t = text()
    sluice.ok("port_chain_set", port="src", chain=None)
    updates = collections.Counter(int(m) for m in re.findall(r"-(\d+)\s+\[\d+\][^\n]*rseq_update", t))
    switched_in = collections.Counter(int(m) for m in re.findall(r"next_pid=(\d+)", t))
    for n, p in procs.items():
        assert switched_in[p.pid] > 100, f"{n} hardly ran on CPU {min(NF_CPU)}: {switched_in[p.pid]} switches"
    assert updates[procs["b"].pid] > 100, f"the NF that kept rseq: {updates[procs['b'].pid]} rseq updates"
    for n in ("gen", "a", "sink"):
        assert updates[procs[n].pid] == 0, f"{n}: {updates[procs[n].pid]} rseq updates after it let go"
    for n in names:
        assert "cannot unregister rseq" not in sluice.nf_log(n), sluice.nf_log(n)
    # a value it does not know is named, and the default (off) holds: the sink had no updates above
    assert 'SLUICE_NF_RSEQ="kep": expected keep or off; using off' in sluice.nf_log("sink")
    assert "SLUICE_NF_RSEQ" not in sluice.nf_log("b")
