#!/usr/bin/env python3
"""Per-NF benchmark (issue 5): Mpps of each library NF alone in a chain, 64-byte frames.

    bench/nfs.py [--rounds 3] [--window 1.0] [--windows 3] [--only NAME,...] [--quick] [--results DIR]
                 [--no-report]

Set-up per measurement (a fresh sluiced each time; the rows alternate within a round):
  - port "load": net_pcap replaying a generated pcap of 32,768 UDP flows forever (infinite_rx),
    60-byte frames (64 with the FCS), valid IPv4 header checksums; the rows' own pcap variants differ
    only in destinations (the router's spreads them over its routes) and payload (1 in 512 of the
    ids row's packets carries one of its patterns);
  - chain c = [the NF under test] -> exit port "out" (net_null: discards). NFs that pick their own
    output port (nat, router, l2switch) send OUT of "out" themselves;
  - sluiced lcores "0,1": its worker polls on core 1 and also does the pcap replay; the NF is pinned
    to core 0 (`taskset -c 0`), which sluiced's control thread shares but leaves idle, with
    `--wakeup block` so it uses CPU only while it has packets.
Figures per row, each the median over `rounds` (a round's figure is its median window), with min-max:
  - Mpps out: packets leaving "out" per second (for the policing row, fewer than the NF received);
  - Mpps per NF CPU-second: packets the NF handled (its rx count) divided by its utime + stime
    (/proc/PID/stat, all threads) over the same windows: the rate the NF would sustain alone on one
    core. On a 2-vCPU machine where the NF, the worker and the replay share cores this isolates the
    NF's own cost (SDK ring transport included) from the fabric's.
Rows whose binary is not built are skipped, the reason recorded in the JSON and shown in the report;
adding an NF is one entry in ROWS. Results: bench/results/<stamp>-nfs.json (scenario "nfs"), then
BENCHMARKS.md is regenerated (not after --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (REPO, BenchError, CpuShare, Progress, add_round_args, ctl, machine_info,
                    regenerate_report, round_settings, save_results)  # noqa: E402
from sluice.frames import inet_checksum, write_pcap  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build")
SLUICED = BUILD / "src" / "manager" / "sluiced"
FLOWS = 32768
FRAME = 60          # bytes without the FCS: "64-byte" frames
NF_CORE = "0"       # sluiced's worker polls lcore 1
MAC_DST, MAC_SRC = "02:00:00:00:00:02", "02:00:00:00:00:01"
IDS_PATTERNS = 1000
IDS_EVERY = 512     # 1 packet in IDS_EVERY carries a pattern (alerts, not drops)
ROUTES = 1024


def nf_bin(kind: str) -> Path:
    return BUILD / "nfs" / f"sluice-nf-{kind}"


# ---------------------------------------------------------------------------------------------
# traffic


def write_flows(path: Path, n: int, spread_dst: bool = False, payloads: list[bytes] | None = None) -> None:
    """n UDP/IPv4 flows, one packet each: 10.(200 + i>>16).(i>>8).(i) : 1024+i -> 10.250.0.1:9
    (spread_dst: 10.250.(i % 256).(1 + i // 256 % 250), over the router's /24 routes). Payload 18
    bytes of filler, or payloads[i] when given (padded / cut to 18)."""
    eth = bytes.fromhex(MAC_DST.replace(":", "") + MAC_SRC.replace(":", "")) + b"\x08\x00"
    filler = b"sluice-bench-data!"

    def frames():
        for i in range(n):
            src = bytes([10, 200 + (i >> 16), (i >> 8) & 255, i & 255])
            dst = bytes([10, 250, i % 256, 1 + i // 256 % 250]) if spread_dst else bytes([10, 250, 0, 1])
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, FRAME - 14, 0, 0x4000, 64, 17, 0, src, dst)
            ip = ip[:10] + struct.pack("!H", inet_checksum(ip)) + ip[12:]
            pl = (payloads[i] if payloads else filler)[:18].ljust(18, b".")
            yield eth + ip + struct.pack("!HHHH", 1024 + i % 64000, 9, FRAME - 34, 0) + pl
    write_pcap(path, frames())


def ids_patterns(n: int) -> list[bytes]:
    """n distinct 10..16-byte printable patterns (none occurs in the filler)."""
    rnd = random.Random(5)
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-/"
    out = set()
    while len(out) < n:
        out.add(bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(10, 17))))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# the NFs: one entry each. setup(dir) writes the NF's files and returns its arguments.


def fw_setup(d: Path) -> list[str]:
    """100 rules: 99 that this traffic never matches (ports, prefixes, protocols of a real edge
    firewall), then the one that allows it; conntrack on, so each flow meets the rules once."""
    rnd = random.Random(1)
    lines = ["default drop"]
    for k in range(99):
        c = k % 4
        if c == 0:
            lines.append(f"allow proto tcp dport {rnd.randrange(1, 1024)}")
        elif c == 1:
            lines.append(f"drop src 172.{16 + rnd.randrange(16)}.{rnd.randrange(256)}.0/24")
        elif c == 2:
            p = rnd.randrange(1024, 60000)
            lines.append(f"allow proto udp dst 192.0.2.{rnd.randrange(256)} dport {p}-{p + 10}")
        else:
            lines.append(f"allow proto icmp src 198.51.{rnd.randrange(256)}.0/24")
    lines.append("allow proto udp dst 10.250.0.0/16 dport 9 name bench")
    (d / "fw.rules").write_text("\n".join(lines) + "\n")
    return ["--config", d / "fw.rules", "--ct-max", str(2 * FLOWS)]


def nat_setup(d: Path) -> list[str]:
    """Masquerade every flow (32,768 mappings, each keeps its source port) and send it OUT."""
    (d / "nat.conf").write_text("snat from 10.0.0.0/8 to 198.51.100.1\n")
    return ["--inside", "load", "--outside", "out", "--config", d / "nat.conf"]


def router_setup(d: Path) -> list[str]:
    """1,024 routes: 256 /24s that carry the traffic (via 4 gateways on "out") and 768 others
    (random /16../28 prefixes elsewhere), plus the connected subnets; static neighbours."""
    rnd = random.Random(2)
    lines = [f"addr load 10.248.0.1/24 {MAC_DST}", "addr out 10.249.0.1/24 02:00:00:00:01:01"]
    for g in range(4):
        lines.append(f"neigh 10.249.0.{2 + g} lladdr 02:00:00:00:01:{2 + g:02x} dev out")
    for k in range(256):
        lines.append(f"route 10.250.{k}.0/24 via 10.249.0.{2 + k % 4} dev out")
    seen = set()
    while len(seen) < ROUTES - 256:
        plen = rnd.randrange(16, 29)
        a = (rnd.choice((172, 100, 192, 11)) << 24) | rnd.getrandbits(24)
        a &= (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
        if (a, plen) in seen or (a >> 16) == 0xC0A8:
            continue
        seen.add((a, plen))
        lines.append(f"route {socket.inet_ntoa(a.to_bytes(4, 'big'))}/{plen} via 10.249.0.{2 + len(seen) % 4} dev out")
    (d / "router.conf").write_text("\n".join(lines) + "\n")
    return ["--config", d / "router.conf"]


def monitor_setup(d: Path) -> list[str]:
    return ["--records", d / "mon.jsonl", "--idle", "600"]


def monitor_pcap_setup(d: Path) -> list[str]:
    """Records plus a pcapng capture on tmpfs (/dev/shm), bounded to a quarter of its free space."""
    shm = Path(tempfile.mkdtemp(prefix="sluice-bench-nfs-", dir="/dev/shm"))
    (d / "shm").symlink_to(shm)
    free = shutil.disk_usage(shm).free
    return ["--records", d / "mon.jsonl", "--idle", "600", "--pcap", shm / "mon.pcapng",
            "--capture-max-bytes", str(min(4 << 30, free // 4))]


def lb_setup(d: Path) -> list[str]:
    """One UDP service on the traffic's destination, 16 backends (Maglev), a connection per flow."""
    lines = ["vip 10.250.0.1 udp 9"] + [f"backend b{k} 10.251.0.{k + 1}" for k in range(16)]
    (d / "lb.conf").write_text("\n".join(lines) + "\n")
    return ["--config", d / "lb.conf"]


def ids_setup(d: Path) -> list[str]:
    lines = [f'alert udp any any -> any any (msg:"bench pattern {k}"; content:"{p.decode()}"; sid:{1000000 + k}; rev:1;)'
             for k, p in enumerate(ids_patterns(IDS_PATTERNS))]
    (d / "ids.rules").write_text("\n".join(lines) + "\n")
    return ["--rules", d / "ids.rules", "--alert-log", d / "fast.log"]


def ratelimit_setup(rate: str) -> Callable[[Path], list[str]]:
    """One class matching everything, an srTCM meter at `rate` (1 MB buckets): red drops."""
    def setup(d: Path) -> list[str]:
        (d / "rl.conf").write_text(f"class all match any srtcm cir {rate} cbs 1000000 ebs 1000000 red drop\n")
        return ["--config", d / "rl.conf"]
    return setup


def l2switch_setup(d: Path) -> list[str]:
    """A plain learning bridge (no config: every port in VLAN 1). The destination MAC is never
    learned (net_null sends nothing), so every frame is flooded, i.e. sent to "out"."""
    return []


@dataclass
class Row:
    label: str            # the table's row name
    kind: str             # binary: sluice-nf-<kind>
    what: str             # one line for the report
    setup: Callable[[Path], list[str]] = lambda d: []
    pcap: str = "base"    # which generated pcap (see PCAPS)
    target: bool = True   # the 5 Mpps target applies
    extra: dict = field(default_factory=dict)


ROWS = [
    Row("fwd", "fwd", "the platform baseline: NEXT, nothing else"),
    Row("firewall", "firewall", "100 rules (the match is the last), conntrack", fw_setup),
    Row("nat", "nat", "masquerade, 32,768 flows (one mapping each), OUT", nat_setup),
    Row("router", "router", f"{ROUTES:,} routes, destinations over 256 of them, TTL + MACs, OUT", router_setup,
        pcap="spread"),
    Row("monitor", "monitor", "flow records only (32,768 flows)", monitor_setup),
    Row("monitor + pcapng", "monitor", "records + pcapng capture to tmpfs", monitor_pcap_setup),
    Row("lb", "lb", "1 UDP service, 16 backends (Maglev), a connection per flow", lb_setup),
    Row("ids", "ids", f"{IDS_PATTERNS:,} content patterns; 1 packet in {IDS_EVERY} matches (alert)", ids_setup,
        pcap="ids", target=False),
    Row("ratelimit", "ratelimit", "policer at 10 Gbit/s, above the offered rate: nothing dropped",
        ratelimit_setup("10g")),
    Row("ratelimit, policing", "ratelimit", "policer at 100 Mbit/s: most packets dropped",
        ratelimit_setup("100m")),
    Row("l2switch", "l2switch", "learning bridge, unknown destination: flooded to the other port",
        l2switch_setup),
]


def make_pcaps(work: Path, n: int) -> dict[str, Path]:
    pats = ids_patterns(IDS_PATTERNS)
    ids_payloads = [pats[(i // IDS_EVERY) % len(pats)] if i % IDS_EVERY == 0 else b"sluice-bench-data!"
                    for i in range(n)]
    out = {"base": work / "base.pcap", "spread": work / "spread.pcap", "ids": work / "ids.pcap"}
    write_flows(out["base"], n)
    write_flows(out["spread"], n, spread_dst=True)
    write_flows(out["ids"], n, payloads=ids_payloads)
    return out


# ---------------------------------------------------------------------------------------------
# one measurement


def cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of pid, in clock ticks."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError as e:
        raise BenchError(f"NF process {pid} is gone ({e})")
    f = st[st.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])


HZ = os.sysconf("SC_CLK_TCK")


def sample(sock: Path, pid: int) -> tuple[float, int, int, int, dict]:
    st = ctl(sock, cmd="stats")
    out = next(p for p in st["ports"] if p["name"] == "out")["tx_pkts"]
    nf = next((n for n in st["nfs"] if n["name"] == "nf"), None)
    if nf is None:
        raise BenchError("the NF is no longer attached")
    return time.monotonic(), out, nf["rx_pkts"], cpu_ticks(pid), nf


def measure(row: Row, pcaps: dict, work: Path, window: float, windows: int, warmup: float) -> dict:
    d = Path(tempfile.mkdtemp(prefix="nb-", dir=work))
    cfg = {"sluiced": {"pool_mbufs": 65536, "ring_size": 1024, "max_nfs": 8, "lcores": "0,1"},
           "ports": [{"name": "load", "vdev": f"net_pcap0,rx_pcap={pcaps[row.pcap]},infinite_rx=1", "chain": "c"},
                     {"name": "out", "vdev": "net_null0"}],
           "chains": [{"name": "c", "nfs": ["nf"], "exit": "out"}]}
    (d / "cfg.json").write_text(json.dumps(cfg))
    log, nflog = d / "sluiced.log", d / "nf.log"
    sock = d / "ctl.sock"
    t0 = time.monotonic()
    with open(log, "wb") as lf:
        p = subprocess.Popen([SLUICED, "--config", d / "cfg.json", "--socket-dir", d], stdout=lf, stderr=lf,
                             start_new_session=True)
    nf = None
    try:
        while b"sluiced: ready" not in log.read_bytes():
            if p.poll() is not None or time.monotonic() - t0 > 120:
                raise BenchError(f"sluiced did not start ({row.label}):\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        args = [str(a) for a in row.setup(d)]
        with open(nflog, "wb") as nl:
            nf = subprocess.Popen(["taskset", "-c", NF_CORE, nf_bin(row.kind), "--socket", d / "nf.sock",
                                   "--name", "nf", "--service", "nf", "--wakeup", "block", *args],
                                  stdout=nl, stderr=nl, start_new_session=True)
        deadline = time.monotonic() + 60
        while not any(n["name"] == "nf" for n in ctl(sock, cmd="nfs")["nfs"]):
            if nf.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{row.kind} did not attach ({row.label}):\n{nflog.read_text()[-1500:]}")
            time.sleep(0.05)
        time.sleep(warmup)
        samples = []
        with CpuShare([p.pid, nf.pid]) as share:
            samples.append(sample(sock, nf.pid))
            for _ in range(windows):
                time.sleep(window)
                samples.append(sample(sock, nf.pid))
        rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:])]
        (ta, _, rxa, ca, _), (tb, _, rxb, cb, last) = samples[0], samples[-1]
        cpu_s = (cb - ca) / HZ
        st = ctl(sock, cmd="stats")
        # totals only: per-rule / per-backend counters (names with a dot) would swamp the JSON
        counters = {k: v for k, v in (last.get("counters") or {}).items() if "." not in k}
        return {"pps": statistics.median(rates), "windows_pps": [round(r) for r in rates],
                "nf_rx_pps": (rxb - rxa) / (tb - ta), "nf_cpu_s": round(cpu_s, 3), "span_s": round(tb - ta, 3),
                "pps_per_cpu_s": (rxb - rxa) / cpu_s if cpu_s > 0 else None,
                "nf_cpu_share": round(cpu_s / (tb - ta), 3), "foreign_cpu": round(share.foreign, 3),
                "drops": {k: v for k, v in st["drops"].items() if v}, "counters": counters,
                "startup_s": round(time.monotonic() - t0, 2)}
    finally:
        if nf and nf.poll() is None:
            nf.terminate()
            try:
                nf.wait(30)
            except subprocess.TimeoutExpired:
                nf.kill()
        if p.poll() is None:
            try:
                ctl(sock, cmd="shutdown")
            except (OSError, BenchError):
                p.kill()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shm = d / "shm"
        if shm.is_symlink():
            shutil.rmtree(os.readlink(shm), ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def summarise(vals: list[float]) -> dict:
    vals = [v for v in vals if v is not None]
    if not vals:
        return {}
    return {"median": round(statistics.median(vals)), "min": round(min(vals)), "max": round(max(vals))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_round_args(ap, 3, "one short round: a smoke test (< 1 min)")
    ap.add_argument("--only", default="", help="comma-separated row labels or NF kinds to run")
    args = ap.parse_args(argv)
    q = args.quick
    rounds, window, warmup = round_settings(args, 3)
    if os.geteuid() != 0:
        print("nfs.py: needs root (DPDK)", file=sys.stderr)
        return 2
    if not SLUICED.exists():
        print(f"nfs.py: {SLUICED} not built (make build)", file=sys.stderr)
        return 2
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    rows = [r for r in ROWS if not only or r.label in only or r.kind in only]
    skipped = {r.label: f"{nf_bin(r.kind).relative_to(REPO) if nf_bin(r.kind).is_relative_to(REPO) else nf_bin(r.kind)} "
               "not built" for r in rows if not nf_bin(r.kind).exists()}
    todo = [r for r in rows if r.label not in skipped]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"sluice-bench-nfs-{stamp}-"))
    machine = machine_info()
    runs: dict[str, list] = {r.label: [] for r in todo}
    errors = []
    try:
        print(f"nfs.py: {len(todo)} rows x {rounds} round(s), {args.windows} x {window} s windows; "
              f"writing pcaps ({FLOWS} flows) in {work}", flush=True)
        for lbl, why in skipped.items():
            print(f"nfs.py: skipping {lbl}: {why}", flush=True)
        pcaps = make_pcaps(work, FLOWS)
        progress = Progress(rounds * len(todo))
        for rnd in range(rounds):
            for r in todo:
                try:
                    m = measure(r, pcaps, work, window, args.windows, warmup)
                    runs[r.label].append(m)
                    per = m["pps_per_cpu_s"]
                    progress.step(f"round {rnd + 1}: {r.label}: {m['pps'] / 1e6:.2f} Mpps out, "
                                  f"{per / 1e6 if per else 0:.2f} Mpps per NF CPU-s "
                                  f"(NF CPU {m['nf_cpu_share']:.0%}, others {m['foreign_cpu']:.0%})")
                except BenchError as e:
                    errors.append({"scenario": "nfs", "config": r.label, "round": rnd + 1, "error": str(e)})
                    progress.step(f"round {rnd + 1}: {r.label}: FAILED: {str(e).splitlines()[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = []
    for r in rows:
        row = {"scenario": "nfs", "label": r.label, "nf": r.kind, "what": r.what, "size": FRAME + 4,
               "target": r.target}
        if r.label in skipped:
            row["skipped"] = skipped[r.label]
            results.append(row)
            continue
        ms = runs[r.label]
        out, per = summarise([m["pps"] for m in ms]), summarise([m["pps_per_cpu_s"] for m in ms])
        row.update({"runs_pps": [round(m["pps"]) for m in ms],
                    "runs_pps_per_cpu_s": [m["pps_per_cpu_s"] and round(m["pps_per_cpu_s"]) for m in ms],
                    "runs_nf_rx_pps": [round(m["nf_rx_pps"]) for m in ms],
                    "runs_nf_cpu_share": [m["nf_cpu_share"] for m in ms],
                    "runs_foreign_cpu": [m["foreign_cpu"] for m in ms],
                    "runs_windows_pps": [m["windows_pps"] for m in ms],
                    "runs_drops": [m["drops"] for m in ms], "counters": ms[-1]["counters"] if ms else {}})
        if out:
            row.update(median_pps=out["median"], min_pps=out["min"], max_pps=out["max"])
        if per:
            row.update(median_pps_per_cpu_s=per["median"], min_pps_per_cpu_s=per["min"],
                       max_pps_per_cpu_s=per["max"])
        results.append(row)
    print(f"\n{'NF':<22} {'Mpps out':>9} {'min':>6} {'max':>6} {'Mpps/CPU-s':>11} {'min':>6} {'max':>6}")
    for row in results:
        if row.get("skipped"):
            print(f"{row['label']:<22} skipped: {row['skipped']}")
        elif row.get("median_pps") is not None:
            c = [row.get(k, 0) / 1e6 for k in ("median_pps_per_cpu_s", "min_pps_per_cpu_s", "max_pps_per_cpu_s")]
            print(f"{row['label']:<22} {row['median_pps'] / 1e6:>9.2f} {row['min_pps'] / 1e6:>6.2f} "
                  f"{row['max_pps'] / 1e6:>6.2f} {c[0]:>11.2f} {c[1]:>6.2f} {c[2]:>6.2f}")
        else:
            print(f"{row['label']:<22} failed")
    data = {"started": stamp, "kind": "quick" if q else "full", "scenarios": ["nfs"], "machine": machine,
            "config": {"quick": q, "runs": rounds, "duration_s": window, "windows": args.windows, "warmup_s": warmup,
                       "flows": FLOWS, "frame_bytes": FRAME + 4, "nf_core": NF_CORE, "nf_wakeup": "block",
                       "sluiced_lcores": "0,1", "ids_patterns": IDS_PATTERNS, "ids_match_every": IDS_EVERY,
                       "router_routes": ROUTES, "build": str(BUILD)},
            "results": results, "errors": errors}
    save_results(args, "nfs.py", stamp, "nfs", data)
    regenerate_report(args)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
