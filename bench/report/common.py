"""Shared by every section: paths, the systems compared (names, plot order and colours), loading
results files and looking rows up, number and table formatting, the headline run of a scenario, and
the matplotlib helpers every plot uses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent  # bench/
REPO = BENCH.parent
RESULTS = BENCH / "results"
NOTES = BENCH / "notes.md"
NOTES_OVS = BENCH / "notes_ovs.md"
OUT = REPO / "BENCHMARKS.md"

SLUICE = "sluice"
PEER = "testpmd-memif"
LINUX = "linux-veth"
OVS = "ovs-dpdk"
SYSTEM_NAMES = {SLUICE: "Sluice", PEER: "testpmd + memif", LINUX: "Linux veth + netns",
                OVS: "OVS-DPDK + testpmd (vhost-user)"}
# the peers Sluice is compared with, in column order, with the short name used in ratio headers
PEERS = ((PEER, "memif"), (LINUX, "Linux"), (OVS, "OVS"))
# Sluice's scenario 1 mode "poll+pipes": poll NFs with sluiced.pipes on (NF-to-NF pipes, issue 16)
PIPES = "+pipes"
WAKEUPS = ("poll", "adaptive", "block")
# every plotted series: (system, mode) -> label; fixed colours so a system keeps its colour (a mode
# with pipes has its wakeup mode's colour, drawn dashed)
SERIES = (((SLUICE, "poll"), "Sluice, poll NFs"), ((SLUICE, "poll" + PIPES), "Sluice, poll NFs, pipes"),
          ((SLUICE, "adaptive"), "Sluice, adaptive NFs"), ((SLUICE, "adaptive" + PIPES), "Sluice, adaptive NFs, pipes"),
          ((SLUICE, "block"), "Sluice, block NFs"), ((SLUICE, "block" + PIPES), "Sluice, block NFs, pipes"),
          ((PEER, None), "testpmd + memif"),
          ((LINUX, None), "Linux veth + netns (kernel forwarding)"), ((OVS, None), "OVS-DPDK + testpmd (vhost-user)"))
COLOURS = {(SLUICE, "poll"): "C0", (SLUICE, "adaptive"): "C1", (SLUICE, "block"): "C4", (PEER, None): "C2",
           (LINUX, None): "C3", (OVS, None): "C5"}
COLOURS |= {(SLUICE, w + PIPES): COLOURS[(SLUICE, w)] for w in WAKEUPS}
ORDER = {k: i for i, (k, _) in enumerate(SERIES)}


def has_pipes(mode) -> bool:
    """A Sluice mode with NF-to-NF pipes on ("poll+pipes")."""
    return isinstance(mode, str) and mode.endswith(PIPES)


def wakeup_of(mode):
    """The NF wakeup mode of a Sluice mode ("poll+pipes" -> "poll")."""
    return mode[:-len(PIPES)] if has_pipes(mode) else mode


def mode_label(mode) -> str:
    """A Sluice mode as the tables show it: "poll", "poll, pipes"."""
    return f"{wakeup_of(mode)}, pipes" if has_pipes(mode) else (mode or "–")

CHAIN, ZEROLOSS, LATENCY = "chain", "zeroloss", "latency"
SCENARIOS = (CHAIN, ZEROLOSS, LATENCY)
# the field that holds a row's figure (None: the measurement failed)
VALUE_KEY = {CHAIN: "median_mpps", ZEROLOSS: "median_pps", LATENCY: "median_ns"}


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
            # rows of a file that names its scenario once at the top (bench/guests.py) carry it too
            if data.get("scenario"):
                for r in data["results"]:
                    if isinstance(r, dict):
                        r.setdefault("scenario", data["scenario"])
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


def _link(p: Path, out_dir: Path) -> str:
    return os.path.relpath(p, out_dir)


def _headline_line(p: Path, d: dict, out_dir: Path) -> str:
    return (f"Headline run: [`{p.name}`]({_link(p, out_dir)}), started {d.get('started', '?')}"
            + (" (a `--quick` run: no full run has this scenario yet; one short window per figure, indicative only)"
               if is_quick(d) else "") + ".")


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


def _try_plot(fn, d, png) -> None:
    try:
        fn(d, png)
    except Exception as e:  # a plot must never cost the report
        print(f"gen_report: could not draw {png.name}: {e!r}", file=sys.stderr)
