"""`sluice bench`: run the benchmark suite (bench/run.py of the source tree) and regenerate
BENCHMARKS.md."""

import subprocess
import sys
from pathlib import Path

from .common import die, sub


def bench_script():
    """bench/run.py of the source tree this package was installed (editable) from."""
    return Path(__file__).resolve().parents[3] / "bench" / "run.py"


def cmd_bench(args):
    script = bench_script()
    if not script.is_file():
        return die(f"the benchmark suite lives in the source tree (bench/run.py) and is not at {script}")
    argv = [sys.executable, str(script)]
    if args.scenarios:
        argv += ["--scenarios", ",".join(args.scenarios)]
    for flag in ("runs", "duration", "systems", "sizes", "nfs", "trial_nfs", "wait_quiet"):
        v = getattr(args, flag)
        if v is not None:
            argv += ["--" + flag.replace("_", "-"), str(v)]
    if args.quick:
        argv.append("--quick")
    return subprocess.call(argv)


def register(subs):
    s = sub(subs, "bench", "run benchmark scenarios (bench/run.py) and regenerate BENCHMARKS.md",
            "sluice bench --quick                 # smoke run of every scenario, well under a minute\n"
            "sluice bench                         # scenarios chain, zeroloss, latency; 5 rounds (~1 h)\n"
            "sluice bench zeroloss --trial-nfs 1  # the RFC 2544 search for one NF only",
            description="Run the named scenarios (default: all) with Sluice and its peers alternating in the "
                        "same rounds, print progress and a summary table, write bench/results/<timestamp>.json "
                        "and PNG plots, and regenerate BENCHMARKS.md. Needs root and a built tree; stops with a "
                        "clear message while another sluiced or testpmd is running (see --wait-quiet).")
    s.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help="chain (1: chain length sweep), zeroloss (2: RFC 2544 zero-loss rate), latency (3: "
                        "latency at 10/50/90%% of it); default: all")
    s.add_argument("--quick", action="store_true", help="every scenario briefly: checks that things run, not speed")
    s.add_argument("--runs", type=int, metavar="N", help="rounds per figure (default 5)")
    s.add_argument("--duration", type=float, metavar="S", help="scenario 1 window per run (default 3 s)")
    s.add_argument("--systems", metavar="A,B", help="systems to measure (default: Sluice and every peer)")
    s.add_argument("--sizes", metavar="B,B", help="frame sizes in bytes (default 64,1500)")
    s.add_argument("--nfs", metavar="N,N", help="scenario 1 chain lengths (default 1..8)")
    s.add_argument("--trial-nfs", metavar="N,N", help="scenarios 2-3 chain lengths (default 1,3)")
    s.add_argument("--wait-quiet", type=float, metavar="S", help="wait up to S seconds for other DPDK runs to end")
    s.set_defaults(func=cmd_bench)
