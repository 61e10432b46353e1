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

The one-core ceiling (`IoCeiling`, run.py system `testpmd-io`, scenario 1 at N = 1 only): ONE
dpdk-testpmd, no NF, io forwarding between `net_null0,size=B,copy=0` and
`net_null1,size=B,copy=0,no-rx=1` with one forwarding lcore on core 1 (`-l 0,1 --main-lcore 0`,
the core sluiced's worker uses). Port 1 receives nothing (no-rx), so only 0 -> 1 carries packets,
as Sluice's 1-NF chain carries src -> NF -> dst in one direction; testpmd's 1 -> 0 stream is one
empty poll per loop. The rate is the growth of port 1's TX counter: what one core does when it
only moves buffers from one null port to the other.
    bench/peer_memif.py --ceiling --size 64 --duration 5

Trials (scenarios 2 and 3, `MemifTrials`): the same switch and NFs, but the switch's port 0 is a
net_memif server (instead of net_null) to which bench/tester.c (build/bench/sluice-bench-tester)
connects as memif client; the tester is pinned like an NF (`taskset -c 0`, EAL `-l 0`):
    tester -> switch port 0 -> memif1 -> NF1 -> ... -> memifN -> switch port 0 -> tester
One trial:  bench/peer_memif.py --trials --nfs 1 --size 66 --rate 1e6 --duration 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (REPO, TESTPMD, BenchError, CpuShare, OutputReader, eal_memory_args, spawn,  # noqa: E402
                    stop_process)

PROMPT = "testpmd> "
SWITCH_LCORES = ("0,1", "0")  # (-l, --main-lcore): forwarding lcore 1
NF_LCORES = ("1,0", "1")      # forwarding lcore 0
TESTER = Path(os.environ.get("SLUICE_BENCH_TESTER") or Path(os.environ.get("SLUICE_BENCH_BUILD") or os.environ.get("SLUICE_BUILD_DIR") or REPO / "build") / "bench" / "sluice-bench-tester")
TESTER_CORE = "0"             # like the NFs
TESTER_IDLE_US = 0            # the tester's --idle-us (0: it polls like the NFs)


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


def check_trial_size(size: int) -> None:
    if size < 66:
        raise BenchError(f"frame size {size} leaves no room for the 24-byte stamp after the 42 bytes of "
                         "Ethernet/IPv4/UDP headers: trials need >= 66 B")


def check_tester() -> None:
    """Raise BenchError naming the fix when the trial tester (bench/tester.c) is not built."""
    if not (TESTER.is_file() and os.access(TESTER, os.X_OK)):
        raise BenchError(f"{TESTER} not found: build it (ninja -C build) or set SLUICE_BENCH_TESTER")


class Tester:
    """bench/tester.c (sluice-bench-tester) driven over stdin: one command line, one JSON line answer.

    stdout carries only "tester: ready" and the answers; EAL/PMD messages and the tester's own go to
    stderr, read separately (its tail is quoted in errors). Pinned like an NF: `taskset -c 0`, `-l 0`.
    """

    def __init__(self, name: str, eal: list[str], app: list[str], logf=None, errf=None):
        check_tester()
        self.name = name
        self.argv = ["taskset", "-c", TESTER_CORE, str(TESTER), "-l", TESTER_CORE, *eal, "--", *app]
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.out = OutputReader(self.proc, name, logf)
        # OutputReader reads `.stdout`: hand it the stderr pipe under that name
        self.err = OutputReader(types.SimpleNamespace(stdout=self.proc.stderr, poll=self.proc.poll),
                                f"{name} (stderr)", errf)

    def _fail(self, what: str) -> BenchError:
        time.sleep(0.1)  # let the reader catch the last words of a dying process
        return BenchError(f"{self.name}: {what} (rc={self.proc.poll()}); stderr:\n{self.err.tail()}\n"
                          f"stdout:\n{self.out.tail(5)}")

    def wait_ready(self, timeout: float = 30.0) -> None:
        try:
            self.out.wait_for(r"(?m)^tester: ready$", 0, timeout)
        except BenchError as e:
            raise self._fail(str(e).splitlines()[0]) from None

    def call(self, line: str, timeout: float = 10.0) -> dict:
        """Send one command; return its JSON answer (raises BenchError on an {"error": ...} answer)."""
        pos = self.out.pos
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise self._fail(f"cannot send {line!r}: {e}") from None
        try:
            m = self.out.wait_for(r"(?m)^\{.*\}$", pos, timeout)
        except BenchError as e:
            raise self._fail(f"no answer to {line!r}: {str(e).splitlines()[0]}") from None
        d = json.loads(m.group(0))
        if "error" in d:
            raise BenchError(f"{self.name}: {line!r}: {d['error']}")
        return d

    def trial(self, rate_pps: float, duration: float, warmup: float) -> dict:
        if rate_pps <= 0 or duration <= 0 or warmup < 0:
            raise BenchError(f"trial needs rate > 0, duration > 0, warmup >= 0 (got {rate_pps}, {duration}, {warmup})")
        # generous: the tester may reach far less than asked (it shares core 0 with the NFs);
        # assume it manages at least 20 kpps
        timeout = 30 + warmup + 2 + rate_pps * duration / 20_000
        return self.call(f"trial {rate_pps:.3f} {duration:.6f} {warmup:.6f}", timeout=timeout)

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

    tester = False  # MemifTrials: port 0 is the tester's memif

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
        self.timings: dict = {}  # seconds each start-up step took

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

    def _port0_vdev(self, tmp: Path) -> str:
        """The switch's port 0: the traffic source and sink (MemifTrials: the tester's memif)."""
        return f"net_null0,size={self.size},copy=0"

    def _start_tester(self, tmp: Path, mem: list[str]) -> None:
        """MemifTrials starts its tester here (after the switch, before the NFs are waited for)."""

    def start(self) -> None:
        t_start = time.monotonic()
        self.timings = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-memif-")
        tmp = Path(self._tmp.name)
        pid = os.getpid()
        mem = eal_memory_args()
        vdevs = ["--vdev", self._port0_vdev(tmp)]
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
        self.timings["switch_s"] = round(time.monotonic() - t_start, 3)
        # the NFs (and the tester) start side by side: each waits only for its own EAL
        t0 = time.monotonic()
        self._start_tester(tmp, mem)
        for k in range(1, self.nfs + 1):
            nf = Testpmd(
                f"testpmd-nf{k}",
                ["-l", NF_LCORES[0], "--main-lcore", NF_LCORES[1], "--no-pci", *mem,
                 "--file-prefix", f"slbB{pid}_{k}", "--log-level", "*:notice",
                 "--vdev", f"net_memif0,role=client,id=0,socket={tmp}/memif{k}.sock,socket-abstract=no"],
                app_common, logf=self._log(f"nf{k}"))
            self.nf_procs.append(nf)
        for nf in self.nf_procs:
            nf.wait_prompt()
        self.timings["nfs_s"] = round(time.monotonic() - t0, 3)
        # wait for every memif link to come up before starting
        t0 = time.monotonic()
        deadline = t0 + 10
        for k in range(0 if self.tester else 1, self.nfs + 1):
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
        self.timings["links_s"] = round(time.monotonic() - t0, 3)
        self.timings["total_s"] = round(time.monotonic() - t_start, 3)

    def pids(self) -> list[int]:
        return [p.proc.pid for p in ([self.switch] if self.switch else []) + self.nf_procs]

    def delivered(self) -> int:
        """Packets that completed the round trip: TX count of the switch's net_null port."""
        return self.switch.tx_packets(0)

    def _stop_tester(self) -> None:
        """MemifTrials stops its tester here, first."""

    def stop(self) -> None:
        self._stop_tester()
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


class TesterSession:
    """Mixin for a peer chain driven by bench/tester.c: the chain's start() also waits for the
    tester (which _start_tester() launched), trial() is one `trial` command, stop quits it."""

    tester_proc: Tester | None = None

    def start(self) -> None:
        try:
            super().start()
        except BenchError:
            if self.tester_proc is not None and self.tester_proc.proc.poll() is not None:
                self.tester_proc.wait_ready()  # raises, quoting why the tester is gone
            raise
        t0 = time.monotonic()
        self.tester_proc.wait_ready()
        self.timings["tester_ready_s"] = round(time.monotonic() - t0, 3)

    def trial(self, rate_pps: float, duration: float, warmup: float) -> dict:
        return self.tester_proc.trial(rate_pps, duration, warmup)

    def pids(self) -> list[int]:
        return super().pids() + ([self.tester_proc.proc.pid] if self.tester_proc else [])

    def _stop_tester(self) -> None:
        if self.tester_proc is not None:
            try:
                self.tester_proc.quit()
            except Exception:  # noqa: BLE001
                stop_process(self.tester_proc.proc)
            self.tester_proc = None


class MemifTrials(TesterSession, MemifPeer):
    """Zero-loss and latency trials (scenarios 2 and 3) through the testpmd switch and N testpmd NFs.

    As MemifPeer, except the switch's port 0 is `net_memif0,role=server` on its own socket, and
    bench/tester.c connects to it as memif client (`taskset -c 0`, EAL `-l 0`, its own
    --file-prefix): tester -> switch port 0 -> memif1 -> NF1 -> ... -> memifN -> switch port 0 ->
    tester. The chain and the tester stay up for the whole session; each trial() is one `trial`
    command to the tester (see bench/tester.c and bench/README.md for the JSON).
    """

    tester = True

    def __init__(self, nfs: int, size: int, logdir: Path | None = None, tag: str = "memif-trials",
                 mbufs: int = 16384, burst: int = 32, flows: int = 1024, idle_us: int = TESTER_IDLE_US):
        check_trial_size(size)
        super().__init__(nfs=nfs, size=size, mbufs=mbufs, logdir=logdir, tag=tag)
        self.burst, self.flows, self.idle_us = burst, flows, idle_us
        self.tester_proc = None

    def _port0_vdev(self, tmp: Path) -> str:
        return f"net_memif0,role=server,id=0,socket={tmp}/memif0.sock,socket-abstract=no"

    def _start_tester(self, tmp: Path, mem: list[str]) -> None:
        self.tester_proc = Tester(
            "tester",
            ["--no-pci", *mem, "--file-prefix", f"slbT{os.getpid()}", "--log-level", "*:notice",
             "--vdev", f"net_memif0,role=client,id=0,socket={tmp}/memif0.sock,socket-abstract=no"],
            ["--size", str(self.size), "--flows", str(self.flows), "--burst", str(self.burst),
             "--mbufs", str(self.mbufs), "--idle-us", str(self.idle_us)],
            logf=self._log("tester-out"), errf=self._log("tester"))


def print_trials(session_cls, a) -> int:
    """CLI of the peer modules: one session, one trial per --rate, its JSON on stdout."""
    t0 = time.monotonic()
    try:
        with session_cls(nfs=a.nfs, size=a.size, logdir=a.logdir, burst=a.burst, idle_us=a.idle_us) as s:
            print(f"set-up {time.monotonic() - t0:.2f} s {json.dumps(s.timings)}", file=sys.stderr)
            for rate in a.rate:
                t1 = time.monotonic()
                r = s.trial(rate, a.duration, a.warmup)
                if not a.histogram:
                    r.pop("histogram", None)
                print(json.dumps(r), flush=True)
                print(f"trial took {time.monotonic() - t1:.2f} s", file=sys.stderr)
            t1 = time.monotonic()
        print(f"tear-down {time.monotonic() - t1:.2f} s", file=sys.stderr)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def trials_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--trials", action="store_true",
                    help="zero-loss/latency trials with bench/tester.c instead of the flood; prints each trial's JSON")
    ap.add_argument("--rate", type=float, action="append", default=None,
                    help="offered pps of a trial (repeat for several trials in one session; default 1e6)")
    ap.add_argument("--histogram", action="store_true", help="keep the histogram in the printed JSON")
    ap.add_argument("--burst", type=int, default=32, help="the tester's token-bucket depth and TX burst (default 32)")
    ap.add_argument("--idle-us", type=int, default=TESTER_IDLE_US,
                    help=f"the tester sleeps up to this long when idle (0: polls; default {TESTER_IDLE_US})")

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


class IoCeiling:
    """The one-core ceiling of scenario 1 (run.py system `testpmd-io`): one dpdk-testpmd, io forwarding
    net_null0 -> net_null1 on one lcore (core 1, as the testpmd switch and sluiced's worker), no NF.
    net_null1 is `no-rx=1`, so the 1 -> 0 stream testpmd also sets up finds nothing and only 0 -> 1
    carries packets; the rate is port 1's TX counter. Use as a context manager."""

    def __init__(self, size: int = 64, mbufs: int = 16384, logdir: Path | None = None, tag: str = "testpmd-io"):
        if not (Path(TESTPMD).is_file() and os.access(TESTPMD, os.X_OK)):
            raise BenchError(f"dpdk-testpmd not found at {TESTPMD} (install the Debian 'dpdk' package "
                             "or set SLUICE_BENCH_TESTPMD)")
        self.size, self.mbufs, self.logdir, self.tag = size, mbufs, logdir, tag
        self.pmd: Testpmd | None = None
        self.fwd_lcores: list[int] = []
        self._logf = None

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
        if self.logdir is not None:
            self._logf = open(self.logdir / f"{self.tag}.log", "wb")
        self.pmd = Testpmd(
            "testpmd-io",
            ["-l", SWITCH_LCORES[0], "--main-lcore", SWITCH_LCORES[1], "--no-pci", *eal_memory_args(),
             "--file-prefix", f"slbI{os.getpid()}", "--log-level", "*:notice",
             "--vdev", f"net_null0,size={self.size},copy=0", "--vdev", f"net_null1,size={self.size},copy=0,no-rx=1"],
            ["--forward-mode=io", "--port-topology=paired", "--nb-cores=1", f"--total-num-mbufs={self.mbufs}",
             "--no-lsc-interrupt", "--disable-link-check"],
            logf=self._logf)
        self.pmd.wait_prompt()
        text = self.pmd.cmd("start")
        # "Logical Core 1 (socket 0) forwards packets on 2 streams:": the one forwarding lcore must be core 1
        self.fwd_lcores = [int(x) for x in re.findall(r"Logical Core (\d+) \(socket", text)]
        if self.fwd_lcores != [int(SWITCH_LCORES[0].split(",")[1])]:
            raise BenchError(f"testpmd-io: expected one forwarding lcore, 1; 'start' said:\n{text}")

    def delivered(self) -> int:
        """Packets forwarded 0 -> 1: TX count of net_null1."""
        return self.pmd.tx_packets(1)

    def pids(self) -> list[int]:
        return [self.pmd.proc.pid] if self.pmd else []

    def stop(self) -> None:
        if self.pmd is not None:
            try:
                self.pmd.quit()
            except Exception:  # noqa: BLE001 - teardown must go on
                stop_process(self.pmd.proc)
            self.pmd = None
        if self._logf is not None:
            self._logf.close()
            self._logf = None


def run_io_ceiling(size: int, warmup: float, duration: float, logdir: Path | None = None,
                   tag: str = "testpmd-io") -> tuple[float, dict]:
    """Start the one-core ceiling (IoCeiling), measure, tear down; returns (Mpps, extra facts)."""
    with IoCeiling(size=size, logdir=logdir, tag=tag) as io:
        mpps, foreign = measure_rate(io.delivered, warmup, duration, io.pids())
        back = io.pmd.tx_packets(0)  # the 1 -> 0 direction: must have carried nothing
        if back:
            raise BenchError(f"testpmd-io: port 0 transmitted {back} packets; net_null1's no-rx did not hold")
        if mpps <= 0:
            raise BenchError("testpmd-io forwarded no packets")
        return mpps, {"foreign_cpu": round(foreign, 4), "fwd_lcores": io.fwd_lcores, "direction": "0->1"}


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
    ap.add_argument("--ceiling", action="store_true",
                    help="measure the one-core ceiling instead (one testpmd, io net_null0 -> net_null1, no NF)")
    trials_args(ap)
    a = ap.parse_args()
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    if a.trials:
        a.rate = a.rate or [1e6]
        a.size = max(a.size, 66)
        return print_trials(MemifTrials, a)
    try:
        if a.ceiling:
            mpps, extra = run_io_ceiling(a.size, a.warmup, a.duration, a.logdir)
        else:
            mpps, extra = run_peer(a.nfs, a.size, a.warmup, a.duration, a.logdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if a.ceiling:
        print(f"testpmd-io size={a.size}: {mpps:.2f} Mpps ({mpps * a.size * 8 / 1000:.2f} Gbps) net_null0 -> net_null1 "
              f"on lcore {extra['fwd_lcores']}, foreign CPU {extra['foreign_cpu']:.1%}")
        return 0
    print(f"testpmd-memif nfs={a.nfs} size={a.size}: {mpps:.2f} Mpps ({mpps * a.size * 8 / 1000:.2f} Gbps), "
          f"foreign CPU {extra['foreign_cpu']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
