"""NF library section (bench/nfs.py, issue 5): Mpps per NF, each alone in a chain, 64 B."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from .common import _finish, _headline_line, _link, _pyplot, _title, first_line, fmt_rate, headline, rows_of, stamp_of

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
