"""Scenario 5, NF count sweep (bench/density.py, issue 6): rows merged over runs, plot, method,
tables and the verdict on the issue's target."""

from __future__ import annotations

import json
from pathlib import Path

from .common import (_finish, _headline_line, _link, _pyplot, _title, _try_plot, and_list, first_line, fmt_rate,
                     is_quick, rows_of, stamp_of)

DENSITY_TARGET = {"nfs": 2000, "size": 700, "pps": 1.4e6, "p99_ns": 5e6}  # issue 6, scenario 5
FORMS = ("process", "group")  # bench/density.py --forms: N NF processes, or one sluice-group hosting the N
# plot styles per form: throughput and latency-trial series, then the series at the target's offered rate
_STYLE = {"process": ({"linestyle": "-", "marker": "o"}, {"linestyle": "--", "marker": "s"}),
          "group": ({"linestyle": "-.", "marker": "D", "markerfacecolor": "none"},
                    {"linestyle": ":", "marker": "s", "markerfacecolor": "none"})}


def form_of(r: dict) -> str:
    """A row's form; rows from files older than --forms are processes."""
    return r.get("form") or "process"


def _form_order(f: str) -> int:
    return FORMS.index(f) if f in FORMS else len(FORMS)


def density_rows(loaded: list[tuple[Path, dict]]) -> list[tuple[Path, dict, dict]]:
    """Scenario 5 rows to report: per (N, size, form), the newest full (non --quick) run that measured
    it, so a sweep run in parts (`--nfs 1000,2000 --sizes 700`, `--forms group`, ...) is merged; quick
    runs only when no full run has the scenario. Returns (file, its data, row), by N, size, form."""
    having = [(p, d) for p, d in loaded if rows_of(d["results"], "density")]
    full = [(p, d) for p, d in having if not is_quick(d)] or having[-1:]
    best: dict[tuple, tuple] = {}
    for p, d in full:  # oldest first: newer files overwrite
        for r in rows_of(d["results"], "density"):
            key = (r.get("nfs"), r.get("size"), form_of(r))
            if r.get("median_pps") is not None or key not in best:
                best[key] = (p, d, r)
    return [best[k] for k in sorted(best, key=lambda k: (k[0] or 0, k[1] or 0, _form_order(k[2])))]


def forms_in(rows: list[dict]) -> list[str]:
    return sorted({form_of(r) for r in rows}, key=_form_order)


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
    forms = forms_in(res)
    T = DENSITY_TARGET
    for i, size in enumerate(sizes):
        for form in forms:
            rs = sorted((r for r in res if r["size"] == size and form_of(r) == form), key=lambda r: r["nfs"])
            if not rs:
                continue
            st, st_tg = _STYLE.get(form, _STYLE["process"])
            lab = _size_label(rs[0]) + (f", {_form_label(form)}" if len(forms) > 1 else "")
            _plot_form(axes, data, rs, lab, f"C{i}", st, st_tg, T)
            if size == sizes[0]:  # memory is per session: the same for every size
                _plot_memory(axes[2], rs, st, (f"{_form_label(form)}: " if len(forms) > 1 else ""))
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
    what = "NF count sweep: 2 of N NFs per packet, round robin"
    if len(forms) > 1:
        what += f" ({' vs '.join(_form_label(f) for f in forms)})"
    fig.suptitle(_title(data, what), fontsize=10)
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    _finish(fig, path, handles, labels, ncol=3 if len(forms) == 1 else 4)
    return True


def _form_label(form: str) -> str:
    return {"process": "N processes", "group": "one group"}.get(form, form)


def _plot_form(axes, data: dict, rs: list[dict], lab: str, color: str, st: dict, st_tg: dict, T: dict) -> None:
    """One form's series of one size: throughput (min-max bars), p99 of the latency trial, and at the
    target's offered rate the delivered rate and p99."""
    xs = [r["nfs"] for r in rs]
    med = [r["median_pps"] / 1e6 for r in rs]
    lo = [m - r["min_pps"] / 1e6 for m, r in zip(med, rs)]
    hi = [r["max_pps"] / 1e6 - m for m, r in zip(med, rs)]
    axes[0].errorbar(xs, med, yerr=[lo, hi], capsize=3, color=color, label=f"{lab}: throughput", **st)
    lat = [(r["nfs"], _dens_pct(r, "latency", "p99"), _dens_pct(r, "latency", "p99", "min"),
            _dens_pct(r, "latency", "p99", "max")) for r in rs if _dens_pct(r, "latency", "p99")]
    if lat:
        m = [v / 1e6 for _, v, _, _ in lat]
        axes[1].errorbar([x for x, *_ in lat], m, yerr=[[a - b / 1e6 for a, (_, _, b, _) in zip(m, lat)],
                                                        [c / 1e6 - a for a, (_, _, _, c) in zip(m, lat)]],
                         capsize=3, color=color,
                         label=f"{lab}: p99 at {data.get('config', {}).get('lat_load', 0.5):.0%} of throughput", **st)
    tg = [(r["nfs"], _dens_pct(r, "target", "p99")) for r in rs if _dens_pct(r, "target", "p99")]
    if tg:
        axes[1].plot([x for x, _ in tg], [v / 1e6 for _, v in tg], color=color,
                     label=f"{lab}: p99 at {T['pps'] / 1e6:g} Mpps offered", **st_tg)
        axes[0].plot([x for x, _ in tg], [(r.get("target") or {}).get("delivered_pps", 0) / 1e6 for r in rs
                                          if _dens_pct(r, "target", "p99")],
                     color=color, label=f"{lab}: delivered at {T['pps'] / 1e6:g} Mpps offered", **st_tg)


def _plot_memory(ax, rs: list[dict], st: dict, prefix: str) -> None:
    mem = [(r["nfs"], r.get("median_memory_kib")) for r in rs if r.get("median_memory_kib")]
    if not mem:
        return
    st = {k: v for k, v in st.items() if k != "marker"}
    ax.plot([x for x, _ in mem], [v / 1024 for _, v in mem], marker="o", color="C2",
            label=f"{prefix}total memory", **st)
    nfp = [(r["nfs"], (r.get("memory") or {}).get("nfs_private_kib")) for r in rs
           if (r.get("memory") or {}).get("nfs_private_kib") is not None]
    ax.plot([x for x, _ in nfp], [v / 1024 for _, v in nfp], marker="^", color="C4",
            label=f"{prefix}of which the NFs' private memory", **st)


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
        + (" **Forms**: with `--forms process,group` every N is also measured as *one* `sluice-group` process "
           "hosting the N `fwd`s as members (docs/groups.md; same names, services and options, same CPU cgroup, "
           "each member attached to sluiced as an NF of its own), right after the processes in the same round. "
           "For a group, \"NF runs\" are the group process's runs and the NFs' private memory is the group "
           "process's (per member: that / N)."
           if "group" in (cfg.get("forms") or []) else "")
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
              + f" (per N{', size and form' if len({form_of(r) for _, _, r in picked}) > 1 else ' and size'} the newest "
              "full run that measured it; the method below is the newest's).", ""]
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
    forms = forms_in(rows)
    multi = len(forms) > 1  # a form column only when there is more than one (older files: processes only)

    def fc(r: dict) -> str:
        return f" {form_of(r)} |" if multi else ""
    L += ["| N | size |" + (" form |" if multi else "") + " Mpps (min–max) | lost in fabric | latency trial: Mpps | "
          f"p50 | p99 | at {T['pps'] / 1e6:g} Mpps: delivered | p50 | p99 | sluiced CPU (control) | memory |",
          "|---:|---|" + ("---|" if multi else "") + "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("median_pps") is None:
            L.append(f"| {r['nfs']} | {_size_label(r)} |{fc(r)} failed | | | | | | | | | |")
            continue
        lat, tg = r.get("latency") or {}, r.get("target") or {}
        lost = r.get("median_lost_share")
        lat_lost, tg_lost = sum(lat.get("lost") or []), sum(tg.get("lost") or [])
        ctl = _mech(r, "control_cpu")
        L.append(
            f"| {r['nfs']} | {_size_label(r)} |{fc(r)} **{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–"
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
          "| N |" + (" form |" if multi else "") + " total memory | sluiced (RSS + huge pages) | packet region | "
          "NFs' private memory (per NF) | all N attached after | NFs per second |",
          "|---:|" + ("---|" if multi else "") + "---:|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in rows:
        if (r["nfs"], form_of(r)) in seen or not r.get("memory"):
            continue
        seen.add((r["nfs"], form_of(r)))
        m = r["memory"]
        att = r.get("median_attach_s")
        sl = m.get("sluiced_vmrss_kib", 0) + m.get("sluiced_hugetlb_kib", 0)
        # per NF: the median NF process, or for a group its process's private memory / N (per member)
        per = ((r.get("median_nf_private_kib_per_member") or m.get("nf_private_kib_per_member"))
               if form_of(r) == "group" else m.get("nf_private_kib_median")) or 0
        L.append(f"| {r['nfs']} |{fc(r)} **{r.get('median_memory_kib', 0) / 1024:,.0f} MiB** | {sl / 1024:,.0f} MiB | "
                 f"{(m.get('region_bytes') or 0) / 2**20:,.0f} MiB | {m.get('nfs_private_kib', 0) / 1024:,.1f} MiB "
                 f"({per:,.0f} KiB{' per member' if form_of(r) == 'group' else ''}) | "
                 + (f"{att:.2f} s | {r['nfs'] / att:,.0f}" if att else "– | –") + " |")
    L += ["", "**What bounds it**: the throughput trial (gen unlimited), medians of rounds:", "",
          "| N | size |" + (" form |" if multi else "") + " NF runs per s | CPU per NF run | packets per NF run | "
          "NFs waiting runnable | core 0: NFs / gen / sink | sluiced kicks per s | doorbells per s |",
          "|---:|---|" + ("---|" if multi else "") + "---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        m = r.get("mechanism") or {}
        if r.get("median_pps") is None or not m:
            continue
        L.append(f"| {r['nfs']} | {_size_label(r)} |{fc(r)} {m.get('nf_runs_per_s', 0):,.0f} | "
                 f"{m.get('nf_us_per_run', 0):.1f} µs | {m.get('nf_pkts_per_run', 0):.1f} | "
                 f"{m.get('nf_runnable_waiting', 0):,.0f} | {m.get('nfs_cpu', 0):.0%} / {m.get('gen_cpu', 0):.0%} / "
                 f"{m.get('sink_cpu', 0):.0%} | {m.get('nf_kicks_per_s', 0):,.0f} | {m.get('doorbells_per_s', 0):,.0f} |")
    if multi:
        L += ["", "<sub>For a group, an \"NF run\" is a run of its one process (all N members turned), and "
              "\"NFs waiting runnable\" is that process.</sub>"]
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
            f"N={e.get('nfs')}" + (f" ({e['form']})" if e.get("form", "process") != "process" else "")
            + f" round {e.get('round')}: {first_line(e.get('error', ''))}" for _, e in errs[:5]), ""]
    return L


def _ms(ns) -> str:
    if ns is None:
        return "–"
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} µs"


def density_verdict(rows: list[dict]) -> list[str]:
    """Whether the issue's target holds, per form of the NFs, and what the measured figures say bounds it."""
    T = DENSITY_TARGET
    head = (f"Issue 6: at {T['nfs']} NFs, at least {T['pps'] / 1e6:g} Mpps aggregate at {T['size']} B with p99 "
            f"latency at most {T['p99_ns'] / 1e6:g} ms, both at once (judged on the trial offering "
            f"{T['pps'] / 1e6:g} Mpps: at least 99 % of it delivered and p99 ≤ {T['p99_ns'] / 1e6:g} ms, medians of rounds).")
    forms = forms_in(rows)
    if len(forms) <= 1:
        return [head] + _form_verdict(rows, forms[0] if forms else "process", "")
    out = [head]
    for form in forms:
        out += _form_verdict([r for r in rows if form_of(r) == form], form, f"{_form_label(form).capitalize()}: ")
    return out


def _sink_note(r: dict) -> str:
    """For a group row: how much of the fabric's loss was the sink's ring overflowing (one turn of the
    group hands sluiced every member's output at once); then the tester bounds the throughput."""
    share = r.get("median_lost_share") or 0
    if share <= 0.05:
        return ""
    lost, sink = sum(r.get("runs_lost_in_fabric") or []), r.get("runs_lost_ring_full_sink")
    if sink is None or not lost:
        return f" {share:.0%} of the packets gen emitted were lost in the fabric."
    at_sink = sum(sink) / lost
    return (f" {share:.0%} of the packets gen emitted were lost in the fabric, {at_sink:.0%} of them at the sink's "
            "full ring" + (" (the group's output reached it in bursts larger than the ring: a turn hands sluiced "
                           "every member's output at once): there the tester, not the group, bounds the throughput."
                           if at_sink > 0.5 else "."))


def _form_verdict(rows: list[dict], form: str, prefix: str) -> list[str]:
    """The verdict for the rows of one form (prefix names it when there are several)."""
    T = DENSITY_TARGET
    r = next((x for x in rows if x["nfs"] == T["nfs"] and x["size"] == T["size"] and x.get("median_pps")), None)
    if r is None:
        return ["", f"{prefix}Not measured: no run has N = {T['nfs']} at {T['size']} B."]
    tg = r.get("target") or {}
    dl, p99 = tg.get("delivered_pps"), _dens_pct(r, "target", "p99")
    met = dl is not None and p99 is not None and dl >= 0.99 * T["pps"] and p99 <= T["p99_ns"]
    out = ["",
           f"{prefix}**{'Met' if met else 'Not met'}.** Offered {T['pps'] / 1e6:g} Mpps, {fmt_rate(dl)} Mpps reached the sink "
           f"with p99 {_ms(p99)}; with gen unlimited {fmt_rate(r['median_pps'])} Mpps (min {fmt_rate(r['min_pps'])}, "
           f"max {fmt_rate(r['max_pps'])}); at {fmt_rate((r.get('latency') or {}).get('delivered_pps'))} Mpps p99 was "
           f"{_ms(_dens_pct(r, 'latency', 'p99'))}."]
    if met:
        return out
    m = r.get("mechanism") or {}
    if form == "group":
        if m.get("nf_runs_per_s"):
            out += ["", f"- The one group process ran {m['nf_runs_per_s']:,.0f} times a second at "
                    f"{m.get('nf_us_per_run', 0):.1f} µs of CPU per run ({m.get('nfs_cpu', 0):.0%} of core 0; gen "
                    f"{m.get('gen_cpu', 0):.0%}, sink {m.get('sink_cpu', 0):.0%}), handling "
                    f"{m.get('nf_pkts_per_run', 0):,.1f} packets per run (a run turns all {T['nfs']} members, "
                    f"each looking at its RX ring); sluiced sent {m.get('nf_kicks_per_s', 0):,.0f} kicks/s."
                    + _sink_note(r)]
        return out
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
