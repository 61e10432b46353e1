#!/usr/bin/env python3
"""Regenerate BENCHMARKS.md from every bench/results/*.json (plus the hand-written bench/notes.md).

    bench/gen_report.py [--results DIR] [--out FILE]

The headline section is the newest full (non --quick) run; every run is listed in the history.
Plots: bench/results/<stamp>-fabric.png, drawn by run.py (redrawn here when missing and matplotlib
is importable). Numbers in BENCHMARKS.md come only from the JSON files: never edit it by hand.
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
SYSTEM_NAMES = {SLUICE: "Sluice", PEER: "testpmd + memif", LINUX: "Linux veth + netns"}
# fixed colours so a system keeps its colour whichever others are in a run
COLOURS = {(SLUICE, "poll"): "C0", (SLUICE, "adaptive"): "C1", (SLUICE, "block"): "C4", (PEER, None): "C2",
           (LINUX, None): "C3"}
TARGET_RATIO = 2.0      # 1 NF, 64 B, poll: Sluice / peer
TARGET_SIZE_GAP = 0.10  # 1500 B packet rate within 10 % of 64 B


# ---------------------------------------------------------------------------------------------
# loading


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


def find(results: list[dict], system: str, nfs: int, size: int, mode) -> dict | None:
    for r in results:
        if (r.get("system") == system and r.get("nfs") == nfs and r.get("size") == size
                and r.get("mode") == mode and r.get("median_mpps") is not None):
            return r
    return None


def fmt(x, nd=2) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


# ---------------------------------------------------------------------------------------------
# plot


def plot(data: dict, path: Path) -> bool:
    """Draw Mpps per N for each size (Sluice poll/adaptive, testpmd memif, Linux veth); min-max error bars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("gen_report: matplotlib not importable, no plot (pip install matplotlib)", file=sys.stderr)
        return False
    res = [r for r in data["results"] if r.get("median_mpps") is not None]
    sizes = sorted({r["size"] for r in res})
    if not sizes:
        return False
    series = []
    for system, mode, label in ((SLUICE, "poll", "Sluice, poll NFs"), (SLUICE, "adaptive", "Sluice, adaptive NFs"),
                                (SLUICE, "block", "Sluice, block NFs"), (PEER, None, "testpmd + memif (peer)"),
                                (LINUX, None, "Linux veth + netns (kernel forwarding)")):
        if any(r["system"] == system and r.get("mode") == mode for r in res):
            series.append((system, mode, label))
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False)
    meds = [r["median_mpps"] for r in res if r["median_mpps"] > 0]
    logy = bool(meds) and max(meds) / min(meds) > 20  # tiny shared-core figures next to big ones
    width = 0.8 / max(1, len(series))
    for ax, size in zip(axes[0], sizes):
        ns = sorted({r["nfs"] for r in res if r["size"] == size})
        for i, (system, mode, label) in enumerate(series):
            xs, ys, lo, hi = [], [], [], []
            for j, n in enumerate(ns):
                r = find(res, system, n, size, mode)
                if r is None:
                    continue
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(r["median_mpps"])
                lo.append(r["median_mpps"] - r["min_mpps"])
                hi.append(r["max_mpps"] - r["median_mpps"])
            if xs:
                bars = ax.bar(xs, ys, width, label=label, yerr=[lo, hi], capsize=3,
                              color=COLOURS.get((system, mode)))
                for b, y in zip(bars, ys):
                    ax.annotate(f"{y:.2f}" if y < 1 else f"{y:.1f}", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom",
                                fontsize=7, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(ns)), [f"{n} NF" + ("s" if n > 1 else "") for n in ns])
        ax.set_title(f"net_null -> N x fwd -> net_null, {size} B")
        ax.set_ylabel("Mpps (median of runs; bars: min-max)" + (", log scale" if logy else ""))
        if logy:
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    runs = data.get("config", {}).get("runs")
    vs = " vs ".join(["Sluice", *(n for s, n in (("testpmd-memif", "DPDK testpmd+memif"), (LINUX, "Linux veth"))
                                  if any(r["system"] == s for r in res))])
    fig.suptitle(f"{vs}, {data.get('machine', {}).get('cpu_model', '?')}, "
                 f"{data.get('machine', {}).get('cpus_online', '?')} cores, {runs} run(s) each", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# report


def scenario_rows(data: dict) -> list[str]:
    res = data["results"]
    has_linux = any(r["system"] == LINUX for r in res)
    rows = ["| NFs | size (B) | system | NF wakeup | median Mpps | min Mpps | max Mpps | median Gbps | Sluice / memif |"
            + (" Sluice / Linux |" if has_linux else ""),
            "|---:|---:|---|---|---:|---:|---:|---:|---:|" + ("---:|" if has_linux else "")]
    keys = sorted({(r["nfs"], r["size"]) for r in res}, key=lambda k: (k[1], k[0]))
    order = {(SLUICE, "poll"): 0, (SLUICE, "adaptive"): 1, (SLUICE, "block"): 2, (PEER, None): 3, (LINUX, None): 4}
    for n, size in keys:
        peer = find(res, PEER, n, size, None)
        lin = find(res, LINUX, n, size, None)
        group = sorted((r for r in res if r["nfs"] == n and r["size"] == size),
                       key=lambda r: order.get((r["system"], r.get("mode")), 9))
        for r in group:
            ratios = []
            for p in (peer, lin) if has_linux else (peer,):
                ratio = "–"
                if r["system"] == SLUICE and p and r.get("median_mpps") is not None and p["median_mpps"]:
                    ratio = f"{r['median_mpps'] / p['median_mpps']:.2f}×"
                ratios.append(ratio)
            system = SYSTEM_NAMES.get(r["system"], r["system"])
            if r.get("median_mpps") is None:
                rows.append(f"| {n} | {size} | {system} | {r.get('mode') or '–'} | failed: "
                            f"{(r.get('error') or '?').splitlines()[0][:80]} | | | |" + " |" * len(ratios))
                continue
            rows.append(f"| {n} | {size} | {system} | {r.get('mode') or '–'} | {fmt(r['median_mpps'])} | "
                        f"{fmt(r['min_mpps'])} | {fmt(r['max_mpps'])} | {fmt(r.get('gbps_median'))} | "
                        + " | ".join(ratios) + " |")
    return rows


def machine_rows(m: dict, cfg: dict) -> list[str]:
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
        f"| method | {cfg.get('runs', '?')} run(s) per figure, {cfg.get('warmup_s', '?')} s warm-up + "
        f"{cfg.get('duration_s', '?')} s window each, systems alternating within each round |",
    ]


def reading(data: dict) -> list[str]:
    """Sentences computed from the numbers only."""
    res = data["results"]
    out = []
    fcs0 = [f for r in res for f in (r.get("runs_foreign_cpu") or []) if f is not None]
    spreads0 = [(r["max_mpps"] - r["min_mpps"]) / r["median_mpps"] for r in res
                if r.get("median_mpps") and len(r.get("runs_mpps", [])) > 1]
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
    if s1 and p1:
        ratio = s1["median_mpps"] / p1["median_mpps"]
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        out.append(f"- **Target 1** (1 NF, 64 B, poll ≥ {TARGET_RATIO:g}× the memif peer): **{verdict}**. "
                   f"Sluice {s1['median_mpps']:.2f} Mpps vs testpmd+memif {p1['median_mpps']:.2f} Mpps = {ratio:.2f}×.")
    else:
        out.append("- Target 1 (1 NF, 64 B, poll vs peer) cannot be judged: "
                   + ("no Sluice figure" if not s1 else "no peer figure") + " in this run.")
    gaps = []
    for n in sorted({r["nfs"] for r in res}):
        for system, mode in ((SLUICE, "poll"), (SLUICE, "adaptive"), (SLUICE, "block"), (PEER, None), (LINUX, None)):
            a, b = find(res, system, n, 64, mode), find(res, system, n, 1500, mode)
            if a and b and a["median_mpps"]:
                gaps.append((system, mode, n, a["median_mpps"], b["median_mpps"], b["median_mpps"] / a["median_mpps"] - 1))
    sl_gaps = [g for g in gaps if g[0] == SLUICE]
    if sl_gaps:
        bad = [g for g in sl_gaps if g[5] < -TARGET_SIZE_GAP]
        t1 = [g for g in sl_gaps if g[2] == 1 and g[1] == "poll"]
        head = ""
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
    l1, s1b = find(res, LINUX, 1, 64, None), find(res, SLUICE, 1, 64, "poll")
    if l1:
        out.append(f"- Linux veth + netns (kernel forwarding), 1 NF, 64 B: {l1['median_mpps']:.2f} Mpps"
                   + (f"; Sluice poll is {s1b['median_mpps'] / l1['median_mpps']:.1f}× that." if s1b else "."))
    for size in sorted({r["size"] for r in res}):
        pts = [(n, find(res, LINUX, n, size, None)) for n in sorted({r["nfs"] for r in res})]
        pts = [(n, r["median_mpps"]) for n, r in pts if r]
        if len(pts) > 1:
            out.append(f"- Linux veth, {size} B, chain length: " + ", ".join(f"{n} NF {m:.2f}" for n, m in pts)
                       + f" Mpps ({pts[-1][0]} NFs at {pts[-1][1] / pts[0][1]:.1%} of {pts[0][0]} NF).")
    peer_gaps = [g for g in gaps if g[0] == PEER]
    if peer_gaps:
        out.append("- testpmd + memif, 64 B → 1500 B: "
                   + "; ".join(f"{g[2]} NF {g[3]:.2f} → {g[4]:.2f} Mpps ({g[5]:+.1%})" for g in peer_gaps) + ".")
    lin_gaps = [g for g in gaps if g[0] == LINUX]
    if lin_gaps:
        out.append("- Linux veth, 64 B → 1500 B: "
                   + "; ".join(f"{g[2]} NF {g[3]:.2f} → {g[4]:.2f} Mpps ({g[5]:+.1%})" for g in lin_gaps) + ".")
    for size in sorted({r["size"] for r in res}):
        for mode in ("poll", "adaptive", "block"):
            pts = [(n, find(res, SLUICE, n, size, mode)) for n in sorted({r["nfs"] for r in res})]
            pts = [(n, r["median_mpps"]) for n, r in pts if r]
            if len(pts) > 1:
                out.append(f"- Sluice {mode}, {size} B, chain length: "
                           + ", ".join(f"{n} NF {m:.2f}" for n, m in pts) + " Mpps"
                           + f" ({pts[-1][0]} NFs at {pts[-1][1] / pts[0][1]:.1%} of {pts[0][0]} NF).")
    for size in sorted({r["size"] for r in res}):
        cmp_ = []
        for n in sorted({r["nfs"] for r in res}):
            a, b = find(res, SLUICE, n, size, "poll"), find(res, SLUICE, n, size, "adaptive")
            if a and b and a["median_mpps"]:
                cmp_.append(f"{n} NF {b['median_mpps'] / a['median_mpps']:.2f}×")
        if cmp_:
            out.append(f"- Adaptive relative to poll, {size} B: " + ", ".join(cmp_) + ".")
    spreads = [((r["max_mpps"] - r["min_mpps"]) / r["median_mpps"], r) for r in res
               if r.get("median_mpps") and len(r.get("runs_mpps", [])) > 1]
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
    errs = data.get("errors") or []
    if errs:
        out.append(f"- {len(errs)} measurement(s) failed in this run; see `errors` in the JSON.")
    return out


def history_rows(loaded: list[tuple[Path, dict]]) -> list[str]:
    rows = ["| results file | kind | runs × window | Sluice 1 NF 64 B poll | memif peer 1 NF 64 B | ratio | "
            "Linux veth 1 NF 64 B | Sluice 1 NF 1500 B poll |",
            "|---|---|---|---:|---:|---:|---:|---:|"]
    for p, d in reversed(loaded):
        res, cfg = d["results"], d.get("config", {})
        s, pe, s15 = find(res, SLUICE, 1, 64, "poll"), find(res, PEER, 1, 64, None), find(res, SLUICE, 1, 1500, "poll")
        ratio = f"{s['median_mpps'] / pe['median_mpps']:.2f}×" if s and pe and pe["median_mpps"] else "–"
        li = find(res, LINUX, 1, 64, None)
        rows.append(f"| [{p.name}](bench/results/{p.name}) | {'quick' if cfg.get('quick') else 'full'} | "
                    f"{cfg.get('runs', '?')} × {cfg.get('duration_s', '?')} s | {fmt(s and s['median_mpps'])} | "
                    f"{fmt(pe and pe['median_mpps'])} | {ratio} | {fmt(li and li['median_mpps'])} | "
                    f"{fmt(s15 and s15['median_mpps'])} |")
    return rows


def render(loaded: list[tuple[Path, dict]], results_dir: Path) -> str:
    L = ["# Sluice benchmarks", "",
         "<!-- GENERATED FILE: do not edit. -->",
         "> **Generated from `bench/results/*.json` by `bench/gen_report.py`; never hand-edited.** "
         "Re-run `bench/run.py` (measures and regenerates) or `bench/gen_report.py` (regenerates only). "
         "The hand-written commentary lives in `bench/notes.md`.", ""]
    if not loaded:
        L += ["No results yet: run `sudo .venv/bin/python bench/run.py`.", ""]
        return "\n".join(L)
    full = [(p, d) for p, d in loaded if not d.get("config", {}).get("quick")]
    head_p, head = (full or loaded)[-1]
    cfg = head.get("config", {})
    L += [f"## Fabric: `net_null -> N × fwd -> net_null`", "",
          f"Headline run: [`{head_p.name}`](bench/results/{head_p.name}), started {head.get('started', '?')}"
          + (" (a `--quick` run: one short window per figure, indicative only)" if cfg.get("quick") else "") + ".", "",
          "- **Sluice**: `sluiced` with two `net_null` ports (`size=B,copy=0`); ingress port → chain of N "
          "`sluice-nf-fwd` NFs → exit port. Rate = growth of the exit port's `tx_pkts`.",
          "- **Peer (testpmd + memif)**: one `dpdk-testpmd` as the switch (`net_null` + one `net_memif` server "
          "port per NF, io forwarding, chained port topology), and one `dpdk-testpmd` per NF (memif client, io "
          "forwarding back out of its only port). Rate = growth of the switch's `net_null` TX counter.",
          "- **Linux veth + netns** (`linux-veth`, where measured): one network namespace per NF doing kernel IPv4 "
          "forwarding, namespaces chained by veth pairs (generator namespace → NF 1 … NF N → sink namespace), GRO/GSO/TSO "
          "off; the generator is `bench/udpgen.c` (AF_PACKET flood bypassing the qdisc, 1024 UDP port pairs; this kernel "
          "has no pktgen) pinned to core 0, and RPS on NF 1's ingress veth moves the whole chain's forwarding (NET_RX "
          "softirq) to core 1. Rate = growth of the sink veth's `rx_packets`.",
          "- **Cores** (2 on this machine): switch (sluiced worker / testpmd switch forwarding lcore) on core 1; "
          "every NF (Sluice NF process / testpmd NF forwarding lcore) on core 0, shared when N > 1; idle main lcores "
          "on the other core.",
          "- Gbps = Mpps × frame size × 8 (L2 frame bits; no preamble or inter-frame gap). "
          "Ratio = Sluice median / the other system's median for the same N and size.", ""]
    L += scenario_rows(head) + [""]
    png = results_dir / f"{stamp_of(head_p)}-fabric.png"
    if not png.exists():
        plot(head, png)
    if png.exists():
        rel = os.path.relpath(png, REPO)
        L += [f"![Fabric Mpps, {stamp_of(head_p)}]({rel})", ""]
    L += ["## Reading", "", "Computed from the headline run's numbers:", ""] + reading(head) + [""]
    if NOTES.exists():
        notes = NOTES.read_text().strip()
        if notes:
            L += ["### Notes (hand-written, `bench/notes.md`)", "", notes, ""]
    if NOTES_OVS.exists():
        ovs = NOTES_OVS.read_text().strip()
        if ovs:
            # demote the file's own headings below this section's
            ovs = "\n".join(("##" + ln if ln.startswith("#") else ln) for ln in ovs.splitlines())
            L += ["## Open vSwitch with DPDK", "", ovs, ""]
    L += ["## Machine", ""] + machine_rows(head.get("machine", {}), cfg) + [""]
    L += ["## All runs", "", "Newest first; `quick` runs (1 short window) are smoke tests, not figures to quote.", ""]
    L += history_rows(loaded) + [""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    loaded = load_results(a.results)
    a.out.write_text(render(loaded, a.results))
    print(f"gen_report: wrote {a.out} from {len(loaded)} result file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
