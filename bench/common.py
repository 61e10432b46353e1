"""Shared helpers for the Sluice benchmarks: process handling, huge pages, machine facts.

Python 3.11 standard library only.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
RESULTS = BENCH / "results"

TESTPMD = os.environ.get("SLUICE_BENCH_TESTPMD") or shutil.which("dpdk-testpmd") or "/usr/bin/dpdk-testpmd"


class BenchError(RuntimeError):
    """A benchmark could not be set up or run (the message says why)."""


class Ctl:
    """sluiced's control socket over one connection (newline-delimited JSON): `ctl.call(cmd, **kw)`
    or `ctl(cmd, **kw)` returns the answer, BenchError if sluiced refuses or goes away."""

    def __init__(self, path: Path, timeout: float = 5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._buf = b""

    def call(self, cmd: str, **kw) -> dict:
        self.sock.sendall(json.dumps({"cmd": cmd, **kw}).encode() + b"\n")
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise BenchError(f"sluiced closed the control socket answering {cmd}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        r = json.loads(line)
        if not r.get("ok"):
            raise BenchError(f"sluiced {cmd}: {r.get('error')}")
        return r

    __call__ = call

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def ctl(path: Path, cmd: str, timeout: float = 30.0, **kw) -> dict:
    """One request on a connection of its own."""
    c = Ctl(path, timeout)
    try:
        return c.call(cmd, **kw)
    finally:
        c.close()


class OutputReader:
    """Collects a child's combined stdout/stderr in a background thread.

    Reads raw bytes (an interactive prompt such as ``testpmd> `` has no newline) and keeps
    everything, so callers can wait for text appearing after a given offset.
    """

    def __init__(self, proc: subprocess.Popen, name: str, logf=None):
        self.proc = proc
        self.name = name
        self.logf = logf
        self._buf = bytearray()
        self._cond = threading.Condition()
        self._eof = False
        self._t = threading.Thread(target=self._run, name=f"reader-{name}", daemon=True)
        self._t.start()

    def _run(self):
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if self.logf is not None and chunk:
                try:
                    self.logf.write(chunk)
                    self.logf.flush()
                except (OSError, ValueError):
                    pass
            with self._cond:
                if not chunk:
                    self._eof = True
                    self._cond.notify_all()
                    return
                self._buf += chunk
                self._cond.notify_all()

    @property
    def pos(self) -> int:
        with self._cond:
            return len(self._buf)

    def text(self, start: int = 0) -> str:
        with self._cond:
            return self._buf[start:].decode("utf-8", "replace")

    def wait_for(self, pattern: str | re.Pattern, start: int = 0, timeout: float = 10.0) -> re.Match:
        """Wait until `pattern` matches the output from byte offset `start`; return the match."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                m = rx.search(self._buf[start:].decode("utf-8", "replace"))
                if m:
                    return m
                if self._eof:
                    raise BenchError(f"{self.name} exited (rc={self.proc.poll()}) before printing "
                                     f"{rx.pattern!r}; last output:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.name}: timed out after {timeout:.0f}s waiting for "
                                     f"{rx.pattern!r}; last output:\n{self.tail()}")
                self._cond.wait(min(left, 0.2))

    def tail(self, n: int = 25) -> str:
        lines = self._buf.decode("utf-8", "replace").splitlines()
        return "\n".join("    " + ln for ln in lines[-n:])


def spawn(argv: list[str], name: str, logf=None, stdin=subprocess.DEVNULL, env=None) -> tuple[subprocess.Popen, OutputReader]:
    """Start argv in its own process group, stdout+stderr merged, read by an OutputReader."""
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    return proc, OutputReader(proc, name, logf)


def stop_process(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    """Terminate one process we started (its own process group), escalating to SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------------------------
# CPU accounting: how much of the machine went to processes other than the benchmark's


def _proc_jiffies(pid: int) -> int:
    """utime + stime of every thread of pid, in clock ticks (0 if it is gone)."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    f = st[st.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])  # fields 14 and 15 (utime, stime)


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat (steal counted as busy elsewhere)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]  # idle + iowait
    total = sum(f[:8])  # user..steal
    return total - idle, total


class CpuShare:
    """Snapshot pair measuring the share of all CPU time used by anything but `pids`."""

    def __init__(self, pids):
        self.pids = list(pids)

    def __enter__(self):
        self.busy0, self.total0 = _busy_jiffies()
        self.ours0 = sum(_proc_jiffies(p) for p in self.pids)
        return self

    def __exit__(self, *exc):
        busy1, total1 = _busy_jiffies()
        ours1 = sum(_proc_jiffies(p) for p in self.pids)
        total = max(1, total1 - self.total0)
        self.foreign = max(0.0, ((busy1 - self.busy0) - (ours1 - self.ours0)) / total)
        return False


# ---------------------------------------------------------------------------------------------
# huge pages


def hugepages_2m() -> dict:
    """Facts about 2 MiB huge pages: total/free counts and whether hugetlbfs is mounted."""
    info = {"total": 0, "free": 0, "size_kb": 2048, "mounted": False}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("HugePages_Total:"):
                info["total"] = int(line.split()[1])
            elif line.startswith("HugePages_Free:"):
                info["free"] = int(line.split()[1])
            elif line.startswith("Hugepagesize:"):
                info["size_kb"] = int(line.split()[1])
    except OSError:
        pass
    try:
        info["mounted"] = any(ln.split()[2] == "hugetlbfs" for ln in Path("/proc/mounts").read_text().splitlines())
    except (OSError, IndexError):
        pass
    return info


def use_hugepages(min_free_pages: int = 256) -> bool:
    """True when DPDK can run on huge pages here (enough free 2 MiB pages and hugetlbfs mounted)."""
    h = hugepages_2m()
    return h["mounted"] and h["free"] >= min_free_pages


def eal_memory_args(mem_mb: int = 512) -> list[str]:
    """EAL memory flags: --in-memory on huge pages, else --no-huge (which excludes --in-memory)."""
    if use_hugepages():
        return ["--in-memory"]
    return ["--no-huge", "--no-shconf", "-m", str(mem_mb)]


# ---------------------------------------------------------------------------------------------
# machine description


def _cmd_out(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def dpdk_version() -> str:
    v = _cmd_out(["pkg-config", "--modversion", "libdpdk"])
    if v:
        return v
    out = _cmd_out(["dpkg-query", "-W", "-f=${Version}", "dpdk"])
    return out or "unknown"


def switch_cost(build: Path, cpu: int = 0, procs: int = 5) -> dict | None:
    """What one process switch costs on `cpu` (bench/switchcost.c: `procs` SCHED_FIFO processes yielding
    in turn, as NFs sharing a core under sluiced.nf_sched fifo), with the thread and bare-yield figures:
    the floor under the latency of NFs that share a core, which this machine's host moves from hour to
    hour. None, with the reason on stderr, when the probe is not built or fails."""
    exe = build / "bench" / "sluice-bench-switchcost"
    if not exe.exists():
        print(f"bench: note: {exe} is not built; no switch-cost figure (ninja -C {build})", file=sys.stderr)
        return None
    try:
        cp = subprocess.run([str(exe), "--cpu", str(cpu), "--procs", str(procs)], capture_output=True, text=True,
                            timeout=60)
        if cp.returncode != 0:
            raise ValueError(cp.stderr.strip() or f"exit status {cp.returncode}")
        return json.loads(cp.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"bench: warning: sluice-bench-switchcost failed: {e}", file=sys.stderr)
        return None


def cpu_stalls(build: Path, cpus: tuple = (0, 1), seconds: float = 10.0) -> list | None:
    """How long each CPU is taken from a SCHED_FIFO thread spinning on it (bench/stalls.c: interrupts
    and, in a guest, the hypervisor; no task of this machine preempts it), measured on all `cpus` at
    once: the floor under any latency tail in this run. None, with the reason on stderr, when the probe
    is not built or fails."""
    exe = build / "bench" / "sluice-bench-stalls"
    if not exe.exists():
        print(f"bench: note: {exe} is not built; no CPU-stall figure (ninja -C {build})", file=sys.stderr)
        return None
    procs = [subprocess.Popen([str(exe), "--cpu", str(c), "--seconds", str(seconds), "--policy", "fifo"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cpus]
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=seconds + 30)
            if p.returncode != 0:
                raise ValueError(e.strip() or f"exit status {p.returncode}")
            out.append(json.loads(o))
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        print(f"bench: warning: sluice-bench-stalls failed: {e}", file=sys.stderr)
        return None
    return out


def machine_info() -> dict:
    cpu_model, flags = "unknown", ""
    mhz = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu_model == "unknown":
                cpu_model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":", 1)[1])
    except OSError:
        pass
    os_name = "unknown"
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    hp = hugepages_2m()
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model,
        "cpu_mhz": mhz,
        "cpus_online": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "os": os_name,
        "mem_gib": round(mem_kb / 1048576, 1),
        "dpdk_version": dpdk_version(),
        "hugepages_2m_total": hp["total"],
        "hugepages_2m_free_at_start": hp["free"],
        "hugetlbfs_mounted": hp["mounted"],
        "python": platform.python_version(),
    }


# ---------------------------------------------------------------------------------------------
# progress output


class Progress:
    """A text progress bar for long runs: one line per step, `[#####.....] 12/40 30% eta 3m05s`.

    On a terminal the bar line is redrawn in place between steps' messages; in a log (not a tty)
    every step prints one plain line, so CI output stays readable.
    """

    WIDTH = 24

    def __init__(self, total: int, stream=None):
        import sys as _sys
        self.total = max(1, total)
        self.done = 0
        self.t0 = time.monotonic()
        self.stream = stream or _sys.stdout

    def bar(self) -> str:
        frac = min(1.0, self.done / self.total)
        fill = int(round(frac * self.WIDTH))
        el = time.monotonic() - self.t0
        eta = "" if self.done == 0 else f" eta {_mmss(el / self.done * (self.total - self.done))}"
        return f"[{'#' * fill}{'.' * (self.WIDTH - fill)}] {self.done}/{self.total} {frac:4.0%} {_mmss(el)}{eta}"

    def note(self, msg: str) -> None:
        """A line of detail inside the current step (kept short)."""
        print(f"      {msg}", file=self.stream, flush=True)

    def step(self, msg: str) -> None:
        self.done += 1
        print(f"{self.bar()}  {msg}", file=self.stream, flush=True)


def _mmss(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s"


# ---------------------------------------------------------------------------------------------
# the command line of the section benchmarks (steering.py, nfs.py, trust.py)


def add_round_args(ap, default_rounds: int, quick_help: str) -> None:
    """--rounds, --window, --windows, --quick, --results and --no-report, as every section benchmark
    takes them."""
    ap.add_argument("--rounds", type=int, default=None, help=f"rounds (default {default_rounds}; --quick 1)")
    ap.add_argument("--window", type=float, default=None, help="seconds per window (default 1.0; --quick 0.3)")
    ap.add_argument("--windows", type=int, default=3, help="windows per measurement (default 3)")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--results", default=str(RESULTS), help="results directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")


def round_settings(args, default_rounds: int) -> tuple[int, float, float]:
    """(rounds, window seconds, warm-up seconds) from add_round_args' options."""
    q = args.quick
    return args.rounds or (1 if q else default_rounds), args.window or (0.3 if q else 1.0), 0.3 if q else 1.0


def save_results(args, prog: str, stamp: str, scenario: str, data: dict) -> Path:
    """Write <args.results>/<stamp>-<scenario>.json and say so. Returns its path."""
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stamp}-{scenario}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{prog}: wrote {path}")
    return path


def regenerate_report(args) -> None:
    """BENCHMARKS.md from every result file, unless this was a --quick or --no-report run."""
    if not args.no_report and not args.quick:
        subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "gen_report.py")], check=False)
