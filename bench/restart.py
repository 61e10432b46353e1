#!/usr/bin/env python3
"""Live operations benchmark (issue 35): how long traffic stops when sluiced restarts, and what a
reload loses.

    bench/restart.py [--runs 10] [--reloads 5] [--quick] [--results DIR] [--no-report]

1. Restart: `sluice up` of port src (net_null) -> f1 -> f2 -> f3 (sluice-nf-fwd, adaptive) -> port dst
   (net_null). Each run stops traffic one way and times, from that moment, sluiced answering again
   (`ready`), all three NFs attached (`attached`) and packets leaving dst again (`flowing`: the new
   sluiced's dst tx_pkts above 0; the control API is polled every 2 ms). Rows, alternating per run:
     - kill:    SIGKILL of sluiced; the supervisor starts a new one, the NFs re-attach (their state kept);
     - planned: `sluice restart` (the supervisor's `restart`: ports paused, NFs drained, SL_ERR_RESTART);
     - cold:    `sluice down` then `sluice up -d` -- what an operator had before: NFs restarted, state lost.
   Median of --runs with min and max.
2. Reload: a 100-NF deployment (chain probe = gen -> fwd -> sink paces exactly N packets; 97 more fwd
   services, one chain each, idle) and --reloads `sluice reload`s while gen runs, each editing one of the
   idle chains (alternately [sK] and [sK, sK+1]). Packets lost on the unchanged chain = N - sink's count
   (target 0). Three runs.
Results: bench/results/<stamp>-restart.json (scenario "restart"), then BENCHMARKS.md (not after --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import REPO, BenchError, Progress, ctl, machine_info, regenerate_report, save_results  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
NFS3 = ("f1", "f2", "f3")
IDLE = 97           # idle fwd services of the reload deployment (+ gen, fwd, sink = 100 NFs; --quick: 20)
GEN_N, GEN_RATE = 100000, 20000


def sluice(sd: Path, *args, check=True, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), SLUICE_SOCKET_DIR=str(sd))
    r = subprocess.run([sys.executable, "-m", "sluice", *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise BenchError(f"sluice {' '.join(map(str, args))} failed:\n{r.stdout}{r.stderr}")
    return r


def state(sd: Path) -> dict:
    return json.loads((sd / "state.json").read_text())


def try_ctl(sd: Path, cmd: str, **kw):
    try:
        return ctl(sd / "ctl.sock", cmd, timeout=1.0, **kw)
    except (OSError, BenchError, ValueError):
        return None


def restart_config(sd: Path) -> str:
    nfs = "\n".join(f"  - {{name: {n}, program: fwd, wakeup: adaptive}}" for n in NFS3)
    return f"""sluiced: {{socket_dir: {sd}, pool_mbufs: 8192}}
ports:
  - {{name: src, vdev: "net_null0,size=64,copy=0", chain: c}}
  - {{name: dst, vdev: "net_null1,size=64,copy=0"}}
chains:
  - {{name: c, nfs: [{', '.join(NFS3)}], exit: dst}}
nfs:
{nfs}
"""


def timeline(sd: Path, t0: float, old_pid: int | None, want: set[str], timeout=60.0) -> dict:
    """From t0: when a sluiced other than old_pid answers, when `want` are attached, when dst sends."""
    out = {"ready_s": None, "attached_s": None, "flowing_s": None}
    while time.monotonic() - t0 < timeout:
        st = try_ctl(sd, "status")
        if st and st.get("pid") != old_pid:
            now = time.monotonic() - t0
            out["ready_s"] = out["ready_s"] or now
            if out["attached_s"] is None:
                nfs = try_ctl(sd, "nfs")
                if nfs and want <= {n["name"] for n in nfs["nfs"]}:
                    out["attached_s"] = time.monotonic() - t0
            if out["attached_s"] is not None:
                ports = try_ctl(sd, "ports")
                dst = next((p for p in (ports or {}).get("ports", []) if p["name"] == "dst"), None)
                if dst and dst["tx_pkts"] > 0:
                    out["flowing_s"] = time.monotonic() - t0
                    return {k: round(v, 4) for k, v in out.items()}
        time.sleep(0.002)
    raise BenchError(f"traffic did not flow again within {timeout:g}s: {out}")


def restart_runs(work: Path, runs: int, prog: Progress) -> list[dict]:
    sd = work / "r"
    cfg = work / "restart.yaml"
    cfg.write_text(restart_config(sd))
    want = {f"{n}.0" for n in NFS3}
    samples = {"kill": [], "planned": [], "cold": []}
    sluice(sd, "up", cfg, "-d", "--build-dir", BUILD)
    try:
        timeline(sd, time.monotonic(), None, want)
        for i in range(runs):
            for how in ("kill", "planned", "cold"):
                old = state(sd)["sluiced"]["pid"]
                t0 = time.monotonic()
                if how == "kill":
                    os.kill(old, signal.SIGKILL)
                elif how == "planned":
                    subprocess.Popen([sys.executable, "-m", "sluice", "restart", "--json"],
                                     env=dict(os.environ, PYTHONPATH=str(REPO / "python"), SLUICE_SOCKET_DIR=str(sd)),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                else:
                    sluice(sd, "down")
                    sluice(sd, "up", cfg, "-d", "--build-dir", BUILD)
                samples[how].append(timeline(sd, t0, old, want))
                time.sleep(0.3)
            prog.step(f"restart run {i + 1}/{runs}: " + ", ".join(
                f"{h} {samples[h][-1]['flowing_s'] * 1000:.0f} ms" for h in samples))
    finally:
        sluice(sd, "down", check=False)
    rows = []
    for how, xs in samples.items():
        row = {"scenario": "restart", "row": how, "runs": len(xs), "samples": xs}
        for k in ("ready_s", "attached_s", "flowing_s"):
            v = [x[k] for x in xs]
            row[f"median_{k}"], row[f"min_{k}"], row[f"max_{k}"] = statistics.median(v), min(v), max(v)
        rows.append(row)
    return rows


def reload_config(sd: Path, edit: int | None) -> str:
    chains = ["  - {name: probe, nfs: [gen, fwd, sink], exit: out}"]
    for k in range(IDLE):
        svcs = [f"s{k}"] + ([f"s{(k + 1) % IDLE}"] if edit == k else [])
        chains.append(f"  - {{name: c{k}, nfs: [{', '.join(svcs)}], exit: out}}")
    nfs = [f"  - {{name: gen, program: gen, wakeup: poll, args: [--rate-pps, \"{GEN_RATE}\", --count, \"{GEN_N}\"]}}",
           "  - {name: fwd, program: fwd, wakeup: block}",
           "  - {name: sink, program: sink, wakeup: block, args: [--action, drop]}"]
    nfs += [f"  - {{name: s{k}, program: fwd, wakeup: block}}" for k in range(IDLE)]
    return (f"sluiced: {{socket_dir: {sd}, pool_mbufs: 16384, ring_size: 2048, max_nfs: 128}}\n"
            "ports:\n  - {name: src, vdev: \"net_null0,size=64,copy=0\"}\n  - {name: out, vdev: \"net_null1\"}\n"
            "chains:\n" + "\n".join(chains) + "\nnfs:\n" + "\n".join(nfs) + "\n")


def reload_runs(work: Path, runs: int, reloads: int, prog: Progress) -> dict:
    sd = work / "l"
    base = work / "reload-base.yaml"
    base.write_text(reload_config(sd, None))
    out = []
    for r in range(runs):
        sluice(sd, "up", base, "-d", "--build-dir", BUILD, "--attach-timeout", 120)
        try:
            ctl(sd / "ctl.sock", "port_chain_set", port="src", chain="probe")  # gen's supply: exactly N from here
            took = []
            for i in range(reloads):
                f = work / f"reload-{i % 2}.yaml"
                f.write_text(reload_config(sd, i % IDLE if i % 2 == 0 else None).replace(
                    "{name: src, vdev: \"net_null0,size=64,copy=0\"}",
                    "{name: src, vdev: \"net_null0,size=64,copy=0\", chain: probe}"))
                t = time.monotonic()
                res = sluice(sd, "reload", f)
                took.append(round(time.monotonic() - t, 3))
                if "applied" not in res.stdout:
                    raise BenchError(f"reload {i} applied nothing:\n{res.stdout}")
            sink = lambda: next(n for n in ctl(sd / "ctl.sock", "nfs")["nfs"] if n["name"] == "sink.0")["rx_pkts"]  # noqa: E731
            deadline, last, last_t = time.monotonic() + 60, -1, time.monotonic()
            while time.monotonic() < deadline:
                got = sink()
                if got >= GEN_N or (got == last and time.monotonic() - last_t > 3):
                    break
                if got != last:
                    last, last_t = got, time.monotonic()
                time.sleep(0.1)
            got = sink()
            nfs = len(ctl(sd / "ctl.sock", "nfs")["nfs"])
            out.append({"sent": GEN_N, "received": got, "lost": GEN_N - got, "nfs": nfs, "reloads": reloads,
                        "reload_s": took})
            prog.step(f"reload run {r + 1}/{runs}: {nfs} NFs, {reloads} reloads, lost {GEN_N - got} of {GEN_N}")
        finally:
            sluice(sd, "down", check=False)
    lost = [x["lost"] for x in out]
    secs = [s for x in out for s in x["reload_s"]]
    return {"scenario": "restart", "row": "reload", "runs": out, "median_lost": statistics.median(lost),
            "max_lost": max(lost), "median_reload_s": statistics.median(secs), "max_reload_s": max(secs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=None, help="restart runs per row (default 10; --quick 1)")
    ap.add_argument("--reloads", type=int, default=5, help="reloads during one gen run (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 restart run, 1 reload run of 20 NFs (checks that it runs)")
    ap.add_argument("--results", default=str(HERE / "results"), help="results directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/restart.py: run as root (DPDK, huge pages)", file=sys.stderr)
        return 2
    global IDLE
    runs = args.runs or (1 if args.quick else 10)
    if args.quick:
        IDLE = 17
    reload_n = 1 if args.quick else 3
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    prog = Progress(runs + reload_n)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="slb-rs-") as w:
        work = Path(w)
        try:
            rows = restart_runs(work, runs, prog)
            rows.append(reload_runs(work, reload_n, args.reloads, prog))
        except BenchError as e:
            print(f"bench/restart.py: {e}", file=sys.stderr)
            return 1
    data = {"started": started, "quick": args.quick, "machine": machine_info(),
            "config": {"runs": runs, "reload_runs": reload_n, "reloads": args.reloads, "gen_packets": GEN_N,
                       "gen_rate_pps": GEN_RATE, "reload_nfs": IDLE + 3,
                       "command": " ".join(["bench/restart.py"] + sys.argv[1:])},
            "results": rows}
    save_results(args, "bench/restart.py", stamp, "restart", data)
    for r in rows:
        if r["row"] == "reload":
            print(f"reload: lost {r['median_lost']} (max {r['max_lost']}) of {GEN_N} on the unchanged chain; "
                  f"a reload took {r['median_reload_s']:.2f} s (max {r['max_reload_s']:.2f})")
        else:
            print(f"{r['row']:8s} flowing again after {r['median_flowing_s'] * 1000:.0f} ms "
                  f"(min {r['min_flowing_s'] * 1000:.0f}, max {r['max_flowing_s'] * 1000:.0f}); ready "
                  f"{r['median_ready_s'] * 1000:.0f} ms, NFs attached {r['median_attached_s'] * 1000:.0f} ms")
    regenerate_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
