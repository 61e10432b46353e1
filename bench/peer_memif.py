#!/usr/bin/env python3
"""DPDK peer for the fabric benchmark: two (or more) dpdk-testpmd processes chained over net_memif.

Topology (N = number of NFs, one testpmd per NF):

    switch  (testpmd A, io forwarding, --port-topology=chained, forwarding lcore 1)
        port 0     net_null0  (the traffic source and sink, size=B, copy=0)
        port 1..N  net_memifK, role=server, one socket per NF
    NF k    (testpmd B_k, io forwarding, forwarding lcore 0)
        port 0     net_memif0, role=client on the switch's socket k; one port, so it forwards to itself

With the chained topology A forwards port i -> port i+1 (mod N+1), so a packet goes
null RX -> memif1 TX -> NF1 -> memif1 RX -> memif2 TX -> NF2 ... -> memifN RX -> null TX.
The rate is the growth of port 0's TX counter in A: packets that made the whole round trip.

Pinning on this 2-core machine: A is `-l 0,1 --main-lcore 0` (forwarding on lcore 1, its main
lcore sits idle in the command line on core 0); each B is `-l 1,0 --main-lcore 1` (forwarding on
lcore 0, idle main lcore on core 1). So the switch owns core 1 and the NFs share core 0 -- the
same split the Sluice run uses (sluiced worker on core 1, NFs on core 0).

Run directly for a quick check:  bench/peer_memif.py --size 64 --nfs 1 --duration 5
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import TESTPMD, BenchError, CpuShare, eal_memory_args, spawn, stop_process  # noqa: E402

PROMPT = "testpmd> "
SWITCH_LCORES = ("0,1", "0")  # (-l, --main-lcore): forwarding lcore 1
NF_LCORES = ("1,0", "1")      # forwarding lcore 0


class Testpmd:
    """One interactive dpdk-testpmd driven through its stdin."""

    def __init__(self, name: str, eal: list[str], app: list[str], logf=None):
        self.name = name
        # stdbuf: testpmd prints with stdio; unbuffered so answers arrive as soon as they are printed
        argv = ["stdbuf", "-o0", "-e0", TESTPMD, *eal, "--", "-i", *app]
        self.argv = argv
        self.proc, self.out = spawn(argv, name, logf=logf, stdin=subprocess.PIPE)

    def wait_prompt(self, start: int = 0, timeout: float = 30.0) -> None:
        self.out.wait_for(re.escape(PROMPT), start, timeout)

    def cmd(self, line: str, timeout: float = 10.0) -> str:
        """Send one command, wait for the next prompt, return the text printed in between."""
        start = self.out.pos
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise BenchError(f"{self.name}: cannot send {line!r}: {e}; last output:\n{self.out.tail()}") from e
        m = self.out.wait_for(r"[\s\S]*?" + re.escape(PROMPT), start, timeout)
        return m.group(0)

    def tx_packets(self, port: int) -> int:
        text = self.cmd(f"show port stats {port}")
        m = re.search(r"TX-packets:\s+(\d+)", text)
        if not m:
            raise BenchError(f"{self.name}: no TX-packets in 'show port stats {port}':\n{text}")
        return int(m.group(1))

    def stats(self, port: int) -> dict:
        text = self.cmd(f"show port stats {port}")
        d = {}
        for key in ("RX-packets", "RX-missed", "RX-nombuf", "TX-packets", "TX-errors"):
            m = re.search(re.escape(key) + r":\s+(\d+)", text)
            if m:
                d[key] = int(m.group(1))
        return d

    def quit(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        stop_process(self.proc)


class MemifPeer:
    """The testpmd switch + N testpmd NFs over memif; use as a context manager."""

    def __init__(self, nfs: int = 1, size: int = 64, mbufs: int = 16384, logdir: Path | None = None,
                 tag: str = "peer"):
        if nfs < 1:
            raise ValueError("nfs must be >= 1")
        if not (Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)):
            raise BenchError(f"dpdk-testpmd not found at {TESTPMD} (install the Debian 'dpdk' package "
                             "or set SLUICE_BENCH_TESTPMD)")
        self.nfs, self.size, self.mbufs = nfs, size, mbufs
        self.logdir = logdir
        self.tag = tag
        self.switch: Testpmd | None = None
        self.nf_procs: list[Testpmd] = []
        self._tmp = None
        self._logs = []

    def _log(self, name: str):
        if self.logdir is None:
            return None
        f = open(self.logdir / f"{self.tag}-{name}.log", "wb")
        self._logs.append(f)
        return f

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-memif-")
        tmp = Path(self._tmp.name)
        pid = os.getpid()
        mem = eal_memory_args()
        vdevs = ["--vdev", f"net_null0,size={self.size},copy=0"]
        for k in range(1, self.nfs + 1):
            vdevs += ["--vdev", f"net_memif{k},role=server,id=0,socket={tmp}/memif{k}.sock,socket-abstract=no"]
        app_common = ["--forward-mode=io", f"--total-num-mbufs={self.mbufs}", "--no-lsc-interrupt", "--disable-link-check"]
        # Frames up to 1518 B fit one 2048 B mbuf and one memif buffer (pkt_buffer_size 2048 default).
        self.switch = Testpmd(
            "testpmd-switch",
            ["-l", SWITCH_LCORES[0], "--main-lcore", SWITCH_LCORES[1], "--no-pci", *mem,
             "--file-prefix", f"slbA{pid}", "--log-level", "*:notice", *vdevs],
            [*app_common, "--port-topology=chained"],
            logf=self._log("switch"))
        self.switch.wait_prompt()
        for k in range(1, self.nfs + 1):
            nf = Testpmd(
                f"testpmd-nf{k}",
                ["-l", NF_LCORES[0], "--main-lcore", NF_LCORES[1], "--no-pci", *mem,
                 "--file-prefix", f"slbB{pid}_{k}", "--log-level", "*:notice",
                 "--vdev", f"net_memif0,role=client,id=0,socket={tmp}/memif{k}.sock,socket-abstract=no"],
                app_common, logf=self._log(f"nf{k}"))
            self.nf_procs.append(nf)
            nf.wait_prompt()
        # wait for every memif link to come up before starting
        deadline = time.monotonic() + 10
        for k in range(1, self.nfs + 1):
            while True:
                info = self.switch.cmd(f"show port info {k}")
                if re.search(r"Link status:\s+up", info):
                    break
                if time.monotonic() > deadline:
                    raise BenchError(f"memif port {k} of the switch never came up:\n{info}")
                time.sleep(0.1)
        for nf in self.nf_procs:
            nf.cmd("start")
        self.switch.cmd("start")

    def pids(self) -> list[int]:
        return [p.proc.pid for p in ([self.switch] if self.switch else []) + self.nf_procs]

    def delivered(self) -> int:
        """Packets that completed the round trip: TX count of the switch's net_null port."""
        return self.switch.tx_packets(0)

    def stop(self) -> None:
        for nf in self.nf_procs:
            try:
                nf.quit()
            except Exception:  # noqa: BLE001 - teardown must go on
                stop_process(nf.proc)
        self.nf_procs = []
        if self.switch is not None:
            try:
                self.switch.quit()
            except Exception:  # noqa: BLE001
                stop_process(self.switch.proc)
            self.switch = None
        for f in self._logs:
            f.close()
        self._logs = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def measure_rate(counter, warmup: float, duration: float, pids=()) -> tuple[float, float]:
    """(Mpps, foreign CPU share) from a growing packet counter over a window after a warm-up.

    The foreign CPU share is the fraction of all CPU time in the window spent by processes other
    than `pids` and this harness: anything above a few percent means the figure is disturbed.
    """
    time.sleep(warmup)
    with CpuShare([*pids, os.getpid()]) as cpu:
        t0a = time.monotonic()
        c0 = counter()
        t0 = (t0a + time.monotonic()) / 2
        time.sleep(duration)
        t1a = time.monotonic()
        c1 = counter()
        t1 = (t1a + time.monotonic()) / 2
    if c1 < c0:
        raise BenchError(f"counter went backwards ({c0} -> {c1})")
    return (c1 - c0) / (t1 - t0) / 1e6, cpu.foreign


def run_peer(nfs: int, size: int, warmup: float, duration: float, logdir: Path | None = None,
             tag: str = "peer") -> tuple[float, dict]:
    """Start the testpmd chain, measure, tear down; returns (Mpps, extra facts)."""
    with MemifPeer(nfs=nfs, size=size, logdir=logdir, tag=tag) as peer:
        mpps, foreign = measure_rate(peer.delivered, warmup, duration, peer.pids())
        if mpps <= 0:
            raise BenchError("testpmd memif chain delivered no packets")
        return mpps, {"foreign_cpu": round(foreign, 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nfs", type=int, default=1)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--logdir", type=Path, default=None)
    a = ap.parse_args()
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    try:
        mpps, extra = run_peer(a.nfs, a.size, a.warmup, a.duration, a.logdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"testpmd-memif nfs={a.nfs} size={a.size}: {mpps:.2f} Mpps ({mpps * a.size * 8 / 1000:.2f} Gbps), "
          f"foreign CPU {extra['foreign_cpu']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
