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
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
NOTES = HERE / "notes.md"
NOTES_OVS = HERE / "notes_ovs.md"
OUT = REPO / "BENCHMARKS.md"

SLUICE = "sluice"
PEER = "testpmd-memif"
LINUX = "linux-veth"
OVS = "ovs-dpdk"
SYSTEM_NAMES = {SLUICE: "Sluice", PEER: "testpmd + memif", LINUX: "Linux veth + netns",
                OVS: "OVS-DPDK + testpmd (vhost-user)"}
# the peers Sluice is compared with, in column order, with the short name used in ratio headers
PEERS = ((PEER, "memif"), (LINUX, "Linux"), (OVS, "OVS"))
# every plotted series: (system, mode) -> label; fixed colours so a system keeps its colour
SERIES = (((SLUICE, "poll"), "Sluice, poll NFs"), ((SLUICE, "adaptive"), "Sluice, adaptive NFs"),
          ((SLUICE, "block"), "Sluice, block NFs"), ((PEER, None), "testpmd + memif"),
          ((LINUX, None), "Linux veth + netns (kernel forwarding)"), ((OVS, None), "OVS-DPDK + testpmd (vhost-user)"))
COLOURS = {(SLUICE, "poll"): "C0", (SLUICE, "adaptive"): "C1", (SLUICE, "block"): "C4", (PEER, None): "C2",
           (LINUX, None): "C3", (OVS, None): "C5"}
ORDER = {k: i for i, (k, _) in enumerate(SERIES)}
TARGET_RATIO = 2.0      # 1 NF, 64 B, poll: Sluice / peer
TARGET_SIZE_GAP = 0.10  # 1500 B packet rate within 10 % of 64 B

CHAIN, ZEROLOSS, LATENCY = "chain", "zeroloss", "latency"
SCENARIOS = (CHAIN, ZEROLOSS, LATENCY)
# the field that holds a row's figure (None: the measurement failed)
VALUE_KEY = {CHAIN: "median_mpps", ZEROLOSS: "median_pps", LATENCY: "median_ns"}
# PNG suffixes per scenario, as written by plots()
PNG_SUFFIXES = {CHAIN: ("chain",), ZEROLOSS: ("zeroloss",), LATENCY: ("latency", "latency-pct")}
ALT = {"chain": "Mpps per chain length", "fabric": "Mpps per chain length", "zeroloss": "zero-loss rate",
       "latency": "latency CDF", "latency-pct": "latency percentiles"}
PCTS = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))


# ---------------------------------------------------------------------------------------------
# loading and lookup


def load_results(d: Path) -> list[tuple[Path, dict]]:
    out = []
    for p in sorted(d.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"gen_report: skipping {p}: {e}", file=sys.stderr)
            continue
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            out.append((p, data))
    return out


def stamp_of(p: Path) -> str:
    return p.stem


def scenario_of(r: dict) -> str:
    """A row's scenario; "fabric" (older files) and rows without one are scenario 1, "chain"."""
    s = r.get("scenario") or CHAIN
    return CHAIN if s == "fabric" else s


def rows_of(results: list[dict], scenario: str) -> list[dict]:
    """Every row of one scenario, failed ones included."""
    return [r for r in results if isinstance(r, dict) and scenario_of(r) == scenario]


def find(results: list[dict], system: str, nfs: int, size: int, mode, scenario: str = CHAIN,
         load: float | None = None) -> dict | None:
    """The row of (system, nfs, size, mode) [and load, for latency] of a scenario that has a figure."""
    key = VALUE_KEY.get(scenario, "median_mpps")
    for r in results:
        if (scenario_of(r) == scenario and r.get("system") == system and r.get("nfs") == nfs
                and r.get("size") == size and r.get("mode") == mode and r.get(key) is not None
                and (load is None or (r.get("load") is not None and abs(r["load"] - load) < 1e-9))):
            return r
    return None


def fmt(x, nd=2) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def fmt_us(ns) -> str:
    """Nanoseconds as microseconds with 3 significant-ish digits."""
    if ns is None:
        return "–"
    us = ns / 1000
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 100 else f"{us:.0f}"


def fmt_rate(pps) -> str:
    if pps is None:
        return "–"
    m = pps / 1e6
    return f"{m:.3f}" if m < 1 else f"{m:.2f}"


def and_list(xs) -> str:
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1] if xs else "?"


def first_line(s, n=80) -> str:
    return ((s or "?").splitlines() or ["?"])[0][:n].replace("|", "/")


def system_label(system: str, mode=None, with_mode: bool = True) -> str:
    name = SYSTEM_NAMES.get(system, system)
    return f"{name}, {mode}" if with_mode and mode else name


def series_in(rows: list[dict]) -> list[tuple[tuple, str]]:
    """The (system, mode) series present in rows, in the fixed order, then any unknown ones."""
    present = {(r.get("system"), r.get("mode")) for r in rows}
    out = [(k, lab) for k, lab in SERIES if k in present]
    out += [((s, m), system_label(s, m)) for s, m in sorted(present - set(ORDER), key=str)]
    return out


def peers_in(rows: list[dict]) -> list[tuple[str, str]]:
    present = {r.get("system") for r in rows}
    return [(s, short) for s, short in PEERS if s in present]


def loads_in(rows: list[dict]) -> list[float]:
    return sorted({r["load"] for r in rows if r.get("load") is not None})


def is_quick(d: dict) -> bool:
    return bool((d.get("config") or {}).get("quick"))


def headline(loaded: list[tuple[Path, dict]], scenario: str) -> tuple[Path, dict] | None:
    """The newest non --quick file with rows of the scenario (else the newest quick one)."""
    having = [(p, d) for p, d in loaded if rows_of(d["results"], scenario)]
    full = [(p, d) for p, d in having if not is_quick(d)]
    return (full or having or [None])[-1]


def png_path(stem: Path, suffix: str) -> Path:
    return stem.with_name(f"{stem.name}-{suffix}.png")


# ---------------------------------------------------------------------------------------------
# plots


_MPL_WARNED = False


def _pyplot():
    global _MPL_WARNED
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        if not _MPL_WARNED:
            print("gen_report: matplotlib not importable, no plots (pip install matplotlib)", file=sys.stderr)
            _MPL_WARNED = True
        return None


def _title(data: dict, what: str, rounds=None) -> str:
    m = data.get("machine", {})
    runs = rounds if rounds is not None else data.get("config", {}).get("runs")
    return (f"{what}, {m.get('cpu_model', '?')}, {m.get('cpus_online', '?')} cores, "
            f"{runs} round(s) each" + (" (--quick run)" if is_quick(data) else ""))


def _finish(fig, path: Path, handles, labels, ncol: int | None = None) -> None:
    """One legend for the whole figure, below the panels, then save."""
    import math
    ncol = ncol or min(len(labels), 3) or 1
    rows = math.ceil(len(labels) / ncol) if labels else 0
    h = fig.get_size_inches()[1]
    bottom = (rows * 0.24 + 0.12) / h if rows else 0.0
    if rows:
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)


def plot_chain(data: dict, path: Path) -> bool:
    """Scenario 1: Mpps vs chain length, a panel per frame size, a line per system (+ mode) with
    min-max error bars, log y."""
    res = [r for r in rows_of(data["results"], CHAIN) if r.get("median_mpps") is not None]
    sizes = sorted({r["size"] for r in res})
    if not sizes:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    series = series_in(res)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.8 * len(sizes), 4.9), squeeze=False, sharey=True)
    for ax, size in zip(axes[0], sizes):
        ns = sorted({r["nfs"] for r in res if r["size"] == size})
        for (system, mode), label in series:
            pts = [(n, find(res, system, n, size, mode)) for n in ns]
            pts = [(n, r) for n, r in pts if r and r["median_mpps"] > 0]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            ys = [r["median_mpps"] for _, r in pts]
            lo = [r["median_mpps"] - max(r.get("min_mpps") or r["median_mpps"], 1e-9) for _, r in pts]
            hi = [(r.get("max_mpps") or r["median_mpps"]) - r["median_mpps"] for _, r in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], label=label, marker="o", markersize=4, capsize=3, linewidth=1.5,
                        color=COLOURS.get((system, mode)))
            # the 1-NF figure, the one to compare
            ax.annotate(f"{ys[0]:.2f}" if ys[0] < 10 else f"{ys[0]:.1f}", (xs[0], ys[0]), fontsize=7,
                        xytext=(-4, 4), textcoords="offset points", ha="right", color=COLOURS.get((system, mode)))
        ax.set_xticks(ns)
        ax.set_xlim(min(ns) - 0.5, max(ns) + 0.3)
        ax.set_xlabel("chain length N (NFs)")
        ax.set_title(f"net_null → N × fwd → net_null, {size} B")
        ax.set_yscale("log")
        ax.grid(which="major", alpha=0.35)
        ax.grid(which="minor", axis="y", alpha=0.12)
    axes[0][0].set_ylabel("Mpps (median of rounds; bars: min–max), log scale")
    fig.suptitle(_title(data, "Scenario 1: chain length"), fontsize=10)
    _finish(fig, path, *axes[0][0].get_legend_handles_labels())
    return True


def plot(data: dict, path: Path) -> bool:
    """The scenario 1 (chain length) plot; kept under its old name for bench/run.py."""
    return plot_chain(data, path)


def _bound_runs(r: dict) -> tuple[int, int]:
    b = [x for x in (r.get("runs_generator_bound") or []) if x]
    return len(b), len(r.get("runs_pps") or [])


def plot_zeroloss(data: dict, path: Path) -> bool:
    """Scenario 2: grouped bars, x = chain length, a bar per system, min-max error bars; hatched
    bars are generator bound (a lower bound)."""
    res = [r for r in rows_of(data["results"], ZEROLOSS) if r.get("median_pps") is not None]
    sizes = sorted({r["size"] for r in res})
    if not sizes:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    series = series_in(res)
    meds = [r["median_pps"] / 1e6 for r in res if r["median_pps"] > 0]
    logy = bool(meds) and max(meds) / min(meds) > 20
    fig, axes = plt.subplots(1, len(sizes), figsize=(max(6.0, 1.2 + 1.1 * len(series) * 2) * len(sizes), 5.0),
                             squeeze=False)
    width = 0.8 / max(1, len(series))
    any_bound = False
    handles, labels = [], []
    for ax, size in zip(axes[0], sizes):
        ns = sorted({r["nfs"] for r in res if r["size"] == size})
        for i, ((system, mode), label) in enumerate(series):
            xs, ys, lo, hi, bound = [], [], [], [], []
            for j, n in enumerate(ns):
                r = find(res, system, n, size, mode, scenario=ZEROLOSS)
                if r is None:
                    continue
                med = r["median_pps"] / 1e6
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(med)
                lo.append(med - (r.get("min_pps") if r.get("min_pps") is not None else r["median_pps"]) / 1e6)
                hi.append((r.get("max_pps") if r.get("max_pps") is not None else r["median_pps"]) / 1e6 - med)
                bound.append(_bound_runs(r)[0] > 0)
            if not xs:
                continue
            colour = COLOURS.get((system, mode))
            bars = ax.bar(xs, ys, width, label=label, yerr=[lo, hi], capsize=3, color=colour,
                          edgecolor="black", linewidth=0.4)
            for b, y, bd in zip(bars, ys, bound):
                if bd:
                    b.set_hatch("///")
                    any_bound = True
            for b, y, h, bd in zip(bars, ys, hi, bound):
                txt = ("≥" if bd else "") + (f"{y:.2f}" if y < 10 else f"{y:.1f}")
                ax.annotate(txt, (b.get_x() + b.get_width() / 2, y + h), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 3), textcoords="offset points")
        ax.set_xticks(range(len(ns)), [f"{n} NF" + ("s" if n > 1 else "") for n in ns])
        ax.set_title(f"zero-loss rate (RFC 2544 §26.1), {size} B frames")
        ax.set_ylabel("Mpps (median of rounds; bars: min–max)" + (", log scale" if logy else ""))
        if logy:
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(hd)
                labels.append(lb)
    if any_bound:
        from matplotlib.patches import Patch
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
        labels.append("hatched, ≥: generator bound (a lower bound)")
    fig.suptitle(_title(data, "Scenario 2: zero-loss throughput"), fontsize=10)
    _finish(fig, path, handles, labels)
    return True


def cdf_points(hist) -> tuple[list[float], list[float]]:
    """A merged histogram [[upper_ns, count], ...] as CDF points (upper bound in µs, fraction at or
    below it, with the plotting position (c - 0.5) / n so that no point is 0 or 1)."""
    h = sorted((int(u), int(c)) for u, c in (hist or []) if int(c) > 0)
    n = sum(c for _, c in h)
    xs, ys, cum = [], [], 0
    for u, c in h:
        cum += c
        xs.append(u / 1000)
        ys.append((cum - 0.5) / n)
    return xs, ys


def _lat_groups(res: list[dict]) -> list[tuple[int, int]]:
    return sorted({(r["nfs"], r["size"]) for r in res})


def plot_latency_cdf(data: dict, path: Path) -> bool:
    """Scenario 3: CDF of one-way latency from the merged histograms; a row of panels per chain
    length, a panel per load, a line per system; log x (µs), logit y (percentiles)."""
    res = [r for r in rows_of(data["results"], LATENCY) if r.get("histogram")]
    groups, loads = _lat_groups(res), loads_in(res)
    if not groups or not loads:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    from matplotlib.ticker import FixedLocator, FixedFormatter, NullLocator
    series = series_in(res)
    multi_size = len({s for _, s in groups}) > 1
    fig, axes = plt.subplots(len(groups), len(loads), figsize=(4.6 * len(loads), 3.5 * len(groups) + 0.6),
                             squeeze=False, sharex=True, sharey=True)
    nmax = 1
    for gi, (n, size) in enumerate(groups):
        for li, load in enumerate(loads):
            ax = axes[gi][li]
            for (system, mode), label in series:
                r = find(res, system, n, size, mode, scenario=LATENCY, load=load)
                if r is None:
                    r = next((x for x in res if x.get("system") == system and x.get("mode") == mode
                              and x["nfs"] == n and x["size"] == size and abs(x["load"] - load) < 1e-9), None)
                if r is None:
                    continue
                xs, ys = cdf_points(r["histogram"])
                if not xs:
                    continue
                nmax = max(nmax, sum(int(c) for _, c in r["histogram"]))
                ax.plot(xs, ys, label=label, color=COLOURS.get((system, mode)), linewidth=1.4)
            ax.set_xscale("log")
            ax.set_yscale("logit")
            ax.grid(which="major", alpha=0.35)
            ax.grid(which="minor", axis="x", alpha=0.12)
            ax.set_title(f"{n} NF{'s' if n > 1 else ''}" + (f", {size} B" if multi_size else "")
                         + f", {load:.0%} of zero-loss rate", fontsize=9)
            if gi == len(groups) - 1:
                ax.set_xlabel("one-way latency, µs (log scale)")
            if li == 0:
                ax.set_ylabel("fraction of packets ≤ x")
    ticks = [t for t in (0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999) if t <= 1 - 0.5 / nmax or t <= 0.99]
    for row in axes:
        for ax in row:
            ax.yaxis.set_major_locator(FixedLocator(ticks))
            ax.yaxis.set_major_formatter(FixedFormatter([f"{t * 100:g} %" for t in ticks]))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.set_ylim(0.005, 1 - 0.5 / nmax)
    handles, labels = [], []
    for ax in axes.flat:
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(hd)
                labels.append(lb)
    size_txt = "" if multi_size else f", {groups[0][1]} B frames"
    fig.suptitle(_title(data, f"Scenario 3: latency CDF{size_txt}, histograms merged over rounds"), fontsize=10)
    _finish(fig, path, handles, labels, ncol=min(len(labels), 4) or 1)
    return True


def plot_latency_pct(data: dict, path: Path) -> bool:
    """Scenario 3: a panel per chain length; per load a bar per system = p99 (median of rounds,
    min-max error bars), with markers for p50 and p99.9; log y (µs)."""
    res = [r for r in rows_of(data["results"], LATENCY) if r.get("median_ns")]
    groups, loads = _lat_groups(res), loads_in(res)
    if not groups or not loads:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    series = series_in(res)
    multi_size = len({s for _, s in groups}) > 1
    fig, axes = plt.subplots(1, len(groups), figsize=(max(5.0, 0.42 * len(series) * len(loads) + 1.6) * len(groups), 4.9),
                             squeeze=False, sharey=True)
    width = 0.8 / max(1, len(series))
    for ax, (n, size) in zip(axes[0], groups):
        for i, ((system, mode), label) in enumerate(series):
            xs, ys, lo, hi, p50, p999 = [], [], [], [], [], []
            for j, load in enumerate(loads):
                r = find(res, system, n, size, mode, scenario=LATENCY, load=load)
                if r is None or r["median_ns"].get("p99") is None:
                    continue
                med = r["median_ns"]["p99"] / 1000
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(med)
                lo.append(med - ((r.get("min_ns") or {}).get("p99", r["median_ns"]["p99"])) / 1000)
                hi.append(((r.get("max_ns") or {}).get("p99", r["median_ns"]["p99"])) / 1000 - med)
                p50.append(r["median_ns"].get("p50", 0) / 1000)
                p999.append(r["median_ns"].get("p999", 0) / 1000)
            if not xs:
                continue
            colour = COLOURS.get((system, mode))
            ax.bar(xs, ys, width, label=label, yerr=[lo, hi], capsize=3, color=colour, alpha=0.85,
                   edgecolor="black", linewidth=0.4)
            ax.scatter(xs, p50, marker="o", s=16, color="white", edgecolor="black", linewidth=0.8, zorder=3)
            ax.scatter(xs, p999, marker="v", s=22, color="black", zorder=3)
        ax.set_xticks(range(len(loads)), [f"{ld:.0%} of\nzero-loss rate" for ld in loads])
        ax.set_title(f"{n} NF{'s' if n > 1 else ''}" + (f", {size} B" if multi_size else ""))
        ax.set_yscale("log")
        ax.grid(axis="y", which="both", alpha=0.25)
    axes[0][0].set_ylabel("one-way latency, µs (log scale)")
    from matplotlib.lines import Line2D
    handles, labels = [], []
    for ax in axes.flat:
        for hd, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(hd)
                labels.append(lb)
    handles = [*handles, Line2D([], [], marker="o", linestyle="", markerfacecolor="white", markeredgecolor="black"),
               Line2D([], [], marker="v", linestyle="", color="black")]
    labels = [*labels, "p50 (median of rounds)", "p99.9 (median of rounds)"]
    size_txt = "" if multi_size else f", {groups[0][1]} B frames"
    fig.suptitle(_title(data, f"Scenario 3: p99 latency (bars: min–max over rounds){size_txt}"), fontsize=10)
    _finish(fig, path, handles, labels)
    return True


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


# ---------------------------------------------------------------------------------------------
# scenario 1: chain length


def chain_table(res: list[dict]) -> list[str]:
    peers = peers_in(res)
    rows = ["| NFs | size (B) | system | NF wakeup | median Mpps | min Mpps | max Mpps | median Gbps |"
            + "".join(f" Sluice / {short} |" for _, short in peers),
            "|---:|---:|---|---|---:|---:|---:|---:|" + "---:|" * len(peers)]
    keys = sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0]))
    for n, size in keys:
        ps = [find(res, s, n, size, None) for s, _ in peers]
        group = sorted((r for r in res if r["nfs"] == n and r["size"] == size),
                       key=lambda r: ORDER.get((r["system"], r.get("mode")), 99))
        for r in group:
            system = system_label(r["system"], with_mode=False)
            if r.get("median_mpps") is None:
                rows.append(f"| {n} | {size} | {system} | {r.get('mode') or '–'} | failed: "
                            f"{first_line(r.get('error'))} | | | |" + " |" * len(peers))
                continue
            ratios = []
            for p in ps:
                ratio = "–"
                if r["system"] == SLUICE and p and p["median_mpps"]:
                    ratio = f"{r['median_mpps'] / p['median_mpps']:.2f}×"
                ratios.append(ratio)
            rows.append(f"| {n} | {size} | {system} | {r.get('mode') or '–'} | {fmt(r['median_mpps'])} | "
                        f"{fmt(r.get('min_mpps'))} | {fmt(r.get('max_mpps'))} | {fmt(r.get('gbps_median'))} |"
                        + "".join(f" {x} |" for x in ratios))
    return rows


# kept for callers of the old name
def scenario_rows(data: dict) -> list[str]:
    return chain_table(rows_of(data["results"], CHAIN))


def chain_method(data: dict) -> list[str]:
    res, cfg = rows_of(data["results"], CHAIN), data.get("config", {})
    present = {r.get("system") for r in res}
    ns = sorted({r["nfs"] for r in res})
    sizes = sorted({r["size"] for r in res})
    out = ["**Method.** " + f"Mpps of `net_null -> N × fwd -> net_null` for N = {and_list(ns)} and "
           f"frames of {' and '.join(f'{s} B' for s in sizes)}. Each figure: {cfg.get('runs', '?')} round(s), "
           f"each starting fresh processes, {cfg.get('warmup_s', '?')} s warm-up, then a {cfg.get('duration_s', '?')} s "
           "counting window; within a round the systems alternate, so drift hits all of them. The figure is the "
           "median of the rounds, with min and max. Both ends are infinite sources/sinks (`net_null`), so the figure "
           "is the rate the switch + NF pipeline sustains.", ""]
    if SLUICE in present:
        out.append("- **Sluice**: `sluiced` with two `net_null` ports (`size=B,copy=0`); ingress port → chain of N "
                   "`sluice-nf-fwd` NFs → exit port. Rate = growth of the exit port's `tx_pkts`.")
    if PEER in present:
        out.append("- **testpmd + memif**: one `dpdk-testpmd` as the switch (`net_null` + one `net_memif` server "
                   "port per NF, io forwarding, chained port topology), and one `dpdk-testpmd` per NF (memif client, io "
                   "forwarding back out of its only port). Rate = growth of the switch's `net_null` TX counter.")
    if LINUX in present:
        out.append("- **Linux veth + netns**: one network namespace per NF doing kernel IPv4 "
                   "forwarding, namespaces chained by veth pairs (generator namespace → NF 1 … NF N → sink namespace), "
                   "GRO/GSO/TSO off; the generator is `bench/udpgen.c` (AF_PACKET flood bypassing the qdisc, 1024 UDP "
                   "port pairs; this kernel has no pktgen) pinned to core 0, and RPS on NF 1's ingress veth moves the "
                   "whole chain's forwarding (NET_RX softirq) to core 1. Rate = growth of the sink veth's `rx_packets`.")
    if OVS in present:
        out.append("- **OVS-DPDK + testpmd (vhost-user)**: `ovs-vswitchd` with the DPDK datapath (its PMD thread, "
                   "the switch, on core 1), a `net_null` port and one `dpdkvhostuserclient` port per NF, OpenFlow "
                   "`null0 → vhu1 → … → vhuN → null0`; one `dpdk-testpmd` per NF on `virtio_user` (io forwarding, "
                   "core 0). Rate = growth of `null0`'s TX packets.")
    out += ["- **Cores** (2 on this machine): the switch (sluiced worker / testpmd switch / OVS PMD thread) on "
            "core 1; every NF on core 0, shared when N > 1; idle main lcores on the other core.",
            "- Gbps = Mpps × frame size × 8 (L2 frame bits; no preamble or inter-frame gap). "
            "Sluice / X = Sluice median ÷ X's median for the same N and size."]
    return out


def reading(data: dict) -> list[str]:
    """Sentences computed from the scenario 1 numbers only."""
    res = rows_of(data["results"], CHAIN)
    out = []
    fcs0 = [f for r in res for f in (r.get("runs_foreign_cpu") or []) if f is not None]
    spreads0 = [(r["max_mpps"] - r["min_mpps"]) / r["median_mpps"] for r in res
                if r.get("median_mpps") and len(r.get("runs_mpps") or []) > 1]
    noisy_share = sum(f > 0.05 for f in fcs0) / len(fcs0) if fcs0 else 0.0
    med_spread = statistics.median(spreads0) if spreads0 else 0.0
    if noisy_share > 0.10:
        out.append(f"- **Caution: a noisy run.** {noisy_share:.0%} of the windows had other load above 5 % of the CPU "
                   f"and the median run-to-run spread is {med_spread:.0%}; the verdicts below may flip on a quiet machine.")
    elif med_spread > 0.20:
        out.append(f"- **Caution: wide spread.** The machine was quiet ({noisy_share:.0%} of the windows had other load "
                   f"above 5 % of the CPU), yet the median run-to-run spread is {med_spread:.0%}: compare medians, "
                   f"and see the notes on why windows differ.")
    s1 = find(res, SLUICE, 1, 64, "poll")
    p1 = find(res, PEER, 1, 64, None)
    if s1 and p1 and p1["median_mpps"]:
        ratio = s1["median_mpps"] / p1["median_mpps"]
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        out.append(f"- **Target 1** (1 NF, 64 B, poll ≥ {TARGET_RATIO:g}× the memif peer): **{verdict}**. "
                   f"Sluice {s1['median_mpps']:.2f} Mpps vs testpmd+memif {p1['median_mpps']:.2f} Mpps = {ratio:.2f}×.")
    else:
        out.append("- Target 1 (1 NF, 64 B, poll vs peer) cannot be judged: "
                   + ("no Sluice figure" if not s1 else "no peer figure") + " in this run.")
    all_ns = sorted({r["nfs"] for r in res})
    sizes = sorted({r["size"] for r in res})
    gaps = []
    for n in all_ns:
        for system, mode in ORDER:
            a, b = find(res, system, n, 64, mode), find(res, system, n, 1500, mode)
            if a and b and a["median_mpps"]:
                gaps.append((system, mode, n, a["median_mpps"], b["median_mpps"], b["median_mpps"] / a["median_mpps"] - 1))
    sl_gaps = [g for g in gaps if g[0] == SLUICE]
    if sl_gaps:
        bad = [g for g in sl_gaps if g[5] < -TARGET_SIZE_GAP]
        t1 = [g for g in sl_gaps if g[2] == 1 and g[1] == "poll"]
        if t1:
            g = t1[0]
            verdict = "met" if g[5] >= -TARGET_SIZE_GAP else "NOT met"
            head = (f"- **Target 2** (1500 B packet rate within {TARGET_SIZE_GAP:.0%} of 64 B), 1 NF poll: **{verdict}** "
                    f"({g[4]:.2f} vs {g[3]:.2f} Mpps, {g[5]:+.1%}). ")
        else:
            head = f"- Target 2 (1500 B packet rate within {TARGET_SIZE_GAP:.0%} of 64 B): "
        detail = "; ".join(f"{g[2]} NF {g[1]} {g[5]:+.1%}" for g in sl_gaps)
        out.append(head + f"Sluice 1500 B rate relative to 64 B: {detail}; "
                   + (f"{len(bad)} of {len(sl_gaps)} are more than {TARGET_SIZE_GAP:.0%} below." if bad
                      else f"none of {len(sl_gaps)} is more than {TARGET_SIZE_GAP:.0%} below."))
    s1b = find(res, SLUICE, 1, 64, "poll")
    for system, _ in PEERS[1:]:
        p = find(res, system, 1, 64, None)
        if p:
            out.append(f"- {SYSTEM_NAMES[system]}, 1 NF, 64 B: {p['median_mpps']:.2f} Mpps"
                       + (f"; Sluice poll is {s1b['median_mpps'] / p['median_mpps']:.1f}× that."
                          if s1b and p["median_mpps"] else "."))
    for system, _ in PEERS:
        for size in sizes:
            pts = [(n, find(res, system, n, size, None)) for n in all_ns]
            pts = [(n, r["median_mpps"]) for n, r in pts if r]
            if len(pts) > 1 and pts[0][1]:
                out.append(f"- {SYSTEM_NAMES[system]}, {size} B, chain length: "
                           + ", ".join(f"{n} NF {m:.2f}" for n, m in pts)
                           + f" Mpps ({pts[-1][0]} NFs at {pts[-1][1] / pts[0][1]:.1%} of {pts[0][0]} NF).")
        pg = [g for g in gaps if g[0] == system]
        if pg:
            out.append(f"- {SYSTEM_NAMES[system]}, 64 B → 1500 B: "
                       + "; ".join(f"{g[2]} NF {g[3]:.2f} → {g[4]:.2f} Mpps ({g[5]:+.1%})" for g in pg) + ".")
    for size in sizes:
        for mode in ("poll", "adaptive", "block"):
            pts = [(n, find(res, SLUICE, n, size, mode)) for n in all_ns]
            pts = [(n, r["median_mpps"]) for n, r in pts if r]
            if len(pts) > 1 and pts[0][1]:
                out.append(f"- Sluice {mode}, {size} B, chain length: "
                           + ", ".join(f"{n} NF {m:.2f}" for n, m in pts) + " Mpps"
                           + f" ({pts[-1][0]} NFs at {pts[-1][1] / pts[0][1]:.1%} of {pts[0][0]} NF).")
    for size in sizes:
        cmp_ = []
        for n in all_ns:
            a, b = find(res, SLUICE, n, size, "poll"), find(res, SLUICE, n, size, "adaptive")
            if a and b and a["median_mpps"]:
                cmp_.append(f"{n} NF {b['median_mpps'] / a['median_mpps']:.2f}×")
        if cmp_:
            out.append(f"- Adaptive relative to poll, {size} B: " + ", ".join(cmp_) + ".")
    spreads = [((r["max_mpps"] - r["min_mpps"]) / r["median_mpps"], r) for r in res
               if r.get("median_mpps") and len(r.get("runs_mpps") or []) > 1]
    if spreads:
        worst = max(spreads, key=lambda t: t[0])
        med = statistics.median(t[0] for t in spreads)
        r = worst[1]
        out.append(f"- Run-to-run spread (max − min) / median: median {med:.1%} over {len(spreads)} figures; widest "
                   f"{worst[0]:.1%} ({'Sluice ' + r['mode'] if r['system'] == SLUICE else SYSTEM_NAMES.get(r['system'], r['system'])}, "
                   f"{r['nfs']} NF, {r['size']} B).")
    elif res:
        out.append("- Only one run per figure: no spread to report (use at least 5 runs for figures to quote).")
    fcs = [f for r in res for f in (r.get("runs_foreign_cpu") or []) if f is not None]
    if fcs:
        noisy = [f for f in fcs if f > 0.05]
        out.append(f"- Other processes' share of all CPU time during the measurement windows: median {statistics.median(fcs):.1%}, "
                   f"max {max(fcs):.1%}" + (f"; {len(noisy)} of {len(fcs)} windows above 5 %, so those figures "
                                            "were disturbed by other load." if noisy else " (a quiet machine)."))
    errs = [e for e in (data.get("errors") or []) if scenario_of(e) == CHAIN]
    if errs:
        out.append(f"- {len(errs)} measurement(s) failed in this run; see `errors` in the JSON.")
    return out


# ---------------------------------------------------------------------------------------------
# scenario 2: zero-loss throughput


def _trial_cfg(data: dict) -> dict:
    """The trial settings of scenarios 2 and 3, from the config (several spellings accepted) and rows."""
    cfg = data.get("config", {})

    def get(*keys):
        for k in keys:
            v = cfg.get(k)
            if v is not None:
                return v
        return None

    zl = rows_of(data["results"], ZEROLOSS)
    dur = get("trial_duration_s", "trial_duration") or next(
        (r["trial_duration_s"] for r in zl if r.get("trial_duration_s") is not None), None)
    return {"runs": cfg.get("runs"), "duration": dur,
            "warmup": get("trial_warmup_s", "trial_warmup"),
            "latency_duration": get("latency_duration_s", "latency_duration") or dur,
            "search": cfg.get("search") if isinstance(cfg.get("search"), dict) else {},
            "mode": get("trial_mode")}


def _s(x, unit="s", pre="", post="") -> str:
    """A duration for a sentence, or nothing when the config does not say."""
    return "" if x is None else f"{pre}{x:g} {unit}{post}"


def zeroloss_method(data: dict) -> list[str]:
    res = rows_of(data["results"], ZEROLOSS)
    t = _trial_cfg(data)
    ns = sorted({r["nfs"] for r in res})
    sizes = sorted({r["size"] for r in res})
    srch = t["search"]
    res_txt = ""
    if srch.get("resolution") is not None:
        rv = srch["resolution"]
        res_txt = (f" until the bounds are within {rv:.1%} of the upper one" if rv < 1
                   else f" until the bounds are within {rv / 1e6:g} Mpps")
    if srch.get("max_trials") is not None:
        res_txt += f"{' or' if res_txt else ' until'} {srch['max_trials']} trials ran"
    start = srch.get("start_pps")
    ntrials = [len(s) for r in res for s in (r.get("runs_search") or []) if s]
    size_txt = " and ".join(f"{s} B" for s in sizes)
    out = ["**Method.** RFC 2544 §26.1 throughput: the highest rate at which the chain loses no frame. "
           f"Chains of {and_list(ns)} forwarding NF{'s' if ns != [1] else ''}; {size_txt} frames (66 B is the smallest frame "
           "that holds the generator's 24-byte timestamp and sequence stamp). "
           f"Each trial offers a constant rate for a{_s(t['warmup'], pre=' ')} warm-up (not counted), then "
           f"{_s(t['duration'], post=' of ')}counted frames, then waits for stragglers; lost = counted frames sent − received. "
           "A search first probes the generator's ceiling"
           + (f" (a short trial at {start / 1e6:g} Mpps)" if start else "")
           + ", then bisects on the rate the generator *really sent* (the generators here share core 0 with the "
           "NFs and often send less than asked, so each trial asks for the target divided by the share the previous "
           "trial achieved): a loss-free trial raises the lower bound, a lossy one lowers the upper bound; until "
           "something has passed, the next target is a quarter of the upper bound"
           + res_txt + ". The figure is the highest sent rate without loss. If a trial at the ceiling loses nothing, "
           "or a loss-free trial falls short of the asked rate without raising the lower bound, the figure is "
           "**generator bound** (≥: the system may take more than the generator can offer). "
           f"{t['runs'] if t['runs'] is not None else '?'} round(s), systems alternating within a round; "
           "median of the rounds with min–max"
           + (f"; trials per search: median {statistics.median(ntrials):g}, max {max(ntrials)}" if ntrials else "")
           + ". Gbps = rate × frame size × 8 (L2 frame bits).", ""]
    testers = data.get("config", {}).get("testers") or {}
    if testers:
        for s, txt in testers.items():
            out.append(f"- **{SYSTEM_NAMES.get(s, s)}**: {txt}")
    elif any(r.get("system") == SLUICE for r in res):
        out.append("- **Sluice**: the generator (`sluice-nf-gen`, paced, stamping each frame) and the sink "
                   "(`sluice-nf-sink`, loss from sequence numbers) are NFs in the same chain (gen → N × fwd → sink), "
                   "fed by a `net_null` port as buffer supply; they share core 0 with the NFs under test and cost "
                   "two more hops through the switch.")
    return out


def _zl_cell(r: dict, key: str = "median_pps") -> str:
    k, _ = _bound_runs(r)
    v = r.get(key)
    return ("≥" if k else "") + fmt_rate(v)


def _no_pass_note(r: dict) -> str:
    """Rounds whose search found no loss-free rate: say where loss was still seen."""
    zero = [u for v, u in zip(r.get("runs_pps") or [], r.get("runs_upper_pps") or [None] * len(r.get("runs_pps") or []))
            if v == 0]
    if not zero:
        return ""
    ups = [u for u in zero if u]
    where = f"; lost even at {fmt_rate(min(ups))} Mpps" if ups else ""
    return f" ({len(zero)} round{'s' if len(zero) > 1 else ''} found no loss-free rate{where})"


def _zl_ratio(s: dict, p: dict | None) -> tuple[str, bool]:
    """Sluice / peer zero-loss ratio cell: ≥ when only Sluice's figure is generator bound, ≤ when
    only the peer's is, † when both are; second value: both bound."""
    if not p or not p.get("median_pps") or s.get("median_pps") is None:
        return "–", False
    x = s["median_pps"] / p["median_pps"]
    sb, pb = _bound_runs(s)[0] > 0, _bound_runs(p)[0] > 0
    if sb and pb:
        return f"{x:.2f}×†", True
    return ("≥" if sb else "≤" if pb else "") + f"{x:.2f}×", False


def zeroloss_table(res: list[dict]) -> tuple[list[str], bool]:
    peers = peers_in(res)
    multi_size = len({r["size"] for r in res}) > 1
    head = "| NFs |" + (" size (B) |" if multi_size else "") + " system | median Mpps (min–max) | Gbps | " \
        "generator-bound rounds |" + "".join(f" Sluice / {short} |" for _, short in peers)
    rows = [head, "|---:|" + ("---:|" if multi_size else "") + "---|---:|---:|---:|" + "---:|" * len(peers)]
    any_bound = False
    both_bound = False
    for n, size in sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0])):
        ps = [find(res, s, n, size, None, scenario=ZEROLOSS) for s, _ in peers]
        group = sorted((r for r in res if r["nfs"] == n and r["size"] == size),
                       key=lambda r: ORDER.get((r["system"], r.get("mode")), 99))
        for r in group:
            lead = f"| {n} |" + (f" {size} |" if multi_size else "") + f" {system_label(r['system'], r.get('mode'))} |"
            if r.get("median_pps") is None:
                rows.append(lead + f" failed: {first_line(r.get('error'))} | | |" + " |" * len(peers))
                continue
            k, nr = _bound_runs(r)
            any_bound |= k > 0
            ratios = []
            for p in ps:
                cell, bb = _zl_ratio(r, p) if r["system"] == SLUICE else ("–", False)
                both_bound |= bb
                ratios.append(cell)
            err = f" (some rounds failed: {first_line(r.get('error'), 60)})" if r.get("error") else ""
            err += _no_pass_note(r)
            rows.append(lead + f" **{_zl_cell(r)}** ({fmt_rate(r.get('min_pps'))}–{fmt_rate(r.get('max_pps'))}){err} | "
                        f"{('≥' if k else '') + fmt(r.get('median_gbps'))} | {k} of {nr} |"
                        + "".join(f" {x} |" for x in ratios))
    notes = []
    if any_bound:
        notes.append("≥: in at least one round the highest rate the generator could offer lost nothing, so the "
                     "figure (and that round's min or max) is a lower bound set by the generator, not by the system; "
                     "a ratio with ≥ / ≤ is a lower / upper bound for the same reason.")
    if both_bound:
        notes.append("†: both figures are generator bound; the ratio compares the generators, not the systems.")
    if notes:
        rows += [""] + [f"<sub>{n}</sub>  " for n in notes]
        rows[-1] = rows[-1].rstrip()
    return rows, any_bound


def zeroloss_reading(data: dict) -> list[str]:
    res = rows_of(data["results"], ZEROLOSS)
    out = []
    for n, size in sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0])):
        s = find(res, SLUICE, n, size, "poll", scenario=ZEROLOSS) or next(
            (r for r in res if r["system"] == SLUICE and r["nfs"] == n and r["size"] == size
             and r.get("median_pps") is not None), None)
        if not s:
            continue
        parts = []
        for system, _ in PEERS:
            p = find(res, system, n, size, None, scenario=ZEROLOSS)
            if p and p["median_pps"]:
                parts.append(f"{SYSTEM_NAMES[system]} {_zl_cell(p)} Mpps (Sluice / it {_zl_ratio(s, p)[0]})")
        out.append(f"- {n} NF{'s' if n > 1 else ''}, {size} B: Sluice {_zl_cell(s)} Mpps"
                   + (" vs " + ", ".join(parts) if parts else "") + ".")
    for system in sorted({r["system"] for r in res}, key=lambda s: ORDER.get((s, None), ORDER.get((s, "poll"), 99))):
        pts = [(n, find(res, system, n, size, r_mode, scenario=ZEROLOSS))
               for n, size, r_mode in sorted({(r["nfs"], r["size"], r.get("mode")) for r in res if r["system"] == system})]
        pts = [(n, r) for n, r in pts if r]
        if len(pts) > 1 and pts[0][1]["median_pps"]:
            a, b = pts[0], pts[-1]
            out.append(f"- {SYSTEM_NAMES.get(system, system)}: {b[0]} NFs keep "
                       f"{b[1]['median_pps'] / a[1]['median_pps']:.0%} of the {a[0]}-NF zero-loss rate.")
    spreads = [(r["max_pps"] - r["min_pps"]) / r["median_pps"] for r in res
               if r.get("median_pps") and len(r.get("runs_pps") or []) > 1 and r.get("max_pps") is not None]
    if spreads:
        out.append(f"- Round-to-round spread (max − min) / median: median {statistics.median(spreads):.0%}, "
                   f"widest {max(spreads):.0%}.")
    errs = [e for e in (data.get("errors") or []) if scenario_of(e) == ZEROLOSS]
    if errs:
        out.append(f"- {len(errs)} search session(s) failed in this run; see `errors` in the JSON.")
    return out


# ---------------------------------------------------------------------------------------------
# scenario 3: latency


def latency_method(data: dict) -> list[str]:
    res = rows_of(data["results"], LATENCY)
    t = _trial_cfg(data)
    loads = loads_in(res)
    sizes = sorted({r["size"] for r in res})
    return ["**Method.** In the same session as each round's zero-loss search (scenario 2), one trial at "
            + and_list(f"{ld:.0%}" for ld in loads) + " of that round's zero-loss rate for that system and chain "
            f"length: a{_s(t['warmup'], pre=' ')} warm-up, then {_s(t['latency_duration'], post=' of ')}counted "
            f"{' and '.join(f'{s} B' for s in sizes)} frames. Latency is one-way, from the timestamp the generator "
            "writes into each frame to the frame's arrival at the sink, binned in a log-linear histogram. "
            f"{t['runs'] if t['runs'] is not None else '?'} round(s): each percentile is the median of the rounds' "
            "percentiles, with min–max in small print; the CDF plot uses the histograms merged over all rounds. "
            "Sent Mpps is the median of the rate the generator really sent in the rounds (older results: the offered rate); lost packets are summed over the rounds "
            "(at these loads there should be none). Sluice ÷ X = Sluice's p99 over X's p99 at the same load and "
            "chain length (below 1: Sluice is faster)."]


def _lat_cell(r: dict, p: str) -> str:
    med = (r.get("median_ns") or {}).get(p)
    lo, hi = (r.get("min_ns") or {}).get(p), (r.get("max_ns") or {}).get(p)
    cell = fmt_us(med)
    if lo is not None and hi is not None and (lo != med or hi != med):
        cell += f" <sub>{fmt_us(lo)}–{fmt_us(hi)}</sub>"
    return cell


def latency_tables(res: list[dict]) -> list[str]:
    peers = peers_in(res)
    out = []
    for n, size in _lat_groups(res):
        grp = [r for r in res if r["nfs"] == n and r["size"] == size]
        out += [f"**{n} NF{'s' if n > 1 else ''}**" + (f", {size} B" if len({r['size'] for r in res}) > 1 else ""), "",
                "| system | load | sent Mpps | p50 µs | p99 µs | p99.9 µs | max µs | lost |"
                + "".join(f" Sluice ÷ {short} p99 |" for _, short in peers),
                "|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(peers)]
        for r in sorted(grp, key=lambda r: (ORDER.get((r["system"], r.get("mode")), 99), r.get("load") or 0)):
            lead = f"| {system_label(r['system'], r.get('mode'))} | {r.get('load', 0):.0%} |"
            rates = [x for x in (r.get("runs_sent_pps") or r.get("runs_rate_pps") or []) if x is not None]
            rate = fmt_rate(statistics.median(rates)) if rates else "–"
            lost = [x for x in (r.get("runs_lost") or []) if x is not None]
            lost_txt = f"{sum(lost):,}" if lost else "–"
            if sum(lost) > 0:
                lost_txt = f"**{lost_txt}**"
            if not r.get("median_ns"):
                why = first_line(r.get("error")) if r.get("error") else "no latency samples"
                rows = f"{lead} {rate} | failed: {why} | | | | {lost_txt} |" + " |" * len(peers)
                out.append(rows)
                continue
            ratios = []
            for system, _ in peers:
                cell = "–"
                if r["system"] == SLUICE:
                    p = find(res, system, n, size, None, scenario=LATENCY, load=r.get("load"))
                    a, b = r["median_ns"].get("p99"), p and p["median_ns"].get("p99")
                    if a is not None and b:
                        cell = f"{a / b:.2f}×"
                ratios.append(cell)
            out.append(f"{lead} {rate} | " + " | ".join(_lat_cell(r, p) for p, _ in PCTS) + f" | {lost_txt} |"
                       + "".join(f" {x} |" for x in ratios))
        out.append("")
    return out


def latency_reading(data: dict) -> list[str]:
    res = rows_of(data["results"], LATENCY)
    out = []
    for n, size in _lat_groups(res):
        for ld in loads_in(res):
            s = find(res, SLUICE, n, size, "poll", scenario=LATENCY, load=ld) or next(
                (r for r in res if r["system"] == SLUICE and r["nfs"] == n and r["size"] == size
                 and r.get("load") == ld and r.get("median_ns")), None)
            if not s:
                continue
            parts = [f"{SYSTEM_NAMES[system]} {fmt_us(p['median_ns'].get('p99'))}"
                     for system, _ in PEERS
                     for p in [find(res, system, n, size, None, scenario=LATENCY, load=ld)] if p]
            out.append(f"- {n} NF{'s' if n > 1 else ''}, {ld:.0%} load: Sluice p99 {fmt_us(s['median_ns'].get('p99'))} µs"
                       + (" vs " + ", ".join(parts) + " µs" if parts else "") + ".")
    lossy = [r for r in res if sum(x for x in (r.get("runs_lost") or []) if x) > 0]
    if lossy:
        out.append("- Packets lost in latency trials (below the zero-loss rate, so the zero-loss rate was not "
                   "stable across trials): " + "; ".join(
                       f"{system_label(r['system'], r.get('mode'))} {r['nfs']} NF {r['load']:.0%}: "
                       f"{sum(x for x in r['runs_lost'] if x):,}" for r in lossy) + ".")
    elif res:
        out.append("- No packet was lost in any latency trial.")
    return out


# ---------------------------------------------------------------------------------------------
# report


def machine_rows(m: dict, cfg: dict | None = None) -> list[str]:
    hp = m.get("hugepages_2m_total", 0)
    hp_txt = (f"{hp} × 2 MiB reserved ({hp * 2} MiB), hugetlbfs {'mounted' if m.get('hugetlbfs_mounted') else 'not mounted'}"
              if hp else "none (DPDK ran on 4 KiB pages, --no-huge)")
    return [
        "| | |", "|---|---|",
        f"| CPU | {m.get('cpu_model', '?')}" + (f" ({m['cpu_mhz']:.0f} MHz reported)" if m.get("cpu_mhz") else "") + " |",
        f"| cores | {m.get('cpus_online', '?')} online, {m.get('cpus_usable', '?')} usable by the benchmark |",
        f"| memory | {m.get('mem_gib', '?')} GiB |",
        f"| OS / kernel | {m.get('os', '?')} / Linux {m.get('kernel', '?')} |",
        f"| DPDK | {m.get('dpdk_version', '?')} |",
        f"| huge pages | {hp_txt} |",
        f"| load average at start | {m.get('loadavg', '?')} |",
    ]


def _machine_key(m: dict) -> tuple:
    return (m.get("cpu_model"), m.get("cpus_online"), m.get("kernel"), m.get("mem_gib"), m.get("dpdk_version"))


def _link(p: Path, out_dir: Path) -> str:
    return os.path.relpath(p, out_dir)


def _sluice_zl(res):
    return find(res, SLUICE, 1, 66, "poll", scenario=ZEROLOSS) or next(
        (r for r in res if scenario_of(r) == ZEROLOSS and r.get("system") == SLUICE and r.get("nfs") == 1
         and r.get("median_pps") is not None), None)


def _sluice_lat(res, load=0.5):
    return next((r for r in res if scenario_of(r) == LATENCY and r.get("system") == SLUICE and r.get("nfs") == 1
                 and r.get("load") is not None and abs(r["load"] - load) < 1e-9 and r.get("median_ns")), None)


def history_rows(loaded: list[tuple[Path, dict]], out_dir: Path = REPO) -> list[str]:
    rows = ["| results file | kind | scenarios | rounds × window | Sluice 1 NF 64 B poll | memif 1 NF 64 B | ratio | "
            "Linux veth 1 NF 64 B | OVS 1 NF 64 B | Sluice 1 NF 1500 B poll | Sluice 1 NF zero-loss Mpps | "
            "Sluice 1 NF p99 at 50 % (µs) |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p, d in reversed(loaded):
        res, cfg = d["results"], d.get("config", {})
        scen = [s for s in SCENARIOS + ("density", "steering", "nfs") if rows_of(res, s)]
        s, pe, s15 = find(res, SLUICE, 1, 64, "poll"), find(res, PEER, 1, 64, None), find(res, SLUICE, 1, 1500, "poll")
        ratio = f"{s['median_mpps'] / pe['median_mpps']:.2f}×" if s and pe and pe["median_mpps"] else "–"
        li, ov = find(res, LINUX, 1, 64, None), find(res, OVS, 1, 64, None)
        zl, lat = _sluice_zl(res), _sluice_lat(res)
        rows.append(f"| [{p.name}]({_link(p, out_dir)}) | {'quick' if is_quick(d) else 'full'} | "
                    f"{', '.join(scen) or '–'} | {cfg.get('runs', '?')} × {cfg.get('duration_s', '?')} s | "
                    f"{fmt(s and s['median_mpps'])} | {fmt(pe and pe['median_mpps'])} | {ratio} | "
                    f"{fmt(li and li['median_mpps'])} | {fmt(ov and ov['median_mpps'])} | "
                    f"{fmt(s15 and s15['median_mpps'])} | {_zl_cell(zl) if zl else '–'} | "
                    f"{fmt_us(lat['median_ns'].get('p99')) if lat else '–'} |")
    return rows


def steering_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    """Steering (issue 4, bench/steering.py): throughput with 10 vs 10,000 rules and 1M flows."""
    L = ["## Steering: rules and flows (`bench/steering.py`)", ""]
    h = headline(loaded, "steering")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/steering.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    L += [_headline_line(p, d, out_dir), "",
          f"**Method.** A fresh sluiced per measurement; port `load` (net_pcap, `infinite_rx`) replays "
          f"{cfg.get('load_flows', '?'):,} UDP flows forever, port `out` (net_null) discards; the large rows first "
          f"read {cfg.get('big_flows', '?'):,} more distinct flows from a second pcap port, so the flow table holds "
          "them all while the load runs. Rules: all but one or two never match the traffic (random prefixes, "
          "protocols and ports, many in the traffic's /16, at higher priorities); the last send it out (`port`) "
          f"or through chain [fwd] (`NF`). Figure: packets out per second, median of {cfg.get('windows', '?')} windows "
          f"of {cfg.get('duration_s', '?')} s per round; median of {cfg.get('runs', '?')} rounds with min–max, "
          "configurations alternating in each round. The pcap PMD's replay is part of the cost, like the net_null "
          "port's in scenario 1.", "",
          "| configuration | median Mpps (min–max) | flows in the table | vs the 10-rule row of the same path |",
          "|---|---:|---:|---:|"]
    rows = rows_of(d["results"], "steering")
    base = {}
    for r in rows:
        if r.get("rules") == 10 and r.get("median_pps"):
            base[(r.get("nf"), r.get("flow_table"))] = r["median_pps"]
    for r in rows:
        if r.get("median_pps") is None:
            L.append(f"| {r['label']} | failed | | |")
            continue
        b = base.get((r.get("nf"), r.get("flow_table")))
        ratio = f"{r['median_pps'] / b:.0%}" if b and r.get("rules") != 10 else "–"
        flows = max(r.get("runs_flow_entries") or [0])
        L.append(f"| {r['label']} | **{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–{fmt_rate(r['max_pps'])}) "
                 f"| {flows:,} | {ratio} |")
    L.append("")
    return L


NFS_TARGET_PPS = 5e6  # issue 5: every NF at least 5 Mpps on one core (ids excepted)


def plot_nfs(data: dict, path: Path) -> bool:
    """NF library: a pair of bars per NF (Mpps out of the chain, Mpps per NF CPU-second) with
    min-max error bars, the 5 Mpps target as a line."""
    res = [r for r in rows_of(data["results"], "nfs") if r.get("median_pps") is not None]
    if not res:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(max(6.5, 1.0 * len(res) + 2), 4.6))
    w = 0.38
    xs = list(range(len(res)))
    for off, key, label, colour in ((-w / 2, "pps", "Mpps out of the chain", "C0"),
                                    (w / 2, "pps_per_cpu_s", "Mpps per NF CPU-second", "C1")):
        med = [(r.get(f"median_{key}") or 0) / 1e6 for r in res]
        lo = [m - (r.get(f"min_{key}") or 0) / 1e6 if r.get(f"min_{key}") else 0 for m, r in zip(med, res)]
        hi = [(r.get(f"max_{key}") or 0) / 1e6 - m if r.get(f"max_{key}") else 0 for m, r in zip(med, res)]
        ax.bar([x + off for x in xs], med, w, yerr=[lo, hi], capsize=3, label=label, color=colour)
        for x, m in zip(xs, med):
            # inside the bar, at its foot: clear of the error bar
            ax.annotate(f"{m:.1f}", (x + off, 0), fontsize=7, ha="center", va="bottom", color="white",
                        fontweight="bold", xytext=(0, 2), textcoords="offset points")
    ax.axhline(NFS_TARGET_PPS / 1e6, color="C3", linestyle="--", linewidth=1, label="target: 5 Mpps on one core")
    ax.set_xticks(xs)
    ax.set_xticklabels([r["label"] for r in res], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Mpps (median of rounds; bars: min–max)")
    ax.grid(axis="y", alpha=0.35)
    fig.suptitle(_title(data, "NF library, 64 B, each NF alone in a chain"), fontsize=10)
    _finish(fig, path, *ax.get_legend_handles_labels())
    return True


def nfs_method(d: dict) -> list[str]:
    cfg = d.get("config", {})
    return [
        f"**Method.** A fresh sluiced per measurement, rows alternating within each round. Port `load` "
        f"(net_pcap, `infinite_rx`) replays {cfg.get('flows', '?'):,} UDP flows of {cfg.get('frame_bytes', 64)}-byte "
        "frames (with the FCS) forever; chain [NF under test] exits to port `out` (net_null, discards; nat, router "
        "and l2switch send OUT of it themselves). sluiced runs on lcores "
        f"{cfg.get('sluiced_lcores', '0,1')}: its worker polls core 1 and also does the pcap replay; the NF is pinned "
        f"to core {cfg.get('nf_core', '0')} with `--wakeup {cfg.get('nf_wakeup', 'block')}`, so it burns CPU only "
        f"while it has packets. After {cfg.get('warmup_s', '?')} s of warm-up, {cfg.get('windows', '?')} windows of "
        f"{cfg.get('duration_s', '?')} s; median of {cfg.get('runs', '?')} rounds with min–max.",
        "",
        "Two figures per NF. **Mpps out**: packets leaving `out` per second. On this machine the NF, sluiced's "
        "worker and the pcap replay share two vCPUs (with whatever else runs), so this is mostly the fabric's rate, "
        "not the NF's. **Mpps per NF CPU-second**: the packets the NF handled (its rx count) divided by the CPU "
        "time it used over the same windows (utime + stime of all its threads, `/proc/PID/stat`): the rate the NF "
        "would sustain alone on one core, which isolates its own cost (the SDK's ring transport included) and is "
        "the figure the 5 Mpps target is checked against. `others` is the share of the machine's CPU used by "
        "processes other than sluiced and the NF while measuring (other jobs on a shared VM).",
    ]


def nfs_section(loaded: list[tuple[Path, dict]], results_dir: Path, out_dir: Path, draw: bool = True) -> list[str]:
    """NF library (issue 5, bench/nfs.py): Mpps per NF, each alone in a chain, 64 B."""
    L = ["## Scenario: NF library, Mpps per NF (`bench/nfs.py`)", ""]
    h = headline(loaded, "nfs")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/nfs.py`.", ""]
    p, d = h
    L += [_headline_line(p, d, out_dir), ""] + nfs_method(d) + [""]
    L += ["| NF | configuration | Mpps out (min–max) | Mpps per NF CPU-s (min–max) | ≥ 5 Mpps per core | "
          "NF CPU share | others |", "|---|---|---:|---:|:-:|---:|---:|"]
    for r in rows_of(d["results"], "nfs"):
        if r.get("skipped"):
            L.append(f"| {r['label']} | {r.get('what', '')} | skipped: {r['skipped']} | | | | |")
            continue
        if r.get("median_pps") is None:
            L.append(f"| {r['label']} | {r.get('what', '')} | failed | | | | |")
            continue
        per = r.get("median_pps_per_cpu_s")
        ok = "–" if per is None else ("yes" if per >= NFS_TARGET_PPS else "**no**")
        if not r.get("target", True) and per is not None:
            ok = f"({'yes' if per >= NFS_TARGET_PPS else 'no'}; exempt)"
        share = r.get("runs_nf_cpu_share") or []
        foreign = r.get("runs_foreign_cpu") or []
        L.append(f"| {r['label']} | {r.get('what', '')} | **{fmt_rate(r['median_pps'])}** "
                 f"({fmt_rate(r['min_pps'])}–{fmt_rate(r['max_pps'])}) | "
                 + (f"**{fmt_rate(per)}** ({fmt_rate(r.get('min_pps_per_cpu_s'))}–{fmt_rate(r.get('max_pps_per_cpu_s'))})"
                    if per is not None else "–")
                 + f" | {ok} | {statistics.median(share):.0%} | "
                 + (f"{statistics.median(foreign):.0%}" if foreign else "–") + " |")
    L.append("")
    png = results_dir / f"{stamp_of(p)}.png"
    if not png.exists() and draw:
        try:
            plot_nfs(d, png)
        except Exception as e:  # a plot must never cost the report
            print(f"gen_report: could not draw {png.name}: {e!r}", file=sys.stderr)
    if png.exists():
        L += [f"![Mpps per NF, {stamp_of(p)}]({_link(png, out_dir)})", ""]
    if d.get("errors"):
        L += [f"{len(d['errors'])} measurement(s) failed in this run: "
              + "; ".join(f"{e.get('config')} round {e.get('round')}: {first_line(e.get('error', ''))}"
                          for e in d["errors"][:5]), ""]
    return L


DENSITY_TARGET = {"nfs": 2000, "size": 700, "pps": 1.4e6, "p99_ns": 5e6}  # issue 6, scenario 5


def density_rows(loaded: list[tuple[Path, dict]]) -> list[tuple[Path, dict, dict]]:
    """Scenario 5 rows to report: per (N, size), the newest full (non --quick) run that measured it,
    so a sweep run in parts (`--nfs 1000,2000 --sizes 700`, ...) is merged; quick runs only when no
    full run has the scenario. Returns (file, its data, row), by N then size."""
    having = [(p, d) for p, d in loaded if rows_of(d["results"], "density")]
    full = [(p, d) for p, d in having if not is_quick(d)] or having[-1:]
    best: dict[tuple, tuple] = {}
    for p, d in full:  # oldest first: newer files overwrite
        for r in rows_of(d["results"], "density"):
            if r.get("median_pps") is not None or (r.get("nfs"), r.get("size")) not in best:
                best[(r.get("nfs"), r.get("size"))] = (p, d, r)
    return [best[k] for k in sorted(best, key=lambda k: (k[0] or 0, k[1] or 0))]


def _dens_pct(r: dict, trial: str, p: str, what: str = "median"):
    return ((r.get(trial) or {}).get(p) or {}).get(what)


def _size_label(r: dict) -> str:
    fb = r.get("frame_bytes")
    return f"{r['size']} B" + (f" ({fb} B frames)" if fb and fb != r["size"] else "")


def plot_density(data: dict, path: Path, rows: list[dict] | None = None) -> bool:
    """Scenario 5: Mpps vs N, p99 vs N (latency trial; at the target rate for 700 B) and total
    memory vs N, a line per frame size, log N axis, the issue's target marked."""
    res = rows if rows is not None else [r for r in rows_of(data["results"], "density")]
    res = [r for r in res if r.get("median_pps") is not None]
    if not res:
        return False
    plt = _pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    sizes = sorted({r["size"] for r in res})
    T = DENSITY_TARGET
    for i, size in enumerate(sizes):
        rs = sorted((r for r in res if r["size"] == size), key=lambda r: r["nfs"])
        xs = [r["nfs"] for r in rs]
        med = [r["median_pps"] / 1e6 for r in rs]
        lo = [m - r["min_pps"] / 1e6 for m, r in zip(med, rs)]
        hi = [r["max_pps"] / 1e6 - m for m, r in zip(med, rs)]
        lab = _size_label(rs[0])
        axes[0].errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, color=f"C{i}", label=f"{lab}: throughput")
        lat = [(r["nfs"], _dens_pct(r, "latency", "p99"), _dens_pct(r, "latency", "p99", "min"),
                _dens_pct(r, "latency", "p99", "max")) for r in rs if _dens_pct(r, "latency", "p99")]
        if lat:
            m = [v / 1e6 for _, v, _, _ in lat]
            axes[1].errorbar([x for x, *_ in lat], m, yerr=[[a - b / 1e6 for a, (_, _, b, _) in zip(m, lat)],
                                                            [c / 1e6 - a for a, (_, _, _, c) in zip(m, lat)]],
                             marker="o", capsize=3, color=f"C{i}",
                             label=f"{lab}: p99 at {data.get('config', {}).get('lat_load', 0.5):.0%} of throughput")
        tg = [(r["nfs"], _dens_pct(r, "target", "p99")) for r in rs if _dens_pct(r, "target", "p99")]
        if tg:
            axes[1].plot([x for x, _ in tg], [v / 1e6 for _, v in tg], marker="s", linestyle="--", color=f"C{i}",
                         label=f"{lab}: p99 at {T['pps'] / 1e6:g} Mpps offered")
            axes[0].plot([x for x, _ in tg], [(r.get("target") or {}).get("delivered_pps", 0) / 1e6 for r in rs
                                              if _dens_pct(r, "target", "p99")],
                         marker="s", linestyle="--", color=f"C{i}", label=f"{lab}: delivered at {T['pps'] / 1e6:g} Mpps offered")
        mem = [(r["nfs"], r.get("median_memory_kib")) for r in rs if r.get("median_memory_kib")]
        if mem and i == 0:
            axes[2].plot([x for x, _ in mem], [v / 1024 for _, v in mem], marker="o", color="C2", label="total memory")
            nfp = [(r["nfs"], (r.get("memory") or {}).get("nfs_private_kib")) for r in rs
                   if (r.get("memory") or {}).get("nfs_private_kib") is not None]
            axes[2].plot([x for x, _ in nfp], [v / 1024 for _, v in nfp], marker="^", color="C4",
                         label="of which the NFs' private memory")
    axes[0].axhline(T["pps"] / 1e6, color="C3", linestyle=":", linewidth=1)
    axes[0].plot([T["nfs"]], [T["pps"] / 1e6], marker="*", markersize=12, color="C3", linestyle="none",
                 label=f"target: ≥ {T['pps'] / 1e6:g} Mpps at {T['nfs']} NFs, {T['size']} B")
    axes[1].axhline(T["p99_ns"] / 1e6, color="C3", linestyle=":", linewidth=1)
    axes[1].plot([T["nfs"]], [T["p99_ns"] / 1e6], marker="*", markersize=12, color="C3", linestyle="none",
                 label=f"target: p99 ≤ {T['p99_ns'] / 1e6:g} ms at {T['nfs']} NFs")
    axes[0].set_ylabel("Mpps reaching the sink (median; bars min–max)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("p99 latency, ms (median; bars min–max)")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("MiB (median of rounds)")
    axes[2].set_ylim(bottom=0)
    ns = sorted({r["nfs"] for r in res})
    from matplotlib.ticker import NullFormatter, NullLocator
    for ax, t in zip(axes, ("aggregate throughput", "latency p99", "memory")):
        ax.set_xscale("log")
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns], fontsize=8)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("NFs (N)")
        ax.set_title(t, fontsize=9)
        ax.grid(alpha=0.35, which="both")
    fig.suptitle(_title(data, "NF count sweep: 2 of N NFs per packet, round robin"), fontsize=10)
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    _finish(fig, path, handles, labels, ncol=3)
    return True


def density_method(d: dict) -> list[str]:
    cfg = d.get("config", {})
    fb = cfg.get("frame_bytes") or {}
    small = [(s, fb.get(str(s))) for s in cfg.get("sizes", []) if fb.get(str(s), s) != s]
    share = cfg.get("tester_share", 0)
    groups = (f" CPU cgroups keep the tester from being what is measured: the N NFs share one group, gen has "
              f"{share:g}× their weight in the throughput trial and {cfg.get('gen_paced_share', 0):g}× in the paced "
              "trials (a paced gen still takes every supply buffer and drops the surplus); shares are work-conserving. "
              "Without them gen was one task among N runnable NFs and got 1–2 % of core 0 at N = 2000."
              if share else " No CPU cgroups (`--tester-share 0`).")
    if cfg.get("sink_rt"):
        groups += (" The sink runs SCHED_FIFO: it sleeps when its ring is empty and runs as soon as it is kicked "
                   "(as a normal task it waited out other tasks' turns and its ring overflowed).")
    return [
        "**Method** (`bench/density.py`). Per round and N, a fresh `sluiced` and N fresh `sluice-nf-fwd` "
        "processes. A `net_null` port supplies buffers into chain `[gen, A, B, sink]`: `sluice-nf-gen` turns them "
        "into stamped test packets, services A and B are the N NFs (⌈N/2⌉ and ⌊N/2⌋ replicas) with the "
        "`round_robin` replica policy, so consecutive packets go to different NFs at both hops and every packet "
        "crosses exactly 2 of the N NFs (Cerrato et al.'s method); `sluice-nf-sink` measures and drops them. "
        "N = 1 is chain `[gen, A, A, sink]` with one replica: the one NF handles every packet twice. "
        f"sluiced's worker polls core 1 alone; every NF, gen, sink, sluiced's control thread and the script share "
        f"core {cfg.get('nf_core', 0)}. A/B NFs: `--wakeup {cfg.get('nf_wakeup', '?')} --batch {cfg.get('nf_batch', '?')} "
        f"--timeout-us {cfg.get('nf_timeout_us', '?')}` (they sleep until sluiced kicks them: that many packets "
        "waiting, or the oldest waited that long); gen and sink block too."
        + groups
        + f" `ring_size` {cfg.get('ring_size', '?')}, `pool_mbufs` {cfg.get('pool_mbufs', 0):,}."
        + "".join(f" Size {s} B is sent as {f} B frames, the smallest that holds gen's 24-byte stamp (without it "
                  "neither latency nor loss is measured)." for s, f in small),
        "",
        f"- **Mpps**: gen unlimited (every supply buffer becomes a packet: far more than the fabric carries); "
        f"packets reaching the sink per second over {cfg.get('windows', '?')} × {cfg.get('duration_s', '?')} s "
        f"windows after {cfg.get('warmup_s', '?')} s; a round's figure is its median window; median of "
        f"{cfg.get('runs', '?')} round(s), min–max. **Lost in fabric**: of the packets gen emitted in those windows, "
        "the share that did not reach the sink (ring full at A, B or the sink, `nf_gone`, `invalid_desc`); the "
        "supply's surplus dropped at gen's own ring is no loss. Under overload some loss is expected.",
        f"- **Latency** p50/p99: a separate trial paced at {cfg.get('lat_load', 0.5):.0%} of the throughput that "
        f"round measured for that N and size ({cfg.get('lat_warmup_s', '?')} s warm-up under another generator id, "
        f"then {cfg.get('lat_duration_s', '?')} s of counted packets; fresh gen and sink), from gen's TSC stamp to "
        "the sink's batch; median of rounds; `lost` counts the counted packets that never arrived. **At 1.4 Mpps** "
        "(700 B): the same trial at the target's offered rate, for every N, so the table shows where it holds.",
        "- **sluiced CPU**: all sluiced threads over the throughput windows, % of one core. The worker polls core 1 "
        "by design (~100 % whatever the load); the control thread's share (core 0) is in brackets.",
        "- **Memory**: sluiced VmRSS (heap, DPDK, both ring memfds of every NF; the packet region when on 4 KiB "
        "pages) + sluiced HugetlbPages (the packet region and DPDK's memory on 2 MiB pages) + the sum over the N "
        "NFs of Private_Clean + Private_Dirty (`/proc/PID/smaps_rollup`: what only that NF maps; the region and "
        "rings it shares are counted once, in sluiced). gen and sink are left out; page tables are in the JSON.",
        f"- **Start-up**: from the first NF spawned to sluiced listing all N (all started together, at most "
        f"{cfg.get('spawn_window', '?')} not yet attached at a time: libsluice gives up an attach after 5 s).",
        "- **What bounds it** (second table, from `/proc/PID/schedstat`, exact run times): how often the NFs ran, "
        "the CPU each run took, packets per run, how many NFs waited runnable on average (their run queue), and "
        "sluiced's kicks (one eventfd write each) and doorbells per second.",
    ]


def _mech(r: dict, k: str):
    return (r.get("mechanism") or {}).get(k)


def density_section(loaded: list[tuple[Path, dict]], results_dir: Path, out_dir: Path, draw: bool = True) -> list[str]:
    """Scenario 5 (issue 6, bench/density.py): NF count sweep."""
    L = ["## Scenario 5: NF count sweep", ""]
    picked = density_rows(loaded)
    if not picked:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/density.py`.", ""]
    files = []
    for p, d, _ in picked:
        if p not in [f[0] for f in files]:
            files.append((p, d))
    p, d = max(files, key=lambda f: f[0].name)
    if len(files) == 1:
        L += [_headline_line(p, d, out_dir), ""]
    else:
        L += ["Rows from " + and_list(f"[`{f.name}`]({_link(f, out_dir)})" for f, _ in files)
              + " (per N and size the newest full run that measured it; the method below is the newest's).", ""]
        keys = ("nf_wakeup", "nf_batch", "nf_timeout_us", "ring_size", "pool_mbufs", "runs", "lat_load",
                "tester_share", "gen_paced_share")
        diff = [k for k in keys if len({json.dumps(fd.get("config", {}).get(k)) for _, fd in files}) > 1]
        if diff:
            L += ["Note: these runs differ in " + ", ".join(f"`{k}`" for k in diff) + "; see each file's `config`.", ""]
    m = d.get("machine", {})
    L += [f"Machine: {m.get('cpu_model', '?')}, {m.get('cpus_online', '?')} vCPUs, {m.get('mem_gib', '?')} GiB, "
          f"Linux {m.get('kernel', '?')}, DPDK {m.get('dpdk_version', '?')}, "
          f"{m.get('hugepages_2m_total', 0)} × 2 MiB huge pages"
          + (f"; build {d['config']['git_head'][:12]}" if d.get("config", {}).get("git_head") else "") + ".", ""]
    L += density_method(d) + [""]
    rows = [r for _, _, r in picked]
    T = DENSITY_TARGET
    L += ["| N | size | Mpps (min–max) | lost in fabric | latency trial: Mpps | p50 | p99 | "
          f"at {T['pps'] / 1e6:g} Mpps: delivered | p50 | p99 | sluiced CPU (control) | memory |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("median_pps") is None:
            L.append(f"| {r['nfs']} | {_size_label(r)} | failed | | | | | | | | | |")
            continue
        lat, tg = r.get("latency") or {}, r.get("target") or {}
        lost = r.get("median_lost_share")
        lat_lost, tg_lost = sum(lat.get("lost") or []), sum(tg.get("lost") or [])
        ctl = _mech(r, "control_cpu")
        L.append(
            f"| {r['nfs']} | {_size_label(r)} | **{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–"
            f"{fmt_rate(r['max_pps'])}) | {'–' if lost is None else f'{lost:.1%}'} | "
            + (f"{fmt_rate(lat.get('delivered_pps'))}" + (f" (lost {lat_lost:,})" if lat_lost else "") + " | "
               f"{_ms(_dens_pct(r, 'latency', 'p50'))} | **{_ms(_dens_pct(r, 'latency', 'p99'))}** | " if lat
               else "– | – | – | ")
            + (f"{fmt_rate(tg.get('delivered_pps'))}" + (f" (lost {tg_lost:,})" if tg_lost else "") + " | "
               f"{_ms(_dens_pct(r, 'target', 'p50'))} | **{_ms(_dens_pct(r, 'target', 'p99'))}** | " if tg
               else "– | – | – | ")
            + f"{r.get('median_sluiced_cpu', 0):.0%}" + (f" ({ctl:.1%})" if ctl is not None else "") + " | "
            + (f"{r['median_memory_kib'] / 1024:,.0f} MiB" if r.get("median_memory_kib") else "–") + " |")
    L += ["", "<sub>Mpps and latency: median of rounds; latency trial Mpps is what reached the sink "
          "(offered: the given share of that round's throughput). lost: counted packets that never arrived, "
          "all rounds together.</sub>", ""]
    L += ["**Memory and start-up** per N (one session measures every size; median of rounds):", "",
          "| N | total memory | sluiced (RSS + huge pages) | packet region | NFs' private memory (per NF) | "
          "all N attached after | NFs per second |", "|---:|---:|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in rows:
        if r["nfs"] in seen or not r.get("memory"):
            continue
        seen.add(r["nfs"])
        m = r["memory"]
        att = r.get("median_attach_s")
        sl = m.get("sluiced_vmrss_kib", 0) + m.get("sluiced_hugetlb_kib", 0)
        L.append(f"| {r['nfs']} | **{r.get('median_memory_kib', 0) / 1024:,.0f} MiB** | {sl / 1024:,.0f} MiB | "
                 f"{(m.get('region_bytes') or 0) / 2**20:,.0f} MiB | {m.get('nfs_private_kib', 0) / 1024:,.1f} MiB "
                 f"({m.get('nf_private_kib_median') or 0:,.0f} KiB) | "
                 + (f"{att:.2f} s | {r['nfs'] / att:,.0f}" if att else "– | –") + " |")
    L += ["", "**What bounds it**: the throughput trial (gen unlimited), medians of rounds:", "",
          "| N | size | NF runs per s | CPU per NF run | packets per NF run | NFs waiting runnable | "
          "core 0: NFs / gen / sink | sluiced kicks per s | doorbells per s |",
          "|---:|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        m = r.get("mechanism") or {}
        if r.get("median_pps") is None or not m:
            continue
        L.append(f"| {r['nfs']} | {_size_label(r)} | {m.get('nf_runs_per_s', 0):,.0f} | "
                 f"{m.get('nf_us_per_run', 0):.1f} µs | {m.get('nf_pkts_per_run', 0):.1f} | "
                 f"{m.get('nf_runnable_waiting', 0):,.0f} | {m.get('nfs_cpu', 0):.0%} / {m.get('gen_cpu', 0):.0%} / "
                 f"{m.get('sink_cpu', 0):.0%} | {m.get('nf_kicks_per_s', 0):,.0f} | {m.get('doorbells_per_s', 0):,.0f} |")
    L.append("")
    png = results_dir / f"{stamp_of(p)}.png" if len(files) == 1 else results_dir / "density-merged.png"
    if len(files) == 1:
        if not png.exists() and draw:
            _try_plot(plot_density, d, png)
    elif draw:
        _try_plot(lambda dd, pp: plot_density(dd, pp, rows), d, png)
    if png.exists():
        L += [f"![NF count sweep]({_link(png, out_dir)})", ""]
    L += ["### Target", ""] + density_verdict(rows) + [""]
    errs = [(f, e) for f, fd in files for e in fd.get("errors", [])]
    if errs:
        L += [f"{len(errs)} session(s) failed: " + "; ".join(
            f"N={e.get('nfs')} round {e.get('round')}: {first_line(e.get('error', ''))}" for _, e in errs[:5]), ""]
    return L


def _try_plot(fn, d, png) -> None:
    try:
        fn(d, png)
    except Exception as e:  # a plot must never cost the report
        print(f"gen_report: could not draw {png.name}: {e!r}", file=sys.stderr)


def _ms(ns) -> str:
    if ns is None:
        return "–"
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"


def density_verdict(rows: list[dict]) -> list[str]:
    """Whether the issue's target holds, and what the measured figures say bounds it."""
    T = DENSITY_TARGET
    head = (f"Issue 6: at {T['nfs']} NFs, at least {T['pps'] / 1e6:g} Mpps aggregate at {T['size']} B with p99 "
            f"latency at most {T['p99_ns'] / 1e6:g} ms, both at once (judged on the trial offering "
            f"{T['pps'] / 1e6:g} Mpps: at least 99 % of it delivered and p99 ≤ {T['p99_ns'] / 1e6:g} ms, medians of rounds).")
    r = next((x for x in rows if x["nfs"] == T["nfs"] and x["size"] == T["size"] and x.get("median_pps")), None)
    if r is None:
        return [head, "", f"Not measured: no run has N = {T['nfs']} at {T['size']} B."]
    tg = r.get("target") or {}
    dl, p99 = tg.get("delivered_pps"), _dens_pct(r, "target", "p99")
    met = dl is not None and p99 is not None and dl >= 0.99 * T["pps"] and p99 <= T["p99_ns"]
    out = [head, "",
           f"**{'Met' if met else 'Not met'}.** Offered {T['pps'] / 1e6:g} Mpps, {fmt_rate(dl)} Mpps reached the sink "
           f"with p99 {_ms(p99)}; with gen unlimited {fmt_rate(r['median_pps'])} Mpps (min {fmt_rate(r['min_pps'])}, "
           f"max {fmt_rate(r['max_pps'])}); at {fmt_rate((r.get('latency') or {}).get('delivered_pps'))} Mpps p99 was "
           f"{_ms(_dens_pct(r, 'latency', 'p99'))}."]
    if met:
        return out
    m = r.get("mechanism") or {}
    runs, us, ppr, rq = (m.get(k) for k in ("nf_runs_per_s", "nf_us_per_run", "nf_pkts_per_run", "nf_runnable_waiting"))
    if not (runs and us and ppr):
        return out
    cycle_ms = T["nfs"] * us / 1e3
    small = [x for x in rows if x["size"] == T["size"] and x["nfs"] >= 10
             and (x.get("mechanism") or {}).get("nf_us_per_run")]
    lo = min(small, key=lambda x: x["nfs"]) if small else None
    cheap = min((x["mechanism"]["nf_us_per_run"] for x in rows if (x.get("mechanism") or {}).get("nf_us_per_run")),
                default=None)
    # the wake rate a 5 ms p99 needs: every NF must run at least once per half the budget (2 hops)
    need = T["nfs"] / (T["p99_ns"] / 2e9)
    out += ["", "What bounds it, from the measured figures (throughput trial):", "",
            f"- **Core 0 runs out of NF wake-ups.** The {T['nfs']} NFs ran {runs:,.0f} times a second at {us:.1f} µs of "
            f"CPU per run ({m.get('nfs_cpu', 0):.0%} of core 0; gen {m.get('gen_cpu', 0):.0%}, sink "
            f"{m.get('sink_cpu', 0):.0%}), handling {ppr:.1f} packets per run; on average {rq:,.0f} NFs sat runnable "
            f"waiting for the core. Round robin gives each NF 1/{T['nfs'] // 2} of a hop's packets, so a packet waits "
            f"for its NF's turn: with every NF runnable a turn comes round every ≈ {T['nfs']} × {us:.1f} µs ≈ "
            f"{cycle_ms:.0f} ms, at each of the 2 hops."
            + (f" (At N = {lo['nfs']} a run cost {lo['mechanism']['nf_us_per_run']:.1f} µs and handled "
               f"{lo['mechanism'].get('nf_pkts_per_run', 0):.0f} packets.)" if lo and lo is not r else ""),
            f"- **The target needs ~{need / 1e3:,.0f}k NF runs per second.** For p99 ≤ {T['p99_ns'] / 1e6:g} ms over 2 hops "
            f"each of the {T['nfs']} NFs must run at least every ~{T['p99_ns'] / 2e6:g} ms, whatever the packet rate, i.e. "
            f"≥ {need:,.0f} runs/s; at {us:.1f} µs a run that is {need * us / 1e6:.1f} cores, on one shared core "
            f"that also runs gen and sink. A run would have to cost ≤ {1e6 / need * 0.7:.2f} µs (with 70 % of core 0)"
            + (f", about 1/{cheap / (1e6 / need * 0.7):.0f} of the cheapest run measured here ({cheap:.1f} µs, "
               "with dozens of packets)" if cheap else "")
            + ", or the NFs would need several cores.",
            f"- **sluiced's worker** sent {m.get('nf_kicks_per_s', 0):,.0f} kicks/s (one eventfd write each) for "
            f"{runs:,.0f} NF runs/s and saw {m.get('doorbells_per_s', 0):,.0f} doorbells/s"
            + (": at most one kick per run, so the worker's system calls are not what limits it (a kicked NF that "
               "has not run yet is neither kicked again nor parked)."
               if m.get('nf_kicks_per_s', 0) <= 1.2 * runs else
               ": more kicks than runs, i.e. NFs kicked again before they ran -- redundant system calls on core 1.")]
    return out


def _headline_line(p: Path, d: dict, out_dir: Path) -> str:
    return (f"Headline run: [`{p.name}`]({_link(p, out_dir)}), started {d.get('started', '?')}"
            + (" (a `--quick` run: no full run has this scenario yet; one short window per figure, indicative only)"
               if is_quick(d) else "") + ".")


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


def render(loaded: list[tuple[Path, dict]], results_dir: Path, out_dir: Path = REPO, draw: bool = True) -> str:
    L = ["# Sluice benchmarks", "",
         "<!-- GENERATED FILE: do not edit. -->",
         "> **Generated from `bench/results/*.json` by `bench/gen_report.py`; never hand-edited.** "
         "Re-run `bench/run.py` (measures and regenerates) or `bench/gen_report.py` (regenerates only). "
         "The hand-written commentary lives in `bench/notes.md`.", ""]
    if not loaded:
        L += ["No results yet: run `sudo .venv/bin/python bench/run.py`.", ""]
        return "\n".join(L)
    heads = {s: headline(loaded, s) for s in SCENARIOS}
    present = [h for h in heads.values() if h]
    newest = max(present, key=lambda h: h[0].name) if present else loaded[-1]
    L += ["## Machine", "", f"From [`{newest[0].name}`]({_link(newest[0], out_dir)}), the newest headline run:", ""]
    L += machine_rows(newest[1].get("machine", {})) + [""]
    others = {}
    for s, h in heads.items():
        if h and _machine_key(h[1].get("machine", {})) != _machine_key(newest[1].get("machine", {})):
            others.setdefault(h[0].name, (h[1].get("machine", {}), []))[1].append(s)
    for name, (m, scens) in others.items():
        L += [f"Note: the {', '.join(scens)} headline (`{name}`) ran on a different machine: {m.get('cpu_model', '?')}, "
              f"{m.get('cpus_online', '?')} cores, {m.get('mem_gib', '?')} GiB, Linux {m.get('kernel', '?')}, "
              f"DPDK {m.get('dpdk_version', '?')}.", ""]

    # scenario 1
    L += ["## Scenario 1: chain length", ""]
    h = heads[CHAIN]
    if h:
        p, d = h
        L += [_headline_line(p, d, out_dir), ""] + chain_method(d) + [""]
        L += chain_table(rows_of(d["results"], CHAIN)) + [""]
        L += _images(p, d, CHAIN, results_dir, out_dir, draw)
        L += ["### Reading", "", "Computed from the headline run's numbers:", ""] + reading(d) + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py chain`.", ""]

    # scenario 2
    L += ["## Scenario 2: zero-loss throughput (RFC 2544 §26.1)", ""]
    h = heads[ZEROLOSS]
    if h:
        p, d = h
        table, _ = zeroloss_table(rows_of(d["results"], ZEROLOSS))
        L += [_headline_line(p, d, out_dir), ""] + zeroloss_method(d) + [""] + table + [""]
        L += _images(p, d, ZEROLOSS, results_dir, out_dir, draw)
        rd = zeroloss_reading(d)
        if rd:
            L += ["### Reading", "", "Computed from the headline run's numbers:", ""] + rd + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py zeroloss`.", ""]

    # scenario 3
    L += ["## Scenario 3: latency at 10/50/90 % of the zero-loss rate", ""]
    h = heads[LATENCY]
    if h:
        p, d = h
        L += [_headline_line(p, d, out_dir), ""] + latency_method(d) + [""]
        L += latency_tables(rows_of(d["results"], LATENCY))
        L += _images(p, d, LATENCY, results_dir, out_dir, draw)
        rd = latency_reading(d)
        if rd:
            L += ["### Reading", "", "Computed from the headline run's numbers (p99, median of rounds):", ""] + rd + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py latency`.", ""]

    L += ["## Scenario 4: realistic mix", "",
          "Not measured yet: needs the firewall, NAT and router NFs (issue 5).", "",
          ]
    L += density_section(loaded, results_dir, out_dir, draw)
    L += steering_section(loaded, out_dir)
    L += nfs_section(loaded, results_dir, out_dir, draw)

    if NOTES.exists():
        notes = NOTES.read_text().strip()
        if notes:
            L += ["## Notes (hand-written, `bench/notes.md`)", "", notes, ""]
    if NOTES_OVS.exists():
        ovs = NOTES_OVS.read_text().strip()
        if ovs:
            # demote the file's own headings below this section's
            ovs = "\n".join(("##" + ln if ln.startswith("#") else ln) for ln in ovs.splitlines())
            L += ["## Open vSwitch with DPDK (hand-written, `bench/notes_ovs.md`)", "", ovs, ""]
    L += ["## All runs", "", "Newest first; `quick` runs (1 short window) are smoke tests, not figures to quote. "
          "Scenario 1 columns are Mpps; ≥ marks a generator-bound zero-loss figure.", ""]
    L += history_rows(loaded, out_dir) + [""]
    return "\n".join(L)


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
