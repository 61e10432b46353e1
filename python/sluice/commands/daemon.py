"""`sluice up`, `down` and `status`: sluiced and the supervisor that starts and restarts its NFs."""

import json
import os
import sys

from .. import config as sconfig
from ..client import socket_dir_default
from ..fmt import drops_str, duration, human_bytes, human_count, link_str, table
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, add_common, client_for, die, load_config_or_exit, sub


def cmd_up(args):
    from ..supervisor import run_up
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
    from ..supervisor import stop_running
    return stop_running(args.socket_dir or socket_dir_default(), timeout=args.wait)


def cmd_restart(args):
    import time
    from .nf import supervisor_client
    from ..client import ApiError, SluiceError
    sd = os.path.abspath(args.socket_dir or socket_dir_default())
    t0 = time.monotonic()
    try:
        with supervisor_client(sd, timeout=args.wait) as sup:
            if not args.json:
                print("restarting sluiced (the NFs keep running and attach again) ...", flush=True)
            r = sup.call("restart")
    except ApiError as e:
        return die(f"supervisor: {e}")
    except SluiceError as e:
        return die(str(e))
    if args.json:
        print(json.dumps(r))
        return EXIT_OK
    # the NFs re-attach by themselves: wait until sluiced lists every NF the supervisor runs
    from ..supervisor import read_state
    want = {m for n in (read_state(sd) or {}).get("nfs", [])
            if n.get("state") == "running" and n.get("kind") not in ("guest", "stack", "exporter", "web")
            for m in (n.get("members") if n.get("kind") == "group" else [n["name"]])}  # a group: its members
    missing = want
    while time.monotonic() - t0 < args.wait:
        try:
            with client_for(args) as c:
                missing = want - {n.get("name") for n in c.nfs()}
        except SluiceError:
            pass
        if not missing:
            break
        time.sleep(0.1)
    print(f"sluiced restarted: pid {r.get('old_pid')} -> {r.get('pid')} in {r.get('seconds')} s; "
          + (f"{len(want)} NF(s) attached again after {time.monotonic() - t0:.2f} s" if not missing else
             f"still waiting for {', '.join(sorted(missing))} (see their logs)"))
    return EXIT_OK if not missing else EXIT_FAIL


def cmd_reload(args):
    from .nf import supervisor_client
    from ..client import ApiError, SluiceError
    _cfg, err = load_config_or_exit(args.config)  # a file that does not validate changes nothing
    if err:
        print(f"config error: {err}\nnothing was changed", file=sys.stderr)
        return EXIT_USAGE
    sd = os.path.abspath(args.socket_dir or socket_dir_default())
    try:
        with supervisor_client(sd, timeout=args.wait) as sup:
            r = sup.call("reload", path=os.path.abspath(args.config), dry_run=args.dry_run)
    except ApiError as e:
        return die(f"supervisor: {e}")
    except SluiceError as e:
        return die(str(e))
    if args.json:
        print(json.dumps(r))
        return EXIT_FAIL if r["plan"]["refused"] else EXIT_OK
    plan = r["plan"]
    if plan["refused"]:
        print(f"sluice reload: {args.config} cannot be applied live:", file=sys.stderr)
        for why in plan["refused"]:
            print(f"  - {why}", file=sys.stderr)
        print("nothing was changed", file=sys.stderr)
        return EXIT_FAIL
    if not plan["steps"]:
        print(f"{args.config}: the running deployment already matches it; nothing to do")
        return EXIT_OK
    print(f"plan ({len(plan['steps'])} step(s)):")
    for i, st in enumerate(plan["steps"], 1):
        print(f"  {i}. {st['text']}")
    if args.dry_run:
        print("dry run: nothing was applied")
    else:
        print(f"applied {len(r['applied'])} step(s); what did not change was not touched")
    return EXIT_OK


def _group_view(state):
    """NF groups (docs/groups.md) from the supervisor's state: ({member instance: its group process's state
    entry}, [group process entries]) -- both empty without groups."""
    groups = [n for n in (state or {}).get("nfs", []) if n.get("kind") == "group"]
    return {m: g for g in groups for m in g.get("members") or []}, groups


def _status_json_groups(state, nfs):
    """What `status --json` adds with groups: every NF instance with its group (null: a process of its own),
    and the groups' processes."""
    member_of, groups = _group_view(state)
    attached = {n.get("name"): n for n in nfs}
    names = list(attached) + [n["name"] for n in (state or {}).get("nfs", [])
                              if n.get("kind") not in ("guest", "stack", "group", "exporter", "web")
                              and n["name"] not in attached]
    names += [m for m in member_of if m not in names]
    out_nfs = []
    for name in names:
        n, g = attached.get(name), member_of.get(name)
        out_nfs.append({"name": name, "service": n.get("service") if n else name.rpartition(".")[0],
                        "pid": n.get("pid") if n else None, "attached": n is not None,
                        "group": g.get("group") if g else None, "group_process": g.get("name") if g else None})
    out_groups = [{"name": g.get("name"), "group": g.get("group"), "members": g.get("members"), "pid": g.get("pid"),
                   "state": g.get("state"), "restarts": g.get("restarts"), "log": g.get("log")} for g in groups]
    return out_nfs, out_groups


def cmd_status(args):
    from ..supervisor import pid_alive, read_state
    state = read_state(args.socket_dir or socket_dir_default())
    vms = [n for n in (state or {}).get("nfs", []) if n.get("kind") == "guest"]  # `guests:` (docs/guests.md)
    has_groups = any(n.get("kind") == "group" for n in (state or {}).get("nfs", []))
    with client_for(args) as c:
        st = c.status()
        raw = c.last_raw
        if args.json:
            if not vms and not has_groups:
                print(raw)
                return EXIT_OK
            out = json.loads(raw)
            if vms:  # the API's response plus the supervisor's ordinary guests
                out["guests"] = vms
            if has_groups:  # ... and every NF with its group, and the groups' processes
                out["nfs"], out["groups"] = _status_json_groups(state, c.nfs())
            print(json.dumps(out))
            return EXIT_OK
        nfs = c.nfs()
        ports = c.ports()
    print(f"sluiced {st.get('version', '?')}  pid {st.get('pid')}  up {duration(st.get('uptime_s'))}  "
          f"worker lcore {st.get('worker_lcore', '-')}")
    doms = st.get("domains") or []
    bsize = f", buffers of {doms[0].get('buffer_size')} bytes" if doms and doms[0].get("buffer_size") else ""
    print(f"memory: {human_bytes(st.get('region_bytes'))} region, huge pages "
          f"{'yes' if st.get('huge_pages') else 'no'}; mbufs {st.get('mbufs')} total{bsize}, "
          f"{st.get('mbufs_free')} free, {st.get('mbufs_lent')} lent to NFs")
    if len(doms) > 1:  # trust domains: one region each
        print("domains: " + ", ".join(f"{d.get('name')} {human_bytes(d.get('region_bytes'))} "
                                      f"({d.get('mbufs')} mbufs, {d.get('free')} free)" for d in doms))
    print(f"{st.get('port_count')} port(s), {st.get('chain_count')} chain(s), {st.get('nf_count')} NF(s) attached")
    sup = {}
    if state:
        sp = (state.get("supervisor") or {})
        alive = pid_alive(sp.get("pid"), sp.get("starttime"))
        print(f"supervisor: pid {sp.get('pid')} ({'running' if alive else 'gone'})"
              + (f", config {state.get('config')}" if state.get("config") else ""))
        sup = {n["name"]: n for n in state.get("nfs", []) if n.get("kind") not in ("guest", "group")}
        exp = next((n for n in state.get("nfs", []) if n.get("kind") == "exporter"), None)
        if exp:  # `metrics:` (docs/observability.md)
            print(f"metrics: http://{exp.get('listen')}/metrics (exporter pid {exp.get('pid')}, {exp.get('state')})")
        web = next((n for n in state.get("nfs", []) if n.get("kind") == "web"), None)
        if web:  # `web:` (docs/observability.md "Web view")
            print(f"web view: http://{web.get('listen')}/ (pid {web.get('pid')}, {web.get('state')})")
    if ports:  # link state and device settings (docs/ports.md "PCI NICs")
        print()
        print(table(["PORT", "VDEV", "LINK", "MTU", "DESC RX/TX", "OFFLOADS", "CHAIN"],
                    [[p.get("name"), p.get("vdev"), link_str(p.get("link")), p.get("mtu"),
                      f"{p.get('rx_desc', '-')}/{p.get('tx_desc', '-')}", ",".join(p.get("offloads") or []) or "-",
                      p.get("chain") or "-"] for p in ports]))
    member_of, groups = _group_view(state)  # NF groups: a member's restarts are its group process's
    unattached = dict(member_of)
    rows = []
    for nf in nfs:
        s = sup.pop(nf.get("name"), None) or unattached.pop(nf.get("name"), None) or {}
        g = member_of.get(nf.get("name"))
        # an NF in a guest (nfs[].vm): its pid is its QEMU's
        rows.append([nf.get("name") + (" (guest)" if nf.get("guest") else ""), nf.get("service"), nf.get("pid"),
                     nf.get("wakeup") + (" fifo" if nf.get("sched") == "fifo" else ""),  # sluiced.nf_sched
                     human_count(nf.get("rx_pkts")), human_count(nf.get("tx_pkts")), nf.get("lent"),
                     drops_str(nf.get("drops")), s.get("restarts", "-")] + ([g["name"] if g else "-"] if groups else []))
    for name, s in sup.items():  # configured but not attached right now
        rows.append([name, s.get("service"), s.get("pid"), "-", "-", "-", "-", f"({s.get('state')})",
                     s.get("restarts", "-")] + (["-"] if groups else []))
    for name, g in unattached.items():  # group members not attached right now
        rows.append([name, name.rpartition(".")[0], g.get("pid"), "-", "-", "-", "-", f"({g.get('state')})",
                     g.get("restarts", "-"), g.get("name")])
    if rows:
        print()
        print(table(["NF", "SERVICE", "PID", "WAKEUP", "RX", "TX", "LENT", "DROPS", "RESTARTS"]
                    + (["GROUP"] if groups else []), rows))
    if groups:  # NF groups (docs/groups.md): one process each, hosting instance k of every member
        print()
        print(table(["GROUP", "PID", "STATE", "RESTARTS", "MEMBERS"],
                    [[g.get("name"), g.get("pid"), g.get("state"), g.get("restarts", "-"),
                      " ".join(g.get("members") or [])] for g in groups]))
    if vms:
        print()
        print(table(["GUEST", "PORT", "PID", "STATE", "IP", "MEMORY", "RESTARTS"],
                    [[g.get("name"), g.get("port"), g.get("pid"), g.get("state"), g.get("ip") or "-",
                      f"{g.get('memory')} MiB", g.get("restarts", "-")] for g in vms]))
    return EXIT_OK


def register(subs):
    s = sub(subs, "up", "start sluiced and the configured NFs, and supervise them",
            "sluice up sluice.yaml -d --build-dir build\n"
            "sluice up sluice.yaml            # foreground; Ctrl-C stops everything",
            description="Validate CONFIG, write its JSON form to <socket-dir>/config.json, start sluiced, wait "
                        "until it answers on its control socket, launch every NF instance (service 'fwd' with "
                        "instances: 2 gives fwd.0 and fwd.1; output in <socket-dir>/logs/<name>.log; the members of "
                        "a group, groups: or nfs[].group, run in one sluice-group process <group>.<k> per "
                        "instance k, and their logs/<name>.log is its log) and wait until they have attached. Then supervise: restart NFs per their restart policy with "
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

    s = sub(subs, "down", "stop the NFs and sluiced started by `sluice up`",
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

    s = sub(subs, "restart", "restart sluiced in place; the NFs keep running, with their state",
            "sluice restart\nsluice restart --json     # the supervisor's answer: pid, old_pid, seconds",
            description="Ask the supervisor of `sluice up` for a planned restart of sluiced (an upgrade of the "
                        "binary, say): sluiced stops reading its ports, lets the NFs hand back what they hold "
                        "(at most 0.5 s), tells them to attach again and exits; the supervisor starts a new "
                        "sluiced on the same config, sockets and tokens, which first replays what was changed "
                        "at runtime (chains, rules, services, ports: <socket-dir>/runtime.json). NF processes "
                        "keep running, with their state, and attach again by themselves; the command waits "
                        "until they have. Flow-table entries start empty. Guest NFs and sandboxed NFs cannot "
                        "re-attach and are restarted (docs/architecture.md \"Restarts\").")
    s.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="sluiced socket directory (default: $SLUICE_SOCKET_DIR or /run/sluice)")
    s.add_argument("--wait", type=float, default=30.0, metavar="S",
                   help="seconds to wait for the restart and the NFs (default 30)")
    s.add_argument("--json", action="store_true", help="print the supervisor's answer as JSON")
    s.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for each answer from the new sluiced (default 5)")
    s.set_defaults(func=cmd_restart)

    s = sub(subs, "reload", "apply a changed config to the running deployment, touching only what changed",
            "sluice reload sluice.yaml --dry-run   # print the plan, change nothing\n"
            "sluice reload sluice.yaml",
            description="Validate CONFIG, compare it with the running deployment (sluiced's live ports, chains, "
                        "rules and services -- runtime changes included -- and the supervisor's NFs), print the "
                        "plan and apply it in order: ports added, NFs whose settings changed restarted, replicas "
                        "started, chains set, ingress chains, the rules, service policies, replicas drained, "
                        "services removed, ports removed. What cannot change live (sluiced: settings, domains, "
                        "steering:, stack:, guests:, a port's device, a removed chain, a new service, a service's "
                        "domain/trust/sandbox/quota/may_send/vm) is refused before anything is applied, naming "
                        "the field; a config that does not validate changes nothing. Afterwards the new config "
                        "is the deployment's (a sluiced restart starts from it).")
    s.add_argument("config", metavar="CONFIG.yaml", help="the new Sluice YAML config")
    s.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    s.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="sluiced socket directory (default: $SLUICE_SOCKET_DIR or /run/sluice)")
    s.add_argument("--wait", type=float, default=120.0, metavar="S",
                   help="seconds to wait for the supervisor to apply it (default 120)")
    s.add_argument("--json", action="store_true", help="print the supervisor's answer (plan, applied) as JSON")
    s.set_defaults(func=cmd_reload)

    s = sub(subs, "status", "show sluiced's status and the attached NFs",
            "sluice status\nsluice status --json     # the `status` response of the control API")
    add_common(s, json_flag=True)
    s.set_defaults(func=cmd_status)
