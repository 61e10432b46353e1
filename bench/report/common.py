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
IO = "testpmd-io"  # scenario 1's reference at N = 1: one testpmd lcore, io net_null -> net_null, no NF
SYSTEM_NAMES = {SLUICE: "Sluice", PEER: "testpmd + memif", LINUX: "Linux veth + netns",
                OVS: "OVS-DPDK + testpmd (vhost-user)", IO: "one-core ceiling (testpmd io, net_null → net_null)"}
# the systems Sluice's figures are divided by, in column order, with the short name used in ratio
# headers: first the one-core ceiling (only 1-NF rows have it), then the peers
PEERS = ((IO, "ceiling"), (PEER, "memif"), (LINUX, "Linux"), (OVS, "OVS"))
# Sluice's modes: an NF wakeup mode, then suffixes in this order: "+pipes" (sluiced.pipes on, NF-to-NF
# pipes, issue 16), "+group" (the chain's NFs as members of one sluice-group process, docs/groups.md),
# "+fifo" (sluiced.nf_sched fifo; trial modes): "adaptive+pipes+group"
PIPES = "+pipes"
GROUP = "+group"
FIFO = "+fifo"
WAKEUPS = ("poll", "adaptive", "block")
_FLAG_WORDS = {"pipes": "pipes", "group": "group", "fifo": "fifo"}


def mode_parts(mode) -> tuple:
    """A Sluice mode -> (wakeup, pipes, group, fifo): "adaptive+pipes+group" -> ("adaptive", True, True, False)."""
    if not isinstance(mode, str):
        return mode, False, False, False
    w, *flags = mode.split("+")
    return w, "pipes" in flags, "group" in flags, "fifo" in flags


def has_pipes(mode) -> bool:
    """A Sluice mode with NF-to-NF pipes on ("poll+pipes", "poll+pipes+group")."""
    return mode_parts(mode)[1]


def has_group(mode) -> bool:
    """A Sluice mode whose NFs run as members of one sluice-group process ("adaptive+pipes+group")."""
    return mode_parts(mode)[2]


def without_pipes(mode):
    """The same Sluice mode without pipes ("poll+pipes+group" -> "poll+group")."""
    return mode.replace(PIPES, "", 1) if has_pipes(mode) else mode


def with_pipes(mode):
    """The same Sluice mode with pipes ("poll+group" -> "poll+pipes+group")."""
    if not isinstance(mode, str) or has_pipes(mode):
        return mode
    w, _, rest = mode.partition("+")
    return w + PIPES + ("+" + rest if rest else "")


def without_group(mode):
    """The same Sluice mode with its NFs as processes ("adaptive+pipes+group" -> "adaptive+pipes")."""
    return mode.replace(GROUP, "", 1) if has_group(mode) else mode


def wakeup_of(mode):
    """A Sluice mode without its pipes ("poll+pipes" -> "poll", "poll+pipes+group" -> "poll+group"):
    the mode a pipes row is set beside."""
    return without_pipes(mode)


def mode_label(mode) -> str:
    """A Sluice mode as the tables show it: "poll", "poll, pipes", "adaptive, pipes, group"."""
    if not isinstance(mode, str) or not mode:
        return "–"
    w, *flags = mode.split("+")
    return ", ".join([w, *(_FLAG_WORDS.get(f, f) for f in flags)])


def sluice_series_label(mode) -> str:
    """A Sluice mode as the plots' legends show it: "Sluice, adaptive NFs, pipes, group"."""
    if not isinstance(mode, str) or not mode:
        return "Sluice"
    w, *flags = mode.split("+")
    return ", ".join([f"Sluice, {w} NFs", *(_FLAG_WORDS.get(f, f) for f in flags)])


# every plotted series: (system, mode) -> label, in table and legend order: the ceiling, then per
# wakeup mode Sluice's processes, with pipes, as a group, as a group with pipes, then the peers
SERIES = (((IO, None), SYSTEM_NAMES[IO]),
          *(((SLUICE, m), sluice_series_label(m)) for w in WAKEUPS
            for m in (w, w + PIPES, w + GROUP, w + PIPES + GROUP)),
          ((PEER, None), "testpmd + memif"),
          ((LINUX, None), "Linux veth + netns (kernel forwarding)"), ((OVS, None), "OVS-DPDK + testpmd (vhost-user)"))
# fixed colours so a system keeps its colour: a mode with pipes has its wakeup mode's colour (drawn
# dashed in scenario 1); group modes have colours of their own, as the bar plots have no line styles
COLOURS = {(SLUICE, "poll"): "C0", (SLUICE, "adaptive"): "C1", (SLUICE, "block"): "C4", (PEER, None): "C2",
           (LINUX, None): "C3", (OVS, None): "C5", (IO, None): "black",
           (SLUICE, "poll" + GROUP): "C9", (SLUICE, "adaptive" + GROUP): "C6", (SLUICE, "block" + GROUP): "C8"}
COLOURS |= {(SLUICE, with_pipes(m)): COLOURS[(SLUICE, m)] for w in WAKEUPS for m in (w, w + GROUP)}
ORDER = {k: i for i, (k, _) in enumerate(SERIES)}


def colour_of(system, mode=None):
    """A series' colour; a Sluice mode with +fifo (or another unknown suffix) has its base mode's."""
    c = COLOURS.get((system, mode))
    if c is None and system == SLUICE and isinstance(mode, str):
        w, pipes, group, _ = mode_parts(mode)
        c = COLOURS.get((SLUICE, w + (PIPES if pipes else "") + (GROUP if group else "")))
    return c


def order_of(system, mode=None) -> float:
    """A series' place in tables and legends; a Sluice mode with +fifo right after its base mode."""
    if (system, mode) in ORDER:
        return ORDER[(system, mode)]
    if system == SLUICE and isinstance(mode, str):
        w, pipes, group, _ = mode_parts(mode)
        base = (SLUICE, w + (PIPES if pipes else "") + (GROUP if group else ""))
        if base in ORDER:
            return ORDER[base] + 0.5
    return 99


def series_style(system, mode=None) -> dict:
    """Line style and marker of a scenario 1 series: pipes dashed, group dash-dotted / dotted."""
    _, pipes, group, _ = mode_parts(mode) if system == SLUICE else (None, False, False, False)
    return {"linestyle": ("-." if pipes else ":") if group else ("--" if pipes else "-"),
            "marker": {(False, False): "o", (True, False): "s", (False, True): "^", (True, True): "D"}[(pipes, group)]}

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
    """"Sluice, adaptive, pipes, group"; a peer's name."""
    name = SYSTEM_NAMES.get(system, system)
    if not (with_mode and mode):
        return name
    return f"{name}, {mode_label(mode) if system == SLUICE else mode}"


def series_in(rows: list[dict]) -> list[tuple[tuple, str]]:
    """The (system, mode) series present in rows, in the fixed order (a Sluice mode with +fifo after
    its base mode), then any unknown ones."""
    present = {(r.get("system"), r.get("mode")) for r in rows}
    known = [(k, lab) for k, lab in SERIES if k in present]
    known += [((s, m), sluice_series_label(m)) for s, m in present - set(ORDER) if order_of(s, m) < 99]
    known.sort(key=lambda t: order_of(*t[0]))
    return known + [((s, m), system_label(s, m)) for s, m in sorted(present - set(ORDER), key=str)
                    if order_of(s, m) >= 99]


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
