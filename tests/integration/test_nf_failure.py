"""NF failure isolation: a killed or stuck NF only hurts its own chain, and nothing leaks.

  srcA (net_null rx) -> chain A = [fa] -> sinkA (net_null, TX only)
  srcB (net_null rx) -> chain B = [fb] -> sinkB (net_null, TX only)
"""

import os
import signal
import time

import pytest

from harness import base_config, sluice, wait_until, workdir  # noqa: F401


def two_chain_config():
    return base_config(
        ports=[{"name": "srcA", "vdev": "net_null0,size=64,copy=0", "chain": "A"},
               {"name": "srcB", "vdev": "net_null1,size=64,copy=0", "chain": "B"},
               {"name": "sinkA", "vdev": "net_null2"},
               {"name": "sinkB", "vdev": "net_null3"}],
        chains=[{"name": "A", "nfs": ["fa"], "exit": "sinkA"},
                {"name": "B", "nfs": ["fb"], "exit": "sinkB"}],
        nfs=["fa", "fb"])


def grows(sluice, getter, what, timeout=10.0):
    """Wait until getter(stats) increases past its current value; return the new value."""
    before = getter(sluice.stats())
    return wait_until(lambda: (lambda v: v if v > before else None)(getter(sluice.stats())), timeout,
                      f"{what} to grow past {before}")


def tx(port):
    return lambda st: next(p for p in st["ports"] if p["name"] == port)["tx_pkts"]


def stop_sources_and_check_pool(sluice):
    sluice.ok("port_chain_set", port="srcA", chain=None)
    sluice.ok("port_chain_set", port="srcB", chain=None)

    def drained():
        st = sluice.stats()
        pool = st["pool"]
        return pool if pool["free"] == pool["mbufs"] and pool["lent"] == 0 else None

    try:
        wait_until(drained, 5, "every mbuf back in the pool")
    except AssertionError:
        st = sluice.stats()
        raise AssertionError(f"mbuf leak: pool {st['pool']}, nfs {[(n['name'], n['lent']) for n in st['nfs']]}")


def test_kill9_nf_is_isolated_and_reclaimed(sluice):  # noqa: F811
    sluice.start(two_chain_config())
    pa = sluice.start_nf("fwd", "fa", wakeup="block", batch=32, timeout_us=100)
    sluice.start_nf("fwd", "fb", wakeup="block", batch=32, timeout_us=100)
    old_id = sluice.nf("fa")["id"]
    grows(sluice, tx("sinkA"), "sinkA tx")
    grows(sluice, tx("sinkB"), "sinkB tx")

    os.kill(pa.pid, signal.SIGKILL)
    pa.wait(5)
    sluice.wait_gone("fa", timeout=3)
    assert "nf fa detached" in sluice.log()
    st = sluice.stats()
    assert sluice.service("fa", st)["instances"] == []
    # chain A now drops at its first hop (nf_gone); chain B is untouched
    grows(sluice, lambda s: next(x for x in s["services"] if x["name"] == "fa")["drops"]["nf_gone"],
          "fa nf_gone drops")
    a_stalled = tx("sinkA")(sluice.stats())
    grows(sluice, tx("sinkB"), "sinkB tx after fa died")
    assert tx("sinkA")(sluice.stats()) == a_stalled, "chain A still delivers without its NF"
    assert sluice.nf("fb")["drops"]["invalid_desc"] == 0

    stop_sources_and_check_pool(sluice)

    # the same name attaches again (its slot and name are free), and chain A flows again
    sluice.start_nf("fwd", "fa", wakeup="block", batch=32, timeout_us=100)
    assert sluice.nf("fa")["id"] == old_id, "the freed NF slot was not reused"
    sluice.ok("port_chain_set", port="srcA", chain="A")
    sluice.ok("port_chain_set", port="srcB", chain="B")
    grows(sluice, tx("sinkA"), "sinkA tx after relaunch")
    grows(sluice, tx("sinkB"), "sinkB tx after relaunch")
    stop_sources_and_check_pool(sluice)
    assert sluice.ok("status")["nf_count"] == 2
    assert sluice.stop() == 0


def test_stuck_nf_drops_only_its_chain(sluice):  # noqa: F811
    sluice.start(two_chain_config())
    sluice.start_nf("fwd", "fa", wakeup="block", batch=32, timeout_us=100)
    pb = sluice.start_nf("fwd", "fb", wakeup="block", batch=32, timeout_us=100)
    grows(sluice, tx("sinkB"), "sinkB tx")

    ring_full = lambda st: next(n for n in st["nfs"] if n["name"] == "fb")["drops"]["ring_full"]  # noqa: E731
    os.kill(pb.pid, signal.SIGSTOP)
    try:
        # fb's ring (and lending budget) fills; then only chain B drops
        wait_until(lambda: sluice.nf("fb")["lent"] >= 1024 - 32, 10, "fb's ring to fill")
        grows(sluice, ring_full, "fb ring_full drops")
        b_stalled = tx("sinkB")(sluice.stats())
        grows(sluice, tx("sinkA"), "sinkA tx while fb is stopped")
        time.sleep(0.2)
        assert tx("sinkB")(sluice.stats()) == b_stalled, "chain B delivered while its NF was stopped"
        assert "fb" in sluice.attached(), "a stopped (not dead) NF must stay attached"
    finally:
        os.kill(pb.pid, signal.SIGCONT)
    grows(sluice, tx("sinkB"), "sinkB tx after SIGCONT")
    grows(sluice, lambda st: next(n for n in st["nfs"] if n["name"] == "fb")["tx_pkts"], "fb tx after SIGCONT")
    stop_sources_and_check_pool(sluice)
    assert sluice.stop() == 0
