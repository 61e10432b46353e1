"""Scenario 2, zero-loss throughput (RFC 2544 section 26.1): plot, table, method and reading, and
the trial settings scenario 3 shares."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import (PEERS, SLUICE, SYSTEM_NAMES, ZEROLOSS, _finish, _pyplot, _title, and_list, colour_of, find,
                     first_line, fmt, fmt_rate, has_group, mode_label, order_of, peers_in, rows_of, scenario_of,
                     series_in, system_label, without_group)


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
    fig, axes = plt.subplots(1, len(sizes), figsize=(max(8.0, 1.2 + 1.1 * len(series) * 2) * len(sizes), 5.0),
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
            colour = colour_of(system, mode)
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
                       key=lambda r: order_of(r["system"], r.get("mode")))
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
    sl_modes = sorted({r.get("mode") for r in res if r["system"] == SLUICE}, key=lambda m: order_of(SLUICE, m))
    for n, size in sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0])):
        # every Sluice mode of the run (e.g. adaptive, pipes and its group form), each against the peers
        for mode in sl_modes:
            s = find(res, SLUICE, n, size, mode, scenario=ZEROLOSS)
            if not s:
                continue
            parts = []
            for system, _ in PEERS:
                p = find(res, system, n, size, None, scenario=ZEROLOSS)
                if p and p["median_pps"]:
                    parts.append(f"{SYSTEM_NAMES[system]} {_zl_cell(p)} Mpps (Sluice / it {_zl_ratio(s, p)[0]})")
            if has_group(mode):
                a = find(res, SLUICE, n, size, without_group(mode), scenario=ZEROLOSS)
                if a and a["median_pps"]:
                    parts.append(f"Sluice {mode_label(without_group(mode))} {_zl_cell(a)} Mpps (group / processes "
                                 f"{_zl_ratio(s, a)[0]})")
            who = f"Sluice ({mode_label(mode)})" if len(sl_modes) > 1 else "Sluice"
            out.append(f"- {n} NF{'s' if n > 1 else ''}, {size} B: {who} {_zl_cell(s)} Mpps"
                       + (" vs " + ", ".join(parts) if parts else "") + ".")
    for system, mode in sorted({(r["system"], r.get("mode")) for r in res}, key=lambda k: order_of(*k)):
        for size in sorted({r["size"] for r in res}):
            pts = [(n, find(res, system, n, size, mode, scenario=ZEROLOSS))
                   for n in sorted({r["nfs"] for r in res if r["system"] == system and r.get("mode") == mode})]
            pts = [(n, r) for n, r in pts if r]
            if len(pts) > 1 and pts[0][1]["median_pps"]:
                a, b = pts[0], pts[-1]
                who = system_label(system, mode) if system == SLUICE and len(sl_modes) > 1 else SYSTEM_NAMES.get(system, system)
                out.append(f"- {who}: {b[0]} NFs keep "
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
