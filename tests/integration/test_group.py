"""NF groups in the control plane (issue 37; docs/groups.md): `groups:` / `nfs[].group` in the config,
the supervisor running each group instance as one sluice-group process, and `sluice status`.

- Config: every refusal names its field, in sc.normalize and in `sluice config check` (exit 2, as
  other config errors); the forms normalize to cfg["groups"]; sluiced never sees `groups`/`group`.
- A chain firewall -> nat -> monitor run by `sluice up` once as three processes and once as one group,
  fed the same pcap: the output pcap is byte-identical and every NF's counters are equal.
- SIGKILL of a group's process under traffic: the supervisor restarts it, its members attach again,
  the chain of a process NF beside it never stops, and the pool audit is whole.
- `sluice status` (--json too) shows each NF's group and the groups' processes; a member cannot be
  scaled alone.
"""

import json
import os
import random
import signal
import time

import pytest
import yaml

from sluice import config as sc
from sluice import reload as sreload
from sluice.client import Client
from sluice.config import ConfigError

from harness import (BUILD, kill_procs_of, read_pcap, require_env, run_sluiced_once, sluice_cli, wait_until,  # noqa: F401
                     workdir, write_pcap)

GROUP_BIN = BUILD / "src" / "group" / "sluice-group"

BASE = {
    "domains": [{"name": "blue", "pool_mbufs": 2048}],
    "ports": [{"name": "lan", "vdev": "net_null0", "chain": "c"}, {"name": "wan", "vdev": "net_null1"}],
    "chains": [{"name": "c", "nfs": ["fw", "nat", "mon"], "exit": "wan"}],
    "nfs": [{"name": "fw", "program": "firewall"}, {"name": "nat", "program": "nat"},
            {"name": "mon", "program": "monitor"}],
}


def mod(fn):
    c = json.loads(json.dumps(BASE))
    fn(c)
    return c


def norm(c):
    return sc.normalize(c, check_programs=False)


def nf(c, name):
    return next(n for n in c["nfs"] if n["name"] == name)


def grp(*members, **settings):
    """fn: a groups: list with one group g of `members` (and settings)."""
    return lambda c: c.update(groups=[dict(name="g", nfs=list(members), **settings)])


def sugar(*members, group="g"):
    """fn: nfs[].group: g on each of `members` (the implicit form)."""
    def f(c):
        for m in members:
            nf(c, m)["group"] = group
    return f


def both(*fns):
    def f(c):
        for fn in fns:
            fn(c)
    return f


def setnf(name, **kw):
    return lambda c: nf(c, name).update(kw)


# ---------------------------------------------------------------- config: good

def test_config_without_groups_is_unchanged():
    c = norm(BASE)
    assert c["groups"] == [] and all("group" not in n for n in c["nfs"])
    assert sc.group_slots(c) == []
    out = json.loads(sc.to_sluiced_json(c))
    assert "groups" not in out and all("group" not in n for n in out["nfs"])


def test_explicit_implicit_and_mixed_forms_normalize_alike():
    want = [{"name": "g", "nfs": ["fw", "nat"], "cpus": None, "wakeup": "poll", "restart": "on-failure",
             "instances": 1}]
    for fn in (grp("fw", "nat"), sugar("fw", "nat"),
               both(lambda c: c.update(groups=[{"name": "g", "nfs": ["fw"]}]), sugar("nat")),
               both(grp("fw", "nat"), sugar("fw"))):  # listed and naming the same group: one membership
        c = norm(mod(fn))
        assert c["groups"] == want, c["groups"]
        assert [n.get("group") for n in c["nfs"]] == ["g", "g", None]
        out = json.loads(sc.to_sluiced_json(c, tokens=sc.new_tokens(c)))
        assert "groups" not in out and all("group" not in n for n in out["nfs"]), out
        assert [n["name"] for n in out["nfs"]] == ["fw", "nat", "mon"]  # every member is an NF to sluiced
    # a groups: entry may carry only settings, its members naming it
    c = norm(mod(both(lambda c: c.update(groups=[{"name": "g", "wakeup": "block"}]), sugar("fw", "nat", "mon"))))
    assert c["groups"][0]["nfs"] == ["fw", "nat", "mon"] and c["groups"][0]["wakeup"] == "block"
    # two implicit groups
    c = norm(mod(both(sugar("fw", "nat"), sugar("mon", group="h"))))
    assert [(g["name"], g["nfs"]) for g in c["groups"]] == [("g", ["fw", "nat"]), ("h", ["mon"])]


def test_group_settings_default_to_the_members_and_the_group_wins():
    c = norm(mod(both(setnf("fw", wakeup="block", restart="always", cpus="0", instances=2),
                      setnf("nat", wakeup="block", restart="always", cpus="0", instances=2), grp("fw", "nat"))))
    g = c["groups"][0]
    assert (g["wakeup"], g["restart"], g["cpus"], g["instances"]) == ("block", "always", [0], 2)
    # members that differ: the group's own settings decide
    c = norm(mod(both(setnf("nat", wakeup="adaptive", restart="never"),
                      grp("fw", "nat", wakeup="block", restart="always", cpus="0"))))
    g = c["groups"][0]
    assert (g["wakeup"], g["restart"], g["cpus"]) == ("block", "always", [0])
    # cpu_weight: the members' common one, only when set
    c = norm(mod(both(setnf("fw", cpu_weight=300), setnf("nat", cpu_weight=300), grp("fw", "nat"))))
    assert c["groups"][0]["cpu_weight"] == 300


def test_group_instance_k_hosts_instance_k_of_every_member():
    c = norm(mod(both(setnf("fw", instances=3), setnf("nat", instances=3), grp("fw", "nat"))))
    slots = [(name, g["name"], k, [m for m, _ in members]) for name, g, k, members in sc.group_slots(c)]
    assert slots == [("g.0", "g", 0, ["fw.0", "nat.0"]), ("g.1", "g", 1, ["fw.1", "nat.1"]),
                     ("g.2", "g", 2, ["fw.2", "nat.2"])]
    # members still count as NF instances (each attaches to sluiced): sluiced.max_nfs counts them
    assert len(sc.instance_names(c)) == 7
    with pytest.raises(ConfigError) as e:
        norm(mod(both(setnf("fw", instances=3), setnf("nat", instances=3), grp("fw", "nat"),
                      lambda c: c.update(sluiced={"max_nfs": 4}))))
    assert str(e.value).startswith("sluiced.max_nfs:")


def test_sluiced_refuses_groups_so_they_are_stripped(workdir):  # noqa: F811
    require_env()
    c = norm(mod(grp("fw", "nat")))
    raw = json.loads(sc.to_sluiced_json(c))
    raw["groups"] = [{"name": "g"}]
    r, _ = run_sluiced_once(raw, workdir)
    assert r.returncode == 2 and "config.groups: unknown field" in r.stdout + r.stderr, r.stdout + r.stderr


def test_reload_refuses_a_group_change_and_restarts_a_changed_member():
    old = norm(mod(grp("fw", "nat")))
    live = {"ports": [dict(p, queues=1) for p in old["ports"]], "chains": old["chains"], "rules": [],
            "services": [{"name": n["name"], "policy": n["policy"]} for n in old["nfs"]]}
    for new in (mod(grp("fw", "nat", "mon")), mod(grp("fw")), mod(grp("fw", "nat", wakeup="block")),
                mod(both(setnf("fw", instances=2), setnf("nat", instances=2), grp("fw", "nat"))), BASE):
        p = sreload.plan(old, norm(new), live)
        assert any(r.startswith("groups:") for r in p.refused), (new, p.refused)
    p = sreload.plan(old, norm(mod(both(setnf("nat", args=["--max-mappings", "1000"]), grp("fw", "nat")))), live)
    assert not p.refused and [s["kind"] for s in p.steps] == ["nf_replace"] and p.steps[0]["service"] == "nat"


# ---------------------------------------------------------------- config: errors, one each
#
# (id, change to BASE, the field the error names, a fragment of its message). Each is checked in
# sc.normalize and through `sluice config check` (exit 2, "config error: FIELD: ...").

ERRORS = [
    ("unknown_group", both(grp("fw"), sugar("nat", group="h")), "nfs[1].group", "unknown group 'h'"),
    ("empty_group", grp(), "groups[0].nfs", "has no members"),
    ("group_of_settings_only_without_members", lambda c: c.update(groups=[{"name": "g", "wakeup": "block"}]),
     "groups[0].nfs", "has no members"),
    ("member_does_not_exist", grp("fw", "nope"), "groups[0].nfs[1]", "unknown service 'nope'"),
    ("member_in_two_groups", lambda c: c.update(groups=[{"name": "g", "nfs": ["fw", "nat"]},
                                                         {"name": "h", "nfs": ["mon", "fw"]}]),
     "groups[1].nfs[1]", "already in group 'g'"),
    ("member_in_two_groups_mixed_forms", both(lambda c: c.update(groups=[{"name": "g", "nfs": ["fw"]},
                                                                          {"name": "h", "nfs": ["nat"]}]),
                                              sugar("fw", group="h")),
     "nfs[0].group", "is in group 'g'"),
    ("member_listed_twice", grp("fw", "fw"), "groups[0].nfs[1]", "already in group 'g'"),
    ("different_domains", both(setnf("nat", domain="blue"), grp("fw", "nat")), "nfs[1].domain",
     "trust domain 'blue' differs from 'default'"),
    ("untrusted_member", both(setnf("nat", trusted=False), grp("fw", "nat")), "nfs[1].trusted",
     "trusted: false"),
    ("read_only_member", both(setnf("nat", access="ro"), grp("fw", "nat")), "nfs[1].access", "access: ro"),
    ("guest_member", both(setnf("nat", vm=True), grp("fw", "nat")), "nfs[1].vm", "guest NF"),
    ("different_sandboxes", both(setnf("nat", sandbox="strict"), grp("fw", "nat")), "nfs[1].sandbox",
     "sandbox 'strict' differs from 'none'"),
    ("strict_sandbox", both(setnf("fw", sandbox="strict"), setnf("nat", sandbox="strict"), grp("fw", "nat")),
     "nfs[0].sandbox", "sandbox: strict is per process"),
    ("not_a_builtin", both(setnf("nat", program="/bin/true"), grp("fw", "nat")), "nfs[1].program",
     "not a built-in NF"),
    ("different_instances", both(setnf("nat", instances=2), grp("fw", "nat")), "nfs[1].instances",
     "instances 2 differs from 1"),
    ("wakeup_differs_group_sets_none", both(setnf("nat", wakeup="block"), grp("fw", "nat")), "nfs[1].wakeup",
     "set groups[0].wakeup"),
    ("wakeup_differs_implicit_group", both(setnf("nat", wakeup="block"), sugar("fw", "nat")), "nfs[1].wakeup",
     "declare the group under groups: with wakeup"),
    ("restart_differs_group_sets_none", both(setnf("nat", restart="always"), grp("fw", "nat")), "nfs[1].restart",
     "set groups[0].restart"),
    ("cpus_differ_group_sets_none", both(setnf("nat", cpus="0"), grp("fw", "nat")), "nfs[1].cpus",
     "set groups[0].cpus"),
    ("bad_group_wakeup", grp("fw", "nat", wakeup="sleepy"), "groups[0].wakeup", "must be one of poll, block"),
    ("bad_group_restart", grp("fw", "nat", restart="sometimes"), "groups[0].restart", "must be one of always"),
    ("bad_group_cpus", grp("fw", "nat", cpus="x"), "groups[0].cpus", "CPU list"),
    ("bad_group_name", lambda c: c.update(groups=[{"name": "G 1", "nfs": ["fw"]}]), "groups[0].name",
     "invalid name"),
    ("group_name_is_a_service", lambda c: c.update(groups=[{"name": "mon", "nfs": ["fw"]}]), "groups[0].name",
     "also an NF service name"),
    ("implicit_group_name_is_a_service", sugar("fw", group="nat"), "nfs[0].group", "also an NF service name"),
    ("duplicate_group", lambda c: c.update(groups=[{"name": "g", "nfs": ["fw"]}, {"name": "g", "nfs": ["nat"]}]),
     "groups[1].name", "duplicate group 'g'"),
    ("group_without_name", lambda c: c.update(groups=[{"nfs": ["fw"]}]), "groups[0].name", "required"),
    ("unknown_group_key", grp("fw", "nat", colour="red"), "groups[0].colour", "unknown key"),
    ("groups_not_a_list", lambda c: c.update(groups={"g": ["fw"]}), "groups", "must be a list"),
    ("member_args_with_separator", both(setnf("fw", args=["--config", "--", "x"]), grp("fw", "nat")),
     "nfs[0].args[1]", "'--' separates the members"),
]


@pytest.mark.parametrize("fn,field,fragment", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_config_error_names_the_field(fn, field, fragment, run_sluice, tmp_path):
    with pytest.raises(ConfigError) as e:
        norm(mod(fn))
    msg = str(e.value)
    assert msg.startswith(field + ":") and fragment in msg, msg
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(mod(fn), sort_keys=False))
    r = run_sluice("config", "check", "--no-programs", f)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"config error: {field}: " in r.stderr and fragment in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_config_check_counts_groups(run_sluice, tmp_path):
    f = tmp_path / "good.yaml"
    f.write_text(yaml.safe_dump(mod(both(setnf("fw", instances=2), setnf("nat", instances=2), grp("fw", "nat"))),
                                sort_keys=False))
    r = run_sluice("config", "check", "--no-programs", f)
    assert r.returncode == 0, r.stderr
    assert "5 NF instance(s), 1 group(s) in 2 process(es)" in r.stdout, r.stdout


# ------------------------------------------------------------- with the real sluiced and NFs

def need_build(*progs):
    require_env()
    missing = [str(p) for p in [GROUP_BIN] + [BUILD / "nfs" / f"sluice-nf-{n}{ext}" for n in progs
                                             for ext in ("", ".so")] if not p.exists()]
    if missing:
        pytest.skip("not built: " + ", ".join(missing))


def api(socket_dir, cmd, **fields):
    with Client(str(socket_dir / "ctl.sock"), timeout=10.0) as c:
        return c.call(cmd, **fields)


def state(socket_dir):
    return json.loads((socket_dir / "state.json").read_text())


def up(socket_dir, cfg_path):
    r = sluice_cli(socket_dir, "up", cfg_path, "-d", "--build-dir", BUILD, "--attach-timeout", 30, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def down(socket_dir):
    sluice_cli(socket_dir, "down", check=False)
    left = kill_procs_of(socket_dir)
    assert not left, f"processes left running for {socket_dir} after `sluice down`: {left}"


FW_RULES = """default drop
allow in lan proto tcp dport 80 name web
allow in lan proto udp dport 53 name dns
allow in lan proto icmp name ping
"""
NAT_CONF = "snat from 10.0.0.0/24 to 203.0.113.1\n"


def chain_packets(seed=37):
    """About 1100 frames of every kind the three NFs tell apart, shuffled (deterministically): TCP
    flows to port 80 (SYN, then data), DNS over UDP, UDP to a port the firewall drops, ICMP echo,
    TCP from a source no SNAT rule covers (the NAT drops it), IPv6 DNS and ARP (the firewall passes
    them, the NAT drops what is not IPv4), a truncated IPv4 header (the firewall drops it). Every
    flow's source port (echo id) is unique, so the NAT keeps it: the output does not depend on the
    seed of its port allocation."""
    scapy = pytest.importorskip("scapy.all")
    Ether, IP, IPv6, TCP, UDP, ICMP, ARP, Raw = (scapy.Ether, scapy.IP, scapy.IPv6, scapy.TCP, scapy.UDP,
                                                  scapy.ICMP, scapy.ARP, scapy.Raw)
    rnd = random.Random(seed)
    eth = Ether(src="02:00:00:37:00:02", dst="02:00:00:37:00:01")
    flows = []

    def body(n):
        return Raw(bytes(rnd.randrange(256) for _ in range(n)))
    for f in range(30):  # TCP to :80, allowed
        src, dst, sport = f"10.0.0.{f % 5 + 2}", f"198.51.100.{f % 3 + 1}", 30000 + f
        pk = [eth / IP(src=src, dst=dst) / TCP(sport=sport, dport=80, flags="S", seq=1000)]
        pk += [eth / IP(src=src, dst=dst, id=i) / TCP(sport=sport, dport=80, flags="A", seq=1001 + i * 100)
               / body(rnd.randint(0, 1400)) for i in range(20)]
        flows.append(pk)
    for f in range(20):  # DNS, allowed
        flows.append([eth / IP(src=f"10.0.0.{f % 4 + 2}", dst="198.51.100.53") / UDP(sport=40000 + f, dport=53)
                      / body(rnd.randint(20, 200)) for _ in range(10)])
    for f in range(10):  # UDP :9999, the firewall's default drop
        flows.append([eth / IP(src="10.0.0.9", dst="198.51.100.9") / UDP(sport=41000 + f, dport=9999) / body(50)
                      for _ in range(5)])
    for f in range(10):  # ping, allowed
        flows.append([eth / IP(src="10.0.0.7", dst="198.51.100.1") / ICMP(id=500 + f, seq=i) / body(56)
                      for i in range(5)])
    flows.append([eth / IP(src="10.9.0.1", dst="198.51.100.1") / TCP(sport=42000 + i, dport=80, flags="S")
                  for i in range(20)])  # allowed, but no SNAT rule
    flows.append([eth / IPv6(src="fd00::2", dst="fd00::53") / UDP(sport=43000 + i, dport=53) / body(40)
                  for i in range(20)])
    flows.append([Ether(src="02:00:00:37:00:02", dst="ff:ff:ff:ff:ff:ff")
                  / ARP(psrc="10.0.0.2", pdst=f"10.0.0.{i + 10}") for i in range(10)])
    flows.append([bytes(eth / IP(src="10.0.0.2", dst="198.51.100.1") / TCP(sport=44000, dport=80))[:24]
                  + bytes(36)] * 5)  # an IPv4 header cut short (padded to 60 bytes)
    # interleave the flows, each in its own order
    queues = [list(f) for f in flows]
    frames = []
    while queues:
        q = rnd.choice(queues)
        frames.append(bytes(q.pop(0)))
        if not q:
            queues.remove(q)
    return frames


def chain_config(workdir, socket_dir, form, inp, out):
    (workdir / "fw.rules").write_text(FW_RULES)
    (workdir / "nat.conf").write_text(NAT_CONF)
    nf = {"wakeup": "block", "batch": 8, "timeout_us": 50}
    cfg = {
        # rings of 2048: the whole pcap (read at once) stays under the chain entry's backpressure threshold
        "sluiced": {"socket_dir": str(socket_dir), "pool_mbufs": 16384, "ring_size": 2048},
        # "lan" starts without its ingress chain (not polled): the pcap flows once everything is attached
        "ports": [{"name": "lan", "vdev": f"net_pcap0,rx_pcap={inp}"},
                  {"name": "wan", "vdev": f"net_pcap1,tx_pcap={out}"}],
        "chains": [{"name": "c", "nfs": ["fw", "nat", "mon"], "exit": "wan"}],
        "nfs": [dict(name="fw", program="firewall", args=["--config", str(workdir / "fw.rules")], **nf),
                dict(name="nat", program="nat", args=["--inside", "lan", "--outside", "wan", "--next",
                                                      "--config", str(workdir / "nat.conf")], **nf),
                dict(name="mon", program="monitor", args=["--records", str(workdir / f"mon-{form}.jsonl")], **nf)],
    }
    if form == "group":
        cfg["groups"] = [{"name": "edge", "nfs": ["fw", "nat", "mon"]}]
    path = workdir / f"{form}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# what the comparison leaves out: how the NF was woken and batched (kicks, sleeps, batches depend on
# timing, and a group's members share one thread), not what it did with the packets
TIMING = ("kicks", "sleeps", "wakeups", "batches", "polls", "spins", "handler")


def nf_figures(nf):
    counters = {k: v for k, v in (nf.get("counters") or {}).items()
                if not (k.startswith("sdk.") and any(t in k for t in TIMING))}
    return {"rx_pkts": nf["rx_pkts"], "tx_pkts": nf["tx_pkts"], "rx_bytes": nf["rx_bytes"],
            "tx_bytes": nf["tx_bytes"], "drops": nf["drops"], "counters": counters}


def run_chain(workdir, form, frames):
    inp, out = workdir / "in.pcap", workdir / f"out-{form}.pcap"
    if not inp.exists():
        write_pcap(inp, frames)
    socket_dir = workdir / f"s-{form}"
    cfg = chain_config(workdir, socket_dir, form, inp, out)
    try:
        r = up(socket_dir, cfg)
        assert "3 NF(s) attached" in r.stdout, r.stdout
        if form == "group":
            assert "1 group process(es) (edge.0)" in r.stdout, r.stdout
            pids = {n["name"]: n["pid"] for n in api(socket_dir, "nfs")["nfs"]}
            assert len(set(pids.values())) == 1 and pids.keys() == {"fw.0", "nat.0", "mon.0"}, pids
        sluice_cli(socket_dir, "port", "chain", "lan", "c")
        wait_until(lambda: next(p for p in api(socket_dir, "stats")["ports"] if p["name"] == "lan")["rx_pkts"]
                   == len(frames), 30, f"{len(frames)} frames read from the pcap")

        last = [None, time.monotonic()]

        def settled():  # nothing lent, nothing moved for half a second
            st = api(socket_dir, "stats")
            fig = [(n["name"], n["rx_pkts"], n["tx_pkts"]) for n in st["nfs"]]
            if st["pool"]["lent"] or fig != last[0]:
                last[:] = [fig, time.monotonic()]
                return None
            return st if time.monotonic() - last[1] >= 0.5 else None
        st = wait_until(settled, 30, "the chain to settle", interval=0.1)
        figures = {n["name"]: nf_figures(n) for n in st["nfs"]}
        ports = {p["name"]: (p["rx_pkts"], p["tx_pkts"], p["tx_bytes"]) for p in st["ports"]}
        assert st["drops"].get("invalid_desc", 0) == 0 and api(socket_dir, "pool_audit")["whole"]
        pipes = st["pipes"]
    finally:
        down(socket_dir)  # sluiced closes its ports: the tx pcap is complete
    return read_pcap(out), figures, ports, pipes


def test_group_chain_same_bytes_and_counters_as_processes(workdir):  # noqa: F811
    need_build("firewall", "nat", "monitor")
    frames = chain_packets()
    out_p, fig_p, ports_p, pipes_p = run_chain(workdir, "processes", frames)
    out_g, fig_g, ports_g, pipes_g = run_chain(workdir, "group", frames)
    # the processes hand packets over through sluiced; the group runs fw -> nat -> mon by calls (fused
    # pipes), so sluiced saw the segment's packets only where a member decided (docs/groups.md)
    assert pipes_p["fused"] == 0, pipes_p
    assert pipes_g["fused"] > 0 and pipes_g["open"] == 2, pipes_g
    # the traffic exercised every path: passes, the firewall's drops, the NAT's drops and translations
    fw, nat, mon = fig_p["fw.0"]["counters"], fig_p["nat.0"]["counters"], fig_p["mon.0"]["counters"]
    assert fw["rule.web"] > 0 and fw["rule.dns"] > 0 and fw["rule.ping"] > 0 and fw["default"] > 0, fw
    assert fw["malformed"] > 0 and fw["non_ip"] > 0 and fw["established"] > 0, fw
    assert nat["translated_out"] > 0 and nat["no_rule"] > 0, nat
    assert 0 < len(out_p) < len(frames) and fig_p["mon.0"]["rx_pkts"] == len(out_p), (len(out_p), fig_p["mon.0"])
    assert mon, fig_p["mon.0"]
    # the same frames, byte for byte and in order
    assert len(out_g) == len(out_p), (len(out_g), len(out_p))
    for i, (a, b) in enumerate(zip(out_p, out_g)):
        assert a == b, f"frame {i} differs: processes {a.hex()} / group {b.hex()}"
    assert ports_g == ports_p
    # every NF's own counters, and sluiced's for it, are the same
    assert fig_g.keys() == fig_p.keys() == {"fw.0", "nat.0", "mon.0"}
    for name in fig_p:
        assert fig_g[name] == fig_p[name], (name, fig_p[name], fig_g[name])


def null_config(socket_dir, group=True):
    """Two chains on endless net_null sources: ca through the group g (members a: fwd, b: count; its
    process pinned to CPU 0), cb through a process NF (x: fwd) beside it."""
    return f"""\
sluiced: {{socket_dir: {socket_dir}, pool_mbufs: 8192}}
ports:
  - {{name: src-a, vdev: "net_null0,size=64,copy=0", chain: ca}}
  - {{name: src-b, vdev: "net_null1,size=64,copy=0", chain: cb}}
  - {{name: sink-a, vdev: net_null2}}
  - {{name: sink-b, vdev: net_null3}}
chains:
  - {{name: ca, nfs: [a, b], exit: sink-a}}
  - {{name: cb, nfs: [x], exit: sink-b}}
""" + ("""\
groups:
  - {name: g, nfs: [a, b], wakeup: block, cpus: "0"}
nfs:
  - {name: a, program: fwd}
  - {name: b, program: count}
""" if group else """\
nfs:
  - {name: a, program: fwd, wakeup: block}
  - {name: b, program: count, wakeup: block}
""") + """\
  - {name: x, program: fwd, wakeup: block}
"""


def port_tx(socket_dir, name):
    return next(p for p in api(socket_dir, "stats")["ports"] if p["name"] == name)["tx_pkts"]


def grows(socket_dir, port, what, timeout=10.0):
    before = port_tx(socket_dir, port)
    return wait_until(lambda: port_tx(socket_dir, port) > before, timeout, f"{what}: {port} tx to grow")


def test_sigkill_of_a_group_restarts_it_members_reattach_nothing_leaks(workdir):  # noqa: F811
    need_build("fwd", "count")
    socket_dir = workdir / "s"
    cfg = workdir / "g.yaml"
    cfg.write_text(null_config(socket_dir))
    try:
        r = up(socket_dir, cfg)
        assert "3 NF(s) attached (x.0 a.0 b.0); 1 group process(es) (g.0)" in r.stdout, r.stdout
        slot = next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")
        assert slot["kind"] == "group" and slot["members"] == ["a.0", "b.0"] and slot["restarts"] == 0, slot
        old = slot["pid"]
        nfs = {n["name"]: n for n in api(socket_dir, "nfs")["nfs"]}
        assert nfs["a.0"]["pid"] == nfs["b.0"]["pid"] == old != nfs["x.0"]["pid"], nfs
        grows(socket_dir, "sink-a", "chain ca through the group")
        grows(socket_dir, "sink-b", "chain cb")

        os.kill(old, signal.SIGKILL)
        t_kill = time.monotonic()

        def restarted():
            s = next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")
            nfs = {n["name"]: n["pid"] for n in api(socket_dir, "nfs")["nfs"]}
            return s if s["restarts"] == 1 and s["pid"] not in (None, old) and s["state"] == "running" and \
                nfs.get("a.0") == nfs.get("b.0") == s["pid"] else None
        slot = wait_until(restarted, 20, "the group restarted with both members attached again")
        assert os.sched_getaffinity(slot["pid"]) == {0}  # groups[].cpus pins every start of the process
        # chain cb never waited for the group: it delivered while the group was down and after
        assert time.monotonic() - t_kill < 20
        grows(socket_dir, "sink-b", "chain cb after the kill")
        try:
            grows(socket_dir, "sink-a", "chain ca after the group's restart")
        except AssertionError as e:  # say why: a service left saturated stops its chains at the entry
            st = api(socket_dir, "stats")
            raise AssertionError(f"{e}; services {[(v['name'], v['instances'], v['saturated'], v['drops']) for v in st['services']]}"
                                 f"; nfs {[(n['name'], n['rx_pkts'], n['lent']) for n in st['nfs']]}") from None
        sup_log = (socket_dir / "logs" / "supervisor.log").read_text()
        assert f"group g.0 (a.0, b.0) (pid {old}) (the group's process) killed by SIGKILL" in sup_log, sup_log
        assert "restarting group g.0 (a.0, b.0)" in sup_log, sup_log
        # a member's log is its group's
        assert os.path.realpath(socket_dir / "logs" / "a.0.log") == str(socket_dir / "logs" / "g.0.log")
        assert (socket_dir / "logs" / "b.0.log").read_text().count("2 members attached") == 2

        # stop the sources: every buffer comes back, each once; nothing was handed over invalid
        sluice_cli(socket_dir, "port", "chain", "src-a", "-")
        sluice_cli(socket_dir, "port", "chain", "src-b", "-")

        def whole():
            a = api(socket_dir, "pool_audit")
            return a if a["whole"] and a["free"] == a["mbufs"] and a["lent"] == 0 else None
        try:
            wait_until(whole, 10, "every buffer back in the pool, each once")
        except AssertionError:
            raise AssertionError(f"pool not whole: {api(socket_dir, 'pool_audit')}") from None
        st = api(socket_dir, "stats")
        assert st["drops"].get("invalid_desc", 0) == 0 and all(n["drops"]["invalid_desc"] == 0 for n in st["nfs"])
    finally:
        down(socket_dir)


def test_status_shows_groups_a_group_scales_a_member_does_not(workdir):  # noqa: F811
    need_build("fwd", "count")
    socket_dir = workdir / "s"
    cfg = workdir / "g.yaml"
    cfg.write_text(null_config(socket_dir))
    try:
        up(socket_dir, cfg)
        pid = next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")["pid"]
        j = json.loads(sluice_cli(socket_dir, "status", "--json").stdout)
        assert j["nf_count"] == 3  # the API's response is all there
        by = {n["name"]: n for n in j["nfs"]}
        assert by["a.0"]["group"] == by["b.0"]["group"] == "g" and by["x.0"]["group"] is None, j["nfs"]
        assert by["a.0"]["group_process"] == "g.0" and by["a.0"]["pid"] == pid and by["a.0"]["attached"]
        assert [(g["name"], g["group"], g["members"], g["pid"], g["state"], g["restarts"]) for g in j["groups"]] \
            == [("g.0", "g", ["a.0", "b.0"], pid, "running", 0)], j["groups"]
        text = sluice_cli(socket_dir, "status").stdout
        rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.strip()}
        assert "GROUP" in rows["NF"] and rows["a.0"][-1] == "g.0" and rows["x.0"][-1] == "-", text
        assert rows["g.0"][:4] == ["g.0", str(pid), "running", "0"] and rows["g.0"][4:] == ["a.0", "b.0"], text
        # stats and top show each NF's group too (the supervisor's, beside sluiced's counters)
        for argv in (["stats"], ["top", "--iterations", "1", "--interval", "0.2"]):
            text = sluice_cli(socket_dir, *argv).stdout
            rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.strip()}
            head = next(ln.split() for ln in text.splitlines() if ln.split()[:2] in (["NAME", "SERVICE"], ["NF", "SERVICE"]))
            assert head[-1] == "GROUP" and rows["a.0"][-1] == rows["b.0"][-1] == "g.0" and rows["x.0"][-1] == "-", text
        # a member is no process of its own: it cannot be scaled (or stopped) alone ...
        r = sluice_cli(socket_dir, "nf", "scale", "a", "2", check=False)
        assert r.returncode == 1 and "service 'a' is in group 'g'" in r.stderr, r.stdout + r.stderr
        # ... the group scales as a service does: process g.1 hosts a.1 and b.1, replicas of a and b
        r = sluice_cli(socket_dir, "nf", "scale", "g", "2", "--json", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads(r.stdout)
        assert res["started"] == ["g.1"] and res["instances"] == ["g.0", "g.1"], res
        assert res["services"] == {"a": ["a.0", "a.1"], "b": ["b.0", "b.1"]}, res
        nfs = {n["name"]: n["pid"] for n in api(socket_dir, "nfs")["nfs"]}
        g1 = next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.1")
        assert nfs["a.1"] == nfs["b.1"] == g1["pid"] != pid and g1["members"] == ["a.1", "b.1"], (nfs, g1)
        # back to one: g.1's members leave their services, are drained, then its process stops
        r = sluice_cli(socket_dir, "nf", "scale", "g", "1", check=False)
        assert r.returncode == 0 and "g.1 drained and stopped" in r.stdout, r.stdout + r.stderr
        assert "group g: 1 process(es); service a: 1 instance(s) (a.0); service b: 1 instance(s) (b.0)" \
            in r.stdout, r.stdout
        assert [n["name"] for n in state(socket_dir)["nfs"] if n.get("kind") == "group"] == ["g.0"]
        assert not {"a.1", "b.1"} & {n["name"] for n in api(socket_dir, "nfs")["nfs"]}
        assert next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")["pid"] == pid
        # the process NF beside it scales as before
        r = sluice_cli(socket_dir, "nf", "scale", "x", "2", check=False)
        assert r.returncode == 0 and "x.1 attached" in r.stdout, r.stdout + r.stderr
        # `sluice restart`: the members re-attach by themselves, like process NFs
        r = sluice_cli(socket_dir, "restart")
        assert "4 NF(s) attached again" in r.stdout, r.stdout
        assert next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")["pid"] == pid
        # `sluice reload` with a member's process settings changed restarts its group's process
        new = workdir / "g2.yaml"
        new.write_text(cfg.read_text().replace("{name: b, program: count}", "{name: b, program: count, batch: 16}")
                       .replace("{name: x, program: fwd, wakeup: block}",
                                "{name: x, program: fwd, wakeup: block, instances: 2}"))
        r = sluice_cli(socket_dir, "reload", new)
        assert "restart the instances of b (batch changed)" in r.stdout, r.stdout
        slot = next(n for n in state(socket_dir)["nfs"] if n["name"] == "g.0")
        assert slot["pid"] != pid and slot["state"] == "running", slot
        assert "-- count --name b.0 --service b --batch 16 " in (socket_dir / "logs" / "g.0.log").read_text()
        nfs = {n["name"]: n["pid"] for n in api(socket_dir, "nfs")["nfs"]}
        assert nfs["a.0"] == nfs["b.0"] == slot["pid"], nfs
        # ... and a change of the groups themselves is refused, naming them
        bad = workdir / "g3.yaml"
        bad.write_text(new.read_text().replace("nfs: [a, b], wakeup: block", "nfs: [a], wakeup: block"))
        r = sluice_cli(socket_dir, "reload", bad, check=False)
        assert r.returncode == 1 and "groups: cannot change live" in r.stderr, r.stdout + r.stderr
    finally:
        down(socket_dir)


def test_status_without_groups_has_no_group_fields(workdir):  # noqa: F811
    need_build("fwd")
    socket_dir = workdir / "s"
    cfg = workdir / "p.yaml"
    cfg.write_text(null_config(socket_dir, group=False))
    try:
        up(socket_dir, cfg)
        j = json.loads(sluice_cli(socket_dir, "status", "--json").stdout)
        assert "nfs" not in j and "groups" not in j, j
        text = sluice_cli(socket_dir, "status").stdout
        assert "GROUP" not in text, text
    finally:
        down(socket_dir)
