"""sluiced.nf_sched: fifo (docs/architecture.md "NFs sharing a core"): NFs that sluiced trusts with a
core -- processes of the default domain pinned off the worker cores -- run SCHED_FIFO (children
fair-scheduled), queued in chain order; every other NF stays as it was and the log says why. The
chain still delivers every byte in order, and an NF that detaches alive is fair-scheduled again.
"""

import os
import signal

import pytest

from harness import base_config, sluice, wait_until, workdir, write_pcap  # noqa: F401
from test_pcap_chain import N, make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")

CHAIN = ["a", "b", "c"]
NF_CPU = {0}  # the worker is on lcore 1 ("lcores": "0,1")
WORKER_CPU = {1}


def policy(pid):
    return os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK


def threads(pid):
    """{tid: (name, CPUs)} of pid's threads."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                out[int(t)] = (f.read().strip(), os.sched_getaffinity(int(t)))
        except (FileNotFoundError, ProcessLookupError):
            pass  # ended meanwhile
    return out


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
    # sluiced's main lcore is on CPU 0 too ("lcores": "0,1"): its control thread stepped aside
    assert "fifo NFs may keep CPU 0 busy, where sluiced's control thread (main lcore) runs" in log, log
    assert os.sched_getaffinity(sluice.pid) == WORKER_CPU

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


def test_control_thread_steps_aside_from_fifo_nfs(sluice, workdir):  # noqa: F811
    """While fifo NFs may run on the main lcore's CPU, sluiced's fair-scheduled threads there (the
    control thread, DPDK's interrupt thread) move to the worker's CPU, where the NFs cannot starve
    them; once the last such NF detaches they go back, and an NF elsewhere moves nothing."""
    cfg = base_config(ports=[{"name": "p0", "vdev": "net_null0"}], chains=[], nfs=["a", "b", "off"],
                      nf_sched="fifo")
    sluice.start(cfg)
    before = threads(sluice.pid)
    on_nf_cpu = {t for t, (_, cpus) in before.items() if cpus & NF_CPU}
    assert sluice.pid in on_nf_cpu, before  # the main lcore's thread: the control loop
    assert any(name.startswith("eal-intr") for t, (name, _) in before.items() if t in on_nf_cpu), before
    helper = next(t for t, (name, _) in before.items() if name == "sluiced-order")

    kw = {"wakeup": "adaptive", "batch": 8, "timeout_us": 200}
    procs = {n: sluice.start_nf("fwd", n, cpus=NF_CPU, **kw) for n in ("a", "b")}
    assert all(policy(p.pid) == os.SCHED_FIFO for p in procs.values())
    moved = threads(sluice.pid)
    for t in on_nf_cpu - {helper}:
        assert moved[t][1] == WORKER_CPU, (moved[t], before[t])
    log = sluice.log()
    assert log.count("where sluiced's control thread (main lcore) runs") == 1, log  # once, at the first
    assert sluice.ok("status")["nf_count"] == 2  # the control thread answers from its new CPU
    st = sluice.stats()["nf_sched"]
    assert st["threads_aside"] == len(on_nf_cpu - {helper}) and st["aside_from"] == "0", st

    # one of two gone: the other still runs there, so they stay aside
    assert sluice.stop_nf("a") == 0
    sluice.wait_gone("a")
    assert os.sched_getaffinity(sluice.pid) == WORKER_CPU
    # the last gone: back home, and it says so
    assert sluice.stop_nf("b") == 0
    sluice.wait_gone("b")
    back = threads(sluice.pid)
    for t in on_nf_cpu - {helper}:
        if t in back:
            assert back[t][1] == before[t][1], (back[t], before[t])
    assert "no fifo NF left on CPU 0: sluiced's" in sluice.log()
    st = sluice.stats()["nf_sched"]
    assert st["threads_aside"] == 0 and st["aside_from"] == "", st

    # an NF that is not made fifo (this one may run on the worker's CPU) moves nothing
    off = sluice.start_nf("fwd", "off", cpus=WORKER_CPU, **kw)
    assert policy(off.pid) == os.SCHED_OTHER
    assert os.sched_getaffinity(sluice.pid) == before[sluice.pid][1]
