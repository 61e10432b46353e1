"""`sluice stats`: counters and drop reasons per port, NF, service and chain, and the socket service's
programs when sluice-stackd answers in the same socket dir."""

import json
import sys

from ..client import NotRunning, socket_dir_default
from ..fmt import drops_str, human_bytes, link_str, table
from .common import EXIT_OK, add_common, client_for, nf_groups, print_json_raw, sub
from .run import format_stack_stats, stack_stats_or_none


def format_stats(st, xstats=False, groups=None):
    """groups: {NF instance: group process} (nf_groups), a GROUP column when not empty."""
    out = []
    ports = st.get("ports", [])
    out.append("PORTS")
    out.append(table(["NAME", "VDEV", "LINK", "CHAIN", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES", "DROPS",
                      "DEV MISSED"],
                     [[p.get("name"), p.get("vdev"), link_str(p.get("link")), p.get("chain") or "-", p.get("rx_pkts"),
                       human_bytes(p.get("rx_bytes")), p.get("tx_pkts"), human_bytes(p.get("tx_bytes")),
                       drops_str(p.get("drops")), (p.get("device") or {}).get("imissed", "-")]
                      for p in ports]))
    if xstats:  # the device's extended statistics, nonzero ones (docs/api.md "Ports")
        rows = [[p.get("name"), k, v] for p in ports for k, v in (p.get("xstats") or {}).items()]
        out.append("")
        out.append("PORT XSTATS (nonzero)")
        out.append(table(["PORT", "XSTAT", "VALUE"], rows) if rows else "(none)")
    out.append("")
    out.append("NFS")
    nfs = st.get("nfs", [])
    if nfs:
        out.append(table(["NAME", "SERVICE", "PID", "WAKEUP", "RX PKTS", "RX BYTES", "TX PKTS", "TX BYTES",
                          "LENT", "KICKS", "DROPS"] + (["GROUP"] if groups else []),
                         [[n.get("name"), n.get("service"), n.get("pid"), n.get("wakeup"), n.get("rx_pkts"),
                           human_bytes(n.get("rx_bytes")), n.get("tx_pkts"), human_bytes(n.get("tx_bytes")),
                           n.get("lent"), n.get("kicks"), drops_str(n.get("drops"))]
                          + ([groups.get(n.get("name"), "-")] if groups else []) for n in nfs]))
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
    doms = st.get("domains") or []
    if len(doms) > 1:  # trust domains (docs/api.md): each one's pool, then copies per boundary
        for d in doms:
            out.append(f"DOMAIN {d.get('name')}  mbufs={d.get('mbufs')}  buffer_size={d.get('buffer_size')}  "
                       f"free={d.get('free')}  lent={d.get('lent')}  nfs={d.get('nfs')}")
    for c in st.get("copies") or []:
        out.append(f"COPIES {c.get('from')} -> {c.get('to')}  packets={c.get('packets')}  bytes={c.get('bytes')}  "
                   f"no_buffer={c.get('no_buffer')}  too_long={c.get('too_long', 0)}")
    viol = violations_line(st.get("violations") or {})
    if viol:
        out.append(viol)
    oset = st.get("out_set") or {}
    if oset.get("packets"):
        out.append(f"PORT SETS  packets={oset.get('packets')}  frames={oset.get('frames')}  copies={oset.get('copies')}")
    return "\n".join(out)


def violations_line(v):
    """One line of what NFs did against the ABI (stats.violations, docs/api.md): its non-zero entries
    as group.kind=n (invalid_desc, ring, attach, quota), or '' when there were none."""
    parts = [f"{group}.{k}={n}" for group, kinds in v.items() if isinstance(kinds, dict)
             for k, n in kinds.items() if n]
    return "VIOLATIONS  " + "  ".join(parts) if parts else ""


def cmd_stats(args):
    # the socket service (docs/sockets.md) when it answers in the same socket dir: a section of its own
    stack = stack_stats_or_none(args.socket_dir or socket_dir_default())
    try:
        with client_for(args) as c:
            # --json --xstats: every xstat, zeros too (the request's "xstats": true)
            st = c.call("stats", xstats=True) if args.json and args.xstats else c.stats()
            if args.json:
                if stack is None:
                    print_json_raw(c)
                else:  # the API's response plus sluice-stackd's `stats`
                    print(json.dumps(dict(json.loads(c.last_raw), stack=stack)))
                return EXIT_OK
    except NotRunning as e:
        if stack is None:
            raise
        # sluice-stackd alone (`sluice stack serve`): its section only
        print(f"sluice: {e}", file=sys.stderr)
        print(json.dumps({"stack": stack}) if args.json else format_stack_stats(stack))
        return EXIT_OK
    print(format_stats(st, xstats=args.xstats, groups=nf_groups(args.socket_dir or socket_dir_default())))
    if stack is not None:
        print()
        print(format_stack_stats(stack))
    return EXIT_OK


def register(subs):
    s = sub(subs, "stats", "show counters and drop reasons per port, NF, service and chain",
            "sluice stats\nsluice stats --json | python3 -m json.tool",
            description="Show counters and drop reasons per port, NF, service and chain. When the socket service "
                        "sluice-stackd answers in the same socket dir (`stack:` in the config, or `sluice stack "
                        "serve`), also each program's sockets, bytes and throttling (`sluice stack stats`); "
                        "--json then adds its response as \"stack\".")
    add_common(s, json_flag=True)
    s.add_argument("--xstats", action="store_true",
                   help="also each port's nonzero device xstats (with --json: every xstat, zeros too)")
    s.set_defaults(func=cmd_stats)
