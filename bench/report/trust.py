"""Trust-domain section (bench/trust.py, issue 15): a chain of 3 fwd with 0, 2 or 3 copies per packet
at domain boundaries, beside this core's memcpy bandwidth."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import _headline_line, fmt_rate, headline, rows_of

MIDDLE_TARGET = 0.70  # the untrusted middle hop at 64 B keeps >= 70 % of the all-trusted rate
COPY_BW_TARGET = 0.60  # at 1500 B the copies run at >= 60 % of the core's memcpy bandwidth


def _median(xs):
    xs = [x for x in xs or [] if x is not None]
    return statistics.median(xs) if xs else None


def trust_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    L = ["## Trust domains: the cost of a copy at a boundary (`bench/trust.py`)", ""]
    h = headline(loaded, "trust")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/trust.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    rows = rows_of(d["results"], "trust")
    L += [_headline_line(p, d, out_dir), "",
          "**Method.** A fresh sluiced per measurement: port `src` (net_null, `copy=0`) -> fwd1 -> fwd2 -> fwd3 -> "
          "port `dst` (net_null). Variants: `trusted` (every NF in the default domain: descriptors only), `middle` "
          "(fwd2 in a private domain: the worker copies each packet into its pool and back out, 2 copies), "
          "`all-untrusted` (each NF in a private domain: 3 copies; the exit to a port needs none). The NFs poll, "
          f"pinned to core {cfg.get('nf_core', '0')}; sluiced's worker, which makes the copies, polls core "
          f"{cfg.get('worker_core', '1')}. Figure: packets out per second, median of {cfg.get('windows', '?')} windows "
          f"of {cfg.get('duration_s', '?')} s; median of {cfg.get('runs', '?')} rounds with min–max, variants alternating. "
          "`ns per copy` is sluiced's own count (every 16th copy timed with the TSC, buffer allocation included); copy "
          "bandwidth = frame bytes / ns per copy. `memcpy` is `sluice-bench-memcpy` on the worker's core in the same "
          "run (frame-sized copies between 2176-byte slots of two 16 MiB pools, strided).", "",
          "| variant | size (B) | median Mpps (min–max) | vs trusted | copies per packet | ns per copy | copy GB/s | "
          "vs memcpy |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    mem = {r["size"]: r.get("median_gbytes_per_s") for r in rows if r.get("row") == "memcpy"}
    chain = [r for r in rows if r.get("row") == "chain"]
    base = {r["size"]: r.get("median_pps") for r in chain if r.get("variant") == "trusted"}
    verdicts = []
    for r in chain:
        if r.get("median_pps") is None:
            L.append(f"| {r['variant']} | {r['size']} | failed | | | | | |")
            continue
        b = base.get(r["size"])
        ratio = r["median_pps"] / b if b and r["variant"] != "trusted" else None
        cpp = _median(r.get("runs_copies_per_pkt"))
        bw = r.get("copy_gbytes_per_s")
        vs_mem = bw / mem[r["size"]] if bw and mem.get(r["size"]) else None
        nspc = r.get("median_ns_per_copy")
        cells = [r["variant"], str(r["size"]),
                 f"**{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–{fmt_rate(r['max_pps'])})",
                 f"{ratio:.0%}" if ratio is not None else "–", f"{cpp:.2f}" if cpp is not None else "–",
                 f"{nspc:.1f}" if nspc else "–", f"{bw:.2f}" if bw else "–",
                 f"{vs_mem:.0%}" if vs_mem is not None else "–"]
        L.append("| " + " | ".join(cells) + " |")
        if r["variant"] == "middle" and r["size"] == 64 and ratio is not None:
            verdicts.append(f"- **Target** (untrusted middle hop at 64 B keeps ≥ {MIDDLE_TARGET:.0%} of the all-trusted "
                            f"rate): **{'met' if ratio >= MIDDLE_TARGET else 'NOT met'}**, {ratio:.0%} "
                            f"({fmt_rate(r['median_pps'])} vs {fmt_rate(b)}).")
        if r["size"] == 1500 and r["variant"] != "trusted" and vs_mem is not None:
            verdicts.append(f"- **Target** (copying hops at 1500 B reach ≥ {COPY_BW_TARGET:.0%} of the core's memcpy "
                            f"bandwidth), {r['variant']}: **{'met' if vs_mem >= COPY_BW_TARGET else 'NOT met'}**, "
                            f"{bw:.2f} GB/s = {vs_mem:.0%} of {mem[1500]:.2f} GB/s.")
    for s, bw in sorted(mem.items()):
        L.append(f"| memcpy (core {cfg.get('worker_core', '1')}) | {s} | | | | | {bw:.2f} | 100 % |" if bw else
                 f"| memcpy | {s} | failed | | | | | |")
    L += [""] + (["Computed from the headline run's numbers:", ""] + verdicts + [""] if verdicts else [])
    L += ["The anchor, Cerrato et al. (EWSDN'14), paid one copy per hop for \"isolated buffers\" and saw throughput "
          "fall markedly with the extra copies; their exact figures are not reproduced here (the paper is not "
          "available offline on this machine), so the comparison is the shape: how much of the trusted rate a copy "
          "per hop keeps, and how close a copy comes to plain memcpy on the same core.", ""]
    return L
