#!/usr/bin/env python3
"""What observability costs the data path (issue 38): the chain of 3 `fwd` at 64 B (net_null -> f1 -> f2
-> f3 -> net_null, poll, pipes; bench/sluice_fabric.py), its rate measured

    baseline        as deployed: the SDK's handler-time histogram on, nobody scraping
    scrape 1 s      the same while `sluice metrics --listen` runs beside it and is scraped every second
                    (an HTTP GET, as Prometheus does at a 1 s interval: the exporter's own CPU included)
    histogram off   SLUICE_NF_HANDLER_HIST=0 in the NFs' environment: no clock reads around the handler

rows alternating within each round, a fresh sluiced and NFs per measurement; median of rounds with
min and max, and each row against the baseline of its own round (the targets: scraping <= 1 %, the
histogram <= 2 %).

    bench/observability.py [--runs 5] [--warmup 2] [--duration 5] [--quick] [--results DIR] [--no-report]

Results: bench/results/<stamp>-observability.json (scenario "observability"), then BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import REPO, BenchError, Progress, machine_info, regenerate_report, save_results  # noqa: E402
from peer_memif import measure_rate  # noqa: E402
from sluice_fabric import SluiceFabric  # noqa: E402

ROWS = ("baseline", "scrape 1 s", "histogram off")
NFS, SIZE, MODE = 3, 64, "poll"


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraping:
    """`sluice metrics --listen` for the fabric's socket dir, and a thread that GETs /metrics every second."""

    def __init__(self, socket_dir: str):
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
        self.proc = subprocess.Popen([sys.executable, "-m", "sluice", "metrics", "--socket-dir", socket_dir,
                                      "--listen", f"127.0.0.1:{self.port}"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.stop = threading.Event()
        self.scrapes, self.failures, self.bytes = 0, 0, 0
        deadline = time.monotonic() + 20
        while not self._get():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the exporter did not serve: {self.proc.stderr.read() if self.proc.poll() else ''}")
            time.sleep(0.1)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _get(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                body = r.read()
            self.bytes = len(body)
            return b"sluice_up 1" in body
        except OSError:
            return False

    def _loop(self):
        while True:  # at once, then every second (a short --quick window still sees one)
            if self._get():
                self.scrapes += 1
            else:
                self.failures += 1
            if self.stop.wait(1.0):
                break

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def measure(row: str, warmup: float, duration: float) -> tuple[float, dict]:
    saved = os.environ.get("SLUICE_NF_HANDLER_HIST")
    if row == "histogram off":
        os.environ["SLUICE_NF_HANDLER_HIST"] = "0"  # the NF processes inherit it
    else:
        os.environ.pop("SLUICE_NF_HANDLER_HIST", None)
    scr = None
    try:
        with SluiceFabric(nfs=NFS, size=SIZE, mode=MODE, pipes=True) as fab:
            counters = {k for n in fab.stats()["nfs"] for k in n.get("counters") or {}}
            if (row == "histogram off") == any(k.startswith("sdk.handler_") for k in counters):
                raise BenchError(f"{row}: the NFs' handler histogram is {'on' if row == 'histogram off' else 'off'}")
            if row == "scrape 1 s":
                scr = Scraping(fab._tmp.name)
            pids = fab.pids() + ([scr.proc.pid] if scr else [])
            mpps, foreign = measure_rate(fab.delivered, warmup, duration, pids)
            fab.check_alive()
            extra = {"foreign_cpu": round(foreign, 4)}
            if scr:
                extra.update(scrapes=scr.scrapes, scrape_failures=scr.failures, exposition_bytes=scr.bytes)
                if scr.scrapes == 0:
                    raise BenchError("scrape 1 s: no scrape succeeded during the window")
            return mpps, extra
    finally:
        if scr:
            scr.close()
        if saved is None:
            os.environ.pop("SLUICE_NF_HANDLER_HIST", None)
        else:
            os.environ["SLUICE_NF_HANDLER_HIST"] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true", help="1 run of 0.3 s + 0.6 s windows (a smoke test)")
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--no-report", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.warmup, a.duration = 1, 0.3, 0.6
    started = datetime.now(timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    t0 = time.monotonic()
    runs = {r: [] for r in ROWS}
    extras = {r: [] for r in ROWS}
    ratios = {r: [] for r in ROWS}
    errors = []
    prog = Progress(a.runs * len(ROWS))
    for k in range(a.runs):
        base = None
        for row in ROWS:
            try:
                mpps, extra = measure(row, a.warmup, a.duration)
            except BenchError as e:
                errors.append({"scenario": "observability", "row": row, "run": k, "error": str(e)})
                prog.step(f"round {k + 1}: {row}: FAILED: {str(e).splitlines()[0]}")
                continue
            runs[row].append(round(mpps, 3))
            extras[row].append(extra)
            if row == "baseline":
                base = mpps
            if base:
                ratios[row].append(round(mpps / base, 4))
            prog.step(f"round {k + 1}: {row:14s} {mpps:7.2f} Mpps" + (f"  ({mpps / base:.3f} of the baseline)"
                                                                     if base and row != "baseline" else ""))
    results = []
    for row in ROWS:
        v = runs[row]
        results.append({"scenario": "observability", "row": row, "nfs": NFS, "size": SIZE, "mode": MODE + "+pipes",
                        "runs_mpps": v, "median_mpps": round(statistics.median(v), 3) if v else None,
                        "min_mpps": min(v) if v else None, "max_mpps": max(v) if v else None,
                        "runs_ratio": ratios[row],
                        "median_ratio": round(statistics.median(ratios[row]), 4) if ratios[row] else None,
                        "runs_extra": extras[row]})
    out = {"started": started.isoformat(timespec="seconds"), "kind": "observability", "machine": machine_info(),
           "elapsed_s": round(time.monotonic() - t0, 1), "quick": a.quick,
           "config": {"runs": a.runs, "warmup_s": a.warmup, "duration_s": a.duration, "rows": list(ROWS),
                      "nfs": NFS, "size": SIZE, "mode": MODE + "+pipes", "quick": a.quick},
           "results": results, "errors": errors}
    for r in results:
        print(f"{r['row']:14s} median {r['median_mpps']} Mpps ({r['min_mpps']}-{r['max_mpps']}), "
              f"against the baseline {r['median_ratio']}")
    save_results(a, "observability.py", stamp, "observability", out)
    regenerate_report(a)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
