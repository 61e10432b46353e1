"""`sluice nf scale`: start or drain a service's NF replicas at runtime, through the supervisor
started by `sluice up`."""

import json
import os

from ..client import ApiError, Client, SluiceError, ctl_path, socket_dir_default
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, add_common, die, sub


def _socket_dir(args):
    return os.path.abspath(args.socket_dir or socket_dir_default())


def _natural(name):
    """'s.10' after 's.9'."""
    base, _, idx = name.rpartition(".")
    return (base, int(idx)) if idx.isdigit() else (name, -1)


def supervisor_client(socket_dir, timeout=5.0):
    from ..supervisor import supervisor_socket_path
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
    # a group's processes (docs/groups.md) are started once every member they host is attached
    members = plan.get("members") or {}
    slot_of = {m: s for s in plan["start"] for m in members.get(s, [s])}
    pending_start, pending_drain = set(slot_of), set(plan["drain"])
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
                elif (slots.get(slot_of[name]) or {}).get("state") in ("exited", "backoff", None):
                    pending_start.discard(name)
                    failed.append(name)
                    slot = slots.get(slot_of[name]) or {}
                    say(f"  {name} failed to start ({slot.get('state', 'removed')}); see {slot.get('log')}")
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
        services = {s.get("name"): s for s in ctl.stats().get("services", [])}
        svc = services.get(args.service, {})
        result = {"ok": not failed and all(d["result"] != "drain timeout" for d in drained),
                  "service": args.service, "instances": sorted(svc.get("instances") or [], key=_natural),
                  "policy": svc.get("policy"),
                  "started": plan["start"], "failed": failed, "drained": drained}
        if plan.get("group"):
            result["group"] = True
            result["services"] = {m: sorted(services.get(m, {}).get("instances") or [], key=_natural)
                                  for m in plan.get("services", [])}
            result["instances"] = sorted({s["name"] for s in state["nfs"] if s.get("kind") == "group" and
                                          s.get("group") == args.service and s.get("state") != "draining"}
                                         - {d["name"] for d in drained}, key=_natural)  # its processes
    finally:
        ctl.close()
    if args.json:
        print(json.dumps(result))
    elif result.get("group"):
        print(f"group {args.service}: {args.instances} process(es); "
              + "; ".join(f"service {m}: {len(v)} instance(s) ({', '.join(v) or 'none'})"
                          for m, v in result["services"].items()))
    else:
        print(f"service {args.service}: {len(result['instances'])} instance(s) "
              f"({', '.join(result['instances']) or 'none'}), policy {result['policy']}")
    return EXIT_OK if result["ok"] else EXIT_FAIL


def register(subs):
    s = sub(subs, "nf", "scale a service's NF replicas at runtime",
            "sluice nf scale fwd 3")
    nsubs = s.add_subparsers(dest="nf_cmd", metavar="SUBCOMMAND")
    nsubs.required = True
    ns = sub(nsubs, "scale", "start or drain replicas so SERVICE (or a group's members) has INSTANCES of them",
             "sluice nf scale fwd 3          # start fwd.N until there are 3\n"
             "sluice nf scale fwd 1          # drain the others, stop each once it holds nothing\n"
             "sluice nf scale edge 2         # a group (docs/groups.md): 2 processes, each with one\n"
             "                               # instance of every member service",
             description="Ask the supervisor started by `sluice up` to scale SERVICE. New replicas are started "
                         "and waited for until they attach. A removed replica is drained first: it leaves the "
                         "service at once (its flows move to the others) and is stopped only when it holds no "
                         "packet (queued and lent 0), so nothing is lost; after --drain-timeout it is stopped "
                         "anyway and the command fails. Runtime only: the config file is not changed.")
    add_common(ns, json_flag=True)
    ns.add_argument("service", metavar="SERVICE")
    ns.add_argument("instances", metavar="INSTANCES", type=int, help="replicas wanted, 1..64")
    ns.add_argument("--drain-timeout", type=float, default=10.0, metavar="S",
                    help="seconds a removed replica may take to hand back its packets (default 10)")
    ns.add_argument("--wait", type=float, default=30.0, metavar="S",
                    help="seconds to wait for new replicas to attach (default 30)")
    ns.set_defaults(func=cmd_nf_scale)
