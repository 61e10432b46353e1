#!/usr/bin/env python3
"""What observability costs the data path (issue 38): the chain of 3 `fwd` at 64 B (net_null -> f1 -> f2
-> f3 -> net_null, poll, pipes; bench/sluice_fabric.py), its rate measured

    baseline        as deployed: the SDK's handler-time histogram on, nobody scraping, no capture
                    (capture off: every tap mask 0)
    scrape 1 s      the same while `sluice metrics --listen` runs beside it and is scraped every second
                    (an HTTP GET, as Prometheus does at a 1 s interval: the exporter's own CPU included)
    histogram off   SLUICE_NF_HANDLER_HIST=0 in the NFs' environment: no clock reads around the handler
    capture 1 %     `sluice capture --port src -f 'udp and src host 10.0.0.7' -w FILE` beside it: the
                    filter runs on every packet the chain receives and matches 1 % of them
    capture full port  `sluice capture --port src -w FILE`: a copy of every packet the chain receives
                    (src only receives); the reader cannot keep up, its losses are counted, the rate of
                    the chain is what is measured (the reader's CPU included, as the exporter's)

rows alternating within each round, a fresh sluiced and NFs per measurement; median of rounds with
min and max, and each row against the baseline of its own round (the targets: scraping <= 1 %, the
histogram <= 2 %; capture off is the baseline itself).

The packets: net_null (copy=0) hands out the pool's buffers as they are, so what the chain carries is
whatever the buffers hold. Before every measurement (every row, so that all carry the same bytes)
sluice-nf-gen runs for a moment at the head of the chain (c = gen -> f1 -> f2 -> f3) and writes its
UDP packets into the buffers, cycling over FLOWS = 100 flows whose source addresses are
10.0.0.0-10.0.0.99; then c is f1 -> f2 -> f3 again and gen exits. One flow in 100 is 1 % of the
packets; the capture rows record the share their filter actually matched (copied + lost over what the
port received in the same window).

    bench/observability.py [--runs 5] [--warmup 2] [--duration 5] [--quick] [--results DIR] [--no-report]
                           [--rows baseline,capture 1 %,...]

Results: bench/results/<stamp>-observability.json (scenario "observability"), then BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
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
from common import (REPO, BenchError, Progress, _proc_jiffies, machine_info, regenerate_report,  # noqa: E402
                    save_results, spawn, stop_process)
from peer_memif import measure_rate  # noqa: E402
from sluice_fabric import NF_CORE, NF_GEN, SluiceFabric, check_binaries  # noqa: E402

ROWS = ("baseline", "scrape 1 s", "histogram off", "capture 1 %", "capture full port")
NFS, SIZE, MODE = 3, 64, "poll"
FLOWS = 100                               # gen's flows: source addresses 10.0.0.0 .. 10.0.0.99
FILTER_1PCT = "udp and src host 10.0.0.7"  # one of them
CAPTURE_PORT = "src"                       # where the chain's packets enter
PREFILL_S = 0.3                            # gen at the chain's head this long (0.15 s covered the pool here)


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


def prefill(fab: SluiceFabric, seconds: float) -> int:
    """gen's packets into the buffers the chain will carry (the module's docstring): returns how many
    gen wrote. Leaves chain c as it was, its pipes open again."""
    services = [f"fwd{k}" for k in range(1, NFS + 1)]
    d = Path(fab._tmp.name)
    gen = spawn(["taskset", "-c", NF_CORE, str(NF_GEN), "--socket", str(d / "nf.sock"), "--wakeup", "poll",
                 "--name", "gen.0", "--service", "gen", "--size", str(SIZE), "--flows", str(FLOWS)],
                "sluice-nf-gen (prefill)")
    try:
        fab.wait_attached(NFS + 1, [gen, *fab.nf_procs])
        fab.ctl.call("chain_set", name="c", nfs=["gen", *services], exit="dst")
        time.sleep(seconds)
        fab.ctl.call("chain_set", name="c", nfs=services, exit="dst")
        written = sum(n["tx_pkts"] for n in fab.stats()["nfs"] if n.get("service") == "gen")
    finally:
        stop_process(gen[0], grace=3)
    if written == 0:
        raise BenchError(f"prefill: gen wrote no packet:\n{gen[1].tail()}")
    deadline = time.monotonic() + 10
    while (fab.stats().get("pipes") or {}).get("open", 0) < NFS - 1:  # the edits closed them; back again
        if time.monotonic() > deadline:
            raise BenchError(f"prefill: the pipes did not reopen: {fab.stats().get('pipes')}")
        time.sleep(0.02)
    return written


SUMMARY = re.compile(r"sluice capture: (\d+) packets written to .*?; sluiced copied (\d+), lost (\d+)")


class Capturing:
    """`sluice capture --port src [-f FILTER] -w FILE` beside the chain, started and ended as a user
    does (Ctrl-C: the CLI stops the capture, writes what is left in the ring, prints its summary)."""

    def __init__(self, fab: SluiceFabric, out: Path, filt: str | None):
        self.fab, self.out = fab, out
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
        argv = [sys.executable, "-m", "sluice", "capture", "--socket-dir", fab._tmp.name, "--port", CAPTURE_PORT,
                "-w", str(out)] + (["-f", filt] if filt else [])
        self.proc, self.output = spawn(argv, "sluice capture", env=env)
        deadline = time.monotonic() + 20
        while not fab.ctl.call("captures")["captures"]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stop_process(self.proc)
                raise BenchError(f"sluice capture did not start a capture:\n{self.output.tail()}")
            time.sleep(0.02)

    def counts(self) -> dict:
        """The capture's counters and the port's received packets at one moment (the port's count read
        before and after the capture's, averaged)."""
        def rx():
            return next(p["rx_pkts"] for p in self.fab.stats()["ports"] if p["name"] == CAPTURE_PORT)
        rx0 = rx()
        c = self.fab.ctl.call("captures")["captures"][0]
        return {"copied": c["packets"], "lost": c["lost"], "rx": (rx0 + rx()) / 2, "t": time.monotonic(),
                "cpu": _proc_jiffies(self.proc.pid)}

    def close(self) -> dict:
        """Ctrl-C, then the summary line's counts: {written, copied, lost} over the capture's life."""
        if self.proc.poll() is not None:
            raise BenchError(f"sluice capture exited {self.proc.returncode} during the measurement:\n"
                             f"{self.output.tail()}")
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
            raise BenchError(f"sluice capture did not end on SIGINT:\n{self.output.tail()}")
        time.sleep(0.05)  # its last line through the reader thread
        m = SUMMARY.search(self.output.text())
        if self.proc.returncode != 0 or not m:
            raise BenchError(f"sluice capture exited {self.proc.returncode}:\n{self.output.tail()}")
        return {"written": int(m[1]), "copied": int(m[2]), "lost": int(m[3])}


def measure(row: str, warmup: float, duration: float, prefill_s: float) -> tuple[float, dict]:
    saved = os.environ.get("SLUICE_NF_HANDLER_HIST")
    if row == "histogram off":
        os.environ["SLUICE_NF_HANDLER_HIST"] = "0"  # the NF processes inherit it
    else:
        os.environ.pop("SLUICE_NF_HANDLER_HIST", None)
    scr = cap = None
    try:
        with SluiceFabric(nfs=NFS, size=SIZE, mode=MODE, pipes=True) as fab:
            counters = {k for n in fab.stats()["nfs"] for k in n.get("counters") or {}}
            if (row == "histogram off") == any(k.startswith("sdk.handler_") for k in counters):
                raise BenchError(f"{row}: the NFs' handler histogram is {'on' if row == 'histogram off' else 'off'}")
            prefilled = prefill(fab, prefill_s)
            if row == "scrape 1 s":
                scr = Scraping(fab._tmp.name)
            if row.startswith("capture"):
                cap = Capturing(fab, Path(fab._tmp.name) / "capture.pcapng",
                                FILTER_1PCT if row == "capture 1 %" else None)
                c0 = cap.counts()
            pids = fab.pids() + ([scr.proc.pid] if scr else []) + ([cap.proc.pid] if cap else [])
            mpps, foreign = measure_rate(fab.delivered, warmup, duration, pids)
            fab.check_alive()
            st = fab.stats()
            extra = {"foreign_cpu": round(foreign, 4), "prefill_packets": prefilled,
                     "pipes_open": (st.get("pipes") or {}).get("open")}
            if scr:
                extra.update(scrapes=scr.scrapes, scrape_failures=scr.failures, exposition_bytes=scr.bytes)
                if scr.scrapes == 0:
                    raise BenchError("scrape 1 s: no scrape succeeded during the window")
            if cap:
                c1 = cap.counts()
                total = cap.close()  # the whole capture: its warm-up, window and the drain at the end
                dt, rx = c1["t"] - c0["t"], c1["rx"] - c0["rx"]
                copied, lost = c1["copied"] - c0["copied"], c1["lost"] - c0["lost"]
                extra.update(
                    filter=FILTER_1PCT if row == "capture 1 %" else "",
                    window_rx=round(rx), window_copied=copied, window_lost=lost,  # warm-up + window
                    matched_share=round((copied + lost) / rx, 5) if rx else None,
                    copied_mpps=round(copied / dt / 1e6, 4), lost_mpps=round(lost / dt / 1e6, 4),
                    reader_cpu=round((c1["cpu"] - c0["cpu"]) / os.sysconf("SC_CLK_TCK") / dt, 3),
                    total_written=total["written"], total_copied=total["copied"], total_lost=total["lost"],
                    file_bytes=cap.out.stat().st_size if cap.out.exists() else 0)
                if copied == 0:
                    raise BenchError(f"{row}: sluiced copied no packet during the window")
                if row == "capture 1 %" and not 0.005 <= extra["matched_share"] <= 0.02:
                    raise BenchError(f"{row}: the filter matched {extra['matched_share']:.2%} of the packets, "
                                     "not about 1 % (the prefill did not reach the buffers the chain carries?)")
            return mpps, extra
    finally:
        if scr:
            scr.close()
        if cap and cap.proc.poll() is None:
            stop_process(cap.proc)
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
    ap.add_argument("--rows", default=",".join(ROWS), help=f"rows to measure, comma-separated (default: all of "
                    f"{', '.join(ROWS)}; the ratios need baseline)")
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--no-report", action="store_true")
    a = ap.parse_args()
    prefill_s = PREFILL_S
    if a.quick:
        a.runs, a.warmup, a.duration, prefill_s = 1, 0.3, 0.6, 0.15
    rows = tuple(r.strip() for r in a.rows.split(",") if r.strip())
    bad = [r for r in rows if r not in ROWS]
    if bad:
        ap.error(f"--rows: unknown {', '.join(bad)} (rows: {', '.join(ROWS)})")
    try:
        check_binaries((NF_GEN,))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    started = datetime.now(timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    t0 = time.monotonic()
    runs = {r: [] for r in rows}
    extras = {r: [] for r in rows}
    ratios = {r: [] for r in rows}
    errors = []
    prog = Progress(a.runs * len(rows))
    for k in range(a.runs):
        base = None
        for row in rows:
            try:
                mpps, extra = measure(row, a.warmup, a.duration, prefill_s)
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
            note = ""
            if "window_copied" in extra:
                note = (f"; copied {extra['copied_mpps']:.3f} Mpps, lost {extra['lost_mpps']:.3f} Mpps, "
                        f"matched {extra['matched_share']:.2%}, reader CPU {extra['reader_cpu']:.2f}")
            prog.step(f"round {k + 1}: {row:17s} {mpps:7.2f} Mpps" + (f"  ({mpps / base:.3f} of the baseline)"
                                                                     if base and row != "baseline" else "") + note)
    results = []
    for row in rows:
        v = runs[row]
        results.append({"scenario": "observability", "row": row, "nfs": NFS, "size": SIZE, "mode": MODE + "+pipes",
                        "runs_mpps": v, "median_mpps": round(statistics.median(v), 3) if v else None,
                        "min_mpps": min(v) if v else None, "max_mpps": max(v) if v else None,
                        "runs_ratio": ratios[row],
                        "median_ratio": round(statistics.median(ratios[row]), 4) if ratios[row] else None,
                        "runs_extra": extras[row]})
    out = {"started": started.isoformat(timespec="seconds"), "kind": "observability", "machine": machine_info(),
           "elapsed_s": round(time.monotonic() - t0, 1), "quick": a.quick,
           "config": {"runs": a.runs, "warmup_s": a.warmup, "duration_s": a.duration, "rows": list(rows),
                      "nfs": NFS, "size": SIZE, "mode": MODE + "+pipes", "quick": a.quick,
                      "prefill_s": prefill_s, "flows": FLOWS, "filter_1pct": FILTER_1PCT,
                      "capture_port": CAPTURE_PORT},
           "results": results, "errors": errors}
    for r in results:
        print(f"{r['row']:17s} median {r['median_mpps']} Mpps ({r['min_mpps']}-{r['max_mpps']}), "
              f"against the baseline {r['median_ratio']}")
        for e in r["runs_extra"]:
            if "window_copied" in e:
                print(f"{'':17s}   copied {e['window_copied']}, lost {e['window_lost']} of {e['window_rx']} received "
                      f"(matched {e['matched_share']:.2%}); the whole capture: {e['total_written']} written, "
                      f"copied {e['total_copied']}, lost {e['total_lost']}; reader CPU {e['reader_cpu']}")
    save_results(a, "observability.py", stamp, "observability", out)
    regenerate_report(a)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
