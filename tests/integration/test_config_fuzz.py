"""Property-based tests of the two config validators (issue 40, "Python config fuzzing").

YAML configs are generated *near* the schema (python/sluice/config.py `normalize`, README's sample): a
valid config of ports, chains, NFs, rules, domains, groups, steering and the socket service (with its
user stack), whose names come from one small pool so that references between sections (ports[].chain,
chains[].nfs and .exit, rules' actions and in_port, nfs[].domain, .may_send and .group, groups[].nfs,
stack.user.service and .egress_chain) meet and miss; then 0..4 mutations, each at a random place in
the document: a value replaced by a wrong type, an out-of-range or huge number, a bad or dangling name,
unicode, NUL or a long string; a key deleted; an unknown key added; an entry duplicated.

Property A (the CLI's validator): `sluice config check` (config.load_string) raises nothing but a
ConfigError, and the error is field-named (`field_named` below).

Property B (the two validators agree): every config the CLI accepts, converted by to_sluiced_json the
way `sluice up` does (with attach tokens), is accepted by sluiced's own loader: `sluiced
--check-config FILE --socket-dir DIR` (config_load, the chains' registry and the rules, as at start-up,
without EAL). The vdevs and lcores are left to start-up: DPDK decides those on the machine.

make test runs a fixed set of examples (derandomize=True: reproducible, ~10 s);
SLUICE_CONFIG_FUZZ_EXAMPLES=N runs N random ones (e.g. 20000 for a long run).
Every bug found stays below as an @example.
"""

import copy
import json
import os
import re
import subprocess
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluice import config
from sluice.config import ConfigError

from harness import SLUICED

LONG_RUN = int(os.environ.get("SLUICE_CONFIG_FUZZ_EXAMPLES", "0") or 0)
SETTINGS = settings(
    max_examples=LONG_RUN or 400,
    derandomize=not LONG_RUN,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)

# ---------------------------------------------------------------- what a field-named error is
#
# ConfigError(path, msg), str() "path: msg" (python/sluice/errors.py). Its path names the field at
# fault, as in the messages config.py and steering.py write:
#   sluiced.ring_size   ports[1].vdev   chains[0].nfs[2]   rules[3].match.dst_port   stack.user.addresses[0]
# i.e. a top-level section (or `config` for the document itself), then .key and [index] steps, keys being
# schema keys (lower-case words). Where the error is that a key is unknown (or a duplicate YAML key, or an
# action that is none of chain/service/port), the last step is that key as the user wrote it, whatever
# its text. A path of its own is optional only for the document as a whole: YAML that does not parse,
# or an empty document.

SECTIONS = ("config", "sluiced", "ports", "chains", "nfs", "rules", "steering", "domains", "guests", "stack",
            "groups", "metrics", "web")
STEP = r"(?:\.[a-z][a-z0-9_]*|\[\d+\])"
FIELD_RE = re.compile(r"(?:%s)%s*\Z" % ("|".join(SECTIONS), STEP))
ANY_KEY_MSGS = ("unknown key", "unknown field", "unknown action", "duplicate key")
WHOLE_DOC_MSGS = ("invalid YAML", "<string> is empty")


def field_named(e):
    """Why e is not a field-named ConfigError, or None when it is."""
    path, msg = e.path, e.msg
    if not isinstance(path, str) or not isinstance(msg, str) or not msg.strip():
        return f"path {path!r} and message {msg!r} must be strings, the message non-empty"
    if str(e) != (f"{path}: {msg}" if path else msg):
        return f"str() {str(e)!r} is not 'path: message'"
    if not path:
        return None if msg.startswith(WHOLE_DOC_MSGS) else f"no field path: {msg!r}"
    if FIELD_RE.match(path):
        return None
    if msg.startswith(ANY_KEY_MSGS):
        # the offending key is the last step, or the whole path at the top level
        head = path.rsplit(".", 1)[0] if "." in path else None
        if head is None or FIELD_RE.match(head):
            return None
    return f"{path!r} is not a field path (message {msg!r})"


# ---------------------------------------------------------------- configs near the schema

NAMES = ["a", "b", "c", "in", "out", "fw", "stack", "blue", "edge", "default"]
name = st.sampled_from(NAMES)
builtin = st.sampled_from(config.BUILTIN_NFS)

WEIRD_STRINGS = [
    "", " ", "any", "drop", "A", "a b", "a/b", "a.b", "-a", "a" * 31, "a" * 32, "b" * 300, "é", "é" * 40,
    "Ünïcødé", "名前", "\x00", "a\x00b", "\n", "²", "0,²", "0,1", "0,0", "0,1,2", "1-3", "on", "off", "yes",
    "null", "~", "0x10", "1e9", "pci:0000:00:01.0", "pci:0000:00:01.9", "net_null9", "net_null0,qpairs=²",
    "net_af_packet0,iface=x,qpairs=2", "net_vhost0,iface=/tmp/v.sock", "net_vhost0,iface=v.sock",
    "net_vhost0,iface=/tmp/v.sock,queues=2", "/", "/tmp/" + "d" * 90, "/tmp/" + "é" * 45, "relative/dir",
    "10.0.0.1/24", "fd00::1/64", "10.0.0.0/8", "::/0", "224.0.0.1/4", "10.0.0.1", "02:00:00:00:00:01",
    "01:00:00:00:00:01", "syn,!ack", "syn,!syn", "tcp", "udp", "1000-2000", "2000-1000", "70000",
    "127.0.0.1:9464", ":0", "[::1]:²", "(", "a|b", "\\", "strict", "none", "ro", "rw", "flow",
    "round_robin", "least_loaded", "block", "adaptive", "always", "never", "fifo",
]
weird_scalar = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 70000),
    st.sampled_from([-1, 0, 1, 2, 15, 16, 63, 64, 65, 1000, 1023, 1024, 1025, 2047, 2048, 2049, 4096, 9216,
                     16384, 16385, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1, 1 << 31, 1 << 32, 1 << 63,
                     1 << 64, 10 ** 30, -(1 << 63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NAMES), st.sampled_from(WEIRD_STRINGS), st.sampled_from(config.BUILTIN_NFS),
    st.text(max_size=12),
)
weird = st.one_of(
    weird_scalar,
    st.lists(weird_scalar, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(NAMES + ["name", "nfs", "chain", "set", "listen", "user"]),
                              st.text(max_size=5), st.integers(-2, 2)), weird_scalar, max_size=3),
)
SCHEMA_KEYS = ["name", "vdev", "chain", "queues", "rx_desc", "tx_desc", "mtu", "offloads", "nfs", "exit",
               "program", "args", "instances", "wakeup", "batch", "timeout_us", "spin_us", "restart",
               "policy", "cpu_weight", "cpus", "sandbox", "quota", "may_send", "domain", "trusted", "access",
               "pool_mbufs", "vm", "group", "match", "action", "priority", "payload", "user", "addresses",
               "egress_chain", "service", "gateway", "supply", "ring_kb", "slots", "poll_us", "direct",
               "listen", "buffer_size", "workers", "lcores", "ring_size", "max_nfs", "malformed", "flows",
               "memory", "vcpus", "ip", "gw", "command", "kernel", "initrd", "regex", "caseless", "depth", "pattern", "tcp_flags", "in_port", "bogus", "Name", "ünï"]


def _pick(draw, names, dangle=8):
    """One of names, now and then (1 in dangle) any pool name: a reference that may dangle."""
    if not names or draw(st.integers(0, dangle - 1)) == 0:
        return draw(name)
    return draw(st.sampled_from(sorted(names)))


@st.composite
def base_config(draw):
    """A config that is mostly valid: names unique per section and references to what is declared,
    with now and then a reference to any name of the pool."""
    port_names = draw(st.lists(name, min_size=1, max_size=4, unique=True))
    nf_names = draw(st.lists(name.filter(lambda n: n != "stack"), max_size=4, unique=True))
    chain_names = draw(st.lists(name, max_size=3, unique=True)) if nf_names else []
    dom_names = draw(st.lists(name.filter(lambda n: n != "default"), max_size=2, unique=True))
    cfg = {}
    sl = {}
    if draw(st.booleans()):
        sl = draw(st.fixed_dictionaries({}, optional={
            "pool_mbufs": st.sampled_from([16384, 65536]),
            "ring_size": st.sampled_from([16, 256, 1024, 4096]), "max_nfs": st.integers(8, 128),
            "buffer_size": st.sampled_from([2048, 2112, 9216, 16384]),
            "huge_pages": st.sampled_from(["auto", "on", "off", True, False]),
            "socket_dir": st.sampled_from(["/run/sluice", "/tmp/slt-x/", "/tmp/" + "d" * 70]),
            "pipes": st.booleans(), "nf_sched": st.sampled_from(["other", "fifo"])}))
        workers = draw(st.integers(1, 2))
        if workers == 2 or draw(st.booleans()):
            sl["workers"] = workers
            sl["lcores"] = draw(st.sampled_from(["0,1,1", "0,1,2", [0, 1, 2]] if workers == 2 else ["0,1", "1, 0", [0, 1]]))
        cfg["sluiced"] = sl
    ring = sl.get("ring_size", 1024)
    ports = []
    for i, pn in enumerate(port_names):
        p = {"name": pn, "vdev": draw(st.sampled_from([f"net_null{i}", f"net_tap{i},iface=slt-f{i}", f"net_ring{i}",
                                                        f"pci:0000:0{i}:00.0", f"net_vhost{i},iface=/tmp/slt-v{i}.sock"]))}
        if chain_names and draw(st.booleans()):
            p["chain"] = _pick(draw, chain_names)
        if draw(st.integers(0, 4)) == 0:
            p.update(draw(st.fixed_dictionaries({}, optional={
                "rx_desc": st.sampled_from([64, 512, 1024]), "mtu": st.sampled_from([1500, 2000]),
                "offloads": st.lists(st.sampled_from(config.PORT_OFFLOADS), max_size=2, unique=True)})))
        ports.append(p)
    cfg["ports"] = ports
    nfs = []
    for nn in nf_names:
        n = {"name": nn, "program": draw(builtin)}
        n.update(draw(st.fixed_dictionaries({}, optional={
            "instances": st.integers(1, 3), "wakeup": st.sampled_from(config.WAKEUP_MODES),
            "args": st.lists(st.sampled_from(["-v", "--rate", "10", "é", 5]), max_size=3),
            "policy": st.sampled_from(["flow", "least_loaded", "round_robin"]),
            "access": st.sampled_from(["rw", "ro"]), "sandbox": st.sampled_from(["strict", "none"]),
            "quota": st.sampled_from([1, 16, ring]), "restart": st.sampled_from(config.RESTART_POLICIES),
            "cpu_weight": st.integers(1, 10000), "timeout_us": st.integers(0, 1000), "batch": st.integers(1, 64)})))
        kind = draw(st.integers(0, 9))
        if kind == 0:
            n["trusted"] = False
            if draw(st.booleans()):
                n["pool_mbufs"] = draw(st.sampled_from([1024, 4096]))
        elif kind == 1 and dom_names:
            n["domain"] = _pick(draw, dom_names + ["default"])
        elif kind == 2:
            n["may_send"] = draw(st.one_of(st.just("any"), st.lists(st.sampled_from(nf_names + port_names), max_size=3)))
        elif kind == 3:
            n["vm"] = draw(st.one_of(st.just(True), st.fixed_dictionaries({}, optional={"memory": st.integers(64, 512)})))
            n.pop("sandbox", None), n.pop("access", None)
        nfs.append(n)
    if nfs or draw(st.booleans()):
        cfg["nfs"] = nfs
    chains = []
    for cn in chain_names:
        c = {"name": cn, "nfs": [_pick(draw, nf_names, 20) for _ in range(draw(st.integers(1, 4)))]}
        if draw(st.booleans()):
            c["exit"] = _pick(draw, port_names)
        chains.append(c)
    if chains or draw(st.booleans()):
        cfg["chains"] = chains
    action = st.one_of(st.just("drop"),
                       st.builds(lambda x: {"chain": x}, st.sampled_from(chain_names or ["c"])),
                       st.builds(lambda x: {"service": x}, st.sampled_from(nf_names or ["a"])),
                       st.builds(lambda x: {"port": x}, st.sampled_from(port_names)))
    v4 = draw(st.booleans())
    if draw(st.booleans()):
        cfg["rules"] = draw(st.lists(st.fixed_dictionaries({"action": action}, optional={
            "name": st.sampled_from(["r1", "R.2", "web-in"]), "priority": st.integers(0, 10),
            "match": st.fixed_dictionaries({}, optional={
                "in_port": st.sampled_from(port_names), "proto": st.sampled_from(["tcp", "udp", 6, "icmp"]),
                "dst_port": st.sampled_from([80, "1000-2000", [1, 2]]),
                "src": st.just("10.0.0.0/8" if v4 else "fd00::/8"),
                "dst": st.just("192.168.0.0/16" if v4 else "2001:db8::/32"), "vlan": st.integers(0, 4095),
                "src_mac": st.just("02:00:00:00:00:01"), "tcp_flags": st.sampled_from(["syn,!ack", {"set": 2}]),
                "dscp": st.integers(0, 63), "ethertype": st.sampled_from([0x800, "0x86dd"])}),
            "payload": st.fixed_dictionaries({"pattern": st.sampled_from(["GET ", "é", "a.b", "x" * 1024, "é" * 1000])},
                                             optional={"caseless": st.booleans(), "depth": st.integers(1, 1500)})}),
            max_size=3))
    if draw(st.integers(0, 3)) == 0:
        cfg["steering"] = draw(st.fixed_dictionaries({}, optional={
            "malformed": action, "flows": st.integers(0, 1 << 20), "flow_idle_ms": st.integers(1, 60000)}))
    if dom_names:
        cfg["domains"] = [draw(st.fixed_dictionaries({"name": st.just(d)}, optional={
            "pool_mbufs": st.sampled_from([1024, 4096]), "buffer_size": st.sampled_from([2048, 9216])}))
            for d in dom_names]
    if nf_names and draw(st.integers(0, 4)) == 0:
        g = draw(name.filter(lambda n: n not in nf_names))
        members = draw(st.lists(st.sampled_from(nf_names), min_size=1, max_size=2, unique=True))
        if draw(st.booleans()):
            cfg["groups"] = [{"name": g, "nfs": members}]
        else:
            for n in nfs:
                if n["name"] in members:
                    n["group"] = g
    if draw(st.integers(0, 3)) == 0:
        stack = draw(st.one_of(st.booleans(), st.none(), st.fixed_dictionaries({}, optional={
            "ring_kb": st.sampled_from([4, 256]), "slots": st.integers(1, 2048), "poll_us": st.integers(0, 100),
            "direct": st.booleans()})))
        if isinstance(stack, dict) and draw(st.booleans()):
            svc = draw(st.sampled_from(["stack", "lwip"]))
            stack["user"] = draw(st.fixed_dictionaries({
                "addresses": st.lists(st.sampled_from(["10.0.0.1/24", "fd00::1/64"]), min_size=1, max_size=2, unique=True),
                "egress_chain": st.just("s-out")}, optional={"gateway": st.just("10.0.0.254"),
                                                           "mtu": st.integers(576, 1500),
                                                           "mac": st.just("02:00:0a:00:00:01"),
                                                           "supply": st.integers(16, 4096)}))
            if svc != "stack":
                stack["user"]["service"] = svc
            cfg.setdefault("chains", []).extend([{"name": "s-out", "nfs": [svc], "exit": port_names[0]},
                                                 {"name": "s-in", "nfs": [svc]}])
        cfg["stack"] = stack
    vhost = [p["name"] for p in ports if p["vdev"].startswith("net_vhost")]
    if vhost and draw(st.booleans()):
        cfg["guests"] = [draw(st.fixed_dictionaries({"name": st.sampled_from(["vm1", "guest-a"]), "port": st.just(vhost[0])},
                                                    optional={"memory": st.integers(64, 1024), "ip": st.just("10.0.0.2/24"),
                                                              "gw": st.just("10.0.0.1"), "mtu": st.integers(68, 9000),
                                                              "mac": st.just("52:54:00:12:34:56"),
                                                              "command": st.just(["/bin/sh", "-c", "true"])}))]
    for k, listen in (("metrics", "127.0.0.1:9464"), ("web", "[::1]:9999")):
        if draw(st.integers(0, 4)) == 0:
            cfg[k] = draw(st.one_of(st.booleans(), st.just({"listen": listen})))
    return cfg


def _places(doc, path=()):
    """Every (container, key) in doc, the document itself as (None, None)."""
    yield (None, None, path)
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (doc, k, path + (k,))
            yield from list(_places(v, path + (k,)))[1:]
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield (doc, i, path + (i,))
            yield from list(_places(v, path + (i,)))[1:]


@st.composite
def mutated(draw, doc):
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, 4) | st.just(0))):
        places = list(_places(doc))
        parent, key, _ = draw(st.sampled_from(places))
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "duplicate", "rename"]))
        if parent is None:
            target = doc
            if op == "replace" and draw(st.integers(0, 9)) == 0:
                doc = draw(weird)
                continue
        else:
            target = parent[key]
        if op == "replace" and parent is not None:
            parent[key] = draw(weird)
        elif op == "delete" and parent is not None:
            del parent[key]
        elif op == "add" and isinstance(target, dict):
            target[draw(st.sampled_from(SCHEMA_KEYS) | st.text(max_size=4))] = draw(weird)
        elif op == "add" and isinstance(target, list):
            target.append(draw(weird))
        elif op == "duplicate" and isinstance(target, list) and target:
            # one more copy of an entry, or many (past sluiced's limits: 32 ports, 250 services a chain)
            one = draw(st.sampled_from(target))
            target.extend(copy.deepcopy(one) for _ in range(draw(st.sampled_from([1, 1, 1, 40, 300]))))
        elif op == "rename" and isinstance(target, (dict, str)):
            # a reference that dangles or collides: another name from the pool (or one too long)
            if isinstance(target, dict) and "name" in target:
                target["name"] = draw(name | st.just("x" * 31))
            elif parent is not None:
                parent[key] = draw(name)
    return doc


configs = base_config().flatmap(mutated)


def to_yaml(doc):
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


# ---------------------------------------------------------------- the properties


def sluiced_check(cfg, tmp):
    """sluiced --check-config on what `sluice up` would hand it: (accepted, its answer)."""
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        f.write(config.to_sluiced_json(cfg, tokens=config.new_tokens(cfg)))
    cp = subprocess.run([str(SLUICED), "--check-config", path, "--socket-dir", cfg["sluiced"]["socket_dir"]],
                        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    return cp.returncode == 0 and cp.stdout.strip() == "ok", (cp.stdout + cp.stderr).strip()


@pytest.fixture(scope="module")
def tmp():
    if not SLUICED.exists():
        pytest.fail(f"{SLUICED} is not built (make build)")
    with tempfile.TemporaryDirectory(prefix="slt-cfgfuzz-") as d:
        yield d


STATS = {"examples": 0, "accepted": 0}


def check_both(doc, tmp):
    STATS["examples"] += 1
    text = to_yaml(doc)
    try:
        cfg = config.load_string(text, check_programs=True, check_devices=False)
    except ConfigError as e:
        why = field_named(e)
        assert why is None, f"not a field-named error: {why}\nconfig:\n{text}"
        return
    # any other exception propagates: hypothesis reports it with the config that raised it
    STATS["accepted"] += 1
    ok, answer = sluiced_check(cfg, tmp)
    m = re.match(r"config error: rules\[(\d+)\]\.payload\.pattern: ", answer)
    if not ok and m and cfg["rules"][int(m.group(1))]["payload"].get("regex"):
        return  # the one gap left: a regex's syntax is Hyperscan's, which only sluiced has (docs/steering.md)
    assert ok, f"`sluice config check` accepts, sluiced refuses: {answer}\nconfig:\n{text}"


P1 = [{"name": "a", "vdev": "net_null0"}]


@SETTINGS
@given(doc=configs)
# an empty key: its error named no field ("unknown key" with path "")
@example(doc={"ports": [{"name": "a", "vdev": "net_null0"}], "": None})
@example(doc={"ports": [{"name": "a", "vdev": "net_null0", " ": 1}]})
# an untrusted NF named default: its private domain "default" is the default domain (sluiced: duplicate domain)
@example(doc={"ports": [{"name": "a", "vdev": "net_null0"}],
              "nfs": [{"name": "default", "program": "fwd", "trusted": False}]})
# str.isdigit() takes '²', int() does not: ValueError out of normalize
@example(doc={"ports": P1, "sluiced": {"lcores": "0,²"}})
@example(doc={"ports": [{"name": "a", "vdev": "net_af_packet0,iface=x,qpairs=²"}]})
@example(doc={"ports": P1, "nfs": [{"name": "x", "program": "fwd", "cpus": "²"}]})
@example(doc={"ports": P1, "metrics": {"listen": "1.2.3.4:²"}})
# sorted() over a mapping's keys of mixed types: TypeError
@example(doc={"ports": P1, "rules": [{"match": {"tcp_flags": {1: 2, "a": 3}}, "action": "drop"}]})
# accepted by the CLI, refused by sluiced: --socket-dir over 80 bytes; a pattern of 1024 characters
# but more bytes; a vdev of 256 bytes or more; NUL (sluiced's JSON loader refuses \u0000) or a lone
# surrogate in a string; 33 ports; a chain of 251 services
@example(doc={"ports": P1, "sluiced": {"socket_dir": "/tmp/" + "d" * 85}})
@example(doc={"ports": P1, "sluiced": {"socket_dir": "/tmp/" + "é" * 40}})
@example(doc={"ports": P1, "rules": [{"payload": {"pattern": "é" * 1000}, "action": "drop"}]})
@example(doc={"ports": P1, "rules": [{"payload": {"pattern": "a\x00"}, "action": "drop"}]})
@example(doc={"ports": [{"name": "a", "vdev": "net_null0,x=" + "y" * 300}]})
@example(doc={"ports": P1, "nfs": [{"name": "x", "program": "fwd", "args": ["a\x00b"]}]})
@example(doc={"ports": P1, "nfs": [{"name": "x", "program": "fwd", "args": ["\ud800"]}]})
@example(doc={"ports": P1, "nfs": [{"name": "x", "program": "a\x00b"}]})
@example(doc={"ports": [{"name": f"p{i}", "vdev": f"net_null{i}"} for i in range(33)]})
@example(doc={"ports": P1, "nfs": [{"name": "x", "program": "fwd"}], "chains": [{"name": "c", "nfs": ["x"] * 251}]})
def test_config_check_and_sluiced_agree(doc, tmp):
    check_both(doc, tmp)


def test_enough_accepted():
    """The generator stays near the schema: a fair share of its configs are valid, so property B is tried."""
    if STATS["examples"]:
        print(f"config fuzz: {STATS['examples']} configs, {STATS['accepted']} accepted and checked by sluiced")
        assert STATS["accepted"] >= STATS["examples"] // 10, STATS


def test_field_named_definition():
    """The definition above, on messages config.py writes."""
    ok = [ConfigError("sluiced.ring_size", "must be in 16..65536 (got 3)"),
          ConfigError("chains[0].exit", "unknown port 'x'"), ConfigError("rules[2].match.dst_port", "bad"),
          ConfigError("stack.user.addresses[0]", "bad"), ConfigError("ports[0].ünï", "unknown key (expected ...)"),
          ConfigError("zzz", "unknown key (expected one of ...)"), ConfigError("config", "must be a mapping"),
          ConfigError("", "invalid YAML at <string>:1:1: x")]
    bad = [ConfigError("", "something"), ConfigError("ports[0].ü", "must be a string"),
           ConfigError("sluiced.", "x"), ConfigError("bogus.ring_size", "x"), ConfigError("ports[a]", "x")]
    assert [field_named(e) for e in ok] == [None] * len(ok)
    assert all(field_named(e) for e in bad)


def test_sluiced_check_config_mode(tmp):
    """sluiced --check-config: ok and exit 0, or the error naming the field and exit 1; no EAL, no sockets."""
    good = {"ports": [{"name": "in", "vdev": "net_null0", "chain": "c"}, {"name": "out", "vdev": "net_null1"}],
            "chains": [{"name": "c", "nfs": ["a"], "exit": "out"}], "nfs": [{"name": "a"}],
            "rules": [{"match": {"in_port": "in"}, "action": {"chain": "c"}}],
            "steering": {"malformed": {"port": "out"}}}
    sock = os.path.join(tmp, "s")
    cases = [(good, 0, "ok"),
             ({**good, "rules": [{"action": {"chain": "nosuch"}}]}, 1, "rules[0].action.chain: unknown chain 'nosuch'"),
             ({**good, "rules": [{"match": {"in_port": "x"}, "action": "drop"}]}, 1, "rules[0].match.in_port: unknown port"),
             ({**good, "rules": [{"payload": {"pattern": "(", "regex": True}, "action": "drop"}]}, 1,
              "rules[0].payload.pattern: "),
             ({**good, "steering": {"malformed": {"chain": "x"}}}, 1, "steering.malformed.chain: unknown chain 'x'"),
             ({**good, "chains": [{"name": "c", "nfs": ["a"], "exit": "nope"}]}, 1, "chains[0].exit: unknown port"),
             ({**good, "sluiced": {"ring_size": 1000}}, 1, "sluiced.ring_size: 1000 is not a power of two")]
    for cfg, rc, out in cases:
        path = os.path.join(tmp, "one.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        cp = subprocess.run([str(SLUICED), "--check-config", path, "--socket-dir", sock], capture_output=True,
                            text=True, timeout=10)
        assert cp.returncode == rc and out in cp.stdout, (cfg, cp.stdout, cp.stderr)
        assert not os.path.exists(sock), "--check-config made the socket dir"
    with open(path, "w") as f:
        json.dump(good, f)
    cp = subprocess.run([str(SLUICED), "--check-config", path, "--socket-dir", "/tmp/" + "d" * 80],
                        capture_output=True, text=True, timeout=10)
    assert cp.returncode == 1 and "--socket-dir: path too long" in cp.stdout
