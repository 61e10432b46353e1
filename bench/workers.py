#!/usr/bin/env python3
"""Several workers (issue 16, docs/architecture.md "Workers"): aggregate rate as workers are added.

    bench/workers.py --workers 1,2,4 --cores 2-9 [--layout lanes|multiqueue] [--nfs 2] [--size 64]
                     [--mode poll] [--duration 3]

For each worker count W: sluiced with `workers: W` (main lcore on the first core given, one core per
worker after it), W independent lanes -- port srcK (net_null, size=B, copy=0) -> chain cK of `--nfs`
sluice-nf-fwd -> port dstK -- so that lane K's chain, ports and NFs are placed on worker K (a chain's
index picks its worker; its ingress and exit ports follow it): no packet crosses between workers.
Each lane's NFs are pinned to a core of their own after the workers' (`taskset`), so the NFs are
never the bound. The figure is the sum of the dst ports' tx rate over the window, and the per-lane
rates. `--layout multiqueue` (issue 36, docs/ports.md "Multi-queue ports"): one port src with `queues: W`
(net_null, each queue its own source) -> chain c of `--nfs` services with W replicas each -> port dst
(a TX queue per worker): queue K is polled by worker K, which keeps its packets on the replicas it
serves (flow affinity) and sends on its own TX queue, so again nothing crosses between workers; the
per-lane figures are the RX queues' rates. Scaling is the point: rerun on a machine with at least 2 + W + W x nfs cores (this 2-vCPU
development machine cannot show it: its run here only checks that the method works, with every
worker sharing one core). Prints one JSON line per W; nothing is written to bench/results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, Ctl, spawn, stop_process  # noqa: E402
from sluice_fabric import NF_FWD, SLUICED  # noqa: E402


def parse_cores(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def lane_config(workers: int, nfs: int, size: int, lcores: list[int]) -> dict:
    ports, chains, names = [], [], []
    for k in range(workers):
        ports += [{"name": f"src{k}", "vdev": f"net_null{2 * k},size={size},copy=0", "chain": f"c{k}"},
                  {"name": f"dst{k}", "vdev": f"net_null{2 * k + 1},size={size},copy=0"}]
        svcs = [f"l{k}f{j}" for j in range(nfs)]
        chains.append({"name": f"c{k}", "nfs": svcs, "exit": f"dst{k}"})
        names += svcs
    return {"sluiced": {"pool_mbufs": 16384 * workers, "ring_size": 1024, "max_nfs": max(64, len(names)),
                        "workers": workers, "lcores": ",".join(map(str, lcores))},
            "ports": ports, "chains": chains, "nfs": [{"name": n} for n in names]}


def mq_config(workers: int, nfs: int, size: int, lcores: list[int]) -> dict:
    svcs = [f"f{j}" for j in range(nfs)]
    return {"sluiced": {"pool_mbufs": 16384 * workers, "ring_size": 1024, "max_nfs": max(64, workers * nfs),
                        "workers": workers, "lcores": ",".join(map(str, lcores))},
            "ports": [{"name": "src", "vdev": f"net_null0,size={size},copy=0", "chain": "c", "queues": workers},
                      {"name": "dst", "vdev": f"net_null1,size={size},copy=0", "queues": workers}],
            "chains": [{"name": "c", "nfs": svcs, "exit": "dst"}], "nfs": [{"name": n} for n in svcs]}


def run(workers: int, nfs: int, size: int, mode: str, cores: list[int], duration: float,
        layout: str = "lanes") -> dict:
    if len(cores) < 2:
        raise BenchError("--cores: name at least two cores")
    # main + one per worker; a small machine repeats its last core (then the figure means nothing)
    lcores = [cores[0]] + [cores[min(1 + i, len(cores) - 1)] for i in range(workers)]
    nf_cores = cores[1 + workers:] or [cores[0]]
    with tempfile.TemporaryDirectory(prefix="sluice-bench-workers-") as tmp:
        d = Path(tmp)
        cfg = lane_config(workers, nfs, size, lcores) if layout == "lanes" else mq_config(workers, nfs, size, lcores)
        (d / "cfg.json").write_text(json.dumps(cfg, indent=1))
        sluiced, out = spawn([str(SLUICED), "--config", str(d / "cfg.json"), "--socket-dir", str(d)], "sluiced")
        procs = []
        try:
            out.wait_for(r"sluiced: ready", timeout=60)
            ctl = Ctl(d / "ctl.sock")
            for k in range(workers):
                core = nf_cores[k % len(nf_cores)]
                for j in range(nfs):
                    # lanes: lane k's own services; multiqueue: replica k of each service
                    name, svc = (f"l{k}f{j}.0", f"l{k}f{j}") if layout == "lanes" else (f"f{j}.{k}", f"f{j}")
                    p, _ = spawn(["taskset", "-c", str(core), str(NF_FWD), "--socket", str(d / "nf.sock"),
                                  "--name", name, "--service", svc, "--wakeup", mode], f"fwd {name}")
                    procs.append(p)
            deadline = time.monotonic() + 30
            while ctl.call("status")["nf_count"] < workers * nfs:
                if time.monotonic() > deadline:
                    raise BenchError("NFs did not attach")
                time.sleep(0.1)
            placed = {n["name"]: n["worker"] for n in ctl.call("nfs")["nfs"]}

            def tx() -> list[int]:
                ports = {p["name"]: p for p in ctl.call("stats")["ports"]}
                if layout == "lanes":
                    return [ports[f"dst{k}"]["tx_pkts"] for k in range(workers)]
                return [q["tx_pkts"] for q in ports["dst"]["tx_queues"]]  # what each worker sent
            time.sleep(1.0)
            t0, c0 = time.monotonic(), tx()
            time.sleep(duration)
            t1, c1 = time.monotonic(), tx()
            lanes = [(b - a) / (t1 - t0) / 1e6 for a, b in zip(c0, c1)]
            return {"layout": layout, "workers": workers, "nfs_per_lane": nfs, "size": size, "mode": mode,
                    "lcores": lcores,
                    "nf_cores": nf_cores[:workers], "placement": placed, "mpps": round(sum(lanes), 3),
                    "lane_mpps": [round(x, 3) for x in lanes]}
        finally:
            for p in procs:
                stop_process(p)
            stop_process(sluiced)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts (default 1,2)")
    ap.add_argument("--cores", default=",".join(map(str, range(os.cpu_count() or 2))),
                    help="cores to use, main lcore first, then workers, then NFs (default: all)")
    ap.add_argument("--nfs", type=int, default=2, help="fwd NFs per lane (default 2)")
    ap.add_argument("--layout", default="lanes", choices=["lanes", "multiqueue"],
                    help="lanes: a port pair and chain per worker; multiqueue: one port pair with a queue per "
                         "worker and a replica of each NF per worker (default lanes)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--mode", default="poll", choices=["poll", "adaptive", "block"])
    ap.add_argument("--duration", type=float, default=3.0)
    a = ap.parse_args()
    cores = parse_cores(a.cores)
    try:
        for w in [int(x) for x in a.workers.split(",") if x]:
            print(json.dumps(run(w, a.nfs, a.size, a.mode, cores, a.duration, a.layout)), flush=True)
    except (BenchError, subprocess.SubprocessError, OSError) as e:
        print(f"workers.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
