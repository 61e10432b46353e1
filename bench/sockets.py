#!/usr/bin/env python3
"""The socket service (issue 18, docs/sockets.md) against kernel loopback TCP: unmodified programs
plain, under `sluice run --stack kernel` and under `--stack shm`, alternating within each round.

    sudo .venv/bin/python bench/sockets.py [--runs 3] [--tests redis,nginx,iperf3,pingpong,fairness] [--quick]

Per system (loopback = no shim; kernel and shm = client and server both under the shim; shm-poll =
shm from a second sluice-stackd started with --poll-us 50, which polls 50 us after activity; shm and
shm-poll connections are direct (docs/sockets.md "Direct connections"); shm-engine = shm-poll with
the engine kept on the data path, from a third sluice-stackd with --no-direct):
  redis     redis-benchmark SET and GET, 50 clients, -P 1 and -P 16: requests/s; CPU seconds per
            request of server + client (+ sluice-stackd) in the -P 1 runs; redis-server's CPU and
            user CPU per request in the -P 16 runs (the bound of one server thread)
  nginx     nginx (1 worker) + wrk (1 thread, 32 connections): requests/s of a 1 KiB file
  iperf3    one TCP stream: Gbit/s
  pingpong  64 B TCP ping-pong (bench/pingpong.c): p50/p99 round trip, us; placed by the scheduler,
            and with client and server pinned to CPU 0 (`1core`; sluice-stackd unpinned)
  fairness  three iperf3 clients under `--stack kernel` with --rate 1G, 500M and none, to three
            plain servers, 1 s intervals (NetKernel's figure 21)
Results: bench/results/<stamp>-sockets.json (+ -sockets-fairness.png); a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, BenchError, machine_info  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
SYSTEMS = ("loopback", "kernel", "shm", "shm-poll", "shm-engine")
TESTS = ("redis", "nginx", "iperf3", "pingpong", "fairness")
POLL_US = 50  # shm-poll: sluice-stackd --poll-us 50 (NetKernel's interrupt-driven polling)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROBE = ("import socket,sys,time\nfor _ in range(200):\n    s=socket.socket()\n"
         "    if s.connect_ex(('127.0.0.1',int(sys.argv[1])))==0: sys.exit(0)\n    s.close(); time.sleep(0.05)\nsys.exit(1)")


def wait_port(port: int, proc: subprocess.Popen, what: str, env: dict | None = None) -> None:
    """Until something listens on port: probed from a process of the server's own stack (an shm
    listener has no kernel socket, so only a shim client sees it)."""
    probe = subprocess.Popen([sys.executable, "-c", PROBE, str(port)], env=env)
    while probe.poll() is None:
        if proc.poll() is not None:
            probe.kill()
            probe.wait()
            raise BenchError(f"{what} exited with {proc.returncode} before listening on {port}")
        time.sleep(0.05)
    if probe.returncode != 0:
        raise BenchError(f"{what} did not listen on {port} within 10 s")


def user_s(pid: int) -> float:
    """utime of a process, seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return int(f[11]) / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process (and its waited-for children), seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


class Stack:
    """sluice-stackd in a temp socket dir, and the environment that puts a program under the shim."""

    def __init__(self, poll_us: int = 0, direct: bool = True):
        self.dir = tempfile.mkdtemp(prefix="sl-bench-", dir="/tmp")
        os.chmod(self.dir, 0o755)  # nginx's workers run as nobody and connect to stack.sock too
        binary = BUILD / "src" / "stack" / "sluice-stackd"
        self.lib = BUILD / "src" / "sock" / "libsluice-sock.so"
        if not binary.exists() or not self.lib.exists():
            raise BenchError(f"{binary} or {self.lib} is not built (make build)")
        self.proc = subprocess.Popen([str(binary), "--socket-dir", self.dir, "--poll-us", str(poll_us),
                                      *([] if direct else ["--no-direct"])],
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        if "ready" not in line:
            raise BenchError(f"sluice-stackd did not start: {line.strip()}")

    def env(self, system: str, rate_bps: int = 0) -> dict:
        env = dict(os.environ)
        if system == "shm-poll":  # the same module, from the sluice-stackd that polls (--poll-us)
            return self.polling.env("shm", rate_bps)
        if system == "shm-engine":  # and from the one that polls with the engine on the data path
            return self.engine_path.env("shm", rate_bps)
        if system != "loopback":
            env.update(LD_PRELOAD=str(self.lib), SLUICE_STACK=system, SLUICE_SOCKET_DIR=self.dir)
            if rate_bps:
                env["SLUICE_RATE"] = str(rate_bps // 8)
        return env

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_redis(st: Stack, system: str, n: int) -> dict:
    port = free_port()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--protected-mode", "no"], env=st.env(system),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {}
    try:
        wait_port(port, srv, "redis-server", st.env(system))
        for pipeline in (1, 16):
            engine = {"shm-poll": st.polling, "shm-engine": st.engine_path}.get(system, st).proc.pid
            c0, s0, k0, u0 = time.time(), cpu_s(srv.pid), cpu_s(engine), user_s(srv.pid)
            r0 = os.times()
            res = subprocess.run(["redis-benchmark", "-p", str(port), "-q", "-t", "set,get", "-c", "50",
                                  "-n", str(n * pipeline), "-P", str(pipeline)], env=st.env(system),
                                 capture_output=True, text=True, timeout=300)
            r1 = os.times()
            client = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
            server, stackd = cpu_s(srv.pid) - s0, (cpu_s(engine) - k0 if system != "loopback" else 0.0)
            server_user = user_s(srv.pid) - u0
            found = dict(re.findall(r"^(SET|GET): ([\d.]+) requests per second", res.stdout.replace("\r", "\n"), re.M))
            if len(found) != 2:
                raise BenchError(f"redis-benchmark ({system}): no SET/GET figures in {res.stdout[-300:]!r} "
                                 f"{res.stderr[-300:]!r}")
            for k, v in found.items():
                out[f"redis_{k.lower()}_p{pipeline}"] = float(v)
            if pipeline == 1:
                reqs = 2 * n
                out["redis_cpu_us_per_req"] = (client + server + stackd) / reqs * 1e6
                out["redis_wall_s"] = time.time() - c0
            else:  # what one redis-server thread costs per pipelined request: its own code vs. the calls
                reqs = 2 * n * pipeline
                out["redis_p16_server_cpu_us"] = server / reqs * 1e6
                out["redis_p16_server_user_us"] = server_user / reqs * 1e6
    finally:
        stop(srv)
    return out


NGINX_CONF = """daemon off; master_process on; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
 uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp; keepalive_requests 1000000;
 server {{ listen 127.0.0.1:{port}; root {d}/www; }} }}
"""


def run_nginx(st: Stack, system: str, secs: float) -> dict:
    d = tempfile.mkdtemp(prefix="sl-nginx-")
    os.chmod(d, 0o755)  # nginx workers run as nobody
    port = free_port()
    os.makedirs(f"{d}/www")
    os.makedirs(f"{d}/tmp")
    Path(f"{d}/www/1k.bin").write_bytes(os.urandom(1024))
    Path(f"{d}/nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
    srv = subprocess.Popen(["nginx", "-c", f"{d}/nginx.conf", "-p", d], env=st.env(system),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_port(port, srv, "nginx", st.env(system))
        res = subprocess.run(["wrk", "-t1", "-c32", f"-d{secs:.0f}s", f"http://127.0.0.1:{port}/1k.bin"],
                             env=st.env(system), capture_output=True, text=True, timeout=secs + 60)
        m = re.search(r"Requests/sec:\s+([\d.]+)", res.stdout)
        if not m or "Socket errors" in res.stdout or "Non-2xx" in res.stdout:
            raise BenchError(f"wrk ({system}): {res.stdout[-400:]!r} {res.stderr[-200:]!r}")
        return {"nginx_rps": float(m.group(1))}
    finally:
        stop(srv)
        shutil.rmtree(d, ignore_errors=True)


def iperf3_server(st: Stack, system: str, port: int) -> subprocess.Popen:
    # its own "Server listening" line, not a probe: a probe connection would be taken for a test
    p = subprocess.Popen(["iperf3", "-s", "-p", str(port), "--forceflush"], env=st.env(system),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise BenchError(f"iperf3 -s ({system}) exited with {p.wait()}")
        if "Server listening" in line:
            threading.Thread(target=lambda: p.stdout.read(), daemon=True).start()  # keep its pipe flowing
            return p
    raise BenchError(f"iperf3 -s ({system}) did not say it listens within 10 s")


def run_iperf3(st: Stack, system: str, secs: float) -> dict:
    port = free_port()
    srv = iperf3_server(st, system, port)
    try:
        res = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", f"{secs:.0f}", "-J"],
                             env=st.env(system), capture_output=True, text=True, timeout=secs + 60)
        j = json.loads(res.stdout)
        return {"iperf3_gbps": j["end"]["sum_received"]["bits_per_second"] / 1e9}
    finally:
        stop(srv)


def _pingpong(st: Stack, system: str, rounds: int, pin: list[str]) -> dict:
    pp = BUILD / "bench" / "sluice-bench-pingpong"
    port = free_port()
    srv = subprocess.Popen([*pin, str(pp), "server", str(port)], env=st.env(system), stdout=subprocess.PIPE,
                           text=True)
    try:
        srv.stdout.readline()
        res = subprocess.run([*pin, str(pp), "client", str(port), str(rounds)], env=st.env(system),
                             capture_output=True, text=True, timeout=300)
        return json.loads(res.stdout)
    finally:
        stop(srv)


def run_pingpong(st: Stack, system: str, rounds: int) -> dict:
    """Where the scheduler puts client and server, then both pinned to CPU 0: on this VM a wake-up
    across vCPUs costs ~20 us, so loopback's round trip is ~55 us on two cores and ~11 us on one."""
    j = _pingpong(st, system, rounds, [])
    one = _pingpong(st, system, rounds, ["taskset", "-c", "0"])
    return {"pingpong_p50_us": j["p50_us"], "pingpong_p99_us": j["p99_us"],
            "pingpong_1core_p50_us": one["p50_us"], "pingpong_1core_p99_us": one["p99_us"]}


def run_fairness(st: Stack, secs: int) -> dict:
    """Three apps share loopback through the kernel module: token buckets of 1 and 0.5 Gbit/s and none."""
    apps = [("1G", 1_000_000_000), ("500M", 500_000_000), ("unlimited", 0)]
    servers, clients = [], []
    try:
        for _ in apps:
            port = free_port()
            servers.append((port, iperf3_server(st, "loopback", port)))
        for (label, rate), (port, _) in zip(apps, servers):
            clients.append((label, subprocess.Popen(
                ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-i", "1", "-J"],
                env=st.env("kernel", rate), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        out = {}
        for label, c in clients:
            so, _ = c.communicate(timeout=secs + 60)
            j = json.loads(so)
            out[label] = [round(iv["sum"]["bits_per_second"] / 1e9, 4) for iv in j["intervals"]]
        return out
    finally:
        for _, c in clients:
            stop(c)
        for _, s in servers:
            stop(s)


def plot_fairness(fair: dict, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, series in fair.items():
        ax.plot(range(1, len(series) + 1), series, marker="o", label=f"--rate {label}")
    ax.set_xlabel("second")
    ax.set_ylabel("Gbit/s")
    ax.set_title("Three apps through sluice-stackd (kernel module), token buckets")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tests", default=",".join(TESTS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--quick", action="store_true", help="1 round, tiny runs: checks that it runs")
    ap.add_argument("--no-report", action="store_true", help="do not write a results file")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    a = ap.parse_args()
    tests = [t for t in a.tests.split(",") if t]
    systems = [s for s in a.systems.split(",") if s]
    bad = [t for t in tests if t not in TESTS] + [s for s in systems if s not in SYSTEMS]
    if bad:
        raise BenchError(f"unknown test or system: {', '.join(bad)} (tests: {', '.join(TESTS)}; "
                         f"systems: {', '.join(SYSTEMS)})")
    # quick: 5000 requests, not 500 -- redis-benchmark times in whole milliseconds, and 500 GETs over the
    # shm stack took less than one: "inf requests per second" (seen in CI, 2026-11-28)
    n, secs, rounds, fair_s = (100000, 4, 20000, 8) if not a.quick else (5000, 1, 500, 2)
    if a.quick:
        a.runs = 1
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    st = Stack()
    st.polling = Stack(POLL_US)
    st.engine_path = Stack(POLL_US, direct=False)
    raw: dict = {}
    fair = None
    try:
        steps = [(t, s) for t in tests if t != "fairness" for s in systems]
        total = a.runs * len(steps)
        done = 0
        for rnd in range(a.runs):
            for t, s in steps:
                fn = {"redis": lambda: run_redis(st, s, n), "nginx": lambda: run_nginx(st, s, secs),
                      "iperf3": lambda: run_iperf3(st, s, secs), "pingpong": lambda: run_pingpong(st, s, rounds)}[t]
                r = fn()
                done += 1
                for k, v in r.items():
                    raw.setdefault((k, s), []).append(v)
                print(f"[{done}/{total}] round {rnd + 1} {t:<8} {s:<8} "
                      + "  ".join(f"{k} {v:.4g}" for k, v in r.items()), flush=True)
        if "fairness" in tests:
            print(f"fairness: three iperf3 clients for {fair_s} s ...", flush=True)
            fair = run_fairness(st, fair_s)
            for label, series in fair.items():
                print(f"  --rate {label:<9} " + " ".join(f"{x:.2f}" for x in series) + " Gbit/s", flush=True)
    finally:
        st.close()
        st.polling.close()
        st.engine_path.close()
    rows = [{"scenario": "sockets", "metric": k, "system": s, "median": statistics.median(v), "min": min(v),
             "max": max(v), "runs": v} for (k, s), v in raw.items()]
    print(f"\n{'metric':<24} " + " ".join(f"{s:>22}" for s in systems))
    for k in dict.fromkeys(r["metric"] for r in rows):
        cells = []
        for s in systems:
            r = next((r for r in rows if r["metric"] == k and r["system"] == s), None)
            cells.append(f"{r['median']:>10.4g} [{r['min']:.3g}-{r['max']:.3g}]" if r else "-")
        print(f"{k:<24} " + " ".join(f"{c:>22}" for c in cells))
    if not a.quick and not a.no_report:
        a.results.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = a.results / f"{stamp}-sockets.json"
        data = {"scenario": "sockets", "started": started, "machine": machine_info(), "runs": a.runs,
                "results": rows,
                "fairness": fair, "params": {"redis_requests": n, "secs": secs, "pingpong_rounds": rounds,
                                              "fairness_s": fair_s}}
        out.write_text(json.dumps(data, indent=1))
        if fair:
            plot_fairness(fair, a.results / f"{stamp}-sockets-fairness.png")
        print(f"sockets.py: wrote {out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
