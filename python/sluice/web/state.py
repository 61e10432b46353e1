"""What the web view draws: samples of sluiced's `stats` and `status` taken once a second, and the view
(/api/state) built from the last two of them -- rates per port, per NF, per service and per chain edge,
CPU per NF process -- so every browser tab shows the same numbers and none of them adds requests to
sluiced.

    sampler = Sampler(ctl_path, socket_dir)   # sampler.start(): a thread, one sample per interval
    sampler.view()                            # the latest view (a dict, JSON-ready)
    sampler.trace()                           # {"trace": ...} from `trace_last`, or {"trace": None}

build_view(prev, cur) is the pure part: two samples in, the view out.
"""

import threading
import time

from ..client import ApiError, Client, SluiceError
from ..commands.common import nf_groups
from ..exporter.nfs import process_cpu_seconds
from ..fmt import drops_total

INTERVAL = 1.0
# the drop reason a port counts when its TX queue refuses a packet: what is lost on the edge into an exit port
EXIT_DROP_REASON = "tx_full"


def _delta_rate(cur, prev, dt):
    """Per-second rate of a counter between two samples; None when either is missing. A counter that went
    backwards was reset (an NF restarted under the same name): its current value is what it counted since."""
    if cur is None or prev is None or dt is None or dt <= 0:
        return None
    if not isinstance(cur, (int, float)) or not isinstance(prev, (int, float)):
        return None
    d = cur - prev
    return (cur if d < 0 else d) / dt


def _sum_rates(rates):
    """Sum of known rates; None when none is known (the first sample, or nothing attached)."""
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


def take_sample(client, socket_dir):
    """One sample: `stats` with the wall-clock times around it (the counters were read in between, which
    is what lets a test bound the rates exactly), `status`, each NF process's CPU time and the groups."""
    sent = time.time()
    stats = client.call("stats")
    answered, mono = time.time(), time.monotonic()
    status = client.call("status")
    cpu = {}
    for n in stats.get("nfs") or []:
        pid = n.get("pid")
        if pid and pid not in cpu:
            cpu[pid] = process_cpu_seconds(pid)
    return {"sent": sent, "answered": answered, "mono": mono, "stats": stats, "status": status, "cpu": cpu,
            "groups": nf_groups(socket_dir) if socket_dir else {}}


def build_view(prev, cur):
    """The view of sample `cur`, with rates over the time since sample `prev` (None: no rates yet)."""
    st, status = cur["stats"], cur["status"] or {}
    dt = cur["mono"] - prev["mono"] if prev else None
    pst = prev["stats"] if prev else {}

    def by_name(items):
        return {x.get("name"): x for x in items or []}

    prev_ports, prev_nfs, prev_svcs = by_name(pst.get("ports")), by_name(pst.get("nfs")), by_name(pst.get("services"))
    ports = {}
    for p in st.get("ports") or []:
        q = prev_ports.get(p.get("name"), {})
        rx_bps, tx_bps = _delta_rate(p.get("rx_bytes"), q.get("rx_bytes"), dt), \
            _delta_rate(p.get("tx_bytes"), q.get("tx_bytes"), dt)
        ports[p.get("name")] = {
            "name": p.get("name"), "vdev": p.get("vdev"), "chain": p.get("chain"),
            "link_up": (p.get("link") or {}).get("up"),
            "rx_pps": _delta_rate(p.get("rx_pkts"), q.get("rx_pkts"), dt),
            "tx_pps": _delta_rate(p.get("tx_pkts"), q.get("tx_pkts"), dt),
            "rx_mbps": None if rx_bps is None else rx_bps * 8 / 1e6,
            "tx_mbps": None if tx_bps is None else tx_bps * 8 / 1e6,
            "drops_ps": _delta_rate(drops_total(p.get("drops")), drops_total(q.get("drops")) if q else None, dt),
            "exit_drops_ps": _delta_rate((p.get("drops") or {}).get(EXIT_DROP_REASON),
                                         (q.get("drops") or {}).get(EXIT_DROP_REASON), dt)}

    groups = cur.get("groups") or {}
    nfs = {}
    for n in st.get("nfs") or []:
        q = prev_nfs.get(n.get("name"), {})
        pid = n.get("pid")
        cpu_pct = None
        if prev and q.get("pid") == pid:  # the same process in both samples: its CPU time is comparable
            c = _delta_rate(cur["cpu"].get(pid), prev["cpu"].get(pid), dt)
            cpu_pct = None if c is None else c * 100
        nfs[n.get("name")] = {
            "name": n.get("name"), "service": n.get("service"), "pid": pid, "wakeup": n.get("wakeup"),
            "domain": n.get("domain"), "access": n.get("access"), "guest": bool(n.get("guest")),
            "group": groups.get(n.get("name")), "lent": n.get("lent"), "queued": n.get("queued"),
            "rx_pps": _delta_rate(n.get("rx_pkts"), q.get("rx_pkts"), dt),
            "tx_pps": _delta_rate(n.get("tx_pkts"), q.get("tx_pkts"), dt),
            "drops_ps": _delta_rate(drops_total(n.get("drops")), drops_total(q.get("drops")) if q else None, dt),
            "cpu_pct": cpu_pct}

    services = {}
    for s in st.get("services") or []:
        name = s.get("name")
        members = [nfs[i] for i in s.get("instances") or [] if i in nfs]
        q = prev_svcs.get(name)
        own_drops = _delta_rate(drops_total(s.get("drops")), drops_total(q.get("drops")) if q else None, dt)
        services[name] = {
            "name": name, "policy": s.get("policy"), "saturated": bool(s.get("saturated")),
            "replicas": [m["name"] for m in members],
            "domain": members[0]["domain"] if members else None,
            # what the service received: the edge into it, whichever chain or rule sent it
            "rx_pps": _sum_rates(m["rx_pps"] for m in members),
            # lost on the way in: its replicas' rings (ring_full, invalid_desc) and the service's own
            # (nf_gone: no replica; backpressure)
            "drops_ps": _sum_rates([own_drops] + [m["drops_ps"] for m in members])}

    chains = []
    chained = set()
    for c in st.get("chains") or []:
        hops = list(c.get("nfs") or [])
        chained.update(hops)
        entries = [p for p in ports.values() if p["chain"] == c.get("name")]
        edges = []
        source = [f"port:{p['name']}" for p in entries] or ["rules"]
        for i, h in enumerate(hops):
            svc = services.get(h, {})
            edges.append({"from": source if i == 0 else [f"service:{hops[i - 1]}"], "to": f"service:{h}",
                          "pps": svc.get("rx_pps"), "drops_ps": svc.get("drops_ps")})
        exit_port = ports.get(c.get("exit"))
        last = [f"service:{hops[-1]}"] if hops else source
        if exit_port:
            # what the exit port sent (also other chains' and NFs' OUTs to it) and what its TX queue refused
            edges.append({"from": last, "to": f"port:{exit_port['name']}", "pps": exit_port["tx_pps"],
                          "drops_ps": exit_port["exit_drops_ps"]})
        else:
            edges.append({"from": last, "to": "drop", "pps": None, "drops_ps": None})
        chains.append({"name": c.get("name"), "entry_ports": [p["name"] for p in entries], "exit": c.get("exit"),
                       "hops": hops, "edges": edges})

    unchained = [s for s in services if s not in chained and services[s]["replicas"]]

    prev_copies = {(x.get("from"), x.get("to")): x for x in pst.get("copies") or []}
    domains = []
    for d in st.get("domains") or status.get("domains") or []:
        domains.append({k: d.get(k) for k in ("name", "buffer_size", "mbufs", "free", "lent", "nfs")})
    copies = [{"from": x.get("from"), "to": x.get("to"),
               "pps": _delta_rate(x.get("packets"), prev_copies.get((x.get("from"), x.get("to")), {}).get("packets"),
                                  dt)} for x in st.get("copies") or []]

    group_view = {}
    for nf, g in sorted(groups.items()):
        entry = group_view.setdefault(g, {"name": g, "members": [], "pid": None})
        entry["members"].append(nf)
        if nf in nfs:
            entry["pid"] = nfs[nf]["pid"]

    pdrops = pst.get("drops") or {}
    drops = {k: _delta_rate(v, pdrops.get(k), dt) for k, v in (st.get("drops") or {}).items()}
    return {
        "ok": True, "error": None, "updated": cur["answered"],
        # the two samples the rates are over: stats was read between `sent` and `answered` (wall clock, s)
        "window": ({"from": {"sent": prev["sent"], "answered": prev["answered"]},
                    "to": {"sent": cur["sent"], "answered": cur["answered"]}, "seconds": dt} if prev else None),
        "sluiced": {"pid": status.get("pid"), "version": status.get("version"), "uptime_s": status.get("uptime_s"),
                    "workers": len(status.get("worker_lcores") or []) or None},
        "ports": list(ports.values()), "nfs": list(nfs.values()), "services": list(services.values()),
        "chains": chains, "unchained": unchained, "domains": domains, "copies": copies,
        "groups": list(group_view.values()), "drops": drops}


class Sampler:
    """Samples sluiced every `interval` seconds in a thread of its own and keeps the view of the last two
    samples. When sluiced does not answer the view says why (and when it last did); the thread keeps
    trying, and the rates start afresh once it answers again."""

    def __init__(self, ctl_path, socket_dir=None, timeout=5.0, interval=INTERVAL):
        self.ctl_path, self.socket_dir, self.timeout, self.interval = ctl_path, socket_dir, timeout, interval
        self._client = None
        self._client_lock = threading.Lock()   # one request at a time on the connection
        self._view_lock = threading.Lock()
        self._prev = None
        self._last_ok = None
        self._view = {"ok": False, "error": "no sample taken yet", "updated": None, "last_ok": None}
        self._stop = threading.Event()
        self._thread = None

    def _call(self, fn):
        """fn(client) on the shared connection; a failed connection is dropped so the next call reconnects
        (sluiced restarted, or is gone)."""
        with self._client_lock:
            try:
                if self._client is None:
                    self._client = Client(self.ctl_path, timeout=self.timeout)
                return fn(self._client)
            except (SluiceError, OSError, ValueError):
                if self._client is not None:
                    self._client.close()
                self._client = None
                raise

    def sample_once(self):
        try:
            cur = self._call(lambda c: take_sample(c, self.socket_dir))
        except ApiError as e:
            return self._failed(f"sluiced refused `stats`: {e}")
        except (SluiceError, OSError, ValueError) as e:
            return self._failed(str(e))
        prev = self._prev
        if prev and prev["status"].get("pid") != cur["status"].get("pid"):
            prev = None  # another sluiced: its counters started from zero
        view = build_view(prev, cur)
        view["last_ok"] = cur["answered"]
        with self._view_lock:
            self._prev, self._last_ok, self._view = cur, cur["answered"], view

    def _failed(self, error):
        with self._view_lock:
            self._prev = None
            self._view = {"ok": False, "error": error, "updated": time.time(), "last_ok": self._last_ok}

    def view(self):
        with self._view_lock:
            return self._view

    def trace(self):
        """The latest packet trace (`trace_last`); {"trace": None} while sluiced has no such command or no
        trace was taken, with "error" when sluiced could not be asked."""
        try:
            resp = self._call(lambda c: c.request({"cmd": "trace_last"}))
        except (SluiceError, OSError, ValueError) as e:
            return {"trace": None, "error": str(e)}
        if resp.get("ok") is not True:
            err = str(resp.get("error", ""))
            if "unknown command" in err:
                return {"trace": None}  # this sluiced has no tracer: nothing to show, nothing wrong
            return {"trace": None, "error": err}
        return {"trace": resp.get("trace", {k: v for k, v in resp.items() if k != "ok"})}

    def _run(self):
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # a slow answer: keep the cadence rather than catch up in a burst
                next_at = now + self.interval
            self._stop.wait(next_at - now)

    def start(self):
        self._thread = threading.Thread(target=self._run, name="sluice-web-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(self.timeout + 1)
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None
