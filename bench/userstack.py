#!/usr/bin/env python3
"""The user stack module (`sluice run --stack user`: sluice-stackd's lwIP, its frames crossing NF
chains) against the Linux kernel path, in one run, interleaved.

    sudo .venv/bin/python bench/userstack.py [--runs 6] [--secs 5] [--systems sluice,linux,linux-gso] [--perf] [--quick]

Systems (a client namespace `slb-cli` runs wrk and iperf3 -c against each):
  sluice     nginx and iperf3 -s under `sluice run --stack user` (stack.user 10.88.0.1/24, fd88::1/64),
             behind sluiced's net_af_packet port on the root end of veth slb-h0 <-> slb-cli: ingress
             chain [fw, mon, stack], egress chain [stack, fw, mon] -> the port (firewall + monitor,
             both adaptive); sluiced with its default lcores (worker polling core 1)
  linux      the same nginx and iperf3 -s on the kernel's TCP/IP in namespace slb-srv, reached from
             slb-cli through a router namespace slb-rtr (ip_forward on there only) whose nftables
             forward chain is the firewall's rule file (policy drop, ct established,related, icmp,
             tcp dport 8080 and 5201) with counters and conntrack accounting for the monitor;
             offloads off on every veth end, as on the Sluice side (net_af_packet needs them off)
  linux-gso  the same path with the veths' offloads left on (TSO/GSO/GRO, checksums): the kernel
             path as deployed, a reference beside the like-for-like `linux`
  sluice-bare  (only when named) `sluice` with no NF in its chains ([stack] in, [stack] -> p0 out):
             what the firewall and monitor cost
Each round brings every system up (sluiced, NFs, sluice-stackd, one nginx and one iperf3 -s for the
round's three tests), measures it and takes it down (a polling sluiced would take a core from the
kernel path otherwise); the systems' order rotates by round, the tests' order goes through all six
orders (ORDERS). Every figure is the median of the rounds with min and max. A window that failed is
recorded with what was seen (`problems`, `error` in `raw`) and is not a figure. Before each window
the run waits (--wait-quiet) for others' data planes, servers and tests to go quiet; a window in
which processes of no system here still took more than --foreign-max cores is kept in `raw` as
`noisy`, not a figure, and measured once more (--retries).
  wrk       -t1 -c32 --latency, a 1 KiB file over kept-alive connections (after a 1 s warm-up):
            requests/s, p50 and p99 latency
  iperf3    one TCP stream, IPv4, client -> server and -R: Gbit/s at the receiver
CPU over each window: utime + stime of the host's processes (Sluice: sluiced -- its worker polls a
core --, the supervisor, the firewall and monitor NFs, sluice-stackd, nginx / iperf3 -s; Linux:
nginx / iperf3 -s), the irq + softirq time /proc/stat shows for the whole machine (the kernel's
forwarding and TCP, either side's), the whole machine's busy time, the client's own CPU and processes
of no system (foreign). Requests/s per core on three bases: the whole machine (counted once, the
client included); the host's processes; processes + irq/softirq, an upper bound (with tick-based
accounting a softirq tick that lands while a process runs is in its stime and in /proc/stat's softirq).

--perf: after the rounds, one more wrk window per system under `perf record -a -e cpu-clock`, its
profile (by command and DSO, and by symbol) in the JSON, not a figure.

Results: bench/results/userstack-<stamp>.json and userstack-<stamp>.png; BENCHMARKS.md is then
regenerated (bench/gen_report.py). --quick: one round of 1 s windows, nothing written (not in
`make test`). $SLUICE_BUILD_DIR picks the build (default build/: sluiced, the NFs, sluice-stackd and
libsluice-sock.so come from it); the JSON records its binaries' hashes. Every namespace, veth and
process it creates is removed on exit, also on failure, Ctrl-C or SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, RESULTS, BenchError, OutputReader, Progress, ctl, machine_info  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
SLUICE = str(REPO / ".venv" / "bin" / "sluice")
SCENARIO = "userstack"
SYSTEMS = ("sluice", "linux", "linux-gso")
OPTIONAL = ("sluice-bare",)  # not run unless named in --systems
HZ = os.sysconf("SC_CLK_TCK")
SWEEP: list[str] = []  # temporary paths in our processes' command lines (sweep() at the end)

# names and addresses (kept clear of the tests' and the demo's: sl-*, slu-*, 10.77.*)
NS_CLI, NS_RTR, NS_SRV = "slb-cli", "slb-rtr", "slb-srv"
HOST_IF, CLI_IF = "slb-h0", "slb-c0"            # root <-> client: the Sluice side
CLI_RIF, RTR_CIF = "slb-c1", "slb-r0"           # client <-> router
RTR_SIF, SRV_IF = "slb-r1", "slb-s0"            # router <-> server
STACK_IP, STACK_IP6, CLI_IP, CLI_IP6 = "10.88.0.1", "fd88::1", "10.88.0.2", "fd88::2"
CLI_RIP, RTR_CIP, RTR_SIP, SRV_IP = "10.88.1.2", "10.88.1.1", "10.88.2.1", "10.88.2.2"
HTTP_PORT, IPERF_PORT = 8080, 5201
FILE = "1k.bin"

FW_RULES = f"""default drop
allow proto icmp
allow proto icmpv6
allow proto tcp dport {HTTP_PORT}
allow proto tcp dport {IPERF_PORT}
"""

# the same policy for the kernel path: the firewall's fixed `ct state established,related accept`,
# then its rules in order; counters and conntrack accounting stand in for the monitor's flow records
NFT_RULES = f"""table inet slb {{
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related counter accept
    meta l4proto icmp counter accept
    meta l4proto ipv6-icmp counter accept
    tcp dport {HTTP_PORT} counter accept
    tcp dport {IPERF_PORT} counter accept
    counter
  }}
}}
"""

# sluice-bare: the same stack with no NF in its chains (what the firewall and monitor cost)
BARE_CONFIG = """sluiced: {{socket_dir: {sock}, pool_mbufs: 8192}}
ports:
  - {{name: p0, vdev: "net_af_packet0,iface={host_if}", chain: in}}
chains:
  - {{name: in, nfs: [stack]}}
  - {{name: out, nfs: [stack], exit: p0}}
nfs: []
stack:
  user: {{addresses: [{ip}/24, "{ip6}/64"], egress_chain: out}}
"""

SLUICE_CONFIG = """sluiced: {{socket_dir: {sock}, pool_mbufs: 8192}}
ports:
  - {{name: p0, vdev: "net_af_packet0,iface={host_if}", chain: in}}
chains:
  - {{name: in, nfs: [fw, mon, stack]}}
  - {{name: out, nfs: [stack, fw, mon], exit: p0}}
nfs:
  - {{name: fw, program: firewall, wakeup: adaptive, args: [--config, {rules}]}}
  - {{name: mon, program: monitor, wakeup: adaptive}}
stack:
  user: {{addresses: [{ip}/24, "{ip6}/64"], egress_chain: out}}
"""

NGINX_CONF = """daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp;
 fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
 server {{ listen {port}; listen [::]:{port}; root {d}/www; }} }}
"""


def log(msg: str) -> None:
    print(f"userstack: {msg}", flush=True)


def sh(*argv: str, check: bool = True, timeout: float = 30, input_: str | None = None) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input_)
    if check and r.returncode != 0:
        raise BenchError(f"{' '.join(argv)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-500:]}")
    return r.stdout


def nsx(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


# ---------------------------------------------------------------------------------------------
# CPU accounting


def _jiffies(pid: int) -> int:
    """utime + stime of every thread of pid (0 when it is gone)."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    f = st[st.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])


def _threads(pid: int) -> dict[str, int]:
    """utime + stime per thread name of pid (threads of one name summed)."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            st = Path(f"/proc/{pid}/task/{t}/stat").read_text()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        out[name] = out.get(name, 0) + int(f[11]) + int(f[12])
    return out


def _all_jiffies() -> dict[int, int]:
    """utime + stime of every process but ksoftirqd (its time is /proc/stat's softirq)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if Path(f"/proc/{d}/comm").read_text().startswith("ksoftirqd/"):
                    continue
            except OSError:
                continue
            j = _jiffies(int(d))
            if j:
                out[int(d)] = j
    return out


def _stat() -> list[int]:
    """/proc/stat's machine line: user nice system idle iowait irq softirq steal (jiffies)."""
    return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]


class CpuWindow:
    """CPU over a window, in cores (CPU seconds per second): the host's processes by name, the
    client, irq+softirq and the machine from /proc/stat, and processes of nobody's (foreign)."""

    def __init__(self, host: dict[str, int], client_pid_fn=None, threads_of: int | None = None):
        self.host = host                # name -> pid
        self.client_pid_fn = client_pid_fn
        self.threads_of = threads_of    # a pid whose threads are split out (sluiced: its worker)

    def __enter__(self):
        self.t0 = time.monotonic()
        self.s0 = _stat()
        self.all0 = _all_jiffies()
        self.h0 = {n: _jiffies(p) for n, p in self.host.items()}
        self.th0 = _threads(self.threads_of) if self.threads_of else {}
        return self

    def finish(self, client_s: float) -> dict:
        """Call right after the client exited, with its CPU seconds (rusage)."""
        wall = time.monotonic() - self.t0
        s1, all1 = _stat(), _all_jiffies()
        h = {n: (_jiffies(p) - self.h0[n]) / HZ / wall for n, p in self.host.items()}
        d = [b - a for a, b in zip(self.s0, s1)]
        busy = d[0] + d[1] + d[2] + d[5] + d[6]
        ours = set(self.host.values())
        # every process but ours and the client (which has exited: it is in neither snapshot's delta)
        foreign = sum(j - self.all0.get(p, 0) for p, j in all1.items() if p not in ours and j >= self.all0.get(p, 0))
        out = {
            "wall_s": round(wall, 3),
            "host_procs": h,
            "procs_cores": sum(h.values()),
            "irq_softirq_cores": (d[5] + d[6]) / HZ / wall,
            "machine_cores": busy / HZ / wall,
            "steal_cores": d[7] / HZ / wall,
            "user_cores": (d[0] + d[1]) / HZ / wall,
            "system_cores": d[2] / HZ / wall,
            "client_cores": client_s / wall,
            "foreign_cores": foreign / HZ / wall,
        }
        out["procs_softirq_cores"] = out["procs_cores"] + out["irq_softirq_cores"]
        if self.threads_of:
            th1 = _threads(self.threads_of)
            out["sluiced_threads"] = {n: (j - self.th0.get(n, 0)) / HZ / wall for n, j in th1.items()
                                      if j - self.th0.get(n, 0) > 0}
        return out

    def __exit__(self, *exc):
        return False


def run_client(argv: list[str], timeout: float) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, CPU seconds) of a client run to its end (or killed at timeout)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = [], []
    ts = [threading.Thread(target=lambda s, b: b.append(s.read()), args=(p.stdout, out), daemon=True),
          threading.Thread(target=lambda s, b: b.append(s.read()), args=(p.stderr, err), daemon=True)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + timeout
    status, ru = None, None
    while True:
        pid, st, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(st)
            p.returncode = status
            break
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            _, st, ru = os.wait4(p.pid, 0)
            p.returncode = status = -9
            break
        time.sleep(0.02)
    for t in ts:
        t.join(5)
    cpu = ru.ru_utime + ru.ru_stime if ru else 0.0
    if status == -9:
        err.append(f"\n[killed after {timeout:.0f} s: no answer]")
    return status, "".join(out), "".join(err), cpu


# ---------------------------------------------------------------------------------------------
# the namespaces


def _ns_exists(ns: str) -> bool:
    return ns in sh("ip", "netns", "list", check=False).split()


def topology_down() -> None:
    for ns in (NS_CLI, NS_RTR, NS_SRV):
        if _ns_exists(ns):
            sh("ip", "netns", "del", ns, check=False)
    if Path(f"/sys/class/net/{HOST_IF}").exists():
        sh("ip", "link", "del", HOST_IF, check=False)


def set_offloads(ns: str | None, dev: str, on: bool) -> None:
    v = "on" if on else "off"
    argv = ["ethtool", "-K", dev, "tx", v, "rx", v, "gso", v, "tso", v, "gro", v]
    sh(*(nsx(ns, *argv) if ns else argv))


PEER_LINKS = ((NS_CLI, CLI_RIF), (NS_RTR, RTR_CIF), (NS_RTR, RTR_SIF), (NS_SRV, SRV_IF))


def topology_up() -> None:
    """slb-cli <-> root (slb-h0, sluiced's port); slb-cli <-> slb-rtr <-> slb-srv (the kernel path)."""
    topology_down()
    for ns in (NS_CLI, NS_RTR, NS_SRV):
        sh("ip", "netns", "add", ns)
        sh(*nsx(ns, "ip", "link", "set", "lo", "up"))
    # Sluice side
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", CLI_IF, "netns", NS_CLI)
    sh("sysctl", "-qw", f"net.ipv6.conf.{HOST_IF}.disable_ipv6=1")  # the root end carries only sluiced's frames
    sh("ip", "link", "set", HOST_IF, "up")
    sh(*nsx(NS_CLI, "ip", "addr", "add", f"{CLI_IP}/24", "dev", CLI_IF))
    sh(*nsx(NS_CLI, "ip", "-6", "addr", "add", f"{CLI_IP6}/64", "dev", CLI_IF, "nodad"))
    sh(*nsx(NS_CLI, "ip", "link", "set", CLI_IF, "up"))
    set_offloads(None, HOST_IF, False)
    set_offloads(NS_CLI, CLI_IF, False)
    # kernel path
    sh("ip", "link", "add", CLI_RIF, "netns", NS_CLI, "type", "veth", "peer", "name", RTR_CIF, "netns", NS_RTR)
    sh("ip", "link", "add", RTR_SIF, "netns", NS_RTR, "type", "veth", "peer", "name", SRV_IF, "netns", NS_SRV)
    sh(*nsx(NS_CLI, "ip", "addr", "add", f"{CLI_RIP}/24", "dev", CLI_RIF))
    sh(*nsx(NS_RTR, "ip", "addr", "add", f"{RTR_CIP}/24", "dev", RTR_CIF))
    sh(*nsx(NS_RTR, "ip", "addr", "add", f"{RTR_SIP}/24", "dev", RTR_SIF))
    sh(*nsx(NS_SRV, "ip", "addr", "add", f"{SRV_IP}/24", "dev", SRV_IF))
    for ns, dev in PEER_LINKS:
        sh(*nsx(ns, "ip", "link", "set", dev, "up"))
    sh(*nsx(NS_CLI, "ip", "route", "add", f"{SRV_IP.rsplit('.', 1)[0]}.0/24", "via", RTR_CIP))
    sh(*nsx(NS_SRV, "ip", "route", "add", "default", "via", RTR_SIP))
    sh(*nsx(NS_RTR, "sysctl", "-qw", "net.ipv4.ip_forward=1"))  # this namespace's own setting
    sh(*nsx(NS_RTR, "nft", "-f", "-"), input_=NFT_RULES)
    # the monitor's flow records: conntrack's per-connection packet and byte counters (this netns)
    sh(*nsx(NS_RTR, "sysctl", "-qw", "net.netfilter.nf_conntrack_acct=1"), check=False)
    for ns, dev in PEER_LINKS:
        set_offloads(ns, dev, False)


def peer_offloads(on: bool) -> None:
    for ns, dev in PEER_LINKS:
        set_offloads(ns, dev, on)


# ---------------------------------------------------------------------------------------------
# the servers


class Servers:
    """nginx and iperf3 -s of one system, up for one round."""

    def __init__(self, system: str, work: Path, progress: Progress):
        self.system, self.work, self.progress = system, work, progress
        self.procs: list[subprocess.Popen] = []
        self.host: dict[str, int] = {}
        self.sock = None
        self.sluiced_pid = None
        self.up_ok = False
        self.notes: list[str] = []

    # -- sluice --
    def _sluice_up(self) -> None:
        d = Path(tempfile.mkdtemp(prefix="slb-", dir="/tmp"))
        os.chmod(d, 0o755)
        self.sdir = d
        SWEEP.append(str(d))
        self.sock = d / "s"
        (d / "fw.rules").write_text(FW_RULES)
        conf = BARE_CONFIG if self.system == "sluice-bare" else SLUICE_CONFIG
        (d / "sluice.yaml").write_text(conf.format(sock=self.sock, host_if=HOST_IF, rules=d / "fw.rules", ip=STACK_IP,
                                                   ip6=STACK_IP6))
        r = subprocess.run([SLUICE, "up", str(d / "sluice.yaml"), "-d", "--build-dir", str(BUILD)],
                           capture_output=True, text=True, timeout=120)
        self.up_ok = True  # something may be running even when it failed: sluice down in any case
        if r.returncode != 0:
            raise BenchError(f"sluice up: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}")
        st = json.loads((self.sock / "state.json").read_text())
        self.host = {"sluiced": st["sluiced"]["pid"], "supervisor": st["supervisor"]["pid"]}
        self.sluiced_pid = st["sluiced"]["pid"]
        for nf in st["nfs"]:
            self.host[nf["name"].split(".")[0]] = nf["pid"]

    def _run_argv(self) -> list[str]:
        return [SLUICE, "run", "--socket-dir", str(self.sock), "--stack", "user", "--build-dir", str(BUILD), "--"]

    def _sluice_down(self) -> None:
        if not self.up_ok:
            return
        r = subprocess.run([SLUICE, "down", "--socket-dir", str(self.sock)], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.notes.append(f"sluice down: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
        self.up_ok = False

    def stack_status(self) -> dict | None:
        try:
            return ctl(self.sock / "stack-ctl.sock", "status", timeout=5).get("user")
        except (BenchError, OSError) as e:
            self.notes.append(f"stack status: {e}")
            return None

    def sluiced_stats(self) -> dict | None:
        try:
            return ctl(self.sock / "ctl.sock", "stats", timeout=5)
        except (BenchError, OSError) as e:
            self.notes.append(f"sluiced stats: {e}")
            return None

    def diag(self) -> dict:
        """The user module's counters and every socket's state (stack-ctl), sluiced's drop counters."""
        out = {"stack": self.stack_status()}
        try:
            out["sockets"] = ctl(self.sock / "stack-ctl.sock", "sockets", timeout=5).get("sockets")
        except (BenchError, OSError) as e:
            out["sockets"] = f"{e}"
        out["sluiced"] = _brief_stats(self.sluiced_stats())
        return out

    def logs_tail(self, n: int = 15) -> str:
        if not self.sock:
            return ""
        out = []
        for f in sorted((self.sock / "logs").glob("*.log")) if (self.sock / "logs").exists() else []:
            lines = f.read_text(errors="replace").splitlines()[-n:]
            if lines:
                out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # -- both --
    @property
    def addr(self) -> str:
        return STACK_IP if self.system.startswith("sluice") else SRV_IP

    def up(self) -> None:
        w = self.work / self.system
        shutil.rmtree(w, ignore_errors=True)
        (w / "www").mkdir(parents=True)
        (w / "tmp").mkdir()
        os.chmod(w, 0o755)
        (w / "www" / FILE).write_bytes(os.urandom(1024))
        (w / "nginx.conf").write_text(NGINX_CONF.format(d=w, port=HTTP_PORT))
        if self.system.startswith("sluice"):
            self._sluice_up()
            pre = self._run_argv()
        else:
            peer_offloads(self.system == "linux-gso")
            pre = nsx(NS_SRV)
        self.nginx_log = open(w / "nginx.out", "w+")
        ng = subprocess.Popen([*pre, "nginx", "-c", str(w / "nginx.conf"), "-p", str(w)], stdout=self.nginx_log,
                              stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(ng)
        self.host["nginx"] = ng.pid  # sluice run and ip netns exec both exec the program
        self._wait_http(ng, w)
        ip = subprocess.Popen([*pre, "iperf3", "-s", "-p", str(IPERF_PORT), "--forceflush"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(ip)
        self.host["iperf3-s"] = ip.pid
        self.iperf = OutputReader(ip, f"iperf3 -s ({self.system})")
        self.iperf.wait_for("Server listening", timeout=20)

    def _wait_http(self, ng: subprocess.Popen, w: Path) -> None:
        deadline = time.monotonic() + 30
        url = f"http://{self.addr}:{HTTP_PORT}/{FILE}"
        last = ""
        while time.monotonic() < deadline:
            if ng.poll() is not None:
                self.nginx_log.seek(0)
                raise BenchError(f"nginx ({self.system}) exited with {ng.returncode}: {self.nginx_log.read()[-500:]}"
                                 f"{self.logs_tail()}")
            r = subprocess.run(nsx(NS_CLI, "curl", "-sf", "-m", "2", "-o", "/dev/null", "-w", "%{http_code}", url),
                               capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() == "200":
                return
            last = f"curl exit {r.returncode} {r.stdout.strip()} {r.stderr.strip()}"
            time.sleep(0.2)
        raise BenchError(f"nginx ({self.system}) did not answer {url} from {NS_CLI} within 30 s ({last})"
                         f"\n{self.logs_tail()}")

    def alive(self, test: str | None = None) -> str | None:
        """Why the server of `test` (wrk: nginx, iperf3: iperf3 -s; None: both) cannot serve, or None."""
        for name, p in zip(("nginx", "iperf3 -s"), self.procs):
            if test is not None and (name == "nginx") != (test == "wrk"):
                continue
            if p.poll() is not None:
                if name == "nginx":
                    self.nginx_log.seek(0)
                    said = self.nginx_log.read()
                else:
                    time.sleep(0.2)  # the reader thread takes the rest of its output
                    said = self.iperf.text()
                errs = "; ".join(ln.strip() for ln in said.splitlines() if "error" in ln)
                return (f"{name} ({self.system}) exited with {p.returncode}" + (f": {errs}" if errs else "")
                        + f"; its last output: {said[-600:]!r}")
        return None

    def down(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    self.notes.append(f"pid {p.pid} ignored SIGTERM for 5 s: killed")
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.procs = []
        if self.system.startswith("sluice"):
            self._sluice_down()
            if getattr(self, "sdir", None):
                shutil.rmtree(self.sdir, ignore_errors=True)
        if getattr(self, "nginx_log", None):
            self.nginx_log.close()


# ---------------------------------------------------------------------------------------------
# the measurements


def _ms(s: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", s.strip())
    if not m:
        raise ValueError(s)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def measure_wrk(srv: Servers, secs: float) -> dict:
    url = f"http://{srv.addr}:{HTTP_PORT}/{FILE}"
    # warm-up: connections open, caches and neighbours warm (not counted)
    run_client(nsx(NS_CLI, "wrk", "-t1", "-c32", "-d1s", url), 40)
    with CpuWindow(srv.host, threads_of=srv.sluiced_pid) as cw:
        rc, out, err, client_s = run_client(nsx(NS_CLI, "wrk", "-t1", "-c32", f"-d{secs:.0f}s", "--latency", url),
                                            secs + 60)
        cpu = cw.finish(client_s)
    r: dict = {"cpu": cpu}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    if rc != 0 or not m or "50" not in lat or "99" not in lat:
        raise BenchError(f"wrk ({srv.system}): exit {rc}: {out[-600:]!r} {err[-300:]!r}")
    r["rps"] = float(m.group(1))
    if r["rps"] <= 0:
        raise BenchError(f"wrk ({srv.system}): no request answered in {secs:.0f} s: {out[-400:]!r}")
    r["p50_ms"], r["p99_ms"] = _ms(lat["50"]), _ms(lat["99"])
    se = re.search(r"Socket errors: (.*)", out)
    n2 = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if se or n2:  # counted, and the run is not a figure: what wrk saw is kept
        r["error"] = f"wrk ({srv.system}): " + "; ".join(x.group(0) for x in (se, n2) if x)
    r["requests"] = int(re.search(r"(\d+) requests in", out).group(1)) if re.search(r"(\d+) requests in", out) else None
    for base in ("procs", "procs_softirq", "machine"):
        c = cpu[f"{base}_cores"]
        r[f"rps_per_core_{base}"] = r["rps"] / c if c > 0 else None
    return r


def measure_iperf3(srv: Servers, secs: float, reverse: bool) -> dict:
    argv = nsx(NS_CLI, "iperf3", "-c", srv.addr, "-p", str(IPERF_PORT), "-t", f"{secs:.0f}", "-J",
               "--connect-timeout", "5000", *(["-R"] if reverse else []))
    with CpuWindow(srv.host, threads_of=srv.sluiced_pid) as cw:
        rc, out, err, client_s = run_client(argv, secs + 20)
        cpu = cw.finish(client_s)
    try:
        j = json.loads(out)
    except json.JSONDecodeError:
        raise BenchError(f"iperf3{' -R' if reverse else ''} ({srv.system}): exit {rc}: {out[-400:]!r} {err[-300:]!r}")
    if j.get("error") or rc != 0:
        raise BenchError(f"iperf3{' -R' if reverse else ''} ({srv.system}): exit {rc}: {j.get('error')!r} "
                         f"{err[-200:]!r}")
    end = j["end"]
    gbps = end["sum_received"]["bits_per_second"] / 1e9
    r = {"gbps": gbps, "retransmits": end.get("sum_sent", {}).get("retransmits"), "cpu": cpu,
         "iperf_cpu": end.get("cpu_utilization_percent")}
    c = cpu["procs_softirq_cores"]
    r["gbps_per_core_procs_softirq"] = gbps / c if c > 0 else None
    return r


# ---------------------------------------------------------------------------------------------
# the run


def perf_profile(srv: Servers, secs: float, work: Path) -> dict:
    """One extra wrk window (not a figure) under `perf record -a -e cpu-clock` (a software clock: this
    VM has no hardware counters): where the machine's time went, by command and DSO, and by symbol."""
    data = work / f"perf-{srv.system}.data"
    url = f"http://{srv.addr}:{HTTP_PORT}/{FILE}"
    run_client(nsx(NS_CLI, "wrk", "-t1", "-c32", "-d1s", url), 40)
    rec = subprocess.Popen(["perf", "record", "-a", "-e", "cpu-clock", "-F", "999", "-o", str(data)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(0.5)
        rc, out, _, _ = run_client(nsx(NS_CLI, "wrk", "-t1", "-c32", f"-d{secs:.0f}s", url), secs + 30)
    finally:
        rec.send_signal(signal.SIGINT)
        try:
            rec.wait(30)
        except subprocess.TimeoutExpired:
            rec.kill()
            rec.wait()
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    res = {"rps_under_perf": float(m.group(1)) if m else None}
    for key, sort, limit in (("by_comm_dso", "comm,dso", "0.5"), ("by_symbol", "comm,dso,sym", "0.4")):
        r = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", sort, "--percent-limit", limit],
                           capture_output=True, text=True, timeout=120)
        res[key] = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")][:60]
    data.unlink(missing_ok=True)
    return res


def one_window(srv: Servers, t: str, rnd: int, secs: float, prog: Progress) -> dict:
    """One measurement window of test t; failures are recorded in the entry (`error`, and for Sluice
    the logs, the stack's counters and sockets, sluiced's stats right after)."""
    s = srv.system
    entry = {"round": rnd + 1, "system": s, "test": t}
    try:
        dead = srv.alive(t)
        if dead:
            raise BenchError(dead)
        if t == "wrk":
            entry.update(measure_wrk(srv, secs))
        else:
            entry.update(measure_iperf3(srv, secs, reverse=(t == "iperf3-R")))
    except (BenchError, subprocess.TimeoutExpired) as e:
        entry["error"] = str(e)
        if s.startswith("sluice"):  # what the stack and sluiced showed right after
            entry["logs"] = srv.logs_tail()
            entry["diag"] = srv.diag()
    c = entry.get("cpu") or {}
    if t == "wrk" and "rps" in entry:
        txt = (f"{entry['rps']:,.0f} req/s p50 {entry['p50_ms']:.2f} p99 {entry['p99_ms']:.2f} ms, "
               f"host {c['procs_cores']:.2f} + softirq {c['irq_softirq_cores']:.2f} cores, machine "
               f"{c['machine_cores']:.2f}, wrk {c['client_cores']:.2f}, foreign {c['foreign_cores']:.2f}")
    elif "gbps" in entry:
        txt = (f"{entry['gbps']:.3f} Gbit/s, retr {entry['retransmits']}, host+softirq "
               f"{c['procs_softirq_cores']:.2f} cores, machine {c['machine_cores']:.2f}, foreign "
               f"{c['foreign_cores']:.2f}")
    else:
        txt = ""
    prog.step(f"round {rnd + 1} {s:<9} {t:<8} {txt}"
              + (f"  ERROR: {entry['error'][:300]}" if entry.get("error") else ""))
    if c:
        prog.note("host cores: " + ", ".join(f"{n} {v:.2f}" for n, v in c["host_procs"].items())
                  + ("; sluiced threads: " + ", ".join(f"{n} {v:.2f}" for n, v in c["sluiced_threads"].items())
                     if c.get("sluiced_threads") else ""))
    return entry


def other_activity(exclude: set[int] = frozenset()) -> list[str]:
    """Others' data planes and servers that would share the cores (not pids in `exclude`): any sluiced
    (its worker polls), and the rest of these programs, and pytest, when they used CPU over half a
    second (an idle one costs nothing)."""
    names = ("sluiced", "sluice-stackd", "dpdk-testpmd", "ovs-vswitchd", "nginx", "iperf3", "wrk", "redis-server",
             "pytest")
    cand = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid() or int(d) in exclude:
            continue
        try:
            comm = Path(f"/proc/{d}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("python"):
            try:
                if b"pytest" in Path(f"/proc/{d}/cmdline").read_bytes():
                    comm = "pytest"
            except OSError:
                continue
        if comm in names or comm.startswith("sluice-nf"):
            cand[int(d)] = (comm, _jiffies(int(d)))
    time.sleep(0.5)
    return [f"{c} ({p})" for p, (c, j) in cand.items() if c == "sluiced" or _jiffies(p) - j > 0]


QUIET_BUDGET = [float("inf")]  # seconds the run may still spend waiting for quiet (--quiet-budget)


def wait_quiet(limit: float, exclude: set[int] = frozenset()) -> list[str]:
    """Until other_activity() is empty, at most `limit` s (and what is left of the run's budget);
    returns what is still busy."""
    limit = max(0.0, min(limit, QUIET_BUDGET[0]))
    t0 = time.monotonic()
    deadline = t0 + limit
    busy = other_activity(exclude)
    if busy:
        log(f"waiting up to {limit:.0f} s for processes of others to end: {', '.join(busy)}")
    while busy and time.monotonic() < deadline:
        time.sleep(2)
        busy = other_activity(exclude)
    QUIET_BUDGET[0] -= time.monotonic() - t0
    if busy:
        log(f"warning: measuring beside {', '.join(busy)}: their CPU shows as foreign_cores")
    return busy


def build_identity() -> dict:
    """What was measured: the commit, the working tree's changes to the code, the binaries' hashes."""
    import hashlib

    def git(*argv):
        return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True).stdout

    snap = BUILD.parent / "SNAPSHOT"  # a build of an exported tree names its commit there
    if BUILD.parent.resolve() != REPO.resolve() and snap.exists():
        src = {"source": f"{BUILD.parent}: {snap.read_text().strip()}"}
    else:
        src = {"source": str(BUILD.parent)}
    paths = ["src", "include", "python", "nfs"]
    changed = [ln[3:] for ln in git("status", "--porcelain", "--", *paths).splitlines()]
    h = hashlib.sha256(git("diff", "HEAD", "--", *paths).encode())
    for f in sorted(changed):
        fp = REPO / f
        if fp.is_file() and not git("ls-files", "--", f).strip():  # untracked: its content
            h.update(fp.read_bytes())
    bins = {}
    for b in ("src/stack/sluice-stackd", "src/sock/libsluice-sock.so", "src/manager/sluiced",
              "nfs/sluice-nf-firewall", "nfs/sluice-nf-monitor"):
        fp = BUILD / b
        if fp.exists():
            bins[b] = {"sha256": hashlib.sha256(fp.read_bytes()).hexdigest()[:16],
                       "mtime": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(fp.stat().st_mtime))}
    return {**src, "build_dir": str(BUILD), "repo_commit": git("rev-parse", "HEAD").strip(),
            "repo_uncommitted": changed, "repo_uncommitted_sha256": h.hexdigest()[:16], "binaries": bins}


def sweep(marks: list[str]) -> list[str]:
    """Kill (by pid) any process whose command line names one of our temporary paths: nothing of this
    run outlives it, whatever failed. Returns what it had to kill."""
    killed = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in marks):
            try:
                os.kill(int(d), signal.SIGKILL)
                killed.append(f"{cmd.strip()[:120]} ({d})")
            except ProcessLookupError:
                pass
    return killed


def summary(xs: list[float]) -> dict | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


METRICS = {  # name -> (test, how to get it from a measurement)
    "rps": ("wrk", lambda r: r["rps"]),
    "p50_ms": ("wrk", lambda r: r["p50_ms"]),
    "p99_ms": ("wrk", lambda r: r["p99_ms"]),
    "rps_per_core_procs": ("wrk", lambda r: r["rps_per_core_procs"]),
    "rps_per_core_procs_softirq": ("wrk", lambda r: r["rps_per_core_procs_softirq"]),
    "rps_per_core_machine": ("wrk", lambda r: r["rps_per_core_machine"]),
    "wrk_procs_cores": ("wrk", lambda r: r["cpu"]["procs_cores"]),
    "wrk_irq_softirq_cores": ("wrk", lambda r: r["cpu"]["irq_softirq_cores"]),
    "wrk_procs_softirq_cores": ("wrk", lambda r: r["cpu"]["procs_softirq_cores"]),
    "wrk_machine_cores": ("wrk", lambda r: r["cpu"]["machine_cores"]),
    "wrk_client_cores": ("wrk", lambda r: r["cpu"]["client_cores"]),
    "wrk_foreign_cores": ("wrk", lambda r: r["cpu"]["foreign_cores"]),
    "iperf3_gbps": ("iperf3", lambda r: r["gbps"]),
    "iperf3_retransmits": ("iperf3", lambda r: r["retransmits"]),
    "iperf3_procs_softirq_cores": ("iperf3", lambda r: r["cpu"]["procs_softirq_cores"]),
    "iperf3_machine_cores": ("iperf3", lambda r: r["cpu"]["machine_cores"]),
    "iperf3_R_gbps": ("iperf3-R", lambda r: r["gbps"]),
    "iperf3_R_retransmits": ("iperf3-R", lambda r: r["retransmits"]),
    "iperf3_R_procs_softirq_cores": ("iperf3-R", lambda r: r["cpu"]["procs_softirq_cores"]),
    "iperf3_R_machine_cores": ("iperf3-R", lambda r: r["cpu"]["machine_cores"]),
}
TESTS = ("wrk", "iperf3", "iperf3-R")
# the tests' order in round k: every order in turn, so each test is first, second and last equally often
# and each iperf3 direction comes before the other as often (over 6 rounds)
ORDERS = (("wrk", "iperf3", "iperf3-R"), ("iperf3-R", "wrk", "iperf3"), ("iperf3", "iperf3-R", "wrk"),
          ("wrk", "iperf3-R", "iperf3"), ("iperf3", "wrk", "iperf3-R"), ("iperf3-R", "iperf3", "wrk"))


def plot(data: dict, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("userstack: matplotlib not importable, no plot", file=sys.stderr)
        return False
    rows = {(r["metric"], r["system"]): r for r in data["results"]}
    systems = [s for s in data["systems"]]
    colours = {"sluice": "#1f77b4", "linux": "#d62728", "linux-gso": "#ff9896", "sluice-bare": "#aec7e8"}
    panels = [("requests/s (wrk, 1 KiB)", ["rps"], [""]),
              ("requests/s per core", ["rps_per_core_procs", "rps_per_core_procs_softirq", "rps_per_core_machine"],
               ["processes", "+ irq/softirq\n(upper bound)", "whole\nmachine"]),
              ("wrk latency (ms)", ["p50_ms", "p99_ms"], ["p50", "p99"]),
              ("iperf3, one stream (Gbit/s)", ["iperf3_gbps", "iperf3_R_gbps"],
               ["client→server", "server→client (-R)"])]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    for ax, (title, metrics, labels) in zip(axes, panels):
        w = 0.8 / max(1, len(systems))
        for i, s in enumerate(systems):
            xs, ys, lo, hi = [], [], [], []
            for k, m in enumerate(metrics):
                r = rows.get((m, s))
                if not r:
                    continue
                xs.append(k + (i - (len(systems) - 1) / 2) * w)
                ys.append(r["median"])
                lo.append(r["median"] - r["min"])
                hi.append(r["max"] - r["median"])
            ax.bar(xs, ys, w, yerr=[lo, hi], capsize=3, color=colours.get(s), label=SYSTEM_LABELS.get(s, s))
        ax.set_xticks(range(len(metrics)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    h, lab = axes[0].get_legend_handles_labels()
    m = data.get("machine", {})
    fig.suptitle(f"User stack module vs the kernel path, {m.get('cpu_model', '?')}, {m.get('cpus_online', '?')} cores, "
                 f"median of {data.get('runs')} rounds (bars: min–max)", fontsize=9)
    fig.legend(h, lab, loc="lower center", ncol=len(systems), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


SYSTEM_LABELS = {"sluice": "sluice run --stack user (fw → mon chain)", "linux": "Linux, router netns + nftables",
                 "linux-gso": "Linux, same, veth offloads on", "sluice-bare": "sluice run --stack user, no NF"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6, help="rounds (default 6: every order of the three tests once)")
    ap.add_argument("--secs", type=float, default=5, help="seconds per wrk and iperf3 window (default 5)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"subset of {','.join(SYSTEMS + OPTIONAL)} "
                    "(default: all but sluice-bare)")
    ap.add_argument("--quick", action="store_true", help="1 round of 1 s windows, nothing written: checks that it runs")
    ap.add_argument("--results", type=Path, default=RESULTS, help="results directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not write results or regenerate BENCHMARKS.md")
    ap.add_argument("--perf", action="store_true", help="after the rounds, one wrk window per system under "
                    "`perf record -a` (not a figure): the profile goes into the JSON")
    ap.add_argument("--wait-quiet", type=float, default=60, help="before each window, seconds to wait at most for "
                    "others' data planes, servers and tests to go quiet (60)")
    ap.add_argument("--quiet-budget", type=float, default=180, help="seconds the whole run may spend waiting "
                    "for quiet (default 180)")
    ap.add_argument("--foreign-max", type=float, default=0.15, help="a window in which processes of no system here "
                    "took more cores than this is not a figure (default 0.15)")
    ap.add_argument("--retries", type=int, default=1, help="times such a window is measured again (default 1)")
    a = ap.parse_args()
    systems = [s for s in a.systems.split(",") if s]
    if any(s not in SYSTEMS + OPTIONAL for s in systems):
        raise BenchError(f"unknown system in {a.systems!r} (known: {', '.join(SYSTEMS + OPTIONAL)})")
    if os.geteuid() != 0:
        raise BenchError("needs root (namespaces, veths, sluiced's af_packet port)")
    for tool in ("nginx", "wrk", "iperf3", "nft", "ethtool", "curl"):
        if not shutil.which(tool):
            raise BenchError(f"{tool} not found (make deps)")
    if not Path(SLUICE).exists():
        raise BenchError(f"{SLUICE} missing (make venv)")
    if a.quick:
        a.runs, a.secs, a.wait_quiet, a.retries = 1, 1, 0, 0
    QUIET_BUDGET[0] = a.quiet_budget
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    machine = machine_info()
    machine["loadavg"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    build = build_identity()
    others = wait_quiet(a.wait_quiet)
    work = Path(tempfile.mkdtemp(prefix="slb-work-", dir="/tmp"))
    os.chmod(work, 0o755)
    raw: list[dict] = []
    problems: list[str] = []
    stack_counters: list[dict] = []
    profiles: dict = {}
    log(f"{a.runs} round(s) of {', '.join(systems)}: wrk and iperf3 both ways, {a.secs:.0f} s windows")
    prog = Progress(a.runs * len(systems) * len(TESTS))  # (a window measured again adds a step)
    t_start = time.monotonic()
    try:
        topology_up()
        for rnd in range(a.runs):
            order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]
            for s in order:
                srv = Servers(s, work, prog)
                try:
                    try:
                        srv.up()
                    except (BenchError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
                        msg = f"round {rnd + 1} {s}: setting up: {e}"
                        problems.append(msg)
                        log(msg)
                        for t in TESTS:
                            raw.append({"round": rnd + 1, "system": s, "test": t, "error": str(e)})
                            prog.step(f"round {rnd + 1} {s:<9} {t:<8} not run (set-up failed)")
                        continue
                    for t in ORDERS[rnd % len(ORDERS)]:
                        for attempt in range(1 + a.retries):
                            gate = wait_quiet(a.wait_quiet, set(srv.host.values()))
                            entry = one_window(srv, t, rnd, a.secs, prog)
                            entry["attempt"] = attempt + 1
                            if gate:
                                entry["busy_before"] = gate
                            raw.append(entry)
                            if entry.get("error"):
                                problems.append(f"round {rnd + 1} {s} {t}: {entry['error']}")
                                break
                            fc = entry["cpu"]["foreign_cores"]
                            if fc <= a.foreign_max:
                                break
                            entry["noisy"] = True
                            prog.note(f"others took {fc:.2f} cores (> {a.foreign_max}): not a figure"
                                      + ("; once more" if attempt < a.retries else ""))
                    if s.startswith("sluice"):
                        stack_counters.append({"round": rnd + 1, "system": s, "stack": srv.stack_status(),
                                               "sluiced": _brief_stats(srv.sluiced_stats())})
                finally:
                    srv.down()
                    problems += [f"round {rnd + 1} {s}: {n}" for n in srv.notes]
        if a.perf:
            for s in [x for x in systems if x in ("sluice", "linux")]:
                srv = Servers(s, work, prog)
                try:
                    srv.up()
                    log(f"perf: one more wrk window of {s} under perf record -a -e cpu-clock")
                    profiles[s] = perf_profile(srv, a.secs, work)
                    for ln in profiles[s]["by_comm_dso"][:12]:
                        prog.note(ln)
                except (BenchError, subprocess.TimeoutExpired, OSError) as e:
                    problems.append(f"perf {s}: {e}")
                finally:
                    srv.down()
    finally:
        topology_down()
        left = sweep([str(work), *SWEEP])
        if left:
            problems.append("left running after the round's clean-up, killed: " + "; ".join(left))
            log(problems[-1])
        shutil.rmtree(work, ignore_errors=True)
        for d in SWEEP:
            shutil.rmtree(d, ignore_errors=True)
    elapsed = time.monotonic() - t_start

    rows = []
    for metric, (test, get) in METRICS.items():
        for s in systems:
            vals = []
            for e in raw:
                if e["system"] == s and e["test"] == test and not e.get("error") and not e.get("noisy"):
                    try:
                        vals.append(get(e))
                    except (KeyError, TypeError):
                        pass
            sm = summary(vals)
            if sm:
                rows.append({"scenario": SCENARIO, "metric": metric, "system": s, **sm})
    # where the host's CPU went, per process (and sluiced's threads: rte-worker-N is the polling worker)
    for test in TESTS:
        pre = test.replace("-", "_")
        for s in systems:
            ok = [e for e in raw if e["system"] == s and e["test"] == test and not e.get("error") and not e.get("noisy")
                  and e.get("cpu")]
            names = dict.fromkeys(n for e in ok for n in e["cpu"]["host_procs"])
            for n in names:
                sm = summary([e["cpu"]["host_procs"].get(n, 0.0) for e in ok])
                if sm:
                    rows.append({"scenario": SCENARIO, "metric": f"{pre}_cpu_{n}", "system": s, **sm})
            tnames = dict.fromkeys(n for e in ok for n in (e["cpu"].get("sluiced_threads") or {}))
            for n in tnames:
                sm = summary([e["cpu"]["sluiced_threads"].get(n, 0.0) for e in ok])
                if sm:
                    rows.append({"scenario": SCENARIO, "metric": f"{pre}_cpu_thread_{n}", "system": s, **sm})
    print(f"\n{'metric':<30} " + " ".join(f"{s:>28}" for s in systems))
    for metric in METRICS:
        cells = []
        for s in systems:
            r = next((r for r in rows if r["metric"] == metric and r["system"] == s), None)
            cells.append(f"{r['median']:>10.4g} [{r['min']:.3g}-{r['max']:.3g}]" if r else "-")
        print(f"{metric:<30} " + " ".join(f"{c:>28}" for c in cells))
    if problems:
        print("\nproblems seen:")
        for p in problems:
            print(f"  {p[:2000]}")
    print(f"\n({elapsed:.0f} s)")
    if a.quick or a.no_report:
        return 1 if any(e.get("error") for e in raw) and a.quick else 0
    a.results.mkdir(parents=True, exist_ok=True)
    out = a.results / f"{SCENARIO}-{stamp}.json"
    data = {"scenario": SCENARIO, "started": started, "machine": machine, "runs": a.runs, "systems": systems,
            "config": {"runs": a.runs, "secs": a.secs, "duration_s": a.secs, "quick": a.quick, "file_bytes": 1024,
                       "wrk": "-t1 -c32 --latency (1 s warm-up)", "iperf3": "one TCP stream, IPv4, -t secs, and -R",
                       "sluice_config": SLUICE_CONFIG.format(sock="DIR/s", host_if=HOST_IF, rules="DIR/fw.rules",
                                                             ip=STACK_IP, ip6=STACK_IP6),
                       "fw_rules": FW_RULES, "nft_rules": NFT_RULES, "others_at_start": others,
                       "foreign_max": a.foreign_max, "retries": a.retries, "orders": ORDERS,
                       "elapsed_s": round(elapsed)},
            "build": build, "results": rows, "raw": raw, "profiles": profiles, "stack_counters": stack_counters,
            "problems": problems}
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"userstack.py: wrote {out}")
    png = a.results / f"{SCENARIO}-{stamp}.png"
    if plot(data, png):
        print(f"userstack.py: wrote {png}")
    if a.results.resolve() == RESULTS.resolve():
        subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "gen_report.py")], check=False)
    else:
        log(f"BENCHMARKS.md not regenerated: results went to {a.results}, not {RESULTS}")
    return 0


def _brief_stats(st: dict | None) -> dict | None:
    """sluiced's stats, reduced to drop counters and the ports' and NFs' packet counts."""
    if not st:
        return None
    keep = {}
    for k, v in st.items():
        if k in ("ok",):
            continue
        keep[k] = v
    s = json.dumps(keep)
    return keep if len(s) < 20000 else {"truncated": s[:20000]}


def _terminated(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every finally: nothing is left behind


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGHUP, _terminated)
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"userstack: interrupted ({e or 'Ctrl-C'}); namespaces, veths and processes removed", file=sys.stderr)
        sys.exit(130)
