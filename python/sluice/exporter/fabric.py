"""The fabric as a whole: sluiced itself, drops by reason, violations, pools per trust domain, copies
between domains, pipes, the flow table, the workers' active sets, port sets and NF scheduling."""

from .registry import collector

PIPES = (("opened", "sluice_pipes_opened_total", "NF-to-NF pipes opened"),
         ("closed", "sluice_pipes_closed_total", "NF-to-NF pipes closed"),
         ("packets", "sluice_pipes_packets_total", "packets handed over NF to NF on pipe rings (each hop once)"),
         ("fused", "sluice_pipes_fused_packets_total", "packets that went through a fused segment of a group "
                                                        "(counted once per segment)"),
         ("close_timeouts", "sluice_pipes_close_timeouts_total", "pipe readers disconnected for not letting go "
                                                                 "of a closing pipe within 1 s"))
FLOW_COUNTERS = ("hits", "misses", "rechecked", "moved", "expired", "full", "pins", "unpins", "pin_ignored")
FLOW_HELP = {"hits": "packets that found their flow in the flow table",
             "misses": "packets that did not (steered by the rules, then added)",
             "rechecked": "flow entries checked again against changed rules",
             "moved": "flows moved to another replica",
             "expired": "flow entries expired after idle_ms",
             "full": "flows not added: the table was full",
             "pins": "flows pinned by an NF (SL_ACT_F_PIN)",
             "unpins": "flows unpinned by an NF",
             "pin_ignored": "pin requests ignored"}


@collector("sluiced")
def collect_sluiced(ex, stats, status):
    ex.gauge("sluice_info", "1, labelled with sluiced's version", 1, version=status.get("version") or "")
    ex.gauge("sluice_uptime_seconds", "seconds since sluiced started", status.get("uptime_s"))
    ex.gauge("sluice_nfs_attached", "NFs attached", status.get("nf_count"))
    ex.gauge("sluice_nfs_max", "NF slots (sluiced.max_nfs)", status.get("max_nfs"))
    ex.gauge("sluice_ports", "ports", status.get("port_count"))
    ex.gauge("sluice_chains", "chains", status.get("chain_count"))
    ex.gauge("sluice_workers", "worker lcores (sluiced.workers)", len(status.get("worker_lcores") or [None]))
    ex.gauge("sluice_huge_pages", "1 if the packet regions are on huge pages", 1 if status.get("huge_pages") else 0)


@collector("drops")
def collect_drops(ex, stats, status):
    for reason, v in (stats.get("drops") or {}).items():
        ex.counter("sluice_drops_total", "packets sluiced dropped, by reason (docs/api.md \"Drops\")", v,
                   reason=reason)
    viol = stats.get("violations") or {}
    for reason, v in (viol.get("invalid_desc") or {}).items():
        ex.counter("sluice_violations_invalid_descriptors_total", "descriptors NFs returned that sluiced refused, "
                   "by reason (they add up to the invalid_desc drops)", v, reason=reason)
    for kind, v in (viol.get("ring") or {}).items():
        ex.counter("sluice_violations_ring_faults_total", "NFs disconnected for breaking the ring protocol, by kind",
                   v, kind=kind)
    for reason, v in (viol.get("attach") or {}).items():
        ex.counter("sluice_violations_attach_refused_total", "attaches refused, by reason", v, reason=reason)
    for scope, v in (viol.get("quota") or {}).items():
        ex.counter("sluice_violations_quota_drops_total", "packets dropped for a buffer quota, by its scope", v,
                   scope=scope)


@collector("pool")
def collect_pool(ex, stats, status):
    pool = stats.get("pool") or {}
    ex.gauge("sluice_pool_buffers", "packet buffers in every trust domain's pool", pool.get("mbufs"))
    ex.gauge("sluice_pool_free_buffers", "packet buffers free", pool.get("free"))
    ex.gauge("sluice_pool_lent_buffers", "packet buffers NFs hold", pool.get("lent"))
    for d in stats.get("domains") or []:
        dom = d.get("name")
        ex.gauge("sluice_domain_buffers", "packet buffers in the trust domain's pool", d.get("mbufs"), domain=dom)
        ex.gauge("sluice_domain_free_buffers", "packet buffers free in the domain", d.get("free"), domain=dom)
        ex.gauge("sluice_domain_lent_buffers", "packet buffers the domain's NFs hold", d.get("lent"), domain=dom)
        ex.gauge("sluice_domain_region_bytes", "bytes of the domain's packet region", d.get("region_bytes"),
                 domain=dom)
        ex.gauge("sluice_domain_buffer_bytes", "data bytes per buffer in the domain", d.get("buffer_size"), domain=dom)
        ex.gauge("sluice_domain_nfs", "NFs attached in the domain", d.get("nfs"), domain=dom)
    for c in stats.get("copies") or []:
        lab = dict(src=c.get("from"), dst=c.get("to"))
        ex.counter("sluice_copies_packets_total", "packets copied across a trust-domain boundary", c.get("packets"),
                   **lab)
        ex.counter("sluice_copies_bytes_total", "bytes copied across a trust-domain boundary", c.get("bytes"), **lab)
        ex.counter("sluice_copies_no_buffer_total", "copies not made: the destination domain's pool was empty",
                   c.get("no_buffer"), **lab)
        ex.counter("sluice_copies_too_long_total", "copies not made: the frame does not fit the destination's "
                   "buffers", c.get("too_long", 0), **lab)
        ex.counter("sluice_copies_timed_total", "copies whose time was measured (a sample)", c.get("timed"), **lab)
        ex.counter("sluice_copies_timed_seconds_total", "time the measured copies took",
                   None if c.get("timed_ns") is None else c["timed_ns"] / 1e9, **lab)


@collector("pipes")
def collect_pipes(ex, stats, status):
    pipes = stats.get("pipes") or {}
    ex.gauge("sluice_pipes_enabled", "1 with sluiced.pipes on", 1 if pipes.get("enabled") else 0)
    ex.gauge("sluice_pipes_open", "NF-to-NF pipes open now", pipes.get("open"))
    for key, name, help_ in PIPES:
        if key in pipes:
            ex.counter(name, help_, pipes[key])


@collector("flows")
def collect_flows(ex, stats, status):
    f = stats.get("flows") or {}
    ex.gauge("sluice_flows_entries", "entries in the flow table", f.get("entries"))
    ex.gauge("sluice_flows_max_entries", "the flow table's size (sluiced.flows)", f.get("max"))
    ex.gauge("sluice_flows_idle_timeout_seconds", "idle time after which a flow entry expires",
             None if f.get("idle_ms") is None else f["idle_ms"] / 1000)
    ex.gauge("sluice_flows_pinned", "flows pinned by NFs now", f.get("pinned"))
    for key in FLOW_COUNTERS:
        if key in f:
            ex.counter(f"sluice_flows_{key}_total", FLOW_HELP[key], f[key])


@collector("workers")
def collect_workers(ex, stats, status):
    a = stats.get("active_set") or {}
    for s in ("busy", "parked", "waiting"):
        if s in a:
            ex.gauge("sluice_worker_active_set_nfs", "NFs in the workers' active sets, by set (docs/architecture.md "
                     "\"Active set\")", a[s], set=s)
    ex.counter("sluice_worker_doorbells_total", "parked NFs that rang their doorbell", a.get("doorbells"))
    e = stats.get("doorbell_epoll") or {}
    ex.counter("sluice_worker_doorbell_polls_total", "epoll_wait calls for doorbells", e.get("polls"))
    ex.counter("sluice_worker_doorbell_events_total", "doorbell events seen", e.get("events"))
    ex.counter("sluice_supply_short_total", "supply top-ups the pool could not fill (docs/abi.md \"Supply\")",
               stats.get("supply_short"))
    o = stats.get("out_set") or {}
    ex.counter("sluice_out_set_packets_total", "packets NFs sent to a set of ports (SL_ACT_OUT_SET)", o.get("packets"))
    ex.counter("sluice_out_set_frames_total", "frames sent for them", o.get("frames"))
    ex.counter("sluice_out_set_copies_total", "copies made for them", o.get("copies"))
    s = stats.get("nf_sched") or {}
    if s:
        ex.gauge("sluice_nf_sched_info", "1, labelled with sluiced.nf_sched", 1, policy=s.get("policy") or "")
        ex.gauge("sluice_nf_sched_fifo_nfs", "NFs under SCHED_FIFO", s.get("fifo_nfs"))
        ex.counter("sluice_nf_sched_order_passes_total", "passes of the ordering helper", s.get("order_passes"))
        ex.counter("sluice_nf_sched_requeued_total", "NFs the ordering helper requeued", s.get("requeued"))
        ex.gauge("sluice_nf_sched_threads_aside", "sluiced's threads moved off the NFs' CPUs", s.get("threads_aside"))
