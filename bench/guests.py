#!/usr/bin/env python3
"""Guest NFs vs process NFs (issue 17, docs/guests.md): Mpps through chains of 1 and 3 fwd NFs at 64
and 1500 B, every NF a process or every NF in a guest, alternating within each round; plus each
guest's boot-to-attached time and its QEMU's resident memory.

    sudo .venv/bin/python bench/guests.py [--runs 3] [--nfs 1,3] [--sizes 64,1500] [--quick]

Guests run under the accelerator sluice.guests.accel() picks: KVM where /dev/kvm boots a stock kernel,
else TCG (QEMU's emulator, e.g. on a PVM host): the JSON records which. Results:
bench/results/<stamp>-guests.json; a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, BenchError  # noqa: E402
from peer_memif import measure_rate  # noqa: E402
from sluice_fabric import SluiceFabric  # noqa: E402

sys.path.insert(0, str(REPO / "python"))
from sluice import guests as sg  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def one(nfs: int, size: int, where: str, mode: str, warmup: float, duration: float) -> dict:
    g = frozenset(range(1, nfs + 1)) if where == "guest" else frozenset()
    with SluiceFabric(nfs=nfs, size=size, mode=mode, guests=g) as fab:
        mpps, foreign = measure_rate(fab.delivered, warmup, duration, fab.pids())
        fab.check_alive()
        r = {"mpps": round(mpps, 4), "foreign_cpu": round(foreign, 4)}
        if g:
            r["attach_s"] = list(fab.attach_s.values())
            r["qemu_rss_mib"] = [round(rss_mib(p.pid), 1) for p, out in fab.nf_procs if out.name.startswith("guest")]
        return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nfs", default="1,3")
    ap.add_argument("--sizes", default="64,1500")
    ap.add_argument("--mode", default="poll")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="1 round, 1 NF, 64 B, short window")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.nfs, a.sizes, a.warmup, a.duration = 1, "1", "64", 0.5, 1.0
    nfs = [int(x) for x in a.nfs.split(",")]
    sizes = [int(x) for x in a.sizes.split(",")]
    accel = sg.accel()
    print(f"guests.py: accelerator {accel}; {a.runs} round(s); NFs {nfs}; sizes {sizes}; mode {a.mode}", flush=True)
    raw: dict = {}
    total = a.runs * len(nfs) * len(sizes) * 2
    done = 0
    for rnd in range(a.runs):
        for n in nfs:
            for size in sizes:
                for where in ("process", "guest"):
                    r = one(n, size, where, a.mode, a.warmup, a.duration)
                    raw.setdefault((n, size, where), []).append(r)
                    done += 1
                    print(f"[{done}/{total}] round {rnd + 1}: {n} NF {size:>4} B {where:<7} {r['mpps']:8.3f} Mpps"
                          + (f"  attach {r['attach_s']} s, QEMU RSS {r['qemu_rss_mib']} MiB" if where == "guest" else ""),
                          flush=True)
    rows = []
    for (n, size, where), rs in raw.items():
        m = [r["mpps"] for r in rs]
        row = {"nfs": n, "size": size, "where": where, "median_mpps": statistics.median(m), "min_mpps": min(m),
               "max_mpps": max(m), "runs": rs}
        if where == "guest":
            row["attach_s_median"] = statistics.median(x for r in rs for x in r["attach_s"])
            row["qemu_rss_mib_median"] = statistics.median(x for r in rs for x in r["qemu_rss_mib"])
        rows.append(row)
    print(f"\n{'NFs':>3} {'size':>5} {'where':<8} {'median':>8} {'min':>8} {'max':>8}  guest/process")
    for row in rows:
        proc = next(r for r in rows if r["nfs"] == row["nfs"] and r["size"] == row["size"] and r["where"] == "process")
        ratio = f"{row['median_mpps'] / proc['median_mpps']:.3f}" if row["where"] == "guest" and proc["median_mpps"] else ""
        print(f"{row['nfs']:>3} {row['size']:>5} {row['where']:<8} {row['median_mpps']:8.3f} {row['min_mpps']:8.3f} "
              f"{row['max_mpps']:8.3f}  {ratio}")
    if not a.quick:
        a.results.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = a.results / f"{stamp}-guests.json"
        out.write_text(json.dumps({"scenario": "guests", "accel": accel, "mode": a.mode, "runs": a.runs,
                                   "warmup_s": a.warmup, "duration_s": a.duration, "results": rows}, indent=1))
        print(f"guests.py: wrote {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
