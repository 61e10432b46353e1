"""`sluice rule list|add|del|load|test`, `sluice flows` and `sluice service list|set`: steering rules,
the flow table and the replica policy of services (live; docs/steering.md)."""

import json
import os

from .. import config as sconfig
from .. import steering as ssteer
from ..fmt import drops_str, table
from ..frames import FIELDS as FRAME_FIELDS
from .common import EXIT_OK, EXIT_USAGE, add_common, client_for, die, print_json_raw, sub


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
    from ..frames import build_frame, read_pcap
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
    from ..frames import FrameError
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


def register(subs):
    s = sub(subs, "rule", "list, add, delete, load or test steering rules (live)",
            "sluice rule list\n"
            "sluice rule add --name web --priority 100 proto=tcp dst_port=80 --chain web\n"
            "sluice rule test client proto=tcp dst=10.0.0.2 dst_port=80",
            description="Steering rules choose the first hop of every packet that arrives on a port "
                        "(docs/steering.md). Changes apply between two bursts with no loss.")
    rsubs = s.add_subparsers(dest="rule_cmd", metavar="SUBCOMMAND")
    rsubs.required = True
    rl = sub(rsubs, "list", "list rules in evaluation order with their hit counters",
             "sluice rule list\nsluice rule list --json")
    add_common(rl, json_flag=True)
    rl.set_defaults(func=cmd_rule_list)
    ra = sub(rsubs, "add", "add a rule",
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
    add_common(ra, json_flag=True)
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
    rd = sub(rsubs, "del", "delete rules by id",
             "sluice rule del 3\nsluice rule del 3 4 7")
    add_common(rd, json_flag=True)
    rd.add_argument("ids", nargs="+", type=int, metavar="ID", help="rule id (see `sluice rule list`)")
    rd.set_defaults(func=cmd_rule_del)
    rf = sub(rsubs, "load", "replace every rule at once with the rules of a YAML file",
             "sluice rule load rules.yaml      # a list of rules, or a mapping with rules:",
             description="Read rules in the config's YAML form (a list, or a mapping with a `rules:` list) and "
                         "replace the whole rule list atomically. List order breaks priority ties. Errors name "
                         "the field, e.g. rules[2].match.dst_port.")
    add_common(rf, json_flag=True)
    rf.add_argument("file", metavar="FILE.yaml")
    rf.set_defaults(func=cmd_rule_load)
    rt = sub(rsubs, "test", "show which rule and action packets arriving on a port would get (dry run)",
             "sluice rule test client proto=tcp dst=10.0.0.2 dst_port=80 tcp_flags=syn\n"
             "sluice rule test client src=2001:db8::1 proto=udp dst_port=53\n"
             "sluice rule test client --pcap capture.pcap\n"
             "sluice rule test client --hex 020000000002020000000001080045...",
             description="Classify frames as if they arrived on PORT and print each one's rule and action; "
                         "counts nothing and bypasses the flow table. The frame is built from FIELD=VALUE ("
                         + ", ".join(FRAME_FIELDS)
                         + "; defaults: UDP 10.0.0.1:1024 -> 10.0.0.2:80), or given with --hex or --pcap.")
    add_common(rt, json_flag=True)
    rt.add_argument("port", metavar="PORT", help="the port the packets arrive on")
    rt.add_argument("fields", nargs="*", metavar="FIELD=VALUE", help="build a frame with these fields")
    rt.add_argument("--hex", action="append", metavar="HEX", help="a whole Ethernet frame in hex (repeatable)")
    rt.add_argument("--pcap", metavar="FILE", help="every frame of a pcap file (Ethernet)")
    rt.set_defaults(func=cmd_rule_test)

    s = sub(subs, "flows", "show the flow table's size and counters",
            "sluice flows\nsluice flows --json")
    add_common(s, json_flag=True)
    s.set_defaults(func=cmd_flows)

    s = sub(subs, "service", "list services or set a service's replica policy",
            "sluice service list\nsluice service set fwd --policy least_loaded")
    ssubs = s.add_subparsers(dest="service_cmd", metavar="SUBCOMMAND")
    ssubs.required = True
    sl = sub(ssubs, "list", "list services, their policy and instances", "sluice service list --json")
    add_common(sl, json_flag=True)
    sl.set_defaults(func=cmd_service_list)
    ss = sub(ssubs, "set", "set a service's replica policy",
             "sluice service set fwd --policy round_robin",
             description="Policies: flow (rendezvous hash of the 5-tuple: about 1/N of flows move when a "
                         "replica comes or goes), least_loaded (fewest packets queued or held), round_robin "
                         "(per packet, for stateless NFs).")
    add_common(ss, json_flag=True)
    ss.add_argument("name", metavar="SERVICE")
    ss.add_argument("--policy", required=True, choices=ssteer.POLICIES)
    ss.set_defaults(func=cmd_service_set)
