"""The PNGs of scenarios 1-3 (<stamp>-chain|zeroloss|latency|latency-pct.png): drawn by run.py via
plots(), and by the report for a headline run that lacks them."""

from __future__ import annotations

import sys
from pathlib import Path

from .chain import plot_chain
from .common import CHAIN, LATENCY, ZEROLOSS, _link, _pyplot, png_path, stamp_of
from .latency import plot_latency_cdf, plot_latency_pct
from .zeroloss import plot_zeroloss

# PNG suffixes per scenario, as written by plots()
PNG_SUFFIXES = {CHAIN: ("chain",), ZEROLOSS: ("zeroloss",), LATENCY: ("latency", "latency-pct")}
ALT = {"chain": "Mpps per chain length", "fabric": "Mpps per chain length", "zeroloss": "zero-loss rate",
       "latency": "latency CDF", "latency-pct": "latency percentiles"}
PLOTTERS = {"chain": plot_chain, "zeroloss": plot_zeroloss, "latency": plot_latency_cdf,
            "latency-pct": plot_latency_pct}


def plots(data: dict, stem: Path, only: tuple[str, ...] | None = None) -> list[Path]:
    """Write every PNG for one results file: <stem>-chain.png, <stem>-zeroloss.png,
    <stem>-latency.png, <stem>-latency-pct.png (scenarios without data are skipped).
    `stem` is the results file without .json (e.g. bench/results/20261122T053918Z).
    Returns the paths written; [] when matplotlib is missing."""
    stem = Path(stem)
    if stem.suffix == ".json":
        stem = stem.with_suffix("")
    written = []
    if _pyplot() is None:
        return written
    for suffix, fn in PLOTTERS.items():
        if only is not None and suffix not in only:
            continue
        p = png_path(stem, suffix)
        try:
            if fn(data, p):
                written.append(p)
        except Exception as e:  # a plot must never cost the report or the results
            print(f"gen_report: could not draw {p.name}: {e!r}", file=sys.stderr)
    return written


def _images(p: Path, d: dict, scenario: str, results_dir: Path, out_dir: Path, draw: bool) -> list[str]:
    """Markdown image links for one scenario of a headline file, drawing missing PNGs when allowed."""
    stem = results_dir / stamp_of(p)
    names = list(PNG_SUFFIXES[scenario])
    out = []
    if scenario == CHAIN and not png_path(stem, "chain").exists() and png_path(stem, "fabric").exists():
        names = ["fabric"]  # older runs
    missing = [n for n in names if not png_path(stem, n).exists()]
    if missing and draw:
        plots(d, stem, only=tuple(missing))
    for n in names:
        png = png_path(stem, n)
        if png.exists():
            out += [f"![{ALT.get(n, n)}, {stamp_of(p)}]({_link(png, out_dir)})", ""]
    return out
