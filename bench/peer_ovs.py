#!/usr/bin/env python3
"""Open vSwitch with DPDK as the switch, dpdk-testpmd NFs on vhost-user (virtio-user) ports.

    ovsdb-server + ovs-vswitchd-dpdk (Debian package openvswitch-switch-dpdk), private database
    and run directory in a temporary directory (the system's /etc/openvswitch is not touched)
        other_config: dpdk-init=true, dpdk-lcore-mask=0x1, pmd-cpu-mask=0x2 (PMD thread on core 1),
                      dpdk-socket-mem=512, dpdk-extra="--no-pci --in-memory --vdev=net_null0,size=B,copy=0"
        bridge br0 (datapath_type=netdev)
            port null0: type=dpdk, dpdk-devargs=net_null0 (the source and sink)
            port vhuK:  type=dpdkvhostuserclient, one per NF (OVS is the vhost-user client)
        OpenFlow: null0 -> vhu1, vhu1 -> vhu2, ..., vhuN -> null0
    NF K: dpdk-testpmd -l 1,0 --main-lcore 1 --in-memory --single-file-segments
          --vdev virtio_user0,path=<run>/vhuK.sock,server=1,queues=1, io forwarding (core 0)

The rate is the growth of null0's TX packets (`ovs-ofctl dump-ports`, read live from the
datapath; the database's statistics column is only refreshed every 5 s).

`--single-file-segments` is required: without it virtio-user maps every 2 MiB huge page as its
own region and vhost-user refuses the table ("update_memory_region(): Too many memory regions").

Run directly:  bench/peer_ovs.py --nfs 1 --size 64 --duration 5
Not part of run.py; see bench/notes_ovs.md.

Trials (scenarios 2 and 3, `OvsTrials`): the same set-up, but the source/sink port null0 is
replaced by a dpdkvhostuserclient port `tester` (ofport 1) to which bench/tester.c
(build/bench/sluice-bench-tester) is the vhost-user server (`--vdev virtio_user0,path=<run>/tester.sock,
server=1,queues=1 --single-file-segments`, `taskset -c 0`, `-l 0`); OpenFlow tester -> vhu1 -> ...
-> vhuN -> tester.  One trial:  bench/peer_ovs.py --trials --nfs 1 --rate 1e5 --duration 1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, spawn, stop_process, use_hugepages  # noqa: E402
from peer_memif import (NF_LCORES, TESTER_IDLE_US, Tester, TesterSession, Testpmd, check_trial_size,  # noqa: E402
                        measure_rate, print_trials, trials_args)

VSWITCHD = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


def check_tools() -> None:
    missing = [p for p in (VSWITCHD, SCHEMA) if not Path(p).exists()]
    missing += [t for t in ("ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-ofctl", "ovs-appctl") if not shutil.which(t)]
    if missing:
        raise BenchError("Open vSwitch with DPDK missing (apt-get install openvswitch-switch-dpdk): " + ", ".join(missing))
    if not use_hugepages():
        raise BenchError("OVS-DPDK needs huge pages here (virtio-user shares memory by file descriptor)")


class OvsChain:
    tester = False  # OvsTrials: port 1 is the tester's vhost-user port instead of net_null0

    def __init__(self, nfs: int = 1, size: int = 64, logdir: Path | None = None, tag: str = "ovs"):
        self.nfs, self.size, self.logdir, self.tag = nfs, size, logdir, tag
        self.tmp = None
        self.db = self.vsd = None
        self.nf_procs: list[Testpmd] = []
        self._logs = []
        self.timings: dict = {}  # seconds each start-up step took

    def _log(self, name):
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

    def vsctl(self, *args: str) -> str:
        r = subprocess.run(["ovs-vsctl", f"--db=unix:{self.run}/db.sock", "--timeout=30", *args],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"ovs-vsctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def ofctl(self, *args: str) -> str:
        r = subprocess.run(["ovs-ofctl", *args], capture_output=True, text=True, env=self.env, timeout=10)
        if r.returncode != 0:
            raise BenchError(f"ovs-ofctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def _dpdk_extra(self) -> str:
        return f"--no-pci --in-memory --vdev=net_null0,size={self.size},copy=0"

    def _add_port1(self) -> None:
        """ofport 1: the traffic source and sink (OvsTrials: the tester's vhost-user port)."""
        self.vsctl("add-port", "br0", "null0", "--", "set", "Interface", "null0", "type=dpdk",
                   "options:dpdk-devargs=net_null0", "ofport_request=1")

    def _start_tester(self) -> None:
        """OvsTrials starts its tester here, next to the NFs."""

    def start(self) -> None:
        check_tools()
        t_start = time.monotonic()
        self.timings = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="sluice-bench-ovs-")
        self.run = Path(self.tmp.name)
        self.env = {**os.environ, "OVS_RUNDIR": str(self.run), "OVS_DBDIR": str(self.run),
                    "OVS_LOGDIR": str(self.run), "OVS_SYSCONFDIR": str(self.run)}
        subprocess.run(["ovsdb-tool", "create", str(self.run / "conf.db"), SCHEMA], check=True, capture_output=True)
        self.db, dbout = spawn(["ovsdb-server", str(self.run / "conf.db"), f"--remote=punix:{self.run}/db.sock",
                                f"--unixctl={self.run}/ovsdb-server.ctl", "--log-file=" + str(self.run / "ovsdb.log")],
                               "ovsdb-server", logf=self._log("ovsdb"), env=self.env)
        for _ in range(100):
            if (self.run / "db.sock").exists():
                break
            time.sleep(0.05)
        self.vsctl("--no-wait", "init")
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:dpdk-init=true",
                   "other_config:dpdk-lcore-mask=0x1", "other_config:pmd-cpu-mask=0x2",
                   "other_config:dpdk-socket-mem=512",
                   f"other_config:dpdk-extra={self._dpdk_extra()}")
        self.vsd, self.vsd_out = spawn([VSWITCHD, f"unix:{self.run}/db.sock", f"--unixctl={self.run}/ovs-vswitchd.ctl",
                                        "--log-file=" + str(self.run / "ovs-vswitchd.log")],
                                       "ovs-vswitchd-dpdk", logf=self._log("vswitchd"), env=self.env)
        self.vsd_out.wait_for(r"DPDK Enabled - initialized", timeout=60)
        self.timings["ovs_s"] = round(time.monotonic() - t_start, 3)
        t0 = time.monotonic()
        self.vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev")
        self._add_port1()
        for k in range(1, self.nfs + 1):
            self.vsctl("add-port", "br0", f"vhu{k}", "--", "set", "Interface", f"vhu{k}", "type=dpdkvhostuserclient",
                       f"options:vhost-server-path={self.run}/vhu{k}.sock", f"ofport_request={k + 1}")
        self.ofctl("del-flows", "br0")
        hops = [1, *range(2, self.nfs + 2), 1]
        for a, b in zip(hops, hops[1:]):
            self.ofctl("add-flow", "br0", f"in_port={a},actions=output:{b}")
        self.timings["ports_s"] = round(time.monotonic() - t0, 3)
        # the NFs (and the tester) start side by side: each waits only for its own EAL
        t0 = time.monotonic()
        self._start_tester()
        pid = os.getpid()
        for k in range(1, self.nfs + 1):
            nf = Testpmd(f"testpmd-nf{k}",
                         ["-l", NF_LCORES[0], "--main-lcore", NF_LCORES[1], "--no-pci", "--in-memory",
                          "--single-file-segments", "--file-prefix", f"slbovs{pid}_{k}", "--log-level", "*:notice",
                          "--vdev", f"virtio_user0,path={self.run}/vhu{k}.sock,server=1,queues=1"],
                         ["--forward-mode=io", "--total-num-mbufs=16384", "--no-lsc-interrupt", "--disable-link-check"],
                         logf=self._log(f"nf{k}"))
            self.nf_procs.append(nf)
        for nf in self.nf_procs:
            nf.wait_prompt()
        self.timings["nfs_s"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        deadline = t0 + 15
        ports = (["tester"] if self.tester else []) + [f"vhu{k}" for k in range(1, self.nfs + 1)]
        for name in ports:
            while "up" not in self.vsctl("get", "Interface", name, "link_state"):
                if time.monotonic() > deadline:
                    raise BenchError(f"{name} never came up:\n{self.vsd_out.tail()}")
                time.sleep(0.1)
        for nf in self.nf_procs:
            nf.cmd("start")
        self.timings["links_s"] = round(time.monotonic() - t0, 3)
        self.timings["total_s"] = round(time.monotonic() - t_start, 3)

    def delivered(self) -> int:
        out = self.ofctl("dump-ports", "br0", "1")
        m = re.search(r"tx pkts=(\d+)", out)
        if not m:
            raise BenchError(f"no tx pkts in ovs-ofctl dump-ports:\n{out}")
        return int(m.group(1))

    def pids(self) -> list[int]:
        return [p.pid for p in (self.db, self.vsd) if p] + [n.proc.pid for n in self.nf_procs]

    def _stop_tester(self) -> None:
        """OvsTrials stops its tester here, first."""

    def stop(self) -> None:
        self._stop_tester()
        for nf in self.nf_procs:
            try:
                nf.quit()
            except Exception:  # noqa: BLE001
                stop_process(nf.proc)
        self.nf_procs = []
        if self.vsd is not None:
            subprocess.run(["ovs-appctl", "-t", f"{self.run}/ovs-vswitchd.ctl", "exit", "--cleanup"],
                           capture_output=True, timeout=20)
            try:
                self.vsd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            stop_process(self.vsd)
            self.vsd = None
        if self.db is not None:
            stop_process(self.db)
            self.db = None
        for f in self._logs:
            f.close()
        self._logs = []
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


class OvsTrials(TesterSession, OvsChain):
    """Zero-loss and latency trials (scenarios 2 and 3) through OVS-DPDK and N testpmd NFs.

    As OvsChain, except that ofport 1 is `tester`, a dpdkvhostuserclient port (no net_null0 in
    dpdk-extra), and bench/tester.c is its vhost-user server: `taskset -c 0`, EAL `-l 0 --no-pci
    --in-memory --single-file-segments --vdev virtio_user0,path=<run>/tester.sock,server=1,queues=1`.
    OpenFlow: tester -> vhu1 -> ... -> vhuN -> tester. The chain and the tester stay up for the whole
    session; each trial() is one `trial` command to the tester (bench/tester.c, bench/README.md).
    """

    tester = True

    def __init__(self, nfs: int, size: int, logdir: Path | None = None, tag: str = "ovs-trials",
                 mbufs: int = 16384, burst: int = 32, flows: int = 1024, idle_us: int = TESTER_IDLE_US):
        check_trial_size(size)
        super().__init__(nfs=nfs, size=size, logdir=logdir, tag=tag)
        self.mbufs, self.burst, self.flows, self.idle_us = mbufs, burst, flows, idle_us
        self.tester_proc = None

    def _dpdk_extra(self) -> str:
        return "--no-pci --in-memory"

    def _add_port1(self) -> None:
        self.vsctl("add-port", "br0", "tester", "--", "set", "Interface", "tester", "type=dpdkvhostuserclient",
                   f"options:vhost-server-path={self.run}/tester.sock", "ofport_request=1")

    def _start_tester(self) -> None:
        self.tester_proc = Tester(
            "tester",
            ["--no-pci", "--in-memory", "--single-file-segments", "--file-prefix", f"slbovsT{os.getpid()}",
             "--log-level", "*:notice", "--vdev", f"virtio_user0,path={self.run}/tester.sock,server=1,queues=1"],
            ["--size", str(self.size), "--flows", str(self.flows), "--burst", str(self.burst),
             "--mbufs", str(self.mbufs), "--idle-us", str(self.idle_us)],
            logf=self._log("tester-out"), errf=self._log("tester"))


def run_ovs(nfs: int, size: int, warmup: float, duration: float, logdir: Path | None = None,
            tag: str = "ovs") -> tuple[float, dict]:
    with OvsChain(nfs=nfs, size=size, logdir=logdir, tag=tag) as ch:
        mpps, foreign = measure_rate(ch.delivered, warmup, duration, ch.pids())
        if mpps <= 0:
            raise BenchError("OVS chain delivered no packets")
        return mpps, {"foreign_cpu": round(foreign, 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nfs", type=int, default=1)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--logdir", type=Path, default=None)
    trials_args(ap)
    a = ap.parse_args()
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    if a.trials:
        a.rate = a.rate or [1e6]
        a.size = max(a.size, 66)
        return print_trials(OvsTrials, a)
    try:
        mpps, extra = run_ovs(a.nfs, a.size, a.warmup, a.duration, a.logdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"ovs-dpdk-vhost nfs={a.nfs} size={a.size}: {mpps:.2f} Mpps ({mpps * a.size * 8 / 1000:.2f} Gbps), "
          f"foreign CPU {extra['foreign_cpu']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
