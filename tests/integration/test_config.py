"""Config validation: every error names the dotted path of the field; defaults fill in."""

import json
import os
import stat

import pytest
import yaml

from sluice import config as sc
from sluice.config import ConfigError

BASE = {
    "ports": [
        {"name": "client", "vdev": "net_af_packet0,iface=sl-c-host", "chain": "c2s"},
        {"name": "server", "vdev": "net_af_packet1,iface=sl-s-host", "chain": "s2c"},
    ],
    "chains": [
        {"name": "c2s", "nfs": ["count", "fwd"], "exit": "server"},
        {"name": "s2c", "nfs": ["count", "fwd"], "exit": "client"},
    ],
    "nfs": [
        {"name": "count", "program": "count"},
        {"name": "fwd", "program": "fwd", "instances": 2, "wakeup": "block"},
    ],
}


def cfg(**changes):
    """A deep copy of BASE with top-level sections replaced."""
    c = json.loads(json.dumps(BASE))
    c.update(changes)
    return c


def mod(fn):
    c = json.loads(json.dumps(BASE))
    fn(c)
    return c


def err(data, **kw):
    with pytest.raises(ConfigError) as ei:
        sc.normalize(data, **kw)
    return ei.value


# ------------------------------------------------------------------ good config

def test_base_config_normalizes_with_defaults():
    n = sc.normalize(cfg())
    assert n["sluiced"] == {"pool_mbufs": 16384, "buffer_size": 2048, "ring_size": 1024, "max_nfs": 64,
                            "huge_pages": "auto", "socket_dir": "/run/sluice", "lcores": "0,1",
                            "pipes": False, "workers": 1, "nf_sched": "other"}
    count = n["nfs"][0]
    assert count["args"] == [] and count["instances"] == 1 and count["wakeup"] == "poll"
    assert count["batch"] == 32 and count["timeout_us"] == 100 and count["spin_us"] == 200
    assert count["restart"] == "on-failure"
    assert count["program_path"] == "builtin:count"
    assert n["nfs"][1]["wakeup"] == "block" and n["nfs"][1]["instances"] == 2


def test_optional_fields_default_to_null():
    n = sc.normalize({"ports": [{"name": "p0", "vdev": "net_null0"}], "chains": [{"name": "c", "nfs": ["a"]}],
                      "nfs": [{"name": "a", "program": "fwd"}]})
    assert n["ports"][0]["chain"] is None
    assert n["chains"][0]["exit"] is None


def test_minimal_config_only_ports():
    n = sc.normalize({"ports": [{"name": "p0", "vdev": "net_null0"}]})
    assert n["chains"] == [] and n["nfs"] == []


def test_normalize_does_not_mutate_input():
    data = cfg()
    before = json.dumps(data, sort_keys=True)
    sc.normalize(data)
    assert json.dumps(data, sort_keys=True) == before


def test_instance_names():
    n = sc.normalize(cfg())
    assert [name for name, _ in sc.instance_names(n)] == ["count.0", "fwd.0", "fwd.1"]


def test_to_sluiced_json_shape():
    n = sc.normalize(cfg())
    j = json.loads(sc.to_sluiced_json(n, socket_dir="/tmp/slx"))
    assert set(j) == {"sluiced", "ports", "chains", "nfs"}
    assert j["sluiced"]["socket_dir"] == "/tmp/slx"
    assert j["ports"][0] == {"name": "client", "vdev": "net_af_packet0,iface=sl-c-host", "chain": "c2s", "queues": 1}
    assert j["chains"][1] == {"name": "s2c", "nfs": ["count", "fwd"], "exit": "client"}
    assert j["nfs"][1]["name"] == "fwd" and j["nfs"][1]["instances"] == 2
    assert all("program_path" not in nf for nf in j["nfs"])


def test_sluiced_section_values():
    n = sc.normalize(cfg(sluiced={"pool_mbufs": 262144, "ring_size": 65536, "max_nfs": 4096,
                                  "huge_pages": "off", "socket_dir": "/tmp/x/", "lcores": "1, 0"}))
    assert n["sluiced"]["socket_dir"] == "/tmp/x"
    assert n["sluiced"]["lcores"] == "1,0"
    assert n["sluiced"]["ring_size"] == 65536


def test_ring_size_must_leave_buffers_for_others():
    with pytest.raises(sc.ConfigError, match=r"sluiced.ring_size: 4096 is too large for pool_mbufs 4096"):
        sc.normalize(cfg(sluiced={"pool_mbufs": 4096, "ring_size": 4096}))


@pytest.mark.parametrize("text,expect", [("on", "on"), ("off", "off"), ("auto", "auto")])
def test_huge_pages_yaml_booleans(text, expect):
    # YAML 1.1 reads bare on/off as booleans
    doc = f"sluiced:\n  huge_pages: {text}\nports:\n  - name: p\n    vdev: net_null0\n"
    assert sc.load_string(doc)["sluiced"]["huge_pages"] == expect


def test_pci_port_allowed():
    # the device itself is checked against this machine's sysfs (test_pci_config.py); not here
    n = sc.normalize({"ports": [{"name": "nic", "vdev": "pci:0000:03:00.1"}]}, check_devices=False)
    assert n["ports"][0]["vdev"] == "pci:0000:03:00.1"


def test_program_path_relative_to_config(tmp_path):
    prog = tmp_path / "mynf"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    f = tmp_path / "c.yaml"
    f.write_text("ports: [{name: p, vdev: net_null0}]\nnfs: [{name: mine, program: ./mynf, args: [-v, 3]}]\n")
    n = sc.load_file(str(f))
    assert n["nfs"][0]["program_path"] == str(prog)
    assert n["nfs"][0]["args"] == ["-v", "3"]


def test_program_on_path():
    n = sc.normalize({"ports": [{"name": "p", "vdev": "net_null0"}], "nfs": [{"name": "t", "program": "true"}]})
    assert os.path.isabs(n["nfs"][0]["program_path"])


def test_check_programs_off_skips_existence():
    n = sc.normalize({"ports": [{"name": "p", "vdev": "net_null0"}],
                      "nfs": [{"name": "t", "program": "/nonexistent/nf"}]}, check_programs=False)
    assert "program_path" not in n["nfs"][0]


# ------------------------------------------------------------------ bad config

CASES = [
    # (description, data-builder, expected path, fragment of the message)
    ("top-level not a mapping", lambda: [1, 2], "config", "must be a mapping"),
    ("unknown top-level key", lambda: cfg(extra=1), "extra", "unknown key"),
    ("ports missing", lambda: {"chains": []}, "ports", "required"),
    ("ports empty", lambda: cfg(ports=[]), "ports", "at least 1"),
    ("ports not a list", lambda: cfg(ports={"name": "x"}), "ports", "must be a list"),
    ("port not a mapping", lambda: cfg(ports=["client"]), "ports[0]", "must be a mapping"),
    ("port unknown key", lambda: mod(lambda c: c["ports"][1].update(vdevv="x")), "ports[1].vdevv",
     "unknown key"),
    ("port name missing", lambda: mod(lambda c: c["ports"][0].pop("name")), "ports[0].name", "required"),
    ("port vdev missing", lambda: mod(lambda c: c["ports"][1].pop("vdev")), "ports[1].vdev", "required"),
    ("port name bad chars", lambda: mod(lambda c: c["ports"][0].update(name="Client")), "ports[0].name",
     "invalid name"),
    ("port name too long", lambda: mod(lambda c: c["ports"][0].update(name="a" * 32)), "ports[0].name",
     "invalid name"),
    ("port name starts with dash", lambda: mod(lambda c: c["ports"][0].update(name="-x")), "ports[0].name",
     "invalid name"),
    ("port name not a string", lambda: mod(lambda c: c["ports"][0].update(name=7)), "ports[0].name",
     "must be a string"),
    ("port name duplicate", lambda: mod(lambda c: c["ports"][1].update(name="client")), "ports[1].name",
     "duplicate name 'client'"),
    ("vdev not net_", lambda: mod(lambda c: c["ports"][0].update(vdev="eth0")), "ports[0].vdev", "net_"),
    ("vdev empty", lambda: mod(lambda c: c["ports"][0].update(vdev="")), "ports[0].vdev", "must not be empty"),
    ("vdev not a string", lambda: mod(lambda c: c["ports"][0].update(vdev=3)), "ports[0].vdev",
     "must be a string"),
    ("vdev bad pci", lambda: mod(lambda c: c["ports"][0].update(vdev="pci:00:03.0")), "ports[0].vdev",
     "pci:0000:00:00.0"),
    ("vdev device reused", lambda: mod(lambda c: c["ports"][1].update(vdev="net_af_packet0,iface=other")),
     "ports[1].vdev", "already used by ports[0]"),
    ("port chain unknown", lambda: mod(lambda c: c["ports"][0].update(chain="nosuch")), "ports[0].chain",
     "unknown chain 'nosuch'"),
    ("chains not a list", lambda: cfg(chains="c2s"), "chains", "must be a list"),
    ("chain unknown key", lambda: mod(lambda c: c["chains"][0].update(exits="server")), "chains[0].exits",
     "unknown key"),
    ("chain nfs missing", lambda: mod(lambda c: c["chains"][0].pop("nfs")), "chains[0].nfs", "required"),
    ("chain nfs empty", lambda: mod(lambda c: c["chains"][1].update(nfs=[])), "chains[1].nfs", "at least 1"),
    ("chain nfs a string", lambda: mod(lambda c: c["chains"][0].update(nfs="count")), "chains[0].nfs",
     "must be a list"),
    ("chain unknown service", lambda: mod(lambda c: c["chains"][0].update(nfs=["count", "nat"])),
     "chains[0].nfs[1]", "unknown service 'nat'"),
    ("chain unknown exit", lambda: mod(lambda c: c["chains"][0].update(exit="srv")), "chains[0].exit",
     "unknown port 'srv'"),
    ("chain duplicate", lambda: mod(lambda c: c["chains"][1].update(name="c2s")), "chains[1].name",
     "duplicate name"),
    ("nf unknown key", lambda: mod(lambda c: c["nfs"][0].update(cpu=1)), "nfs[0].cpu", "unknown key"),
    ("nf program missing", lambda: mod(lambda c: c["nfs"][0].pop("program")), "nfs[0].program", "required"),
    ("nf program unknown", lambda: mod(lambda c: c["nfs"][0].update(program="no-such-nf-xyz")),
     "nfs[0].program", "unknown program"),
    ("nf program bad path", lambda: mod(lambda c: c["nfs"][0].update(program="/nonexistent/nf")),
     "nfs[0].program", "no such file"),
    ("nf wakeup bad", lambda: mod(lambda c: c["nfs"][1].update(wakeup="sleepy")), "nfs[1].wakeup",
     "must be one of poll, block, adaptive (got 'sleepy')"),
    ("nf restart bad", lambda: mod(lambda c: c["nfs"][0].update(restart="sometimes")), "nfs[0].restart",
     "must be one of always, on-failure, never"),
    ("nf instances zero", lambda: mod(lambda c: c["nfs"][0].update(instances=0)), "nfs[0].instances",
     "1..1024"),
    ("nf instances too many", lambda: mod(lambda c: c["nfs"][0].update(instances=1025)), "nfs[0].instances",
     "1..1024"),
    ("instances over max_nfs", lambda: mod(lambda c: c["nfs"][0].update(instances=100)), "sluiced.max_nfs",
     "but max_nfs is 64"),
    ("nf instances bool", lambda: mod(lambda c: c["nfs"][0].update(instances=True)), "nfs[0].instances",
     "must be an integer"),
    ("nf batch string", lambda: mod(lambda c: c["nfs"][0].update(batch="32")), "nfs[0].batch",
     "must be an integer"),
    ("nf batch zero", lambda: mod(lambda c: c["nfs"][0].update(batch=0)), "nfs[0].batch", "1..65536"),
    ("nf timeout negative", lambda: mod(lambda c: c["nfs"][0].update(timeout_us=-1)), "nfs[0].timeout_us",
     "0..10000000"),
    ("nf spin too big", lambda: mod(lambda c: c["nfs"][0].update(spin_us=10_000_001)), "nfs[0].spin_us",
     "0..10000000"),
    ("nf args not list", lambda: mod(lambda c: c["nfs"][0].update(args="-v")), "nfs[0].args",
     "must be a list"),
    ("nf args element", lambda: mod(lambda c: c["nfs"][0].update(args=["-v", {"a": 1}])), "nfs[0].args[1]",
     "must be a string"),
    ("nf duplicate", lambda: mod(lambda c: c["nfs"][1].update(name="count")), "nfs[1].name",
     "duplicate name 'count'"),
    ("nf instance name too long", lambda: mod(lambda c: c["nfs"][0].update(name="a" * 30, instances=10)),
     "nfs[0].instances", "exceed 31"),
    ("sluiced not mapping", lambda: cfg(sluiced=5), "sluiced", "must be a mapping"),
    ("sluiced unknown key", lambda: cfg(sluiced={"pool": 1}), "sluiced.pool", "unknown key"),
    ("pool too small", lambda: cfg(sluiced={"pool_mbufs": 1000}), "sluiced.pool_mbufs", "1024..1048576"),
    ("pool too big", lambda: cfg(sluiced={"pool_mbufs": 2 ** 21}), "sluiced.pool_mbufs", "1024..1048576"),
    ("ring not power of two", lambda: cfg(sluiced={"ring_size": 1000}), "sluiced.ring_size", "power of two"),
    ("ring too small", lambda: cfg(sluiced={"ring_size": 8}), "sluiced.ring_size", "16..65536"),
    ("pipes not a boolean", lambda: cfg(sluiced={"pipes": "yes"}), "sluiced.pipes", "true or false"),
    ("max_nfs zero", lambda: cfg(sluiced={"max_nfs": 0}), "sluiced.max_nfs", "1..16384"),
    ("max_nfs below instances", lambda: cfg(sluiced={"max_nfs": 2}), "sluiced.max_nfs", "3 NF instances"),
    ("huge_pages bad", lambda: cfg(sluiced={"huge_pages": "maybe"}), "sluiced.huge_pages",
     "must be one of auto, on, off (got 'maybe')"),
    ("socket_dir relative", lambda: cfg(sluiced={"socket_dir": "run/sluice"}), "sluiced.socket_dir",
     "absolute"),
    ("socket_dir too long", lambda: cfg(sluiced={"socket_dir": "/" + "d" * 120}), "sluiced.socket_dir",
     "too long"),
    ("lcores one", lambda: cfg(sluiced={"lcores": "0"}), "sluiced.lcores", "at least two"),
    ("lcores vs workers", lambda: cfg(sluiced={"lcores": "0,1", "workers": 2}), "sluiced.lcores", "needs 3"),
    ("workers zero", lambda: cfg(sluiced={"workers": 0}), "sluiced.workers", "1..8"),
    ("lcores same", lambda: cfg(sluiced={"lcores": "1,1"}), "sluiced.lcores", "must differ"),
    ("lcores junk", lambda: cfg(sluiced={"lcores": "a,b"}), "sluiced.lcores", "MAIN,WORKER"),
    ("lcores int", lambda: cfg(sluiced={"lcores": 0}), "sluiced.lcores", "must be a string"),
]


@pytest.mark.parametrize("desc,build,path,fragment", CASES, ids=[c[0] for c in CASES])
def test_errors_name_the_field(desc, build, path, fragment):
    e = err(build())
    assert e.path == path, f"{desc}: got {e}"
    assert fragment in e.msg, f"{desc}: got {e}"
    assert str(e).startswith(path + ": ")


def test_unknown_key_lists_allowed():
    e = err(mod(lambda c: c["ports"][0].update(iface="x")))
    assert "name, vdev, chain" in e.msg


def test_unknown_service_lists_known():
    e = err(mod(lambda c: c["chains"][0].update(nfs=["nat"])))
    assert "known: count, fwd" in e.msg


# ------------------------------------------------------------------ YAML level

def test_yaml_syntax_error_has_location():
    with pytest.raises(ConfigError) as ei:
        sc.load_string("ports:\n  - name: [unclosed\n", source="x.yaml")
    assert "x.yaml:" in str(ei.value) and "invalid YAML" in str(ei.value)


def test_yaml_duplicate_key_rejected():
    with pytest.raises(ConfigError) as ei:
        sc.load_string("ports:\n  - name: a\n    name: b\n    vdev: net_null0\n")
    assert ei.value.path == "name" and "duplicate key" in ei.value.msg


def test_empty_file(tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("")
    with pytest.raises(ConfigError) as ei:
        sc.load_file(str(f))
    assert "empty" in str(ei.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as ei:
        sc.load_file(str(tmp_path / "nope.yaml"))
    assert "cannot read" in str(ei.value)


def test_spec_example_parses():
    doc = """
sluiced:
  pool_mbufs: 16384
  ring_size: 1024
  max_nfs: 64
  huge_pages: auto
  socket_dir: /run/sluice
  lcores: "0,1"
ports:
  - name: client
    vdev: net_af_packet0,iface=sl-c
    chain: c2s
  - name: server
    vdev: net_af_packet1,iface=sl-s
chains:
  - name: c2s
    nfs: [count, fwd]
    exit: server
nfs:
  - name: count
    program: count
    args: []
    instances: 1
    wakeup: poll
    batch: 32
    timeout_us: 100
    spin_us: 200
    restart: on-failure
  - name: fwd
    program: fwd
"""
    n = sc.load_string(doc)
    assert n["ports"][0]["vdev"] == "net_af_packet0,iface=sl-c"
    assert yaml.safe_load(doc)["sluiced"]["lcores"] == n["sluiced"]["lcores"]
