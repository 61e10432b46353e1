"""Steering in the YAML config: friendly forms are normalized (python/sluice/steering.py), errors name
the field, and sluiced takes the result as it is (rules, steering, per-service policy)."""

import json

import pytest

from harness import sluice, workdir  # noqa: F401
from sluice import config

YAML = """
sluiced: {pool_mbufs: 16384, max_nfs: 8}
ports: [{name: p0, vdev: net_null0, chain: c}, {name: p1, vdev: net_null1}]
nfs: [{name: fw, program: fwd, instances: 2, policy: least_loaded}]
chains: [{name: c, nfs: [fw], exit: p1}]
steering: {malformed: {port: p1}, flows: 1024, flow_idle_ms: 5000}
rules:
  - name: web
    priority: 10
    match: {in_port: p0, proto: tcp, dst_port: 80-81, tcp_flags: "syn,!ack", dst: 10.0.0.0/8, ethertype: "0x0800"}
    action: {chain: c}
  - match: {src: "2001:db8::/32", vlan: 7}
    payload: {pattern: "GET ", depth: 64}
    action: drop
"""


def test_yaml_rules_reach_sluiced(sluice):  # noqa: F811
    cfg = config.load_string(YAML, check_programs=False)
    assert cfg["rules"][0]["match"] == {"in_port": "p0", "proto": 6, "dst_port": [80, 81],
                                        "tcp_flags": {"set": 2, "clear": 16}, "dst": "10.0.0.0/8",
                                        "ethertype": 0x0800}
    doc = json.loads(config.to_sluiced_json(cfg))
    doc["sluiced"].pop("socket_dir", None)
    doc["sluiced"]["lcores"] = "0,1"
    sluice.start(doc)
    r = sluice.ok("rules")
    assert [x["name"] for x in r["rules"]] == ["web", None]
    assert r["rules"][0]["match"] == cfg["rules"][0]["match"] and r["rules"][0]["action"] == {"chain": "c"}
    assert r["rules"][1]["payload"] == {"pattern": "GET ", "depth": 64}
    assert r["malformed"] == {"port": "p1"}
    assert sluice.ok("flows")["flows"]["max"] == 1024
    assert [s["policy"] for s in sluice.stats()["services"] if s["name"] == "fw"] == ["least_loaded"]


@pytest.mark.parametrize("bad,field", [
    ("rules: [{match: {dst_port: 70000}, action: drop}]", "rules[0].match.dst_port"),
    ("rules: [{match: {dst: 10.0.0.1/8}, action: drop}]", "rules[0].match.dst"),
    ("rules: [{match: {}, action: {chain: nope}}]", "rules[0].action.chain"),
    ("rules: [{match: {tcp_flags: 'syn,bogus'}, action: drop}]", "rules[0].match.tcp_flags"),
    ("rules: [{match: {proto: tcp}}]", "rules[0].action"),
    ("rules: [{match: {colour: red}, action: drop}]", "rules[0].match.colour"),
    ("rules: [{match: {src: 10.0.0.0/8, dst: '::/0'}, action: drop}]", "rules[0].match.dst"),
    ("rules: [{match: {}, payload: {pattern: ''}, action: drop}]", "rules[0].payload.pattern"),
    ("steering: {flows: -1}", "steering.flows"),
    ("steering: {malformed: {port: nope}}", "steering.malformed.port"),
    ("nfs: [{name: a, program: fwd, policy: random}]", "nfs[0].policy"),
])
def test_errors_name_the_field(bad, field):
    with pytest.raises(config.ConfigError) as e:
        config.load_string("ports: [{name: p0, vdev: net_null0}]\n" + bad, check_programs=False)
    assert e.value.path == field, str(e.value)
