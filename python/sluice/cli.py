"""The `sluice` command line."""

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from . import __version__
from . import config as sconfig
from . import steering as ssteer
from .frames import FIELDS as FRAME_FIELDS
from .client import ApiError, Client, NotRunning, SluiceError, ctl_path, socket_dir_default

EXIT_OK = 0
EXIT_FAIL = 1      # runtime failure: sluiced not running, API error, startup failure
EXIT_USAGE = 2     # bad command line or bad config


# ------------------------------------------------------------------ formatting

def human_count(n):
    """1234567 -> '1.23M' (plain below 10000)."""
    if n is None:
        return "-"
    try:
        n = float(n)
    except (TypeError, ValueError):
        return str(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div and (unit != "k" or abs(n) >= 1e4):
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}" if n == int(n) else f"{n:.1f}"


def human_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def table(headers, rows, right=None):
    """Plain text table. right: set of column indexes to right-align
    (default: every column after the first whose cells look numeric)."""
    rows = [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    if right is None:
        right = set()
        for i in range(1, len(headers)):
            cells = [r[i] for r in rows if r[i] not in ("-", "")]
            if cells and all(_numeric_like(c) for c in cells):
                right.add(i)

    def fmt(r):
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                         for i, c in enumerate(r)).rstrip()
    out = [fmt(list(headers))]
    out += [fmt(r) for r in rows]
    return "\n".join(out)


def _numeric_like(s):
    s = s.strip().rstrip("kMGB/s% ").replace(".", "", 1).replace("KiB", "").replace("MiB", "")
    return s.isdigit()


def drops_str(d):
    if not d:
        return "0"
    nz = [f"{k}={v}" for k, v in d.items() if v]
    return " ".join(nz) if nz else "0"


def drops_total(d):
    return sum(v for v in (d or {}).values() if isinstance(v, (int, float)))


# -------------------------------------------------------------------- helpers

def die(msg, code=EXIT_FAIL):
    print(f"sluice: {msg}", file=sys.stderr)
    return code


def client_for(args):
    return Client(ctl_path(args.socket_dir), timeout=args.timeout)


def print_json_raw(client):
    """--json prints exactly the API's response line."""
    print(client.last_raw)


def load_config_or_exit(path, check_programs=True):
    try:
        return sconfig.load_file(path, check_programs=check_programs), None
    except sconfig.ConfigError as e:
        return None, e


# ------------------------------------------------------------------- commands

def cmd_up(args):
    from .supervisor import run_up
    cfg, err = load_config_or_exit(args.config)
    if err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    socket_dir = args.socket_dir or os.environ.get("SLUICE_SOCKET_DIR") or cfg["sluiced"]["socket_dir"]
    socket_dir = os.path.abspath(socket_dir)
    if len(socket_dir) + len("/supervisor.sock") > sconfig.SUN_PATH_MAX:
        return die(f"socket dir {socket_dir!r} is too long for a UNIX socket path", EXIT_USAGE)
    return run_up(cfg, socket_dir, config_path=args.config, build_dir=args.build_dir, log_level=args.log_level,
                  detach=args.detach, ready_timeout=args.ready_timeout, attach_timeout=args.attach_timeout)


def cmd_down(args):
    from .supervisor import stop_running
    return stop_running(args.socket_dir or socket_dir_default(), timeout=args.wait)


def cmd_status(args):
    from .supervisor import pid_alive, read_state
    with client_for(args) as c:
        st = c.status()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
        nfs = c.nfs()
    print(f"sluiced {st.get('version', '?')}  pid {st.get('pid')}  up {_uptime(st.get('uptime_s'))}  "
          f"worker lcore {st.get('worker_lcore', '-')}")
    print(f"memory: {human_bytes(st.get('region_bytes'))} region, huge pages "
          f"{'yes' if st.get('huge_pages') else 'no'}; mbufs {st.get('mbufs')} total, "
          f"{st.get('mbufs_free')} free, {st.get('mbufs_lent')} lent to NFs")
    print(f"{st.get('port_count')} port(s), {st.get('chain_count')} chain(s), {st.get('nf_count')} NF(s) attached")
    state = read_state(args.socket_dir or socket_dir_default())
    sup = {}
    if state:
        sp = (state.get("supervisor") or {})
        alive = pid_alive(sp.get("pid"), sp.get("starttime"))
        print(f"supervisor: pid {sp.get('pid')} ({'running' if alive else 'gone'})"
              + (f", config {state.get('config')}" if state.get("config") else ""))
        sup = {n["name"]: n for n in state.get("nfs", [])}
    rows = []
    for nf in nfs:
        s = sup.pop(nf.get("name"), {})
        rows.append([nf.get("name"), nf.get("service"), nf.get("pid"), nf.get("wakeup"),
                     human_count(nf.get("rx_pkts")), human_count(nf.get("tx_pkts")), nf.get("lent"),
                     drops_str(nf.get("drops")), s.get("restarts", "-")])
    for name, s in sup.items():  # configured but not attached right now
        rows.append([name, s.get("service"), s.get("pid"), "-", "-", "-", "-", f"({s.get('state')})",
                     s.get("restarts", "-")])
    if rows:
        print()
        print(table(["NF", "SERVICE", "PID", "WAKEUP", "RX", "TX", "LENT", "DROPS", "RESTARTS"], rows))
    return EXIT_OK


def _uptime(s):
    if s is None:
        return "-"
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d" if d else "") + (f"{h}h" if d or h else "") + f"{m}m{s:02d}s"


def format_stats(st):
    out = []
    ports = st.get("ports", [])
    out.append("PORTS")
    out.append(table(["NAME", "VDEV", "CHAIN", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES", "DROPS",
                      "DEV MISSED"],
                     [[p.get("name"), p.get("vdev"), p.get("chain") or "-", p.get("rx_pkts"),
                       human_bytes(p.get("rx_bytes")), p.get("tx_pkts"), human_bytes(p.get("tx_bytes")),
                       drops_str(p.get("drops")), (p.get("device") or {}).get("imissed", "-")]
                      for p in ports]))
    out.append("")
    out.append("NFS")
    nfs = st.get("nfs", [])
    if nfs:
        out.append(table(["NAME", "SERVICE", "PID", "WAKEUP", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES",
                          "LENT", "KICKS", "DROPS"],
                         [[n.get("name"), n.get("service"), n.get("pid"), n.get("wakeup"), n.get("rx_pkts"),
                           human_bytes(n.get("rx_bytes")), n.get("tx_pkts"), human_bytes(n.get("tx_bytes")),
                           n.get("lent"), n.get("kicks"), drops_str(n.get("drops"))] for n in nfs]))
    else:
        out.append("(no NF attached)")
    counted = [n for n in nfs if n.get("counters")]
    if counted:
        out.append("")
        out.append("NF COUNTERS (the NFs' own, sl_nf_counter)")
        for n in counted:
            out.append(f"{n.get('name')}: " + "  ".join(f"{k}={v}" for k, v in n["counters"].items()))
    svcs = st.get("services", [])
    if svcs:
        out.append("")
        out.append("SERVICES")
        out.append(table(["NAME", "INSTANCES", "DROPS"],
                         [[s.get("name"), ",".join(s.get("instances") or []) or "(none)",
                           drops_str(s.get("drops"))] for s in svcs]))
    chains = st.get("chains", [])
    if chains:
        out.append("")
        out.append("CHAINS")
        out.append(table(["NAME", "NFS", "EXIT"],
                         [[c.get("name"), " -> ".join(c.get("nfs") or []), c.get("exit") or "(drop)"]
                          for c in chains]))
    out.append("")
    drops = st.get("drops") or {}
    out.append("DROPS  " + (("  ".join(f"{k}={v}" for k, v in drops.items())) if drops else "none"))
    pool = st.get("pool") or {}
    if pool:
        out.append(f"POOL   mbufs={pool.get('mbufs')}  free={pool.get('free')}  lent={pool.get('lent')}")
    oset = st.get("out_set") or {}
    if oset.get("packets"):
        out.append(f"PORT SETS  packets={oset.get('packets')}  frames={oset.get('frames')}  copies={oset.get('copies')}")
    return "\n".join(out)


def cmd_stats(args):
    with client_for(args) as c:
        st = c.stats()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(format_stats(st))
    return EXIT_OK


def cmd_top(args):
    from .top import run_top
    if args.interval <= 0:
        return die("--interval must be positive", EXIT_USAGE)
    return run_top(client_for(args), interval=args.interval, iterations=args.iterations)


def _chain_row(ch):
    return f"chain {ch.get('name')}: {' -> '.join(ch.get('nfs') or [])} -> exit {ch.get('exit') or '(drop)'}"


def cmd_chain_set(args):
    nfs = [s.strip() for s in args.nfs.split(",") if s.strip()]
    if not nfs:
        return die("--nfs needs at least one service name", EXIT_USAGE)
    for i, s in enumerate([args.name] + nfs + ([args.exit] if args.exit else [])):
        if not sconfig.NAME_RE.match(s):
            return die(f"invalid name {s!r} (must match {sconfig.NAME_RULE})", EXIT_USAGE)
    with client_for(args) as c:
        ch = c.chain_set(args.name, nfs, args.exit)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(_chain_row(ch))
    return EXIT_OK


def cmd_chain_list(args):
    with client_for(args) as c:
        chains = c.chains()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    if not chains:
        print("(no chains)")
    for ch in chains:
        print(_chain_row(ch))
    return EXIT_OK


def cmd_port_chain(args):
    chain = None if args.chain in ("none", "-") else args.chain
    with client_for(args) as c:
        p = c.port_chain_set(args.port, chain)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"port {p.get('name')}: ingress chain {p.get('chain') or '(none: drop)'}")
    return EXIT_OK


# ---------------------------------------------------------------- steering

class _AnyName:
    """Stands for the port/chain/service names sluiced knows: the CLI checks a rule's syntax and
    leaves references to sluiced, whose errors name them."""

    def __contains__(self, v):
        return isinstance(v, str)

    def __iter__(self):
        return iter(())


def _ctx_error(e):
    return die(f"error: {e}", EXIT_USAGE)


def _rule_action(args):
    acts = [(k, getattr(args, k)) for k in ("chain", "service", "port") if getattr(args, k)]
    if args.drop:
        acts.append(("drop", True))
    if len(acts) != 1:
        return None
    k, v = acts[0]
    return "drop" if k == "drop" else {k: v}


def _terms(terms, what):
    """['dst_port=80', ...] -> {'dst_port': '80'}; raises ValueError naming the bad term."""
    out = {}
    for t in terms:
        k, eq, v = t.partition("=")
        if not eq or not k or not v:
            raise ValueError(f"{what} {t!r}: must be FIELD=VALUE, e.g. dst_port=80")
        if k in out:
            raise ValueError(f"{what} {t!r}: field {k} given twice")
        out[k.strip()] = v.strip()
    return out


def format_match(m):
    parts = []
    for k, v in (m or {}).items():
        if k in ("src_port", "dst_port") and isinstance(v, list):
            v = str(v[0]) if v[0] == v[1] else f"{v[0]}-{v[1]}"
        elif k == "proto":
            v = next((n for n, num in ssteer.PROTOCOLS.items() if num == v), v)
        elif k == "ethertype":
            v = f"{v:#06x}"
        elif k == "tcp_flags" and isinstance(v, dict):
            v = ",".join([n for n, b in ssteer.TCP_FLAGS.items() if v.get("set", 0) & b] +
                         ["!" + n for n, b in ssteer.TCP_FLAGS.items() if v.get("clear", 0) & b])
        parts.append(f"{k}={v}")
    return " ".join(parts) or "(any)"


def format_action(a):
    if a is None:
        return "(none: no_path)"
    if a == "drop":
        return "drop"
    if isinstance(a, dict) and len(a) == 1:
        (k, v), = a.items()
        return f"{k} {v}"
    return json.dumps(a)


def format_payload(p):
    if not p:
        return "-"
    pat = p.get("pattern", "")
    return (f"/{pat}/" if p.get("regex") else json.dumps(pat)) + ("i" if p.get("caseless") else "") + \
        f"@{p.get('depth', 256)}"


def cmd_rule_list(args):
    with client_for(args) as c:
        r = c.rules()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    rules = r.get("rules") or []
    if rules:
        print(table(["ID", "PRIO", "NAME", "MATCH", "PAYLOAD", "ACTION", "HITS"],
                    [[x.get("id"), x.get("priority"), x.get("name") or "-", format_match(x.get("match")),
                      format_payload(x.get("payload")), format_action(x.get("action")), x.get("hits")]
                     for x in rules], right={0, 1, 6}))
    else:
        print("(no rules: every packet takes its port's ingress chain)")
    print(f"malformed packets: {format_action(r.get('malformed', 'drop'))}")
    return EXIT_OK


def cmd_rule_add(args):
    action = _rule_action(args)
    if action is None:
        return die("give exactly one action: --chain C, --service S, --port P or --drop", EXIT_USAGE)
    try:
        match = _terms(args.match, "match")
    except ValueError as e:
        return die(str(e), EXIT_USAGE)
    rule = {"priority": args.priority, "match": match, "action": action}
    if args.name:
        rule["name"] = args.name
    if args.payload is not None:
        rule["payload"] = {"pattern": args.payload, "regex": args.regex, "caseless": args.caseless}
        if args.depth is not None:
            rule["payload"]["depth"] = args.depth
    elif args.regex or args.caseless or args.depth is not None:
        return die("--regex, --caseless and --depth go with --payload PATTERN", EXIT_USAGE)
    try:
        rule = ssteer.normalize_rule(rule, "rule", _AnyName(), _AnyName(), _AnyName())
    except sconfig.ConfigError as e:
        return _ctx_error(e)
    with client_for(args) as c:
        got = c.rule_add(rule)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"rule {got.get('id')} added: prio {got.get('priority')} {format_match(got.get('match'))}"
          + (f" payload {format_payload(got.get('payload'))}" if got.get("payload") else "")
          + f" -> {format_action(got.get('action'))}")
    return EXIT_OK


def cmd_rule_del(args):
    with client_for(args) as c:
        for rid in args.ids:
            c.rule_del(rid)
            if args.json:
                print_json_raw(c)
            else:
                print(f"rule {rid} deleted")
    return EXIT_OK


def _load_rules_file(path):
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise sconfig.ConfigError(path, e.strerror) from None
    except yaml.YAMLError as e:
        raise sconfig.ConfigError(path, f"not valid YAML: {e}") from None
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    if data is None:
        data = []
    if not isinstance(data, list):
        raise sconfig.ConfigError("rules", "must be a list of rules (or a mapping with a rules: list)")
    return [ssteer.normalize_rule(r, f"rules[{i}]", _AnyName(), _AnyName(), _AnyName())
            for i, r in enumerate(data)]


def cmd_rule_load(args):
    try:
        rules = _load_rules_file(args.file)
    except sconfig.ConfigError as e:
        return _ctx_error(e)
    with client_for(args) as c:
        r = c.rules_set(rules)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"{len(r.get('rules') or [])} rule(s) in place (replaced atomically)")
    return EXIT_OK


def _test_frames(args):
    from .frames import build_frame, read_pcap
    frames, labels = [], []
    for h in args.hex or []:
        h = h.replace(":", "").replace(" ", "")
        try:
            frames.append(bytes.fromhex(h))
        except ValueError:
            raise ValueError(f"--hex {h[:40]!r}: not hexadecimal") from None
        labels.append(f"hex[{len(labels)}]")
    if args.pcap:
        got = read_pcap(args.pcap)
        frames += got
        labels += [f"{os.path.basename(args.pcap)}#{i + 1}" for i in range(len(got))]
    if args.fields or not frames:
        frames.append(build_frame(_terms(args.fields, "field")))
        labels.append("built")
    return frames, labels


def cmd_rule_test(args):
    from .frames import FrameError
    try:
        frames, labels = _test_frames(args)
    except (ValueError, FrameError) as e:
        return die(str(e), EXIT_USAGE)
    with client_for(args) as c:
        results = c.classify(args.port, frames)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
        rules = {r.get("id"): r for r in c.rules().get("rules") or []}
    for label, frame, res in zip(labels, frames, results):
        rid = res.get("rule")
        if res.get("malformed"):
            why = "malformed"
        elif rid is None:
            why = "no rule (port's ingress chain)"
        else:
            r = rules.get(rid) or {}
            why = f"rule {rid}" + (f" ({r['name']})" if r.get("name") else "") + f" prio {r.get('priority', '?')}"
        print(f"{label} ({len(frame)} B) on {args.port}: {why} -> {format_action(res.get('action'))}")
    return EXIT_OK


def cmd_flows(args):
    with client_for(args) as c:
        f = c.flows()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    if not f.get("max"):
        print("flow table off (steering.flows: 0): every packet meets the rules")
    print(f"flows: {f.get('entries')} of {f.get('max')} entries, idle timeout {f.get('idle_ms')} ms, "
          f"{f.get('pinned', 0)} pinned by NFs")
    keys = ["hits", "misses", "rechecked", "moved", "expired", "full", "pins", "unpins", "pin_ignored"]
    print(table(["COUNTER", "VALUE"], [[k, f.get(k)] for k in keys], right={1}))
    return EXIT_OK


# ------------------------------------------------------------ services, nf scale

def cmd_service_list(args):
    with client_for(args) as c:
        st = c.stats()
        if args.json:
            print(json.dumps({"ok": True, "services": st.get("services", [])}))
            return EXIT_OK
    svcs = st.get("services") or []
    if not svcs:
        print("(no services)")
        return EXIT_OK
    print(table(["SERVICE", "POLICY", "INSTANCES", "DROPS"],
                [[s.get("name"), s.get("policy"), ",".join(s.get("instances") or []) or "(none)",
                  drops_str(s.get("drops"))] for s in svcs]))
    return EXIT_OK


def cmd_service_set(args):
    with client_for(args) as c:
        c.service_set(args.name, args.policy)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"service {args.name}: policy {args.policy}")
    return EXIT_OK


def _socket_dir(args):
    return os.path.abspath(args.socket_dir or socket_dir_default())


def _natural(name):
    """'s.10' after 's.9'."""
    base, _, idx = name.rpartition(".")
    return (base, int(idx)) if idx.isdigit() else (name, -1)


def supervisor_client(socket_dir, timeout=5.0):
    from .supervisor import supervisor_socket_path
    path = supervisor_socket_path(socket_dir)
    if not os.path.exists(path):
        raise SluiceError(f"no supervisor in {socket_dir} ({path} missing): `sluice nf scale` works on NFs "
                          "started by `sluice up`")
    return Client(path, timeout=timeout)


def cmd_nf_scale(args):
    import time
    if not 1 <= args.instances <= 64:
        return die("INSTANCES must be 1..64", EXIT_USAGE)
    if args.drain_timeout <= 0 or args.wait <= 0:
        return die("--drain-timeout and --wait must be positive", EXIT_USAGE)
    sd = _socket_dir(args)
    try:
        with supervisor_client(sd, timeout=args.timeout) as sup:
            plan = sup.call("scale", service=args.service, instances=args.instances,
                            drain_timeout=args.drain_timeout)
    except ApiError as e:
        return die(f"supervisor: {e}")
    say = (lambda *a, **k: None) if args.json else print
    say(f"scale {args.service} to {args.instances}: "
        + (f"starting {', '.join(plan['start'])}" if plan["start"] else "")
        + ("; " if plan["start"] and plan["drain"] else "")
        + (f"draining {', '.join(plan['drain'])}" if plan["drain"] else "")
        + ("nothing to do" if not plan["start"] and not plan["drain"] else ""), flush=True)
    pending_start, pending_drain = set(plan["start"]), set(plan["drain"])
    drained, failed = [], []
    deadline = time.monotonic() + args.wait + args.drain_timeout
    last_progress = 0.0
    ctl = Client(ctl_path(sd), timeout=args.timeout)
    try:
        while pending_start or pending_drain:
            attached = {n.get("name"): n for n in ctl.nfs()}
            with supervisor_client(sd, timeout=args.timeout) as sup:
                state = sup.call("nfs")
            slots = {s["name"]: s for s in state["nfs"]}
            for name in sorted(pending_start):
                if name in attached:
                    pending_start.discard(name)
                    say(f"  {name} attached", flush=True)
                elif (slots.get(name) or {}).get("state") in ("exited", "backoff", None):
                    pending_start.discard(name)
                    failed.append(name)
                    log = (slots.get(name) or {}).get("log")
                    say(f"  {name} failed to start ({(slots.get(name) or {}).get('state', 'removed')}); see {log}")
            for rem in state.get("removed", []):
                if rem["seq"] > plan["removed_after"] and rem["name"] in pending_drain:
                    pending_drain.discard(rem["name"])
                    drained.append(rem)
                    held = rem.get("held") or {}
                    if rem["result"] == "drain timeout":
                        say(f"  {rem['name']} stopped after --drain-timeout while still holding "
                            f"{held.get('queued', 0)} queued + {held.get('lent', 0)} lent packet(s)", flush=True)
                    elif rem["result"] == "drained":
                        say(f"  {rem['name']} drained and stopped", flush=True)
                    else:
                        say(f"  {rem['name']} removed ({rem['result']})", flush=True)
            now = time.monotonic()
            if pending_drain and now - last_progress >= 1.0:
                last_progress = now
                for name in sorted(pending_drain):
                    n = attached.get(name)
                    if n is not None and (n.get("queued") or n.get("lent")):
                        say(f"  draining {name}: {n.get('queued', 0)} queued, {n.get('lent', 0)} lent", flush=True)
            if not (pending_start or pending_drain):
                break
            if now > deadline:
                left = sorted(pending_start | pending_drain)
                return die(f"nf scale: still waiting for {', '.join(left)} after {args.wait + args.drain_timeout:g}s "
                           f"(see `sluice status` and {sd}/logs)")
            time.sleep(0.1)
        svc = next((s for s in ctl.stats().get("services", []) if s.get("name") == args.service), {})
        result = {"ok": not failed and all(d["result"] != "drain timeout" for d in drained),
                  "service": args.service, "instances": sorted(svc.get("instances") or [], key=_natural),
                  "policy": svc.get("policy"),
                  "started": plan["start"], "failed": failed, "drained": drained}
    finally:
        ctl.close()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"service {args.service}: {len(result['instances'])} instance(s) "
              f"({', '.join(result['instances']) or 'none'}), policy {result['policy']}")
    return EXIT_OK if result["ok"] else EXIT_FAIL


def cmd_api(args):
    try:
        req = json.loads(args.request)
    except ValueError as e:
        return die(f"request is not JSON: {e}", EXIT_USAGE)
    if isinstance(req, str):
        req = {"cmd": req}
    if not isinstance(req, dict):
        return die("request must be a JSON object or a command name", EXIT_USAGE)
    with client_for(args) as c:
        resp = c.request(req)
        print(c.last_raw)
    return EXIT_OK if resp.get("ok") is True else EXIT_FAIL


def bench_script():
    """bench/run.py of the source tree this package was installed (editable) from."""
    return Path(__file__).resolve().parents[2] / "bench" / "run.py"


def cmd_bench(args):
    script = bench_script()
    if not script.is_file():
        return die(f"the benchmark suite lives in the source tree (bench/run.py) and is not at {script}")
    argv = [sys.executable, str(script)]
    if args.scenarios:
        argv += ["--scenarios", ",".join(args.scenarios)]
    for flag in ("runs", "duration", "systems", "sizes", "nfs", "trial_nfs", "wait_quiet"):
        v = getattr(args, flag)
        if v is not None:
            argv += ["--" + flag.replace("_", "-"), str(v)]
    if args.quick:
        argv.append("--quick")
    return subprocess.call(argv)


def cmd_config_check(args):
    cfg, err = load_config_or_exit(args.config, check_programs=not args.no_programs)
    if err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    n_inst = len(sconfig.instance_names(cfg))
    print(f"{args.config}: ok ({len(cfg['ports'])} port(s), {len(cfg['chains'])} chain(s), "
          f"{len(cfg['nfs'])} service(s), {n_inst} NF instance(s))")
    return EXIT_OK


def cmd_config_json(args):
    cfg, err = load_config_or_exit(args.config, check_programs=not args.no_programs)
    if err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(sconfig.to_sluiced_json(cfg, socket_dir=args.socket_dir))
    return EXIT_OK


# --------------------------------------------------------------------- parser

EXAMPLE_CONFIG = """\
  ports:
    - {name: client, vdev: "net_af_packet0,iface=veth0", chain: c2s}
    - {name: server, vdev: "net_af_packet1,iface=veth1"}
  chains:
    - {name: c2s, nfs: [count, fwd], exit: server}
  nfs:
    - {name: count, program: count}
    - {name: fwd, program: fwd, instances: 2, wakeup: adaptive}
"""


class _Fmt(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=30)


def _add_common(p, json_flag=False):
    p.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="sluiced socket directory (default: $SLUICE_SOCKET_DIR or /run/sluice)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for each answer from sluiced (default 5)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the control API's JSON response as is")


def _wrap(text, width=78):
    """Wrap prose paragraphs; leave indented blocks (examples) alone."""
    pars = text.split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else textwrap.fill(p, width) for p in pars)


def _sub(subs, name, help_, example, description=None):
    return subs.add_parser(name, help=help_, formatter_class=_Fmt,
                           description=_wrap(description or help_[0].upper() + help_[1:] + "."),
                           epilog="example:\n" + textwrap.indent(example, "  "))


def build_parser():
    p = argparse.ArgumentParser(
        prog="sluice", formatter_class=_Fmt,
        description=_wrap("Sluice: zero-copy NFV platform. Starts sluiced and network functions from a YAML "
                          "config and talks to sluiced over its control socket (docs/api.md)."),
        epilog="examples:\n"
               "  sluice config check sluice.yaml     # validate a config\n"
               "  sluice up sluice.yaml -d            # start sluiced + NFs in the background\n"
               "  sluice status                       # what is running\n"
               "  sluice stats                        # counters per port / NF / service\n"
               "  sluice top                          # live rates\n"
               "  sluice chain set c2s --nfs count,fwd --exit server\n"
               "  sluice rule add proto=tcp dst_port=80 --chain web\n"
               "  sluice rule list                    # rules and their hits\n"
               "  sluice nf scale fwd 3               # replicas at runtime\n"
               "  sluice down                         # stop everything\n\n"
               "`sluice COMMAND --help` for details. Config format:\n" + EXAMPLE_CONFIG)
    p.add_argument("--version", action="version", version=f"sluice {__version__}")
    subs = p.add_subparsers(dest="command", metavar="COMMAND")
    subs.required = True

    s = _sub(subs, "up", "start sluiced and the configured NFs, and supervise them",
             "sluice up sluice.yaml -d --build-dir build\n"
             "sluice up sluice.yaml            # foreground; Ctrl-C stops everything",
             description="Validate CONFIG, write its JSON form to <socket-dir>/config.json, start sluiced, wait "
                         "until it answers on its control socket, launch every NF instance (service 'fwd' with "
                         "instances: 2 gives fwd.0 and fwd.1; output in <socket-dir>/logs/<name>.log) and wait "
                         "until they have attached. Then supervise: restart NFs per their restart policy with "
                         "exponential backoff (0.1 s doubling to 5 s; reset after 10 s up). SIGINT/SIGTERM or "
                         "`sluice down` stop the NFs (SIGTERM, SIGKILL after 3 s) and then sluiced.\n\n"
                         "sluiced is found via --build-dir, $SLUICE_BUILD_DIR, PATH, then the repo's build/. "
                         "Exit status: 0 ok, 1 startup failure, 2 bad config.")
    s.add_argument("config", metavar="CONFIG.yaml", help="the Sluice YAML config")
    s.add_argument("-d", "--detach", action="store_true",
                   help="run in the background (log: <socket-dir>/logs/supervisor.log); return once everything "
                        "is up")
    s.add_argument("--build-dir", metavar="DIR", help="meson build directory holding sluiced and the built-in NFs")
    s.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="where sockets, state and logs go (default: $SLUICE_SOCKET_DIR, then the config's "
                        "sluiced.socket_dir, then /run/sluice)")
    s.add_argument("--log-level", type=int, metavar="N", help="passed to sluiced --log-level")
    s.add_argument("--ready-timeout", type=float, default=20.0, metavar="S",
                   help="seconds to wait for sluiced to answer (default 20)")
    s.add_argument("--attach-timeout", type=float, default=15.0, metavar="S",
                   help="seconds to wait for all NFs to attach (default 15)")
    s.set_defaults(func=cmd_up)

    s = _sub(subs, "down", "stop the NFs and sluiced started by `sluice up`",
             "sluice down\nsluice down --socket-dir /tmp/sl",
             description="Ask the supervisor recorded in <socket-dir>/state.json to stop (it stops the NFs, then "
                         "sluiced, and removes the sockets); if it is gone, stop the recorded processes directly; "
                         "with no state file, send `shutdown` to a sluiced answering on the control socket. "
                         "Succeeds (exit 0) when nothing is running.")
    s.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="sluiced socket directory (default: $SLUICE_SOCKET_DIR or /run/sluice)")
    s.add_argument("--wait", type=float, default=20.0, metavar="S",
                   help="seconds to wait for the supervisor to finish (default 20)")
    s.set_defaults(func=cmd_down)

    s = _sub(subs, "status", "show sluiced's status and the attached NFs",
             "sluice status\nsluice status --json     # the `status` response of the control API")
    _add_common(s, json_flag=True)
    s.set_defaults(func=cmd_status)

    s = _sub(subs, "stats", "show counters and drop reasons per port, NF, service and chain",
             "sluice stats\nsluice stats --json | python3 -m json.tool")
    _add_common(s, json_flag=True)
    s.set_defaults(func=cmd_stats)

    s = _sub(subs, "top", "live table of packet and byte rates per port and NF",
             "sluice top                        # refresh every second until Ctrl-C\n"
             "sluice top --interval 0.5 --iterations 3   # three frames, then exit (works without a tty)",
             description="Poll `stats` and show per-second rates computed from counter deltas. On a terminal the "
                         "screen is redrawn in place; otherwise frames are printed one after another.")
    _add_common(s)
    s.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between frames (default 1)")
    s.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="stop after N frames (default: run until interrupted)")
    s.set_defaults(func=cmd_top)

    s = _sub(subs, "chain", "list or change service chains", "sluice chain set c2s --nfs count,fwd --exit server\n"
             "sluice chain list")
    csubs = s.add_subparsers(dest="chain_cmd", metavar="SUBCOMMAND")
    csubs.required = True
    cs = _sub(csubs, "set", "create or atomically replace a chain",
              "sluice chain set c2s --nfs count,fwd --exit server\n"
              "sluice chain set mirror --nfs count        # no exit: packets leaving the chain are dropped",
              description="Create chain NAME or atomically replace it (no packet loss). Services not yet known "
                          "to sluiced are created empty; packets to them drop as nf_gone until an NF attaches.")
    _add_common(cs, json_flag=True)
    cs.add_argument("name", metavar="NAME", help="chain name")
    cs.add_argument("--nfs", required=True, metavar="S1,S2,...", help="services in order, comma-separated")
    cs.add_argument("--exit", metavar="PORT", default=None, help="port packets leave by (default: drop)")
    cs.set_defaults(func=cmd_chain_set)
    cl = _sub(csubs, "list", "list chains", "sluice chain list\nsluice chain list --json")
    _add_common(cl, json_flag=True)
    cl.set_defaults(func=cmd_chain_list)

    s = _sub(subs, "port", "change a port's ingress chain", "sluice port chain client c2s")
    psubs = s.add_subparsers(dest="port_cmd", metavar="SUBCOMMAND")
    psubs.required = True
    pc = _sub(psubs, "chain", "set the ingress chain of a port",
              "sluice port chain client c2s\nsluice port chain client none   # drop everything from client")
    _add_common(pc, json_flag=True)
    pc.add_argument("port", metavar="PORT")
    pc.add_argument("chain", metavar="CHAIN", help="chain name, or 'none'")
    pc.set_defaults(func=cmd_port_chain)

    s = _sub(subs, "rule", "list, add, delete, load or test steering rules (live)",
             "sluice rule list\n"
             "sluice rule add --name web --priority 100 proto=tcp dst_port=80 --chain web\n"
             "sluice rule test client proto=tcp dst=10.0.0.2 dst_port=80",
             description="Steering rules choose the first hop of every packet that arrives on a port "
                         "(docs/steering.md). Changes apply between two bursts with no loss.")
    rsubs = s.add_subparsers(dest="rule_cmd", metavar="SUBCOMMAND")
    rsubs.required = True
    rl = _sub(rsubs, "list", "list rules in evaluation order with their hit counters",
              "sluice rule list\nsluice rule list --json")
    _add_common(rl, json_flag=True)
    rl.set_defaults(func=cmd_rule_list)
    ra = _sub(rsubs, "add", "add a rule",
              "sluice rule add proto=tcp dst_port=80 --chain web\n"
              "sluice rule add --priority 200 src=10.1.0.0/16 tcp_flags=syn,!ack --service ids\n"
              "sluice rule add in_port=client vlan=100 --port uplink\n"
              "sluice rule add proto=tcp dst_port=80 --payload 'host: a.example' --caseless --service web-a\n"
              "sluice rule add ethertype=0x0806 --drop",
              description="Add a rule matching every FIELD=VALUE given (none: every packet) with exactly one "
                          "action. Fields: " + ", ".join(ssteer.MATCH_KEYS) + ". Values as in the YAML config: "
                          "proto=tcp|udp|icmp|0..255, dst_port=80 or 1000-2000, src=10.0.0.0/8 or 2001:db8::/32, "
                          "tcp_flags=syn,!ack, vlan=0..4095, ethertype=0x0800, dscp=0..63, src_mac=02:00:00:00:00:01. "
                          "Higher priority wins; equal priority: the rule added first.")
    _add_common(ra, json_flag=True)
    ra.add_argument("match", nargs="*", metavar="FIELD=VALUE", help="fields the packet must match")
    ra.add_argument("--name", metavar="NAME", help="label shown in `sluice rule list`")
    ra.add_argument("--priority", type=int, default=0, metavar="N", help="0..65535, higher wins (default 0)")
    act = ra.add_argument_group("action (exactly one)")
    act.add_argument("--chain", metavar="C", help="start chain C")
    act.add_argument("--service", metavar="S", help="go to service S (its NF chooses the next action)")
    act.add_argument("--port", metavar="P", help="go straight out of port P")
    act.add_argument("--drop", action="store_true", help="drop (counted in the rule's hits and drops.rule)")
    pay = ra.add_argument_group("payload (Hyperscan, over the first DEPTH bytes of the TCP/UDP payload)")
    pay.add_argument("--payload", metavar="PATTERN", help="literal to look for (a regex with --regex)")
    pay.add_argument("--regex", action="store_true", help="PATTERN is a Hyperscan regex")
    pay.add_argument("--caseless", action="store_true", help="ignore case")
    pay.add_argument("--depth", type=int, metavar="N", help="bytes of payload to scan, 1..65535 (default 256)")
    ra.set_defaults(func=cmd_rule_add)
    rd = _sub(rsubs, "del", "delete rules by id",
              "sluice rule del 3\nsluice rule del 3 4 7")
    _add_common(rd, json_flag=True)
    rd.add_argument("ids", nargs="+", type=int, metavar="ID", help="rule id (see `sluice rule list`)")
    rd.set_defaults(func=cmd_rule_del)
    rf = _sub(rsubs, "load", "replace every rule at once with the rules of a YAML file",
              "sluice rule load rules.yaml      # a list of rules, or a mapping with rules:",
              description="Read rules in the config's YAML form (a list, or a mapping with a `rules:` list) and "
                          "replace the whole rule list atomically. List order breaks priority ties. Errors name "
                          "the field, e.g. rules[2].match.dst_port.")
    _add_common(rf, json_flag=True)
    rf.add_argument("file", metavar="FILE.yaml")
    rf.set_defaults(func=cmd_rule_load)
    rt = _sub(rsubs, "test", "show which rule and action packets arriving on a port would get (dry run)",
              "sluice rule test client proto=tcp dst=10.0.0.2 dst_port=80 tcp_flags=syn\n"
              "sluice rule test client src=2001:db8::1 proto=udp dst_port=53\n"
              "sluice rule test client --pcap capture.pcap\n"
              "sluice rule test client --hex 020000000002020000000001080045...",
              description="Classify frames as if they arrived on PORT and print each one's rule and action; "
                          "counts nothing and bypasses the flow table. The frame is built from FIELD=VALUE ("
                          + ", ".join(FRAME_FIELDS)
                          + "; defaults: UDP 10.0.0.1:1024 -> 10.0.0.2:80), or given with --hex or --pcap.")
    _add_common(rt, json_flag=True)
    rt.add_argument("port", metavar="PORT", help="the port the packets arrive on")
    rt.add_argument("fields", nargs="*", metavar="FIELD=VALUE", help="build a frame with these fields")
    rt.add_argument("--hex", action="append", metavar="HEX", help="a whole Ethernet frame in hex (repeatable)")
    rt.add_argument("--pcap", metavar="FILE", help="every frame of a pcap file (Ethernet)")
    rt.set_defaults(func=cmd_rule_test)

    s = _sub(subs, "flows", "show the flow table's size and counters",
             "sluice flows\nsluice flows --json")
    _add_common(s, json_flag=True)
    s.set_defaults(func=cmd_flows)

    s = _sub(subs, "service", "list services or set a service's replica policy",
             "sluice service list\nsluice service set fwd --policy least_loaded")
    ssubs = s.add_subparsers(dest="service_cmd", metavar="SUBCOMMAND")
    ssubs.required = True
    sl = _sub(ssubs, "list", "list services, their policy and instances", "sluice service list --json")
    _add_common(sl, json_flag=True)
    sl.set_defaults(func=cmd_service_list)
    ss = _sub(ssubs, "set", "set a service's replica policy",
              "sluice service set fwd --policy round_robin",
              description="Policies: flow (rendezvous hash of the 5-tuple: about 1/N of flows move when a "
                          "replica comes or goes), least_loaded (fewest packets queued or held), round_robin "
                          "(per packet, for stateless NFs).")
    _add_common(ss, json_flag=True)
    ss.add_argument("name", metavar="SERVICE")
    ss.add_argument("--policy", required=True, choices=ssteer.POLICIES)
    ss.set_defaults(func=cmd_service_set)

    s = _sub(subs, "nf", "scale a service's NF replicas at runtime",
             "sluice nf scale fwd 3")
    nsubs = s.add_subparsers(dest="nf_cmd", metavar="SUBCOMMAND")
    nsubs.required = True
    ns = _sub(nsubs, "scale", "start or drain replicas so SERVICE has INSTANCES of them",
              "sluice nf scale fwd 3          # start fwd.N until there are 3\n"
              "sluice nf scale fwd 1          # drain the others, stop each once it holds nothing",
              description="Ask the supervisor started by `sluice up` to scale SERVICE. New replicas are started "
                          "and waited for until they attach. A removed replica is drained first: it leaves the "
                          "service at once (its flows move to the others) and is stopped only when it holds no "
                          "packet (queued and lent 0), so nothing is lost; after --drain-timeout it is stopped "
                          "anyway and the command fails. Runtime only: the config file is not changed.")
    _add_common(ns, json_flag=True)
    ns.add_argument("service", metavar="SERVICE")
    ns.add_argument("instances", metavar="INSTANCES", type=int, help="replicas wanted, 1..64")
    ns.add_argument("--drain-timeout", type=float, default=10.0, metavar="S",
                    help="seconds a removed replica may take to hand back its packets (default 10)")
    ns.add_argument("--wait", type=float, default=30.0, metavar="S",
                    help="seconds to wait for new replicas to attach (default 30)")
    ns.set_defaults(func=cmd_nf_scale)

    s = _sub(subs, "config", "validate a config or show the JSON handed to sluiced",
             "sluice config check sluice.yaml\nsluice config json sluice.yaml")
    fsubs = s.add_subparsers(dest="config_cmd", metavar="SUBCOMMAND")
    fsubs.required = True
    fc = _sub(fsubs, "check", "validate a YAML config (exit 0 valid, 2 invalid)",
              "sluice config check sluice.yaml\n\nErrors name the field, e.g.:\n"
              "  config error: chains[0].exit: unknown port 'srv'",
              description="Validate CONFIG.yaml without starting anything. Errors name the field at fault "
                          "with its dotted path. Format:\n\n" + EXAMPLE_CONFIG.rstrip())
    fc.add_argument("config", metavar="CONFIG.yaml")
    fc.add_argument("--no-programs", action="store_true",
                    help="do not check that NF programs exist (e.g. on another machine)")
    fc.set_defaults(func=cmd_config_check)
    fj = _sub(fsubs, "json", "print the normalized JSON config that `sluice up` hands to sluiced",
              "sluice config json sluice.yaml > /tmp/sluiced.json\n"
              "sluiced --config /tmp/sluiced.json --socket-dir /tmp/sl")
    fj.add_argument("config", metavar="CONFIG.yaml")
    fj.add_argument("--socket-dir", metavar="DIR", default=None, help="override sluiced.socket_dir")
    fj.add_argument("--no-programs", action="store_true", help="do not check that NF programs exist")
    fj.set_defaults(func=cmd_config_json)

    s = _sub(subs, "bench", "run benchmark scenarios (bench/run.py) and regenerate BENCHMARKS.md",
             "sluice bench --quick                 # smoke run of every scenario, well under a minute\n"
             "sluice bench                         # scenarios chain, zeroloss, latency; 5 rounds (~1 h)\n"
             "sluice bench zeroloss --trial-nfs 1  # the RFC 2544 search for one NF only",
             description="Run the named scenarios (default: all) with Sluice and its peers alternating in the "
                         "same rounds, print progress and a summary table, write bench/results/<timestamp>.json "
                         "and PNG plots, and regenerate BENCHMARKS.md. Needs root and a built tree; stops with a "
                         "clear message while another sluiced or testpmd is running (see --wait-quiet).")
    s.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help="chain (1: chain length sweep), zeroloss (2: RFC 2544 zero-loss rate), latency (3: "
                        "latency at 10/50/90%% of it); default: all")
    s.add_argument("--quick", action="store_true", help="every scenario briefly: checks that things run, not speed")
    s.add_argument("--runs", type=int, metavar="N", help="rounds per figure (default 5)")
    s.add_argument("--duration", type=float, metavar="S", help="scenario 1 window per run (default 3 s)")
    s.add_argument("--systems", metavar="A,B", help="systems to measure (default: Sluice and every peer)")
    s.add_argument("--sizes", metavar="B,B", help="frame sizes in bytes (default 64,1500)")
    s.add_argument("--nfs", metavar="N,N", help="scenario 1 chain lengths (default 1..8)")
    s.add_argument("--trial-nfs", metavar="N,N", help="scenarios 2-3 chain lengths (default 1,3)")
    s.add_argument("--wait-quiet", type=float, metavar="S", help="wait up to S seconds for other DPDK runs to end")
    s.set_defaults(func=cmd_bench)

    s = _sub(subs, "api", "send one raw request to the control API and print the response",
             "sluice api '{\"cmd\":\"ports\"}'\nsluice api '\"nfs\"'      # a bare command name works too")
    _add_common(s)
    s.add_argument("request", metavar="JSON", help="request object, e.g. '{\"cmd\":\"chains\"}'")
    s.set_defaults(func=cmd_api)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ApiError as e:
        return die(f"sluiced: {e}")
    except SluiceError as e:
        return die(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
