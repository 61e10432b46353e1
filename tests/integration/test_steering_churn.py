"""1000 rule and chain changes under continuous traffic: nothing lost, every flow stays on one replica.

  slt-chg [slt-g1] -- veth -- slt-g0 (host) = port "in" (net_af_packet)
  udpgen (bench/udpgen.c, paced, 1024 UDP flows) -> in -> rule: chain c -> service s (2 count
  replicas) -> port "out" (net_null, discards)

While the generator runs, the test changes the rules and the chain 1000 times (rule_add, rule_del,
rules_set with the steering rule re-created under a new id, chain_set). Afterwards every counted packet
went out, no drop counter moved, and each flow appears in exactly one replica's flow dump.
"""

import json
import signal
import sys

from harness import REPO, base_config, net, sluice, wait_until, workdir  # noqa: F401

sys.path.insert(0, str(REPO / "bench"))
import peer_linux  # noqa: E402

NS = "slt-chg"
RATE = 20000
COUNT = RATE * 600  # a cap only: the test stops the generator once the changes are done
STEER = {"name": "to-c", "priority": 10, "match": {"in_port": "in", "proto": 17, "dst": "10.91.0.2/32"},
         "action": {"chain": "c"}}


def noise(i):
    return {"priority": i % 50, "match": {"dst": f"192.0.2.{i % 250}/32"}, "action": "drop"}


def test_thousand_changes_under_traffic_lose_nothing_and_keep_flows_on_their_replica(net, sluice, workdir):  # noqa: F811
    gen = peer_linux.udpgen()
    net.add_ns(NS)
    net.add_veth("slt-g0", "slt-g1", peer_ns=NS)
    dumps = {n: workdir / f"{n}.json" for n in ("s1", "s2")}
    sluice.start(base_config(
        ports=[{"name": "in", "vdev": "net_af_packet0,iface=slt-g0,framecnt=4096"},
               {"name": "out", "vdev": "net_null0"}],
        chains=[{"name": "c", "nfs": ["s"], "exit": "out"}], nfs=["s"]))
    for n in ("s1", "s2"):
        sluice.start_nf("count", n, service="s", extra=["--dump", dumps[n]])
    sluice.wait_attached("s1", "s2")
    sluice.ok("rules_set", rules=[STEER])

    # udpgen cycles through 1024 (sport, dport) pairs: 1024 flows
    proc = net.popen([gen, "--rate", RATE, "--count", COUNT, "--warmup", 0, "slt-g1", "02:00:00:00:00:02",
                      "02:00:00:00:00:01", "10.91.0.1", "10.91.0.2", 80, 30], ns=NS,
                     stdout=open(workdir / "udpgen.json", "wb"), stderr=open(workdir / "udpgen.err", "wb"))
    changes, added = 0, []
    while changes < 1000:
        k = changes % 4
        if k == 0:
            added.append(sluice.ok("rule_add", rule=noise(changes))["rule"]["id"])
        elif k == 1 and added:
            sluice.ok("rule_del", id=added.pop(0))
        elif k == 2:
            sluice.ok("rules_set", rules=[noise(changes), STEER, noise(changes + 1)])
            added = []
        else:
            sluice.ok("chain_set", name="c", nfs=["s"], exit="out")
        changes += 1
    # traffic ran through every change; stopping it by signal makes udpgen report what it sent
    assert proc.poll() is None, "the generator stopped before the 1000 changes were done"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0, (workdir / "udpgen.err").read_text()
    res = json.loads((workdir / "udpgen.json").read_text().strip().splitlines()[-1])
    sent = res["sent"] + res["warmup_sent"]
    assert res["stopped"] and res["first_hop_drops"] == 0 and sent >= 4 * 1024, res

    try:
        wait_until(lambda: sluice.port("out")["tx_pkts"] >= sent, 20, f"{sent} packets out")
    except AssertionError:
        raise AssertionError(f"udpgen {res}, sluiced {sluice.stats()}") from None

    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")
    st = sluice.stats()
    assert sluice.port("out", st)["tx_pkts"] == sent
    assert {k: v for k, v in st["drops"].items() if k != "no_path"} == dict.fromkeys(
        ["ring_full", "nf_gone", "invalid_desc", "tx_full", "rx_invalid", "rule", "malformed", "nf_detached", "no_buffer", "backpressure", "quota", "too_long"], 0), st["drops"]
    # anything else the veth carried (none expected) had no rule and no chain: no_path, never ours
    assert sluice.port("in", st)["rx_pkts"] - st["drops"]["no_path"] == sent
    fl = st["flows"]
    assert fl["rechecked"] > 0 and fl["full"] == 0, fl

    for n in ("s1", "s2"):
        assert sluice.stop_nf(n) == 0, sluice.nf_log(n)
    seen = {}
    total = 0
    for n in ("s1", "s2"):
        d = json.loads(dumps[n].read_text())
        total += d["total_pkts"]
        for f in d["flows"]:
            key = (f["src"], f["dst"], f["sport"], f["dport"])
            assert key not in seen, f"flow {key} went to both {seen[key]} and {n}"
            seen[key] = n
    assert total == sent
    assert len(seen) == 1024
    assert set(seen.values()) == {"s1", "s2"}  # both replicas got flows
