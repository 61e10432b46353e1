"""Scenario 1, chain length (`chain`; `fabric` in older files): Mpps of net_null -> N x fwd ->
net_null per system, N and frame size: plot, table, method and reading. Sluice rows of mode
MODE+pipes (newer files) ran with NF-to-NF pipes: pipes_table() sets them beside MODE; MODE+group
ran the NFs as members of one sluice-group process. Rows of system testpmd-io (N = 1 only) are the
one-core ceiling: one testpmd lcore forwarding net_null -> net_null with no NF, the limit the 1-NF
figures are read against (a line in the plot, a row and a ratio column in the table)."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import (CHAIN, IO, LINUX, ORDER, OVS, PEER, PEERS, PIPES, SLUICE, SYSTEM_NAMES, WAKEUPS, _finish, _pyplot,
                     _title, and_list, colour_of, find, first_line, fmt, has_group, has_pipes, mode_label, order_of,
                     peers_in, rows_of, scenario_of, series_in, series_style, system_label, with_pipes, without_group,
                     without_pipes, wakeup_of)

TARGET_RATIO = 2.0      # 1 NF, 64 B, poll: Sluice / peer
TARGET_SIZE_GAP = 0.10  # 1500 B packet rate within 10 % of 64 B
TARGET_PIPES = 1.5      # issue 16: chain of 3, 64 B, with pipes / without
TARGET_PIPES_NFS = 3
# the memif peer's 1-NF 64 B figure swings with the host's phase (bench/README.md "The host's speed"):
# the 2x target above held in one phase and not in the other. Cited in the reading, as measured.
MEMIF_PHASES = ("the memif peer swings with the host's phase (9.3 Mpps in headline 20261127T074326Z, 37.9 Mpps "
                "in a run of 2026-11-28 in which Sluice's 1 NF made 38.0: 1.00×), so the ratio to memif does not "
                "hold in every phase; the one-core ceiling row (testpmd io, net_null → net_null) is the limit to read "
                "1-NF figures against")


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
    # at least 8 in wide: one panel (a single size) must still hold the title and a 3-column legend
    fig, axes = plt.subplots(1, len(sizes), figsize=(max(8.0, 5.8 * len(sizes)), 4.9), squeeze=False, sharey=True)
    for ax, size in zip(axes[0], sizes):
        ns = sorted({r["nfs"] for r in res if r["size"] == size and r["system"] != IO})
        if not ns:
            ns = [1]
        for (system, mode), label in series:
            if system == IO:  # the one-core ceiling: a line across the panel (min-max shaded), not a point at N = 1
                c = find(res, IO, 1, size, None)
                if c and c["median_mpps"] > 0:
                    ax.axhspan(c.get("min_mpps") or c["median_mpps"], c.get("max_mpps") or c["median_mpps"],
                               color="black", alpha=0.08, linewidth=0)
                    ax.axhline(c["median_mpps"], color=colour_of(IO), linestyle=(0, (4, 2, 1, 2)), linewidth=1.2,
                               label=label)
                    ax.annotate(f"ceiling {c['median_mpps']:.1f}", (max(ns) + 0.3, c["median_mpps"]), fontsize=7,
                                xytext=(-2, 3), textcoords="offset points", ha="right", va="bottom")
                continue
            pts = [(n, find(res, system, n, size, mode)) for n in ns]
            pts = [(n, r) for n, r in pts if r and r["median_mpps"] > 0]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            ys = [r["median_mpps"] for _, r in pts]
            lo = [r["median_mpps"] - max(r.get("min_mpps") or r["median_mpps"], 1e-9) for _, r in pts]
            hi = [(r.get("max_mpps") or r["median_mpps"]) - r["median_mpps"] for _, r in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], label=label, markersize=4, capsize=3, linewidth=1.5,
                        color=colour_of(system, mode), **series_style(system, mode))
            if has_pipes(mode):
                continue  # its 1-NF figure is the plain mode's (no NF-to-NF edge) and would hide it
            # the 1-NF figure, the one to compare
            ax.annotate(f"{ys[0]:.2f}" if ys[0] < 10 else f"{ys[0]:.1f}", (xs[0], ys[0]), fontsize=7,
                        xytext=(-4, 4), textcoords="offset points", ha="right", color=colour_of(system, mode))
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


def chain_table(res: list[dict]) -> list[str]:
    peers = peers_in(res)
    rows = ["| NFs | size (B) | system | NF wakeup | median Mpps | min Mpps | max Mpps | median Gbps |"
            + "".join(f" Sluice / {short} |" for _, short in peers),
            "|---:|---:|---|---|---:|---:|---:|---:|" + "---:|" * len(peers)]
    keys = sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0]))
    for n, size in keys:
        ps = [find(res, s, n, size, None) for s, _ in peers]
        group = sorted((r for r in res if r["nfs"] == n and r["size"] == size),
                       key=lambda r: order_of(r["system"], r.get("mode")))
        for r in group:
            system = system_label(r["system"], with_mode=False)
            nf = "–" if r["system"] == IO else n  # the ceiling runs no NF; it sits with the 1-NF rows
            if r.get("median_mpps") is None:
                rows.append(f"| {nf} | {size} | {system} | {mode_label(r.get('mode'))} | failed: "
                            f"{first_line(r.get('error'))} | | | |" + " |" * len(peers))
                continue
            ratios = []
            for p in ps:
                ratio = "–"
                if r["system"] == SLUICE and p and p["median_mpps"]:
                    ratio = f"{r['median_mpps'] / p['median_mpps']:.2f}×"
                ratios.append(ratio)
            rows.append(f"| {nf} | {size} | {system} | {mode_label(r.get('mode'))} | {fmt(r['median_mpps'])} | "
                        f"{fmt(r.get('min_mpps'))} | {fmt(r.get('max_mpps'))} | {fmt(r.get('gbps_median'))} |"
                        + "".join(f" {x} |" for x in ratios))
    return rows


def _pipes_pairs(res: list[dict]) -> list[tuple[int, str, int, dict | None, dict | None]]:
    """(size, base mode, N, row without pipes, row with pipes) for every Sluice mode measured with
    pipes; the base mode is the same mode without pipes ("poll", or "poll+group" for "poll+pipes+group")."""
    bases = sorted({without_pipes(r.get("mode")) for r in res if r.get("system") == SLUICE and has_pipes(r.get("mode"))},
                   key=lambda m: order_of(SLUICE, m))
    out = []
    for size in sorted({r["size"] for r in res}):
        for w in bases:
            for n in sorted({r["nfs"] for r in res if r["size"] == size}):
                if find_any(res, n, size, with_pipes(w)):  # measured with pipes (figure or failure)
                    out.append((size, w, n, find(res, SLUICE, n, size, w), find(res, SLUICE, n, size, with_pipes(w))))
    return out


def find_any(res: list[dict], n: int, size: int, mode: str) -> dict | None:
    """The Sluice row of (N, size, mode), failed or not."""
    return next((r for r in res if r.get("system") == SLUICE and r.get("nfs") == n and r.get("size") == size
                 and r.get("mode") == mode), None)


def _range(r: dict | None) -> str:
    return f"{fmt(r.get('min_mpps'))}–{fmt(r.get('max_mpps'))}" if r else "–"


def pipes_table(res: list[dict]) -> list[str]:
    """Sluice with NF-to-NF pipes beside the same wakeup mode without them, per chain length and
    size; [] when the run has no pipes rows (older files)."""
    pairs = _pipes_pairs(res)
    if not pairs:
        return []
    rows = ["**Pipes** (issue 16): Sluice with `sluiced.pipes` on (each fwd reads the previous one's pipe ring; the "
            "worker only accounts the buffers) beside the same NF wakeup mode without pipes, same run. Pipes open = "
            "`stats.pipes.open` at the end of the last round (N − 1 when every edge is piped).", "",
            "| NFs | size (B) | NF wakeup | no pipes: median Mpps | min–max | pipes: median Mpps | min–max | "
            "pipes / no pipes | pipes open |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for size, w, n, a, b in pairs:
        ratio = f"{b['median_mpps'] / a['median_mpps']:.2f}×" if a and b and a["median_mpps"] else "–"
        failed = [r for r in (find_any(res, n, size, w), find_any(res, n, size, with_pipes(w)))
                  if r and r.get("median_mpps") is None]
        if failed:
            ratio = "; ".join(f"{mode_label(r['mode'])} failed: {first_line(r.get('error'))}" for r in failed)
        opened = ((b or {}).get("last_run_stats") or {}).get("pipes") or {}
        rows.append(f"| {n} | {size} | {mode_label(w)} | {fmt(a and a['median_mpps'])} | {_range(a)} | "
                    f"{fmt(b and b['median_mpps'])} | {_range(b)} | {ratio} | {opened.get('open', '–')} |")
    return rows


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
    if any(r.get("system") == SLUICE and has_pipes(r.get("mode")) for r in res):
        out.append("- **Sluice with pipes** (NF wakeup `MODE, pipes`; `MODE+pipes` in the JSON): the same with "
                   "`sluiced.pipes: true`, so each fwd hands its packets to the next through its pipe ring and the "
                   "worker only accounts the buffers; measured right after the same mode without pipes in every round.")
    if any(r.get("system") == SLUICE and has_group(r.get("mode")) for r in res):
        out.append("- **Sluice as a group** (`…, group`; `MODE+group` in the JSON): the same chain, but the N fwd "
                   "NFs run as members of one `sluice-group` process (docs/groups.md) on core 0 instead of N "
                   "processes, so a batch crosses the members without a process switch.")
    if IO in present:
        out.append("- **One-core ceiling** (testpmd io, net_null → net_null; 1-NF rows only): ONE `dpdk-testpmd`, no "
                   "NF, `--forward-mode=io` between `net_null0,size=B,copy=0` and `net_null1,size=B,copy=0,no-rx=1` "
                   "with one forwarding lcore on core 1 (the core of sluiced's worker and of the testpmd switch). "
                   "Port 1 receives nothing, so only 0 → 1 carries packets, one direction as in Sluice's "
                   "`src → NF → dst`. Rate = growth of port 1's TX counter: what one core does when it only moves "
                   "buffers from one null port to the other. Sluice / ceiling is Sluice's 1-NF figure as a "
                   "fraction of it.")
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
        out.append(f"- **Target 1** (1 NF, 64 B, poll ≥ {TARGET_RATIO:g}× the memif peer): **{verdict}** in this run. "
                   f"Sluice {s1['median_mpps']:.2f} Mpps vs testpmd+memif {p1['median_mpps']:.2f} Mpps = {ratio:.2f}×. "
                   f"But {MEMIF_PHASES}.")
    else:
        out.append("- Target 1 (1 NF, 64 B, poll vs peer) cannot be judged: "
                   + ("no Sluice figure" if not s1 else "no peer figure") + " in this run.")
    out += ceiling_reading(res)
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
    for system in (LINUX, OVS):
        p = find(res, system, 1, 64, None)
        if p:
            out.append(f"- {SYSTEM_NAMES[system]}, 1 NF, 64 B: {p['median_mpps']:.2f} Mpps"
                       + (f"; Sluice poll is {s1b['median_mpps'] / p['median_mpps']:.1f}× that."
                          if s1b and p["median_mpps"] else "."))
    for system, _ in PEERS:
        for size in sizes if system != IO else ():  # the ceiling has only N = 1
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
    sl_modes = sorted({r.get("mode") for r in res if r.get("system") == SLUICE and r.get("mode")},
                      key=lambda m: order_of(SLUICE, m))
    for size in sizes:
        for mode in sl_modes:
            pts = [(n, find(res, SLUICE, n, size, mode)) for n in all_ns]
            pts = [(n, r["median_mpps"]) for n, r in pts if r]
            if len(pts) > 1 and pts[0][1]:
                out.append(f"- Sluice {mode_label(mode)}, {size} B, chain length: "
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
    for size in sizes:
        for mode in (m for m in sl_modes if has_group(m)):
            cmp_ = [f"{n} NF {b['median_mpps'] / a['median_mpps']:.2f}×" for n in all_ns
                    for a, b in [(find(res, SLUICE, n, size, without_group(mode)), find(res, SLUICE, n, size, mode))]
                    if a and b and a["median_mpps"]]
            if cmp_:
                out.append(f"- Group relative to processes, {mode_label(without_group(mode))}, {size} B: "
                           + ", ".join(cmp_) + ".")
    out += group_target_reading(res)
    out += pipes_reading(res)
    spreads = [((r["max_mpps"] - r["min_mpps"]) / r["median_mpps"], r) for r in res
               if r.get("median_mpps") and len(r.get("runs_mpps") or []) > 1]
    if spreads:
        worst = max(spreads, key=lambda t: t[0])
        med = statistics.median(t[0] for t in spreads)
        r = worst[1]
        out.append(f"- Run-to-run spread (max − min) / median: median {med:.1%} over {len(spreads)} figures; widest "
                   f"{worst[0]:.1%} ({'Sluice ' + mode_label(r['mode']) if r['system'] == SLUICE else SYSTEM_NAMES.get(r['system'], r['system'])}, "
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


def ceiling_reading(res: list[dict]) -> list[str]:
    """Per size, the one-core ceiling and every Sluice 1-NF figure as a fraction of it; [] without
    testpmd-io rows (older files)."""
    out = []
    for size in sorted({r["size"] for r in res}):
        c = find(res, IO, 1, size, None)
        if not c or not c["median_mpps"]:
            continue
        sl = sorted((r for r in res if r.get("system") == SLUICE and r["nfs"] == 1 and r["size"] == size
                     and r.get("median_mpps") is not None), key=lambda r: order_of(SLUICE, r.get("mode")))
        out.append(f"- **One-core ceiling**, {size} B: {c['median_mpps']:.2f} Mpps ({_range(c)}) with one testpmd "
                   "lcore moving net_null → net_null and no NF"
                   + ("; Sluice's 1 NF reaches " + ", ".join(
                       f"{r['median_mpps'] / c['median_mpps']:.0%} ({mode_label(r.get('mode'))})" for r in sl)
                      + " of it" if sl else "") + ".")
    return out


def group_target_reading(res: list[dict]) -> list[str]:
    """Issue 37's target: the chain of 3 at 64 B as a group (its segment fused: run by calls) at least
    1.5x the same chain of processes with pipes, same run; read against the 1-NF figure, which bounds
    it (a fused segment costs sluiced's worker what one NF costs). [] without those rows."""
    n, size = TARGET_PIPES_NFS, 64
    proc = find(res, SLUICE, n, size, "poll" + PIPES)
    grp = find(res, SLUICE, n, size, "poll" + PIPES + "+group")
    if not (proc and grp and proc["median_mpps"]):
        return []
    ratio = grp["median_mpps"] / proc["median_mpps"]
    line = (f"- **Groups** (issue 37: chain of {n} at {size} B, a group ≥ 1.5× the processes with pipes): "
            f"{'**met**' if ratio >= 1.5 else '**not met**'}: {grp['median_mpps']:.2f} Mpps ({_range(grp)}) against "
            f"{proc['median_mpps']:.2f} ({_range(proc)}), {ratio:.2f}×.")
    one = find(res, SLUICE, 1, size, "poll" + PIPES + "+group") or find(res, SLUICE, 1, size, "poll")
    if one and one["median_mpps"]:
        line += (f" Its bound is the 1-NF figure of the same run, {one['median_mpps']:.2f} Mpps "
                 f"({one['median_mpps'] / proc['median_mpps']:.2f}× the processes): the group's segment reaches sluiced's "
                 f"worker as one NF's packets do, and the worker's core is the limit.")
    return [line]


def pipes_reading(res: list[dict]) -> list[str]:
    """The pipes / no pipes ratios per size and wakeup mode, and issue 16's target (chain of 3, 64 B:
    with pipes at least 1.5x without, the best mode of each in the same run); [] without pipes rows."""
    pairs = _pipes_pairs(res)
    if not pairs:
        return []
    out = []
    for size in sorted({p[0] for p in pairs}):
        for w in sorted({p[1] for p in pairs if p[0] == size}, key=lambda w: order_of(SLUICE, w)):
            cmp_ = [f"{n} NF {b['median_mpps'] / a['median_mpps']:.2f}×" for s_, w_, n, a, b in pairs
                    if s_ == size and w_ == w and a and b and a["median_mpps"]]
            if cmp_:
                out.append(f"- Pipes relative to no pipes, {mode_label(w)}, {size} B: " + ", ".join(cmp_) + ".")
    n, size = TARGET_PIPES_NFS, 64
    best = {}
    for piped in (False, True):
        rows = [r for r in (find(res, SLUICE, n, size, w + (PIPES if piped else "")) for w in WAKEUPS) if r]
        best[piped] = max(rows, key=lambda r: r["median_mpps"]) if rows else None
    a, b = best[False], best[True]
    if a and b and a["median_mpps"]:
        ratio = b["median_mpps"] / a["median_mpps"]
        verdict = "met" if ratio >= TARGET_PIPES else "NOT met"
        out.append(f"- **Target (issue 16)** (chain of {n}, {size} B, with pipes ≥ {TARGET_PIPES:g}× without; the best "
                   f"NF wakeup mode of each, same run): **{verdict}**. With pipes {b['median_mpps']:.2f} Mpps "
                   f"({wakeup_of(b['mode'])}) vs without {a['median_mpps']:.2f} Mpps ({a['mode']}) = {ratio:.2f}×.")
    else:
        out.append(f"- Target (issue 16, chain of {n} at {size} B with pipes ≥ {TARGET_PIPES:g}× without) cannot be "
                   f"judged: no {'figure with pipes' if not b else 'figure without pipes'} for {n} NFs at {size} B "
                   "in this run.")
    return out
