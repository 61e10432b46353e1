"""Observability section (bench/observability.py, issue 38): what the Prometheus scrapes, the SDK's
handler-time histogram and live capture cost the chain of 3."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import _headline_line, headline, rows_of

TARGETS = {"scrape 1 s": 0.01, "histogram off": 0.02}  # the largest change of the rate allowed
CAPTURE_ROWS = ("capture 1 %", "capture full port")


def _r(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _span(xs, fmt):
    """median (min–max) of a list of numbers, or –."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def _count(n):
    if n is None:
        return "–"
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} k" if n >= 1e4 else str(n)


def observability_section(loaded: list[tuple[Path, dict]], out_dir: Path, draw: bool = True) -> list[str]:
    L = ["## Observability: what metrics and capture cost the data path (`bench/observability.py`)", ""]
    h = headline(loaded, "observability")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/observability.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    rows = rows_of(d["results"], "observability")
    has_capture = any(r["row"] in CAPTURE_ROWS for r in rows)
    method = (f"**Method.** The chain of {cfg.get('nfs', 3)} `fwd` at {cfg.get('size', 64)} B (net_null -> f1 -> f2 -> "
              f"f3 -> net_null, {cfg.get('mode', 'poll+pipes')}), a fresh sluiced and NFs per measurement, "
              f"{cfg.get('warmup_s')} s warm-up + {cfg.get('duration_s')} s window; rows alternate within each of "
              f"{cfg.get('runs')} rounds: `baseline` (as deployed: the SDK's handler-time histogram on, nobody "
              "scraping" + (", no capture: capture off" if has_capture else "") + "), `scrape 1 s` (`sluice metrics "
              "--listen` beside it, an HTTP GET of /metrics every second, the exporter's CPU included), `histogram "
              "off` (`SLUICE_NF_HANDLER_HIST=0`: no clock reads around the handler)")
    if has_capture:
        method += (f", `capture 1 %` (`sluice capture --port {cfg.get('capture_port', 'src')} -f "
                   f"'{cfg.get('filter_1pct', '?')}' -w FILE`: the filter runs on every packet the chain receives "
                   f"and matches one flow of {cfg.get('flows', 100)}), `capture full port` (`sluice capture --port "
                   f"{cfg.get('capture_port', 'src')} -w FILE`: a copy of every packet; the port only receives). "
                   "The captures write pcapng files in a temporary directory and are ended by SIGINT as a user "
                   "would; the reader's CPU counts as part of the cost, like the exporter's. net_null hands out "
                   "the pool's buffers as they are, so before every measurement, in every row, `sluice-nf-gen` "
                   f"runs for {cfg.get('prefill_s')} s at the chain's head and writes its UDP packets into the "
                   f"buffers ({cfg.get('flows', 100)} flows, source addresses 10.0.0.0-10.0.0.{cfg.get('flows', 100) - 1}), "
                   "then leaves the chain")
    method += (". Median of rounds (min–max); the ratio is each round's row over the same round's baseline; "
               "foreign CPU is the share of the machine's CPU that processes other than the benchmark's took "
               "during the window (other work on the host).")
    L += [_headline_line(p, d, out_dir), "", method, "",
          "| row | Mpps (min–max) | ÷ baseline (median of rounds) | target | foreign CPU |",
          "|---|---:|---:|---|---:|"]
    for r in rows:
        t = TARGETS.get(r["row"])
        ratio = r.get("median_ratio")
        verdict = "–"
        if t is not None and ratio is not None:
            verdict = f"within {t:.0%}: **{'met' if abs(1 - ratio) <= t else 'not met'}**"
        elif r["row"] in CAPTURE_ROWS:
            verdict = "none: measured"
        foreign = _median([e.get("foreign_cpu") for e in r.get("runs_extra") or []])
        L.append(f"| {r['row']} | **{_r(r.get('median_mpps'))}** ({_r(r.get('min_mpps'))}–{_r(r.get('max_mpps'))}) | "
                 f"{_r(ratio, '{:.3f}')} | {verdict} | {_r(foreign, '{:.1%}')} |")
    L.append("")
    caps = [r for r in rows if r["row"] in CAPTURE_ROWS and r.get("runs_extra")]
    if caps:
        L += ["The captures, per measurement (its warm-up and window; median of rounds, min–max): the share of "
              "the packets the port received that the filter matched (copied + lost), what sluiced copied "
              "into the ring and what it lost because the reader was behind, and the reader's CPU (`sluice "
              "capture`, in cores); then the whole capture as its summary line gives it (to the last drain "
              "after SIGINT, medians).", "",
              "| row | matched | copied, Mpps | lost, Mpps | reader CPU | whole capture: written / copied / lost |",
              "|---|---:|---:|---:|---:|---:|"]
        for r in caps:
            ex = r["runs_extra"]
            tot = "/".join(f" {_count(_median([e.get(k) for e in ex]))} " for k in
                           ("total_written", "total_copied", "total_lost")).strip()
            L.append(f"| {r['row']} | {_span([e.get('matched_share') for e in ex], '{:.2%}')} | "
                     f"{_span([e.get('copied_mpps') for e in ex], '{:.3f}')} | "
                     f"{_span([e.get('lost_mpps') for e in ex], '{:.3f}')} | "
                     f"{_span([e.get('reader_cpu') for e in ex], '{:.2f}')} | {tot} |")
        L.append("")
        short = [e for r in caps for e in r["runs_extra"] if e.get("total_written") != e.get("total_copied")]
        L += [("Every copy sluiced made reached the file (written = copied in every measurement); the lost ones "
               "are copies that found the ring full because the reader was behind (a capture never drops a packet "
               "of the chain: `tests/integration/test_capture.py`)."
               if not short else
               f"In {len(short)} measurement(s) the file got fewer packets than sluiced copied."), ""]
    scr = next((r for r in rows if r["row"] == "scrape 1 s"), None)
    ex = [e for e in (scr or {}).get("runs_extra") or [] if e.get("scrapes")]
    if ex:
        L += [f"Scrapes per measurement (its warm-up and window): {', '.join(str(e['scrapes']) for e in ex)} (failures: "
              f"{sum(e.get('scrape_failures', 0) for e in ex)}); an exposition of "
              f"{ex[-1].get('exposition_bytes', 0):,} bytes.", ""]
    hist = next((r for r in rows if r["row"] == "histogram off"), None)
    if hist and hist.get("median_ratio"):
        L += [f"Reading: the histogram's cost is the rate with it off over the rate with it on, "
              f"{hist['median_ratio']:.3f} (above 1: turning it off gains that much). Runs within a few percent of "
              "each other on this host are noise as often as not (bench/notes.md).", ""]
    if has_capture:
        L += ["Reading: capture off is the `baseline` row itself (capture built in, no capture running: a tap mask "
              "tested once per burst); what the taps cost when off is measured against a build without them in "
              "bench/notes.md (\"Observability\"). With a capture on, part of the cost is sluiced's -- the filter on "
              "every packet at the point, the copy or the full-ring check for each match -- and part is the reader's: "
              "`sluice capture` needs the CPU in the reader CPU column, and this 2-vCPU host has no core to spare, so "
              "it takes it from the worker's core or the NFs' (bench/notes.md has the split).", ""]
    return L
