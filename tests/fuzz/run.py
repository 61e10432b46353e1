#!/usr/bin/env python3
"""Run every libFuzzer target of a fuzz build (make fuzz; tests/fuzz/meson.build), one after another,
each for --seconds on its committed corpus (tests/fuzz/corpus/<target>/, read only: new inputs go to
a scratch directory) with its dictionary (tests/fuzz/<target>.dict) if there is one. Prints per
target: executions, coverage (libFuzzer's cov: edges), crashes; writes the figures as JSON
(--results DIR: DIR/fuzz-<UTC stamp>.json). Exit status 1 if any target crashed (its input is kept
in the results' crashes directory, or the scratch directory's, with libFuzzer's report)."""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COV = re.compile(rb"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
STAT = re.compile(rb"^stat::(\w+):\s+(\d+)", re.M)


def targets(build):
    d = os.path.join(build, "tests", "fuzz")
    names = sorted(f[len("fuzz-"):] for f in os.listdir(d)
                   if f.startswith("fuzz-") and os.access(os.path.join(d, f), os.X_OK)
                   and not f.endswith(".p"))
    return [(n, os.path.join(d, "fuzz-" + n)) for n in names]


def run_one(name, exe, seconds, scratch, crash_dir, jobs_log):
    corpus = os.path.join(HERE, "corpus", name)
    new = os.path.join(scratch, "corpus", name)
    os.makedirs(new, exist_ok=True)
    os.makedirs(crash_dir, exist_ok=True)
    cmd = [exe, f"-max_total_time={seconds}", "-print_final_stats=1", "-timeout=10",
           "-rss_limit_mb=2560", "-close_fd_mask=3", "-max_len=4096",
           f"-artifact_prefix={os.path.join(crash_dir, name)}-"]
    d = os.path.join(HERE, name + ".dict")
    if not os.path.exists(d) and name.startswith("nf-"):
        d = os.path.join(HERE, "nf.dict")
    if os.path.exists(d):
        cmd.append(f"-dict={d}")
    cmd += [new] + ([corpus] if os.path.isdir(corpus) else [])
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=seconds + 300)
    wall = time.monotonic() - t0
    out = p.stderr
    with open(jobs_log, "ab") as f:
        f.write(b"==== " + " ".join(cmd).encode() + b"\n" + out + b"\n")
    stats = {k.decode(): int(v) for k, v in STAT.findall(out)}
    covs = COV.findall(out)
    last = covs[-1] if covs else (b"0", b"0", b"0", b"0")
    crashes = sorted(f for f in os.listdir(crash_dir) if f.startswith(name + "-"))
    res = {
        "target": name,
        "seconds": round(wall, 1),
        "executions": stats.get("number_of_executed_units", int(last[0])),
        "exec_per_s": stats.get("average_exec_per_sec"),
        "edges": int(last[1]),
        "features": int(last[2]),
        "corpus": int(last[3]),
        "new_units": stats.get("new_units_added"),
        "peak_rss_mb": stats.get("peak_rss_mb"),
        "exit": p.returncode,
        "crashes": len(crashes) if p.returncode != 0 else 0,
        "crash_inputs": crashes if p.returncode != 0 else [],
    }
    if p.returncode != 0:
        tail = out.decode(errors="replace").splitlines()
        res["report"] = [l for l in tail if "ERROR" in l or "SUMMARY" in l or "runtime error" in l][:5] or tail[-15:]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-fuzz")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--results", help="write fuzz-<stamp>.json here")
    ap.add_argument("--only", nargs="*", help="these targets only")
    a = ap.parse_args()
    ts = targets(a.build)
    if a.only:
        ts = [t for t in ts if t[0] in a.only]
    if not ts:
        print(f"fuzz: no fuzz-* targets in {a.build}/tests/fuzz (ninja -C {a.build} fuzzers)", file=sys.stderr)
        return 2
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    scratch = tempfile.mkdtemp(prefix="sluice-fuzz-")
    crash_dir = os.path.join(a.results, f"fuzz-{stamp}-crashes") if a.results else os.path.join(scratch, "crashes")
    log = os.path.join(scratch, "libfuzzer.log")
    print(f"fuzz: {len(ts)} targets, {a.seconds} s each; new inputs in {scratch}/corpus, libFuzzer's output in {log}"
          " (removed after a clean run)")
    print(f"{'target':<14} {'executions':>12} {'exec/s':>8} {'edges':>6} {'features':>8} {'corpus':>6} {'crashes':>7}")
    results = []
    for name, exe in ts:
        r = run_one(name, exe, a.seconds, scratch, crash_dir, log)
        results.append(r)
        print(f"{name:<14} {r['executions']:>12} {r['exec_per_s'] or 0:>8} {r['edges']:>6} {r['features']:>8} "
              f"{r['corpus']:>6} {r['crashes']:>7}", flush=True)
        if r["exit"] != 0:
            print(f"  {name}: libFuzzer exited {r['exit']}; input: {', '.join(r['crash_inputs']) or '?'} in {crash_dir}")
            for l in r.get("report", []):
                print("    " + l)
            for c in r["crash_inputs"]:  # the targets' own messages (stderr is closed while fuzzing)
                print(f"    again, with its messages: {exe} {os.path.join(crash_dir, c)}")
    bad = [r for r in results if r["exit"] != 0]
    if a.results:
        os.makedirs(a.results, exist_ok=True)
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        path = os.path.join(a.results, f"fuzz-{stamp}.json")
        with open(path, "w") as f:
            json.dump({"stamp": stamp, "commit": rev, "seconds_per_target": a.seconds,
                       "engine": "libFuzzer (clang " + subprocess.run(["clang", "-dumpversion"], capture_output=True,
                                                                       text=True).stdout.strip() + ")",
                       "sanitizers": "address,undefined (-fno-sanitize-recover=all)",
                       "targets": results}, f, indent=2)
            f.write("\n")
        print(f"fuzz: results in {path}")
        if not bad and os.path.isdir(crash_dir) and not os.listdir(crash_dir):
            os.rmdir(crash_dir)
    if bad:
        print(f"fuzz: {len(bad)} target(s) failed (crashed, or libFuzzer refused to run): {' '.join(r['target'] for r in bad)} (scratch kept: {scratch})")
        return 1
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"fuzz: {len(results)} targets ran clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
