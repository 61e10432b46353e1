"""`sluice chain set|list`: service chains (live). The ports' ingress chains: `sluice port chain` (ports.py)."""

from .. import config as sconfig
from .common import EXIT_OK, EXIT_USAGE, add_common, client_for, die, print_json_raw, sub


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


def register(subs):
    s = sub(subs, "chain", "list or change service chains", "sluice chain set c2s --nfs count,fwd --exit server\n"
            "sluice chain list")
    csubs = s.add_subparsers(dest="chain_cmd", metavar="SUBCOMMAND")
    csubs.required = True
    cs = sub(csubs, "set", "create or atomically replace a chain",
             "sluice chain set c2s --nfs count,fwd --exit server\n"
             "sluice chain set mirror --nfs count        # no exit: packets leaving the chain are dropped",
             description="Create chain NAME or atomically replace it (no packet loss). Services not yet known "
                         "to sluiced are created empty; packets to them drop as nf_gone until an NF attaches.")
    add_common(cs, json_flag=True)
    cs.add_argument("name", metavar="NAME", help="chain name")
    cs.add_argument("--nfs", required=True, metavar="S1,S2,...", help="services in order, comma-separated")
    cs.add_argument("--exit", metavar="PORT", default=None, help="port packets leave by (default: drop)")
    cs.set_defaults(func=cmd_chain_set)
    cl = sub(csubs, "list", "list chains", "sluice chain list\nsluice chain list --json")
    add_common(cl, json_flag=True)
    cl.set_defaults(func=cmd_chain_list)
