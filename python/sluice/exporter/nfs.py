"""NFs: traffic, loans, queues, kicks, drops by reason, their own named counters (sl_nf_counter, the
SDK's wakeups and sleeps among them), and the CPU time of the process each runs in."""

import os

from .registry import collector

TRAFFIC = (("rx_pkts", "sluice_nf_rx_packets_total", "packets sluiced gave the NF"),
           ("rx_bytes", "sluice_nf_rx_bytes_total", "bytes sluiced gave the NF"),
           ("tx_pkts", "sluice_nf_tx_packets_total", "packets the NF handed back (any action)"),
           ("tx_bytes", "sluice_nf_tx_bytes_total", "bytes the NF handed back"),
           ("kicks", "sluice_nf_kicks_total", "eventfd wake-ups sluiced sent the NF"))
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid, proc="/proc"):
    """utime + stime of process `pid` in seconds (/proc/PID/stat), or None if it is gone."""
    try:
        with open(f"{proc}/{int(pid)}/stat") as f:
            s = f.read()
    except (OSError, ValueError):
        return None
    fields = s[s.rfind(")") + 2:].split()  # the command may hold spaces and parentheses
    try:
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (IndexError, ValueError):
        return None


HANDLER_PREFIX = "sdk.handler_"


def handler_histogram(counters):
    """The SDK's handler-time histogram (sdk.handler_le_<ns>, non-cumulative, and sdk.handler_ns_sum) as
    ([(upper bound s, cumulative count)], sum s, count), or None without one."""
    bounds = []
    for k, v in counters.items():
        if k.startswith("sdk.handler_le_"):
            le = k[len("sdk.handler_le_"):]
            bounds.append((float("inf") if le == "inf" else int(le) / 1e9, v))
    if not bounds or "sdk.handler_ns_sum" not in counters:
        return None
    bounds.sort()
    if bounds[-1][0] != float("inf"):
        return None
    cum, out = 0, []
    for le, v in bounds:
        cum += v
        out.append((le, cum))
    return out, counters["sdk.handler_ns_sum"] / 1e9, cum


@collector("nfs")
def collect(ex, stats, status):
    for n in stats.get("nfs") or []:
        nf = n.get("name")
        ex.gauge("sluice_nf_info", "1 per attached NF: its service, process, wakeup mode, domain, access, "
                 "scheduling policy and whether it runs in a guest", 1, nf=nf, service=n.get("service") or "",
                 pid=str(n.get("pid")), wakeup=n.get("wakeup") or "", domain=n.get("domain") or "",
                 access=n.get("access") or "", sched=n.get("sched") or "", guest="1" if n.get("guest") else "0")
        for key, name, help_ in TRAFFIC:
            if n.get(key) is not None:
                ex.counter(name, help_, n[key], nf=nf, service=n.get("service") or "")
        ex.gauge("sluice_nf_lent_buffers", "packet buffers the NF holds now", n.get("lent"), nf=nf)
        if n.get("supply"):  # an endpoint's empty buffers (docs/abi.md "Supply")
            ex.gauge("sluice_nf_supply_buffers", "empty buffers the NF holds for frames of its own",
                     n["supply"].get("held"), nf=nf)
            ex.counter("sluice_nf_supply_given_total", "empty buffers sluiced handed the NF", n["supply"].get("given"),
                       nf=nf)
        ex.gauge("sluice_nf_queued_descriptors", "descriptors waiting in the NF's RX ring", n.get("queued"), nf=nf)
        ex.gauge("sluice_nf_draining", "1 while the NF is taken out of its service to be removed",
                 1 if n.get("draining") else 0, nf=nf)
        ex.gauge("sluice_nf_batch_packets", "the NF's kick batch (kicked after this many packets)", n.get("batch"),
                 nf=nf)
        ex.gauge("sluice_nf_timeout_seconds", "the NF's kick timeout (kicked when the oldest waited this long)",
                 None if n.get("timeout_us") is None else n["timeout_us"] / 1e6, nf=nf)
        for reason, v in (n.get("drops") or {}).items():
            ex.counter("sluice_nf_drops_total", "packets sluiced dropped at the NF, by reason (docs/api.md)", v,
                       nf=nf, reason=reason)
        counters = n.get("counters") or {}
        for cname, v in counters.items():
            if cname.startswith(HANDLER_PREFIX):
                continue  # the histogram below
            ex.untyped("sluice_nf_stat", "the NF's own named counters (sl_nf_counter; sdk.* are the SDK's: "
                       "batches, sleeps, wakeups, re-attaches)", v, nf=nf, stat=cname)
        hist = handler_histogram(counters)
        if hist:
            buckets, total, count = hist
            ex.histogram("sluice_nf_handler_seconds", "time the NF's handler took per batch (the SDK's clock "
                         "around each call; SLUICE_NF_HANDLER_HIST=0 turns it off)", buckets, total, count, nf=nf)
        pid = n.get("pid")
        if pid:
            cpu = process_cpu_seconds(pid)
            # a group's members share one process (and a guest NF's is its QEMU's): the same figure
            ex.counter("sluice_nf_process_cpu_seconds_total", "CPU time of the process the NF runs in (user + "
                       "system; a group's members and a guest's QEMU share one)", cpu, nf=nf, pid=str(pid))
