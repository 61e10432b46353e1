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
from .client import ApiError, Client, SluiceError, ctl_path, socket_dir_default

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
    if len(socket_dir) + len("/ctl.sock") > sconfig.SUN_PATH_MAX:
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
