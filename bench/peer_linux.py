#!/usr/bin/env python3
"""Linux peer for the fabric benchmark: kernel IPv4 forwarding, one network namespace per NF.

Topology (N = number of NFs), all namespaces named slb-<pid>-*, joined by veth pairs:

    gen  --veth0--  nf1  --veth1--  nf2 ... nfN  --vethN--  sink
    10.77.0.1       10.77.0.2 | 10.77.1.1          10.77.N.1 | 10.77.N.2

- gen: `udpgen` (bench/udpgen.c, compiled here with the system cc: this kernel has no pktgen,
  CONFIG_NET_PKTGEN is not set) floods UDP/IPv4 frames of B bytes (L2, no FCS) to 10.78.0.1 with
  1024 (source, destination) port pairs, via an AF_PACKET socket that bypasses the qdisc
  (sendmmsg, 64 frames per call), pinned to core 0 (`taskset -c 0`).
- nfK: net.ipv4.ip_forward=1, default route to the next namespace, permanent neighbour entries
  (no ARP), rp_filter off, GRO/GSO/TSO off on every veth (each packet is forwarded as itself).
- sink: the last NF's neighbour entry for the sink carries a MAC the sink does not own, so the
  sink's stack drops every frame right at ip_rcv (PACKET_OTHERHOST): no ICMP, no socket lookup.

The rate is the growth of the sink veth's rx_packets over the window: frames the last NF handed
to the sink namespace. What the chain cannot take is dropped at the first hop (the per-CPU
backlog, netdev_max_backlog), as with the infinite net_null sources of the other systems.

Where the work runs: veth has no queues or interrupts; a transmit puts the frame on the per-CPU
backlog of the CPU it runs on, and that CPU's NET_RX softirq then does the whole chain (every
namespace's IP forwarding and the next veth transmit) -- softirq context, on whichever CPU raised
it, charged to no process. With `rps` on (default) the first NF's ingress veth steers its backlog
to core 1 (RPS, rps_cpus=2), so the generator has core 0 and the forwarding chain core 1, like the
other systems' split (switch on core 1); with `--no-rps` everything (generator + forwarding) runs
on core 0 and core 1 idles.

Zero-loss and latency trials (scenarios 2 and 3): `LinuxTrials` (below) builds the same chain once,
keeps a receiving `bench/udpsink.c` (AF_PACKET ring on the sink veth, which sees the frames before
ip_rcv drops them) in the sink namespace and runs `bench/udpgen.c` in its paced, stamped mode (the
stamp of nfs/common/stamp.h, as sluice-nf-gen's) per trial. Both are compiled here with `-I nfs`.

Run directly for a quick check:  bench/peer_linux.py --nfs 1 --size 64 --duration 5
One trial, printed as JSON:       bench/peer_linux.py --trials --nfs 1 --size 66 --rate 200000 --duration 2
(trials need frames of >= 66 bytes: 42 of headers + the 24-byte stamp)
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BenchError, spawn, stop_process  # noqa: E402

HERE = Path(__file__).resolve().parent
UDPGEN_SRC = HERE / "udpgen.c"
UDPSINK_SRC = HERE / "udpsink.c"
NFS_INC = HERE.parent / "nfs"
GEN_CORE = "0"
SINK_CORE = "0"  # with the generator: core 1 is the forwarding chain's (RPS)
SINK_NAP_US = 500  # udpsink's pause between ring drains that found frames
FWD_CPU_MASK = "2"  # RPS target of the first hop: core 1
DST_IP = "10.78.0.1"  # beyond the sink: every NF forwards it along its default route
SINK_BOGUS_MAC = "02:00:00:00:00:99"

_bins: dict[str, Path] = {}
_bin_dir: Path | None = None


def _tool(name: str) -> Path:
    """Compile bench/<name>.c (with -I nfs: common/stamp.h, tsc.h, latency_hist.h) once per process
    into a temporary directory (removed at exit)."""
    global _bin_dir
    b = _bins.get(name)
    if b is not None and b.exists():
        return b
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BenchError(f"no C compiler (cc) to build bench/{name}.c, needed by the linux-veth peer")
    if _bin_dir is None or not _bin_dir.exists():
        _bin_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-udpgen-"))
        atexit.register(shutil.rmtree, _bin_dir, True)
    out = _bin_dir / name
    src = HERE / f"{name}.c"
    r = subprocess.run([cc, "-O2", "-I", str(NFS_INC), "-o", str(out), str(src)], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"building {src} failed:\n{r.stderr}")
    _bins[name] = out
    return out


def udpgen() -> Path:
    return _tool("udpgen")


def udpsink() -> Path:
    return _tool("udpsink")


def check_tools() -> None:
    """Preflight: everything this peer needs (raises BenchError naming what is missing)."""
    for tool in ("ip", "taskset"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found (iproute2 / util-linux); needed by the linux-veth peer")
    for src in (UDPGEN_SRC, UDPSINK_SRC, NFS_INC / "common" / "stamp.h"):
        if not src.exists():
            raise BenchError(f"{src} missing")
    udpgen()
    udpsink()


def _run(argv: list[str], input_: str | None = None) -> str:
    r = subprocess.run(argv, input=input_, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(argv)} failed (rc={r.returncode}): {r.stderr.strip() or r.stdout.strip()}"
                         + (f"\ninput:\n{input_}" if input_ else ""))
    return r.stdout


# ---------------------------------------------------------------------------------------------
# CPU accounting: softirq time is charged to no process, so it is ours here, not "foreign"


def _stat_jiffies() -> tuple[int, int, int]:
    """(busy, total, irq + softirq) jiffies over all CPUs from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]
    total = sum(f[:8])
    return total - idle, total, f[5] + f[6]


def _pid_jiffies(pid: int) -> int:
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    f = st[st.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])


def _ksoftirqd_pids() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().startswith("ksoftirqd/"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


class KernelCpuShare:
    """Share of all CPU time used by anything but `pids`, ksoftirqd and irq/softirq time."""

    def __init__(self, pids):
        self.pids = [*pids, *_ksoftirqd_pids()]

    def __enter__(self):
        self.busy0, self.total0, self.irq0 = _stat_jiffies()
        self.ours0 = sum(_pid_jiffies(p) for p in self.pids)
        return self

    def __exit__(self, *exc):
        busy1, total1, irq1 = _stat_jiffies()
        ours1 = sum(_pid_jiffies(p) for p in self.pids)
        total = max(1, total1 - self.total0)
        self.softirq = (irq1 - self.irq0) / total
        self.foreign = max(0.0, ((busy1 - self.busy0) - (irq1 - self.irq0) - (ours1 - self.ours0)) / total)
        return False


def _softnet() -> list[tuple[int, int]]:
    """Per CPU (processed, dropped) from /proc/net/softnet_stat (hex columns 1 and 2)."""
    out = []
    for line in Path("/proc/net/softnet_stat").read_text().splitlines():
        f = line.split()
        out.append((int(f[0], 16), int(f[1], 16)))
    return out


# ---------------------------------------------------------------------------------------------


class LinuxChain:
    """gen -> nf1 .. nfN -> sink namespaces over veth; use as a context manager."""

    def __init__(self, nfs: int = 1, size: int = 64, rps: bool = True, logdir: Path | None = None,
                 tag: str = "linux"):
        if nfs < 1:
            raise ValueError("nfs must be >= 1")
        if not 60 <= size <= 1514:
            raise BenchError(f"frame size {size} outside 60..1514 (L2 without FCS, MTU 1500)")
        self.nfs, self.size, self.rps = nfs, size, rps
        self.logdir, self.tag = logdir, tag
        p = f"slb-{os.getpid()}"
        self.ns = [f"{p}-gen", *(f"{p}-nf{k}" for k in range(1, nfs + 1)), f"{p}-sink"]
        self.created: list[str] = []
        self.gen = None
        self.gen_out = None
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

    # veth k joins namespace k (left, device "o") and namespace k+1 (right, device "i")
    @staticmethod
    def _mac(k: int, side: str) -> str:
        return f"02:5b:00:{k:02x}:{0 if side == 'o' else 1:02x}:01"

    def start(self) -> None:
        udpgen()  # compile before creating anything
        self._build()
        self._start_flood()

    def _build(self) -> None:
        """The namespaces, veth pairs, addresses, routes, neighbours, sysctls, offloads, RPS."""
        n = self.nfs
        for name in self.ns:
            _run(["ip", "netns", "add", name])
            self.created.append(name)
        tmp_names = []
        for k in range(n + 1):
            left, right = self.ns[k], self.ns[k + 1]
            a, b = f"slb{os.getpid() % 100000}x{k}o", f"slb{os.getpid() % 100000}x{k}i"
            tmp_names.append((a, b))
            _run(["ip", "link", "add", a, "netns", left, "address", self._mac(k, "o"), "type", "veth",
                  "peer", "name", b, "netns", right, "address", self._mac(k, "i")])
        # per namespace: rename to o / i, addresses, routes, neighbours, sysctls, offloads
        for j, name in enumerate(self.ns):
            cmds = []
            if j <= n:  # has an outgoing veth j
                cmds += [f"link set {tmp_names[j][0]} name o", f"addr add 10.77.{j}.1/24 dev o", "link set o up"]
            if j >= 1:  # has an incoming veth j-1
                cmds += [f"link set {tmp_names[j - 1][1]} name i", f"addr add 10.77.{j - 1}.2/24 dev i", "link set i up"]
            cmds.append("link set lo up")
            if 1 <= j <= n:
                cmds.append(f"route add default via 10.77.{j}.2 dev o")
                nh_mac = SINK_BOGUS_MAC if j == n else self._mac(j, "i")
                cmds.append(f"neigh replace 10.77.{j}.2 lladdr {nh_mac} dev o nud permanent")
            _run(["ip", "-n", name, "-batch", "-"], "\n".join(cmds) + "\n")
            sysctl = {"net/ipv4/ip_forward": "1" if 1 <= j <= n else "0",
                      "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0"}
            for dev in ("o", "i"):
                if (dev == "o" and j <= n) or (dev == "i" and j >= 1):
                    sysctl[f"net/ipv4/conf/{dev}/rp_filter"] = "0"
            script = "; ".join(f"echo {v} > /proc/sys/{k}" for k, v in sysctl.items())
            devs = [d for d, ok in (("o", j <= n), ("i", j >= 1)) if ok]
            if shutil.which("ethtool"):
                script += "".join(f"; ethtool -K {d} gro off gso off tso off >/dev/null 2>&1 || true" for d in devs)
            if self.rps and j == 1:
                script += f"; echo {FWD_CPU_MASK} > /sys/class/net/i/queues/rx-0/rps_cpus"
            _run(["ip", "netns", "exec", name, "sh", "-ec", script])

    def _gen_argv(self) -> list[str]:
        """ip netns exec gen taskset -c 0 udpgen; the caller appends options and operands."""
        return ["ip", "netns", "exec", self.ns[0], "taskset", "-c", GEN_CORE, str(udpgen())]

    def _gen_operands(self) -> list[str]:
        return ["o", self._mac(0, "i"), self._mac(0, "o"), "10.77.0.1", DST_IP, str(self.size)]

    def _start_flood(self) -> None:
        if self.logdir is not None:
            self._logf = open(self.logdir / f"{self.tag}-udpgen.log", "wb")
        argv = [*self._gen_argv(), *self._gen_operands()]
        self.gen, self.gen_out = spawn(argv, "udpgen", logf=self._logf)
        time.sleep(0.05)
        if self.gen.poll() is not None:
            time.sleep(0.2)
            raise BenchError(f"udpgen exited at once (rc={self.gen.returncode}):\n{self.gen_out.tail()}")

    def link_stats(self, j: int, dev: str) -> dict:
        out = _run(["ip", "-n", self.ns[j], "-s", "-j", "link", "show", "dev", dev])
        s = json.loads(out)[0]["stats64"]
        return {"rx": s["rx"]["packets"], "rx_dropped": s["rx"]["dropped"],
                "tx": s["tx"]["packets"], "tx_dropped": s["tx"]["dropped"]}

    def delivered(self) -> int:
        """Frames that reached the sink namespace: rx_packets of its veth."""
        return self.link_stats(len(self.ns) - 1, "i")["rx"]

    def sent(self) -> int:
        return self.link_stats(0, "o")["tx"]

    def pids(self) -> list[int]:
        return [self.gen.pid] if self.gen else []

    def check_alive(self) -> None:
        if self.gen is None or self.gen.poll() is not None:
            raise BenchError(f"udpgen died (rc={self.gen and self.gen.returncode}):\n"
                             f"{self.gen_out.tail() if self.gen_out else ''}")

    def stop(self) -> None:
        if self.gen is not None:
            stop_process(self.gen, grace=3.0)
            self.gen = None
        if self._logf is not None:
            self._logf.close()
            self._logf = None
        # deleting a namespace deletes its veth ends (and with them the peers)
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.created = []


class LinuxTrials(LinuxChain):
    """Zero-loss and latency trials (scenarios 2 and 3) on the namespace chain of `nfs` NFs.

    The chain (namespaces, veths, routes, RPS of NF 1's ingress to core 1) is built once per session,
    exactly as for the flood; the sink namespace keeps dropping the frames at ip_rcv (bogus MAC).

    Processes:
    - sink: one long-lived `bench/udpsink.c` per session in the sink namespace, pinned to core 0
      (`taskset -c 0`, with the generator). It reads every frame reaching the sink veth "i" from an
      AF_PACKET TPACKET_V2 ring (65536 frames, first 190 bytes of each) and answers commands on stdin
      with JSON lines: `start ID` before a trial, `drain EXPECTED 200 2000` after it (answers once
      all EXPECTED counted packets arrived, or none for 200 ms, or after 2 s: the stragglers' wait).
    - generator: one `bench/udpgen.c --rate R --count C --warmup W --gen-id ID` per trial, in the gen
      namespace, `taskset -c 0` as in flood mode. It sends stamped frames (nfs/common/stamp.h, the
      same stamp as sluice-nf-gen) paced by the TSC token bucket of nfs/common/tsc.h (burst 32): W
      seconds of warm-up under id ID + 1, then exactly C = round(rate x duration) counted packets
      under ID (sequence from 0), then prints its counts and exits. Trial k uses ID = 2k, so warm-up
      packets and stragglers of earlier trials never count (the sink ignores every other id).

    Latency is the kernel's receive timestamp of the frame at the sink's packet tap (softirq, on core 1
    where the chain runs) minus the TSC stamp the generator wrote just before sendmmsg, converted on
    one clock (udpsink re-reads a (TSC, CLOCK_REALTIME) pair at every ring drain; see udpsink.c). It
    covers: the generator's send syscall, the first veth hop and its RPS hand-over to core 1, every
    NF's IPv4 forwarding and backlog wait, up to the sink namespace's receive. It does not include
    when the sink process got to read the ring.

    What sharing core 0 with the generator costs: the sink drains the ring, naps 0.5 ms, drains again
    (at most ~2000 wake-ups a second, a few % of core 0 at 1 Mpps; it blocks in poll() when idle), and
    each time it runs it preempts the generator, which then catches up with a burst of up to 32 frames
    out of its token bucket. Above ~10 kpps the generator spins on core 0 between packets, so at high
    offered rates the sink's share directly lowers the generator's ceiling (`sent_pps` shows what was
    achieved). On core 1, the packet tap itself (a 190-byte copy into the ring per frame, in the
    sink namespace's receive softirq) is work the flood measurement does not have: the chain's
    zero-loss rate here is measured with that cost included. The sink is fast enough for ~2 Mpps (the
    ring holds ~30 ms of it); had the ring overflowed, the trial's `lost` would include it: such
    trials are reported on stderr and in `last_detail["sink"]["ring_drops"]`.

    pids(): the sink and, during a trial, the generator.
    """

    STRAGGLER_IDLE_MS = 200
    STRAGGLER_MAX_MS = 2000

    def __init__(self, nfs: int, size: int, logdir: Path | None = None, tag: str = "linux",
                 sink_clock: str = "kernel"):
        if size < 66:
            raise BenchError(f"frame size {size} leaves no room for the 24-byte stamp after the 42 bytes of "
                             "Ethernet/IPv4/UDP headers: trials need >= 66 B")
        super().__init__(nfs=nfs, size=size, rps=True, logdir=logdir, tag=tag)
        self.sink_clock = sink_clock
        self.sink = None
        self.sink_out = None
        self._sink_logf = None
        self._trial_gen = None
        self.tsc_hz = 0
        self.n_trials = 0
        self.last_detail: dict = {}

    def start(self) -> None:
        udpgen()  # compile both before creating anything
        sink_bin = udpsink()
        self._build()
        if self.logdir is not None:
            self._sink_logf = open(self.logdir / f"{self.tag}-udpsink.log", "wb")
            self._logf = open(self.logdir / f"{self.tag}-udpgen.log", "wb")
        argv = ["ip", "netns", "exec", self.ns[-1], "taskset", "-c", SINK_CORE, str(sink_bin),
                "--clock", self.sink_clock, "--nap-us", str(SINK_NAP_US), "i"]
        self.sink, self.sink_out = spawn(argv, "udpsink", logf=self._sink_logf, stdin=subprocess.PIPE)
        m = self.sink_out.wait_for(r'\{"reply": "ready".*\}\n', 0, timeout=10)
        self.tsc_hz = int(json.loads(m.group(0))["tsc_hz"])

    def _sink_cmd(self, line: str, reply: str, timeout: float) -> dict:
        if self.sink is None or self.sink.poll() is not None:
            raise BenchError(f"udpsink is not running (rc={self.sink and self.sink.returncode}):\n"
                             f"{self.sink_out.tail() if self.sink_out else ''}")
        pos = self.sink_out.pos
        try:
            self.sink.stdin.write((line + "\n").encode())
            self.sink.stdin.flush()
        except OSError as e:
            raise BenchError(f"udpsink: cannot send {line!r}: {e}\n{self.sink_out.tail()}")
        m = self.sink_out.wait_for(rf'\{{"reply": "{reply}".*\}}\n', pos, timeout=timeout)
        return json.loads(m.group(0))

    def trial(self, rate_pps: float, duration: float, warmup: float) -> dict:
        if rate_pps <= 0 or duration <= 0 or warmup < 0:
            raise BenchError(f"trial needs rate > 0, duration > 0, warmup >= 0 (got {rate_pps}, {duration}, {warmup})")
        self.n_trials += 1
        gid = 2 * self.n_trials  # warm-up: gid + 1
        count = max(1, round(rate_pps * duration))
        rate = max(1, round(rate_pps))
        # a safety net only: far more than any generator here needs (>= 50 kpps)
        cap = 30 + 3 * (warmup + duration) + count / 50_000
        self._sink_cmd(f"start {gid}", "start", 5)
        argv = [*self._gen_argv(), "--rate", str(rate), "--count", str(count), "--warmup", f"{warmup:.6f}",
                "--gen-id", str(gid), "--tsc-hz", str(self.tsc_hz), *self._gen_operands(), f"{cap:.1f}"]
        gen = self._trial_gen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 start_new_session=True)
        try:
            out, err = gen.communicate(timeout=cap + 10)
        except subprocess.TimeoutExpired:
            raise BenchError(f"udpgen (trial {self.n_trials}, {rate} pps) did not finish in {cap + 10:.0f} s")
        finally:
            if gen.poll() is None:
                stop_process(gen, grace=1)
            self._trial_gen = None
        rc = gen.returncode
        if self._logf is not None:
            self._logf.write(f"# trial {self.n_trials}: {' '.join(argv)}\n".encode() + out + err)
            self._logf.flush()
        try:
            g = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise BenchError(f"udpgen (rc={rc}) printed no result:\n{out.decode()}{err.decode()}")
        if rc != 0:
            raise BenchError(f"udpgen failed (rc={rc}): {err.decode().strip()}")
        s = self._sink_cmd(f"drain {g['sent']} {self.STRAGGLER_IDLE_MS} {self.STRAGGLER_MAX_MS}", "stats",
                           timeout=self.STRAGGLER_MAX_MS / 1000 + 10)
        sent, received = int(g["sent"]), int(s["unique"])
        self.last_detail = {"generator": g, "sink": {k: v for k, v in s.items() if k != "histogram"}}
        if g.get("stopped"):
            print(f"warning: linux trial {self.n_trials}: udpgen stopped after {sent} of {count} counted "
                  "packets (safety time limit)", file=sys.stderr)
        if s["ring_drops"]:
            print(f"warning: linux trial {self.n_trials} at {rate} pps: the sink's ring overflowed "
                  f"({s['ring_drops']} frames): loss includes the sink's", file=sys.stderr)
        lat = s["latency_ns"]
        if lat is not None:
            lat = {k: lat[k] for k in ("samples", "min", "mean", "p50", "p90", "p99", "p999", "max")}
        return {
            "offered_pps": float(rate_pps),
            "sent": sent,
            "received": received,
            "lost": max(0, sent - received),
            "sent_pps": float(g["sent_pps"]),
            "latency_ns": lat,
            "histogram": s["histogram"],
            "reordered": int(s["reordered"]),
            "duplicates": int(s["duplicates"]),
        }

    def pids(self) -> list[int]:
        return ([self.sink.pid] if self.sink else []) + ([self._trial_gen.pid] if self._trial_gen else [])

    def check_alive(self) -> None:
        if self.sink is None or self.sink.poll() is not None:
            raise BenchError(f"udpsink died (rc={self.sink and self.sink.returncode}):\n"
                             f"{self.sink_out.tail() if self.sink_out else ''}")

    def stop(self) -> None:
        if self._trial_gen is not None:
            stop_process(self._trial_gen, grace=1)
            self._trial_gen = None
        if self.sink is not None:
            try:
                self.sink.stdin.write(b"quit\n")
                self.sink.stdin.close()
                self.sink.wait(timeout=2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            stop_process(self.sink, grace=2)
            self.sink = None
        if self._sink_logf is not None:
            self._sink_logf.close()
            self._sink_logf = None
        super().stop()


def measure(nfs: int, size: int, duration: float, warmup: float, rps: bool = True,
            logdir: Path | None = None, tag: str = "linux") -> tuple[float, dict]:
    """Build the namespace chain, flood it, return (Mpps at the sink, extra facts); tears down."""
    with LinuxChain(nfs=nfs, size=size, rps=rps, logdir=logdir, tag=tag) as ch:
        time.sleep(warmup)
        ch.check_alive()
        sn0 = _softnet()
        with KernelCpuShare([*ch.pids(), os.getpid()]) as cpu:
            t0a = time.monotonic()
            d0, s0 = ch.delivered(), ch.sent()
            t0 = (t0a + time.monotonic()) / 2
            time.sleep(duration)
            t1a = time.monotonic()
            d1, s1 = ch.delivered(), ch.sent()
            t1 = (t1a + time.monotonic()) / 2
        sn1 = _softnet()
        ch.check_alive()
        dt_ = t1 - t0
        mpps = (d1 - d0) / dt_ / 1e6
        if mpps <= 0:
            raise BenchError(f"the namespace chain delivered no packets (generator sent {s1 - s0})")
        extra = {
            "foreign_cpu": round(cpu.foreign, 4),
            "offered_mpps": round((s1 - s0) / dt_ / 1e6, 4),
            "irq_softirq_cpu_share": round(cpu.softirq, 4),
            "backlog_drops_per_cpu": [b[1] - a[1] for a, b in zip(sn0, sn1)],
            "softnet_processed_per_cpu": [b[0] - a[0] for a, b in zip(sn0, sn1)],
            "rps_first_hop_to_core1": rps,
        }
        return mpps, extra


def run_linux(nfs: int, size: int, warmup: float, duration: float, logdir: Path | None = None,
              tag: str = "linux") -> tuple[float, dict]:
    """run.py's calling convention (same as peer_memif.run_peer)."""
    return measure(nfs, size, duration, warmup, logdir=logdir, tag=tag)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nfs", type=int, default=1)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--no-rps", action="store_true", help="no RPS: generator and forwarding share core 0")
    ap.add_argument("--logdir", type=Path, default=None)
    ap.add_argument("--trials", action="store_true",
                    help="one paced trial (LinuxTrials) instead of the flood; prints its JSON")
    ap.add_argument("--rate", type=float, default=100_000, help="--trials: offered rate, packets/s")
    ap.add_argument("--sink-clock", choices=("kernel", "user"), default="kernel",
                    help="--trials: latency end point (diagnostics; see udpsink.c)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("error: run as root (network namespaces)", file=sys.stderr)
        return 1
    # SIGTERM unwinds like Ctrl-C, so the namespaces and processes are removed on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.logdir:
        a.logdir.mkdir(parents=True, exist_ok=True)
    if a.trials:
        try:
            with LinuxTrials(a.nfs, a.size, logdir=a.logdir, sink_clock=a.sink_clock) as tr:
                r = tr.trial(a.rate, a.duration, a.warmup)
        except BenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(json.dumps(r))
        return 0
    try:
        mpps, extra = measure(a.nfs, a.size, a.duration, a.warmup, rps=not a.no_rps, logdir=a.logdir)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"linux-veth nfs={a.nfs} size={a.size}: {mpps:.3f} Mpps ({mpps * a.size * 8 / 1000:.2f} Gbps); "
          f"{json.dumps(extra)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
