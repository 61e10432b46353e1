"""`make demo` (scripts/demo.sh) end to end, and its cleanup on success, failure and Ctrl-C.

The demo runs as `bash scripts/demo.sh` with SLUICE_BUILD_DIR from the environment (as every test
here), PYTHON = this interpreter, SLUICE_SOCKET_DIR and TMPDIR in a private temp dir, and a marker
variable SLUICE_DEMO_TEST=<random> that every process it starts inherits (supervisor, sluiced, NFs,
the servers in the namespaces): afterwards no process may carry the marker, no namespace sl-client /
sl-server and no veth sl-c-host / sl-s-host may exist, and the demo's temp dir must be gone.

1. a full run: exit 0, and its output shows each step: ping, curl to :80, the blocked curl to :8080
   (timed out, counted by the firewall's rule), iperf3, the NAT's address in the server's log, the
   monitor's capture read by tshark (> 0 packets), `sluice stats`;
2. DEMO_FAIL_AT=iperf3: the demo fails on purpose with everything running (iperf3 server waiting);
3. SIGINT to the demo's process group (a terminal's Ctrl-C) while `sluice up -d` starts, and while
   iperf3 runs.

The namespace names are fixed: this file must not run alongside another demo (CI runs tests serially).
Timings are never asserted; the timeouts only bound a hang.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import harness

DEMO = harness.REPO / "scripts" / "demo.sh"
NAMESPACES = ("sl-client", "sl-server")
LINKS = ("sl-c-host", "sl-s-host")
BINS = [harness.SLUICED] + [harness.BUILD / "nfs" / f"sluice-nf-{k}" for k in ("firewall", "nat", "monitor")]
TOOLS = ("ip", "ethtool", "ping", "ss", "iperf3", "curl", "tshark", "timeout")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RUN_TIMEOUT = 300  # a hang, not a slow run: the demo takes ~15 s


def need():
    if os.geteuid() != 0:
        pytest.skip("the demo needs root (namespaces, DPDK)")
    missing = [str(b) for b in BINS if not b.exists()]
    if missing:
        pytest.skip("not built: " + ", ".join(missing))
    path = os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin"]
    for tool in TOOLS:
        if not any(os.access(os.path.join(d, tool), os.X_OK) for d in path):
            pytest.skip(f"{tool} not installed")


class Demo:
    def __init__(self, tmp):
        self.tmp = tmp
        self.sock = tmp / "run"
        self.marker = uuid.uuid4().hex
        self.env = dict(os.environ)
        for k in [k for k in self.env if k.startswith("DEMO_")]:
            del self.env[k]
        py_dir = str(harness.REPO / "python")
        self.env.update({
            "SLUICE_BUILD_DIR": str(harness.BUILD),
            "SLUICE_SOCKET_DIR": str(self.sock),
            "TMPDIR": str(tmp),
            "PYTHON": sys.executable,
            "PYTHONPATH": py_dir + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else ""),
            "SLUICE_DEMO_TEST": self.marker,
        })

    def run(self, **extra_env):
        """Run the demo to its end; returns (exit status, output without colour codes)."""
        env = dict(self.env, **extra_env)
        cp = subprocess.run(["bash", str(DEMO)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT, start_new_session=True)
        return cp.returncode, ANSI.sub("", cp.stdout)

    def run_interrupted(self, heading, delay=0.0, after_file=None):
        """Start the demo, send SIGINT to its process group `delay` s after a line containing
        `heading` appears (and then file `after_file` in the socket dir); returns (exit status,
        output)."""
        # SIGINT at its default: a shell started in the background by a shell without job control
        # (`make test &` in a script) ignores SIGINT, and bash cannot trap a signal ignored at entry,
        # so the demo would inherit that and never see the Ctrl-C this test sends
        p = subprocess.Popen(["bash", str(DEMO)], env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        lines, seen = [], threading.Event()

        def read():
            for line in p.stdout:
                lines.append(line)
                if heading in ANSI.sub("", line):
                    seen.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert seen.wait(RUN_TIMEOUT), f"no '{heading}' heading:\n" + "".join(lines)
            if after_file:
                harness.wait_until(lambda: (self.sock / after_file).exists() or p.poll() is not None,
                                   RUN_TIMEOUT, f"{after_file} in {self.sock}", interval=0.01)
            time.sleep(delay)
            os.killpg(p.pid, signal.SIGINT)
            rc = p.wait(RUN_TIMEOUT)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        # the pipe ends when the last process holding it exits: a leftover would keep it open
        reader.join(30)
        out = ANSI.sub("", "".join(lines))
        assert not reader.is_alive(), "the demo's output pipe is still open after it exited:\n" + out
        return rc, out

    def marked_processes(self):
        """[(pid, cmdline)] of processes carrying this run's marker in their environment."""
        needle = f"SLUICE_DEMO_TEST={self.marker}".encode()
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                if needle not in env:
                    continue
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue  # gone meanwhile, or a kernel thread
            found.append((int(d), cmd))
        return found

    def leftovers(self):
        left = []
        netns = harness.sh("ip", "-o", "netns", "list", check=False).stdout.split()
        left += [f"namespace {n}" for n in NAMESPACES if n in netns]
        left += [f"link {l}" for l in LINKS if harness.link_exists(l)]
        left += [f"process {pid}: {cmd}" for pid, cmd in self.marked_processes()]
        left += [f"temp dir {p}" for p in self.tmp.glob("sluice-demo.*")]
        left += [f"socket {p}" for p in self.sock.glob("*.sock")] if self.sock.exists() else []
        return left

    def force_cleanup(self):
        """After a failed test: whatever the demo left behind goes, so later tests start clean."""
        if (self.sock / "state.json").exists():
            subprocess.run([sys.executable, "-m", "sluice", "down", "--socket-dir", str(self.sock)], env=self.env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        for pid, _ in self.marked_processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for n in NAMESPACES:
            harness.sh("ip", "netns", "del", n, check=False)
        for l in LINKS:
            harness.sh("ip", "link", "del", l, check=False)


@pytest.fixture
def demo():
    need()
    tmp = harness.short_tmpdir()
    d = Demo(tmp)
    try:
        yield d
    finally:
        d.force_cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def section(out, heading):
    """The text under the heading line starting with `== heading`, up to the next heading."""
    m = re.search(rf"^== {re.escape(heading)}.*?\n(.*?)(?=^== |\Z)", out, re.S | re.M)
    assert m, f"no section '== {heading}':\n{out}"
    return m.group(1)


def test_demo_runs_and_cleans_up(demo):
    rc, out = demo.run(DEMO_SECONDS="2")  # iperf3 for 2 s, not the default 5: the same steps, sooner
    assert rc == 0, out
    assert "demo: done" in out and "FAILED" not in out, out
    # every step, in order
    headings = [l[3:] for l in out.splitlines() if l.startswith("== ")]
    order = ["network namespaces", "config", "sluice up", "servers", "allowed: ping", "allowed: curl",
             "blocked: curl", "allowed: iperf3", "NAT", "monitor", "sluice stats", "teardown"]
    assert len(headings) == len(order) and all(h.startswith(o) for h, o in zip(headings, order)), headings

    s = section(out, "allowed: ping")
    assert "3 received" in s and "ok: ping: 3 echo replies" in s, s
    s = section(out, "allowed: curl")
    assert "hello from sl-server" in s and "ok: curl http://10.77.2.2/" in s, s
    # blocked: curl gave up (28: timeout) and the firewall's drop rule counted the SYNs
    s = section(out, "blocked: curl")
    assert "curl: (28)" in s and "the server on :8080 logged no request" in s, s
    m = re.search(r"ok: blocked: port 8080 timed out, firewall rule\.block-8080 dropped (\d+) SYN", s)
    assert m and int(m.group(1)) >= 1, s
    s = section(out, "allowed: iperf3")
    assert "iperf Done." in s and "ok: iperf3" in s, s
    # NAT: the server logged the public address only
    s = section(out, "NAT")
    assert re.search(r"^10\.77\.2\.1 - - .*\"GET / HTTP/1\.1\" 200", s, re.M), s
    assert "Accepted connection from 10.77.2.1" in s, s
    assert "ok: NAT: the server saw only 10.77.2.1, never 10.77.1.2" in s, s
    # the capture: tshark read > 0 packets, the translated ping among them, the allowed SYNs
    s = section(out, "monitor")
    m = re.search(r"ok: capture: tshark read (\d+) packets", s)
    assert m and int(m.group(1)) > 0, s
    assert re.search(r"10\.77\.2\.1 \S+ 10\.77\.2\.2 +ICMP .*Echo \(ping\) request", s), s
    assert re.search(r"10\.77\.2\.2 \S+ 10\.77\.1\.2 +ICMP .*Echo \(ping\) reply", s), s
    assert re.search(r"client\t10\.77\.2\.1\t10\.77\.2\.2\t80$", s, re.M), s
    assert re.search(r"client\t10\.77\.2\.1\t10\.77\.2\.2\t5201$", s, re.M), s
    # sluice stats: ports, NFs and their own counters
    s = section(out, "sluice stats")
    for want in ("PORTS", "NF COUNTERS", "CHAINS", "firewall -> nat -> monitor", "nat -> firewall -> monitor"):
        assert want in s, s
    for nf in ("firewall.0", "nat.0", "monitor.0"):
        assert re.search(rf"^{re.escape(nf)}: \w", s, re.M), s
    m = re.search(r"rule\.block-8080=(\d+)", s)
    assert m and int(m.group(1)) >= 1, s
    assert demo.leftovers() == [], out


def test_demo_failure_cleans_up(demo):
    # everything is up: sluiced, the NFs, the HTTP servers and a waiting iperf3 server
    rc, out = demo.run(DEMO_FAIL_AT="iperf3")
    assert rc == 1, out
    assert "failing on purpose at step 'iperf3'" in out and "demo: FAILED (status 1)" in out, out
    assert "ok: blocked" in out and "== teardown" in out, out
    assert demo.leftovers() == [], out


# during `sluice up -d`: once its supervisor has started sluiced (the NFs take another second or so
# to attach; whether `sluice up` has returned by the time SIGINT lands or not, nothing may remain)
@pytest.mark.parametrize("heading,delay,after_file", [("== sluice up -d", 0.0, "logs/sluiced.log"),
                                                      ("== allowed: iperf3", 1.0, None)],
                         ids=["during-sluice-up", "during-iperf3"])
def test_demo_ctrl_c_cleans_up(demo, heading, delay, after_file):
    rc, out = demo.run_interrupted(heading, delay, after_file)
    assert rc == 130, out
    assert "demo: interrupted" in out and "demo: FAILED (status 130)" in out, out
    assert "== teardown" in out, out
    assert demo.leftovers() == [], out
