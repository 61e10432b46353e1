"""The user stack module section (bench/userstack.py): nginx and iperf3 under `sluice run --stack user`
behind a firewall -> monitor chain, against the same programs on the kernel's TCP/IP behind a router
namespace with the same rules in nftables."""

from __future__ import annotations

import re
from pathlib import Path

from .common import _headline_line, _link, headline, rows_of

SCENARIO = "userstack"
SYSTEMS = (("sluice", "Sluice: `sluice run --stack user`, chain firewall → monitor"),
           ("linux", "Linux: router netns + nftables, offloads off (like for like)"),
           ("linux-gso", "Linux: the same, veth offloads on"),
           ("sluice-bare", "Sluice with no NF in its chains"))
PEERS = ("linux", "linux-gso")
# (metric, label, unit, higher is better, digits)
METRICS = (("rps", "nginx + wrk, 1 KiB: requests/s", "req/s", True),
           ("p50_ms", "wrk latency p50", "ms", False),
           ("p99_ms", "wrk latency p99", "ms", False),
           ("wrk_procs_cores", "CPU during wrk: the host's processes", "cores", False),
           ("wrk_irq_softirq_cores", "CPU during wrk: irq + softirq (whole machine, /proc/stat)", "cores", False),
           ("wrk_machine_cores", "CPU during wrk: whole machine busy (/proc/stat)", "cores", False),
           ("wrk_client_cores", "CPU during wrk: wrk itself (the client)", "cores", False),
           ("wrk_foreign_cores", "CPU during wrk: processes of no system here (foreign)", "cores", False),
           ("rps_per_core_procs", "requests/s per host core: processes", "req/s/core", True),
           ("rps_per_core_procs_softirq", "requests/s per host core: processes + irq/softirq (upper bound)",
            "req/s/core", True),
           ("rps_per_core_machine", "requests/s per core of the whole machine", "req/s/core", True),
           ("iperf3_gbps", "iperf3 client → server (one stream, IPv4)", "Gbit/s", True),
           ("iperf3_R_gbps", "iperf3 server → client (-R)", "Gbit/s", True),
           ("iperf3_retransmits", "iperf3 client → server: retransmits", "segments", False),
           ("iperf3_R_retransmits", "iperf3 -R: retransmits", "segments", False),
           ("iperf3_procs_softirq_cores", "CPU during iperf3: processes + irq/softirq (upper bound)", "cores", False),
           ("iperf3_R_procs_softirq_cores", "CPU during iperf3 -R: processes + irq/softirq (upper bound)", "cores",
            False),
           ("iperf3_machine_cores", "CPU during iperf3: whole machine", "cores", False),
           ("iperf3_R_machine_cores", "CPU during iperf3 -R: whole machine", "cores", False))
PROCS = (("sluiced", "sluiced (all threads)"), ("supervisor", "`sluice up` supervisor"), ("fw", "firewall NF"),
         ("mon", "monitor NF"), ("sluice-stackd", "sluice-stackd (engine + lwIP)"), ("nginx", "nginx"),
         ("iperf3-s", "iperf3 -s"))


def _num(x: float) -> str:
    if x is None:
        return "–"
    ax = abs(x)
    return f"{x:,.0f}" if ax >= 1000 else f"{x:.3g}" if ax >= 0.01 or ax == 0 else f"{x:.2g}"


def _cell(r: dict | None, rounds: int | None = None) -> str:
    """median (min–max), and the number of windows behind it when fewer than the rounds."""
    if not r:
        return "–"
    n = len(r.get("runs") or [])
    return (f"**{_num(r['median'])}** ({_num(r['min'])}–{_num(r['max'])}"
            + (f", n={n}" if rounds and n and n < rounds else "") + ")")


def userstack_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    L = ["## User stack module: lwIP behind an NF chain against the kernel path (`bench/userstack.py`)", ""]
    h = headline(loaded, SCENARIO)
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/userstack.py`.", ""]
    p, d = h
    rows = rows_of(d["results"], SCENARIO)
    get = {(r["metric"], r["system"]): r for r in rows}
    cfg = d.get("config", {})
    present = [(s, lbl) for s, lbl in SYSTEMS if any(r["system"] == s for r in rows)]
    peers = [s for s in PEERS if any(r["system"] == s for r in rows)]
    L += [_headline_line(p, d, out_dir), "",
          "**Method.** A client namespace runs wrk (1 thread, 32 kept-alive connections, `--latency`, a 1 KiB "
          f"file, {cfg.get('secs', '?'):.0f} s after a 1 s warm-up) and iperf3 (one TCP stream over IPv4, "
          f"{cfg.get('secs', '?'):.0f} s each way) against each system. *Sluice*: nginx (1 process, `master_process "
          "off`) and `iperf3 -s` under `sluice run --stack user`; sluice-stackd's lwIP (`stack.user`) is the "
          "end of ingress chain [firewall, monitor, stack] and the head of egress chain [stack, firewall, "
          "monitor] → a `net_af_packet` port on the root end of the client's veth (NFs `adaptive`, sluiced "
          "with its default lcores: its worker polls core 1). *Linux*: the same nginx and iperf3 in a server "
          "namespace, reached through a router namespace (IP forwarding on there only) whose nftables forward "
          "chain holds the firewall's rules (policy drop; `ct state established,related`; ICMP, ICMPv6; tcp "
          "dport 8080 and 5201) with counters and conntrack accounting in the monitor's place. Every veth end "
          "has its offloads off (`ethtool -K tx off rx off gso off tso off gro off`: `net_af_packet` needs that "
          "on the Sluice side, so `linux` is like for like); `linux-gso` leaves them on, the kernel path as "
          "usually deployed. Each round brings each system up (one nginx and one `iperf3 -s` serve the round's "
          "three tests), measures it and takes it down (a polling sluiced left running would take a core from "
          "the kernel path); the systems' order rotates by round and the tests go through all six orders. "
          f"Median of {d.get('runs', '?')} rounds with min–max (n: fewer windows, where some failed or other work "
          "on the host disturbed them: below).", "",
          "**CPU.** Over each window, in cores (CPU seconds per second). *Host processes*: utime + stime of "
          "sluiced (all threads, its polling worker counted in full), the `sluice up` supervisor, the two NFs, "
          "sluice-stackd and the server (nginx or iperf3 -s) for Sluice; of the server alone for Linux. "
          "*irq + softirq*: what /proc/stat charges to interrupts for the whole machine: the kernel's "
          "forwarding, netfilter and TCP receive work, either side's. This kernel accounts CPU by ticks without "
          "`IRQ_TIME_ACCOUNTING`, so softirq work that ran while one of the processes was current is in that "
          "process's stime *and* in /proc/stat's softirq: *processes + irq/softirq* counts it twice and is an "
          "upper bound (it can exceed the whole machine). On the kernel path nearly all of it runs in the "
          "context of nginx or wrk, whichever sent the packet (their times add up to the machine's), so "
          "which of the two pays for the forwarding is the kernel's choice, not the work's. *Whole machine*: "
          "every CPU's busy time from /proc/stat, counted once, the client and foreign work included (the "
          "same client program on both sides). The targets are read on the whole machine and shown on the "
          "other bases.", "",
          "| test | unit | " + " | ".join(lbl for _, lbl in present) + " | "
          + " | ".join(f"Sluice ÷ {s}" for s in peers) + " |",
          "|---|---|" + "---:|" * (len(present) + len(peers))]
    for key, label, unit, higher in METRICS:
        if not any((key, s) in get for s, _ in present):
            continue
        cells = [_cell(get.get((key, s)), d.get("runs")) for s, _ in present]
        ratios = []
        a = get.get((key, "sluice"))
        for s in peers:
            b = get.get((key, s))
            ratios.append(f"{a['median'] / b['median']:.2f}x" if a and b and b["median"] else "–")
        L.append(f"| {label} | {unit} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    L += ["", "Ratios are Sluice's median over the peer's (for latency and CPU, below 1 is Sluice better).", ""]
    png = p.with_suffix(".png")
    if png.exists():
        L += [f"![user stack module]({_link(png, out_dir)})", ""]
    L += _cpu_split(get, d.get("runs")) + _verdict(get, peers) + _problems(d) + _provenance(d)
    return L


def _cpu_split(get: dict, rounds: int | None = None) -> list[str]:
    """Sluice's host processes, cores during each test (and sluiced's threads)."""
    tests = (("wrk", "wrk"), ("iperf3", "iperf3"), ("iperf3_R", "iperf3 -R"))
    names = [(n, lbl) for n, lbl in PROCS if any((f"{t}_cpu_{n}", "sluice") in get for t, _ in tests)]
    threads = sorted({m.split("_cpu_thread_", 1)[1] for (m, s) in get if s == "sluice" and "_cpu_thread_" in m})
    if not names:
        return []
    L = ["**Where Sluice's host CPU went** (cores, median of rounds; sluiced's threads below it; "
         "`rte-worker-*` is the worker that polls):", "",
         "| process | " + " | ".join(lbl for _, lbl in tests) + " |", "|---|" + "---:|" * len(tests)]
    for n, lbl in names:
        L.append(f"| {lbl} | " + " | ".join(_cell(get.get((f"{t}_cpu_{n}", "sluice")), rounds) for t, _ in tests)
                 + " |")
    for th in threads:
        L.append(f"| &nbsp;&nbsp;sluiced thread `{th}` | "
                 + " | ".join(_cell(get.get((f"{t}_cpu_thread_{th}", "sluice")), rounds) for t, _ in tests) + " |")
    for m, lbl in (("procs_softirq_cores", "host: processes + irq/softirq (upper bound)"),
                   ("machine_cores", "**whole machine**")):
        L.append(f"| {lbl} | " + " | ".join(_cell(get.get((f"{t}_{m}", "sluice")), rounds) for t, _ in tests) + " |")
    return L + [""]


def _verdict(get: dict, peers: list[str]) -> list[str]:
    out = ["**Targets** (the user stack module's issue): requests/s per host core ≥ 1.5x the kernel path; "
           "iperf3 within 20 % of the kernel path.", ""]

    def ratio(metric, peer):
        a, b = get.get((metric, "sluice")), get.get((metric, peer))
        return a["median"] / b["median"] if a and b and b["median"] else None

    for peer in peers:
        xs = [(lbl, ratio(m, peer)) for m, lbl in (("rps_per_core_machine", "whole machine"),
                                                   ("rps_per_core_procs", "processes"),
                                                   ("rps_per_core_procs_softirq", "processes + irq/softirq"))]
        head = xs[0][1]
        if head is not None:
            out.append(f"- requests/s per core vs `{peer}`: {head:.2f}x on the whole machine — "
                       f"**{'met' if head >= 1.5 else 'not met'}** ("
                       + ", ".join(f"{lbl} {x:.2f}x" for lbl, x in xs[1:] if x is not None) + ").")
        for m, what in (("iperf3_gbps", "client → server"), ("iperf3_R_gbps", "server → client")):
            x = ratio(m, peer)
            if x is not None:
                out.append(f"- iperf3 {what} vs `{peer}`: {x:.2f}x — **{'met' if x >= 0.8 else 'not met'}**.")
    return out + [""]


def _short(x: str) -> str:
    """A problem's first part, with the error lines of a program's output it quotes."""
    head = x.split("; its last output")[0].splitlines()[0]
    errs = re.findall(r"iperf3: error - (.*?)(?:\\n|\n|'|$)", x)
    if errs and "error -" not in head:
        head += ": " + "; ".join(dict.fromkeys(errs))
    return head[:400].replace("|", "/")


def _problems(d: dict) -> list[str]:
    probs = d.get("problems") or []
    raw = d.get("raw") or []
    noisy = [e for e in raw if e.get("noisy")]
    cfg = d.get("config", {})
    L = []
    if noisy:
        L += [f"{len(noisy)} of {len(raw)} windows were not figures: processes of no system here took more than "
              f"{cfg.get('foreign_max', '?')} cores during them (other work on this host); each was measured "
              f"again up to {cfg.get('retries', '?')} time(s) (`noisy` in the JSON).", ""]
    if not probs:
        return L + ["No errors in this run (every set-up, wrk and iperf3 window completed; wrk saw no socket "
                    "errors or non-2xx answers).", ""]
    L += [f"**Problems seen in this run** ({len(probs)}; their windows are not in the figures):", ""]
    for x in probs[:20]:
        L.append("- " + _short(x))
    return L + [""]


def _provenance(d: dict) -> list[str]:
    b = d.get("build") or {}
    if not b:
        return []
    return [f"Measured build: {b.get('source', '?')} (build directory `{b.get('build_dir', '?')}`).", ""]
