#!/usr/bin/env python3
"""Sluice side of the fabric benchmark: net_null -> N x sluice-nf-fwd -> net_null.

    sluiced   ports src (net_null0, size=B, copy=0, ingress chain "c") and dst (net_null1);
              chain c = fwd1 -> fwd2 -> ... -> fwdN, exit dst; lcores "0,1" (worker on lcore 1)
    NFs       build/nfs/sluice-nf-fwd --service fwdK --wakeup poll|adaptive|block, each `taskset -c 0`
    pipes     with --pipes (or a bench mode MODE+pipes, e.g. poll+pipes) sluiced.pipes is on: each fwd
              hands its packets to the next one through its pipe ring (docs/architecture.md "Pipes")

The rate is the growth of the exit port's tx_pkts (control socket `stats`) over the window.

Pinning on this 2-core machine: the sluiced worker owns core 1; its main lcore (control socket,
mostly idle) and every NF share core 0. With N > 1 the NFs time-share core 0, which is the point
of comparing poll against adaptive there.

Run directly for a quick check:  bench/sluice_fabric.py --nfs 1 --size 64 --mode poll [--pipes]
One latency trial as bench/run.py makes them:  bench/sluice_fabric.py --trials --nfs 3 --rate 300000
    --mode adaptive+pipes+fifo   (prints sent, lost and the latency percentiles in ns)
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
from common import REPO, BenchError, Ctl, spawn, stop_process  # noqa: E402
from peer_memif import measure_rate  # noqa: E402

# the build to measure: $SLUICE_BENCH_BUILD, else $SLUICE_BUILD_DIR (as the sluice CLI), else build/
BUILD = Path(os.environ.get("SLUICE_BENCH_BUILD") or os.environ.get("SLUICE_BUILD_DIR") or REPO / "build")
SLUICED = BUILD / "src" / "manager" / "sluiced"
NF_FWD = BUILD / "nfs" / "sluice-nf-fwd"
NF_GEN = BUILD / "nfs" / "sluice-nf-gen"
NF_SINK = BUILD / "nfs" / "sluice-nf-sink"
NF_CORE = "0"          # taskset core of every NF
SLUICED_LCORES = "0,1"  # main lcore 0, worker lcore 1
# Trials: gen holds at most this many supply buffers (nfs[].quota). With its whole lending budget
# (1024) the supply it drops queued in its TX ring ahead of every stamped packet: ~13 us at 120 kpps
# that the peers' testers do not have (bench/notes.md "Latency: where the microseconds go").
GEN_QUOTA = 64
WAKEUPS = ("poll", "adaptive", "block")
PIPES_SUFFIX = "+pipes"  # a bench mode "poll+pipes": poll NFs, sluiced.pipes on
GROUP_SUFFIX = "+group"  # "adaptive+pipes+group": the fwd NFs as members of one sluice-group (docs/groups.md)
_BASE_MODES = WAKEUPS + tuple(w + PIPES_SUFFIX for w in WAKEUPS)
MODES = _BASE_MODES + tuple(m + GROUP_SUFFIX for m in _BASE_MODES)
GROUP_BIN = BUILD / "src" / "group" / "sluice-group"


FIFO_SUFFIX = "+fifo"    # a trial mode "adaptive+pipes+fifo": also sluiced.nf_sched fifo


def split_sched(mode: str) -> tuple[str, bool]:
    """"MODE+fifo" -> (MODE, True): NFs in chain order as SCHED_FIFO (docs/architecture.md
    "NFs sharing a core"); any other mode -> (mode, False)."""
    return (mode[:-len(FIFO_SUFFIX)], True) if mode.endswith(FIFO_SUFFIX) else (mode, False)


def split_group(mode: str) -> tuple[str, bool]:
    """"MODE+group" -> (MODE, True): the chain's NFs run as members of one sluice-group process."""
    return (mode[:-len(GROUP_SUFFIX)], True) if mode.endswith(GROUP_SUFFIX) else (mode, False)


def parse_mode(mode: str) -> tuple[str, bool]:
    """A bench mode (run.py --modes, results rows' `mode`) -> (NF wakeup mode, pipes on); a +group
    suffix is left to split_group."""
    if mode not in MODES:
        raise ValueError(f"bad Sluice mode {mode!r} (one of {', '.join(MODES)})")
    mode = split_group(mode)[0]
    pipes = mode.endswith(PIPES_SUFFIX)
    return (mode[:-len(PIPES_SUFFIX)] if pipes else mode), pipes


def check_binaries(extra=()) -> None:
    missing = [str(p) for p in (SLUICED, NF_FWD, *extra) if not (p.is_file() and os.access(p, os.X_OK))]
    if missing:
        hint = ("run `meson setup build && ninja -C build` (or `make`) first" if not BUILD.exists()
                else "run `ninja -C build` first")
        raise BenchError("Sluice binaries missing: " + ", ".join(missing) + f"; {hint}, "
                         "or pass --systems testpmd-memif to measure only the DPDK peer")


def make_config(nfs: int, size: int, mbufs: int = 16384, ring: int = 1024, tester: bool = False,
                pipes: bool = False, fifo: bool = False) -> dict:
    """The fabric set-up; with `tester` the chain is gen -> fwd1..N -> sink and the supply port
    starts without an ingress chain (trials switch it on and off)."""
    services = [f"fwd{k}" for k in range(1, nfs + 1)]
    chain = ["gen", *services, "sink"] if tester else services
    src = {"name": "src", "vdev": f"net_null0,size={size},copy=0"}
    if not tester:
        src["chain"] = "c"
    return {
        "sluiced": {"pool_mbufs": mbufs, "ring_size": ring, "max_nfs": 64, "huge_pages": "auto",
                    "lcores": SLUICED_LCORES, "pipes": pipes, "nf_sched": "fifo" if fifo else "other"},
        "ports": [src, {"name": "dst", "vdev": f"net_null1,size={size},copy=0"}],
        "chains": [{"name": "c", "nfs": chain, "exit": "dst"}],
        "nfs": [{"name": s, "quota": GEN_QUOTA} if s == "gen" else {"name": s} for s in chain],
    }


class SluiceFabric:
    """sluiced + N forwarding NFs; use as a context manager."""

    tester = False  # SluiceTrials: gen/sink around the fwd NFs

    def __init__(self, nfs: int = 1, size: int = 64, mode: str = "poll", logdir: Path | None = None,
                 tag: str = "sluice", pipes: bool = False, guests: frozenset = frozenset(), fifo: bool = False,
                 group: bool = False):
        check_binaries(((NF_GEN, NF_SINK) if self.tester else ()) + ((GROUP_BIN,) if group else ()))
        if mode not in WAKEUPS:
            raise ValueError(f"bad wakeup mode {mode!r}")
        if group and guests:
            raise ValueError("a group holds process NFs only, not guests")
        self.nfs, self.size, self.mode, self.pipes, self.fifo = nfs, size, mode, pipes, fifo
        self.group = group  # the fwd NFs as members of one sluice-group process
        self.guests = frozenset(guests)  # NF numbers (1..nfs) that run in a guest (docs/guests.md)
        self.attach_s: dict = {}         # NF number -> seconds from QEMU's start to attached
        self.logdir, self.tag = logdir, tag
        self.sluiced = None
        self.sluiced_out = None
        self.nf_procs: list = []
        self.ctl: Ctl | None = None
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
        self._tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-")
        d = Path(self._tmp.name)
        cfg = d / "sluiced.json"
        cfg.write_text(json.dumps(make_config(self.nfs, self.size, tester=self.tester, pipes=self.pipes,
                                               fifo=self.fifo), indent=1))
        self.sluiced, self.sluiced_out = spawn(
            [str(SLUICED), "--config", str(cfg), "--socket-dir", str(d)], "sluiced", logf=self._log("sluiced"))
        self.sluiced_out.wait_for(r"sluiced: ready", timeout=60)
        self.ctl = Ctl(d / "ctl.sock")
        if self.group:  # one process, members in chain order, one thread turning them all
            argv = ["taskset", "-c", NF_CORE, str(GROUP_BIN), "--name", "fwds", "--plugin-dir", str(BUILD / "nfs"),
                    "--socket", str(d / "nf.sock"), "--wakeup", self.mode]
            for k in range(1, self.nfs + 1):
                argv += ["--", "fwd", "--name", f"fwd{k}.0", "--service", f"fwd{k}"]
            self.nf_procs.append(spawn(argv, "sluice-group fwds", logf=self._log("group")))
        for k in range(1, self.nfs + 1):
            if k in self.guests or self.group:
                continue
            argv = ["taskset", "-c", NF_CORE, str(NF_FWD), "--socket", str(d / "nf.sock"),
                    "--name", f"fwd{k}.0", "--service", f"fwd{k}", "--wakeup", self.mode]
            proc, out = spawn(argv, f"sluice-nf-fwd fwd{k}.0", logf=self._log(f"fwd{k}"))
            self.nf_procs.append((proc, out))
        self.wait_attached(self.nfs - len(self.guests), self.nf_procs)
        for k in sorted(self.guests):  # one at a time: boot-to-attached per guest
            sys.path.insert(0, str(REPO / "python"))
            from sluice import guests as sg
            prep = self.ctl.call("guest_prepare", name=f"fwd{k}.0", service=f"fwd{k}")
            gargv = [f"{sg.GUEST_BIN}/sluice-nf-fwd", "--socket", "guest", "--name", f"fwd{k}.0",
                     "--service", f"fwd{k}", "--wakeup", self.mode]
            kernel, initrd = sg.image_paths({}, str(BUILD))
            argv = ["taskset", "-c", NF_CORE] + sg.qemu_argv(prep, {"memory": 256, "vcpus": 1}, kernel, initrd,
                                                              gargv, {}, f"fwd{k}.0")
            t0 = time.monotonic()
            proc, out = spawn(argv, f"guest fwd{k}.0", logf=self._log(f"guest-fwd{k}"))
            self.nf_procs.append((proc, out))
            have = len(self.ctl.call("nfs").get("nfs", []))
            self.wait_attached(have + 1, self.nf_procs, timeout=120)
            self.attach_s[k] = round(time.monotonic() - t0, 2)

    def wait_attached(self, want: int, procs: list, timeout: float = 20.0) -> None:
        """Until `want` NFs are attached; fails early when one of `procs` or sluiced exits."""
        deadline = time.monotonic() + timeout
        while True:
            attached = self.ctl.call("nfs").get("nfs", [])
            if len(attached) >= want:
                break
            for proc, out in procs:
                if proc.poll() is not None:
                    raise BenchError(f"{out.name} exited with {proc.returncode} before attaching:\n{out.tail()}")
            if self.sluiced.poll() is not None:
                raise BenchError(f"sluiced exited with {self.sluiced.returncode}:\n{self.sluiced_out.tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"only {len(attached)} of {want} NFs attached within {timeout:.0f} s")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return ([self.sluiced.pid] if self.sluiced else []) + [p.pid for p, _ in self.nf_procs]

    def stats(self) -> dict:
        return self.ctl.call("stats")

    def delivered(self) -> int:
        """tx_pkts of the exit port (packets that went through the whole chain)."""
        for p in self.stats()["ports"]:
            if p["name"] == "dst":
                return int(p["tx_pkts"])
        raise BenchError("sluiced stats have no port 'dst'")

    def check_alive(self) -> None:
        if self.sluiced.poll() is not None:
            raise BenchError(f"sluiced exited with {self.sluiced.returncode}:\n{self.sluiced_out.tail()}")
        for proc, out in self.nf_procs:
            if proc.poll() is not None:
                raise BenchError(f"{out.name} exited with {proc.returncode}:\n{out.tail()}")

    def stop(self) -> None:
        if self.ctl is not None:
            try:
                self.ctl.call("shutdown")
            except Exception:  # noqa: BLE001 - teardown must go on
                pass
            self.ctl.close()
            self.ctl = None
        if self.sluiced is not None:
            try:
                self.sluiced.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            stop_process(self.sluiced)
            self.sluiced = None
        for proc, _ in self.nf_procs:
            stop_process(proc, grace=3)
        self.nf_procs = []
        for f in self._logs:
            f.close()
        self._logs = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class SluiceTrials(SluiceFabric):
    """Zero-loss and latency trials: src (net_null, the buffer supply) -> gen -> fwd1..N -> sink.

    sluiced and the N fwd NFs stay up for the whole session; every trial starts a fresh
    sluice-nf-sink (--measure-id 0) and sluice-nf-gen (--rate-pps R, --warmup W, --count W+C),
    switches the supply on (port_chain_set src c), waits out warm-up + trial + stragglers, switches
    it off and reads both NFs' JSON dumps. gen and sink are NFs like the ones under test: they share
    core 0 and cost two extra hops through the worker (see bench/README.md). gen holds at most
    GEN_QUOTA supply buffers. The sink is adaptive (awake while packets flow, asleep between trials):
    the peers' latency ends where the packet reaches the receiver (the Linux sink's kernel receive
    timestamp, before the sink process wakes), not after a wake-up of the receiving process.
    The trial dict has the keys every system's trial() returns (see bench/run.py).
    """

    tester = True

    def __init__(self, nfs: int = 1, size: int = 66, mode: str = "poll", logdir: Path | None = None,
                 tag: str = "sluice-trials", tester_wakeup: str = "adaptive", pipes: bool = False,
                 fifo: bool = False, group: bool = False):
        super().__init__(nfs=nfs, size=size, mode=mode, logdir=logdir, tag=tag, pipes=pipes, fifo=fifo,
                         group=group)
        self.tester_wakeup = tester_wakeup
        self.n_trials = 0

    def _nf_stats(self) -> dict:
        return {n.get("service"): n for n in self.stats().get("nfs", [])}

    def trial(self, rate_pps: float, duration: float, warmup: float) -> dict:
        d = Path(self._tmp.name)
        self.n_trials += 1
        counted, warm = max(1, round(rate_pps * duration)), round(rate_pps * warmup)
        gen_dump, sink_dump = d / f"gen{self.n_trials}.json", d / f"sink{self.n_trials}.json"
        sock = str(d / "nf.sock")
        common = ["--socket", sock, "--wakeup"]
        sink = spawn(["taskset", "-c", NF_CORE, str(NF_SINK), *common, self.tester_wakeup, "--name", "sink.0",
                      "--service", "sink", "--measure-id", "0", "--dump", str(sink_dump)],
                     "sluice-nf-sink", logf=self._log(f"sink{self.n_trials}"))
        # gen polls: the supply keeps its ring full, so it never sleeps anyway
        gen = spawn(["taskset", "-c", NF_CORE, str(NF_GEN), *common, "poll", "--name", "gen.0",
                     "--service", "gen", "--rate-pps", str(round(rate_pps)), "--size", str(self.size),
                     "--warmup", str(warm), "--count", str(warm + counted), "--dump", str(gen_dump)],
                    "sluice-nf-gen", logf=self._log(f"gen{self.n_trials}"))
        try:
            self.wait_attached(self.nfs + 2, [sink, gen, *self.nf_procs])
            before = self._nf_stats()
            self.ctl.call("port_chain_set", port="src", chain="c")
            time.sleep(warmup + duration)
            # stragglers: until the sink's count stands still for 200 ms (at most 2 s more)
            last, still_since, t_end = -1, time.monotonic(), time.monotonic() + 2.0
            while time.monotonic() < t_end:
                rx = self._nf_stats().get("sink", {}).get("rx_pkts", 0)
                if rx != last:
                    last, still_since = rx, time.monotonic()
                elif time.monotonic() - still_since >= 0.2:
                    break
                time.sleep(0.05)
            self.ctl.call("port_chain_set", port="src", chain=None)
            after = self._nf_stats()
            self.check_alive()
        finally:
            stop_process(gen[0], grace=3)
            stop_process(sink[0], grace=3)
        try:
            g = json.loads(gen_dump.read_text())
            s = json.loads(sink_dump.read_text())
        except (OSError, ValueError) as e:
            raise BenchError(f"gen/sink left no readable dump ({e}):\n{gen[1].tail()}\n{sink[1].tail()}")
        sent = max(0, g["generated"] - warm)
        mine = next((x for x in s["generators"] if x["id"] == 0), {"received": 0, "reordered": 0, "duplicates": 0})
        ring_full = {svc: after.get(svc, {}).get("drops", {}).get("ring_full", 0)
                     - before.get(svc, {}).get("drops", {}).get("ring_full", 0)
                     for svc in [f"fwd{k}" for k in range(1, self.nfs + 1)] + ["sink"]}
        return {
            "offered_pps": rate_pps, "sent": sent, "received": mine["received"],
            "lost": sent - mine["received"],
            "sent_pps": (sent - 1) / (g["counted_ns"] / 1e9) if sent > 1 and g["counted_ns"] > 0 else 0.0,
            "latency_ns": s["latency_ns"], "histogram": s["histogram"],
            "reordered": mine["reordered"], "duplicates": mine["duplicates"],
            "ring_full_drops": ring_full,
        }


def summarize_stats(st: dict) -> dict:
    """The few counters worth keeping next to a rate: drops by reason, pool use, NF kicks."""
    out = {"drops": st.get("drops", {}), "pool": st.get("pool", {})}
    out["nf_kicks"] = [n.get("kicks") for n in st.get("nfs", [])]
    return out


def run_sluice(nfs: int, size: int, mode: str, warmup: float, duration: float,
               logdir: Path | None = None, tag: str = "sluice", pipes: bool = False) -> tuple[float, dict]:
    """One measurement. `mode` is an NF wakeup mode, or a bench mode MODE+pipes (same as pipes=True),
    MODE[+pipes]+group (the NFs as one group)."""
    group = split_group(mode)[1]
    mode, suffixed = parse_mode(mode)
    pipes = pipes or suffixed
    with SluiceFabric(nfs=nfs, size=size, mode=mode, logdir=logdir, tag=tag, pipes=pipes, group=group) as fab:
        mpps, foreign = measure_rate(fab.delivered, warmup, duration, fab.pids())
        fab.check_alive()
        st = fab.stats()
        extra = summarize_stats(st)
        extra["foreign_cpu"] = round(foreign, 4)
        extra["pipes"] = st.get("pipes")
        if pipes and nfs > 1 and not (st.get("pipes") or {}).get("open"):
            raise BenchError(f"sluiced.pipes is on but no pipe is open between the {nfs} NFs; "
                             f"stats.pipes: {json.dumps(st.get('pipes'))}")
        if mpps <= 0:
            raise BenchError(f"sluiced delivered no packets; stats: {json.dumps(extra)}")
        return mpps, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nfs", type=int, default=1)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--mode", default="poll", choices=MODES + tuple(m + FIFO_SUFFIX for m in MODES),
                    help="NF wakeup mode; MODE+pipes = MODE with --pipes; MODE+fifo (with --trials only) = "
                         "sluiced.nf_sched fifo, as run.py --trial-mode")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--logdir", type=Path, default=None)
    ap.add_argument("--pipes", action="store_true", help="sluiced.pipes: NF-to-NF pipes between the fwd NFs")
    ap.add_argument("--trials", action="store_true", help="one zero-loss/latency trial at --rate (gen -> N fwd -> sink)")
    ap.add_argument("--rate", type=float, default=1e6, help="offered packets per second with --trials")
    a = ap.parse_args()
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    if a.trials:
        mode, fifo = split_sched(a.mode)
        group = split_group(mode)[1]
        wakeup, pipes = parse_mode(mode)
        try:
            with SluiceTrials(nfs=a.nfs, size=max(a.size, 66), mode=wakeup, logdir=a.logdir,
                              pipes=pipes or a.pipes, fifo=fifo, group=group) as t:
                r = t.trial(a.rate, a.duration, a.warmup)
        except BenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        r.pop("histogram")
        print(json.dumps(r))
        return 0
    if a.mode.endswith(FIFO_SUFFIX):
        ap.error(f"--mode {a.mode}: MODE+fifo is a trial mode (use it with --trials)")
    try:
        mpps, extra = run_sluice(a.nfs, a.size, a.mode, a.warmup, a.duration, a.logdir, pipes=a.pipes)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    wakeup, pipes = parse_mode(a.mode)
    print(f"sluice nfs={a.nfs} size={a.size} mode={wakeup} pipes={a.pipes or pipes}: {mpps:.2f} Mpps "
          f"({mpps * a.size * 8 / 1000:.2f} Gbps); {json.dumps(extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
