#!/usr/bin/env python3
"""Sluice benchmark harness.

    sudo .venv/bin/python bench/run.py [--quick] [--runs N] [--duration S] [--scenarios fabric]

Scenario "fabric": Mpps of `net_null -> N x fwd -> net_null` for Sluice (NF wakeup poll and
adaptive) and, in the same run, for a DPDK peer (dpdk-testpmd switch + dpdk-testpmd NFs over
net_memif) and a Linux peer (kernel IPv4 forwarding through one network namespace per NF, veth
pairs, userspace UDP flood; bench/peer_linux.py). Within each round every system is measured once per (N, size), alternating, so drift
hits all of them; each figure is the median of the rounds, with min and max.

Writes bench/results/<UTC stamp>.json and <stamp>-fabric.png, then regenerates BENCHMARKS.md
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
from common import RESULTS, TESTPMD, BenchError, eal_memory_args, hugepages_2m, machine_info, use_hugepages  # noqa: E402
from peer_memif import run_peer  # noqa: E402
import peer_linux  # noqa: E402
import sluice_fabric  # noqa: E402

SYSTEMS = ("sluice", "testpmd-memif", "linux-veth")
SYSTEM_ORDER = {s: i for i, s in enumerate(SYSTEMS)}


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
        if comm in ("sluiced", "dpdk-testpmd", "sluice-nf-fwd") or comm.startswith("sluice-nf"):
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
    for size in args.sizes:
        for n in args.nfs:
            for i, mode in enumerate(args.modes):
                if "sluice" in args.systems:
                    items.append({"system": "sluice", "nfs": n, "size": size, "mode": mode})
                # the peer sits between the Sluice modes so the systems alternate
                if i == 0:
                    items += peers(args, n, size)
            if not args.modes:
                items += peers(args, n, size)
    return items


def peers(args, n: int, size: int) -> list[dict]:
    """The peer systems' items for one (N, size)."""
    out = []
    if "testpmd-memif" in args.systems and n in args.peer_nfs:
        out.append({"system": "testpmd-memif", "nfs": n, "size": size, "mode": None})
    if "linux-veth" in args.systems and n in args.linux_nfs:
        out.append({"system": "linux-veth", "nfs": n, "size": size, "mode": None})
    return out


def key(it: dict) -> tuple:
    return (it["system"], it["nfs"], it["size"], it["mode"])


def label(it: dict) -> str:
    sysname = {"sluice": "sluice", "testpmd-memif": "memif ", "linux-veth": "linux "}.get(it["system"], it["system"])
    mode = it["mode"] or "-"
    return f"{sysname} {it['nfs']} NF {it['size']:>4} B {mode:<8}"


def measure(it: dict, args, logdir: Path, tag: str) -> tuple[float, dict]:
    if it["system"] == "sluice":
        return sluice_fabric.run_sluice(it["nfs"], it["size"], it["mode"], args.warmup, args.duration,
                                        logdir=logdir, tag=tag)
    if it["system"] == "linux-veth":
        return peer_linux.run_linux(it["nfs"], it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)
    return run_peer(it["nfs"], it["size"], args.warmup, args.duration, logdir=logdir, tag=tag)


def summary_table(results: list[dict]) -> str:
    lines = [f"{'system':<14} {'NFs':>3} {'size':>5} {'mode':<8} {'median':>8} {'min':>8} {'max':>8} {'Gbps':>7} "
             f"{'vs memif':>8} {'vs linux':>9}",
             "-" * 90]
    for r in sorted(results, key=lambda r: (r["size"], r["nfs"], SYSTEM_ORDER.get(r["system"], 9), r["mode"] or "")):
        if r["median_mpps"] is None:
            lines.append(f"{r['system']:<14} {r['nfs']:>3} {r['size']:>5} {r['mode'] or '-':<8} {'failed':>8}")
            continue
        ratios = []
        for peer in ("testpmd-memif", "linux-veth"):
            p = gen_report.find(results, peer, r["nfs"], r["size"], None) if r["system"] == "sluice" else None
            ratios.append(f"{r['median_mpps'] / p['median_mpps']:.2f}x" if p and p["median_mpps"] else "")
        lines.append(f"{r['system']:<14} {r['nfs']:>3} {r['size']:>5} {r['mode'] or '-':<8} {r['median_mpps']:>8.2f} "
                     f"{r['min_mpps']:>8.2f} {r['max_mpps']:>8.2f} {r['gbps_median']:>7.2f} {ratios[0]:>8} {ratios[1]:>9}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, 1 s windows, 0.3 s warm-up, peer at 1 NF only")
    ap.add_argument("--runs", type=int, default=None, help="rounds (figures are medians over them; default 5)")
    ap.add_argument("--duration", type=float, default=None, help="measurement window per run, seconds (default 5)")
    ap.add_argument("--warmup", type=float, default=None, help="warm-up before each window, seconds (default 2)")
    ap.add_argument("--scenarios", default="fabric", help="comma list; only 'fabric' exists")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list of {', '.join(SYSTEMS)}")
    ap.add_argument("--sizes", default="64,1500", help="frame sizes in bytes (default 64,1500)")
    ap.add_argument("--nfs", default="1,2,3", help="chain lengths (default 1,2,3)")
    ap.add_argument("--peer-nfs", default=None, help="chain lengths for the testpmd-memif peer (default: as --nfs; --quick: 1)")
    ap.add_argument("--linux-nfs", default=None, help="chain lengths for the linux-veth peer (default: as --nfs)")
    ap.add_argument("--modes", default="poll,adaptive", help="Sluice NF wakeup modes (poll, adaptive, block)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="output directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="before each measurement wait up to S s for other sluiced/testpmd/NF processes to end "
                         "(default 0: refuse to start when some run, and only warn during the run)")
    ap.add_argument("--allow-busy", action="store_true",
                    help="measure even when other data-plane processes run (figures will be disturbed; "
                         "the JSON records it)")
    ap.add_argument("--keep-logs", action="store_true", help="keep process logs even when all went well")
    args = ap.parse_args()

    args.runs = args.runs if args.runs is not None else (1 if args.quick else 5)
    args.duration = args.duration if args.duration is not None else (1.0 if args.quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 2.0)
    scenarios = parse_list(args.scenarios)
    if scenarios != ["fabric"]:
        ap.error(f"unknown scenario(s) {scenarios}; available: fabric")
    args.systems = parse_list(args.systems)
    for s in args.systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}; available: {', '.join(SYSTEMS)}")
    args.sizes = parse_list(args.sizes, int)
    args.nfs = parse_list(args.nfs, int)
    args.peer_nfs = parse_list(args.peer_nfs, int) if args.peer_nfs else ([1] if args.quick else list(args.nfs))
    args.linux_nfs = parse_list(args.linux_nfs, int) if args.linux_nfs else list(args.nfs)
    args.modes = parse_list(args.modes)
    for m in args.modes:
        if m not in ("poll", "adaptive", "block"):
            ap.error(f"unknown mode {m!r}")
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0:
        ap.error("--runs must be >= 1, --duration > 0, --warmup >= 0")

    # --- preflight: clear errors before anything starts
    try:
        if "sluice" in args.systems:
            sluice_fabric.check_binaries()
        if "testpmd-memif" in args.systems and not (Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)):
            raise BenchError(f"dpdk-testpmd not found ({TESTPMD}); install Debian's 'dpdk' package or set "
                             "SLUICE_BENCH_TESTPMD, or pass --systems sluice")
        if "linux-veth" in args.systems:
            peer_linux.check_tools()  # also compiles bench/udpgen.c
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
    items = plan(args)
    if not items:
        print("run.py: nothing to measure with these options", file=sys.stderr)
        return 2
    logdir = Path(tempfile.mkdtemp(prefix=f"sluice-bench-{stamp}-"))
    total = len(items) * args.runs
    print(f"run.py: {len(items)} figures x {args.runs} round(s), {args.warmup:g} s warm-up + {args.duration:g} s window "
          f"each (about {total * (args.warmup + args.duration + 1.0) / 60:.1f} min); logs in {logdir}", flush=True)

    runs: dict[tuple, list[float]] = {key(it): [] for it in items}
    extras: dict[tuple, dict] = {}
    foreign: dict[tuple, list[float]] = {key(it): [] for it in items}
    errors: list[dict] = []
    done = 0
    t_start = time.monotonic()
    interrupted = False
    try:
        for rnd in range(args.runs):
            for it in items:
                done += 1
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
                    print(f"[{done:>3}/{total}] round {rnd + 1}: {label(it)} {mpps:8.2f} Mpps "
                          f"({mpps * it['size'] * 8 / 1000:7.2f} Gbps)  [{time.monotonic() - t0:.1f} s]{warn}", flush=True)
                except BenchError as e:
                    errors.append({**it, "round": rnd + 1, "error": str(e)})
                    first = str(e).splitlines()[0]
                    print(f"[{done:>3}/{total}] round {rnd + 1}: {label(it)}   FAILED: {first}", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("run.py: interrupted; writing what was measured", file=sys.stderr)

    results = []
    for it in items:
        vals = runs[key(it)]
        r = {"system": it["system"], "scenario": "fabric", "nfs": it["nfs"], "size": it["size"], "mode": it["mode"],
             "runs_mpps": [round(v, 4) for v in vals],
             "median_mpps": round(statistics.median(vals), 4) if vals else None,
             "min_mpps": round(min(vals), 4) if vals else None,
             "max_mpps": round(max(vals), 4) if vals else None}
        r["gbps_median"] = round(r["median_mpps"] * it["size"] * 8 / 1000, 3) if vals else None
        r["runs_foreign_cpu"] = foreign[key(it)]
        if key(it) in extras:
            r["last_run_stats"] = extras[key(it)]
        errs = [e["error"] for e in errors if key(e) == key(it)]
        if errs:
            r["error"] = errs[-1]
        results.append(r)

    out = {
        "machine": machine,
        "started": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t_start, 1),
        "config": {"scenarios": scenarios, "quick": args.quick, "runs": args.runs, "duration_s": args.duration,
                   "warmup_s": args.warmup, "systems": args.systems, "sizes": args.sizes, "nfs": args.nfs,
                   "peer_nfs": args.peer_nfs, "linux_nfs": args.linux_nfs, "modes": args.modes, "interrupted": interrupted,
                   "pinning": {"switch_core": 1, "nf_core": 0,
                               "sluiced_lcores": sluice_fabric.SLUICED_LCORES, "nf_taskset": sluice_fabric.NF_CORE,
                               "testpmd_switch": "-l 0,1 --main-lcore 0", "testpmd_nf": "-l 1,0 --main-lcore 1",
                               "linux_veth": "udpgen taskset -c 0; first NF's ingress veth RPS to core 1, so the "
                                             "kernel forwarding (NET_RX softirq) of the whole chain runs on core 1"},
                   "linux_veth_generator": "bench/udpgen.c: AF_PACKET, PACKET_QDISC_BYPASS, sendmmsg x64, "
                                           "1024 UDP port pairs (no pktgen in this kernel)",
                   "sluice_pool_mbufs": 16384, "sluice_ring_size": 1024, "testpmd_total_num_mbufs": 16384},
        "results": results,
        "errors": errors,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    jpath = args.results / f"{stamp}.json"
    jpath.write_text(json.dumps(out, indent=1) + "\n")
    print()
    print(summary_table(results))
    print(f"\nrun.py: wrote {jpath}")
    png = args.results / f"{stamp}-fabric.png"
    if any(r["median_mpps"] is not None for r in results) and gen_report.plot(out, png):
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
