"""Unmodified programs' sockets through Sluice (docs/sockets.md): real programs started with
`sluice run --stack kernel|shm|auto` (libsluice-sock.so preloaded) against a sluice-stackd of the
test's own, each compared with the same workload on plain kernel sockets.

- sock-calls (tests/sock/sock_calls.c): the call list, output identical line for line to the plain run
- redis-server + redis-cli (SET/GET, a 200 kB value, BGSAVE, which forks, INFO) + redis-benchmark -P 1/16
- nginx, master + 2 workers (sendfile on), curl (bytes identical) and a short wrk run
- iperf3 TCP and UDP (-u -b 50M), both ways (-R)
- curl against `python3 -m http.server`
- an asyncio echo server, clients through asyncio and through raw epoll in edge-triggered mode
- kill -9 of a client mid-transfer: the server sees EOF (or a reset), the service forgets the program
- --rate: the token bucket shows in `sluice stack stats` and holds the program back

In shm mode every end runs under the shim (and a plain client is refused: nothing listens in the
kernel); in kernel mode some ends are plain programs talking to shim ends, and in auto mode both
kinds of client reach the same shim server. Servers start through the `sluice` CLI (`sluice run`),
short-lived clients mostly with the environment `sluice run` sets (cheaper than a Python start each).

Every test has its own sluice-stackd in a temp socket dir. Teardown kills whatever the test started
(process groups), then checks that sluice-stackd is still alive and that its programs and sockets went
back to 0 (nothing leaked), then stops it. Loopback only, ports picked free. Durations are short (the
file runs in `make test`); a timing never decides a verdict.
"""

import difflib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from stackproto import shim_preload

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
STACKD = BUILD / "src" / "stack" / "sluice-stackd"
SHIM = BUILD / "src" / "sock" / "libsluice-sock.so"
SOCK_CALLS = BUILD / "tests" / "sock" / "sock-calls"
PY = sys.executable

ALL = ["kernel", "shm", "auto", "shm-poll", "user"]
TWO = ["kernel", "shm", "shm-poll", "user"]
# shm-poll: the shm module from a sluice-stackd that polls (--poll-us), so blocking receives poll their
# ring first and the engine leaves out the tokens of rings being polled (sock.h "Polling receivers").
# user: the user module (docs/sockets.md "The user module"): lwIP in a sluice-stackd that `sluice up` runs
# attached to a sluiced; the programs' peers are on the stack's loopback, as they are on the host's
POLL_US = 50


def _need(*tools):
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (make deps)")


def free_port():
    """A loopback port free for TCP and UDP right now."""
    for _ in range(50):
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise AssertionError("no free port")


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def tail(path, n=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(none)"


def sha(data):
    return hashlib.sha256(data).hexdigest()[:16]


# ------------------------------------------------------------------------------ the service


class Stackd:
    """A sluice-stackd in a fresh socket dir; its stderr goes to a file."""

    def __init__(self, poll_us=0):
        self.dir = Path(tempfile.mkdtemp(prefix="slt-sk-", dir="/tmp"))
        os.chmod(self.dir, 0o755)  # programs that drop privileges (nginx's workers) reach stack.sock too
        self.sockdir = self.dir / "s"
        self.log = self.dir / "stackd.log"
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen([str(STACKD), "--socket-dir", str(self.sockdir), "--poll-us", str(poll_us)],
                                         stdin=subprocess.DEVNULL,
                                         stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: "ready on" in self.log.read_text(errors="replace") or self.proc.poll() is not None, 10,
                     "sluice-stackd's ready line")
            assert self.proc.poll() is None, f"sluice-stackd exited at start:\n{tail(self.log)}"
        except BaseException:
            self.stop()
            raise

    def ctl(self, cmd):
        from sluice.client import Client
        with Client(str(self.sockdir / "stack-ctl.sock"), timeout=5.0) as c:
            return c.call(cmd)

    def apps(self):
        return self.ctl("stats")["apps"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _base_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("LD_PRELOAD", "SLUICE_STACK", "SLUICE_RATE", "SLUICE_SOCKET_DIR"):
        env.pop(k, None)
    return env


class Runner:
    """How a scenario starts a program: plainly (kernel sockets), or with its sockets through the
    test's sluice-stackd -- via `sluice run` (cli=True) or with the environment it sets."""

    def __init__(self, env, stack=None, cli=True, rate=None):
        self.env_ = env
        self.stack = "shm" if stack == "shm-poll" else stack  # shm-poll: the polling service (Env)
        self.cli = cli
        self.rate = rate

    @property
    def plain(self):
        return self.stack is None

    def __repr__(self):
        return "plain" if self.plain else f"shim-{self.stack}" + ("" if self.cli else "-env")

    def direct(self):
        return self if self.plain else Runner(self.env_, self.stack, cli=False, rate=self.rate)

    def argv(self, argv):
        argv = [str(a) for a in argv]
        if self.plain or not self.cli:
            return argv
        return ([PY, "-m", "sluice", "run", "--stack", self.stack, "--socket-dir", str(self.env_.stackd.sockdir),
                 "--build-dir", str(BUILD)] + (["--rate", self.rate] if self.rate else []) + ["--"] + argv)

    def environ(self):
        env = _base_env()
        if not self.plain and not self.cli:
            env.update(shim_preload(BUILD), SLUICE_STACK=self.stack, SLUICE_SOCKET_DIR=str(self.env_.stackd.sockdir))
            if self.rate:
                from sluice.commands.run import parse_rate
                env["SLUICE_RATE"] = str(parse_rate(self.rate))
        return env

    def run(self, argv, timeout=30, input=None, text=True):
        try:
            return subprocess.run(self.argv(argv), env=self.environ(), capture_output=True, text=text,
                                  input=input, timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
            out = "\n".join([ln.rstrip() for ln in out.replace("\r", "\n").splitlines() if ln.strip()][-10:])
            raise AssertionError(f"{self!r}: {[str(a) for a in argv]} did not finish within {timeout} s; its last "
                                 f"output:\n{out}") from None

    def start(self, argv, name, stdin=subprocess.DEVNULL):
        """A background process (its own process group: killed at teardown); output in a file."""
        log = self.env_.tmp / f"{name}.{self!r}.log"
        with open(log, "wb") as lf:
            p = subprocess.Popen(self.argv(argv), env=self.environ(), stdin=stdin, stdout=lf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        p.log = log
        self.env_.procs.append(p)
        return p


class _Pid:
    """poll() of a process we did not start (None while it lives)."""

    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        try:
            os.kill(self.pid, 0)
            return None
        except ProcessLookupError:
            self.returncode = -1
            return -1


class UserStackd(Stackd):
    """sluice-stackd with its user module, as `sluice up` runs it beside a sluiced (stack.user). Its port is
    one end of a veth pair of its own with nothing behind it: the programs talk over the stack's loopback."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="slt-sku-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.sockdir = self.dir / "s"
        self.log = self.sockdir / "logs" / "sluice-stackd.log"
        self.veth = f"slt-sku{os.getpid() % 100000}"
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "p"], check=True)
        for dev in (self.veth, self.veth + "p"):
            subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        cfg = self.dir / "user.yaml"
        cfg.write_text(f"""\
sluiced: {{socket_dir: {self.sockdir}, pool_mbufs: 4096}}
ports: [{{name: p0, vdev: "net_af_packet0,iface={self.veth}", chain: in}}]
chains: [{{name: in, nfs: [stack]}}, {{name: out, nfs: [stack], exit: p0}}]
stack: {{user: {{addresses: [10.99.0.1/24, "fd99::1/64"], egress_chain: out}}}}
""")
        r = subprocess.run([PY, "-m", "sluice", "up", str(cfg), "-d", "--build-dir", str(BUILD)], env=_base_env(),
                           capture_output=True, text=True, timeout=60)
        try:
            assert r.returncode == 0, f"sluice up with stack.user: {r.stdout}{r.stderr}"
            st = json.loads((self.sockdir / "state.json").read_text())
            self.proc = _Pid(next(n["pid"] for n in st["nfs"] if n.get("kind") == "stack"))
            assert self.ctl("status").get("user"), "sluice-stackd runs no user module"
        except BaseException:
            self.stop()
            raise

    def stop(self):
        subprocess.run([PY, "-m", "sluice", "down", "--socket-dir", str(self.sockdir)], env=_base_env(),
                       capture_output=True, timeout=60)
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class Env:
    """One test's sluice-stackd, temp dir and background processes."""

    def __init__(self, poll_us=0, user=False):
        self.tmp = Path(tempfile.mkdtemp(prefix="slt-sock-", dir="/tmp"))
        self.procs = []
        try:
            self.stackd = UserStackd() if user else Stackd(poll_us)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def plain(self):
        return Runner(self)

    def shim(self, stack, cli=True, rate=None):
        return Runner(self, stack, cli, rate)

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:  # and whatever they left in their groups (nginx workers, redis children)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if p.poll() is None:
                p.wait()
        self.procs.clear()

    def close(self):
        try:
            self.kill_all()
            alive = self.stackd.proc.poll() is None
            assert alive, f"sluice-stackd died during the test ({self.stackd.proc.returncode}):\n{tail(self.stackd.log)}"
            st = {}

            def back_to_zero():
                nonlocal st
                st = self.stackd.ctl("stats")
                return not st["apps"] and st["apps_total"] == 0 and st["sockets"] == 0
            try:
                wait_for(back_to_zero, 5, "sluice-stackd's programs and sockets back to 0")
            except AssertionError:
                raise AssertionError(f"left over in sluice-stackd after every program is gone: {st}") from None
            status = self.stackd.ctl("status")
            assert (status["apps"], status["sockets"], status["region_bytes"]) == (0, 0, 0), status
        finally:
            self.stackd.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture
def env(request):
    for f in (STACKD, SHIM, SOCK_CALLS):
        if not f.exists():
            pytest.fail(f"{f} is not built (ninja -C {BUILD})")
    params = getattr(request.node, "callspec", None)
    stack = params.params.get("stack") if params else None
    e = Env(POLL_US if stack == "shm-poll" else 0, user=stack == "user")
    try:
        yield e
    finally:
        e.close()


# the plain-kernel result of each scenario, computed once per session and compared with every stack's
_PLAIN = {}


def plain_result(key, env, fn):
    if key not in _PLAIN:
        _PLAIN[key] = fn(env.plain(), env.plain())
        env.kill_all()
    return _PLAIN[key]


def diff(want, got, name):
    return "\n".join(difflib.unified_diff(want, got, "plain kernel sockets", name, lineterm=""))


def wait_line(p, text, timeout=10):
    """Wait for `text` in background process p's output; fail with its output if it exits first."""
    def seen():
        out = p.log.read_text(errors="replace")
        if text in out:
            return True
        if p.poll() is not None:
            raise AssertionError(f"{p.args} exited ({p.returncode}) before printing {text!r}:\n{out[-3000:]}")
        return False
    try:
        wait_for(seen, timeout, f"{text!r} from {p.args}")
    except AssertionError as e:
        raise AssertionError(f"{e}\noutput:\n{tail(p.log)}") from None


def wait_exit(p, timeout, what):
    """Wait for background process p to exit; fail naming `what`, with its output, if it does not."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what} ({p.args}) still running {timeout} s later; its output:\n{tail(p.log)}") from None


def app_of(env, pid):
    return next((a for a in env.stackd.apps() if pid in (a.get("pids") or [])), None)


# ------------------------------------------------------------------------------- sock-calls


@pytest.mark.parametrize("stack", ALL)
def test_sock_calls(env, stack):
    def plain(run, _):
        r = run.run([SOCK_CALLS], timeout=120)
        bad = [line for line in r.stdout.splitlines() if not line.endswith(": ok")]
        assert r.returncode == 0 and not bad, f"sock-calls fails on plain kernel sockets:\n{r.stdout}{r.stderr}"
        return r.stdout.splitlines()
    want = plain_result("sock-calls", env, plain)
    r = env.shim(stack).run([SOCK_CALLS], timeout=150)
    got = r.stdout.splitlines()
    assert got == want, (f"sluice run --stack {stack} -- sock-calls differs from plain kernel sockets:\n"
                         + diff(want, got, f"--stack {stack}") + f"\nstderr:\n{r.stderr[-3000:]}")
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------ redis


def _redis(server, client, bench, tmp):
    port = free_port()
    d = tmp / f"redis-{port}"
    d.mkdir()
    srv = server.start(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                        "--dir", d, "--dbfilename", "dump.rdb", "--protected-mode", "no", "--daemonize", "no"],
                       "redis-server")
    cli = client.direct()

    def call(*args, input=None):
        r = cli.run(["redis-cli", "-p", port, *args], input=input)
        assert r.returncode == 0, f"redis-cli {args} ({cli!r}): {r.stdout}{r.stderr}"
        return r.stdout.rstrip("\n")
    wait_line(srv, "Ready to accept connections")
    out = [call("PING"), call("SET", "k", "v"), call("GET", "k")]
    big = "".join(random.Random(5).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=200_000))
    out.append(call("-x", "SET", "big", input=big))
    out.append(call("STRLEN", "big"))
    assert call("GET", "big") == big, f"{cli!r}: GET big returned other bytes"
    out.append("GET big: the same 200000 bytes")
    out += [call("INCR", "n") for _ in range(3)]
    out.append(call("BGSAVE"))  # redis forks a child that writes dump.rdb

    def saved():
        info = call("INFO", "persistence")
        return "rdb_bgsave_in_progress:0" in info and "rdb_last_bgsave_status:ok" in info and (d / "dump.rdb").exists()
    wait_for(saved, 15, "BGSAVE to finish")
    out.append("BGSAVE finished, dump.rdb written")
    info = call("INFO")
    assert "redis_version:" in info and "connected_clients:" in info, info[:500]
    out.append("INFO has redis_version and connected_clients")
    out.append(call("DBSIZE"))
    for pipeline, n in (("1", "3000"), ("16", "20000")):
        r = bench.run(["redis-benchmark", "-p", port, "-q", "-t", "set,get", "-n", n, "-c", "20", "-P", pipeline],
                      timeout=30)
        rps = dict(re.findall(r"^(SET|GET): ([\d.]+) requests per second", r.stdout.replace("\r", "\n"), re.M))
        assert r.returncode == 0 and set(rps) == {"SET", "GET"} and all(float(v) > 0 for v in rps.values()), \
            f"redis-benchmark -P {pipeline} ({bench!r}): {r.stdout[-2000:]}{r.stderr[-2000:]}"
        out.append(f"redis-benchmark -P {pipeline}: SET and GET ran")
    out.append(call("GET", "k"))
    stats = None if server.plain else app_of(server.env_, srv.pid)
    r = cli.run(["redis-cli", "-p", port, "SHUTDOWN", "NOSAVE"])
    wait_exit(srv, 10, "redis-server after SHUTDOWN NOSAVE")
    assert srv.returncode == 0, f"redis-server exited {srv.returncode}:\n{tail(srv.log)}"
    return out, stats


@pytest.mark.parametrize("stack", ALL)
def test_redis(env, stack):
    _need("redis-server", "redis-cli", "redis-benchmark")
    want, _ = plain_result("redis", env, lambda s, c: _redis(s, c, c, env.tmp))
    server = env.shim(stack)
    # kernel: a plain redis-cli talks to the shim server, the benchmark runs under the shim;
    # shm: everything under the shim; auto: redis-cli through shm, the benchmark plain (kernel listener)
    client = {"kernel": env.plain(), "auto": env.shim(stack)}.get(stack, env.shim(stack))
    bench = {"kernel": env.shim(stack), "auto": env.plain()}.get(stack, env.shim(stack))
    got, app = _redis(server, client, bench, env.tmp)
    assert got == want, diff(want, got, f"--stack {stack}")
    assert app and app["name"].startswith("redis-server") and app["stack"] == server.stack, app
    assert app["rx_bytes"] > 0 and app["tx_bytes"] > 0 and app["sockets"] >= 1, app


# ------------------------------------------------------------------------------------ nginx


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 2;
user nobody nogroup;
pid {d}/nginx.pid;
error_log {d}/error.log notice;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 30;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
    }}
}}
"""


def _nginx(server, client, wrk, tmp):
    port = free_port()
    d = tmp / f"nginx-{port}"
    (d / "www").mkdir(parents=True)
    index = b"<html><body>sluice sockets</body></html>\n"
    blob = random.Random(9).randbytes(300_000)
    (d / "www" / "index.html").write_bytes(index)
    (d / "www" / "blob.bin").write_bytes(blob)
    for p in (tmp, d, d / "www"):  # the workers run as nobody
        os.chmod(p, 0o755)
    for f in ("index.html", "blob.bin"):
        os.chmod(d / "www" / f, 0o644)
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
    srv = server.start(["nginx", "-p", d, "-c", d / "nginx.conf", "-e", d / "error.log"], "nginx")
    url = f"http://127.0.0.1:{port}"
    curl = client.direct()

    last = []

    def up():
        if srv.poll() is not None:
            raise AssertionError(f"nginx exited ({srv.returncode}):\n{tail(srv.log)}\n{tail(d / 'error.log')}")
        r = curl.run(["curl", "-sS", "-m", "5", url + "/index.html"], text=False)
        last[:] = [r.returncode, r.stdout[:200], r.stderr[-300:]]
        return r.stdout == index
    try:
        wait_for(up, 15, "nginx to serve index.html")
    except AssertionError as e:
        raise AssertionError(f"{e}; last curl ({curl!r}): {last}\nnginx:\n{tail(srv.log)}\nerror.log:\n"
                             f"{tail(d / 'error.log')}") from None
    out = ["index.html served"]
    r = curl.run(["curl", "-s", "-m", "20", "-o", "-", url + "/blob.bin"], text=False)
    assert r.returncode == 0 and r.stdout == blob, \
        f"curl ({curl!r}) got {len(r.stdout)} bytes, sha {sha(r.stdout)}; want 300000, {sha(blob)}: {r.stderr}"
    out.append("blob.bin: 300000 identical bytes")
    r = curl.run(["curl", "-s", "-m", "20", "-o", "-", url + "/index.html", url + "/blob.bin", url + "/index.html"],
                 text=False)  # one connection, kept alive
    assert r.stdout == index + blob + index, f"three requests on one connection: {len(r.stdout)} bytes"
    out.append("three requests on one kept-alive connection")
    r = curl.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url + "/missing"])
    out.append(f"missing file: HTTP {r.stdout}")
    r = wrk.run(["wrk", "-t", "2", "-c", "16", "-d", "2s", url + "/index.html"], timeout=30)
    m = re.search(r"(\d+) requests in", r.stdout)
    assert r.returncode == 0 and m and int(m.group(1)) > 0, f"wrk ({wrk!r}): {r.stdout}{r.stderr}"
    assert "Socket errors" not in r.stdout and "Non-2xx" not in r.stdout, f"wrk ({wrk!r}):\n{r.stdout}"
    out.append("wrk: requests served, no socket errors, all 2xx")
    workers = subprocess.run(["pgrep", "-P", str(srv.pid)], capture_output=True, text=True).stdout.split()
    out.append(f"{len(workers)} worker processes")
    srv.send_signal(signal.SIGQUIT)  # graceful stop
    wait_exit(srv, 15, "nginx after SIGQUIT")
    assert srv.returncode == 0, f"nginx exited {srv.returncode}:\n{tail(d / 'error.log')}"
    return out


@pytest.mark.parametrize("stack", TWO)
def test_nginx(env, stack):
    _need("nginx", "curl", "wrk")
    if os.geteuid() != 0:
        pytest.skip("nginx's workers switch to nobody: needs root")
    want = plain_result("nginx", env, lambda s, c: _nginx(s, c, c, env.tmp))
    # kernel: plain curl and a shim wrk against the shim nginx; shm: everything under the shim
    client = env.plain() if stack == "kernel" else env.shim(stack)
    got = _nginx(env.shim(stack), client, env.shim(stack), env.tmp)
    assert got == want, diff(want, got, f"--stack {stack}")


# ----------------------------------------------------------------------------------- iperf3


def _iperf3(server, client, seconds):
    port = free_port()
    srv = server.start(["iperf3", "-s", "-p", port, "-B", "127.0.0.1", "--forceflush"], "iperf3-s")
    wait_line(srv, "Server listening")
    out = []
    for name, args in (("tcp", []), ("tcp -R", ["-R"]), ("udp 50M", ["-u", "-b", "50M", "-l", "1400"]),
                       ("udp 50M -R", ["-u", "-b", "50M", "-l", "1400", "-R"])):
        r = client.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", seconds, "-J", *args], timeout=30)
        try:
            j = json.loads(r.stdout)
        except ValueError:
            raise AssertionError(f"iperf3 {name} ({client!r}) printed no JSON: {r.stdout[-2000:]}{r.stderr[-2000:]}")
        assert r.returncode == 0 and "error" not in j, f"iperf3 {name} ({client!r}): {j.get('error')}"
        end = j["end"]
        got = end["sum_received"]["bytes"] if "sum_received" in end else end["sum"]["bytes"]
        assert got > 0, f"iperf3 {name} ({client!r}) received nothing: {json.dumps(end)[:2000]}"
        if args[:1] == ["-u"]:
            assert end["sum"]["packets"] > 0, end["sum"]
        out.append(f"iperf3 {name}: completed, bytes received")
    srv.send_signal(signal.SIGTERM)
    wait_exit(srv, 10, "iperf3 -s after SIGTERM")
    return out


@pytest.mark.parametrize("stack", TWO)
def test_iperf3(env, stack):
    _need("iperf3")
    want = plain_result("iperf3", env, lambda s, c: _iperf3(s, c, 1))
    # kernel: a plain iperf3 server, the client under the shim (-R: the other direction)
    server = env.plain() if stack == "kernel" else env.shim(stack)
    got = _iperf3(server, env.shim(stack), 1)  # each direction, TCP and UDP, as long as the plain run
    assert got == want, diff(want, got, f"--stack {stack}")


# ------------------------------------------------------------------------------ http.server


def _http_server(server, client, tmp, refused=None):
    port = free_port()
    d = tmp / f"www-{port}"
    d.mkdir()
    data = random.Random(3).randbytes(500_000)
    (d / "file.bin").write_bytes(data)
    srv = server.start([PY, "-u", "-m", "http.server", port, "--bind", "127.0.0.1", "--directory", d], "http.server")
    wait_line(srv, "Serving HTTP")
    url = f"http://127.0.0.1:{port}/"
    curl = client.direct()
    r = curl.run(["curl", "-s", "-m", "20", "-o", "-", url + "file.bin"], text=False)
    assert r.returncode == 0 and r.stdout == data, \
        f"curl ({curl!r}): {len(r.stdout)} bytes, sha {sha(r.stdout)}; want {len(data)}, {sha(data)}"
    out = ["file.bin: 500000 identical bytes"]
    r = curl.run(["curl", "-s", "-m", "20", url])
    assert r.returncode == 0 and "file.bin" in r.stdout, r.stdout
    out.append("directory listing names file.bin")
    if refused is not None:  # a client that must not get through (a plain one against a shm-only listener)
        r = refused.run(["curl", "-s", "-m", "5", url])
        assert r.returncode == 7, f"{refused!r} curl reached a shm-only listener (exit {r.returncode})"
    return out, url


@pytest.mark.parametrize("stack", ALL)
def test_http_server(env, stack):
    _need("curl")
    want, _ = plain_result("http.server", env, lambda s, c: _http_server(s, c, env.tmp))
    server = env.shim(stack)
    if stack == "kernel":  # a plain curl against the shim server
        got, _ = _http_server(server, env.plain(), env.tmp)
    elif stack in ("shm", "shm-poll", "user"):  # shim curl; a plain curl finds nothing listening in the kernel
        got, _ = _http_server(server, env.shim(stack), env.tmp, refused=env.plain())  # (user: it is lwIP's)
    else:  # auto: a shim curl (shm) and a plain one (the kernel listener) to the same server
        got, url = _http_server(server, env.shim(stack), env.tmp)
        r = env.plain().run(["curl", "-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", url + "file.bin"])
        assert r.stdout == "200", f"plain curl against the auto server: {r.stdout} {r.stderr}"
    assert got == want, diff(want, got, f"--stack {stack}")


# ------------------------------------------------------------------------------------ asyncio


ECHO_SERVER = """\
import asyncio, signal, sys

async def handle(r, w):
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
    except ConnectionError:
        pass
    finally:
        w.close()
        try:
            await w.wait_closed()
        except ConnectionError:
            pass

async def main(port):
    srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=256)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("listening", flush=True)
    await stop.wait()
    srv.close()
    await srv.wait_closed()

asyncio.run(main(int(sys.argv[1])))
"""

ECHO_CLIENT = """\
import asyncio, errno, random, select, socket, sys, time

PORT = int(sys.argv[1])
N_ASYNC, N_ET = 40, 16

def payload(i):
    rnd = random.Random(i)
    return rnd.randbytes(rnd.choice([1, 100, 1460, 65536, 200000]) + rnd.randrange(1000))

async def one(i):
    data = payload(i)
    r, w = await asyncio.open_connection("127.0.0.1", PORT)
    async def send():
        for off in range(0, len(data), 8192):
            w.write(data[off:off + 8192])
            await w.drain()
    t = asyncio.create_task(send())
    got = await r.readexactly(len(data))
    await t
    w.close()
    await w.wait_closed()
    return got == data, len(data)

async def run_async():
    res = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(N_ASYNC))), 60)
    ok = all(r[0] for r in res)
    print(f"asyncio: {N_ASYNC} concurrent clients, {sum(r[1] for r in res)} bytes, echo {'exact' if ok else 'WRONG'}")

def run_et():
    # raw epoll, edge-triggered: every edge read/written until EAGAIN
    ep = select.epoll()
    conns = {}
    for i in range(N_ET):
        s = socket.socket()
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", PORT))
        assert err in (0, errno.EINPROGRESS), errno.errorcode.get(err, err)
        conns[s.fileno()] = dict(s=s, data=payload(1000 + i), sent=0, got=bytearray(), shut=False, eof=False)
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLET | select.EPOLLRDHUP)
    done, deadline = 0, time.monotonic() + 60
    while done < N_ET:
        assert time.monotonic() < deadline, "epoll-et: timed out"
        for fd, ev in ep.poll(5):
            c = conns[fd]
            s = c["s"]
            if ev & select.EPOLLERR:
                raise SystemExit(f"epoll-et: error on a socket: {s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)}")
            if ev & select.EPOLLOUT and not c["shut"]:
                while c["sent"] < len(c["data"]):
                    try:
                        c["sent"] += s.send(c["data"][c["sent"]:c["sent"] + 65536])
                    except BlockingIOError:
                        break
                if c["sent"] == len(c["data"]):
                    s.shutdown(socket.SHUT_WR)
                    c["shut"] = True
            if ev & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP) and not c["eof"]:
                while True:
                    try:
                        b = s.recv(65536)
                    except BlockingIOError:
                        break
                    if not b:
                        c["eof"] = True
                        break
                    c["got"] += b
                if c["eof"]:
                    done += 1
                    ep.unregister(fd)
    ok = all(bytes(c["got"]) == c["data"] for c in conns.values())
    total = sum(len(c["data"]) for c in conns.values())
    print(f"epoll-et: {N_ET} clients, {total} bytes, echo {'exact' if ok else 'WRONG'}")
    for c in conns.values():
        c["s"].close()

asyncio.run(run_async())
run_et()
"""


def _echo(server, client, tmp):
    (tmp / "echo_server.py").write_text(ECHO_SERVER)
    (tmp / "echo_client.py").write_text(ECHO_CLIENT)
    port = free_port()
    srv = server.start([PY, tmp / "echo_server.py", port], "echo-server")
    wait_line(srv, "listening")
    r = client.run([PY, tmp / "echo_client.py", port], timeout=90)
    assert r.returncode == 0, f"echo client ({client!r}) failed:\n{r.stdout}{r.stderr[-3000:]}"
    srv.send_signal(signal.SIGTERM)
    wait_exit(srv, 10, "the echo server after SIGTERM")
    assert srv.returncode == 0, f"echo server exited {srv.returncode}:\n{tail(srv.log)}"
    return r.stdout.splitlines()


@pytest.mark.parametrize("stack", TWO)
def test_asyncio_echo(env, stack):
    want = plain_result("echo", env, lambda s, c: _echo(s, c, env.tmp))
    assert all(line.endswith("echo exact") for line in want), want
    got = _echo(env.shim(stack), env.shim(stack), env.tmp)
    assert got == want, diff(want, got, f"--stack {stack}")


# ------------------------------------------------------------------------------ epoll against a model

EPOLL_MODEL = """\
import os, random, select, socket, sys
# Random level-triggered registration churn (register, modify, unregister, sockets made readable and
# read, closed and made anew on the same numbers) on 8 TCP connections and a pipe; after every step,
# what epoll reports must be exactly what a model of the registrations and readiness says.
rng = random.Random(int(sys.argv[1]))
IN, OUT = select.EPOLLIN, select.EPOLLOUT
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(16)
def pair():
    c = socket.create_connection(lst.getsockname())
    s, _ = lst.accept()
    c.setblocking(False)
    return c, s
conns = [pair() for _ in range(8)]
pr, pw = os.pipe()
ep = select.epoll()
reg = {}       # fd -> mask asked
readable = {}  # fd -> bytes the peer sent and this end has not read
def wait_readable(fd):
    r, _, _ = select.select([fd], [], [], 5)
    assert r, f"fd {fd}: sent to, never readable"
def model():
    want = {}
    for fd, mask in reg.items():
        ev = (IN if readable.get(fd) else 0) | (OUT if fd != pr else 0)
        if ev & mask:
            want[fd] = ev & mask
    return want
steps = 0
for step in range(int(sys.argv[2])):
    i = rng.randrange(len(conns))
    c, s = conns[i]
    fd = c.fileno()
    op = rng.random()
    if op < 0.25:
        mask = rng.choice([IN, OUT, IN | OUT])
        if fd in reg:
            ep.modify(fd, mask)
        else:
            ep.register(fd, mask)
        reg[fd] = mask
    elif op < 0.40:
        if fd in reg:
            ep.unregister(fd)
            del reg[fd]
        else:
            try:
                ep.unregister(fd)
                raise SystemExit(f"step {step}: unregister of fd {fd} (not registered) did not fail")
            except FileNotFoundError:
                pass
    elif op < 0.60:
        n = rng.randrange(1, 200)
        s.sendall(b"x" * n)
        readable[fd] = readable.get(fd, 0) + n
        wait_readable(fd)
    elif op < 0.75:
        got = 0
        while readable.get(fd):
            try:
                b = c.recv(65536)
            except BlockingIOError:  # the rest is still on its way (through the service, in pieces)
                wait_readable(fd)
                continue
            got += len(b)
            readable[fd] -= len(b)
    elif op < 0.82:
        if rng.random() < 0.5 and fd in reg:  # closed while registered: the kernel forgets it
            del reg[fd]
        elif fd in reg:
            ep.unregister(fd)
            del reg[fd]
        c.close()
        s.close()
        readable.pop(fd, None)
        conns[i] = pair()
        nfd = conns[i][0].fileno()
        assert nfd not in reg, f"step {step}: new fd {nfd} still registered in the model"
    elif op < 0.90:
        if pr in reg:
            ep.unregister(pr)
            del reg[pr]
        else:
            m = IN
            ep.register(pr, m)
            reg[pr] = m
    else:
        if readable.get(pr):
            os.read(pr, 4096)
            readable[pr] = 0
        else:
            os.write(pw, b"p")
            readable[pr] = 1
    got = dict(ep.poll(0))
    want = model()
    if got != want:
        raise SystemExit(f"step {step} (op {op:.2f}): epoll reported {sorted(got.items())}, the model says "
                         f"{sorted(want.items())}; registered {sorted(reg.items())}")
    steps += 1
print("epoll model: ok", steps, "steps")
"""


@pytest.mark.parametrize("stack", ["kernel", "shm"])
def test_epoll_model(env, stack):
    """The shim's epoll table (docs/sockets.md "epoll") under random level-triggered churn: every
    report equal to a model's, as plain kernel sockets give (checked first, same seed)."""
    (env.tmp / "epoll_model.py").write_text(EPOLL_MODEL)
    want = env.plain().run([PY, env.tmp / "epoll_model.py", 7, 1500], timeout=120)
    assert want.returncode == 0 and "epoll model: ok" in want.stdout, f"plain:\n{want.stdout}{want.stderr[-2000:]}"
    got = env.shim(stack).run([PY, env.tmp / "epoll_model.py", 7, 1500], timeout=120)
    assert got.returncode == 0 and got.stdout == want.stdout, \
        f"--stack {stack}:\n{got.stdout}{got.stderr[-2000:]}"


# ------------------------------------------------------------------------------ polling receivers


POLLER = """\
import ctypes, select, signal, socket, sys
if sys.argv[2] != "python":  # no handler without SA_RESTART left (CPython's SIGINT has none): it may poll
    signal.signal(signal.SIGINT, signal.SIG_DFL)
else:  # CPython's own handler, also where SIGINT came in ignored (a background job: CPython then has none)
    signal.signal(signal.SIGINT, signal.default_int_handler)
l = socket.socket()
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
assert c.recv(1) == b"1"  # a first blocking receive: the shim has looked at the handlers by now
if sys.argv[2] in ("signal", "siginterrupt"):  # through the libc's own calls, not sigaction
    libc = ctypes.CDLL(None)
    libc.signal.restype, libc.signal.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p]
    handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda sig: None)  # never run: nothing sends SIGUSR1
    libc.signal(signal.SIGUSR1, ctypes.cast(handler, ctypes.c_void_p))  # signal(): SA_RESTART, may poll
    if sys.argv[2] == "siginterrupt":
        libc.siginterrupt(signal.SIGUSR1, 1)  # its handler loses SA_RESTART: no polling from now on
print("phase 1", flush=True)
for line in sys.stdin:        # one round per line: a blocking receive of the 100 bytes the sender sends
    first = c.recv(1)         # polls the empty ring first (sluice-stackd --poll-us), or sleeps at once
    r, _, _ = select.select([c], [], [], 5)  # what the poll left in the ring must show as usual
    rest = b""
    while len(first + rest) < 100:
        b = c.recv(100)
        if not b:
            break
        rest += b
    print("round", line.strip(), len(first), "readable" if r else "NOT readable",
          "exact" if first + rest == bytes(range(100)) else "WRONG", flush=True)
"""

SENDER = """\
import signal, socket, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # never polls, whatever SIGINT came in as
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"1")
for line in sys.stdin:        # the test says when
    s.sendall(bytes(range(100)))
    print("sent", line.strip(), flush=True)
"""


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _stop(pid: int) -> None:
    """SIGSTOP pid and return once it is stopped. It spins rather than sleeps: the probe must take far
    less than the poller's 10-ms poll (a 50-ms sleep here, whenever the stop had not landed at the first
    look, let every poll of a loaded host end unseen: CI caught 1 of 100)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while not _stopped(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} not stopped 5 s after SIGSTOP")
        os.sched_yield()


@pytest.mark.parametrize("handlers", ["restart", "signal", "siginterrupt", "python"])
def test_polling_receiver(handlers):
    """A blocking recv under a polling service polls its ring (rx_spin 1 in its slot) and the sender
    then leaves out its token (tokens_polled); data left in the ring after such a recv still makes the
    socket readable to select; a program with a handler lacking SA_RESTART (CPython's SIGINT, or one
    siginterrupt() changed after the shim first looked) never polls (its recv must end with EINTR as
    the kernel's would). Made exact with SIGSTOP: the poller is stopped until the service shows it
    polling (rx_spin 1) -- then the sender's bytes find it polling, whatever the scheduler does; a round
    whose 10-ms poll ended before the test caught it is not counted, and the next one tries again."""
    e = Env(poll_us=10000)  # the longest poll sluice-stackd allows
    try:
        (e.tmp / "poller.py").write_text(POLLER)
        (e.tmp / "sender.py").write_text(SENDER)
        port = free_port()
        shim = e.shim("shm")
        poller = shim.start([PY, "-u", e.tmp / "poller.py", port, handlers], "poller", stdin=subprocess.PIPE)
        wait_line(poller, "listening")
        sender = shim.direct().start([PY, "-u", e.tmp / "sender.py", port], "sender", stdin=subprocess.PIPE)
        wait_line(poller, "phase 1")
        app = wait_for(lambda: app_of(e, poller.pid), 5, "the poller among the programs")
        assert e.stackd.ctl("status")["poll_us"] == 10000

        def sock():
            socks = [k for k in e.stackd.ctl("sockets")["sockets"] if k["app"] == app["id"] and k["peer"]]
            assert len(socks) == 1, socks
            return socks[0]
        caught, spins_seen = 0, 0
        for rnd in range(1, 101):
            before = sock()["tokens_polled"]
            poller.stdin.write(f"{rnd}\n".encode())
            poller.stdin.flush()
            stopped = False
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:  # stop it where the service shows it polling
                _stop(poller.pid)
                stopped = True
                if sock()["rx_spin"]:
                    spins_seen += 1
                    break
                os.kill(poller.pid, signal.SIGCONT)
                stopped = False
                time.sleep(0.0005)
            polling = stopped
            sender.stdin.write(f"{rnd}\n".encode())
            sender.stdin.flush()
            wait_line(sender, f"sent {rnd}")
            after = sock()["tokens_polled"]
            if stopped:
                os.kill(poller.pid, signal.SIGCONT)
            wait_line(poller, f"round {rnd} ")
            line = [x for x in poller.log.read_text().splitlines() if x.startswith(f"round {rnd} ")][0]
            assert line.endswith("1 readable exact"), line
            if polling:
                assert after == before + 1, f"sent while the poller polled (rx_spin 1): tokens_polled {before} -> {after}"
                caught += 1
            elif handlers in ("siginterrupt", "python"):
                assert after == before, f"a program that must not poll had a token left out: {before} -> {after}"
            if handlers in ("restart", "signal") and caught >= 2:
                break
            if handlers in ("siginterrupt", "python") and rnd >= 5:
                break
        if handlers in ("restart", "signal"):
            assert caught >= 2, f"the poller's recv was never seen polling its ring in {rnd} rounds"
        else:
            assert spins_seen == 0, "a program with a handler lacking SA_RESTART polled"
        poller.stdin.close()
        wait_exit(poller, 10, "the poller once its stdin closed")
        sender.stdin.close()
        wait_exit(sender, 10, "the sender once its stdin closed")
    finally:
        e.close()


ET_LOOP = """\
import select, socket, sys
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
print("port", l.getsockname()[1], flush=True)
s, _ = l.accept()
l.close()
ep = select.epoll()
ep.register(s.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET)
ep.poll(0)          # awake from here on: never a wait that sleeps
s.sendall(b"r")
got = 0
while got < int(sys.argv[1]):
    for fd, ev in ep.poll(0):
        if ev & select.EPOLLIN:
            b = s.recv(100)
            got += len(b)
            s.sendall(b)
print("echoed", got, flush=True)
sys.stdin.read()    # until the test closes stdin: its socket stays in the service's list meanwhile
"""

ET_PEER = """\
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
assert c.recv(1) == b"r"
for i in range(int(sys.argv[2])):
    c.sendall(b"x")
    assert c.recv(1) == b"x"
print("done", flush=True)
c.recv(1)
"""


def test_edge_triggered_loop_takes_no_tokens():
    """An awake event loop holds its edge-triggered connections' tokens back too (sock.h "Awake event
    loops"): a program that registers its connection EPOLLET as nginx does and polls epoll without
    ever sleeping gets every message from its ring, and the peer's shim puts no readable token for
    any of them (each is counted as left out, tokens_polled), while the edge is reported per message."""
    e = Env()
    try:
        (e.tmp / "loop.py").write_text(ET_LOOP)
        (e.tmp / "peer.py").write_text(ET_PEER)
        shim = e.shim("shm")
        n = 50
        loop = shim.start([PY, "-u", e.tmp / "loop.py", str(n)], "et-loop", stdin=subprocess.PIPE)
        wait_line(loop, "port")
        port = int(loop.log.read_text().split("port", 1)[1].split()[0])
        peer = shim.direct().start([PY, "-u", e.tmp / "peer.py", str(port), str(n)], "et-peer")
        wait_line(peer, "done", timeout=30)
        wait_line(loop, "echoed")
        app = wait_for(lambda: app_of(e, loop.pid), 5, "the loop among the programs")
        socks = [k for k in e.stackd.ctl("sockets")["sockets"] if k["app"] == app["id"] and k["type"] == "stream"]
        assert len(socks) == 1 and socks[0]["direct"], socks
        assert socks[0]["tokens"] == 0 and socks[0]["tokens_polled"] >= n, (
            f"the peer put readable tokens into an awake edge-triggered loop: {socks[0]}")
        loop.stdin.close()
        wait_exit(loop, 10, "the loop once its stdin closed")
        wait_exit(peer, 10, "the peer once the loop left")
    finally:
        e.close()


# -------------------------------------------------------------------------- kill -9 mid-transfer


KILL_SERVER = """\
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
total, said = 0, False
try:
    while True:
        b = c.recv(65536)
        if not b:
            print("eof", flush=True)
            break
        total += len(b)
        if total >= 1 << 20 and not said:
            print("receiving", flush=True)
            said = True
except ConnectionResetError:
    print("reset", flush=True)
"""

KILL_CLIENT = """\
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buf = b"x" * 65536
while True:
    s.sendall(buf)
"""


def _kill(server, client, tmp):
    (tmp / "kill_server.py").write_text(KILL_SERVER)
    (tmp / "kill_client.py").write_text(KILL_CLIENT)
    port = free_port()
    srv = server.start([PY, "-u", tmp / "kill_server.py", port], "kill-server")
    wait_line(srv, "listening")
    cl = client.start([PY, tmp / "kill_client.py", port], "kill-client")
    wait_line(srv, "receiving")
    app = None if client.plain else app_of(client.env_, cl.pid)
    assert client.plain or app, f"the client (pid {cl.pid}) is not among sluice-stackd's programs"
    os.kill(cl.pid, signal.SIGKILL)
    wait_exit(cl, 5, "the client after SIGKILL")
    wait_exit(srv, 10, "the server after its client was killed (it reads until EOF or a reset)")
    said = (srv.log.read_text().split() or ["nothing"])[-1]
    assert srv.returncode == 0 and said in ("eof", "reset"), f"server after the kill: {srv.log.read_text()}"
    if not client.plain:  # the service forgets the killed program
        wait_for(lambda: app_of(client.env_, cl.pid) is None, 5, f"the killed client (pid {cl.pid}) to go from stats")
    return ["server saw the end of the connection"]


@pytest.mark.parametrize("stack", TWO)
def test_kill_client(env, stack):
    want = plain_result("kill", env, lambda s, c: _kill(s, c, env.tmp))
    # kernel: a plain server, the killed client under the shim; shm: both under the shim
    server = env.plain() if stack == "kernel" else env.shim(stack)
    got = _kill(server, env.shim(stack), env.tmp)
    assert got == want
    wait_for(lambda: (lambda st: st["apps"] == 0 and st["sockets"] == 0)(env.stackd.ctl("status")), 5,
             "sluice-stackd's programs and sockets back to 0 once both ends are gone")


# ------------------------------------------------------------------------------------- --rate


RATE_CLIENT = """\
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(bytes(range(256)) * (int(sys.argv[2]) // 256))
s.shutdown(socket.SHUT_WR)
print("sent", flush=True)
sys.stdin.read()  # until the test closes stdin: its stats stay readable meanwhile
"""

RATE_SERVER = """\
import socket, sys, hashlib
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(65536)
    if not b:
        break
    h.update(b)
    n += len(b)
print(n, h.hexdigest()[:16], flush=True)
"""


def test_rate_limit(env):
    (env.tmp / "rate_client.py").write_text(RATE_CLIENT)
    (env.tmp / "rate_server.py").write_text(RATE_SERVER)
    port, size = free_port(), 8 << 20
    srv = env.plain().start([PY, "-u", env.tmp / "rate_server.py", port], "rate-server")
    wait_line(srv, "listening")
    client = env.shim("kernel", rate="100M")  # 12.5 MB/s: 8 MiB take about 0.7 s
    cl = client.start([PY, "-u", env.tmp / "rate_client.py", port, size], "rate-client", stdin=subprocess.PIPE)
    wait_line(cl, "sent", timeout=30)
    wait_exit(srv, 30, "the server (it reads until EOF)")
    want = f"{size} {sha(bytes(range(256)) * (size // 256))}"
    assert srv.log.read_text().split("\n")[-2] == want, f"server got: {srv.log.read_text()}"
    r = subprocess.run([PY, "-m", "sluice", "stack", "stats", "--json", "--socket-dir", str(env.stackd.sockdir)],
                       env=_base_env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    app = next(a for a in json.loads(r.stdout)["apps"] if cl.pid in a["pids"])
    assert app["rate_bps"] == 100_000_000 and app["stack"] == "kernel", app
    assert app["tx_bytes"] >= size and app["throttled"] > 0, app
    text = subprocess.run([PY, "-m", "sluice", "stack", "stats", "--socket-dir", str(env.stackd.sockdir)],
                          env=_base_env(), capture_output=True, text=True, timeout=30).stdout
    assert "python" in text and "100.00Mbit/s" in text, text
    cl.stdin.close()
    wait_exit(cl, 10, "the client once its stdin is closed")


# ------------------------------------------------------------------------------- the CLI itself


def _sluice(*args, env=None, timeout=30):
    e = _base_env()
    e.update(env or {})
    return subprocess.run([PY, "-m", "sluice", *map(str, args)], env=e, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_run_cli(env):
    """`sluice run`: the environment it sets, the exit status it passes on, its own errors."""
    sd = env.stackd.sockdir
    r = _sluice("run", "--stack", "shm", "--rate", "1.5G", "--socket-dir", sd, "--build-dir", BUILD, "--",
                "sh", "-c", 'echo "$SLUICE_STACK $SLUICE_RATE $SLUICE_SOCKET_DIR"; echo "$LD_PRELOAD"; exit 7',
                env={"LD_PRELOAD": "/nonexistent/other.so"})
    assert r.returncode == 7, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"shm 187500000 {sd}", lines
    # prepended, the other kept (a sanitizer build's shim has the ASan runtime in front)
    assert [p for p in lines[1].split() if "libasan" not in p] == [str(SHIM), "/nonexistent/other.so"], lines
    r = _sluice("run", "--socket-dir", sd, "--build-dir", BUILD, "sh", "-c", 'echo "$SLUICE_STACK ${SLUICE_RATE-none}"')
    assert r.returncode == 0 and r.stdout.split() == ["auto", "none"], (r.stdout, r.stderr)  # the defaults
    for bad in ("1x", "0", "fast", "-5M"):
        r = _sluice("run", "--rate", bad, "--socket-dir", sd, "--", "true")
        assert r.returncode == 2 and "--rate" in r.stderr, (bad, r.stderr)
    nowhere = env.tmp / "none"
    r = _sluice("run", "--socket-dir", nowhere, "--build-dir", BUILD, "--", "true")
    assert r.returncode == 125, r.stderr
    assert f"{nowhere}/stack.sock" in r.stderr and "sluice stack serve" in r.stderr and "stack:" in r.stderr, r.stderr
    r = _sluice("run", "--socket-dir", sd, "--build-dir", BUILD, "--", "no-such-program-here")
    assert r.returncode == 127 and "not found" in r.stderr, r.stderr
    r = _sluice("run", "--socket-dir", sd, "--build-dir", env.tmp, "--", "true")
    assert r.returncode == 125 and "libsluice-sock.so" in r.stderr, r.stderr
    r = _sluice("run", "--help")
    assert r.returncode == 0 and "--stack {kernel,shm,auto,user}" in r.stdout and "sluice run --stack shm" in r.stdout


def test_metrics_show_the_socket_services_programs(env):
    """`sluice metrics` beside a sluice-stackd (docs/observability.md): a program run through it is a
    series of its own, with the bytes it sent and its connections, as stackd's own stats count them --
    also with no sluiced in the socket dir (sluice_up 0)."""
    sd = env.stackd.sockdir
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    code = ("import socket, sys, time; c = socket.create_connection(('127.0.0.1', %d)); c.sendall(b'x' * 1000); "
            "time.sleep(30)") % port
    e = _base_env()
    p = subprocess.Popen([PY, "-m", "sluice", "run", "--stack", "kernel", "--socket-dir", str(sd), "--build-dir",
                          str(BUILD), "--", PY, "-c", code], env=e, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    env.procs.append(p)
    try:
        conn, _ = srv.accept()
        got = b""
        while len(got) < 1000:
            got += conn.recv(4096)
        app = wait_for(lambda: next((a for a in env.stackd.apps() if a.get("tx_bytes", 0) >= 1000), None), 10,
                       "stackd to count the program's bytes")
        r = _sluice("metrics", "--socket-dir", sd)
        assert r.returncode == 1 and "sluice_up 0" in r.stdout  # no sluiced here: said, and stackd still shown
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("sluice_stack_program_tx_bytes_total{")]
        pids = ",".join(str(x) for x in app["pids"])
        mine = [ln for ln in lines if f'pids="{pids}"' in ln]
        assert len(mine) == 1 and mine[0].endswith(f" {app['tx_bytes']}"), (lines, app)
        conns = [ln for ln in r.stdout.splitlines() if ln.startswith("sluice_stack_program_connections_total{")
                 and f'pids="{pids}"' in ln and 'module="kernel"' in ln]
        assert len(conns) == 1 and conns[0].endswith(f" {app['conns_kernel']}") and app["conns_kernel"] >= 1, conns
        assert "sluice_stack_sockets " in r.stdout and 'sluice_exporter_collector_up{collector="sockets"} 1' in r.stdout
        conn.close()
    finally:
        srv.close()
        env.kill_all()


def test_stack_cli(env):
    """`sluice stack status|stats` and `sluice stats` against the test's sluice-stackd; `stack serve` refuses a
    socket dir that is served already."""
    sd = env.stackd.sockdir
    r = _sluice("stack", "status", "--socket-dir", sd)
    assert r.returncode == 0 and f"pid {env.stackd.proc.pid}" in r.stdout and "0 program(s)" in r.stdout, r.stdout
    assert "does not poll" in r.stdout, r.stdout
    r = _sluice("stack", "status", "--json", "--socket-dir", sd)
    assert json.loads(r.stdout)["pid"] == env.stackd.proc.pid
    srv = env.shim("kernel").start([PY, "-u", "-m", "http.server", free_port(), "--bind", "127.0.0.1", "--directory",
                                    env.tmp], "http.server")
    wait_line(srv, "Serving HTTP")
    r = _sluice("stack", "stats", "--socket-dir", sd)
    assert r.returncode == 0, r.stderr
    row = next((ln for ln in r.stdout.splitlines() if str(srv.pid) in ln), None)
    assert row and row.split()[0].startswith("python") and " kernel " in row, r.stdout
    for head in ("NAME", "PIDS", "STACK", "RATE", "SOCKETS", "TX", "RX", "THROTTLED", "KERNEL", "SHM"):
        assert head in r.stdout.splitlines()[1], r.stdout
    # sluice stats: no sluiced here, the socket service's section all the same
    r = _sluice("stats", "--socket-dir", sd)
    assert r.returncode == 0 and "SOCKET SERVICE" in r.stdout and str(srv.pid) in r.stdout, (r.stdout, r.stderr)
    r = _sluice("stats", "--json", "--socket-dir", sd)
    assert any(srv.pid in a["pids"] for a in json.loads(r.stdout)["stack"]["apps"]), r.stdout
    r = _sluice("stack", "serve", "--socket-dir", sd, "--build-dir", BUILD)
    assert r.returncode == 1 and "already serves" in r.stderr, r.stderr
    r = _sluice("stack", "stats", "--socket-dir", env.tmp / "none")
    assert r.returncode == 1 and "sluice stack serve" in r.stderr, r.stderr


def test_up_runs_stackd(run_sluice, socket_dir, tmp_path):
    """`stack:` in the config: `sluice up` runs sluice-stackd in its socket dir, restarts it when it dies, and
    `sluice down` stops it."""
    sluiced = BUILD / "src" / "manager" / "sluiced"
    if os.geteuid() != 0 or not sluiced.exists():
        pytest.skip("needs root and a built sluiced")
    bad = tmp_path / "bad.yaml"
    bad.write_text('ports: [{name: a, vdev: "net_null0"}]\nstack: {ring_kb: 100}\n')
    r = run_sluice("config", "check", bad)
    assert r.returncode == 2 and "stack.ring_kb" in r.stderr and "power of two" in r.stderr, r.stderr
    bad.write_text('ports: [{name: a, vdev: "net_null0"}]\nstack: {direct: 1}\n')
    r = run_sluice("config", "check", bad)
    assert r.returncode == 2 and "stack.direct" in r.stderr and "true or false" in r.stderr, r.stderr
    cfg = tmp_path / "sluice.yaml"
    cfg.write_text('sluiced: {pool_mbufs: 4096, ring_size: 256, huge_pages: off}\n'
                   'ports: [{name: a, vdev: "net_null0"}, {name: b, vdev: "net_null1"}]\n'
                   'stack: {ring_kb: 64, slots: 64, direct: false}\n')
    r = run_sluice("up", cfg, "-d", "--build-dir", BUILD, "--socket-dir", socket_dir)
    try:
        assert r.returncode == 0 and "socket service on" in r.stdout, r.stdout + r.stderr
        st = json.loads(run_sluice("stack", "status", "--json", "--socket-dir", socket_dir).stdout)
        state = json.loads((socket_dir / "state.json").read_text())
        slot = next(n for n in state["nfs"] if n.get("kind") == "stack")
        assert slot["pid"] == st["pid"] and slot["state"] == "running", slot
        assert st["direct"] is False, st  # stack.direct: false is --no-direct
        os.kill(st["pid"], signal.SIGKILL)  # restarted like an NF

        def restarted():
            r = run_sluice("stack", "status", "--json", "--socket-dir", socket_dir)
            return r.returncode == 0 and json.loads(r.stdout)["pid"] != st["pid"] and json.loads(r.stdout)
        st2 = wait_for(restarted, 10, "sluice-stackd to be restarted")
        assert "sluice-stackd" in run_sluice("status", "--socket-dir", socket_dir).stdout
    finally:
        d = run_sluice("down", "--socket-dir", socket_dir)
    assert d.returncode == 0, d.stdout + d.stderr
    assert not (socket_dir / "stack.sock").exists() and not (socket_dir / "stack-ctl.sock").exists()
    assert not os.path.exists(f"/proc/{st2['pid']}") or "Z" in Path(f"/proc/{st2['pid']}/stat").read_text().split()[2]


# ------------------------------------------------------------------------ event loops with children

ASYNCIO_CHILDREN = r"""
import asyncio, sys
async def main():
    srv = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)  # the shim's sockets in use
    for argv in (["/bin/sleep", "0.2"], [sys.executable, "-c", "import sys; sys.exit(3)"], ["/bin/true"]):
        p = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(p.communicate(), 10)
        print(argv[0].rsplit("/", 1)[-1], await asyncio.wait_for(p.wait(), 10), flush=True)
    srv.close()
    await srv.wait_closed()
asyncio.run(main())
"""


@pytest.mark.parametrize("stack", ALL)
def test_asyncio_waits_for_its_children(env, stack):
    """An event loop that runs children sees them exit (issue 39: asyncio's proc.wait() once hung under
    the shim): the child watcher's wake-up reaches the loop however its sockets are served."""
    want = ["sleep 0", f"{Path(PY).name} 3", "true 0"]
    r = env.shim(stack).run([PY, "-c", ASYNCIO_CHILDREN], timeout=60)
    assert r.returncode == 0 and r.stdout.splitlines() == want, (r.stdout, r.stderr[-2000:])
