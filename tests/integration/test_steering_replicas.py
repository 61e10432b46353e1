"""Services with several replicas: how flows and packets are spread, and what moves when replicas
come and go (docs/steering.md "Services and replicas"); and flows an NF pins (NF-directed steering).

  slt-rep [slt-r1] -- veth -- slt-r0 (host) = port "in" (net_af_packet), chain c = [s] -> "out" (net_null)
  traffic: bench/udpgen.c, paced, cycling through 1024 UDP flows
"""

import json
import sys

import pytest

from harness import REPO, base_config, net, sluice, wait_until, workdir  # noqa: F401

sys.path.insert(0, str(REPO / "bench"))
import peer_linux  # noqa: E402

NS = "slt-rep"
FLOWS = 1024  # udpgen's (sport, dport) cycle


@pytest.fixture
def rep(net, sluice):  # noqa: F811
    net.add_ns(NS)
    net.add_veth("slt-r0", "slt-r1", peer_ns=NS)
    gen = peer_linux.udpgen()

    def start(policy="flow", rules=None, services=("s",), steering=None):
        cfg = base_config(ports=[{"name": "in", "vdev": "net_af_packet0,iface=slt-r0,framecnt=4096", "chain": "c"},
                                 {"name": "out", "vdev": "net_null0"}],
                          chains=[{"name": "c", "nfs": list(services), "exit": "out"}])
        cfg["nfs"] = [{"name": s, "policy": policy} for s in services]
        if rules:
            cfg["rules"] = rules
        if steering:
            cfg["steering"] = steering
        sluice.start(cfg)

    def send(count, rate=20000):
        """count packets through the chain (flow i % 1024 for the i-th); waits until all came out."""
        before = sluice.port("out")["tx_pkts"]
        p = net.popen([gen, "--rate", rate, "--count", count, "--warmup", 0, "slt-r1", "02:00:00:00:00:02",
                       "02:00:00:00:00:01", "10.92.0.1", "10.92.0.2", 80, 60], ns=NS,
                      stdout=-1, stderr=-1)
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        res = json.loads(out.decode().strip().splitlines()[-1])
        assert res["sent"] == count and res["warmup_sent"] == 0, res
        wait_until(lambda: sluice.port("out")["tx_pkts"] - before >= count, 20, f"{count} packets out")
        wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")

    def no_drops():
        d = sluice.stats()["drops"]
        assert {k: v for k, v in d.items() if k != "no_path"} == dict.fromkeys(
            ["ring_full", "nf_gone", "invalid_desc", "tx_full", "rx_invalid", "rule", "malformed", "nf_detached", "no_buffer", "backpressure", "quota", "too_long"], 0), d

    return start, send, no_drops


def dumps(sluice, workdir, names):  # noqa: F811
    """Stop the count NFs and return {replica: {(sport, dport): pkts}}."""
    out = {}
    for n in names:
        assert sluice.stop_nf(n) == 0, sluice.nf_log(n)
        d = json.loads((workdir / f"{n}.json").read_text())
        out[n] = {(f["sport"], f["dport"]): f["pkts"] for f in d["flows"]}
    return out


def test_adding_a_replica_moves_about_one_nth_of_flows_and_only_to_it(rep, sluice, workdir):  # noqa: F811
    start, send, no_drops = rep
    start("flow")
    names = [f"s{i}" for i in range(4)]
    for n in names[:3]:
        sluice.start_nf("count", n, service="s", extra=["--dump", workdir / f"{n}.json"])
    sluice.wait_attached(*names[:3])
    send(FLOWS)          # round 1: every flow once, 3 replicas
    sluice.start_nf("count", names[3], service="s", extra=["--dump", workdir / f"{names[3]}.json"])
    sluice.wait_attached(names[3])
    send(2 * FLOWS)      # round 2: every flow twice, 4 replicas
    no_drops()
    d = dumps(sluice, workdir, names)
    where = {}
    for n, flows in d.items():
        for f, pkts in flows.items():
            where.setdefault(f, []).append((n, pkts))
    assert len(where) == FLOWS
    moved = [f for f, places in where.items() if len(places) > 1]
    for f in moved:  # 1 packet on an old replica in round 1, 2 on the new one in round 2
        assert sorted(p for _, p in where[f]) == [1, 2] and (names[3], 2) in where[f], where[f]
    stayed = [f for f, places in where.items() if len(places) == 1]
    assert all(places[0][1] == 3 and places[0][0] != names[3] for places in (where[f] for f in stayed))
    # rendezvous hashing: the newcomer takes about 1/4 of the flows, none moves between old replicas
    assert 0.15 * FLOWS <= len(moved) <= 0.35 * FLOWS, len(moved)


def test_least_loaded_sends_less_to_a_slowed_replica(rep, sluice):  # noqa: F811
    start, send, no_drops = rep
    start("least_loaded")
    sluice.start_nf("fwd", "fast", service="s")
    sluice.start_nf("fwd", "slow", service="s", extra=["--cost-ns", "300000"])  # at most ~3.3 kpps
    sluice.wait_attached("fast", "slow")
    shares = {}
    for policy in ("least_loaded", "flow"):
        sluice.ok("service_set", name="s", policy=policy)
        st0 = {n["name"]: n["rx_pkts"] for n in sluice.stats()["nfs"]}
        send(2000, rate=20000)  # above what the slow one can take at half the load
        st1 = {n["name"]: n["rx_pkts"] for n in sluice.stats()["nfs"]}
        shares[policy] = (st1["slow"] - st0["slow"]) / 2000
    no_drops()
    assert [s["policy"] for s in sluice.stats()["services"] if s["name"] == "s"] == ["flow"]
    # flow hashing ignores load (about half each); least-loaded steers around the slow replica
    assert 0.35 <= shares["flow"] <= 0.65, shares
    print("slow replica share", shares)
    assert shares["least_loaded"] < 0.4, shares  # ideal about 3.3k of 20k pps: 0.17


def test_round_robin_alternates_per_packet(rep, sluice):  # noqa: F811
    start, send, no_drops = rep
    start("round_robin")
    for n in ("a", "b"):
        sluice.start_nf("fwd", n, service="s")
    sluice.wait_attached("a", "b")
    send(1000)
    st = {n["name"]: n["rx_pkts"] for n in sluice.stats()["nfs"]}
    assert abs(st["a"] - st["b"]) <= 1 and st["a"] + st["b"] == 1000, st
    no_drops()


def test_a_drained_replica_gets_nothing_new_and_its_flows_move_without_loss(rep, sluice, workdir):  # noqa: F811
    start, send, no_drops = rep
    # a rule on in_port: the flow table pins each flow to its replica
    start("flow", rules=[{"match": {"in_port": "in", "proto": 17}, "action": {"chain": "c"}}])
    for n in ("a", "b"):
        sluice.start_nf("count", n, service="s", extra=["--dump", workdir / f"{n}.json"])
    sluice.wait_attached("a", "b")
    send(FLOWS)
    a_before = sluice.nf("a")["rx_pkts"]
    assert 0 < a_before < FLOWS
    sluice.ok("nf_drain", name="a")
    nf_a = sluice.nf("a")
    assert nf_a["draining"] is True and nf_a["queued"] == 0 and nf_a["lent"] == 0
    assert [s["instances"] for s in sluice.stats()["services"] if s["name"] == "s"] == [["b"]]
    send(FLOWS)
    assert sluice.nf("a")["rx_pkts"] == a_before      # nothing new for the drained replica
    fl = sluice.stats()["flows"]
    assert fl["entries"] == FLOWS and fl["full"] == 0, fl
    no_drops()
    d = dumps(sluice, workdir, ["a", "b"])
    assert sum(d["a"].values()) == a_before and sum(d["b"].values()) == 2 * FLOWS - a_before
    assert all(d["b"].get(f) == 1 for f in d["a"])     # a's flows went on at b, once each


def test_a_classifier_nf_pins_flows_so_later_packets_skip_it_until_they_expire(rep, sluice, workdir):  # noqa: F811
    """chain c = [cls (fwd --pin), cnt (count)]: cls sees each flow's first packet only; once the flows
    are idle past flow_idle_ms their entries expire and cls sees the next packet of each again."""
    start, send, no_drops = rep
    start(services=("cls", "cnt"), steering={"flows": 4096, "flow_idle_ms": 400})
    sluice.start_nf("fwd", "cls", extra=["--pin"])
    sluice.start_nf("count", "cnt", extra=["--dump", workdir / "cnt.json"])
    sluice.wait_attached("cls", "cnt")
    send(3 * FLOWS, rate=5000)   # each flow 3 times, 1024 packets (0.2 s) apart
    st = sluice.stats()
    assert sluice.nf("cls", st)["rx_pkts"] == FLOWS, sluice.nf("cls", st)
    assert sluice.nf("cnt", st)["rx_pkts"] == 3 * FLOWS
    fl = st["flows"]
    assert fl["pinned"] == FLOWS and fl["pins"] == FLOWS and fl["pin_ignored"] == 0, fl
    assert fl["hits"] == 2 * FLOWS, fl
    wait_until(lambda: sluice.ok("flows")["flows"]["entries"] == 0, 5, "pinned flows expired")
    assert sluice.ok("flows")["flows"]["pinned"] == 0
    send(FLOWS, rate=5000)
    st = sluice.stats()
    assert sluice.nf("cls", st)["rx_pkts"] == 2 * FLOWS
    assert sluice.nf("cnt", st)["rx_pkts"] == 4 * FLOWS
    no_drops()
    d = dumps(sluice, workdir, ["cnt"])["cnt"]
    assert len(d) == FLOWS and set(d.values()) == {4}
