"""Scenario 3, latency at 10/50/90 % of the zero-loss rate: CDF and percentile plots, tables, method
and reading."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import (LATENCY, PEERS, SLUICE, SYSTEM_NAMES, _finish, _pyplot, _title, and_list, colour_of, find,
                     first_line, fmt_rate, fmt_us, has_group, loads_in, mode_label, order_of, peers_in, rows_of, series_in,
                     system_label)
from .zeroloss import _s, _trial_cfg

PCTS = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))


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
                ax.plot(xs, ys, label=label, color=colour_of(system, mode), linewidth=1.4,
                        linestyle="-." if has_group(mode) else "-")  # a group's curve stays visible over its processes
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
            colour = colour_of(system, mode)
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
        for r in sorted(grp, key=lambda r: (order_of(r["system"], r.get("mode")), r.get("load") or 0)):
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


def common_load_table(results: list[dict]) -> list[str]:
    """Rows "latency_common" (bench/run.py): every system at one absolute rate, the reference's (Linux's)
    zero-loss rate x its load in the same round -- the same load for all, where the percentage loads give
    each system its own."""
    res = [r for r in results if isinstance(r, dict) and r.get("scenario") == "latency_common"]
    if not res:
        return []
    ref = SYSTEM_NAMES.get(res[0].get("rate_of"), res[0].get("rate_of"))
    out = [f"**At one absolute rate for all**: {res[0].get('load', 0):.0%} of {ref}'s zero-loss rate in the same "
           "round (the offered rate per round varies with that rate; median of rounds).", "",
           "| system | NFs | offered Mpps | p50 µs | p99 µs | p99.9 µs | max µs | lost |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(res, key=lambda r: (r["nfs"], order_of(r["system"], r.get("mode")))):
        rates = [x for x in (r.get("runs_rate_pps") or []) if x is not None]
        rate = fmt_rate(statistics.median(rates)) if rates else "–"
        lost = sum(x for x in (r.get("runs_lost") or []) if x is not None)
        lead = f"| {system_label(r['system'], r.get('mode'))} | {r['nfs']} | {rate} |"
        if not r.get("median_ns"):
            out.append(f"{lead} failed | | | | {lost:,} |")
            continue
        out.append(f"{lead} " + " | ".join(_lat_cell(r, p) for p, _ in PCTS) + f" | {f'**{lost:,}**' if lost else 0} |")
    return out + [""]


def _floor_reading(data: dict, nfs: list[int]) -> list[str]:
    """What the run's process-switch cost alone puts under Sluice's latency: gen, the N NFs and the
    sink take turns on core 0, so a packet crosses N + 1 switches (bench/notes.md "The floor of a 3-NF
    chain on one core")."""
    m = data.get("machine", {})
    costs = [x["switch_ns"] for x in (m.get("switch_cost_start"), m.get("switch_cost_end")) if x]
    if not costs or not nfs:
        return []
    lo = min(costs)
    floors = ", ".join(f"{n} NF{'s' if n > 1 else ''}: {n + 1} switches, {(n + 1) * lo / 1000:.1f} µs" for n in nfs)
    return [f"- Floor under Sluice's figures: gen, the NFs and the sink take turns on core 0, so a packet "
            f"crosses one process switch per hop; at this run's cheapest measured switch ({lo / 1000:.2f} µs, "
            f"Machine above) that is {floors}, before any packet work. Linux forwards the whole chain in one "
            "softirq pass on core 1."]


def _stall_reading(data: dict) -> list[str]:
    """The tail's floor (bench/stalls.c, recorded at the run's start): what each CPU lost to a
    SCHED_FIFO thread that spun on it. A packet on a path through a CPU that arrives during a stall
    waits it out, so the share of time behind stalls longer than 100 µs is, at least, the share of
    evenly arriving packets later than 100 µs: p99.99 <= 100 µs needs it below 0.01 %."""
    st = data.get("machine", {}).get("cpu_stalls")
    if not st:
        return []
    cells = "; ".join(f"core {x['cpu']}: {x['stalls_over']['100']} stalls > 100 µs and {x['stalls_over']['1000']} "
                      f"> 1 ms in {x['seconds']:.0f} s, longest {x['max_us'] / 1000:.2f} ms, "
                      f"{x['late_share_100us']:.3%} of the time behind a stall > 100 µs" for x in st)
    late = [str(x["cpu"]) for x in st if x["late_share_100us"] > 1e-4]
    long_ = [str(x["cpu"]) for x in st if x["max_us"] > 1000]
    verdict = []
    if late:
        verdict.append(f"no path through core {' or '.join(late)} can have p99.99 ≤ 100 µs here (more than 0.01 % "
                       "of the time behind such stalls)")
    if long_:
        verdict.append(f"none through core {' or '.join(long_)} can keep every packet under 1 ms")
    return [f"- **The tail's floor** (`sluice-bench-stalls --policy fifo`, both cores at once, at the run's start: "
            f"interrupts and the hypervisor, which no scheduling inside this machine removes): {cells}."
            + (" So " + ", and ".join(verdict) + ", whatever the system." if verdict else "")]


def latency_reading(data: dict) -> list[str]:
    res = rows_of(data["results"], LATENCY)
    out = []
    sl_modes = sorted({r.get("mode") for r in res if r["system"] == SLUICE}, key=lambda m: order_of(SLUICE, m))
    for n, size in _lat_groups(res):
        for ld in loads_in(res):
            # every Sluice mode of the run (e.g. adaptive, pipes and its group form)
            sl = [s for m in sl_modes for s in [find(res, SLUICE, n, size, m, scenario=LATENCY, load=ld)] if s]
            if not sl:
                continue
            parts = [f"{SYSTEM_NAMES[system]} {fmt_us(p['median_ns'].get('p99'))}"
                     for system, _ in PEERS
                     for p in [find(res, system, n, size, None, scenario=LATENCY, load=ld)] if p]
            mine = (f"{fmt_us(sl[0]['median_ns'].get('p99'))}" if len(sl_modes) == 1 else
                    ", ".join(f"{fmt_us(s['median_ns'].get('p99'))} ({mode_label(s.get('mode'))})" for s in sl))
            out.append(f"- {n} NF{'s' if n > 1 else ''}, {ld:.0%} load: Sluice p99 {mine} µs"
                       + (" vs " + ", ".join(parts) + " µs" if parts else "") + ".")
    out += _floor_reading(data, sorted({n for n, _ in _lat_groups(res)}))
    out += _stall_reading(data)
    lossy = [r for r in res if sum(x for x in (r.get("runs_lost") or []) if x) > 0]
    if lossy:
        out.append("- Packets lost in latency trials (below the zero-loss rate, so the zero-loss rate was not "
                   "stable across trials): " + "; ".join(
                       f"{system_label(r['system'], r.get('mode'))} {r['nfs']} NF {r['load']:.0%}: "
                       f"{sum(x for x in r['runs_lost'] if x):,}" for r in lossy) + ".")
    elif res:
        out.append("- No packet was lost in any latency trial.")
    return out
