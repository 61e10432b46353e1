"""Multi-queue ports spread over two workers (docs/ports.md "Multi-queue ports", docs/architecture.md
"Workers"): RX queue q polled by worker q mod 2 alone, a replica of each service on each worker so a
packet stays where it was received (flow affinity), a TX queue per worker, per-flow order kept.

  slt-mqa [slt-mqa1 10.79.0.1/24] -- veth -- slt-mqa0 = port "a" (net_af_packet, qpairs=2, queues: 2;
                                                  added at runtime with port_add, ingress chain c2s)
  slt-mqb [slt-mqb1 10.79.0.2/24] -- veth -- slt-mqb0 = port "b" (the same, from the config; c2s's exit)

  a -> c2s = [fwd] (fwd.0 and fwd.1, one per worker) -> b

Many UDP flows (distinct source ports), a sequence number per flow in each payload: the receiver in
slt-mqb checks that every packet arrived and that no flow was reordered. The sluiced config's own
checks of `queues` are at the end (no namespaces needed).
"""

import json
import sys
import time

import pytest

from harness import (base_config, net, run_sluiced_once, sh, sluice, wait_until, workdir,  # noqa: F401
                     write_pcap)
from sluice import config as sc
from sluice.config import ConfigError

A_NS, B_NS = "slt-mqa", "slt-mqb"
A_IP, B_IP = "10.79.0.1", "10.79.0.2"
B_MAC = "02:00:00:79:00:02"
DPORT = 9079
FLOWS, PER_FLOW = 64, 150

# The receiver: every datagram's (source port, flow, seq) until 2 s without one; then a JSON summary.
RECEIVER = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
open(sys.argv[3] + ".ready", "w").close()
s.settimeout(2.0)
last, n, reordered, bad = {}, 0, 0, 0
got_any = False
while True:
    try:
        d, (_, sport) = s.recvfrom(2048)
    except socket.timeout:
        if got_any:
            break
        continue
    got_any = True
    if len(d) < 8:
        bad += 1
        continue
    flow, seq = struct.unpack("!II", d[:8])
    n += 1
    if flow != sport or seq <= last.get(flow, -1):
        reordered += 1
    last[flow] = seq
json.dump({"received": n, "reordered": reordered, "bad": bad, "flows": len(last),
           "last": {str(k): v for k, v in last.items()}}, open(sys.argv[3], "w"))
"""

# The sender: PER_FLOW rounds over FLOWS flows (source ports 20000..), paced at about 10 kpps.
SENDER = r"""
import socket, struct, sys, time
dst, dport, flows, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
socks = []
for f in range(flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 20000 + f))
    socks.append(s)
pad = bytes(56)
for seq in range(per):
    for f, s in enumerate(socks):
        s.sendto(struct.pack("!II", 20000 + f, seq) + pad, (dst, dport))
    time.sleep(0.006)
print(flows * per)
"""


def drops_total(st):
    return sum(v for v in st["drops"].values() if isinstance(v, int))


@pytest.fixture
def mq(net, sluice):  # noqa: F811
    net.add_ns(A_NS)
    net.add_ns(B_NS)
    net.add_veth("slt-mqa0", "slt-mqa1", peer_ns=A_NS, peer_addr=f"{A_IP}/24")
    net.add_veth("slt-mqb0", "slt-mqb1", peer_ns=B_NS, peer_addr=f"{B_IP}/24", mac=B_MAC)
    # one direction only: a knows b's MAC, so nothing needs to come back through sluiced
    sh("ip", "neigh", "replace", B_IP, "lladdr", B_MAC, "dev", "slt-mqa1", "nud", "permanent", ns=A_NS)
    cfg = base_config(
        ports=[{"name": "b", "vdev": "net_af_packet1,iface=slt-mqb0,qpairs=2,framecnt=4096", "queues": 2}],
        chains=[{"name": "c2s", "nfs": ["fwd"], "exit": "b"}],
        nfs=["fwd"], workers=2, lcores="0,1,1")
    sluice.start(cfg)
    # af_packet's qpairs must match queues (frames on an unpolled fanout socket would be lost)
    r = sluice.request("port_add", name="a", vdev="net_af_packet0,iface=slt-mqa0,qpairs=2", chain="c2s")
    assert not r.get("ok") and "field 'queues' (port a): net_af_packet has qpairs=2" in r["error"], r
    # a multi-queue port added at runtime, before the NFs attach (their placement follows its queues)
    p = sluice.ok("port_add", name="a", vdev="net_af_packet0,iface=slt-mqa0,qpairs=2,framecnt=4096",
                  chain="c2s", queues=2)["port"]
    assert [(q["queue"], q["worker"]) for q in p["queues"]] == [(0, 0), (1, 1)], p
    for i in range(2):
        sluice.start_nf("fwd", f"fwd.{i}", service="fwd", wakeup="block", batch=4, timeout_us=50)
    return net, sluice


def test_flows_spread_over_queues_and_workers_in_order(mq):
    net, s = mq  # noqa: F811
    st = s.stats()
    workers = {n["name"]: n["worker"] for n in st["nfs"]}
    assert sorted(workers.values()) == [0, 1], f"one fwd replica per worker: {workers}"
    b = s.port("b", st)
    assert [(q["queue"], q["worker"]) for q in b["queues"]] == [(0, 0), (1, 1)], b
    assert [(q["queue"], q["worker"]) for q in b["tx_queues"]] == [(0, 0), (1, 1)], b

    out = s.dir / "recv.json"
    recv = net.popen([sys.executable, "-c", RECEIVER, B_IP, DPORT, out], ns=B_NS)
    wait_until(lambda: (s.dir / "recv.json.ready").exists() or recv.poll() is not None, 10, "receiver ready")
    assert recv.poll() is None, "receiver died"
    before = s.stats()
    cp = sh(sys.executable, "-c", SENDER, B_IP, DPORT, FLOWS, PER_FLOW, ns=A_NS, timeout=60)
    sent = int(cp.stdout.strip())
    assert sent == FLOWS * PER_FLOW
    recv.wait(30)
    res = json.loads(out.read_text())
    st = s.stats()

    a_, b_ = s.port("a", st), s.port("b", st)
    a0 = s.port("a", before)
    counted = drops_total(st) - drops_total(before) + (a_["device"]["imissed"] - a0["device"]["imissed"]) \
        + (b_["device"]["oerrors"] - s.port("b", before)["device"]["oerrors"])
    # every packet counted, and at this modest rate none lost
    assert res["received"] + counted == sent, (res["received"], counted, st["drops"], a_["device"])
    assert counted == 0 and res["received"] == sent, (res, st["drops"])
    assert res["bad"] == 0 and res["flows"] == FLOWS
    # no flow reordered: one queue per flow (af_packet's fanout by flow hash), one worker, one path
    assert res["reordered"] == 0, res
    assert all(v == PER_FLOW - 1 for v in res["last"].values()), res["last"]

    # both of a's queues received traffic, each on its own worker, and (affinity) each worker's fwd
    # replica got exactly what its worker received: no handoff between the workers
    rxq = {q["worker"]: q["rx_pkts"] - a0["queues"][q["queue"]]["rx_pkts"] for q in a_["queues"]}
    assert rxq[0] > 0 and rxq[1] > 0, a_["queues"]
    assert sum(rxq.values()) == a_["rx_pkts"] - a0["rx_pkts"] >= sent
    nf_rx = {n["worker"]: n["rx_pkts"] - (s.nf(n["name"], before) or {"rx_pkts": 0})["rx_pkts"] for n in st["nfs"]}
    assert nf_rx == rxq, (nf_rx, rxq)
    # each worker sent on its own TX queue of b
    txq = [q["tx_pkts"] for q in b_["tx_queues"]]
    assert txq[0] > 0 and txq[1] > 0 and sum(txq) == b_["tx_pkts"] >= sent, b_["tx_queues"]
    s.wait_pool_whole()

    # a multi-queue port goes as any port: deleted at runtime, nothing left behind
    s.ok("port_del", name="a")
    assert "a" not in {p["name"] for p in s.ok("ports")["ports"]}
    s.wait_pool_whole()


# ---------------------------------------------------------------- config checks (no traffic)

def _yaml(queues, vdev="net_null0"):
    return {"ports": [{"name": "x", "vdev": "net_null1"}, {"name": "y", "vdev": vdev, "queues": queues}],
            "chains": [], "nfs": []}


@pytest.mark.parametrize("queues", [0, 9, "2", True, -1])
def test_config_queues_range(queues):
    with pytest.raises(ConfigError) as ei:
        sc.normalize(_yaml(queues))
    assert str(ei.value).startswith("ports[1].queues: must be 1..8"), ei.value


def test_config_queues_default_and_af_packet_qpairs():
    cfg = sc.normalize(_yaml(4))
    assert [p["queues"] for p in cfg["ports"]] == [1, 4]
    assert json.loads(sc.to_sluiced_json(cfg))["ports"][1]["queues"] == 4
    sc.normalize(_yaml(2, "net_af_packet0,iface=x,qpairs=2"))
    for q, vdev in ((2, "net_af_packet0,iface=x"), (1, "net_af_packet0,iface=x,qpairs=2")):
        with pytest.raises(ConfigError) as ei:
            sc.normalize(_yaml(q, vdev))
        assert ei.value.path == "ports[1].queues" and "qpairs" in ei.value.msg, ei.value


def test_sluiced_refuses_bad_queues(workdir):  # noqa: F811
    from harness import require_env
    require_env()
    bad = base_config(ports=[{"name": "x", "vdev": "net_null0", "queues": 9}])
    cp, _ = run_sluiced_once(bad, workdir)
    assert cp.returncode != 0 and "ports[0].queues: must be 1..8" in cp.stderr, cp.stderr[-2000:]
    # more queues than the PMD has: net_pcap has one RX queue per rx_pcap
    pcap = workdir / "in.pcap"
    write_pcap(pcap, [])
    bad = base_config(ports=[{"name": "x", "vdev": "net_null0"},
                             {"name": "p", "vdev": f"net_pcap0,rx_pcap={pcap}", "queues": 2}])
    cp, _ = run_sluiced_once(bad, workdir)
    assert cp.returncode != 0 and "ports[1].queues (port p): 2 RX queues, but net_pcap offers at most 1" in cp.stderr, \
        cp.stderr[-2000:]


def test_port_add_queues(sluice):  # noqa: F811
    """port_add names its field; a multi-queue net_null port (TX only) gets a TX queue per worker."""
    sluice.start(base_config(ports=[{"name": "x", "vdev": "net_null0"}], workers=2, lcores="0,1,1"))
    r = sluice.request("port_add", name="n", vdev="net_null7", queues=0)
    assert not r.get("ok") and "field 'queues': must be 1..8" in r["error"], r
    p = sluice.ok("port_add", name="n", vdev="net_null7", queues=3)["port"]
    assert [(q["queue"], q["worker"]) for q in p["queues"]] == [(0, 0), (1, 1), (2, 0)], p
    assert [(q["queue"], q["worker"]) for q in p["tx_queues"]] == [(0, 0), (1, 1)], p
    sluice.ok("port_del", name="n")
    time.sleep(0.1)
    sluice.wait_pool_whole()
