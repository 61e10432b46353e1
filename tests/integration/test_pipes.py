"""NF-to-NF pipes (docs/architecture.md "Pipes", docs/abi.md "Pipes"): with sluiced.pipes on, an NF
whose next hop is static hands its plain NEXT descriptors straight to the next NF; the worker only
accounts them. These tests check what comes out (byte for byte, in order, nothing lost or doubled),
that the pipes were really used (stats.pipes and the per-NF counts), and that a pipe broken under
traffic -- a chain edit, a replica added, SIGKILL of either NF -- loses only what a killed NF held,
counted, with the pool whole after (pool_audit).
"""

import json
import signal
import time

import pytest

from harness import TEST_WORKERS, base_config, sluice, wait_until, workdir, write_pcap  # noqa: F401
from test_pcap_chain import N, make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")

CHAIN4 = ["a", "b", "c", "d"]


@pytest.mark.parametrize("wakeup", ["poll", "block", "adaptive"])
def test_pcap_through_four_nf_pipes(sluice, workdir, wakeup):  # noqa: F811
    _, raws = make_packets()
    inp, out, dump = workdir / "in.pcap", workdir / "out.pcap", workdir / "count.json"
    write_pcap(inp, raws)
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}],
        chains=[{"name": "c", "nfs": CHAIN4, "exit": "out"}],
        nfs=CHAIN4, ring_size=2048, pipes=True)
    sluice.start(cfg)
    kw = {"wakeup": wakeup}
    if wakeup != "poll":
        kw.update(batch=8, timeout_us=200)
    sluice.start_nf("fwd", "a", **kw)
    sluice.start_nf("count", "b", extra=["--dump", dump], **kw)
    sluice.start_nf("fwd", "c", **kw)
    sluice.start_nf("fwd", "d", **kw)
    wait_until(lambda: sluice.stats()["pipes"]["open"] == 3, 10, "3 pipes open (a->b->c->d)")
    sluice.ok("port_chain_set", port="in", chain="c")

    total = sum(map(len, raws))
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= N, 30, f"{N} packets out")
    st = sluice.stats()
    assert st["pipes"]["enabled"] is True and st["pipes"]["open"] == 3, st["pipes"]
    # a -> b, b -> c, c -> d went by pipe: 3 hops per packet, none through the worker
    assert st["pipes"]["packets"] == 3 * N, st["pipes"]
    for name in CHAIN4:  # every hop is still counted, as without pipes
        nf = sluice.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N and nf["rx_bytes"] == total, nf
        assert nf["drops"] == {"ring_full": 0, "invalid_desc": 0}, nf
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    sluice.wait_pool_whole()

    assert sluice.stop_nf("b") == 0, sluice.nf_log("b")
    stop_and_expect_pcap(sluice, out, raws)
    d = json.loads(dump.read_text())
    assert d["total_pkts"] == N and d["total_bytes"] == total


# ---- pipes broken under traffic --------------------------------------------------------------
#
#   src (net_null: the buffer supply) -> gen -> f1 -> f2 -> f3 -> sink      (pipes between all five)
#
# gen stamps N packets with sequence numbers at RATE; sink (--action drop) counts them per generator:
# received, lost, duplicates, reordered. Something breaks one pipe while they flow; afterwards every
# packet gen made is either received exactly once or counted in a drop reason that names why.

GEN_N = 150000
RATE = 100000
PIPED = ["gen", "f1", "f2", "f3", "sink"]


def start_piped_chain(sluice, workdir, form="processes"):
    """form "group": f1, f2 and f3 are members of one sluice-group, which runs f1 -> f2 -> f3 by calls
    (fused pipes, docs/groups.md); gen and sink stay processes."""
    gen_dump, sink_dump = workdir / "gen.json", workdir / "sink.json"
    cfg = base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"}, {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": PIPED, "exit": "out"}],
        nfs=PIPED, ring_size=4096, pool_mbufs=65536, pipes=True)
    sluice.start(cfg)
    sluice.start_nf("gen", "gen", wakeup="poll",
                    extra=["--rate-pps", RATE, "--count", GEN_N, "--size", 128, "--dump", gen_dump])
    if form == "group":
        sluice.start_group("fs", [("fwd", name, None, []) for name in ("f1", "f2", "f3")], wakeup="block")
    else:
        for name in ("f1", "f2", "f3"):
            sluice.start_nf("fwd", name, wakeup="block")
    sluice.start_nf("sink", "sink", wakeup="block", extra=["--dump", sink_dump])
    wait_until(lambda: sluice.stats()["pipes"]["open"] == 4, 10, "4 pipes open")
    sluice.ok("port_chain_set", port="src", chain="c")
    return gen_dump, sink_dump


def gen_done(sluice, timeout=60.0):
    """Wait until the chain is quiet: the sink's count and the pipes' stop moving for 2 s (gen
    stops after GEN_N; the supply keeps overflowing gen's RX ring, so drops.ring_full never stops)."""
    deadline = time.monotonic() + timeout
    last, still = None, 0
    while time.monotonic() < deadline:
        st = sluice.stats()
        seen = (st["pipes"]["packets"], st["drops"]["nf_gone"],
                sum(n["rx_pkts"] for n in st["nfs"] if n["name"] == "sink"))
        still = still + 1 if seen == last else 0
        if still >= 10:
            return st
        last = seen
        time.sleep(0.2)
    raise AssertionError(f"traffic did not settle in {timeout}s: {last}")


def finish(sluice, gen_dump, sink_dump, alive):
    """Stop the supply and the NFs (each writes its dump), check the pool; returns gen, sink, stats."""
    st = gen_done(sluice)
    sluice.ok("port_chain_set", port="src", chain=None)
    for name in alive:
        assert sluice.stop_nf(name) == 0, sluice.nf_log(name)
    sluice.wait_pool_whole()
    g = json.loads(gen_dump.read_text())
    s = json.loads(sink_dump.read_text())
    assert g["generated"] == GEN_N, (g, {k: st[k] for k in ("drops", "pipes", "active_set")},
                                     [(n["name"], n["rx_pkts"], n["tx_pkts"], n["lent"], n["drops"]) for n in st["nfs"]])
    return g, s, st


def chain_drops(st):
    """sluiced's drops, except what only the supply can lose: packets overflowing gen's RX ring (gen's own
    ring_full), and packets dropped at the chain's entry while a later service is saturated
    (backpressure: it acts at a port's first hop only, where the supply enters -- gen's own packets
    start at gen and never pass it; a loaded host makes a block-mode NF late enough to saturate)."""
    d = dict(st["drops"])
    # counted per NF too; the totals are read a moment apart while the supply keeps overflowing
    d["ring_full"] = sum(n["drops"]["ring_full"] for n in st["nfs"] if n["name"] != "gen")
    d.pop("backpressure", None)
    return d


def sink_gen0(s):
    [g0] = [x for x in s["generators"] if x["id"] == 0]
    return g0


# the group form's fused segments live inside one NF process: the two-worker pass (make test) adds
# nothing to them, and leaves them out to keep make test under its 20 minutes
FORMS = ["processes"] + (["group"] if TEST_WORKERS == 1 else [])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("event", ["chain_edit", "replica_added"])
def test_pipe_broken_at_runtime_loses_nothing(sluice, workdir, event, form):  # noqa: F811
    gen_dump, sink_dump = start_piped_chain(sluice, workdir, form)
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > GEN_N // 5, 30, "traffic through the pipes")
    before = sluice.stats()["pipes"]
    if event == "chain_edit":
        # a second chain where f2 goes on to sink: f2's next hop is no longer one service, so the
        # pipe f2 -> f3 closes and the worker carries that edge again
        sluice.ok("chain_set", name="side", nfs=["f2", "sink"])
        wait_until(lambda: sluice.stats()["pipes"]["closed"] == before["closed"] + 1, 5, "pipe f2->f3 closed")
        assert sluice.stats()["pipes"]["open"] == 3
        alive = PIPED
    else:
        # a second replica of f2: its upstream's next hop is no longer one NF, so f1 -> f2 closes
        sluice.start_nf("fwd", "f2b", service="f2", wakeup="block")
        wait_until(lambda: sluice.stats()["pipes"]["closed"] >= before["closed"] + 1, 5, "pipe f1->f2 closed")
        alive = PIPED + ["f2b"]
    g, s, st = finish(sluice, gen_dump, sink_dump, alive)
    g0 = sink_gen0(s)
    d = chain_drops(st)
    ctx = f"\nsink: {g0}\ndrops: {d}\npipes: {st['pipes']}"
    assert all(v == 0 for v in d.values()), ctx
    assert st["pipes"]["close_timeouts"] == 0, ctx
    assert s["received"] == GEN_N and g0["lost"] == 0 and g0["duplicates"] == 0, ctx
    if event == "chain_edit":  # one path all along: in order too
        assert g0["reordered"] == 0, ctx
    assert st["pipes"]["packets"] > before["packets"], ctx
    nfs = {n["name"]: n for n in st["nfs"]}
    if form == "group":  # the segment ran by calls before and after the break
        assert st["pipes"]["fused"] > 0, ctx
    # every member's count is exact across the break: what one passed on, the next took
    assert nfs["sink"]["rx_pkts"] == GEN_N, ctx  # (gen's tx_pkts count the supply it drops too)
    f2 = [nfs[n] for n in nfs if n in ("f2", "f2b")]
    assert nfs["f1"]["rx_pkts"] == nfs["f1"]["tx_pkts"] == sum(n["rx_pkts"] for n in f2) == GEN_N, ctx
    assert sum(n["tx_pkts"] for n in f2) == GEN_N, ctx


@pytest.mark.parametrize("victim", ["f1", "f2", "f3"])
def test_pipe_end_killed_loses_only_what_it_held(sluice, workdir, victim):  # noqa: F811
    gen_dump, sink_dump = start_piped_chain(sluice, workdir)
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > GEN_N // 5, 30, "traffic through the pipes")
    p = sluice.nfs[victim]
    p.send_signal(signal.SIGKILL)
    p.wait(5)
    sluice.wait_gone(victim, timeout=5)
    st = sluice.stats()
    assert st["pipes"]["open"] == 2, st["pipes"]  # the two pipes at the victim closed
    alive = [n for n in PIPED if n != victim]
    g, s, st = finish(sluice, gen_dump, sink_dump, alive)
    g0 = sink_gen0(s)
    d = chain_drops(st)
    ctx = f"\nsink: {g0} received {s['received']}\ndrops: {d}\npipes: {st['pipes']}"
    # what the victim held is counted (nf_detached), and so is what reached its empty service later
    assert d["nf_detached"] + d["nf_gone"] > 0, ctx
    assert all(v == 0 for k, v in d.items() if k not in ("nf_detached", "nf_gone")), ctx
    assert s["received"] + d["nf_detached"] + d["nf_gone"] == GEN_N, ctx
    assert g0["duplicates"] == 0 and st["pipes"]["close_timeouts"] == 0, ctx
