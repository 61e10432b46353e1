#!/usr/bin/env python3
"""Regenerate BENCHMARKS.md from every bench/results/*.json (plus the hand-written bench/notes.md).

    bench/gen_report.py [--results DIR] [--out FILE]

Scenarios (the `scenario` of each results row): 1 `chain` (Mpps per chain length; `fabric` in older
files), 2 `zeroloss` (RFC 2544 26.1 zero-loss rate), 3 `latency` (at 10/50/90 % of that rate).
Sections of their own: `density` (scenario 5, bench/density.py: NF count sweep; per N and size the
newest full run that has it, so a sweep run in parts is merged; plot <stamp>-density.png, or
density-merged.png when rows come from several files), `steering` (bench/steering.py) and `nfs`
(bench/nfs.py, Mpps per NF; its bar chart is <stamp>-nfs.png, drawn here when missing).
Each scenario's section shows its own headline run: the newest full (non --quick) results file
that has rows of that scenario. Every run is listed in the history.

Plots, drawn by run.py via plots(data, stem) and redrawn here when missing (matplotlib needed):
    <stamp>-chain.png         scenario 1: Mpps per chain length, a panel per frame size
    <stamp>-zeroloss.png      scenario 2: zero-loss Mpps, bars per system per chain length
    <stamp>-latency.png       scenario 3: latency CDFs, a panel per (chain length, load)
    <stamp>-latency-pct.png   scenario 3: p50 / p99 / p99.9 per system, load and chain length
(older runs have <stamp>-fabric.png for scenario 1; it is used when present.)
Numbers in BENCHMARKS.md come only from the JSON files: never edit it by hand.
Code: bench/report/, a module per section (common.py: loading, table and plot helpers; document.py
puts the sections together); this file is the command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# matplotlib lives in the project's venv; re-run under it when started with another Python.
_VENV_PY = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if __name__ == "__main__" and not os.environ.get("SLUICE_BENCH_NO_REEXEC"):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if _VENV_PY.exists() and Path(sys.executable).resolve() != _VENV_PY.resolve():
            os.environ["SLUICE_BENCH_NO_REEXEC"] = "1"
            os.execv(str(_VENV_PY), [str(_VENV_PY), *sys.argv])

from report import OUT, RESULTS, find, load_results, plot_density, plots, render  # noqa: E402

# what bench/run.py (find, plots, main) and bench/density.py (plot_density) use
__all__ = ["find", "main", "plot_density", "plots"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="directory of results JSON files "
                    "(default bench/results); missing PNGs are drawn there")
    ap.add_argument("--out", type=Path, default=OUT, help="markdown file to write (default BENCHMARKS.md); "
                    "links are relative to its directory")
    ap.add_argument("--no-draw", action="store_true", help="do not draw missing PNGs")
    a = ap.parse_args(argv)
    loaded = load_results(a.results)
    out = a.out.resolve()
    out.write_text(render(loaded, a.results.resolve(), out.parent, draw=not a.no_draw))
    print(f"gen_report: wrote {a.out} from {len(loaded)} result file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
