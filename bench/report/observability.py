"""Observability section (bench/observability.py, issue 38): what the Prometheus scrapes and the SDK's
handler-time histogram cost the chain of 3."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, headline, rows_of

TARGETS = {"scrape 1 s": 0.01, "histogram off": 0.02}  # the largest change of the rate allowed


def _r(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def observability_section(loaded: list[tuple[Path, dict]], out_dir: Path, draw: bool = True) -> list[str]:
    L = ["## Observability: what metrics cost the data path (`bench/observability.py`)", ""]
    h = headline(loaded, "observability")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/observability.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    rows = rows_of(d["results"], "observability")
    L += [_headline_line(p, d, out_dir), "",
          f"**Method.** The chain of {cfg.get('nfs', 3)} `fwd` at {cfg.get('size', 64)} B (net_null -> f1 -> f2 -> f3 "
          f"-> net_null, {cfg.get('mode', 'poll+pipes')}), a fresh sluiced and NFs per measurement, "
          f"{cfg.get('warmup_s')} s warm-up + {cfg.get('duration_s')} s window; rows alternate within each of "
          f"{cfg.get('runs')} rounds: `baseline` (as deployed: the SDK's handler-time histogram on, nobody "
          "scraping), `scrape 1 s` (`sluice metrics --listen` beside it, an HTTP GET of /metrics every second, "
          "the exporter's CPU included), `histogram off` (`SLUICE_NF_HANDLER_HIST=0`: no clock reads around the "
          "handler). Median of rounds (min–max); the ratio is each round's row over the same round's baseline.",
          "",
          "| row | Mpps (min–max) | ÷ baseline (median of rounds) | target |",
          "|---|---:|---:|---|"]
    for r in rows:
        t = TARGETS.get(r["row"])
        ratio = r.get("median_ratio")
        verdict = "–"
        if t is not None and ratio is not None:
            verdict = f"within {t:.0%}: **{'met' if abs(1 - ratio) <= t else 'not met'}**"
        L.append(f"| {r['row']} | **{_r(r.get('median_mpps'))}** ({_r(r.get('min_mpps'))}–{_r(r.get('max_mpps'))}) | "
                 f"{_r(ratio, '{:.3f}')} | {verdict} |")
    L.append("")
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
    return L
