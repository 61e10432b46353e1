#!/usr/bin/env python3
"""Sluice side of the fabric benchmark: net_null -> N x sluice-nf-fwd -> net_null.

    sluiced   ports src (net_null0, size=B, copy=0, ingress chain "c") and dst (net_null1);
              chain c = fwd1 -> fwd2 -> ... -> fwdN, exit dst; lcores "0,1" (worker on lcore 1)
    NFs       build/nfs/sluice-nf-fwd --service fwdK --wakeup poll|adaptive, each `taskset -c 0`

The rate is the growth of the exit port's tx_pkts (control socket `stats`) over the window.

Pinning on this 2-core machine: the sluiced worker owns core 1; its main lcore (control socket,
mostly idle) and every NF share core 0. With N > 1 the NFs time-share core 0, which is the point
of comparing poll against adaptive there.

Run directly for a quick check:  bench/sluice_fabric.py --nfs 1 --size 64 --mode poll
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, BenchError, spawn, stop_process  # noqa: E402
from peer_memif import measure_rate  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BENCH_BUILD", REPO / "build"))
SLUICED = BUILD / "src" / "manager" / "sluiced"
NF_FWD = BUILD / "nfs" / "sluice-nf-fwd"
NF_CORE = "0"          # taskset core of every NF
SLUICED_LCORES = "0,1"  # main lcore 0, worker lcore 1


def check_binaries() -> None:
    missing = [str(p) for p in (SLUICED, NF_FWD) if not (p.is_file() and os.access(p, os.X_OK))]
    if missing:
        hint = ("run `meson setup build && ninja -C build` (or `make`) first" if not BUILD.exists()
                else "run `ninja -C build` first")
        raise BenchError("Sluice binaries missing: " + ", ".join(missing) + f"; {hint}, "
                         "or pass --systems testpmd-memif to measure only the DPDK peer")


class Ctl:
    """Newline-delimited JSON client for sluiced's control socket."""

    def __init__(self, path: Path, timeout: float = 5.0):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._buf = b""

    def call(self, cmd: str, **kw) -> dict:
        req = {"cmd": cmd, **kw}
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        while b"\n" not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise BenchError(f"sluiced closed the control socket during {cmd!r}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        resp = json.loads(line)
        if not resp.get("ok"):
            raise BenchError(f"sluiced {cmd!r} failed: {resp.get('error')}")
        return resp

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def make_config(nfs: int, size: int, mbufs: int = 16384, ring: int = 1024) -> dict:
    services = [f"fwd{k}" for k in range(1, nfs + 1)]
    return {
        "sluiced": {"pool_mbufs": mbufs, "ring_size": ring, "max_nfs": 64, "huge_pages": "auto",
                    "lcores": SLUICED_LCORES},
        "ports": [
            {"name": "src", "vdev": f"net_null0,size={size},copy=0", "chain": "c"},
            {"name": "dst", "vdev": f"net_null1,size={size},copy=0"},
        ],
        "chains": [{"name": "c", "nfs": services, "exit": "dst"}],
        "nfs": [{"name": s} for s in services],
    }


class SluiceFabric:
    """sluiced + N forwarding NFs; use as a context manager."""

    def __init__(self, nfs: int = 1, size: int = 64, mode: str = "poll", logdir: Path | None = None,
                 tag: str = "sluice"):
        check_binaries()
        if mode not in ("poll", "adaptive", "block"):
            raise ValueError(f"bad wakeup mode {mode!r}")
        self.nfs, self.size, self.mode = nfs, size, mode
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
        cfg.write_text(json.dumps(make_config(self.nfs, self.size), indent=1))
        self.sluiced, self.sluiced_out = spawn(
            [str(SLUICED), "--config", str(cfg), "--socket-dir", str(d)], "sluiced", logf=self._log("sluiced"))
        self.sluiced_out.wait_for(r"sluiced: ready", timeout=60)
        self.ctl = Ctl(d / "ctl.sock")
        for k in range(1, self.nfs + 1):
            argv = ["taskset", "-c", NF_CORE, str(NF_FWD), "--socket", str(d / "nf.sock"),
                    "--name", f"fwd{k}.0", "--service", f"fwd{k}", "--wakeup", self.mode]
            proc, out = spawn(argv, f"sluice-nf-fwd fwd{k}.0", logf=self._log(f"fwd{k}"))
            self.nf_procs.append((proc, out))
        deadline = time.monotonic() + 20
        while True:
            attached = self.ctl.call("nfs").get("nfs", [])
            if len(attached) >= self.nfs:
                break
            for proc, out in self.nf_procs:
                if proc.poll() is not None:
                    raise BenchError(f"{out.name} exited with {proc.returncode} before attaching:\n{out.tail()}")
            if self.sluiced.poll() is not None:
                raise BenchError(f"sluiced exited with {self.sluiced.returncode}:\n{self.sluiced_out.tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"only {len(attached)} of {self.nfs} NFs attached within 20 s")
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


def summarize_stats(st: dict) -> dict:
    """The few counters worth keeping next to a rate: drops by reason, pool use, NF kicks."""
    out = {"drops": st.get("drops", {}), "pool": st.get("pool", {})}
    out["nf_kicks"] = [n.get("kicks") for n in st.get("nfs", [])]
    return out


def run_sluice(nfs: int, size: int, mode: str, warmup: float, duration: float,
               logdir: Path | None = None, tag: str = "sluice") -> tuple[float, dict]:
    with SluiceFabric(nfs=nfs, size=size, mode=mode, logdir=logdir, tag=tag) as fab:
        mpps, foreign = measure_rate(fab.delivered, warmup, duration, fab.pids())
        fab.check_alive()
        extra = summarize_stats(fab.stats())
        extra["foreign_cpu"] = round(foreign, 4)
        if mpps <= 0:
            raise BenchError(f"sluiced delivered no packets; stats: {json.dumps(extra)}")
        return mpps, extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nfs", type=int, default=1)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--mode", default="poll", choices=["poll", "adaptive", "block"])
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--logdir", type=Path, default=None)
    a = ap.parse_args()
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    try:
        mpps, extra = run_sluice(a.nfs, a.size, a.mode, a.warmup, a.duration, a.logdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"sluice nfs={a.nfs} size={a.size} mode={a.mode}: {mpps:.2f} Mpps "
          f"({mpps * a.size * 8 / 1000:.2f} Gbps); {json.dumps(extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
