#!/usr/bin/env python3
"""Steering benchmark (issue 4): sluiced's throughput with 10 and 10,000 rules and 1M active flows,
port to port and through one fwd NF.

    bench/steering.py [--rounds 5] [--window 1.0] [--windows 3] [--quick] [--results DIR] [--no-report]

Set-up per measurement (a fresh sluiced each time, configurations alternating within a round):
  - port "load": net_pcap replaying 32,768 UDP flows forever (infinite_rx) -- the measured traffic;
  - port "flows" (the 1M-flow rows): net_pcap reading 1,000,000 more distinct UDP flows once, before
    the measurement, so the flow table holds about 1.03M active flows (idle timeout 10 min);
  - port "out": net_null (discards);
  - rules: N - 2 rules that never match this traffic (random prefixes, protocols and ports, many
    sharing 10.250/16 and UDP with it, higher priorities) and one rule per input port that sends it
    out (`port` rows) or into chain [fwd] -> out (`nf` rows);
  - the `no flow table` rows set steering.flows = 0: every packet goes through rte_acl.
Figure: packets out of "out" per second over `windows` windows of `window` s after the flows were
loaded; median of the rounds (each round's figure is its median window), min and max.
The pcaps are generated into a temporary directory. Results: bench/results/<stamp>-steering.json
(scenario "steering"), then BENCHMARKS.md is regenerated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (REPO, BenchError, Progress, add_round_args, ctl, machine_info, regenerate_report,
                    round_settings, save_results)  # noqa: E402
from sluice.frames import write_pcap  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build")
SLUICED = BUILD / "src" / "manager" / "sluiced"
FWD = BUILD / "nfs" / "sluice-nf-fwd"
LOAD_FLOWS = 32768
BIG_FLOWS = 1_000_000

# (label, rules, extra flows, through an NF, flow table)
CONFIGS = [
    ("10 rules, port to port", 10, 0, False, True),
    ("10,000 rules + 1M flows, port to port", 10000, BIG_FLOWS, False, True),
    ("10 rules, fwd NF", 10, 0, True, True),
    ("10,000 rules + 1M flows, fwd NF", 10000, BIG_FLOWS, True, True),
    ("10 rules, no flow table, port to port", 10, 0, False, False),
    ("10,000 rules, no flow table, port to port", 10000, 0, False, False),
]


def write_flows(path: Path, n: int, net: int) -> None:
    """n distinct UDP/IPv4 flows 10.<net+i//65536>.<i> -> 10.250.0.1:9, 64-byte frames."""
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    dst = bytes([10, 250, 0, 1])

    def frames():
        for i in range(n):
            src = ((10 << 24) | ((net + (i >> 16)) << 16) | (i & 0xFFFF)).to_bytes(4, "big")
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0, src, dst)
            yield eth + ip + struct.pack("!HHHH", 1000 + i % 7, 9, 26, 0) + bytes(18)
    write_pcap(path, frames())


def noise_rules(n: int, rnd: random.Random) -> list[dict]:
    """Rules that never match the benchmark's traffic but look like it (same /16, UDP, ports)."""
    out = []
    for _ in range(n):
        k = rnd.randrange(4)
        if k == 0:
            m = {"dst": f"10.250.{rnd.randrange(1, 256)}.0/24", "proto": 17}
        elif k == 1:
            m = {"src": f"10.{rnd.randrange(256)}.{rnd.randrange(256)}.0/24", "proto": 6, "dst_port": [80, 80]}
        elif k == 2:
            p = rnd.randrange(100, 60000)
            m = {"dst": f"172.{16 + rnd.randrange(16)}.{rnd.randrange(256)}.0/24", "proto": 17, "dst_port": [p, p]}
        else:
            m = {"dst": "10.250.0.1/32", "proto": 17, "src_port": [2000 + rnd.randrange(60000)] * 2}
        out.append({"priority": 100 + rnd.randrange(1000), "match": m, "action": "drop"})
    return out



def out_pkts(sock: Path) -> int:
    return next(p for p in ctl(sock, cmd="ports")["ports"] if p["name"] == "out")["tx_pkts"]


def measure(cfg_row, pcaps: dict, work: Path, window: float, windows: int) -> dict:
    label, nrules, big, with_nf, flow_table = cfg_row
    d = Path(tempfile.mkdtemp(prefix="sb-", dir=work))
    act = {"chain": "c"} if with_nf else {"port": "out"}
    ports = [{"name": "load", "vdev": f"net_pcap0,rx_pcap={pcaps['load']},infinite_rx=1"},
             {"name": "out", "vdev": "net_null0"}]
    rules = noise_rules(nrules - 2, random.Random(nrules))
    rules.append({"priority": 1, "match": {"in_port": "load", "proto": 17, "dst": "10.250.0.1/32"}, "action": act})
    if big:
        ports.insert(1, {"name": "flows", "vdev": f"net_pcap1,rx_pcap={pcaps['big']}"})
        rules.append({"priority": 1, "match": {"in_port": "flows", "proto": 17, "dst": "10.250.0.1/32"},
                      "action": act})
    cfg = {"sluiced": {"pool_mbufs": 65536, "ring_size": 1024, "max_nfs": 8, "lcores": "0,1"},
           "ports": ports, "chains": [{"name": "c", "nfs": ["fwd"], "exit": "out"}], "rules": rules,
           "steering": {"flows": (1 << 21) if flow_table else 0, "flow_idle_ms": 600000}}
    (d / "cfg.json").write_text(json.dumps(cfg))
    log = d / "sluiced.log"
    sock = d / "ctl.sock"
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        p = subprocess.Popen([SLUICED, "--config", d / "cfg.json", "--socket-dir", d], stdout=lf, stderr=lf,
                             start_new_session=True)
    nf = None
    try:
        while b"sluiced: ready" not in log.read_bytes():
            if p.poll() is not None or time.monotonic() - t0 > 120:
                raise BenchError(f"sluiced did not start ({label}):\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        startup = time.monotonic() - t0
        if with_nf:
            nf = subprocess.Popen([FWD, "--socket", d / "nf.sock", "--name", "fwd.0", "--service", "fwd"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if big:
            deadline = time.monotonic() + 120
            while next(x for x in ctl(sock, cmd="ports")["ports"] if x["name"] == "flows")["rx_pkts"] < big:
                if time.monotonic() > deadline:
                    raise BenchError(f"the {big} flows were not read in 120 s ({label})")
                time.sleep(0.2)
        time.sleep(0.5)
        rates = []
        for _ in range(windows):
            a, ta = out_pkts(sock), time.monotonic()
            time.sleep(window)
            b, tb = out_pkts(sock), time.monotonic()
            rates.append((b - a) / (tb - ta))
        st = ctl(sock, cmd="stats")
        return {"pps": statistics.median(rates), "windows_pps": [round(r) for r in rates],
                "flow_entries": st["flows"]["entries"], "flow_hits": st["flows"]["hits"],
                "drops": st["drops"], "startup_s": round(startup, 2)}
    finally:
        for proc in (nf, p):
            if proc and proc.poll() is None:
                if proc is p:
                    try:
                        ctl(sock, cmd="shutdown")
                    except (OSError, BenchError):
                        proc.kill()
                else:
                    proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_round_args(ap, 5, "one short round with 20,000 big flows: a smoke test")
    args = ap.parse_args(argv)
    q = args.quick
    rounds, window, _ = round_settings(args, 5)  # the flows' loading is its warm-up
    big = 20000 if q else BIG_FLOWS
    if os.geteuid() != 0:
        print("steering.py: needs root (DPDK)", file=sys.stderr)
        return 2
    for b in (SLUICED, FWD):
        if not b.exists():
            print(f"steering.py: {b} not built (make build)", file=sys.stderr)
            return 2
    big_txt = f"{big / 1e6:g}M" if big >= 1e6 else f"{big:,}"
    configs = [(lbl.replace("1M", big_txt), n, big if f else 0, nf, ft) for lbl, n, f, nf, ft in CONFIGS]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"sluice-bench-steering-{stamp}-"))
    try:
        pcaps = {"load": work / "load.pcap", "big": work / "big.pcap"}
        print(f"steering.py: writing pcaps ({LOAD_FLOWS} + {big} flows) in {work}", flush=True)
        write_flows(pcaps["load"], LOAD_FLOWS, 200)
        write_flows(pcaps["big"], big, 100)
        progress = Progress(rounds * len(configs))
        runs: dict[str, list] = {c[0]: [] for c in configs}
        errors = []
        for rnd in range(rounds):
            for c in configs:
                try:
                    r = measure(c, pcaps, work, window, args.windows)
                    runs[c[0]].append(r)
                    progress.step(f"round {rnd + 1}: {c[0]}: {r['pps'] / 1e6:.2f} Mpps "
                                  f"({r['flow_entries']} flows)")
                except BenchError as e:
                    errors.append({"scenario": "steering", "config": c[0], "round": rnd + 1, "error": str(e)})
                    progress.step(f"round {rnd + 1}: {c[0]}: FAILED: {str(e).splitlines()[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for lbl, nrules, nbig, nf, ft in configs:
        vals = [r["pps"] for r in runs[lbl]]
        row = {"scenario": "steering", "label": lbl, "rules": nrules, "extra_flows": nbig, "nf": nf,
               "flow_table": ft, "runs_pps": [round(v) for v in vals],
               "runs_flow_entries": [r["flow_entries"] for r in runs[lbl]],
               "runs_drops": [r["drops"] for r in runs[lbl]], "runs_windows_pps": [r["windows_pps"] for r in runs[lbl]]}
        if vals:
            row.update(median_pps=round(statistics.median(vals)), min_pps=round(min(vals)), max_pps=round(max(vals)))
        rows.append(row)
    print(f"\n{'configuration':<44} {'median Mpps':>11} {'min':>7} {'max':>7} {'flows':>9}")
    for row in rows:
        if row.get("median_pps") is not None:
            print(f"{row['label']:<44} {row['median_pps'] / 1e6:>11.2f} {row['min_pps'] / 1e6:>7.2f} "
                  f"{row['max_pps'] / 1e6:>7.2f} {max(row['runs_flow_entries']):>9}")
    data = {"started": stamp, "kind": "quick" if q else "full", "scenarios": ["steering"],
            "machine": machine_info(), "config": {"quick": q, "runs": rounds, "duration_s": window,
                                                  "windows": args.windows, "load_flows": LOAD_FLOWS, "big_flows": big},
            "results": rows, "errors": errors}
    save_results(args, "steering.py", stamp, "steering", data)
    regenerate_report(args)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
