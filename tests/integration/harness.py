"""Test harness for the sluiced integration tests: real sluiced, real NF processes, real packets.

Everything a test creates is named with the prefix ``slt-`` (temp dirs, network namespaces, veths)
and is removed in fixture finalizers, also when the test fails:

- ``wait_until(pred, timeout, what)``   poll a predicate; fail with ``what`` and the last value.
- ``Ctl(path)``                        a control-socket client (newline-delimited JSON).
- ``Sluice`` (fixture ``sluice``)      starts sluiced from a config dict in a per-test temp dir,
                                       starts NFs, waits for attachment, reads stats; kills every
                                       process it started on teardown.
- ``Net`` (fixture ``net``)            network namespaces and veth pairs, torn down on teardown.
- ``write_config`` / ``run_sluiced_once``  for configs that must be rejected.
- ``procs_of`` / ``kill_procs_of``     the processes ``sluice up`` started for a socket dir (found
                                       through /proc), and killing what is left of them.
- ``write_pcap`` / ``read_pcap``        frames to and from a pcap file as bytes, without a scapy
                                       packet per frame (scapy spends seconds on a thousand);
                                       ``udp_frames`` builds plain UDP frames as scapy would.

Several pytest runs may share the machine: sluiced runs ``--in-memory`` with its own socket dir,
and each namespace/veth is claimed by the pytest process that made it (``/run/sluice-tests``), so
``stale_cleanup()`` only removes names whose owner died. Give each test file its own ``slt-`` names.
CI runs the tests serially; timing-sensitive tests are steadier that way.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

PREFIX = "slt-"
REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
SLUICED = BUILD / "src" / "manager" / "sluiced"
NF_BINS = {k: BUILD / "nfs" / f"sluice-nf-{k}" for k in ("fwd", "reflect", "count", "gen", "sink")}
GROUP_BIN = BUILD / "src" / "group" / "sluice-group"  # NFs as members of one process (docs/groups.md)
# SLUICE_TEST_NF_FORM=plugin: start_nf runs a library NF in its plugin form, as the one member of a
# sluice-group process, instead of its process form (make test runs the NF tests both ways)
NF_FORM = os.environ.get("SLUICE_TEST_NF_FORM", "process")
# the guest image `make guest-image` builds (docs/guests.md): guest NFs boot it under QEMU/KVM
GUEST_KERNEL = BUILD / "guest" / ("vmlinux" if (BUILD / "guest" / "vmlinux").is_file() else "vmlinuz")
GUEST_INITRD = BUILD / "guest" / "initrd.img"

SL_MAGIC = 0x534C4345
SL_VERSION = 1
SL_MSG_SIZE = 128
SL_MSG = {"HELLO": 1, "INIT": 2, "ADD_REGION": 3, "ADD_RING": 4, "CONNECTED": 5, "DISCONNECT": 6}
SL_ERR = {"OK": 0, "MAGIC": 1, "VERSION": 2, "TRUNCATED": 3, "TYPE": 4, "ORDER": 5, "FIELD": 6,
          "FDS": 7, "PERM": 8, "NOMEM": 9, "LIMIT": 10, "SHUTDOWN": 11, "IO": 12, "NAME": 13,
          "TIMEOUT": 14, "MAP": 15, "RING": 16, "RESTART": 17}


def require_env():
    """Skip (not fail) when the environment cannot run these tests at all."""
    if os.geteuid() != 0:
        pytest.skip("integration tests need root (namespaces, DPDK)")
    missing = [str(p) for p in [SLUICED, *NF_BINS.values()] if not p.exists()]
    if missing:
        pytest.skip("not built: " + ", ".join(missing) + " (run ninja -C build)")


def ensure_hugepages(want=512):
    try:
        with open("/proc/meminfo") as f:
            free = next(int(l.split()[1]) for l in f if l.startswith("HugePages_Free"))
        if free < 200:
            with open("/proc/sys/vm/nr_hugepages", "w") as f:
                f.write(str(want))
    except (OSError, StopIteration):
        pass


def write_pcap(path, frames):
    """frames (bytes, or scapy packets) to a pcap file, without a scapy packet per frame (sluice.frames);
    net_pcap replays it without pacing."""
    from sluice.frames import write_pcap as write
    return write(path, frames)


def udp_frames(n, ip_src, ip_dst, payload, sport, dport, ip_id=lambda i: i % 65536,
               mac_src="02:00:00:00:00:01", mac_dst="02:00:00:00:00:02"):
    """n Ethernet/IPv4/UDP frames, byte for byte what scapy builds for Ether(src, dst) / IP(src, dst,
    id) / UDP(sport, dport) / Raw(payload) (checksums included), at a fraction of its cost. sport,
    dport and ip_id may be ints or functions of the frame index."""
    from sluice.frames import inet_checksum as csum
    val = (lambda f, i: f(i) if callable(f) else f)
    eth = bytes.fromhex(mac_dst.replace(":", "")) + bytes.fromhex(mac_src.replace(":", "")) + b"\x08\x00"
    a, b = socket.inet_aton(ip_src), socket.inet_aton(ip_dst)
    out = []
    for i in range(n):
        sp, dp, pl = val(sport, i), val(dport, i), bytes(payload)
        ulen = 8 + len(pl)
        ucs = csum(a + b + struct.pack("!BBH", 0, 17, ulen) + struct.pack("!HHHH", sp, dp, ulen, 0) + pl) or 0xFFFF
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, val(ip_id, i), 0, 64, 17, 0, a, b)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        out.append(eth + ip + struct.pack("!HHHH", sp, dp, ulen, ucs) + pl)
    return out


def read_pcap(path) -> list:
    """Every frame of a classic pcap file as bytes, in order (sluice.frames). A record cut off or a
    frame cut short by the snaplen fails: tests compare frames byte for byte, so a short read must
    never look like a short frame."""
    from sluice.frames import read_pcap as read
    return read(path, limit=None, whole=True)


def wait_until(pred, timeout=10.0, what="condition", interval=0.05):
    """Call pred() until it returns a truthy value (returned). On timeout fail with `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def pid_alive(pid):
    """pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def procs_of(socket_dir):
    """Live processes `sluice up` started for socket_dir: the supervisor and sluiced (the dir is an
    argument on their command line) and the NFs (SLUICE_NF_SOCKET=<dir>/nf.sock in their environment)."""
    sd = str(socket_dir).encode()
    nf_env = b"SLUICE_NF_SOCKET=" + sd + b"/nf.sock"
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if (sd in cmd or nf_env in env) and pid_alive(int(d)):
            found.append(int(d))
    return found


def kill_procs_of(socket_dir):
    """SIGKILL every process of procs_of(socket_dir), wait up to 5 s for them to go; returns their pids."""
    left = procs_of(socket_dir)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def short_tmpdir():
    """A fresh /tmp/slt-XXXX directory (short: UNIX socket paths must stay < 108 bytes)."""
    return Path(tempfile.mkdtemp(prefix=PREFIX, dir="/tmp"))


# ---------------------------------------------------------------- control socket


class CtlError(Exception):
    pass


class Ctl:
    """Newline-delimited JSON client for sluiced's control socket."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        # a full listen backlog makes a non-blocking AF_UNIX connect fail with EAGAIN: retry
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock.connect(str(path))
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.sock.close()
                    raise
                time.sleep(0.01)
        self.buf = b""

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def read_line(self):
        """One response line decoded as JSON, or None at EOF."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                if self.buf:
                    raise CtlError(f"EOF inside a response: {self.buf[:200]!r}")
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, cmd=None, **fields):
        req = dict(fields)
        if cmd is not None:
            req["cmd"] = cmd
        self.send_raw(json.dumps(req).encode() + b"\n")
        resp = self.read_line()
        if resp is None:
            raise CtlError(f"connection closed without a response to {req}")
        return resp

    def at_eof(self, timeout=5.0):
        """True when the server closed the connection (after any buffered lines)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- sluiced + NFs


# SLUICE_TEST_WORKERS=N runs every test's sluiced with N workers (sharing core 1 after the first:
# "0,1,1,..."), unless the test names its own; `make test` runs the data-path tests with 2.
TEST_WORKERS = int(os.environ.get("SLUICE_TEST_WORKERS", "1"))
# SLUICE_TEST_PIPES=1: every test's sluiced with sluiced.pipes on, unless the test says otherwise.
TEST_PIPES = os.environ.get("SLUICE_TEST_PIPES", "") not in ("", "0")


def base_config(ports, chains=(), nfs=(), **sluiced):
    s = {"pool_mbufs": 16384, "ring_size": 1024, "max_nfs": 64, "huge_pages": "auto", "lcores": "0,1"}
    if TEST_WORKERS > 1:
        s.update(workers=TEST_WORKERS, lcores=",".join(["0"] + ["1"] * TEST_WORKERS))
    if TEST_PIPES:
        s["pipes"] = True
    s.update(sluiced)
    cfg = {"sluiced": s, "ports": list(ports), "chains": list(chains)}
    if nfs:
        cfg["nfs"] = [{"name": n} for n in nfs]
    return cfg


def write_config(path, cfg):
    path = Path(path)
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg, indent=1))
    return path


class Sluice:
    """One sluiced instance plus the NF processes of a test. Always call cleanup() (the fixture does)."""

    def __init__(self, workdir: Path):
        self.dir = Path(workdir)
        self.sock_dir = self.dir / "s"
        self.nf_sock = self.sock_dir / "nf.sock"
        self.ctl_sock = self.sock_dir / "ctl.sock"
        self.proc = None
        self.log_path = self.dir / "sluiced.log"
        self.nfs = {}  # name -> Popen
        self._ctl = None
        self._logf = None

    # -- sluiced

    def start(self, cfg, timeout=30.0, log_level=None, test_hooks=False):
        ensure_hugepages()
        cfg_path = write_config(self.dir / "cfg.json", cfg)
        self._logf = open(self.log_path, "wb")
        argv = [str(SLUICED), "--config", str(cfg_path), "--socket-dir", str(self.sock_dir)]
        if log_level:
            argv += ["--log-level", str(log_level)]
        if test_hooks:
            argv += ["--test-hooks"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)

        def ready():
            if "sluiced: ready" in self.log():
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"sluiced exited with {self.proc.returncode} before ready:\n{self.log()}")
            return False

        wait_until(ready, timeout, "sluiced ready")
        return self

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def ctl(self):
        """A shared control connection (reconnects when sluiced closed it)."""
        if self._ctl is None:
            self._ctl = Ctl(self.ctl_sock)
        return self._ctl

    def request(self, cmd, **fields):
        try:
            return self.ctl().request(cmd, **fields)
        except (OSError, CtlError):
            if self._ctl:
                self._ctl.close()
            self._ctl = None
            return self.ctl().request(cmd, **fields)

    def ok(self, cmd, **fields):
        r = self.request(cmd, **fields)
        assert r.get("ok") is True, f"{cmd} {fields} failed: {r}"
        return r

    def stats(self):
        return self.ok("stats")

    def port(self, name, st=None):
        st = st or self.stats()
        return next(p for p in st["ports"] if p["name"] == name)

    def nf(self, name, st=None):
        st = st or self.stats()
        return next((n for n in st["nfs"] if n["name"] == name), None)

    def service(self, name, st=None):
        st = st or self.stats()
        return next(s for s in st["services"] if s["name"] == name)

    def pool_audit(self):
        """sluiced's pool audit (docs/api.md): every buffer in exactly one place."""
        return self.ok("pool_audit")

    def wait_pool_whole(self, timeout=10.0):
        """Wait until every buffer is back in the pool, each exactly once: the audit (which drains the
        pool and counts distinct buffers, so a double free fails it) finds no duplicate, nothing
        missing or lent, and the ledger agrees with every NF's `lent`. Returns the audit."""
        def whole():
            a = self.pool_audit()
            return a if a["whole"] and a["free"] == a["mbufs"] and a["lent"] == 0 else None
        try:
            return wait_until(whole, timeout, "every buffer back in the pool, each once")
        except AssertionError:
            raise AssertionError(f"pool not whole: {self.pool_audit()}") from None

    def teardown_audit(self):
        """The audit at the end of a test (None when sluiced is gone or does not answer)."""
        if not self.alive():
            return None
        with contextlib.suppress(OSError, CtlError, ValueError):
            r = self.request("pool_audit")
            return r if r.get("ok") else None
        return None

    def attached(self):
        return {n["name"] for n in self.ok("nfs")["nfs"]}

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self, timeout=20.0):
        """Orderly shutdown through the control socket; returns the exit code."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        with contextlib.suppress(OSError, CtlError):
            with Ctl(self.ctl_sock) as c:
                c.request("shutdown")
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"sluiced did not exit within {timeout}s of shutdown:\n{self.log()[-3000:]}")
        if self._ctl:
            self._ctl.close()
            self._ctl = None
        return rc

    # -- NFs

    def start_nf(self, kind, name, service=None, wakeup="poll", batch=None, timeout_us=None, extra=(),
                 wait=True, timeout=10.0, cpus=None, env=None):
        """env: variables to add to the NF's environment (e.g. the SDK's SLUICE_NF_*)."""
        opts = []
        if batch is not None:
            opts += ["--batch", str(batch)]
        if timeout_us is not None:
            opts += ["--timeout-us", str(timeout_us)]
        opts += [str(a) for a in extra]
        plugin = Path(NF_BINS[kind]).parent / f"sluice-nf-{kind}.so"
        if NF_FORM == "plugin" and Path(NF_BINS[kind]).parent == BUILD / "nfs" and plugin.exists():
            return self.start_group(name, [(kind, name, service, opts)], wakeup=wakeup, wait=wait, timeout=timeout,
                                    cpus=cpus, env=env)
        argv = [str(NF_BINS[kind]), "--socket", str(self.nf_sock), "--name", name,
                "--service", service or name, "--wakeup", wakeup, *opts]
        p = self._spawn_nf(name, argv, cpus, env)
        if wait:
            self.wait_attached(name, timeout=timeout)
        return p

    def _spawn_nf(self, name, argv, cpus, env):
        """Popen argv as NF (or group) `name`: its log nf-NAME.log, its own session, pinned to cpus before
        it attaches, env added to ours; registered in self.nfs."""
        logf = open(self.dir / f"nf-{name}.log", "ab")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=pin,
                             env=None if env is None else {**os.environ, **{k: str(v) for k, v in env.items()}})
        logf.close()
        old = self.nfs.get(name)
        if old is not None and old.poll() is None:
            raise AssertionError(f"NF {name} already running")
        self.nfs[name] = p
        return p

    def start_group(self, name, members, wakeup="poll", wait=True, timeout=30.0, cpus=None, env=None):
        """sluice-group running `members` [(kind, name, service or None, [extra args])] in one process.
        Each member is registered under its name in self.nfs (all the same Popen, so stop_nf of any
        member stops the group), and so is the group under `name`; nf_log of a member is the group's."""
        argv = [str(GROUP_BIN), "--name", name, "--plugin-dir", str(BUILD / "nfs"), "--socket", str(self.nf_sock),
                "--wakeup", wakeup]
        for kind, mname, service, extra in members:
            argv += ["--", kind, "--name", mname, "--service", service or mname, *[str(a) for a in extra]]
        p = self._spawn_nf(name, argv, cpus, env)
        for _kind, mname, _service, _extra in members:
            self.nfs[mname] = p
            link = self.dir / f"nf-{mname}.log"
            if not link.exists():
                link.symlink_to(f"nf-{name}.log")
        if wait:
            self.wait_attached(*[m[1] for m in members], timeout=timeout)
        return p

    def start_guest_nf(self, kind, name, service=None, wakeup="poll", extra=(), wait=True, timeout=60.0,
                       memory=256):
        """The NF `sluice-nf-KIND` in a KVM guest (docs/guests.md): sluiced prepares the guest, QEMU boots
        the image with its memory as ivshmem devices; the QEMU process stands for the NF in self.nfs."""
        from sluice import guests
        for f in (GUEST_KERNEL, GUEST_INITRD):
            assert f.is_file(), f"{f} missing: run `make guest-image`"
        prep = self.ok("guest_prepare", name=name, service=service or name)
        gargv = [f"{guests.GUEST_BIN}/sluice-nf-{kind}", "--socket", "guest", "--name", name,
                 "--service", service or name, "--wakeup", wakeup] + [str(a) for a in extra]
        initrd = guests.guest_initrd(str(GUEST_INITRD), gargv, str(self.dir / f"{name}.initrd"))
        argv = guests.qemu_argv(prep, {"memory": memory, "vcpus": 1}, str(GUEST_KERNEL), initrd, gargv, {}, name)
        logf = open(self.dir / f"nf-{name}.log", "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        logf.close()
        self.nfs[name] = p
        if wait:
            self.wait_attached(name, timeout=timeout)
        return p

    def nf_log(self, name):
        try:
            return (self.dir / f"nf-{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_attached(self, *names, timeout=10.0):
        def check():
            for n in names:
                p = self.nfs.get(n)
                if p is not None and p.poll() is not None:
                    raise AssertionError(f"NF {n} exited with {p.returncode}: {self.nf_log(n)}")
            return set(names) <= self.attached()

        wait_until(check, timeout, f"NFs {names} attached")

    def wait_nf_count(self, n, timeout=10.0):
        """Wait until exactly n NFs are attached (status nf_count)."""
        wait_until(lambda: self.ok("status")["nf_count"] == n, timeout, f"{n} NFs attached")

    def wait_gone(self, *names, timeout=10.0):
        wait_until(lambda: not (set(names) & self.attached()), timeout, f"NFs {names} gone from the nf list")

    def stop_nf(self, name, sig=signal.SIGTERM, timeout=10.0):
        p = self.nfs[name]
        if p.poll() is None:
            p.send_signal(sig)
        return p.wait(timeout)

    # -- teardown

    def cleanup(self):
        for p in self.nfs.values():
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGCONT)
                    os.killpg(p.pid, signal.SIGKILL)
        for p in self.nfs.values():
            with contextlib.suppress(Exception):
                p.wait(5)
        if self._ctl:
            self._ctl.close()
            self._ctl = None
        if self.alive():
            with contextlib.suppress(Exception):
                self.stop(timeout=10)
        if self.alive():
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                self.proc.wait(5)
        if self._logf:
            self._logf.close()
            self._logf = None


def run_sluiced_once(cfg, workdir, timeout=30.0):
    """Run sluiced on a config expected to be rejected. Returns (CompletedProcess, socket_dir)."""
    cfg_path = write_config(Path(workdir) / "cfg.json", cfg)
    sock_dir = Path(workdir) / "s"
    try:
        cp = subprocess.run([str(SLUICED), "--config", str(cfg_path), "--socket-dir", str(sock_dir)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        subprocess.run(["pkill", "-KILL", "-f", f"--socket-dir {sock_dir}"], check=False)
        raise AssertionError(f"sluiced did not exit on a bad config: {e}")
    return cp, sock_dir


# ---------------------------------------------------------------- namespaces and veths


def sluice_cli(socket_dir, *args, check=True, timeout=60):
    """Run the `sluice` CLI of this checkout against socket_dir; check: fail the test on a non-zero status."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), SLUICE_SOCKET_DIR=str(socket_dir))
    r = subprocess.run([sys.executable, "-m", "sluice", *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert r.returncode == 0, f"sluice {' '.join(map(str, args))}: {r.stdout}{r.stderr}"
    return r


def sluice_api(socket_dir, cmd, **fields):
    """One control API request through `sluice api`: its JSON answer."""
    return json.loads(sluice_cli(socket_dir, "api", json.dumps(dict(cmd=cmd, **fields))).stdout)


def sh(*argv, check=True, ns=None, timeout=60, **kw):
    """Run a command (in namespace `ns` when given); returns CompletedProcess (text)."""
    argv = [str(a) for a in argv]
    if ns:
        argv = ["ip", "netns", "exec", ns] + argv
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and cp.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    return cp


def link_exists(name, ns=None):
    return sh("ip", "link", "show", "dev", name, check=False, ns=ns).returncode == 0


def no_offloads(dev, ns=None):
    """TCP over af_packet/tap needs checksums in the packet: turn offloads off."""
    sh("ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
       check=False, ns=ns)


OWNERS_DIR = "/run/sluice-tests"


def _claim(name):
    """Record that this test process owns `name` (a namespace or link), so another pytest run's
    stale_cleanup() leaves it alone while we are alive."""
    os.makedirs(OWNERS_DIR, exist_ok=True)
    with open(os.path.join(OWNERS_DIR, name), "w") as f:
        f.write(str(os.getpid()))


def _release(name):
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(OWNERS_DIR, name))


def _owned_by_live_process(name):
    try:
        with open(os.path.join(OWNERS_DIR, name)) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stale_cleanup():
    """Remove slt-* namespaces and links left by an earlier, killed run. Names claimed by a
    still-running test process (another pytest run in parallel) are left alone."""
    cp = sh("ip", "-o", "netns", "list", check=False)
    for line in cp.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX) and not _owned_by_live_process(name):
            sh("ip", "netns", "del", name, check=False)
            _release(name)
    cp = sh("ip", "-o", "link", "show", check=False)
    for line in cp.stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(PREFIX) and not _owned_by_live_process(name):
                sh("ip", "link", "del", name, check=False)
                _release(name)


class Net:
    """Namespaces and veth pairs created by a test; cleanup() removes all of them."""

    def __init__(self):
        self.namespaces = []
        self.links = []  # host-side link names we created
        self.procs = []

    def add_ns(self, name):
        assert name.startswith(PREFIX), name
        _claim(name)
        sh("ip", "netns", "del", name, check=False)
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        sh("ip", "link", "set", "lo", "up", ns=name)
        return name

    def add_veth(self, host, peer, peer_ns=None, peer_addr=None, mac=None):
        """veth pair host<->peer; peer moved into peer_ns and given peer_addr (CIDR). Offloads off."""
        assert host.startswith(PREFIX) and peer.startswith(PREFIX)
        _claim(host)
        if link_exists(host):
            sh("ip", "link", "del", host, check=False)
        sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
        self.links.append(host)
        if peer_ns:
            sh("ip", "link", "set", peer, "netns", peer_ns)
        if mac:
            sh("ip", "link", "set", peer, "address", mac, ns=peer_ns)
        sh("ip", "link", "set", host, "up")
        sh("ip", "link", "set", peer, "up", ns=peer_ns)
        # the host end carries no IP and must not talk by itself (IPv6 DAD, router solicitations)
        sh("sysctl", "-qw", f"net.ipv6.conf.{host}.disable_ipv6=1", check=False)
        if peer_ns:
            sh("sysctl", "-qw", f"net.ipv6.conf.{peer}.disable_ipv6=1", check=False, ns=peer_ns)
        no_offloads(host)
        no_offloads(peer, ns=peer_ns)
        if peer_addr:
            sh("ip", "addr", "add", peer_addr, "dev", peer, ns=peer_ns)
        return host, peer

    def popen(self, argv, ns=None, **kw):
        argv = [str(a) for a in argv]
        if ns:
            argv = ["ip", "netns", "exec", ns] + argv
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.wait(5)
        for l in reversed(self.links):
            if link_exists(l):
                sh("ip", "link", "del", l, check=False)
            _release(l)
        for n in reversed(self.namespaces):
            sh("ip", "netns", "del", n, check=False)
            _release(n)
        self.links.clear()
        self.namespaces.clear()


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def workdir():
    d = short_tmpdir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sluice(workdir):
    """A Sluice bound to the test's temp dir; call sluice.start(cfg). Everything is killed afterwards."""
    require_env()
    s = Sluice(workdir)
    audit = None
    try:
        yield s
        audit = s.teardown_audit()
    finally:
        s.cleanup()
    # Every test ends with the pool audit: no buffer in two places (a double free) whatever it did.
    if audit:
        bad = {k: audit.get(k) for k in ("duplicates", "lent_mismatch", "foreign", "bad_owner") if audit.get(k)}
        assert not bad, f"pool audit at the end of the test: {bad}"

    # Under the ASan/UBSan build a sanitizer report fails the test even if the behaviour looked right.
    log = s.log() if s.proc else ""
    reports = [ln for ln in log.splitlines() if "Sanitizer" in ln or "runtime error:" in ln]
    assert not reports, "sanitizer report from sluiced:\n" + "\n".join(reports[:20])


@pytest.fixture
def net():
    """Namespaces/veths created through it are deleted after the test (pass or fail)."""
    require_env()
    stale_cleanup()
    n = Net()
    try:
        yield n
    finally:
        n.cleanup()
