"""Payload rules (Hyperscan): HTTP requests for host a.example go one way, the rest of port 80 another;
a flow is decided by its first packet that has payload (a SYN decides nothing); a payload rule whose
pattern is absent gives way to the best header-only rule (docs/steering.md "Payload rules").
"""

import pytest

from harness import base_config, read_pcap, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import IP, TCP, UDP, Ether, Raw  # noqa: E402

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
RULES = [
    {"name": "host-a", "priority": 10, "match": {"in_port": "in", "proto": 6, "dst_port": [80, 80]},
     "payload": {"pattern": "host: a.example", "caseless": True, "depth": 512}, "action": {"port": "out_a"}},
    {"name": "api", "priority": 20, "match": {"in_port": "in", "proto": 17},
     "payload": {"pattern": "^API[0-9]+;", "regex": True, "depth": 16}, "action": {"port": "out_a"}},
    {"name": "web", "priority": 5, "match": {"in_port": "in", "proto": 6, "dst_port": [80, 80]},
     "action": {"port": "out_b"}},
]


def http(sport, host, flags="PA"):
    req = f"GET /index.html HTTP/1.1\r\nUser-Agent: t\r\nHost: {host}\r\n\r\n".encode()
    return ETH / IP(src="10.1.0.1", dst="10.2.0.1") / TCP(sport=sport, dport=80, flags=flags) / Raw(req)


def syn(sport):
    return ETH / IP(src="10.1.0.1", dst="10.2.0.1") / TCP(sport=sport, dport=80, flags="S")


def test_http_host_steering(sluice, workdir):  # noqa: F811
    # flow 1000+i: SYN, then a request; hosts alternate a.example / B.example; A.EXAMPLE (caseless)
    pkts, to_a, to_b = [], [], []
    for i in range(30):
        host = ["a.example", "b.example", "A.EXAMPLE"][i % 3]
        s, h = syn(1000 + i), http(1000 + i, host)
        pkts += [s, h]
        to_b.append(s)  # no payload: the header-only rule, and the flow stays undecided
        (to_b if host == "b.example" else to_a).append(h)
    # a Host header beyond the rule's 512-byte depth is not seen
    far = ETH / IP(src="10.1.0.1", dst="10.2.0.1") / TCP(sport=2000, dport=80, flags="PA") / \
        Raw(b"GET / HTTP/1.1\r\nX-Pad: " + b"x" * 600 + b"\r\nHost: a.example\r\n\r\n")
    # UDP: the regex must match at the start of the payload
    api = [ETH / IP(src="10.1.0.1", dst="10.3.0.1") / UDP(sport=5, dport=7) / Raw(b"API42;get"),
           ETH / IP(src="10.1.0.1", dst="10.3.0.1") / UDP(sport=6, dport=7) / Raw(b"xAPI42;get")]
    pkts += [far] + api
    to_b.append(far)
    to_a.append(api[0])   # api[1] matches no rule: the port has no chain -> no_path
    inp = workdir / "in.pcap"
    outs = {p: workdir / f"{p}.pcap" for p in ("out_a", "out_b")}
    write_pcap(inp, pkts)
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "out_a", "vdev": f"net_pcap1,tx_pcap={outs['out_a']}"},
                             {"name": "out_b", "vdev": f"net_pcap2,tx_pcap={outs['out_b']}"}])
    cfg["rules"] = RULES
    sluice.start(cfg)
    wait_until(lambda: sluice.port("out_a")["tx_pkts"] + sluice.port("out_b")["tx_pkts"] == len(to_a) + len(to_b),
               10, "every packet out")
    st = sluice.stats()
    assert st["drops"]["no_path"] == 1
    hits = {r["name"]: r["hits"] for r in sluice.ok("rules")["rules"]}
    assert hits == {"host-a": 20, "api": 1, "web": 30 + 10 + 1}, hits
    # decided flows only: 30 request flows + the far one + 1 UDP (the other UDP flow matched no rule: default)
    assert st["flows"]["entries"] == 30 + 1 + 2, st["flows"]
    # the dry run says the same, and shows the rule's payload spec
    r = sluice.ok("classify", port="in", packets=[bytes(http(9, "a.example")).hex(), bytes(syn(9)).hex()])
    ids = {x["name"]: x["id"] for x in sluice.ok("rules")["rules"]}
    assert [x["rule"] for x in r["results"]] == [ids["host-a"], ids["web"]]
    assert sluice.ok("rules")["rules"][1]["payload"]["pattern"] == "host: a.example"
    assert sluice.stop() == 0, sluice.log()
    got = {p: read_pcap(f) for p, f in outs.items()}
    assert got["out_a"] == [bytes(p) for p in to_a]
    assert got["out_b"] == [bytes(p) for p in to_b]


def test_bad_payload_patterns_are_refused_naming_the_field(sluice):  # noqa: F811
    sluice.start(base_config(ports=[{"name": "p0", "vdev": "net_null0"}]))
    cases = [
        ({"pattern": "(unclosed", "regex": True}, "rule.payload.pattern"),
        ({"pattern": ""}, "rule.payload.pattern"),
        ({"pattern": "x", "depth": 0}, "rule.payload.depth"),
        ({"pattern": "x", "nocase": True}, "rule.payload.nocase"),
        ({"pattern": "x", "regex": "yes"}, "rule.payload.regex"),
    ]
    for payload, field in cases:
        r = sluice.request("rule_add", rule={"match": {}, "payload": payload, "action": "drop"})
        assert r["ok"] is False and field in r["error"], (payload, r)
    assert sluice.ok("rules")["rules"] == []
