#!/usr/bin/env python3
"""Scenario 5, NF count sweep (issue 6): N = 1 .. 2000 NFs, every packet through 2 of them, consecutive
packets to different NFs; aggregate Mpps, latency, sluiced CPU, memory and start-up per N.

    bench/density.py [--nfs 1,10,100,500,1000,2000] [--sizes 64,700] [--rounds 3] [--forms process,group]
                     [--quick] [--results DIR] [--no-report] [--logdir DIR] [--nf-timeout-us T] [...]

Set-up: one session (a fresh sluiced and N fresh NFs) per (round, N, form); inside it every frame
size is measured in turn. Forms of the N NFs (`--forms`, default process; within a round each N is
measured in every form back to back, so both forms see the same phase of the host):
  - process: N `sluice-nf-fwd` processes;
  - group: ONE `sluice-group` process (docs/groups.md) hosting the N as members `fwd` with the same
    names, services and options (A.k, B.k, --wakeup/--batch/--timeout-us/--spin-us), in the same CPU
    cgroup as the processes; each member attaches to sluiced as an NF of its own, one after the other.
    "NF runs" (schedstat) are then the group process's runs, memory's NF figures the group process's
    private pages (and per member: that / N), and start-up ends when sluiced lists all N members.
  - port "src": net_null (`size=64,copy=0`), the buffer supply (docs/nfs.md "gen"); its ingress chain is
    switched on for a trial and off after it (port_chain_set);
  - chain c = [gen, A, B, sink], no exit port: `sluice-nf-gen` turns supply buffers into stamped test
    packets, `sluice-nf-sink` measures them and drops them;
  - services A and B: `sluice-nf-fwd` with ceil(N/2) and floor(N/2) replicas and the replica policy
    `round_robin` (per packet, in turn; docs/steering.md): consecutive packets go to different NFs at
    both hops and every packet crosses exactly 2 of the N NFs. This is the method of Cerrato et al.
    (fine-grained NFs through DPDK): a packet never meets the NF its predecessor met, so an NF gets no
    batch from consecutive packets. N = 1: chain [gen, A, A, sink] with one replica of A (sluiced
    follows a chain by hop index, so a service may appear twice): the one NF handles every packet
    twice, still 2 NF traversals per packet;
  - sizes: "64" is sent as 66-byte frames, the smallest that holds gen's 24-byte stamp (42 B of headers
    + stamp; a 64-byte frame would go unstamped, with neither latency nor loss measured); the JSON
    keeps both (`size` 64, `frame_bytes` 66). 700 is 700-byte frames;
  - `ring_size` 1024 (sluiced's default; a smaller ring overflowed at the sink), `pool_mbufs` 65,536,
    `max_nfs` N + 16.
Cores and scheduling (2 vCPUs): sluiced's lcores are "0,1": its worker polls core 1 alone. This script,
sluiced's control thread and every NF, gen and sink run on core 0 (the NFs inherit this script's
affinity: no taskset exec per NF). A/B NFs use `--wakeup block --batch 32 --timeout-us 1000`: they sleep
until sluiced kicks them (32 packets waiting, or the oldest waited 1 ms); polling NFs would spend the
core on context switches. 1 ms because 0.5 ms gave more kicks for the same work (and worse latency at
N = 100) and 2-5 ms added latency without more throughput (measured here, 700 B). gen and sink block
too. Two measures keep the tester from being what is measured (both found necessary here):
  - CPU cgroups (python/sluice/cgroups.py, the mechanism of the config's cpu_weight): the N NFs in one
    group (weight 100), gen in one (100 in the throughput trial, `--gen-paced-share` 0.1 x in the paced
    trials). Without them gen is one
    task among N runnable NFs under fair scheduling and got 1-2 % of core 0 at N = 2000 whatever its
    nice value, so it, not the fabric, set the rate. A paced gen still takes every supply buffer and
    drops the surplus: with weight 1 that work took up to a third of core 0 from the NFs at N = 2000,
    hence 0.1 there (its `--burst` is 256, so it catches up after a turn off the CPU). Shares are
    work-conserving: a group's unused share goes to the others. `--tester-share 0` turns this off;
  - the sink runs SCHED_FIFO (priority 1; in the root cgroup, as RT group scheduling requires): it
    only measures and drops, sleeps when its ring is empty, and must never be what overflows. As a
    normal task, even with 10x the NFs' weight, it waited out other tasks' turns (EEVDF lets the
    running task finish its slice) and its 1024-slot ring overflowed at ~1.4 Mpps (`--no-sink-rt`);
  - NFs are started in this script's session (own process group, so a terminal's Ctrl-C reaches only
    this script, which stops them). With autogroup scheduling (kernel.sched_autogroup_enabled, on
    here) every session is a scheduling group, and the sluice CLI's supervisor, which starts each NF
    with setsid, gives each NF its own; at N = 2000, 4x fewer packets reached the sink that way in a
    probe without the cgroups (`--nf-sessions own`; moot while the cgroups are on, since autogroup
    applies only to tasks in the root cgroup).

Trials per (session, size):
  1. throughput: gen unlimited (`--rate-pps 0`: every supply buffer becomes a packet, far more than the
     fabric carries), `--windows` windows of `--window` s after `--warmup` s. Aggregate Mpps = packets
     reaching the sink per second (its rx count in sluiced's `stats`); a round's figure is its median
     window. The sink's histogram over the same span (SIGUSR1 dumps before and after, their difference)
     gives the latency under overload, recorded as such, not as the headline.
  2. latency: gen paced at `--lat-load` (default 50 %) of the throughput this round measured for this
     N and size: `--lat-warmup` s under another generator id, then `--lat-duration` s of counted
     packets, then stragglers; a fresh gen and sink (`--measure-id`), so the sink's histogram and loss
     count hold exactly the counted packets. Latency = gen's TSC stamp to the sink's batch (docs/nfs.md).
  3. target (700 B only), for every N so the curve shows where it breaks: as 2, at 1.4 Mpps offered.
Figures per (N, size): median over the rounds, with min-max, of aggregate Mpps; p50/p99 of the latency
and target trials; sluiced CPU (all its threads over the throughput windows, % of one core: the worker
polls, so ~100 % by design; the control thread's share is kept apart); packets lost inside the fabric
(after gen, in the throughput windows: ring full at A, B or the sink, nf_gone, invalid_desc; the
supply's surplus dropped at gen's own ring or by backpressure at the entry is no loss); total memory;
NF start-up (all N spawned with at most `--spawn-window` not yet attached at a time, since libsluice
gives up an attach after 5 s, until sluiced's nf_count says all attached). And what bounds them, from
/proc/PID/schedstat (exact run time; tick-sampled utime/stime miss most of a process that runs for
microseconds at a time): NF runs per second, CPU per run, packets per run, NFs waiting runnable on
average, CPU of gen and sink, sluiced's kicks and doorbells per second.
Memory (per session, after the trials, KiB): sluiced VmRSS (anonymous + file + shared pages it maps:
heap, DPDK, both ring memfds of every NF; the packet region too when on 4 KiB pages) + sluiced
HugetlbPages (the packet region and DPDK's memory on 2 MiB pages) + the sum over the N NFs of
Private_Clean + Private_Dirty (/proc/PID/smaps_rollup: pages only that NF maps; the region and rings it
shares are counted once, in sluiced; each process once, so a group's members are its one process, and
`nf_private_kib_per_member` is the sum / N). gen and sink are left out; page tables (VmPTE) and the NF
processes' open descriptors are in the JSON.
Before each session the script waits (up to `--quiet-wait` s) for a machine at most `--quiet-limit`
busy or stolen, and records the CPU share of other processes and of the hypervisor (steal) per trial.
Progress: one line per measurement (elapsed, estimate left). Results: bench/results/<stamp>-density.json
(scenario "density"; every session and row has its "form"; "target" is the verdict for the process
form as before, "targets" the verdict per measured form) and <stamp>-density.png, then BENCHMARKS.md
is regenerated (not after --quick or --no-report). Every process, cgroup and the temporary directory are removed at the end, on failure,
on Ctrl-C and on SIGTERM; nothing is written under /run (sockets live in the temporary directory).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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
from common import RESULTS, REPO, BenchError, Ctl, Progress, machine_info, regenerate_report, save_results  # noqa: E402

sys.path.insert(0, str(REPO / "python"))

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build")
SLUICED = BUILD / "src" / "manager" / "sluiced"
NF_FWD = BUILD / "nfs" / "sluice-nf-fwd"
NF_GEN = BUILD / "nfs" / "sluice-nf-gen"
NF_SINK = BUILD / "nfs" / "sluice-nf-sink"
GROUP = BUILD / "src" / "group" / "sluice-group"
PLUGIN_DIR = BUILD / "nfs"
FORMS = ("process", "group")
NF_CORE = 0
LCORES = "0,1"
STAMP_MIN = 66                 # smallest frame that holds gen's stamp
DEFAULT_NFS = (1, 10, 100, 500, 1000, 2000)
DEFAULT_SIZES = (64, 700)
TARGET = {"nfs": 2000, "size": 700, "pps": 1.4e6, "p99_ns": 5e6}
HZ = os.sysconf("SC_CLK_TCK")
ALL_CPUS = os.sched_getaffinity(0)
FABRIC_LOSS = ("nf_gone", "invalid_desc")   # global drop reasons that count as loss after gen


def frame_of(size: int) -> int:
    return max(size, STAMP_MIN)


class Interrupted(BaseException):
    """SIGTERM: unwind like Ctrl-C so every finally block cleans up."""


def _on_term(signum, frame):
    raise Interrupted(f"signal {signum}")


# ---------------------------------------------------------------------------------------------
# small helpers


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of pid in ns (/proc/PID/task/*/schedstat: exact run time, where
    utime/stime are tick samples that miss most of a process that runs for microseconds at a time,
    as 2000 NFs woken per packet do); 0 when it is gone."""
    return sum(thread_cpu_ns(pid).values())


def schedstat(pid: int) -> tuple[int, int, int]:
    """(ns run, ns waited runnable, times scheduled) of pid's main thread (NFs have one)."""
    try:
        r, w, n = Path(f"/proc/{pid}/schedstat").read_text().split()[:3]
        return int(r), int(w), int(n)
    except (OSError, ValueError):
        return 0, 0, 0


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time in ns per thread name of pid."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() if len(tids) > 1 else "main"
        except (OSError, ValueError, IndexError):
            continue
        out[name] = out.get(name, 0) + ns
    return out


def status_kib(pid: int) -> dict[str, int]:
    out = {}
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            k, _, v = ln.partition(":")
            v = v.split()
            if len(v) == 2 and v[1] == "kB":
                out[k] = int(v[0])
    except OSError:
        pass
    return out


def smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    try:
        for ln in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            p = ln.split()
            if len(p) == 3 and p[2] == "kB":
                out[p[0].rstrip(":")] = int(p[1])
    except OSError:
        pass
    return out


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def pct_from_hist(hist: list[list[int]], q: float) -> int | None:
    """Percentile q (0..1) of a [[upper_ns, count], ...] histogram: the upper bound of the bucket
    holding the sample of rank ceil(q * count) (at most 6.25 % above the true sample)."""
    total = sum(c for _, c in hist)
    if total <= 0:
        return None
    rank, acc = max(1, math.ceil(q * total)), 0
    for upper, c in hist:
        acc += c
        if acc >= rank:
            return int(upper)
    return int(hist[-1][0])


def hist_diff(a: list, b: list) -> list[list[int]]:
    """b - a for cumulative histograms (bucket upper bounds match: the same sink)."""
    before = {u: c for u, c in a}
    out = [[u, c - before.get(u, 0)] for u, c in b]
    return [x for x in out if x[1] > 0]


def cpu_times() -> list[int]:
    """/proc/stat's machine line: user nice system idle iowait irq softirq steal (jiffies)."""
    return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]


class MachineShare:
    """Shares of all the machine's CPU time over a span: `steal` (the hypervisor ran something else
    on our vCPUs), `foreign` (busy in processes other than `pids`, or in interrupts) and `ours`."""

    def __init__(self, pids):
        self.pids = list(pids)

    def __enter__(self):
        self.c0, self.o0 = cpu_times(), sum(cpu_ns(p) for p in self.pids) * HZ / 1e9
        return self

    def __exit__(self, *exc):
        c1, o1 = cpu_times(), sum(cpu_ns(p) for p in self.pids) * HZ / 1e9
        d = [b - a for a, b in zip(self.c0, c1)]
        total = max(1, sum(d))
        busy = d[0] + d[1] + d[2] + d[5] + d[6]
        self.steal = d[7] / total
        self.ours = (o1 - self.o0) / total
        self.foreign = max(0.0, (busy - (o1 - self.o0)) / total)
        return False


def wait_quiet(limit: float, progress: Progress, max_wait: float) -> dict:
    """Before a session: until a 1 s sample of the machine shows at most `limit` of its CPU busy or
    stolen (or `max_wait` s passed). Returns the last sample and the time waited."""
    t0 = time.monotonic()
    while True:
        with MachineShare([]) as m:
            time.sleep(1.0)
        waited = time.monotonic() - t0 - 1.0
        if m.foreign + m.steal <= limit or waited >= max_wait:
            if waited > 0.5:
                progress.note(f"waited {waited:.0f} s for a quiet machine (now busy {m.foreign:.0%}, "
                              f"stolen {m.steal:.0%})")
            return {"busy": round(m.foreign, 3), "steal": round(m.steal, 3), "waited_s": round(waited, 1)}
        time.sleep(1.0)


def autogroup() -> bool | None:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def summary(vals) -> dict | None:
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


class Groups:
    """CPU cgroups under sluice-bench-density-<pid> (python/sluice/cgroups.py, the mechanism behind the
    config's cpu_weight) so that the tester is not what is measured: "nfs" holds the N NFs (weight
    100), "gen" the generator (100 x `share`), and "sink" (1000) only with --no-sink-rt (otherwise the
    sink is SCHED_FIFO in the root cgroup). Without them the tester is one task among N runnable NFs under
    fair scheduling and gets about 1/(N+1) of the core whatever its nice value, so at N = 2000 it,
    not the fabric, would set the rate (measured: gen at 1-2 % of core 0). Shares are work-conserving:
    what a group does not use goes to the others. Removed at the session's end."""

    def __init__(self, share: float):
        from sluice.cgroups import CpuWeights
        self.cw = CpuWeights(f"bench-density-{os.getpid()}")
        self.weights = {"nfs": 100, "gen": max(1, min(10000, round(100 * share))), "sink": 1000}
        self.dirs: dict[str, str] = {}

    def place(self, name: str, pid: int) -> None:
        d = self.dirs.get(name)
        if d is None:
            self.cw.place(name, pid, self.weights[name])
            self.dirs[name] = self.cw.groups[name]
            return
        try:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        except ProcessLookupError:
            pass

    def set_weight(self, name: str, share: float) -> None:
        """gen's weight for the next trial, `share` x the NFs' (before gen is placed in the group)."""
        self.weights[name] = max(1, min(10000, round(100 * share)))
        d = self.dirs.get(name)
        if d is not None:
            kind_file = "cpu.weight" if self.cw.kind == "v2" else "cpu.shares"
            val = self.weights[name] if self.cw.kind == "v2" else self.cw.shares(self.weights[name])
            with open(os.path.join(d, kind_file), "w") as f:
                f.write(str(val))

    def close(self) -> None:
        self.cw.close()


# ---------------------------------------------------------------------------------------------
# one session: sluiced + N fwd NFs


class Session:
    def __init__(self, n: int, args, work: Path, logdir: Path | None, form: str = "process"):
        self.n, self.a, self.logdir, self.form = n, args, logdir, form
        self.na = (n + 1) // 2                  # replicas of A (N = 1: A only, traversed twice)
        self.nb = n // 2
        self.dir = Path(tempfile.mkdtemp(prefix=f"d{n}-{form}-", dir=work))
        self.sluiced: subprocess.Popen | None = None
        self.nfs: dict[str, subprocess.Popen] = {}   # NF name -> its process (form group: one for all)
        self.tester: list[subprocess.Popen] = []
        self.ctl: Ctl | None = None
        self.trials = 0
        self.timings: dict[str, float] = {}
        self._files = []
        self.groups = Groups(args.tester_share) if args.tester_share > 0 else None

    # -- set-up

    def config(self) -> dict:
        chain = ["gen", "A", "B", "sink"] if self.n > 1 else ["gen", "A", "A", "sink"]
        nfs = [{"name": "gen"}, {"name": "A", "policy": "round_robin"}, {"name": "sink"}]
        if self.n > 1:
            nfs.insert(2, {"name": "B", "policy": "round_robin"})
        return {"sluiced": {"pool_mbufs": self.a.pool, "ring_size": self.a.ring_size,
                            "max_nfs": self.n + 16, "huge_pages": "auto", "lcores": LCORES},
                "ports": [{"name": "src", "vdev": "net_null0,size=64,copy=0"}],
                "chains": [{"name": "c", "nfs": chain}],
                "nfs": nfs}

    def _log(self, name: str):
        f = open((self.logdir or self.dir) / name, "ab")
        self._files.append(f)
        return f

    def start(self, progress: Progress) -> None:
        cfg = self.dir / "cfg.json"
        cfg.write_text(json.dumps(self.config(), indent=1))
        log = self.dir / "sluiced.log"
        t0 = time.monotonic()
        pinned = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, ALL_CPUS)  # sluiced places its own lcores
            with open(log, "wb") as lf:
                self.sluiced = subprocess.Popen([SLUICED, "--config", cfg, "--socket-dir", self.dir / "s"],
                                                stdout=lf, stderr=lf, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.sched_setaffinity(0, pinned)
        while b"sluiced: ready" not in log.read_bytes():
            if self.sluiced.poll() is not None or time.monotonic() - t0 > 120:
                raise BenchError(f"sluiced did not start (N={self.n}):\n{log.read_text()[-2000:]}")
            time.sleep(0.02)
        self.timings["sluiced_s"] = time.monotonic() - t0
        self.ctl = Ctl(self.dir / "s" / "ctl.sock", timeout=60.0)
        st = self.ctl("status")
        self.region_bytes, self.huge = st.get("region_bytes"), st.get("huge_pages")
        self.start_nfs(progress)

    def _spawn(self, argv: list, logf) -> subprocess.Popen:
        # Own process group (a terminal's Ctrl-C reaches only this script, which stops them), but this
        # script's session: with the kernel's autogroup scheduling (sched_autogroup_enabled) every new
        # session is a scheduling group of its own, and 2000 groups of one task each make every
        # context switch walk and update a group level (see --nf-sessions).
        kw = {"start_new_session": True} if self.a.nf_sessions == "own" else {"process_group": 0}
        return subprocess.Popen([str(x) for x in argv], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, **kw)

    def nf_names(self) -> list[str]:
        return [f"A.{k}" for k in range(self.na)] + [f"B.{k}" for k in range(self.nb)]

    def nf_options(self, name: str, wakeup: str | None = None) -> list:
        """A/B NF options, the same in both forms (a group member takes its process form's options) but
        the wakeup mode, which a group has its own of (--group-wakeup)."""
        return ["--name", name, "--service", name.split(".")[0], "--wakeup", wakeup or self.a.nf_wakeup,
                "--batch", self.a.nf_batch, "--timeout-us", self.a.nf_timeout_us, "--spin-us", self.a.nf_spin_us]

    def nf_procs(self) -> list[subprocess.Popen]:
        """The processes hosting the N NFs, each once (form group: the one sluice-group)."""
        seen, out = set(), []
        for p in self.nfs.values():
            if p.pid not in seen:
                seen.add(p.pid)
                out.append(p)
        return out

    def start_nfs(self, progress: Progress) -> None:
        if self.form == "group":
            self.start_group(progress)
        else:
            self.start_processes(progress)
        if self.sluiced.poll() is not None:
            raise BenchError("sluiced exited while the NFs attached")

    def start_group(self, progress: Progress) -> None:
        """Form group: ONE sluice-group process hosting the N fwd NFs as members (docs/groups.md),
        each with the name, service and options its process would have, in the NFs' cgroup; wait
        until sluiced lists all N (the group attaches its members one after the other)."""
        names = self.nf_names()
        logf = self._log("nfs.log")
        argv: list = [GROUP, "--name", "G", "--plugin-dir", PLUGIN_DIR, "--socket", self.dir / "s" / "nf.sock",
                      "--wakeup", self.a.group_wakeup, "--spin-us", self.a.nf_spin_us]
        for name in names:
            argv += ["--", "fwd", *self.nf_options(name, self.a.group_wakeup)]
        t0 = time.monotonic()
        p = self._spawn(argv, logf)
        if self.groups:
            self.groups.place("nfs", p.pid)
        for name in names:
            self.nfs[name] = p
        self.timings["nfs_spawn_s"] = time.monotonic() - t0
        last_note = t0
        while True:
            attached = self.ctl("status")["nf_count"]
            now = time.monotonic()
            if attached >= self.n:
                break
            if p.poll() is not None:
                raise BenchError(f"sluice-group exited (rc {p.returncode}) with {attached} of {self.n} members "
                                 f"attached:\n{self._tail('nfs.log')}")
            if now - t0 > 60 + self.n * 0.05:
                raise BenchError(f"only {attached} of {self.n} group members attached in {now - t0:.0f} s")
            if self.n >= 500 and now - last_note > 2:
                progress.note(f"N={self.n} (group): {attached} attached after {now - t0:.1f} s")
                last_note = now
            time.sleep(0.01)
        self.timings["nfs_attach_s"] = time.monotonic() - t0
        # the host says so once every member's attached step ran (then it turns them)
        deadline = time.monotonic() + 10
        while b"members attached" not in self._read_log("nfs.log"):
            if p.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"sluice-group did not report its members attached:\n{self._tail('nfs.log')}")
            time.sleep(0.01)
        self.timings["group_running_s"] = time.monotonic() - t0

    def _read_log(self, name: str) -> bytes:
        for f in self._files:
            if Path(f.name).name == name:
                f.flush()
        try:
            return ((self.logdir or self.dir) / name).read_bytes()
        except OSError:
            return b""

    def _tail(self, name: str, n: int = 2000) -> str:
        return self._read_log(name)[-n:].decode(errors="replace")

    def start_processes(self, progress: Progress) -> None:
        """Spawn the N fwd NFs, at most `spawn_window` of them not yet attached at any time, and wait
        until sluiced lists all of them. The children inherit this process's CPU affinity (core 0):
        cheaper than a taskset exec per NF."""
        names = self.nf_names()
        sock = self.dir / "s" / "nf.sock"
        logf = self._log("nfs.log")
        t0 = time.monotonic()
        attached, last_note, spawn_s = 0, t0, None
        i = 0
        while attached < self.n:
            while i < self.n and i - attached < self.a.spawn_window:
                name = names[i]
                self.nfs[name] = p = self._spawn([NF_FWD, "--socket", sock, *self.nf_options(name)], logf)
                if self.groups:
                    self.groups.place("nfs", p.pid)
                i += 1
            if i == self.n and spawn_s is None:
                spawn_s = time.monotonic() - t0
            time.sleep(0.01)
            attached = self.ctl("status")["nf_count"]
            now = time.monotonic()
            if now - t0 > 60 + self.n * 0.05:
                raise BenchError(f"only {attached} of {self.n} NFs attached in {now - t0:.0f} s")
            if now - last_note > 0.5 or attached >= self.n:
                dead = [k for k, p in self.nfs.items() if p.poll() is not None]
                if dead:
                    raise BenchError(f"{len(dead)} NF(s) exited before attaching, e.g. {dead[0]} "
                                     f"(rc {self.nfs[dead[0]].returncode}); see {logf.name}")
                if self.n >= 500 and now - last_note > 2:
                    progress.note(f"N={self.n}: {attached} attached after {now - t0:.1f} s")
                    last_note = now
                elif now - last_note > 0.5:
                    last_note = now
        self.timings["nfs_attach_s"] = time.monotonic() - t0
        self.timings["nfs_spawn_s"] = spawn_s if spawn_s is not None else self.timings["nfs_attach_s"]

    # -- gen and sink

    def start_tester(self, size: int, rate: float, warm: int = 0, count: int = 0) -> tuple[Path, Path]:
        self.trials += 1
        k = self.trials
        sock = self.dir / "s" / "nf.sock"
        gd, sd = self.dir / f"gen{k}.json", self.dir / f"sink{k}.json"
        sink = self._spawn([NF_SINK, "--socket", sock, "--name", "sink.0", "--service", "sink", "--wakeup",
                            "block", "--measure-id", 0, "--dump", sd], self._log("sink.log"))
        gen = self._spawn([NF_GEN, "--socket", sock, "--name", "gen.0", "--service", "gen", "--wakeup",
                           self.a.gen_wakeup,
                           "--rate-pps", round(rate), "--size", frame_of(size), "--warmup", warm,
                           "--count", count, "--gen-id", 0, "--burst", self.a.gen_burst, "--dump", gd],
                          self._log("gen.log"))
        self.tester = [gen, sink]
        if self.groups:
            self.groups.set_weight("gen", self.a.tester_share if rate == 0 else self.a.gen_paced_share)
        sink_rt = False
        if self.a.sink_rt:
            try:
                os.sched_setscheduler(sink.pid, os.SCHED_FIFO, os.sched_param(1))
                sink_rt = True
            except OSError as e:
                raise BenchError(f"cannot make the sink SCHED_FIFO ({e}); use --no-sink-rt")
        for p, grp in ((gen, "gen"), (sink, "sink")):
            if self.groups and not (grp == "sink" and sink_rt):  # an RT task stays in the root cgroup
                self.groups.place(grp, p.pid)
            if self.a.tester_nice:
                try:
                    os.setpriority(os.PRIO_PROCESS, p.pid, self.a.tester_nice)
                except OSError:
                    pass
        deadline = time.monotonic() + 30
        while self.ctl("status")["nf_count"] < self.n + 2:
            for p in self.tester:
                if p.poll() is not None:
                    raise BenchError(f"gen or sink exited before attaching (rc {p.returncode})")
            if time.monotonic() > deadline:
                raise BenchError("gen and sink did not attach in 30 s")
            time.sleep(0.01)
        return gd, sd

    def stop_tester(self) -> None:
        for p in self.tester:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.tester:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.tester = []
        deadline = time.monotonic() + 15
        while self.ctl("status")["nf_count"] > self.n and time.monotonic() < deadline:
            time.sleep(0.01)

    def supply(self, on: bool) -> None:
        self.ctl("port_chain_set", port="src", chain="c" if on else None)

    # -- readings

    def sample(self) -> dict:
        """One `stats` reading boiled down to what the figures need."""
        st = self.ctl("stats")
        t = time.monotonic()
        out = {"t": t, "sink_rx": 0, "ab_rx": 0, "ab_kicks": 0, "ring_full_ab": 0, "ring_full_sink": 0,
               "ring_full_gen": 0, "gen_tx": 0, "ab_ring_full_max": 0}
        for nf in st["nfs"]:
            svc, rf = nf.get("service"), nf["drops"]["ring_full"]
            if svc == "sink":
                out["sink_rx"] += nf["rx_pkts"]
                out["ring_full_sink"] += rf
            elif svc == "gen":
                out["gen_tx"] += nf["tx_pkts"]
                out["ring_full_gen"] += rf
            elif svc in ("A", "B"):
                out["ab_rx"] += nf["rx_pkts"]
                out["ab_kicks"] += nf["kicks"]
                out["ring_full_ab"] += rf
        d = st["drops"]
        out["fabric_other"] = sum(d.get(k, 0) for k in FABRIC_LOSS)
        out["backpressure"] = d.get("backpressure", 0)
        out["drops"] = d
        out["pool"] = st.get("pool", {})
        out["active_set"] = st.get("active_set", {})
        return out

    def cpu(self) -> dict:
        st = [schedstat(p.pid) for p in self.nf_procs()]
        return {"t": time.monotonic(), "sluiced": thread_cpu_ns(self.sluiced.pid),
                "nfs": sum(x[0] for x in st), "nfs_wait": sum(x[1] for x in st), "nfs_runs": sum(x[2] for x in st),
                "gen": cpu_ns(self.tester[0].pid) if self.tester else 0,
                "sink": cpu_ns(self.tester[1].pid) if len(self.tester) > 1 else 0}

    def pids(self) -> list[int]:
        return [self.sluiced.pid, *(p.pid for p in self.nf_procs()), *(p.pid for p in self.tester)]

    def check_alive(self) -> None:
        if self.sluiced.poll() is not None:
            raise BenchError(f"sluiced exited with {self.sluiced.returncode}")
        dead = [p for p in self.nf_procs() if p.poll() is not None]
        if dead and self.form == "group":
            raise BenchError(f"sluice-group exited during the run (rc {dead[0].returncode}):\n{self._tail('nfs.log')}")
        if dead:
            names = [k for k, p in self.nfs.items() if p.poll() is not None]
            raise BenchError(f"{len(dead)} NF(s) exited during the run, e.g. {names[0]}")

    def memory(self) -> dict:
        s = status_kib(self.sluiced.pid)
        priv, pss, rss, pte = 0, 0, 0, 0
        per = []
        procs = self.nf_procs()
        for p in procs:
            m = smaps_rollup(p.pid)
            pv = m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)
            priv += pv
            per.append(pv)
            pss += m.get("Pss", 0)
            rss += m.get("Rss", 0)
            pte += status_kib(p.pid).get("VmPTE", 0)
        sl = s.get("VmRSS", 0) + s.get("HugetlbPages", 0)
        return {"total_kib": sl + priv, "sluiced_vmrss_kib": s.get("VmRSS", 0),
                "sluiced_rss_anon_kib": s.get("RssAnon", 0), "sluiced_rss_file_kib": s.get("RssFile", 0),
                "sluiced_rss_shmem_kib": s.get("RssShmem", 0), "sluiced_hugetlb_kib": s.get("HugetlbPages", 0),
                "sluiced_pte_kib": s.get("VmPTE", 0), "region_bytes": self.region_bytes, "huge_pages": self.huge,
                "nfs_private_kib": priv, "nf_private_kib_median": statistics.median(per) if per else None,
                "nf_private_kib_per_member": round(priv / self.n, 1), "nf_processes": len(procs),
                "nfs_pss_kib": pss, "nfs_rss_kib": rss, "nfs_pte_kib": pte}

    # -- trials

    def throughput(self, size: int, warmup: float, window: float, windows: int) -> dict:
        _, sd = self.start_tester(size, 0)
        try:
            self.supply(True)
            time.sleep(warmup)
            os.kill(self.tester[1].pid, signal.SIGUSR1)
            samples, cpus = [self.sample()], []
            with MachineShare([*self.pids(), os.getpid()]) as share:
                cpus.append(self.cpu())
                for _ in range(windows):
                    time.sleep(window)
                    samples.append(self.sample())
                cpus.append(self.cpu())
            h1 = self._usr1_dump(sd)
            self.supply(False)
            self.check_alive()
            self._quiesce()
        finally:
            self.stop_tester()
        h0 = json.loads(Path(str(sd) + ".w0").read_text()) if Path(str(sd) + ".w0").exists() else None
        a, b = samples[0], samples[-1]
        span = b["t"] - a["t"]
        rates = [(y["sink_rx"] - x["sink_rx"]) / (y["t"] - x["t"]) for x, y in zip(samples, samples[1:])]
        lost = ((b["ring_full_ab"] - a["ring_full_ab"]) + (b["ring_full_sink"] - a["ring_full_sink"])
                + (b["fabric_other"] - a["fabric_other"]))
        delivered = b["sink_rx"] - a["sink_rx"]
        c0, c1 = cpus
        cspan = c1["t"] - c0["t"]
        sl = {k: (c1["sluiced"].get(k, 0) - c0["sluiced"].get(k, 0)) / 1e9 / cspan for k in c1["sluiced"]}
        kicks = b["ab_kicks"] - a["ab_kicks"]
        ab_rx = b["ab_rx"] - a["ab_rx"]
        r = {"pps": statistics.median(rates), "windows_pps": [round(x) for x in rates],
             "delivered": delivered, "span_s": round(span, 3), "lost_in_fabric": lost,
             "lost_ring_full_ab": b["ring_full_ab"] - a["ring_full_ab"],
             "lost_ring_full_sink": b["ring_full_sink"] - a["ring_full_sink"],
             "supply_surplus_dropped": (b["ring_full_gen"] - a["ring_full_gen"]) + (b["backpressure"] - a["backpressure"]),
             "sluiced_cpu": round(sum(sl.values()), 4), "sluiced_cpu_threads": {k: round(v, 4) for k, v in sl.items()},
             "nfs_cpu": round((c1["nfs"] - c0["nfs"]) / 1e9 / cspan, 4),
             "gen_cpu": round((c1["gen"] - c0["gen"]) / 1e9 / cspan, 4),
             "sink_cpu": round((c1["sink"] - c0["sink"]) / 1e9 / cspan, 4),
             "foreign_cpu": round(share.foreign, 4), "steal_cpu": round(share.steal, 4),
             "nf_kicks_per_s": round(kicks / span), "pkts_per_kick": round(ab_rx / kicks, 2) if kicks else None,
             "nf_pkts_per_s": round(ab_rx / span),
             "doorbells_per_s": round((b["active_set"].get("doorbells", 0) - a["active_set"].get("doorbells", 0)) / span),
             **run_stats(c0, c1),
             "pool_end": b["pool"], "active_set_end": b["active_set"]}
        if h0 is not None and h1 is not None:
            hist = hist_diff(h0.get("histogram") or [], h1.get("histogram") or [])
            r["overload_latency_ns"] = {"p50": pct_from_hist(hist, .5), "p99": pct_from_hist(hist, .99),
                                        "samples": sum(c for _, c in hist)}
        return r

    def _usr1_dump(self, sd: Path) -> dict | None:
        """The sink's dump is rewritten at its next batch after SIGUSR1: keep the first one (taken at
        the window's start) as <dump>.w0, ask for a second and return it."""
        w0 = Path(str(sd) + ".w0")
        deadline = time.monotonic() + 5
        while not sd.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not sd.exists():
            return None
        os.replace(sd, w0)
        os.kill(self.tester[1].pid, signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not sd.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            return json.loads(sd.read_text())
        except (OSError, ValueError):
            return None

    def _quiesce(self, timeout: float = 10.0) -> None:
        """After the supply stops: until no buffer is lent to any NF (in-flight packets finished)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ctl("status")["mbufs_lent"] == 0:
                return
            time.sleep(0.02)

    def rate_trial(self, size: int, rate: float, warmup: float, duration: float) -> dict:
        """Paced at `rate`: a warm-up under generator id 1, then counted packets under id 0."""
        warm, counted = round(rate * warmup), max(1, round(rate * duration))
        gd, sd = self.start_tester(size, rate, warm, warm + counted)
        before = self.sample()
        try:
            self.supply(True)
            time.sleep(warmup)
            c0 = self.cpu()
            time.sleep(duration)
            c1 = self.cpu()
            # stragglers: until the sink's count stands still for 200 ms (at most 3 s more)
            last, still, t_end = -1, time.monotonic(), time.monotonic() + 3.0
            while time.monotonic() < t_end:
                rx = self.sample()["sink_rx"]
                if rx != last:
                    last, still = rx, time.monotonic()
                elif time.monotonic() - still >= 0.2:
                    break
                time.sleep(0.05)
            self.supply(False)
            self._quiesce()
            after = self.sample()
            self.check_alive()
        finally:
            self.stop_tester()
        try:
            g, s = json.loads(gd.read_text()), json.loads(sd.read_text())
        except (OSError, ValueError) as e:
            raise BenchError(f"gen/sink left no readable dump ({e})")
        sent = max(0, g["generated"] - warm)
        mine = next((x for x in s.get("generators", []) if x["id"] == 0), {"received": 0})
        sent_pps = (sent - 1) / (g["counted_ns"] / 1e9) if sent > 1 and g["counted_ns"] > 0 else 0.0
        lat = s.get("latency_ns") or {}
        return {"offered_pps": rate, "sent": sent, "received": mine["received"], "lost": sent - mine["received"],
                "sent_pps": round(sent_pps), "delivered_pps": round(sent_pps * mine["received"] / sent) if sent else 0,
                "rate_short": sent_pps < 0.97 * rate,
                "latency_ns": {k: lat.get(k) for k in ("p50", "p90", "p99", "p999", "max", "mean")},
                "lost_ring_full_ab": after["ring_full_ab"] - before["ring_full_ab"],
                "lost_ring_full_sink": after["ring_full_sink"] - before["ring_full_sink"],
                "pkts_per_kick": (round((after["ab_rx"] - before["ab_rx"]) / (after["ab_kicks"] - before["ab_kicks"]), 2)
                                  if after["ab_kicks"] > before["ab_kicks"] else None),
                "nfs_cpu": round((c1["nfs"] - c0["nfs"]) / 1e9 / (c1["t"] - c0["t"]), 4),
                "gen_cpu": round((c1["gen"] - c0["gen"]) / 1e9 / (c1["t"] - c0["t"]), 4),
                "sink_cpu": round((c1["sink"] - c0["sink"]) / 1e9 / (c1["t"] - c0["t"]), 4), **run_stats(c0, c1)}

    # -- tear-down

    def stop(self) -> None:
        procs = [*self.tester, *self.nf_procs()]
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.sluiced is not None and self.sluiced.poll() is None:
            try:
                if self.ctl:
                    self.ctl("shutdown")
            except (OSError, BenchError, ValueError):
                pass
            try:
                self.sluiced.wait(30)
            except subprocess.TimeoutExpired:
                self.sluiced.kill()
                self.sluiced.wait()
        if self.ctl:
            self.ctl.close()
        if self.groups:
            self.groups.close()
        for f in self._files:
            f.close()
        if self.logdir is not None:
            for name in ("sluiced.log", "cfg.json"):
                if (self.dir / name).exists():
                    shutil.copy(self.dir / name, self.logdir / name)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def run_session(n: int, rnd: int, sizes: list[int], args, work: Path, progress: Progress,
                form: str = "process") -> dict:
    """One round of one N in one form: start, every size's trials, memory, stop. Never raises
    BenchError: a failure is returned in "error" with whatever was measured before it."""
    logdir = None
    if args.logdir:
        logdir = Path(args.logdir) / (f"N{n}-r{rnd}" + ("" if form == "process" else f"-{form}"))
        logdir.mkdir(parents=True, exist_ok=True)
    s = Session(n, args, work, logdir, form)
    out = {"nfs": n, "form": form, "round": rnd, "sizes": {}}
    tag = f"N={n}" + ("" if form == "process" else f" ({form})")
    try:
        if args.quiet_wait > 0:
            out["quiet"] = wait_quiet(args.quiet_limit, progress, args.quiet_wait)
        s.start(progress)
        out["timings"] = {k: round(v, 3) for k, v in s.timings.items()}
        progress.step(f"round {rnd}: {tag}: {n} NFs attached in {s.timings['nfs_attach_s']:.2f} s "
                      + ("(one sluice-group; " if form == "group" else f"(spawned in {s.timings['nfs_spawn_s']:.2f} s; ")
                      + f"sluiced up in {s.timings['sluiced_s']:.2f} s)")
        for size in sizes:
            res = out["sizes"][size] = {}
            t = s.throughput(size, args.warmup, args.window, args.windows)
            res["throughput"] = t
            ol = t.get("overload_latency_ns") or {}
            progress.step(f"round {rnd}: {tag} {size} B: {t['pps'] / 1e6:.3f} Mpps to the sink "
                          f"(lost in fabric {t['lost_in_fabric']}, NFs ran {t['nf_runs_per_s']}/s, "
                          f"{t['nf_us_per_run'] or 0:.1f} us and {t['nf_pkts_per_s'] / max(1, t['nf_runs_per_s']):.1f} pkts each, "
                          f"sluiced CPU {t['sluiced_cpu']:.0%}, NFs {t['nfs_cpu']:.0%}, gen {t['gen_cpu']:.0%}, "
                          f"others {t['foreign_cpu']:.0%}, stolen {t['steal_cpu']:.0%}; overloaded p99 {(ol.get('p99') or 0) / 1e3:.0f} us)")
            sink_overflow(progress, tag, size, "throughput", t["lost_ring_full_sink"], t["delivered"])
            rate = args.lat_load * t["pps"]
            if rate >= 1000:
                lt = s.rate_trial(size, rate, args.lat_warmup, args.lat_duration)
                res["latency"] = lt
                progress.step(f"round {rnd}: {tag} {size} B: latency at {rate / 1e6:.3f} Mpps "
                              f"({args.lat_load:.0%}): p50 {fmt_ns(lt['latency_ns']['p50'])} p99 "
                              f"{fmt_ns(lt['latency_ns']['p99'])}, lost {lt['lost']} of {lt['sent']}")
                sink_overflow(progress, tag, size, "latency", lt["lost_ring_full_sink"], lt["received"])
            else:
                progress.step(f"round {rnd}: {tag} {size} B: no latency trial (throughput too low)")
            if size == TARGET["size"] and not args.no_target_trial:
                tt = s.rate_trial(size, TARGET["pps"], args.lat_warmup, args.lat_duration)
                res["target"] = tt
                progress.step(f"round {rnd}: {tag} {size} B: at the target's {TARGET['pps'] / 1e6:.1f} Mpps: "
                              f"{tt['delivered_pps'] / 1e6:.3f} Mpps delivered (gen sent {tt['sent_pps'] / 1e6:.3f}), "
                              f"p50 {fmt_ns(tt['latency_ns']['p50'])} p99 {fmt_ns(tt['latency_ns']['p99'])}, "
                              f"lost {tt['lost']}")
                sink_overflow(progress, tag, size, "target", tt["lost_ring_full_sink"], tt["received"])
        out["memory"] = s.memory()
        out["memory"]["sluiced_fds"] = fd_count(s.sluiced.pid)
        out["memory"]["nf_fds"] = sum(fd_count(p.pid) for p in s.nf_procs())
    except BenchError as e:
        out["error"] = str(e)
        progress.note(f"round {rnd}: {tag}: FAILED: {str(e).splitlines()[0]}")
    finally:
        t0 = time.monotonic()
        s.stop()
        out.setdefault("timings", {})["teardown_s"] = round(time.monotonic() - t0, 3)
    return out


def sink_overflow(progress: Progress, tag: str, size: int, trial: str, lost: int, delivered: int) -> None:
    """Say so when the sink's ring overflowed (more than 5 % of what it got): then the tester, not the
    NFs, bounds that trial's figures. Seen with a group under `--nf-wakeup block`: its output reaches
    the sink in bursts larger than the ring (`--ring-size`): a turn of its thread hands sluiced every
    member's output at once, and each sleep of the group arms every member, so sluiced kicks them one
    eventfd write each (hundreds of thousands a second at N = 2000; none with adaptive or poll)."""
    if lost > 0.05 * max(1, delivered):
        progress.note(f"{tag} {size} B {trial}: the sink's ring overflowed ({lost:,} dropped there, "
                      f"{lost / max(1, lost + delivered):.0%} of what reached it): the tester bounds this figure")


def run_stats(c0: dict, c1: dict) -> dict:
    """How the N NFs ran between two cpu() readings: runs (times scheduled) per second, CPU per
    run, and how many of them waited runnable on average (the run queue they formed)."""
    span = c1["t"] - c0["t"]
    runs = c1["nfs_runs"] - c0["nfs_runs"]
    return {"nf_runs_per_s": round(runs / span),
            "nf_us_per_run": round((c1["nfs"] - c0["nfs"]) / runs / 1e3, 2) if runs else None,
            "nf_runnable_waiting": round((c1["nfs_wait"] - c0["nfs_wait"]) / 1e9 / span, 1)}


def fmt_ns(ns) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else f"{ns / 1e3:.0f} us"


def aggregate(sessions: list[dict], nfs_list: list[int], sizes: list[int],
              forms: list[str] | tuple = ("process",)) -> list[dict]:
    """Rows per (N, size, form), in that order (both forms of an N and size side by side)."""
    rows = []
    for n, size, form in [(n, size, f) for n in nfs_list for size in sizes for f in forms]:
        ss = [s for s in sessions if s["nfs"] == n and s.get("form", "process") == form]
        mem = [s["memory"] for s in ss if s.get("memory")]
        att = [s["timings"].get("nfs_attach_s") for s in ss if s.get("timings", {}).get("nfs_attach_s") is not None]
        rs = [s["sizes"][size] for s in ss if size in s.get("sizes", {})]
        tp = [r["throughput"] for r in rs if "throughput" in r]
        lt = [r["latency"] for r in rs if "latency" in r]
        tg = [r["target"] for r in rs if "target" in r]
        row = {"scenario": "density", "form": form, "nfs": n, "size": size, "frame_bytes": frame_of(size),
               "rounds": len(tp), "runs_pps": [round(t["pps"]) for t in tp],
               "runs_lost_in_fabric": [t["lost_in_fabric"] for t in tp],
               "runs_lost_ring_full_sink": [t["lost_ring_full_sink"] for t in tp],
               "runs_sluiced_cpu": [t["sluiced_cpu"] for t in tp],
               "runs_sluiced_cpu_threads": [t["sluiced_cpu_threads"] for t in tp],
               "runs_nfs_cpu": [t["nfs_cpu"] for t in tp], "runs_gen_cpu": [t["gen_cpu"] for t in tp],
               "runs_foreign_cpu": [t["foreign_cpu"] for t in tp],
               "runs_steal_cpu": [t.get("steal_cpu") for t in tp],
               "runs_pkts_per_kick": [t["pkts_per_kick"] for t in tp],
               "runs_overload_latency_ns": [t.get("overload_latency_ns") for t in tp],
               "runs_latency": lt, "runs_target": tg,
               "runs_memory_kib": [m["total_kib"] for m in mem], "memory": mem[-1] if mem else None,
               "runs_nf_private_kib_per_member": [m.get("nf_private_kib_per_member") for m in mem],
               "runs_attach_s": att}
        sm = summary([t["pps"] for t in tp])
        if sm:
            row.update(median_pps=round(sm["median"]), min_pps=round(sm["min"]), max_pps=round(sm["max"]))
        def per_run(t):
            return t["nf_pkts_per_s"] / t["nf_runs_per_s"] if t.get("nf_runs_per_s") else None

        def lost_share(t):
            out = t["delivered"] + t["lost_in_fabric"]
            return t["lost_in_fabric"] / out if out else None
        row["mechanism"] = {}
        for key, src in (("nfs_cpu", [t["nfs_cpu"] for t in tp]), ("gen_cpu", [t["gen_cpu"] for t in tp]),
                         ("sink_cpu", [t["sink_cpu"] for t in tp]),
                         ("nf_runs_per_s", [t.get("nf_runs_per_s") for t in tp]),
                         ("nf_us_per_run", [t.get("nf_us_per_run") for t in tp]),
                         ("nf_pkts_per_run", [per_run(t) for t in tp]),
                         ("nf_runnable_waiting", [t.get("nf_runnable_waiting") for t in tp]),
                         ("nf_kicks_per_s", [t.get("nf_kicks_per_s") for t in tp]),
                         ("doorbells_per_s", [t.get("doorbells_per_s") for t in tp]),
                         ("worker_cpu", [t["sluiced_cpu_threads"].get("rte-worker-1") for t in tp]),
                         ("control_cpu", [t["sluiced_cpu_threads"].get("sluiced") for t in tp])):
            sm = summary(src)
            if sm:
                row["mechanism"][key] = round(sm["median"], 4)
        for key, src in (("sluiced_cpu", [t["sluiced_cpu"] for t in tp]),
                         ("memory_kib", [m["total_kib"] for m in mem]), ("attach_s", att),
                         ("nf_private_kib_per_member", [m.get("nf_private_kib_per_member") for m in mem]),
                         ("lost_in_fabric", [t["lost_in_fabric"] for t in tp]),
                         ("lost_share", [lost_share(t) for t in tp])):
            sm = summary(src)
            if sm:
                row[f"median_{key}"] = sm["median"]
                row[f"min_{key}"] = sm["min"]
                row[f"max_{key}"] = sm["max"]
        for name, trials in (("latency", lt), ("target", tg)):
            if not trials:
                continue
            d = {"offered_pps": statistics.median(t["offered_pps"] for t in trials),
                 "delivered_pps": statistics.median(t["delivered_pps"] for t in trials),
                 "sent_pps": statistics.median(t["sent_pps"] for t in trials),
                 "lost": [t["lost"] for t in trials], "sent": [t["sent"] for t in trials],
                 "rate_short": [t["rate_short"] for t in trials]}
            for k in ("nf_us_per_run", "nf_runs_per_s", "nf_runnable_waiting", "nfs_cpu", "gen_cpu", "sink_cpu"):
                sm = summary([t.get(k) for t in trials])
                if sm:
                    d[k] = round(sm["median"], 4)
            for p in ("p50", "p99", "p999", "max"):
                sm = summary([t["latency_ns"].get(p) for t in trials])
                if sm:
                    d[p] = sm
            row[name] = d
        rows.append(row)
    return rows


def target_verdict(rows: list[dict], form: str = "process") -> dict:
    """The issue's target: at 2000 NFs, >= 1.4 Mpps aggregate at 700 B with p99 <= 5 ms (both at the
    same operating point: the trial offering 1.4 Mpps, medians over rounds), for the NFs in one form."""
    row = next((r for r in rows if r["nfs"] == TARGET["nfs"] and r["size"] == TARGET["size"]
                and r.get("form", "process") == form), None)
    v = {"form": form, "nfs": TARGET["nfs"], "size": TARGET["size"], "pps": TARGET["pps"], "p99_ns": TARGET["p99_ns"],
         "measured": row is not None}
    if row is None:
        return v
    v["throughput_pps"] = row.get("median_pps")
    tg = row.get("target") or {}
    v["at_target_delivered_pps"] = tg.get("delivered_pps")
    v["at_target_p99_ns"] = (tg.get("p99") or {}).get("median")
    v["met"] = bool(v["at_target_delivered_pps"] is not None and v["at_target_p99_ns"] is not None
                    and v["at_target_delivered_pps"] >= 0.99 * TARGET["pps"] and v["at_target_p99_ns"] <= TARGET["p99_ns"])
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--nfs", default=None, help="comma-separated N values (default 1,10,100,500,1000,2000)")
    ap.add_argument("--sizes", default=None, help="comma-separated frame sizes (default 64,700)")
    ap.add_argument("--forms", default="process",
                    help="comma-separated forms of the N NFs (default process): process (N sluice-nf-fwd "
                         "processes), group (one sluice-group process hosting the N as members); within a round "
                         "each N is measured in every form in turn")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick 1)")
    ap.add_argument("--window", type=float, default=None, help="seconds per throughput window (default 1.0)")
    ap.add_argument("--windows", type=int, default=3, help="throughput windows per trial (default 3)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the throughput windows (default 1.0)")
    ap.add_argument("--lat-load", type=float, default=0.5, help="latency trial rate, share of the throughput (0.5)")
    ap.add_argument("--lat-duration", type=float, default=None, help="counted seconds per latency trial (default 2)")
    ap.add_argument("--lat-warmup", type=float, default=None, help="warm-up seconds per latency trial (default 0.5)")
    ap.add_argument("--no-target-trial", action="store_true", help="skip the trial at the target's 1.4 Mpps")
    ap.add_argument("--nf-wakeup", default="block", choices=("block", "adaptive", "poll"))
    ap.add_argument("--group-wakeup", default="adaptive", choices=("block", "adaptive", "poll"),
                    help="form group: the group's (and so its members') wakeup mode (adaptive: a busy group "
                         "never sleeps, so sluiced kicks none of its members; in block mode every sleep arms "
                         "every member and each gets its own kick)")
    ap.add_argument("--nf-batch", type=int, default=32, help="A/B NFs: kick after this many packets (32)")
    ap.add_argument("--nf-timeout-us", type=int, default=1000,
                    help="A/B NFs: or when the oldest waited this long (1000)")
    ap.add_argument("--nf-spin-us", type=int, default=20, help="A/B NFs, adaptive only: spin this long first (20)")
    ap.add_argument("--gen-wakeup", default="block", choices=("block", "adaptive", "poll"),
                    help="gen's wakeup mode (block)")
    ap.add_argument("--nf-sessions", default="shared", choices=("shared", "own"),
                    help="NFs, gen and sink in this script's session (shared, default) or each in its own "
                         "(own: setsid, as the sluice CLI's supervisor did until it moved NFs into its own "
                         "session; with autogroup scheduling, one scheduling group per NF)")
    ap.add_argument("--tester-share", type=float, default=1.0,
                    help="CPU weight of gen relative to all the NFs together, in cgroups (1: as much as all "
                         "NFs together when both want it; the sink gets 10); 0: no cgroups")
    ap.add_argument("--gen-paced-share", type=float, default=0.1,
                    help="gen's weight in the paced (latency, target) trials, x the NFs' (0.1): a paced gen "
                         "still takes every supply buffer and drops the surplus, work that would otherwise "
                         "take CPU from the NFs")
    ap.add_argument("--gen-burst", type=int, default=256,
                    help="gen's token-bucket depth (256): with a small CPU share it runs in turns, and a "
                         "deeper bucket lets it catch up after one instead of losing the rate")
    ap.add_argument("--no-sink-rt", dest="sink_rt", action="store_false",
                    help="leave the sink a normal task (default: SCHED_FIFO 1, so that it runs as soon as "
                         "it is kicked and never lets its ring overflow)")
    ap.add_argument("--tester-nice", type=int, default=0, help="nice value of gen and sink (0)")
    ap.add_argument("--ring-size", type=int, default=1024, help="sluiced.ring_size (1024)")
    ap.add_argument("--pool", type=int, default=65536, help="sluiced.pool_mbufs (65536)")
    ap.add_argument("--spawn-window", type=int, default=256, help="NFs started but not yet attached, at most (256)")
    ap.add_argument("--quiet-limit", type=float, default=0.10,
                    help="before each session, wait until at most this share of the CPU is busy or stolen (0.10)")
    ap.add_argument("--quiet-wait", type=float, default=None,
                    help="... but at most this many seconds (default 120; --quick 0: no wait)")
    ap.add_argument("--quick", action="store_true", help="N 1 and 10, 64 B, one short round: a smoke test (< 1 min)")
    ap.add_argument("--results", default=str(RESULTS), help="results directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")
    ap.add_argument("--logdir", default=None, help="keep sluiced's and the NFs' logs here")
    args = ap.parse_args(argv)
    q = args.quick
    nfs_list = [int(x) for x in args.nfs.split(",")] if args.nfs else ([1, 10] if q else list(DEFAULT_NFS))
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else ([64] if q else list(DEFAULT_SIZES))
    rounds = args.rounds or (1 if q else 3)
    forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    if not forms or any(f not in FORMS for f in forms) or len(set(forms)) != len(forms):
        print(f"density.py: --forms takes one or more of {', '.join(FORMS)}, each once", file=sys.stderr)
        return 2
    args.window = args.window or (0.3 if q else 1.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if q else 1.0)
    args.lat_duration = args.lat_duration or (0.5 if q else 2.0)
    args.lat_warmup = args.lat_warmup if args.lat_warmup is not None else (0.2 if q else 0.5)
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if q else 120.0
    if q:
        args.windows = min(args.windows, 2)
    if os.geteuid() != 0:
        print("density.py: needs root (DPDK)", file=sys.stderr)
        return 2
    need = [SLUICED, NF_FWD, NF_GEN, NF_SINK] + ([GROUP, PLUGIN_DIR / "sluice-nf-fwd.so"] if "group" in forms else [])
    for b in need:
        if not b.exists():
            print(f"density.py: {b} not built (make build)", file=sys.stderr)
            return 2
    if any(n < 1 or n > 16000 for n in nfs_list) or any(s < 60 or s > 1514 for s in sizes):
        print("density.py: N must be 1..16000 and sizes 60..1514", file=sys.stderr)
        return 2
    # 4 descriptors per NF in sluiced, 3 per member in a sluice-group (its socket and 2 eventfds), a few in
    # the harness: raise our soft limit (children inherit it)
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need_fds = 4 * max(nfs_list) + 1024
        want = min(hard, max(soft, need_fds))
        if want < need_fds:
            print(f"density.py: warning: RLIMIT_NOFILE hard limit {hard} < {need_fds} (4 per NF in sluiced): "
                  "the largest N may fail to attach", file=sys.stderr)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):
        pass
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix=f"sluice-bench-density-{stamp}-"))
    old_term = signal.signal(signal.SIGTERM, _on_term)
    # this script and every NF it starts run on core 0; sluiced's worker has core 1 to itself
    os.sched_setaffinity(0, {NF_CORE})
    started = time.monotonic()
    sessions, errors = [], []
    per_session = 1 + len(sizes) * 2 + (1 if TARGET["size"] in sizes and not args.no_target_trial else 0)
    progress = Progress(rounds * len(nfs_list) * len(forms) * per_session)
    print(f"density.py: N in {nfs_list}, sizes {sizes}, forms {forms}, {rounds} round(s); A/B NFs --wakeup {args.nf_wakeup} "
          f"--batch {args.nf_batch} --timeout-us {args.nf_timeout_us}; ring {args.ring_size}, pool {args.pool}; "
          f"work dir {work}", flush=True)
    interrupted = None
    try:
        for rnd in range(1, rounds + 1):
            for n in nfs_list:
                for form in forms:  # both forms of an N back to back: they see the same host phase
                    done_before = progress.done
                    res = run_session(n, rnd, sizes, args, work, progress, form)
                    sessions.append(res)
                    progress.done = done_before + per_session  # a failed session skips its steps
                    if "error" in res:
                        errors.append({"scenario": "density", "form": form, "nfs": n, "round": rnd,
                                       "error": res["error"]})
    except (KeyboardInterrupt, Interrupted) as e:
        interrupted = e
        print(f"\ndensity.py: interrupted ({e.__class__.__name__}); cleaning up", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        signal.signal(signal.SIGTERM, old_term)
        os.sched_setaffinity(0, ALL_CPUS)
    if interrupted is not None:
        return 130
    rows = aggregate(sessions, nfs_list, sizes, forms)
    verdicts = {f: target_verdict(rows, f) for f in forms}
    verdict = verdicts.get("process") or target_verdict(rows, "process")  # "target": the process form, as before
    print(f"\n{'N':>5} {'size':>5} {'form':>7} {'Mpps':>7} {'min':>6} {'max':>6} {'p50':>9} {'p99':>9} {'lost':>8} "
          f"{'sluiced':>8} {'memory':>10} {'KiB/NF':>7} {'attach':>7}")
    for r in rows:
        lat = r.get("latency") or {}
        per_nf = r.get("median_nf_private_kib_per_member")
        print(f"{r['nfs']:>5} {r['size']:>5} {r['form']:>7} {fmt_m(r.get('median_pps')):>7} {fmt_m(r.get('min_pps')):>6} "
              f"{fmt_m(r.get('max_pps')):>6} {fmt_ns((lat.get('p50') or {}).get('median')):>9} "
              f"{fmt_ns((lat.get('p99') or {}).get('median')):>9} {r.get('median_lost_in_fabric', '-'):>8} "
              f"{(r.get('median_sluiced_cpu') or 0):>8.0%} {(r.get('median_memory_kib') or 0) / 1024:>6.0f} MiB "
              f"{'-' if per_nf is None else f'{per_nf:.0f}':>7} {(r.get('median_attach_s') or 0):>6.2f}s")
    for form, v in verdicts.items():
        if v.get("measured"):
            print(f"target (N={TARGET['nfs']}, {TARGET['size']} B, >= {TARGET['pps'] / 1e6} Mpps with p99 <= "
                  f"{TARGET['p99_ns'] / 1e6:g} ms), form {form}: {'met' if v['met'] else 'NOT met'} "
                  f"(at 1.4 Mpps offered: {fmt_m(v.get('at_target_delivered_pps'))} Mpps delivered, "
                  f"p99 {fmt_ns(v.get('at_target_p99_ns'))}; throughput {fmt_m(v.get('throughput_pps'))} Mpps)")
    try:
        head = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=40"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        head = None
    data = {"started": stamp, "kind": "quick" if q else "full", "scenarios": ["density"], "machine": machine_info(),
            "elapsed_s": round(time.monotonic() - started, 1),
            "config": {"quick": q, "runs": rounds, "nfs": nfs_list, "sizes": sizes, "forms": forms,
                       "frame_bytes": {str(s): frame_of(s) for s in sizes}, "duration_s": args.window,
                       "windows": args.windows, "warmup_s": args.warmup, "lat_load": args.lat_load,
                       "lat_duration_s": args.lat_duration, "lat_warmup_s": args.lat_warmup,
                       "target_trial": not args.no_target_trial, "nf_wakeup": args.nf_wakeup,
                       "group_wakeup": args.group_wakeup,
                       "nf_batch": args.nf_batch, "nf_timeout_us": args.nf_timeout_us,
                       "nf_spin_us": args.nf_spin_us, "ring_size": args.ring_size, "pool_mbufs": args.pool,
                       "spawn_window": args.spawn_window, "quiet_limit": args.quiet_limit,
                       "quiet_wait_s": args.quiet_wait, "nf_core": NF_CORE, "sluiced_lcores": LCORES,
                       "gen_wakeup": args.gen_wakeup, "tester_nice": args.tester_nice,
                       "tester_share": args.tester_share, "gen_paced_share": args.gen_paced_share,
                       "gen_burst": args.gen_burst, "sink_rt": args.sink_rt,
                       "nf_sessions": args.nf_sessions, "autogroup": autogroup(), "sink_wakeup": "block", "policy": "round_robin",
                       "build": str(BUILD), "git_head": head},
            "target": verdict, "targets": verdicts, "results": rows, "sessions": sessions, "errors": errors}
    path = save_results(args, "density.py", stamp, "density", data)
    out = path.parent
    try:
        import gen_report
        png = out / f"{stamp}-density.png"
        if gen_report.plot_density(data, png):
            print(f"density.py: wrote {png}")
    except Exception as e:  # noqa: BLE001 - a plot must never cost the results
        print(f"density.py: no plot ({e!r})", file=sys.stderr)
    regenerate_report(args)
    return 1 if errors else 0


def fmt_m(pps) -> str:
    return "-" if pps is None else f"{pps / 1e6:.3f}"


if __name__ == "__main__":
    sys.exit(main())
