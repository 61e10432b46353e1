#!/usr/bin/env python3
"""Trust-domain benchmark (issue 15): what a copy at a domain boundary costs.

    bench/trust.py [--rounds 3] [--window 1.0] [--windows 3] [--quick] [--results DIR] [--no-report]

Chain of 3 sluice-nf-fwd, net_null -> fwd1 -> fwd2 -> fwd3 -> net_null, at 64 B and 1500 B, in
three variants (rows alternate within each round, a fresh sluiced per measurement):
  - trusted:        all three NFs in the default domain (the ports' domain): no copy;
  - middle:         fwd2 untrusted, in a private domain of its own: 2 copies per packet (into its
                    domain and back out);
  - all-untrusted:  each NF in a private domain of its own: 3 copies per packet (the exit to the
                    port needs none: a port may transmit from any pool).
Copies are done by sluiced's worker (core 1); the NFs poll on core 0 (`taskset -c 0`).
Figures per row, median over rounds with min-max: Mpps out of the chain; the copies sluiced
counted per packet; the worker's time per copy (sluiced times every 16th copy, allocation
included: `copies[].timed_ns / timed`) and the copy bandwidth they give (bytes per copy / time per copy). Beside them,
the same run measures this core's memcpy bandwidth over buffer-sized slots
(build/bench/sluice-bench-memcpy, pinned to core 1 while sluiced is down). Targets: the middle
variant at 64 B keeps >= 70 % of the trusted rate; at 1500 B the copying hops reach >= 60 % of the
core's memcpy bandwidth. Results: bench/results/<stamp>-trust.json (scenario "trust"), then
BENCHMARKS.md is regenerated (not after --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (REPO, BenchError, CpuShare, Progress, add_round_args, ctl, machine_info,
                    regenerate_report, round_settings, save_results)  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build")
SLUICED = BUILD / "src" / "manager" / "sluiced"
NF_FWD = BUILD / "nfs" / "sluice-nf-fwd"
MEMCPY = BUILD / "bench" / "sluice-bench-memcpy"
NF_CORE, WORKER_CORE = "0", "1"
SIZES = (64, 1500)
NFS = ("fwd1", "fwd2", "fwd3")
VARIANTS = {
    # variant: (what, the NFs in a private domain of their own)
    "trusted": ("all three NFs in the default domain", ()),
    "middle": ("fwd2 untrusted (private domain)", ("fwd2",)),
    "all-untrusted": ("each NF in a private domain", NFS),
}
POOL = 16384
PRIVATE_POOL = 4096


def make_config(variant: str, size: int) -> dict:
    private = VARIANTS[variant][1]
    return {
        "sluiced": {"pool_mbufs": POOL, "ring_size": 1024, "max_nfs": 8, "lcores": f"{NF_CORE},{WORKER_CORE}"},
        "domains": [{"name": f"{n}-private", "pool_mbufs": PRIVATE_POOL} for n in private],
        "ports": [{"name": "src", "vdev": f"net_null0,size={size},copy=0", "chain": "c"},
                  {"name": "dst", "vdev": f"net_null1,size={size},copy=0"}],
        "chains": [{"name": "c", "nfs": list(NFS), "exit": "dst"}],
        "nfs": [dict({"name": n}, **({"domain": f"{n}-private"} if n in private else {})) for n in NFS],
    }


def copy_totals(st: dict) -> tuple[int, int, int]:
    """(copies, timed copies, ns the timed ones took) summed over every domain pair of a stats answer."""
    pairs = st.get("copies") or []
    return (sum(p.get("packets", 0) for p in pairs), sum(p.get("timed", 0) for p in pairs),
            sum(p.get("timed_ns", 0) for p in pairs))


def sample(sock: Path) -> tuple[float, int, int, int, int]:
    st = ctl(sock, cmd="stats")
    out = next(p for p in st["ports"] if p["name"] == "dst")["tx_pkts"]
    return (time.monotonic(), out, *copy_totals(st))


def measure(variant: str, size: int, work: Path, window: float, windows: int, warmup: float) -> dict:
    d = Path(tempfile.mkdtemp(prefix="tb-", dir=work))
    (d / "cfg.json").write_text(json.dumps(make_config(variant, size)))
    log, sock = d / "sluiced.log", d / "ctl.sock"
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        p = subprocess.Popen([SLUICED, "--config", d / "cfg.json", "--socket-dir", d], stdout=lf, stderr=lf,
                             start_new_session=True)
    nfs = []
    try:
        while b"sluiced: ready" not in log.read_bytes():
            if p.poll() is not None or time.monotonic() - t0 > 120:
                raise BenchError(f"sluiced did not start ({variant}):\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        for n in NFS:
            nl = open(d / f"{n}.log", "wb")
            nfs.append((subprocess.Popen(["taskset", "-c", NF_CORE, NF_FWD, "--socket", d / "nf.sock",
                                          "--name", f"{n}.0", "--service", n, "--wakeup", "poll"],
                                         stdout=nl, stderr=nl, start_new_session=True), nl))
        deadline = time.monotonic() + 60
        while len(ctl(sock, cmd="nfs")["nfs"]) < len(NFS):
            if any(q.poll() is not None for q, _ in nfs) or time.monotonic() > deadline:
                raise BenchError(f"the NFs did not attach ({variant}):\n"
                                 + "\n".join((d / f"{n}.log").read_text()[-500:] for n in NFS))
            time.sleep(0.05)
        time.sleep(warmup)
        samples = []
        with CpuShare([p.pid] + [q.pid for q, _ in nfs]) as share:
            samples.append(sample(sock))
            for _ in range(windows):
                time.sleep(window)
                samples.append(sample(sock))
        rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:])]
        (_, oa, ca, ta, na), (_, ob, cb, tb, nb) = samples[0], samples[-1]
        st = ctl(sock, cmd="stats")
        return {"pps": statistics.median(rates), "windows_pps": [round(r) for r in rates],
                "copies_per_pkt": round((cb - ca) / (ob - oa), 3) if ob > oa else None,
                "ns_per_copy": round((nb - na) / (tb - ta), 2) if tb > ta else None,
                "foreign_cpu": round(share.foreign, 3), "drops": {k: v for k, v in st["drops"].items() if v},
                "startup_s": round(time.monotonic() - t0, 2)}
    finally:
        for q, nl in nfs:
            if q.poll() is None:
                q.terminate()
                try:
                    q.wait(30)
                except subprocess.TimeoutExpired:
                    q.kill()
            nl.close()
        if p.poll() is None:
            try:
                ctl(sock, cmd="shutdown")
            except (OSError, BenchError):
                p.kill()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


def memcpy_bw(size: int, seconds: float) -> dict:
    cp = subprocess.run(["taskset", "-c", WORKER_CORE, MEMCPY, "--size", str(size), "--seconds", str(seconds)],
                        capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        raise BenchError(f"sluice-bench-memcpy failed: {cp.stderr.strip()}")
    return json.loads(cp.stdout)


def summarise(vals: list) -> dict:
    vals = [v for v in vals if v is not None]
    if not vals:
        return {}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_round_args(ap, 3, "one short round: a smoke test (< 1 min)")
    args = ap.parse_args(argv)
    q = args.quick
    rounds, window, warmup = round_settings(args, 3)
    if os.geteuid() != 0:
        print("trust.py: needs root (DPDK)", file=sys.stderr)
        return 2
    missing = [str(b) for b in (SLUICED, NF_FWD, MEMCPY) if not b.exists()]
    if missing:
        print(f"trust.py: not built: {', '.join(missing)} (make build)", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"sluice-bench-trust-{stamp}-"))
    cells = [(v, s) for s in SIZES for v in VARIANTS]
    runs: dict = {c: [] for c in cells}
    mem: dict = {s: [] for s in SIZES}
    errors = []
    try:
        print(f"trust.py: {len(cells)} rows x {rounds} round(s), {args.windows} x {window} s windows", flush=True)
        progress = Progress(rounds * (len(cells) + len(SIZES)))
        for rnd in range(rounds):
            for s in SIZES:
                try:
                    m = memcpy_bw(s, window)
                    mem[s].append(m)
                    progress.step(f"round {rnd + 1}: memcpy {s} B on core {WORKER_CORE}: "
                                  f"{m['gbytes_per_s']:.2f} GB/s ({m['ns_per_copy']:.1f} ns per copy)")
                except (BenchError, ValueError, subprocess.TimeoutExpired) as e:
                    errors.append({"scenario": "trust", "config": f"memcpy {s}", "round": rnd + 1, "error": str(e)})
                    progress.step(f"round {rnd + 1}: memcpy {s} B: FAILED: {e}")
            for v, s in cells:
                try:
                    m = measure(v, s, work, window, args.windows, warmup)
                    runs[(v, s)].append(m)
                    progress.step(f"round {rnd + 1}: {v} {s} B: {m['pps'] / 1e6:.2f} Mpps, "
                                  f"{m['copies_per_pkt']} copies/packet, {m['ns_per_copy']} ns per copy "
                                  f"(others' CPU {m['foreign_cpu']:.0%})")
                except BenchError as e:
                    errors.append({"scenario": "trust", "config": f"{v} {s}", "round": rnd + 1, "error": str(e)})
                    progress.step(f"round {rnd + 1}: {v} {s} B: FAILED: {str(e).splitlines()[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = []
    for s in SIZES:
        bw = summarise([m["gbytes_per_s"] for m in mem[s]])
        results.append({"scenario": "trust", "row": "memcpy", "size": s,
                        "runs_gbytes_per_s": [m["gbytes_per_s"] for m in mem[s]],
                        "runs_ns_per_copy": [m["ns_per_copy"] for m in mem[s]],
                        **{f"{k}_gbytes_per_s": v for k, v in bw.items()}})
    for v, s in cells:
        ms = runs[(v, s)]
        row = {"scenario": "trust", "row": "chain", "variant": v, "what": VARIANTS[v][0], "size": s, "nfs": 3,
               "runs_pps": [round(m["pps"]) for m in ms], "runs_copies_per_pkt": [m["copies_per_pkt"] for m in ms],
               "runs_ns_per_copy": [m["ns_per_copy"] for m in ms], "runs_foreign_cpu": [m["foreign_cpu"] for m in ms],
               "runs_windows_pps": [m["windows_pps"] for m in ms], "runs_drops": [m["drops"] for m in ms]}
        for key, vals in (("pps", [m["pps"] for m in ms]), ("ns_per_copy", [m["ns_per_copy"] for m in ms])):
            for k, val in summarise(vals).items():
                row[f"{k}_{key}"] = round(val, 2)
        if row.get("median_ns_per_copy"):
            row["copy_gbytes_per_s"] = round(s / row["median_ns_per_copy"], 3)
        results.append(row)
    print(f"\n{'variant':<15} {'size':>5} {'Mpps':>7} {'min':>6} {'max':>6} {'copies/pkt':>10} {'ns/copy':>8} {'GB/s':>6}")
    for r in results:
        if r["row"] == "memcpy":
            print(f"{'memcpy':<15} {r['size']:>5} {'':>7} {'':>6} {'':>6} {'':>10} {'':>8} "
                  f"{r.get('median_gbytes_per_s', 0):>6.2f}")
        elif r.get("median_pps") is not None:
            cpp = statistics.median([c for c in r["runs_copies_per_pkt"] if c is not None] or [0])
            print(f"{r['variant']:<15} {r['size']:>5} {r['median_pps'] / 1e6:>7.2f} {r['min_pps'] / 1e6:>6.2f} "
                  f"{r['max_pps'] / 1e6:>6.2f} {cpp:>10.2f} {r.get('median_ns_per_copy') or 0:>8.1f} "
                  f"{r.get('copy_gbytes_per_s') or 0:>6.2f}")
        else:
            print(f"{r['variant']:<15} {r['size']:>5} failed")
    data = {"started": stamp, "kind": "quick" if q else "full", "scenarios": ["trust"], "machine": machine_info(),
            "config": {"quick": q, "runs": rounds, "duration_s": window, "windows": args.windows, "warmup_s": warmup,
                       "nf_core": NF_CORE, "worker_core": WORKER_CORE, "nf_wakeup": "poll", "pool_mbufs": POOL,
                       "private_pool_mbufs": PRIVATE_POOL, "build": str(BUILD)},
            "results": results, "errors": errors}
    save_results(args, "trust.py", stamp, "trust", data)
    regenerate_report(args)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
