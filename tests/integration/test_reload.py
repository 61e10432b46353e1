"""`sluice reload FILE` (issue 35; docs/architecture.md "Reload"): the plan, live application under
traffic without touching what did not change, and refusals that change nothing.

Traffic: chain `a` = [gen, fwd, sink] paces exactly N packets through two NFs (src_a, a net_null
port with no ingress chain at first, is the buffer supply); sink counts every one. Chain `b` carries
net_null traffic through `count` at full rate. The reload edits chain b, scales `count`, adds a rule,
changes a policy and removes a service while gen runs: sink must still count exactly N, and the pool
audit must be whole after every step.
"""

import time

import pytest

from harness import BUILD, sluice_api as api, sluice_cli as cli, wait_until, workdir  # noqa: F401 (fixture)
from sluice import config as sconfig
from sluice import reload as sreload

N = 30000
RATE = 10000  # 3 s of traffic; a 2048-slot ring holds 200 ms of it (an NF descheduled while others start)

BASE = """\
sluiced: {{socket_dir: {sd}, pool_mbufs: 16384, ring_size: 2048}}
ports:
  - {{name: src_a, vdev: "net_null0,size=64,copy=0"}}
  - {{name: out_a, vdev: "net_null1"}}
  - {{name: src_b, vdev: "net_null2,size=64,copy=0"}}
  - {{name: out_b, vdev: "net_null3"}}
chains:
  - {{name: a, nfs: [gen, fwd, sink], exit: out_a}}
  - {{name: b, nfs: [{b_nfs}], exit: out_b}}
nfs:
  - {{name: gen, program: gen, wakeup: poll, args: [--rate-pps, "{rate}", --count, "{n}", --size, "128"]}}
  - {{name: fwd, program: fwd, wakeup: block}}
  - {{name: sink, program: sink, wakeup: block, args: [--action, drop]}}
  - {{name: count, program: count, wakeup: block, instances: {count_n}, policy: {policy}}}
{extra_nfs}steering:
  malformed: {{chain: a}}  # gen's supply (net_null's all-zero frames) once a rule makes sluiced parse it
{rules}"""


def text(sd, b_nfs="count, fwdb", count_n=1, policy="flow", extra_nfs="  - {name: fwdb, program: fwd, wakeup: block}\n",
         rules=""):
    return BASE.format(sd=sd, b_nfs=b_nfs, count_n=count_n, policy=policy, extra_nfs=extra_nfs, rules=rules,
                       rate=RATE, n=N)


def deployment(sd):
    """What a refused reload must leave exactly as it was."""
    ports = [{k: p[k] for k in ("id", "name", "vdev", "chain")} for p in api(sd, "ports")["ports"]]
    rules = [{k: v for k, v in r.items() if k != "hits"} for r in api(sd, "rules")["rules"]]
    svcs = [{k: s[k] for k in ("name", "policy", "instances")} for s in api(sd, "stats")["services"]]
    nfs = sorted((n["name"], n["pid"]) for n in api(sd, "nfs")["nfs"])
    cfg = (sd / "config.json").read_text()
    return ports, api(sd, "chains")["chains"], rules, svcs, nfs, cfg


def whole(sd):
    a = api(sd, "pool_audit")
    assert a["whole"], a


@pytest.fixture
def up(workdir):  # noqa: F811
    sd = workdir / "s"
    started = []

    def start(cfg_text):
        f = workdir / "sluice.yaml"
        f.write_text(cfg_text)
        started.append(1)
        cli(sd, "up", f, "-d", "--build-dir", BUILD)
        return sd
    yield start
    if started:
        cli(sd, "down", check=False)


def test_reload_under_traffic_touches_only_what_changed(up, workdir):  # noqa: F811
    sd = up(text(workdir / "s"))
    before = {n["name"]: n["pid"] for n in api(sd, "nfs")["nfs"]}
    # gen's supply starts now: exactly N packets through chain a from here on
    api(sd, "port_chain_set", port="src_a", chain="a")
    new = workdir / "new.yaml"
    # chain b edited (fwdb out), count scaled to 2 with another policy, a rule added, fwdb removed;
    # src_a keeps the ingress chain it got at runtime
    new.write_text(text(workdir / "s", b_nfs="count", count_n=2, policy="round_robin", extra_nfs="",
                        rules="rules:\n  - {priority: 5, match: {proto: udp, dst_port: 9}, action: drop}\n")
                   .replace('{name: src_a, vdev: "net_null0,size=64,copy=0"}',
                            '{name: src_a, vdev: "net_null0,size=64,copy=0", chain: a}'))
    dry = cli(sd, "reload", new, "--dry-run")
    assert "dry run: nothing was applied" in dry.stdout
    assert "scale count 1 -> 2" in dry.stdout and "change chain b: count exit out_b" in dry.stdout, dry.stdout
    assert "remove service fwdb" in dry.stdout and "replace the rules (0 -> 1)" in dry.stdout, dry.stdout
    assert "chain a" not in dry.stdout and "gen" not in dry.stdout, dry.stdout  # unchanged: not in the plan
    wait_until(lambda: api(sd, "nfs")["nfs"] and
               next(n for n in api(sd, "nfs")["nfs"] if n["name"] == "sink.0")["rx_pkts"] > N // 10, 20,
               "traffic through chain a")
    r = cli(sd, "reload", new)
    assert "applied 5 step(s)" in r.stdout, r.stdout
    whole(sd)

    def sink_rx():
        return next(n for n in api(sd, "nfs")["nfs"] if n["name"] == "sink.0")["rx_pkts"]
    deadline = time.monotonic() + 30
    while sink_rx() < N and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    st = api(sd, "stats")
    # not one packet of the unchanged chain lost, none duplicated
    assert sink_rx() == N, ([(n["name"], n["rx_pkts"], n["drops"]) for n in st["nfs"]], st["drops"],
                            [(s["name"], s["drops"]) for s in st["services"]])
    whole(sd)
    nfs = {n["name"]: n["pid"] for n in api(sd, "nfs")["nfs"]}
    for name in ("gen.0", "fwd.0", "sink.0", "count.0"):  # untouched processes
        assert nfs[name] == before[name], name
    assert "count.1" in nfs and "fwdb.0" not in nfs
    chains = {c["name"]: c for c in api(sd, "chains")["chains"]}
    assert chains["b"]["nfs"] == ["count"] and chains["a"]["nfs"] == ["gen", "fwd", "sink"]
    assert [r["match"] for r in api(sd, "rules")["rules"]] == [{"proto": 17, "dst_port": [9, 9]}]
    assert next(s for s in api(sd, "stats")["services"] if s["name"] == "count")["policy"] == "round_robin"
    # the new config is the deployment's now: applying it again does nothing; a restart starts from it
    assert "nothing to do" in cli(sd, "reload", new).stdout
    assert '"round_robin"' in (sd / "config.json").read_text()


def test_refused_and_broken_reloads_change_nothing(up, workdir):  # noqa: F811
    sd = up(text(workdir / "s"))
    was = deployment(sd)
    bad = workdir / "bad.yaml"
    cases = [
        # not live: a sluiced setting, a new service, a port's device, a removed chain
        (text(workdir / "s").replace("ring_size: 2048", "ring_size: 4096"), 1, "sluiced.ring_size: 2048 -> 4096"),
        (text(workdir / "s", extra_nfs="  - {name: fwdb, program: fwd, wakeup: block}\n"
              "  - {name: newsvc, program: fwd}\n"), 1, "a new service cannot be added live"),
        (text(workdir / "s").replace('net_null3"', 'net_null7"'), 1, "a port's device cannot change live"),
        (text(workdir / "s").replace("  - {name: b, nfs: [count, fwdb], exit: out_b}\n", "")
         , 1, "sluiced cannot delete a chain live"),
        # also refused as a whole: one change that can go live next to one that cannot
        (text(workdir / "s", count_n=2).replace("pool_mbufs: 16384", "pool_mbufs: 8192"), 1,
         "sluiced.pool_mbufs"),
        # garbage, a half-written file, a config error naming the field
        ("\x00\x01garbage: [", 2, "config error"),
        (text(workdir / "s")[:150], 2, "config error"),
        (text(workdir / "s").replace("exit: out_b", "exit: nosuch"), 2, "chains[1].exit"),
    ]
    for body, rc, msg in cases:
        bad.write_text(body)
        r = cli(sd, "reload", bad, check=False)
        assert r.returncode == rc, (msg, r.stdout, r.stderr)
        assert msg in r.stderr, (msg, r.stderr)
        assert "nothing was changed" in r.stderr, r.stderr
        assert deployment(sd) == was, msg
    whole(sd)


def test_plan_orders_steps_and_names_refusals():
    """reload.plan alone (no sluiced): step order, and every refusal names its field."""
    base = sconfig.load_string(text("/run/x"), check_programs=False)
    live = {"ports": [dict(p) for p in base["ports"]], "chains": [dict(c) for c in base["chains"]], "rules": [],
            "services": [{"name": n["name"], "policy": n["policy"]} for n in base["nfs"]]}
    new = sconfig.load_string(text("/run/x", b_nfs="count", extra_nfs="").replace(
        "  - {name: out_b", "  - {name: extra, vdev: \"net_null5\"}\n  - {name: out_b"), check_programs=False)
    p = sreload.plan(base, new, live)
    assert not p.refused
    kinds = [(s["kind"], s["text"].split(":")[0]) for s in p.steps]
    assert kinds == [("api", "add port extra (net_null5)"), ("api", "change chain b"),
                     ("nf_remove", "remove service fwdb (drain and stop its instances)")], kinds
    assert sreload.plan(base, base, live).steps == []
    gone = sconfig.load_string(text("/run/x").replace('  - {name: out_b, vdev: "net_null3"}\n', "")
                               .replace("exit: out_b", "exit: null"), check_programs=False)
    p = sreload.plan(base, gone, live)
    assert [s["request"] for s in p.steps if s["kind"] == "api"][-1] == {"cmd": "port_del", "name": "out_b"}
    assert p.steps[0]["request"]["cmd"] == "chain_set"  # the chain leaves the port before it goes
