"""NF groups at the host level (docs/groups.md): sluice-group runs NFs as members of one process,
each attached to sluiced as an NF of its own. Against a bare sluiced (the harness), no supervisor:

- gen -> f1 -> f2 -> sink with the NFs after gen, all four, or gen+f1 and sink as two groups with a
  process between them: every packet arrives, in order, exactly once; each member is listed as an NF
  with its group's pid and exact rx/tx;
- two members of one plugin keep their own state (their own counters);
- SIGKILL of a group under traffic: sluiced reclaims every buffer its members held, a chain of
  process NFs beside it goes on untouched;
- 2000 members in one group (Cerrato's scenario at this host's size): all attach, each receives
  exactly its flows, `stats` lists 2000 NFs; the idle member's memory is printed ("density:").

The supervisor's side (groups in the config, restarts) is tests/integration/test_group.py.
No timing is asserted.
"""

import json
import os
import signal
import sys
import time

import pytest

from harness import GROUP_BIN, REPO, base_config, net, sluice, wait_until, workdir  # noqa: F401
from test_density import PAIRS, rss_kib, smaps
from test_density import config as density_config
from test_gen_sink import wait_sink

sys.path.insert(0, str(REPO / "bench"))
import peer_linux  # noqa: E402  (compiles bench/udpgen.c once per process)

N = 50000
RATE = 100000
SIZE = 128


def need_group():
    if not GROUP_BIN.exists():
        pytest.skip(f"not built: {GROUP_BIN}")


def gen_chain_config(chains, ring_size=4096):
    ports, cfg_chains, nfs = [], [], []
    for i, (gen, mid, sink) in enumerate(chains):
        ports += [{"name": f"src{i}", "vdev": f"net_null{2 * i},size=64,copy=0"},
                  {"name": f"out{i}", "vdev": f"net_null{2 * i + 1}"}]
        cfg_chains.append({"name": f"c{i}", "nfs": [gen, *mid, sink], "exit": f"out{i}"})
        nfs += [gen, *mid, sink]
    return base_config(ports=ports, chains=cfg_chains, nfs=nfs, ring_size=ring_size, pool_mbufs=65536)


def sink_dump_ok(path, n):
    s = json.loads(path.read_text())
    assert s["received"] == n and s["unstamped"] == 0, s
    assert s["generators"] == [{"id": 0, "received": n, "max_seq": n - 1, "lost": 0, "reordered": 0,
                                "duplicates": 0}], s["generators"]
    return s


# Layouts of gen -> f1 -> f2 -> sink: which NFs run as members of which group (the rest as processes)
LAYOUTS = {
    "gen+group(f1,f2,sink)": [["f1", "f2", "sink"]],
    "group(gen,f1,f2,sink)": [["gen", "f1", "f2", "sink"]],
    "group(gen,f1)+f2+group(sink)": [["gen", "f1"], ["sink"]],  # mixed: group, process, group
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_members_are_nfs_and_lose_nothing(sluice, workdir, layout):  # noqa: F811
    need_group()
    gen_dump, sink_dump = workdir / "gen.json", workdir / "sink.json"
    sluice.start(gen_chain_config([("gen", ["f1", "f2"], "sink")]))
    spec = {"gen": ("gen", ["--rate-pps", RATE, "--count", N, "--size", SIZE, "--dump", gen_dump]),
            "f1": ("fwd", []), "f2": ("fwd", []), "sink": ("sink", ["--dump", sink_dump])}
    groups = LAYOUTS[layout]
    grouped = {m for g in groups for m in g}
    procs = {}
    for name in ("sink", "f2", "f1", "gen"):  # the supply's chain is off until every NF is attached
        if name not in grouped:
            procs[name] = sluice.start_nf(spec[name][0], name, wakeup="block" if name != "gen" else "poll",
                                          extra=spec[name][1])
    for k, members in enumerate(groups):
        wake = "poll" if "gen" in members else "block"  # gen always has work: it never sleeps
        g = sluice.start_group(f"g{k}", [(spec[m][0], m, None, spec[m][1]) for m in members], wakeup=wake)
        procs |= {m: g for m in members}
    sluice.ok("port_chain_set", port="src0", chain="c0")
    wait_sink(sluice, N)
    sluice.ok("port_chain_set", port="src0", chain=None)

    st = sluice.stats()
    nfs = {n["name"]: n for n in st["nfs"]}
    assert {m: nfs[m]["pid"] for m in spec} == {m: procs[m].pid for m in spec}
    for m in ("f1", "f2"):
        assert nfs[m]["rx_pkts"] == nfs[m]["tx_pkts"] == N and nfs[m]["drops"]["ring_full"] == 0, nfs[m]
    assert nfs["sink"]["rx_pkts"] == N, nfs["sink"]
    assert sluice.port("out0", st)["tx_pkts"] == 0
    # SIGTERM to each group: every member detaches, writes its dump and prints its summary line
    for k, members in enumerate(groups):
        assert sluice.stop_nf(f"g{k}") == 0, sluice.nf_log(f"g{k}")
        log = sluice.nf_log(f"g{k}")
        for m in members:
            assert f"sluice-nf-{spec[m][0]}: name={m} " in log, log[-2000:]
    for m in spec.keys() - grouped:
        assert sluice.stop_nf(m) == 0, sluice.nf_log(m)
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")
    assert json.loads(gen_dump.read_text())["generated"] == N
    sink_dump_ok(sink_dump, N)
    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()


def test_two_members_of_one_plugin_keep_their_own_state(sluice, workdir):  # noqa: F811
    """gen -> count a -> count b -> sink, a and b one plugin in one group: each counts N packets
    (a state shared between them would count 2N in one, or mix their flow tables)."""
    need_group()
    cfg = gen_chain_config([("gen", ["ca", "cb"], "sink")])
    sluice.start(cfg)
    sluice.start_nf("gen", "gen", wakeup="poll", extra=["--rate-pps", RATE, "--count", N, "--size", SIZE])
    sluice.start_group("g", [("count", "ca", None, []), ("count", "cb", None, []),
                             ("sink", "sink", None, [])], wakeup="block")
    sluice.ok("port_chain_set", port="src0", chain="c0")
    wait_sink(sluice, N)
    sluice.ok("port_chain_set", port="src0", chain=None)
    st = sluice.stats()
    nfs = {n["name"]: n for n in st["nfs"]}
    for m in ("ca", "cb"):
        assert nfs[m]["rx_pkts"] == nfs[m]["tx_pkts"] == N, nfs[m]
    # the NFs' own (the SDK's sdk.* count batches and time, which differ between members)
    ca, cb = ({k: v for k, v in nfs[m]["counters"].items() if not k.startswith("sdk.")} for m in ("ca", "cb"))
    assert ca and ca == cb, (ca, cb)  # the same packets seen by two instances: equal, not doubled
    assert sluice.stop_nf("g") == 0 and sluice.stop_nf("gen") == 0
    assert sluice.stop() == 0, sluice.log()


def test_sigkill_of_a_group_under_traffic(sluice, workdir):  # noqa: F811
    """Chain 0 runs through a group, chain 1 through processes. SIGKILL of the group while packets
    flow: sluiced takes back every buffer the members held (pool whole once the supply stops), and
    chain 1 goes on carrying traffic."""
    need_group()
    sluice.start(gen_chain_config([("gen0", ["fwd0"], "sink0"), ("gen1", ["fwd1"], "sink1")], ring_size=1024))
    for i in (0, 1):
        sluice.start_nf("gen", f"gen{i}", wakeup="block", extra=["--rate-pps", 20000, "--size", SIZE])
    group = sluice.start_group("g", [("fwd", "fwd0", None, []), ("sink", "sink0", None, [])], wakeup="block")
    sluice.start_nf("fwd", "fwd1", wakeup="block")
    sluice.start_nf("sink", "sink1", wakeup="block")
    for i in (0, 1):
        sluice.ok("port_chain_set", port=f"src{i}", chain=f"c{i}")
    wait_until(lambda: sluice.nf("sink0")["rx_pkts"] > 2000 and sluice.nf("sink1")["rx_pkts"] > 2000, 30,
               "traffic through both chains")
    os.kill(group.pid, signal.SIGKILL)
    assert group.wait(10) == -signal.SIGKILL
    wait_until(lambda: not {"fwd0", "sink0"} & sluice.attached(), 10, "the members detached")
    before = sluice.nf("sink1")["rx_pkts"]
    wait_until(lambda: sluice.nf("sink1")["rx_pkts"] > before + 2000, 30, "chain 1 still carrying traffic")
    for i in (0, 1):
        sluice.ok("port_chain_set", port=f"src{i}", chain=None)
    for n in ("gen0", "gen1", "fwd1", "sink1"):
        assert sluice.stop_nf(n) == 0, sluice.nf_log(n)
    st = wait_until(lambda: (lambda s: s if s["pool"]["lent"] == 0 else None)(sluice.stats()), 10,
                    "every buffer back in the pool")
    assert st["pool"]["free"] == st["pool"]["mbufs"], st["pool"]
    assert st["drops"]["invalid_desc"] == 0
    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()


# ---- 2000 members in one group ----

NS, HOST, PEER = "slt-gda", "slt-gd0", "slt-gd1"
CHAINS = 1000
MEMBERS = 2 * CHAINS


def test_2000_members_in_one_group_each_get_exactly_their_flows(net, sluice, workdir):  # noqa: F811
    need_group()
    net.add_ns(NS)
    net.add_veth(HOST, PEER, peer_ns=NS)
    cfg, names = density_config(chains=CHAINS, host=HOST, max_nfs=MEMBERS + 8, ring_size=64)
    sluice.start(cfg)
    mbufs = sluice.ok("status")["mbufs"]
    t0 = time.monotonic()
    group = sluice.start_group("tiny", [("fwd", n, None, []) for n in names], wakeup="block", wait=False)
    wait_until(lambda: group.poll() is not None or sluice.ok("status")["nf_count"] == MEMBERS, 180,
               f"{MEMBERS} members attached")
    assert group.poll() is None, sluice.nf_log("tiny")[-2000:]
    attach_s = time.monotonic() - t0
    st = sluice.stats()
    assert len(st["nfs"]) == MEMBERS and {n["pid"] for n in st["nfs"]} == {group.pid}
    rss, m = rss_kib(group.pid), smaps(group.pid)
    private = m["Private_Clean"] + m["Private_Dirty"]
    print(f"\ndensity: {MEMBERS} members of one group attached in {attach_s:.1f} s; the group's RSS "
          f"{rss} KiB ({rss / MEMBERS:.1f} KiB per member), private {private} KiB ({private / MEMBERS:.1f} KiB "
          f"per member; the rest is shared memory: rings, info pages, packets touched)")

    count = 4 * PAIRS
    gen = peer_linux.udpgen()
    out = workdir / "udpgen.json"
    p = net.popen([gen, "--rate", 4096, "--count", count, "--warmup", 0, PEER, "02:00:00:00:00:02",
                   "02:00:00:00:00:01", "10.93.0.1", "10.93.0.2", 80, 120], ns=NS,
                  stdout=open(out, "wb"), stderr=open(workdir / "udpgen.err", "wb"))
    assert p.wait(150) == 0, (workdir / "udpgen.err").read_text()
    res = json.loads(out.read_text().strip().splitlines()[-1])
    assert res["sent"] == count and res["first_hop_drops"] == 0, res
    per = [0] * CHAINS
    for q in range(PAIRS):
        per[q % CHAINS] += count // PAIRS

    def settled():
        s = sluice.stats()
        return s if sluice.port("out", s)["tx_pkts"] >= count and s["pool"]["lent"] == 0 else None
    last = {}
    try:
        st = wait_until(lambda: last.update(s=settled()) or last["s"], 60, f"{count} packets out")
    except AssertionError:
        s = sluice.stats()
        raise AssertionError(f"out {sluice.port('out', s)['tx_pkts']} of {count}; drops "
                             f"{ {k: v for k, v in s['drops'].items() if v} }") from None
    nfs = {n["name"]: n for n in st["nfs"]}
    wrong = {n: (nfs[n]["rx_pkts"], nfs[n]["tx_pkts"], per[int(n[1:])]) for n in names
             if not nfs[n]["rx_pkts"] == nfs[n]["tx_pkts"] == per[int(n[1:])]}
    assert not wrong, f"members whose rx/tx differ from their flows': {dict(list(wrong.items())[:10])}"
    t0 = time.monotonic()
    assert sluice.stop_nf("tiny", timeout=60) == 0, sluice.nf_log("tiny")[-2000:]
    sluice.wait_nf_count(0, timeout=30)
    print(f"density: {MEMBERS} members detached in {time.monotonic() - t0:.1f} s (SIGTERM to the group)")
    assert sluice.stats()["pool"] == {"mbufs": mbufs, "free": mbufs, "lent": 0}

    # again, and SIGKILL: every member's connection ends at once; sluiced takes them all out (with
    # pipes on, without waiting for readers that died with the same process) and stays responsive
    group = sluice.start_group("tiny2", [("fwd", n, None, []) for n in names], wakeup="block", wait=False)
    wait_until(lambda: group.poll() is not None or sluice.ok("status")["nf_count"] == MEMBERS, 180,
               f"{MEMBERS} members attached again")
    t0 = time.monotonic()
    os.kill(group.pid, signal.SIGKILL)
    assert group.wait(10) == -signal.SIGKILL
    sluice.wait_nf_count(0, timeout=30)
    print(f"density: {MEMBERS} members of a killed group taken out in {time.monotonic() - t0:.1f} s")
    assert sluice.stats()["pool"] == {"mbufs": mbufs, "free": mbufs, "lent": 0}
    assert sluice.stop() == 0, sluice.log()
