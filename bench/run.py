#!/usr/bin/env python3
"""Sluice benchmark harness: scenarios 1-3 of the benchmark suite, Sluice and its peers in one run.

    sudo .venv/bin/python bench/run.py [SCENARIO ...] [--quick] [--runs N] ...
    SCENARIO: chain (1: chain length 1..8, 64 and 1500 B, Mpps; Sluice with and without NF-to-NF
              pipes, modes poll, poll+pipes, adaptive, adaptive+pipes; "fabric" is an alias),
              zeroloss (2: RFC 2544 26.1 zero-loss rate by binary search, chains of 1 and 3),
              latency (3: p50/p99/p99.9/max at 10/50/90 % of the zero-loss rate; runs in the
              zeroloss sessions, so it implies the search). Default: all three.

Systems: Sluice (sluiced + sluice-nf-fwd), dpdk-testpmd NFs over net_memif, Linux forwarding
through one network namespace per NF (veth pairs), OVS-DPDK with testpmd NFs on vhost-user; and in
scenario 1 at N = 1 a reference, `testpmd-io`: the one-core ceiling (ONE dpdk-testpmd, io forwarding
net_null0 -> net_null1 on core 1, the worker's core, no NF; one direction, see peer_memif.IoCeiling).
Within each round every system is measured once per figure, alternating, so drift hits all of
them; each figure is the median of the rounds, with min and max. A system whose tools are
missing is skipped with the reason printed and recorded (`skipped_systems` in the JSON).

Writes bench/results/<UTC stamp>.json and <stamp>-*.png, then regenerates BENCHMARKS.md
(bench/gen_report.py). Process logs of every measurement go to a temporary directory whose path
is printed at the end (kept only when something failed, or with --keep-logs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# matplotlib lives in the project's venv; re-run under it when started with another Python.
_VENV_PY = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
if not os.environ.get("SLUICE_BENCH_NO_REEXEC"):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if _VENV_PY.exists() and Path(sys.executable).resolve() != _VENV_PY.resolve():
            os.environ["SLUICE_BENCH_NO_REEXEC"] = "1"
            os.execv(str(_VENV_PY), [str(_VENV_PY), *sys.argv])

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_report  # noqa: E402
from common import (RESULTS, TESTPMD, BenchError, Progress, eal_memory_args, hugepages_2m,  # noqa: E402
                    machine_info, switch_cost, use_hugepages, cpu_stalls)
import peer_linux  # noqa: E402
import peer_memif  # noqa: E402
import peer_ovs  # noqa: E402
import rfc2544  # noqa: E402
import sluice_fabric  # noqa: E402

SYSTEMS = ("sluice", "testpmd-memif", "linux-veth", "ovs-dpdk", "testpmd-io")
IO = "testpmd-io"  # the one-core ceiling: scenario 1, N = 1 only (it has no NF); no trials
SCENARIOS = ("chain", "zeroloss", "latency")
SCENARIO_ALIASES = {"fabric": "chain", "1": "chain", "2": "zeroloss", "3": "latency"}
SYSTEM_ORDER = {s: i for i, s in enumerate(SYSTEMS)}
# Scenario 3 also measures every system at one absolute rate, COMMON_LOAD x the zero-loss rate of
# COMMON_REF in the same round (rows "latency_common"): the same load for all, where the percentage
# loads give each system its own
COMMON_REF, COMMON_LOAD, LATENCY_COMMON = "linux-veth", 0.5, "latency_common"


def parse_list(s: str, conv=str) -> list:
    return [conv(x) for x in s.split(",") if x.strip()]


def other_dataplanes() -> list[str]:
    """Running sluiced / testpmd processes we did not start: they would steal the cores."""
    found = []
    me = os.getpid()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            comm = (d / "comm").read_text().strip()
        except OSError:
            continue
        if comm in ("sluiced", "dpdk-testpmd", "ovs-vswitchd-dp", "ovs-vswitchd", "sluice-bench-te") \
                or comm.startswith("sluice-nf"):
            found.append(f"{comm} (pid {d.name})")
    return found


def wait_quiet(limit: float) -> list[str]:
    """Wait up to `limit` s for foreign data-plane processes to go; return those still running."""
    deadline = time.monotonic() + limit
    busy = other_dataplanes()
    announced = False
    while busy and time.monotonic() < deadline:
        if not announced:
            print(f"run.py: waiting up to {limit:.0f} s for other data-plane processes to end: {', '.join(busy)}",
                  file=sys.stderr, flush=True)
            announced = True
        time.sleep(1.0)
        busy = other_dataplanes()
    return busy


def plan(args) -> list[dict]:
    """One round: every (size, N) with the systems alternating."""
    items = []
    # the peers sit between the Sluice modes so the systems alternate: after the first wakeup mode's
    # items (with and without pipes, measured back to back so their ratio sees the same machine)
    first = args.modes[0].removesuffix(sluice_fabric.PIPES_SUFFIX) if args.modes else None
    k = 0
    while k + 1 < len(args.modes) and args.modes[k + 1].removesuffix(sluice_fabric.PIPES_SUFFIX) == first:
        k += 1
    for size in args.sizes:
        for n in args.nfs:
            for i, mode in enumerate(args.modes):
                if "sluice" in args.systems:
                    items.append({"system": "sluice", "nfs": n, "size": size, "mode": mode})
                if i == k:
                    items += peers(args, n, size)
            if not args.modes:
                items += peers(args, n, size)
    return items


def peers(args, n: int, size: int) -> list[dict]:
    """The peer systems' items for one (N, size)."""
    out = []
    if IO in args.systems and n == 1:  # the one-core ceiling is the reference of the 1-NF figures only
        out.append({"system": IO, "nfs": 1, "size": size, "mode": None})
    if "testpmd-memif" in args.systems and n in args.peer_nfs:
        out.append({"system": "testpmd-memif", "nfs": n, "size": size, "mode": None})
    if "linux-veth" in args.systems and n in args.linux_nfs:
        out.append({"system": "linux-veth", "nfs": n, "size": size, "mode": None})
    if "ovs-dpdk" in args.systems and n in args.peer_nfs:
        out.append({"system": "ovs-dpdk", "nfs": n, "size": size, "mode": None})
    return out


def key(it: dict) -> tuple:
    return (it["system"], it["nfs"], it["size"], it["mode"])


def label(it: dict) -> str:
    sysname = {"sluice": "sluice", "testpmd-memif": "memif ", "linux-veth": "linux ", "ovs-dpdk": "ovs   ",
               IO: "io    "}.get(
        it["system"], it["system"])
    mode = it["mode"] or "-"
    return f"{sysname} {it['nfs']} NF {it['size']:>4} B {mode:<14}"


def measure(it: dict, args, logdir: Path, tag: str) -> tuple[float, dict]:
    if it["system"] == "sluice":
        return sluice_fabric.run_sluice(it["nfs"], it["size"], it["mode"], args.warmup, args.duration,
                                        logdir=logdir, tag=tag)
    if it["system"] == "linux-veth":
        return peer_linux.run_linux(it["nfs"], it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)
    if it["system"] == IO:
        return peer_memif.run_io_ceiling(it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)
    if it["system"] == "ovs-dpdk":
        return peer_ovs.run_ovs(it["nfs"], it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)
    return peer_memif.run_peer(it["nfs"], it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)


def trials_session(system: str, nfs: int, args, logdir: Path, tag: str, trial_mode: str | None = None):
    """The system's zero-loss/latency session (see rfc2544.py) for a chain of `nfs` NFs; Sluice's in
    trial_mode (one of --trial-mode's)."""
    size = args.trial_size
    if system == "sluice":
        mode, fifo = sluice_fabric.split_sched(trial_mode or args.trial_modes[0])  # MODE+fifo: nf_sched fifo
        group = sluice_fabric.split_group(mode)[1]  # MODE+group: the NFs as one sluice-group process
        mode, pipes = sluice_fabric.parse_mode(mode)  # MODE+pipes: sluiced.pipes on
        return sluice_fabric.SluiceTrials(nfs=nfs, size=size, mode=mode, logdir=logdir, tag=tag, pipes=pipes,
                                          fifo=fifo, group=group)
    if system == "testpmd-memif":
        return peer_memif.MemifTrials(nfs=nfs, size=size, logdir=logdir, tag=tag)
    if system == "linux-veth":
        return peer_linux.LinuxTrials(nfs=nfs, size=size, logdir=logdir, tag=tag)
    return peer_ovs.OvsTrials(nfs=nfs, size=size, logdir=logdir, tag=tag)


def run_trials(args, logdir: Path, progress: Progress, errors: list[dict]) -> list[dict]:
    """Scenarios 2 and 3: per round, per chain length, per system (alternating) one session that
    searches the zero-loss rate and then (scenario 3) measures latency at LOADS x that rate."""
    # Sluice once per --trial-mode (e.g. adaptive+pipes and adaptive+pipes+group), the peers once;
    # Linux first in each round: its zero-loss rate sets the common load every system is measured at
    order = sorted((s for s in SYSTEMS if s in args.trial_systems), key=lambda s: s != COMMON_REF)
    variants = [(s, m) for s in order for m in (args.trial_modes if s == "sluice" else [None])]
    searches: dict[tuple, list] = {(s, m, n): [] for s, m in variants for n in args.trial_nfs}
    lat_runs: dict[tuple, list] = {(s, m, n, ld): [] for s, m in variants for n in args.trial_nfs
                                   for ld in rfc2544.LOADS}
    common_runs: dict[tuple, list] = {(s, m, n): [] for s, m in variants for n in args.trial_nfs}
    common_pps: dict[tuple, float] = {}  # (round, N) -> the reference's zero-loss rate x COMMON_LOAD
    for rnd in range(args.runs):
        for n in args.trial_nfs:
            for system, mode in variants:
                shown = f"{system} {mode}" if mode and len(args.trial_modes) > 1 else system
                tag = f"r{rnd + 1}-zl-{system}{'-' + mode if mode and len(args.trial_modes) > 1 else ''}-n{n}"
                name = f"round {rnd + 1}: {shown} {n} NF {args.trial_size} B"
                t0 = time.monotonic()
                try:
                    with trials_session(system, n, args, logdir, tag, mode) as sess:
                        res = rfc2544.zero_loss_search(
                            sess, args.start_pps, args.trial_duration, args.trial_warmup,
                            resolution=args.resolution, max_trials=args.max_trials,
                            on_trial=lambda rate, r: progress.note(
                                f"{shown} {n} NF: offered {rate / 1e6:7.3f} Mpps, sent {(r.get('sent_pps') or 0) / 1e6:7.3f}"
                                f" Mpps, lost {r['lost']}"))
                        searches[(system, mode, n)].append(res)
                        bound = " (generator bound)" if res.generator_bound else ""
                        msg = f"zero-loss {name}: {res.zero_loss_pps / 1e6:.3f} Mpps{bound}"
                        if args.latency and res.zero_loss_pps > 0:
                            parts = []
                            for ld in rfc2544.LOADS:
                                r = sess.trial(res.ask_for(ld), args.latency_duration, args.trial_warmup)
                                lat_runs[(system, mode, n, ld)].append(r)
                                lat = r.get("latency_ns") or {}
                                parts.append(f"{ld:.0%}: p50 {lat.get('p50', 0) / 1e3:.1f} p99 {lat.get('p99', 0) / 1e3:.1f} us"
                                             + (f" lost {r['lost']}" if r["lost"] else ""))
                            msg += "; latency " + ", ".join(parts)
                            if system == COMMON_REF:
                                common_pps[(rnd, n)] = COMMON_LOAD * res.zero_loss_pps
                            rate = common_pps.get((rnd, n))
                            if rate:  # every system at the same absolute load (the reference's 50 %)
                                r = sess.trial(rate, args.latency_duration, args.trial_warmup)
                                common_runs[(system, mode, n)].append(r)
                                lat = r.get("latency_ns") or {}
                                msg += (f"; at {rate / 1e6:.3f} Mpps ({COMMON_REF} {COMMON_LOAD:.0%}): p50 "
                                        f"{lat.get('p50', 0) / 1e3:.1f} p99 {lat.get('p99', 0) / 1e3:.1f} us"
                                        + (f" lost {r['lost']}" if r["lost"] else ""))
                    progress.step(f"{msg}  [{time.monotonic() - t0:.1f} s]")
                except BenchError as e:
                    errors.append({"scenario": "zeroloss", "system": system, "nfs": n, "size": args.trial_size,
                                   "mode": mode, "round": rnd + 1, "error": str(e)})
                    progress.step(f"zero-loss {name}: FAILED: {str(e).splitlines()[0]}")
    rows = []
    for (system, mode, n), lst in searches.items():
        row = rfc2544.zeroloss_row(system, n, args.trial_size, mode, lst, args.trial_duration)
        errs = [e["error"] for e in errors if e.get("scenario") == "zeroloss" and e["system"] == system
                and e.get("mode") == mode and e["nfs"] == n]
        if errs:
            row["error"] = errs[-1]
        rows.append(row)
        if args.latency:
            for ld in rfc2544.LOADS:
                rows.append(rfc2544.latency_row(system, n, args.trial_size, mode, ld, lat_runs[(system, mode, n, ld)]))
            if common_runs[(system, mode, n)]:
                row = rfc2544.latency_row(system, n, args.trial_size, mode, COMMON_LOAD, common_runs[(system, mode, n)])
                row.update(scenario=LATENCY_COMMON, rate_of=COMMON_REF)
                rows.append(row)
    return rows


def mode_key(mode) -> tuple:
    """Sort key of a Sluice mode: by wakeup mode, a mode's processes before its group, pipes after none
    (poll, poll+pipes, poll+group, poll+pipes+group)."""
    mode = mode or ""
    return (mode.split("+")[0], sluice_fabric.GROUP_SUFFIX in mode, mode)


def summary_table(results: list[dict]) -> str:
    """Scenario 1 rows: one line per figure, Sluice's ratio to each peer (to the one-core ceiling:
    1-NF rows only) and, for a MODE+pipes row, to MODE without pipes; then the ceiling per size."""
    peers_ = [(IO, "of ceil"), ("testpmd-memif", "vs memif"), ("linux-veth", "vs linux"), ("ovs-dpdk", "vs ovs")]
    lines = [f"{'system':<14} {'NFs':>3} {'size':>5} {'mode':<20} {'median':>8} {'min':>8} {'max':>8} {'Gbps':>7} "
             + " ".join(f"{h:>8}" for _, h in peers_) + f" {'vs no pipes':>11}", "-" * 133]
    rows = [r for r in results if r.get("scenario") in ("chain", "fabric")]
    for r in sorted(rows, key=lambda r: (r["size"], r["nfs"], SYSTEM_ORDER.get(r["system"], 9), mode_key(r["mode"]))):
        if r["median_mpps"] is None:
            lines.append(f"{r['system']:<14} {r['nfs']:>3} {r['size']:>5} {r['mode'] or '-':<20} {'failed':>8}")
            continue
        ratios = []
        for peer, _ in peers_:
            p = gen_report.find(results, peer, r["nfs"], r["size"], None) if r["system"] == "sluice" else None
            ratios.append(f"{r['median_mpps'] / p['median_mpps']:.2f}x" if p and p["median_mpps"] else "")
        plain = None
        if r["system"] == "sluice" and sluice_fabric.PIPES_SUFFIX in (r["mode"] or ""):
            plain = gen_report.find(results, "sluice", r["nfs"], r["size"],
                                    r["mode"].replace(sluice_fabric.PIPES_SUFFIX, "", 1))
        ratios.append(f"{r['median_mpps'] / plain['median_mpps']:.2f}x" if plain and plain["median_mpps"] else "")
        lines.append(f"{r['system']:<14} {r['nfs']:>3} {r['size']:>5} {r['mode'] or '-':<20} {r['median_mpps']:>8.2f} "
                     f"{r['min_mpps']:>8.2f} {r['max_mpps']:>8.2f} {r['gbps_median']:>7.2f} "
                     + " ".join(f"{x:>8}" for x in ratios[:-1]) + f" {ratios[-1]:>11}")
    for size in sorted({r["size"] for r in rows}):
        c = gen_report.find(results, IO, 1, size, None)
        if not c:
            continue
        best = max((r for r in rows if r["system"] == "sluice" and r["nfs"] == 1 and r["size"] == size
                    and r["median_mpps"]), key=lambda r: r["median_mpps"], default=None)
        lines.append(f"one-core ceiling (testpmd io, net_null0 -> net_null1 on core 1, no NF), {size} B: "
                     f"{c['median_mpps']:.2f} Mpps" + (f"; Sluice 1 NF best ({best['mode']}) {best['median_mpps']:.2f} "
                                                       f"Mpps = {best['median_mpps'] / c['median_mpps']:.2f} of it"
                                                       if best and c["median_mpps"] else ""))
    return "\n".join(lines)


def trials_table(results: list[dict]) -> str:
    """Scenario 2 and 3 rows."""
    lines = []

    def who(r):
        return f"{r['system']} {r['mode']}" if r.get("mode") else r["system"]
    zl = [r for r in results if r.get("scenario") == "zeroloss"]
    if zl:
        lines += [f"{'zero-loss':<30} {'NFs':>3} {'median Mpps':>12} {'min':>8} {'max':>8}  generator-bound runs", "-" * 80]
        for r in sorted(zl, key=lambda r: (r["nfs"], SYSTEM_ORDER.get(r["system"], 9), mode_key(r.get("mode")))):
            if r["median_pps"] is None:
                lines.append(f"{who(r):<30} {r['nfs']:>3} {'failed':>12}")
                continue
            gb = sum(1 for b in r["runs_generator_bound"] if b)
            lines.append(f"{who(r):<30} {r['nfs']:>3} {r['median_pps'] / 1e6:>12.3f} {r['min_pps'] / 1e6:>8.3f} "
                         f"{r['max_pps'] / 1e6:>8.3f}  {gb} of {len(r['runs_generator_bound'])}")
    lat = [r for r in results if r.get("scenario") == "latency"]
    if lat:
        lines += ["", f"{'latency (us)':<30} {'NFs':>3} {'load':>5} {'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9} {'lost':>6}",
                  "-" * 80]
        for r in sorted(lat, key=lambda r: (r["nfs"], r["load"], SYSTEM_ORDER.get(r["system"], 9), mode_key(r.get("mode")))):
            m = r.get("median_ns")
            if not m:
                lines.append(f"{who(r):<30} {r['nfs']:>3} {r['load']:>5.0%} {'-':>9}")
                continue
            lines.append(f"{who(r):<30} {r['nfs']:>3} {r['load']:>5.0%} " + " ".join(
                f"{m[p] / 1e3:>9.1f}" for p in ("p50", "p99", "p999", "max")) + f" {sum(r['runs_lost']):>6}")
    com = [r for r in results if r.get("scenario") == LATENCY_COMMON]
    if com:
        lines += ["", f"{'at ' + COMMON_REF + ' ' + format(COMMON_LOAD, '.0%') + ' (us)':<30} {'NFs':>3} {'Mpps':>5} "
                  f"{'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9} {'lost':>6}", "-" * 80]
        for r in sorted(com, key=lambda r: (r["nfs"], SYSTEM_ORDER.get(r["system"], 9), mode_key(r.get("mode")))):
            m = r.get("median_ns")
            rate = statistics.median(r["runs_rate_pps"]) / 1e6 if r.get("runs_rate_pps") else 0
            if not m:
                lines.append(f"{who(r):<30} {r['nfs']:>3} {rate:>5.2f} {'-':>9}")
                continue
            lines.append(f"{who(r):<30} {r['nfs']:>3} {rate:>5.2f} " + " ".join(
                f"{m[p] / 1e3:>9.1f}" for p in ("p50", "p99", "p999", "max")) + f" {sum(r['runs_lost']):>6}")
    return "\n".join(lines)


def available_systems(wanted: list[str], need_trials: bool) -> tuple[list[str], dict[str, str]]:
    """The wanted systems whose tools are here, and why the others are skipped."""
    ok, skipped = [], {}
    for s in wanted:
        try:
            if s == "sluice":
                sluice_fabric.check_binaries((sluice_fabric.NF_GEN, sluice_fabric.NF_SINK) if need_trials else ())
            elif s == IO:
                if not (Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)):
                    raise BenchError(f"dpdk-testpmd not found ({TESTPMD}); install Debian's 'dpdk' package")
            elif s == "testpmd-memif":
                if not (Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)):
                    raise BenchError(f"dpdk-testpmd not found ({TESTPMD}); install Debian's 'dpdk' package")
                if need_trials:
                    peer_memif.check_tester()
            elif s == "linux-veth":
                peer_linux.check_tools()  # also compiles bench/udpgen.c
            elif s == "ovs-dpdk":
                peer_ovs.check_tools()
                if need_trials:
                    peer_memif.check_tester()
            ok.append(s)
        except BenchError as e:
            skipped[s] = str(e)
    return ok, skipped


def default_systems() -> list[str]:
    """Every system; the one-core ceiling only when dpdk-testpmd is here (the others are skipped with
    the reason when their tools are missing; the ceiling is a reference, not a system to report missing)."""
    have_testpmd = Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)
    return [s for s in SYSTEMS if s != IO or have_testpmd]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="*", help="chain, zeroloss, latency (default: all)")
    ap.add_argument("--scenarios", default=None, help="comma list, same as the positional SCENARIOs")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run of every scenario (1 round, short windows, 1 NF, 64 B; checks that things "
                         "run, never how fast)")
    ap.add_argument("--runs", type=int, default=None, help="rounds (figures are medians over them; default 5)")
    ap.add_argument("--duration", type=float, default=None, help="scenario 1 window per run, seconds (default 3)")
    ap.add_argument("--warmup", type=float, default=None, help="scenario 1 warm-up before each window, s (default 1)")
    ap.add_argument("--systems", default=",".join(default_systems()),
                    help=f"comma list of {', '.join(SYSTEMS)} (default: all; {IO}, the one-core ceiling of "
                         "scenario 1 at 1 NF, only when dpdk-testpmd is installed)")
    ap.add_argument("--sizes", default=None, help="scenario 1 frame sizes in bytes (default 64,1500)")
    ap.add_argument("--nfs", default=None, help="scenario 1 chain lengths (default 1,2,...,8)")
    ap.add_argument("--peer-nfs", default=None, help="scenario 1 chain lengths for testpmd-memif and ovs-dpdk "
                    "(default: as --nfs)")
    ap.add_argument("--linux-nfs", default=None, help="scenario 1 chain lengths for linux-veth (default: as --nfs)")
    ap.add_argument("--modes", default=None,
                    help="scenario 1 Sluice modes: an NF wakeup mode (poll, adaptive, block), or MODE+pipes for the "
                         "same with NF-to-NF pipes (sluiced.pipes), and +group for the NFs as one sluice-group "
                         "process (poll+pipes+group); default poll,poll+pipes,adaptive,adaptive+pipes "
                         "(--quick: poll,poll+pipes)")
    ap.add_argument("--trial-nfs", default=None, help="scenarios 2-3 chain lengths (default 1,3)")
    ap.add_argument("--trial-size", type=int, default=66,
                    help="scenarios 2-3 frame size (default 66: the smallest that holds the 24-byte stamp)")
    ap.add_argument("--trial-mode", default="adaptive", help="scenarios 2-3 Sluice NF wakeup mode, "
                    "or MODE+pipes with NF-to-NF pipes, +group for the NFs as one sluice-group process, and +fifo "
                    "for sluiced.nf_sched fifo, e.g. adaptive+pipes+fifo; a comma list measures each "
                    "(adaptive+pipes,adaptive+pipes+group) (default adaptive)")
    ap.add_argument("--trial-duration", type=float, default=None, help="counted part of a search trial, s (default 1)")
    ap.add_argument("--trial-warmup", type=float, default=None, help="warm-up before each trial, s (default 0.3)")
    ap.add_argument("--latency-duration", type=float, default=None, help="latency trial length, s (default 2)")
    ap.add_argument("--start-pps", type=float, default=15e6,
                    help="first (probe) offered rate of a search; its achieved rate is the generator's ceiling")
    ap.add_argument("--resolution", type=float, default=0.02, help="search stops when bounds are this close (relative)")
    ap.add_argument("--max-trials", type=int, default=None, help="trials per search, probe included (default 11)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="output directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="before each measurement wait up to S s for other sluiced/testpmd/NF processes to end "
                         "(default 0: refuse to start when some run, and only warn during the run)")
    ap.add_argument("--allow-busy", action="store_true",
                    help="measure even when other data-plane processes run (figures will be disturbed; "
                         "the JSON records it)")
    ap.add_argument("--keep-logs", action="store_true", help="keep process logs even when all went well")
    args = ap.parse_args(argv)

    q = args.quick
    names = list(args.scenario) + (parse_list(args.scenarios) if args.scenarios else [])
    scenarios = []
    for n in names or SCENARIOS:
        n = SCENARIO_ALIASES.get(n, n)
        if n not in SCENARIOS:
            ap.error(f"unknown scenario {n!r}; available: {', '.join(SCENARIOS)} (alias: fabric = chain)")
        if n not in scenarios:
            scenarios.append(n)
    args.latency = "latency" in scenarios
    want_trials = "zeroloss" in scenarios or args.latency
    if args.latency and "zeroloss" not in scenarios:
        scenarios.insert(scenarios.index("latency"), "zeroloss")  # latency needs the zero-loss rate

    args.runs = args.runs if args.runs is not None else (1 if q else 5)
    args.duration = args.duration if args.duration is not None else (0.5 if q else 3.0)
    args.warmup = args.warmup if args.warmup is not None else (0.2 if q else 1.0)
    args.sizes = parse_list(args.sizes or ("64" if q else "64,1500"), int)
    args.nfs = parse_list(args.nfs or ("1" if q else "1,2,3,4,5,6,7,8"), int)
    args.peer_nfs = parse_list(args.peer_nfs, int) if args.peer_nfs else list(args.nfs)
    args.linux_nfs = parse_list(args.linux_nfs, int) if args.linux_nfs else list(args.nfs)
    args.modes = parse_list(args.modes or ("poll,poll+pipes" if q else "poll,poll+pipes,adaptive,adaptive+pipes"))
    args.trial_nfs = parse_list(args.trial_nfs or ("1" if q else "1,3"), int)
    args.trial_duration = args.trial_duration if args.trial_duration is not None else (0.2 if q else 1.0)
    args.trial_warmup = args.trial_warmup if args.trial_warmup is not None else (0.1 if q else 0.3)
    args.latency_duration = args.latency_duration if args.latency_duration is not None else (0.2 if q else 2.0)
    args.max_trials = args.max_trials if args.max_trials is not None else (3 if q else 11)
    for m in args.modes:
        if m not in sluice_fabric.MODES:
            ap.error(f"unknown Sluice mode {m!r} ({', '.join(sluice_fabric.MODES)})")
    args.trial_modes = parse_list(args.trial_mode)
    for m in args.trial_modes:
        if sluice_fabric.split_sched(m)[0] not in sluice_fabric.MODES:
            ap.error(f"unknown NF wakeup mode {m!r} ({', '.join(sluice_fabric.MODES)})")
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0 or args.trial_duration <= 0:
        ap.error("--runs must be >= 1, --duration and --trial-duration > 0, --warmup >= 0")
    if not 66 <= args.trial_size <= 1514:
        ap.error("--trial-size must be 66..1514 (the stamp needs 66 bytes)")
    if any(n < 1 or n > 16 for n in [*args.nfs, *args.trial_nfs]):
        ap.error("chain lengths must be 1..16")
    wanted = parse_list(args.systems)
    for s in wanted:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; available: {', '.join(SYSTEMS)}")

    # --- preflight: clear errors before anything starts
    try:
        if shutil.which("stdbuf") is None or shutil.which("taskset") is None:
            raise BenchError("stdbuf and taskset (coreutils, util-linux) are required")
        if os.geteuid() != 0:
            raise BenchError("run as root: DPDK needs huge pages and raw memory access")
        busy = wait_quiet(args.wait_quiet)
        if busy and args.allow_busy:
            print("run.py: warning: other data-plane processes are running (--allow-busy): " + ", ".join(busy),
                  file=sys.stderr)
        elif busy:
            raise BenchError("other data-plane processes are running and would share the cores: "
                             + ", ".join(busy) + "; stop them first (or use --wait-quiet S or --allow-busy)")
    except BenchError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    args.systems, skipped = available_systems(wanted, want_trials)
    for s, why in skipped.items():
        print(f"run.py: skipping {s}: {why}", file=sys.stderr)
    if "sluice" not in args.systems and "sluice" in wanted:
        print("run.py: error: Sluice itself cannot run: " + skipped["sluice"], file=sys.stderr)
        return 2
    if "chain" not in scenarios and IO in args.systems:
        args.systems.remove(IO)  # the ceiling is a scenario 1 figure; it has no trials
    args.trial_systems = [s for s in args.systems if s != IO]
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        print("run.py: warning: lcores 0 and 1 are not both available; pinning assumes them", file=sys.stderr)
    hp = hugepages_2m()
    if not use_hugepages():
        print(f"run.py: note: {hp['free']} free 2 MiB huge pages, hugetlbfs mounted: {hp['mounted']}; DPDK runs on "
              f"4 KiB pages ({' '.join(eal_memory_args())}). For representative figures: "
              "echo 512 > /proc/sys/vm/nr_hugepages; mount -t hugetlbfs nodev /dev/hugepages", file=sys.stderr)

    started = dt.datetime.now(dt.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    machine = machine_info()
    try:
        machine["loadavg"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass
    machine["other_dataplanes_at_start"] = other_dataplanes()
    machine["dpdk_memory"] = "huge pages" if use_hugepages() else "4 KiB pages (--no-huge)"
    # the host moves this from hour to hour; latency of NFs sharing core 0 rests on it
    machine["switch_cost_start"] = switch_cost(sluice_fabric.BUILD, cpu=int(sluice_fabric.NF_CORE))
    if "latency" in scenarios:  # the tail's floor: what the CPUs themselves lose (bench/notes.md)
        machine["cpu_stalls"] = cpu_stalls(sluice_fabric.BUILD, seconds=2.0 if args.quick else 10.0)
    items = plan(args) if "chain" in scenarios else []
    n_variants = len(args.trial_systems) + (len(args.trial_modes) - 1 if "sluice" in args.trial_systems else 0)
    n_sessions = len(args.trial_nfs) * n_variants * args.runs if want_trials else 0
    logdir = Path(tempfile.mkdtemp(prefix=f"sluice-bench-{stamp}-"))
    total = len(items) * args.runs + n_sessions
    if total == 0:
        print("run.py: nothing to measure with these options", file=sys.stderr)
        return 2
    est = len(items) * args.runs * (args.warmup + args.duration + 2.0) + n_sessions * (
        args.max_trials * (args.trial_duration + args.trial_warmup + 0.8)
        + (3 * (args.latency_duration + args.trial_warmup + 0.8) if args.latency else 0) + 3.0)
    print(f"run.py: scenarios {', '.join(scenarios)}; systems {', '.join(args.systems)}; {args.runs} round(s); "
          f"{len(items) * args.runs} scenario-1 measurements ({args.warmup:g} s warm-up + {args.duration:g} s window), "
          f"{n_sessions} zero-loss sessions; about {est / 60:.0f} min; logs in {logdir}", flush=True)
    progress = Progress(total)

    runs: dict[tuple, list[float]] = {key(it): [] for it in items}
    extras: dict[tuple, dict] = {}
    foreign: dict[tuple, list[float]] = {key(it): [] for it in items}
    errors: list[dict] = []
    t_start = time.monotonic()
    interrupted = False
    trial_rows: list[dict] = []
    try:
        for rnd in range(args.runs if items else 0):
            for it in items:
                tag = f"r{rnd + 1}-{it['system']}-n{it['nfs']}-s{it['size']}-{it['mode'] or 'io'}"
                busy = wait_quiet(args.wait_quiet)
                if busy:
                    print(f"run.py: warning: measuring while other data-plane processes run: {', '.join(busy)}",
                          file=sys.stderr, flush=True)
                t0 = time.monotonic()
                try:
                    mpps, extra = measure(it, args, logdir, tag)
                    runs[key(it)].append(mpps)
                    fc = extra.pop("foreign_cpu", None)
                    foreign[key(it)].append(fc)
                    if extra:
                        extras[key(it)] = extra
                    warn = f"  (other load {fc:.0%} of CPU!)" if fc is not None and fc > 0.05 else ""
                    progress.step(f"round {rnd + 1}: {label(it)} {mpps:8.2f} Mpps "
                                  f"({mpps * it['size'] * 8 / 1000:7.2f} Gbps)  [{time.monotonic() - t0:.1f} s]{warn}")
                except BenchError as e:
                    errors.append({**it, "scenario": "chain", "round": rnd + 1, "error": str(e)})
                    progress.step(f"round {rnd + 1}: {label(it)}   FAILED: {str(e).splitlines()[0]}")
        if want_trials:
            trial_rows = run_trials(args, logdir, progress, errors)
    except KeyboardInterrupt:
        interrupted = True
        print("run.py: interrupted; writing what was measured", file=sys.stderr)

    results = []
    for it in items:
        vals = runs[key(it)]
        r = {"system": it["system"], "scenario": "chain", "nfs": it["nfs"], "size": it["size"], "mode": it["mode"]}
        if it["system"] == "sluice":  # mode MODE+pipes: sluiced.pipes on
            r["pipes"] = sluice_fabric.parse_mode(it["mode"])[1]
        r |= {"runs_mpps": [round(v, 4) for v in vals],
              "median_mpps": round(statistics.median(vals), 4) if vals else None,
              "min_mpps": round(min(vals), 4) if vals else None,
              "max_mpps": round(max(vals), 4) if vals else None}
        r["gbps_median"] = round(r["median_mpps"] * it["size"] * 8 / 1000, 3) if vals else None
        r["runs_foreign_cpu"] = foreign[key(it)]
        if key(it) in extras:
            r["last_run_stats"] = extras[key(it)]
        errs = [e["error"] for e in errors if e.get("scenario") == "chain" and key(e) == key(it)]
        if errs:
            r["error"] = errs[-1]
        results.append(r)
    results += trial_rows

    machine["switch_cost_end"] = switch_cost(sluice_fabric.BUILD, cpu=int(sluice_fabric.NF_CORE))
    out = {
        "machine": machine,
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t_start, 1),
        "config": {"scenarios": scenarios, "quick": args.quick, "runs": args.runs, "duration_s": args.duration,
                   "warmup_s": args.warmup, "systems": args.systems, "skipped_systems": skipped,
                   "sizes": args.sizes, "nfs": args.nfs,
                   "peer_nfs": args.peer_nfs, "linux_nfs": args.linux_nfs, "modes": args.modes, "interrupted": interrupted,
                   "trial_nfs": args.trial_nfs, "trial_size": args.trial_size, "trial_mode": args.trial_mode,
                   "trial_duration_s": args.trial_duration, "trial_warmup_s": args.trial_warmup,
                   "latency_duration_s": args.latency_duration, "latency_loads": list(rfc2544.LOADS),
                   "search": {"resolution": args.resolution, "max_trials": args.max_trials,
                              "start_pps": args.start_pps},
                   "pinning": {"switch_core": 1, "nf_core": 0,
                               "sluiced_lcores": sluice_fabric.SLUICED_LCORES, "nf_taskset": sluice_fabric.NF_CORE,
                               "testpmd_switch": "-l 0,1 --main-lcore 0", "testpmd_nf": "-l 1,0 --main-lcore 1",
                               "testpmd_io": "-l 0,1 --main-lcore 0 --nb-cores=1 (forwarding lcore 1)",
                               "ovs": "pmd-cpu-mask=0x2 (PMD thread on core 1), dpdk-lcore-mask=0x1; NFs as testpmd",
                               "testers": "Sluice gen/sink NFs, DPDK tester, Linux udpgen/sink: core 0, with the NFs",
                               "linux_veth": "udpgen taskset -c 0; first NF's ingress veth RPS to core 1, so the "
                                             "kernel forwarding (NET_RX softirq) of the whole chain runs on core 1"},
                   "linux_veth_generator": "bench/udpgen.c: AF_PACKET, PACKET_QDISC_BYPASS, sendmmsg x64, "
                                           "1024 UDP port pairs (no pktgen in this kernel)",
                   "testpmd_io": "the one-core ceiling, scenario 1 at N = 1 (rows nfs 1, no NF): one dpdk-testpmd, "
                                 "--forward-mode=io --port-topology=paired, net_null0,size=B,copy=0 -> "
                                 "net_null1,size=B,copy=0,no-rx=1 (one direction: port 1 receives nothing), one "
                                 "forwarding lcore on core 1; rate = growth of port 1's TX-packets",
                   "sluice_pool_mbufs": 16384, "sluice_ring_size": 1024, "testpmd_total_num_mbufs": 16384,
                   "sluice_pipes": "modes MODE+pipes: sluiced.pipes true, each fwd reads its upstream fwd's pipe "
                                   "ring directly (docs/architecture.md \"Pipes\"); other modes: pipes off"},
        "results": results,
        "errors": errors,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    jpath = args.results / f"{stamp}.json"
    jpath.write_text(json.dumps(out, indent=1) + "\n")
    print()
    if items:
        print(summary_table(results))
    if trial_rows:
        print(trials_table(results))
    print(f"\nrun.py: wrote {jpath}")
    for png in gen_report.plots(out, args.results / stamp):
        print(f"run.py: wrote {png}")
    if not args.no_report and args.results.resolve() == RESULTS.resolve():
        gen_report.main([])
    if errors or args.keep_logs:
        print(f"run.py: process logs kept in {logdir}")
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    return 1 if errors or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
