"""`sluice reload FILE`: the difference between the running deployment and a new config, as a plan.

plan(old, new, live) compares the normalized new config with the running one -- the supervisor's
config (`old`) for what only it knows (NFs, their settings and counts), and sluiced's live state
(`live`: the control API's `ports`, `chains`, `rules` and `services`, which include every change
made at runtime) for the rest -- and returns a Plan: the steps that turn one into the other, in
the order they must run, or the reasons it cannot be done live. Nothing here changes anything; the
supervisor applies a plan (Supervisor.reload). docs/architecture.md "Reload".

What cannot change live is refused before anything is applied: the `sluiced:` settings, trust
domains, `steering:`, `stack:`, `guests:`, `groups:` (members, their instances, the groups' settings),
a port's device, a removed chain (sluiced has no chain delete), a new service (sluiced learns
services, their attach tokens and trust domains at start) and a service's attach-side settings
(domain, trusted, access, sandbox, quota, may_send, vm). A group member whose process settings
changed restarts its group's processes.
"""

import copy

# what sluiced fixes for a service when it starts (attach checks, memory): not live
NF_FIXED = ("domain", "trusted", "access", "sandbox", "quota", "may_send", "vm", "pool_mbufs")
# what the supervisor's processes are made of: a change restarts the service's instances
NF_PROCESS = ("program", "program_path", "args", "wakeup", "batch", "timeout_us", "spin_us", "restart",
              "cpu_weight", "cpus")
# top-level sections compared whole
# (groups: which NFs share a process, and how many processes: docs/groups.md)
WHOLE = ("sluiced", "domains", "steering", "stack", "guests", "groups", "metrics", "web", "malformed")


class Plan:
    def __init__(self):
        self.steps = []     # [{"kind", "text", ...}] in order; kind api: "request"; nf_*: "service"
        self.refused = []   # reasons, each naming the field

    def add(self, kind, text, **kw):
        self.steps.append(dict(kind=kind, text=text, **kw))

    def to_json(self):
        return {"steps": self.steps, "refused": self.refused}


def _rule_key(r):
    """A rule as the API lists it and as a config gives it, compared alike."""
    r = {k: v for k, v in r.items() if k not in ("id", "hits")}
    r.setdefault("name", None)
    r.setdefault("priority", 0)
    return r


def _by_name(items):
    return {x["name"]: x for x in items}


def plan(old, new, live):
    p = Plan()
    for key in WHOLE:
        if old.get(key) != new.get(key):
            if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
                for f in sorted(set(old[key]) | set(new[key])):
                    if old[key].get(f) != new[key].get(f):
                        p.refused.append(f"{key}.{f}: {old[key].get(f)!r} -> {new[key].get(f)!r} cannot change live "
                                         "(`sluice down` and `up` again)")
            else:
                p.refused.append(f"{key}: cannot change live (`sluice down` and `up` again)")

    live_ports = _by_name(live["ports"])
    new_ports = _by_name(new["ports"])
    for i, port in enumerate(new["ports"]):
        cur = live_ports.get(port["name"])
        if cur is not None and cur["vdev"] != port["vdev"]:
            p.refused.append(f"ports[{i}].vdev: port '{port['name']}' is {cur['vdev']!r}; a port's device cannot "
                             "change live: remove it and add it under another name")
        elif cur is not None and _live_queues(cur) != port.get("queues", 1):
            p.refused.append(f"ports[{i}].queues: port '{port['name']}' has {_live_queues(cur)} queues; a port's "
                             "queues cannot change live: remove it and add it under another name")
        # device options (rx_desc, tx_desc, mtu, offloads) are set when sluiced opens the port
        opts = {k: port[k] for k in ("rx_desc", "tx_desc", "mtu", "offloads") if k in port}
        for k in opts if cur is None else sorted(set(opts) | set(cur.get("options") or {})):
            if cur is None:
                p.refused.append(f"ports[{i}].{k}: port '{port['name']}' would be added live, and ports added "
                                 "live take sluiced's defaults: device options need `sluice down` and `up` again")
                break
            def norm(x):
                return sorted(x) if isinstance(x, list) else x
            if norm(opts.get(k)) != norm((cur.get("options") or {}).get(k)):
                p.refused.append(f"ports[{i}].{k}: port '{port['name']}' runs with {k} "
                                 f"{(cur.get('options') or {}).get(k, 'default')!r}; device options cannot change "
                                 "live (`sluice down` and `up` again)")

    live_chains = _by_name(live["chains"])
    new_chains = _by_name(new["chains"])
    for name in live_chains:
        if name not in new_chains:
            p.refused.append(f"chains: chain '{name}' is not in the new config; sluiced cannot delete a chain live "
                             "(keep it, or `sluice down` and `up` again)")

    old_nfs = _by_name(old["nfs"])
    new_nfs = _by_name(new["nfs"])
    for i, nf in enumerate(new["nfs"]):
        o = old_nfs.get(nf["name"])
        if o is None:
            p.refused.append(f"nfs[{i}] (service '{nf['name']}'): a new service cannot be added live: sluiced learns "
                             "services, their attach tokens and trust domains at start")
            continue
        for f in NF_FIXED:
            if o.get(f) != nf.get(f):
                p.refused.append(f"nfs[{i}].{f}: {o.get(f)!r} -> {nf.get(f)!r} cannot change live (sluiced fixed it "
                                 f"for service '{nf['name']}' at start)")
    if p.refused:
        return p

    # 1. ports added (ingress chains are set once the chains exist)
    for port in new["ports"]:
        if port["name"] not in live_ports:
            p.add("api", f"add port {port['name']} ({port['vdev']})",
                  request={"cmd": "port_add", "name": port["name"], "vdev": port["vdev"],
                           "queues": port.get("queues", 1)})
    # 2. NFs: settings changed (instances restarted), more instances
    for nf in new["nfs"]:
        o = old_nfs[nf["name"]]
        changed = [f for f in NF_PROCESS if o.get(f) != nf.get(f)]
        if changed:
            p.add("nf_replace", f"restart the instances of {nf['name']} ({', '.join(changed)} changed)",
                  service=nf["name"], nf=nf)
        if nf["instances"] > o["instances"]:
            p.add("nf_scale", f"scale {nf['name']} {o['instances']} -> {nf['instances']}", service=nf["name"],
                  instances=nf["instances"], nf=nf)
    # 3. chains added or changed, 4. ingress chains, 5. rules, 6. policies
    for ch in new["chains"]:
        cur = live_chains.get(ch["name"])
        if cur is None or cur["nfs"] != ch["nfs"] or cur["exit"] != ch["exit"]:
            p.add("api", f"{'add' if cur is None else 'change'} chain {ch['name']}: "
                         f"{' -> '.join(ch['nfs'])} exit {ch['exit'] or '-'}",
                  request={"cmd": "chain_set", "name": ch["name"], "nfs": ch["nfs"], "exit": ch["exit"]})
    for port in new["ports"]:
        cur = live_ports.get(port["name"])
        if (cur.get("chain") if cur else None) != port["chain"]:
            p.add("api", f"port {port['name']}: ingress chain {port['chain'] or '-'}",
                  request={"cmd": "port_chain_set", "port": port["name"], "chain": port["chain"]})
    new_rules = sorted(new.get("rules") or [], key=lambda r: -r.get("priority", 0))  # stable: ties keep order
    if [_rule_key(r) for r in live["rules"]] != [_rule_key(r) for r in new_rules]:
        p.add("api", f"replace the rules ({len(live['rules'])} -> {len(new_rules)})",
              request={"cmd": "rules_set", "rules": copy.deepcopy(new.get("rules") or [])})
    live_svcs = _by_name(live["services"])
    for nf in new["nfs"]:
        cur = live_svcs.get(nf["name"])
        if cur is not None and cur["policy"] != nf["policy"]:
            p.add("api", f"service {nf['name']}: policy {cur['policy']} -> {nf['policy']}",
                  request={"cmd": "service_set", "name": nf["name"], "policy": nf["policy"]})
    # 7. fewer instances, services removed (their chains were changed above), 8. ports removed
    for nf in new["nfs"]:
        o = old_nfs[nf["name"]]
        if nf["instances"] < o["instances"]:
            p.add("nf_scale", f"scale {nf['name']} {o['instances']} -> {nf['instances']} (drain)", service=nf["name"],
                  instances=nf["instances"], nf=nf)
    for name in old_nfs:
        if name not in new_nfs:
            p.add("nf_remove", f"remove service {name} (drain and stop its instances)", service=name)
    for port in live["ports"]:
        if port["name"] not in new_ports:
            p.add("api", f"remove port {port['name']}", request={"cmd": "port_del", "name": port["name"]})
    return p


def _live_queues(port):
    """RX queues of a port as the control API lists it (its per-queue counters)."""
    q = port.get("queues", 1)
    return len(q) if isinstance(q, list) else q
