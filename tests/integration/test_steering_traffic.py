"""Steering rules on real traffic: a pcap of mixed packets arrives on one port and every packet goes
where its highest-priority rule says (docs/steering.md) -- out of a port, through a chain, to a
service, dropped -- with malformed packets taking the malformed action; counters agree exactly.

in.pcap -> port "in" -> rules -> out_a.pcap (port action) / chain c: fwd -> out_c.pcap /
service s: fwd (NEXT there has no path) / drop;  malformed -> out_b.pcap
"""

import random

import pytest

from harness import base_config, read_pcap, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import ARP, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw  # noqa: E402

RULES = [
    {"name": "web", "priority": 10, "match": {"in_port": "in", "proto": 6, "dst_port": [80, 80]},
     "action": {"port": "out_a"}},
    {"name": "block", "priority": 20, "match": {"src": "10.9.0.0/16"}, "action": "drop"},
    {"name": "vlan100", "priority": 5, "match": {"vlan": 100}, "action": {"chain": "c"}},
    {"name": "v6", "priority": 5, "match": {"dst": "2001:db8::/32", "proto": 17}, "action": {"service": "s"}},
]


def make_traffic(seed=3):
    """(kind, frame) in a shuffled order; kinds: web, block, vlan, v6, malformed, none."""
    rnd = random.Random(seed)
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    out = []
    for i in range(60):
        out.append(("web", eth / IP(src=f"10.1.0.{i + 1}", dst="10.2.0.1") / TCP(sport=1000 + i, dport=80)
                    / Raw(b"w%03d" % i)))
        # 10.9/16 loses to nothing: priority 20 beats "web" even on port 80
        out.append(("block", eth / IP(src=f"10.9.{i}.1", dst="10.2.0.1") /
                    (TCP(sport=2000 + i, dport=80) if i % 2 else UDP(sport=53, dport=53)) / Raw(b"b%03d" % i)))
        out.append(("vlan", eth / Dot1Q(vlan=100) / IP(src="10.3.0.1", dst="10.4.0.1") / UDP(sport=i + 1, dport=9)
                    / Raw(b"v%03d" % i)))
        out.append(("v6", eth / IPv6(src="fd00::1", dst=f"2001:db8::{i + 1:x}") / UDP(sport=5, dport=6)
                    / Raw(b"6%03d" % i)))
        bad = bytearray(bytes(eth / IP(src="10.5.0.1", dst="10.6.0.1") / TCP(sport=1, dport=80) / Raw(b"m%03d" % i)))
        if i % 3 == 0:
            bad[14] = 0x44                      # IHL 4
        elif i % 3 == 1:
            bad = bad[:14 + 20 + 10]            # TCP cut short (IP total length now beyond the frame)
        else:
            bad[16:18] = (2000).to_bytes(2, "big")  # total length beyond the frame
        out.append(("malformed", bytes(bad)))
        out.append(("none", eth / ARP(psrc="10.7.0.1", pdst="10.7.0.2") if i % 2 else
                    eth / IP(src="10.8.0.1", dst="10.2.0.1") / TCP(sport=3, dport=81) / Raw(b"n%03d" % i)))
    rnd.shuffle(out)
    return out


def flow_tuple(frame):
    p = Ether(frame)
    l3 = p[IP] if IP in p else p[IPv6]
    l4 = p[TCP] if TCP in p else p[UDP] if UDP in p else None
    return (l3.src, l3.dst, l3.proto if IP in p else l3.nh, l4.sport if l4 else 0, l4.dport if l4 else 0)


def test_rules_steer_mixed_traffic(sluice, workdir):  # noqa: F811
    traffic = make_traffic()
    frames = [bytes(p) for _, p in traffic]  # raw bytes: the malformed ones are bytes already
    by_kind = {}
    for (kind, _), f in zip(traffic, frames):
        by_kind.setdefault(kind, []).append(f)
    paths = {k: workdir / f"{k}.pcap" for k in ("in", "out_a", "out_b", "out_c")}
    write_pcap(paths["in"], frames)  # Ether(raw) keeps the bytes as they are
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={paths['in']}"},
               {"name": "out_a", "vdev": f"net_pcap1,tx_pcap={paths['out_a']}"},
               {"name": "out_b", "vdev": f"net_pcap2,tx_pcap={paths['out_b']}"},
               {"name": "out_c", "vdev": f"net_pcap3,tx_pcap={paths['out_c']}"}],
        chains=[{"name": "c", "nfs": ["a"], "exit": "out_c"}], nfs=["a", "s"])
    cfg["steering"] = {"malformed": {"port": "out_b"}}
    sluice.start(cfg)
    port_in = sluice.port("in")
    assert port_in["polled"] is False  # no chain, no rule yet: nothing is read before the NFs are up
    sluice.start_nf("fwd", "a")
    sluice.start_nf("fwd", "s1", service="s")
    sluice.wait_attached("a", "s1")
    r = sluice.ok("rules_set", rules=RULES)
    ids = {x["name"]: x["id"] for x in r["rules"]}
    assert [x["name"] for x in r["rules"]] == ["block", "web", "vlan100", "v6"]  # evaluation order

    n = len(frames)
    wait_until(lambda: sluice.port("in")["rx_pkts"] >= n, 30, f"{n} packets in")
    expect_out = len(by_kind["web"]) + len(by_kind["malformed"]) + len(by_kind["vlan"])

    def settled():
        st = sluice.stats()
        out = sum(sluice.port(p, st)["tx_pkts"] for p in ("out_a", "out_b", "out_c"))
        return out == expect_out and st["pool"]["lent"] == 0 and sluice.nf("s1", st)["tx_pkts"] == len(by_kind["v6"])
    wait_until(settled, 20, "every packet steered")

    st = sluice.stats()
    hits = {x["name"]: x["hits"] for x in sluice.ok("rules")["rules"]}
    assert hits == {"web": len(by_kind["web"]), "block": len(by_kind["block"]), "vlan100": len(by_kind["vlan"]),
                    "v6": len(by_kind["v6"])}, hits
    assert sluice.port("in", st)["malformed"] == len(by_kind["malformed"])
    assert st["drops"]["rule"] == len(by_kind["block"])
    assert st["drops"]["malformed"] == 0  # they went out of out_b
    # unmatched packets (no ingress chain) and NEXT from the service outside any chain: no path
    assert st["drops"]["no_path"] == len(by_kind["none"]) + len(by_kind["v6"]), st["drops"]
    assert sluice.nf("s1", st)["rx_pkts"] == len(by_kind["v6"])
    assert sluice.nf("a", st)["rx_pkts"] == len(by_kind["vlan"])
    assert {k: v for k, v in st["drops"].items() if k not in ("rule", "no_path")} == \
        dict.fromkeys(["ring_full", "nf_gone", "invalid_desc", "tx_full", "rx_invalid", "malformed", "nf_detached", "no_buffer", "backpressure", "quota", "too_long"], 0)

    # the flow table: one entry per distinct IP flow (ingress port + 5-tuple); later packets of a flow hit it
    ip = [f for (kind, p), f in zip(traffic, frames) if kind != "malformed" and (IP in p or IPv6 in p)]
    tuples = {flow_tuple(f) for f in ip}
    fl = st["flows"]
    assert fl["entries"] == len(tuples) and fl["full"] == 0 and fl["expired"] == 0, fl
    assert fl["hits"] + fl["misses"] == len(ip), fl
    assert fl["misses"] >= len(tuples), fl

    # deleting a rule: its packets fall to the next rule / the default from then on (checked by classify)
    web = bytes(Ether() / IP(src="10.1.0.1", dst="10.2.0.1") / TCP(dport=80))
    assert sluice.ok("classify", port="in", packets=[web.hex()])["results"][0]["rule"] == ids["web"]
    sluice.ok("rule_del", id=ids["web"])
    res = sluice.ok("classify", port="in", packets=[web.hex()])["results"][0]
    assert res == {"malformed": False, "rule": None, "action": None}

    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()
    got = {k: read_pcap(paths[k]) for k in ("out_a", "out_b", "out_c")}
    assert got["out_a"] == by_kind["web"]          # exactly those, byte for byte, in order
    assert got["out_b"] == by_kind["malformed"]
    assert got["out_c"] == by_kind["vlan"]


def test_idle_flows_expire_and_a_full_table_still_steers(sluice, workdir):  # noqa: F811
    """A flow table of 8 entries with a 50 ms idle timeout: 40 flows overflow it (the rest are steered
    uncached, counted as full), and every entry expires once traffic stops."""
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    pkts = [eth / IP(src="10.1.0.1", dst="10.2.0.1") / UDP(sport=1000 + i, dport=53) for i in range(40)]
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, pkts)
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}])
    cfg["rules"] = [{"match": {"in_port": "in", "proto": 17, "dst_port": [53, 53]}, "action": {"port": "out"}}]
    cfg["steering"] = {"flows": 8, "flow_idle_ms": 50}
    sluice.start(cfg)
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 40, 10, "40 packets out")
    fl = sluice.ok("flows")["flows"]
    assert fl["max"] == 8 and fl["idle_ms"] == 50
    assert fl["full"] > 0 and fl["misses"] == 40, fl
    assert sluice.ok("rules")["rules"][0]["hits"] == 40
    wait_until(lambda: sluice.ok("flows")["flows"]["entries"] == 0, 5, "idle flows expired")
    fl = sluice.ok("flows")["flows"]
    assert fl["expired"] == 40 - fl["full"], fl
    assert sluice.stop() == 0, sluice.log()
    assert read_pcap(out) == [bytes(p) for p in pkts]
