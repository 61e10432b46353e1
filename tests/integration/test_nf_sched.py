"""sluiced.nf_sched: fifo (docs/architecture.md "NFs sharing a core"): NFs that sluiced trusts with a
core -- processes of the default domain pinned off the worker cores -- run SCHED_FIFO (children
fair-scheduled), queued in chain order; every other NF stays as it was and the log says why. The
chain still delivers every byte in order, and an NF that detaches alive is fair-scheduled again.
"""

import collections
import os
import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import base_config, sluice, wait_until, workdir, write_pcap  # noqa: F401
from test_pcap_chain import N, make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")

CHAIN = ["a", "b", "c"]
NF_CPU = {0}  # the worker is on lcore 1 ("lcores": "0,1")


def policy(pid):
    return os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK


def test_fifo_chain_on_one_core(sluice, workdir):  # noqa: F811
    _, raws = make_packets()
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, raws)
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}],
        chains=[{"name": "c", "nfs": CHAIN, "exit": "out"}],
        nfs=CHAIN + ["loose", "jailed"], ring_size=2048, nf_sched="fifo")
    cfg["domains"] = [{"name": "jail", "pool_mbufs": 4096}]
    cfg["nfs"][-1]["domain"] = "jail"
    sluice.start(cfg)
    if int(open("/proc/sys/kernel/sched_rt_runtime_us").read()) >= 0:
        assert "kernel.sched_rt_runtime_us" in sluice.log()
    # adaptive: asleep when idle, so sluiced's main lcore (also CPU 0) gets its turns
    kw = {"wakeup": "adaptive", "batch": 8, "timeout_us": 200}
    procs = {n: sluice.start_nf("fwd", n, cpus=NF_CPU, **kw) for n in reversed(CHAIN)}
    loose = sluice.start_nf("fwd", "loose", **kw)
    jailed = sluice.start_nf("fwd", "jailed", cpus=NF_CPU, **kw)

    st = sluice.stats()
    for n, p in procs.items():
        assert policy(p.pid) == os.SCHED_FIFO, n
        assert os.sched_getscheduler(p.pid) & os.SCHED_RESET_ON_FORK, n
        assert sluice.nf(n, st)["sched"] == "fifo"
    for n, p in (("loose", loose), ("jailed", jailed)):
        assert policy(p.pid) == os.SCHED_OTHER, n
        assert sluice.nf(n, st)["sched"] == "other"
    log = sluice.log()
    assert "nf loose: stays other, not SCHED_FIFO (sluiced.nf_sched): it may run on CPU 1, worker 0's" in log
    assert "nf jailed: stays other, not SCHED_FIFO (sluiced.nf_sched): it is in domain jail" in log

    sluice.ok("port_chain_set", port="in", chain="c")
    total = sum(map(len, raws))
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= N, 30, f"{N} packets out")
    st = sluice.stats()
    for n in CHAIN:
        nf = sluice.nf(n, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N and nf["rx_bytes"] == total, nf
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    sluice.wait_pool_whole()

    # SIGKILL of one: gone, nothing to undo; the others keep their turns
    procs["b"].send_signal(signal.SIGKILL)
    procs["b"].wait()
    wait_until(lambda: "b" not in [x["name"] for x in sluice.stats()["nfs"]], 10, "b detached")
    assert policy(procs["a"].pid) == os.SCHED_FIFO and policy(procs["c"].pid) == os.SCHED_FIFO
    # an NF that outlives its attachment is fair again (the twin of the attach step): sluiced
    # detaches every NF when it stops, while a is stopped and cannot exit
    procs["a"].send_signal(signal.SIGSTOP)
    try:
        stop_and_expect_pcap(sluice, out, raws)
        assert policy(procs["a"].pid) == os.SCHED_OTHER
    finally:
        procs["a"].send_signal(signal.SIGCONT)


TRACEFS = Path("/sys/kernel/tracing")


@contextmanager
def switch_trace(cpu):
    """A private tracefs instance recording sched_switch on `cpu`; yields a function that returns
    the next_pid of every switch recorded so far. The instance goes, whatever happens."""
    if not (TRACEFS / "instances").is_dir():
        pytest.skip(f"no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS})")
    inst = TRACEFS / "instances" / f"sluice-test-{os.getpid()}"
    inst.mkdir()
    try:
        (inst / "buffer_size_kb").write_text("16384")
        (inst / "tracing_cpumask").write_text(f"{1 << cpu:x}")
        (inst / "events/sched/sched_switch/enable").write_text("1")

        def pids():
            (inst / "tracing_on").write_text("0")
            text = (inst / "trace").read_text()
            return [int(m) for m in re.findall(r"next_pid=(\d+)", text)]
        (inst / "tracing_on").write_text("1")
        yield pids
    finally:
        (inst / "tracing_on").write_text("0")
        (inst / "events/sched/sched_switch/enable").write_text("0")
        inst.rmdir()


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
        nfs=names, ring_size=4096, pool_mbufs=32768, nf_sched="fifo")
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
