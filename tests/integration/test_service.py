"""Sluice as a service (README "Install"): sd_notify from the supervisor (python/sluice/notify.py),
the systemd unit dist/sluice.service, and `make install` / `make uninstall`.

- the notify protocol: `sluice up` in the foreground with $NOTIFY_SOCKET naming a datagram socket the
  test binds (a path, and the abstract '@' form) sends READY=1 only once sluiced answers and every NF
  is attached, STATUS= on an NF's crash and restart, STOPPING=1 on SIGTERM, then exits 0 with
  everything gone; no child inherits $NOTIFY_SOCKET. `sluice up -d` adds MAINPID= (the forked
  supervisor). The module alone: the datagram's format, and that no socket or a dead one breaks nothing.
- `systemd-analyze verify` passes on the unit (ExecStart= pointed at an existing file: verify wants
  it) and complains about deliberately broken copies. PID 1 need not be systemd.
- `make install DESTDIR=<tmp> PREFIX=/usr` (from the existing build dir) puts every file in place;
  the installed sluice.pc builds an NF from source with cc; the installed `sluice` runs, and its
  `sluice up` finds sluiced, the NFs, sluice-stackd and libsluice-sock.so in the installed layout
  alone; `make uninstall` removes them again.

sluiced and the NFs run on net_null ports (no network setup), so these need root (DPDK).
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness import kill_procs_of, procs_of, short_tmpdir, wait_until

REPO = Path(__file__).resolve().parents[2]
PY_DIR = REPO / "python"
if str(PY_DIR) not in sys.path:
    sys.path.insert(0, str(PY_DIR))

from sluice import notify  # noqa: E402
from sluice.client import Client  # noqa: E402
from sluice.config import BUILTIN_NFS  # noqa: E402

UNIT = REPO / "dist" / "sluice.service"

NULL_FWD = """\
sluiced: {pool_mbufs: 8192}
ports:
  - {name: src, vdev: "net_null0,size=64,copy=0", chain: c}
  - {name: dst, vdev: "net_null1,size=64,copy=0"}
chains:
  - {name: c, nfs: [count, fwd], exit: dst}
nfs:
  - {name: count, program: count, wakeup: block}
  - {name: fwd, program: fwd, instances: 2, wakeup: block}
"""
NF_NAMES = {"count.0", "fwd.0", "fwd.1"}


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (DPDK)")


@pytest.fixture(scope="module")
def real_build():
    """The meson build dir with sluiced and the built-in NFs (runs ninja if they are missing)."""
    build = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
    need = [build / "src" / "manager" / "sluiced", build / "src" / "stack" / "sluice-stackd"] + \
        [build / "nfs" / f"sluice-nf-{n}" for n in BUILTIN_NFS]
    if not all(os.access(p, os.X_OK) for p in need) and (build / "build.ninja").exists():
        subprocess.run(["ninja", "-C", str(build)], check=False, capture_output=True, timeout=600)
    missing = [str(p) for p in need if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make build`)")
    return build


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(PY_DIR))
    for var in ("SLUICE_SOCKET_DIR", "SLUICE_BUILD_DIR", "NOTIFY_SOCKET", "SYSTEMD_EXEC_PID"):
        env.pop(var, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def socket_dir():
    d = short_tmpdir()
    yield d
    left = kill_procs_of(d)
    shutil.rmtree(d, ignore_errors=True)
    assert not left, f"processes left running for {d}: {left}"


class NotifySocket:
    """The service manager's end: a datagram socket at a path or an abstract name ('@...')."""

    def __init__(self, directory, abstract):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            self.name = f"@slt-svc-{uuid.uuid4().hex}"
            self.sock.bind("\0" + self.name[1:])
        else:
            self.name = str(directory / "notify.sock")
            self.sock.bind(self.name)
        self.got = []  # every datagram so far, as {key: value}

    def recv(self, timeout):
        """The next datagram as {key: value}, or None after timeout seconds."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        data = self.sock.recv(65536).decode()
        assert data.endswith("\n"), repr(data)
        msg = dict(line.split("=", 1) for line in data.splitlines())
        self.got.append(msg)
        return msg

    def wait_for(self, pred, timeout, what, proc=None):
        """Datagrams until pred(msg); returns that one. Fails after timeout seconds."""
        end = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.0, min(0.5, end - time.monotonic())))
            if msg is not None and pred(msg):
                return msg
            if time.monotonic() > end or (proc is not None and proc.poll() is not None and msg is None):
                err = ""
                if proc is not None and proc.poll() is not None:
                    err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"no {what} within {timeout:g}s; got {self.got}; sluice up: {err}")

    def close(self):
        self.sock.close()


def _attached(socket_dir):
    with Client(str(socket_dir / "ctl.sock"), timeout=5.0) as c:
        c.status()  # sluiced answers
        return {nf["name"] for nf in c.nfs()}


def _no_notify_socket(pid):
    return not any(v.startswith(b"NOTIFY_SOCKET=") for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))


# --------------------------------------------------------------------------- notify.py alone

@pytest.fixture
def fresh_notify(monkeypatch):
    """notify.py as at the start of a process (it remembers $NOTIFY_SOCKET once)."""
    monkeypatch.setattr(notify, "_addr", notify._UNSET)
    monkeypatch.setattr(notify, "_warned", False)
    return notify


def test_notify_message_format():
    assert notify.message(READY=1, STATUS="x y") == b"READY=1\nSTATUS=x y\n"
    assert notify.message(STATUS="two\nlines", MAINPID=None) == b"STATUS=two lines\n"
    assert notify.message() == b""
    m = notify.message(RELOADING=1).decode().splitlines()
    assert m[0] == "RELOADING=1" and m[1].startswith("MONOTONIC_USEC=") and int(m[1].split("=")[1]) > 0


def test_notify_without_socket_does_nothing(fresh_notify, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert fresh_notify.notify(READY=1) is False
    assert fresh_notify.ready("up") is False


def test_notify_takes_the_variable_and_survives_a_dead_socket(fresh_notify, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert fresh_notify.enabled()
    assert "NOTIFY_SOCKET" not in os.environ  # children started from now on do not get it
    assert fresh_notify.notify(READY=1) is False  # ECONNREFUSED / ENOENT: logged, not raised
    assert fresh_notify.notify(STOPPING=1) is False
    assert capsys.readouterr().err.count("cannot notify the service manager") == 1


def test_notify_ready_adds_mainpid_when_forked(fresh_notify, monkeypatch, tmp_path):
    ns = NotifySocket(tmp_path, abstract=True)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", ns.name)
        monkeypatch.setenv("SYSTEMD_EXEC_PID", str(os.getpid()))
        assert fresh_notify.ready("up")
        assert ns.recv(2) == {"READY": "1", "STATUS": "up"}
        assert fresh_notify.ready("up", forked=True)
        assert ns.recv(2) == {"READY": "1", "STATUS": "up", "MAINPID": str(os.getpid())}
        monkeypatch.setenv("SYSTEMD_EXEC_PID", "1")  # systemd started another process (a shell)
        assert fresh_notify.ready("up")
        assert ns.recv(2)["MAINPID"] == str(os.getpid())
    finally:
        ns.close()


# ------------------------------------------------------------------- `sluice up` under a manager

@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_up_notifies_ready_status_stopping(real_build, socket_dir, abstract):
    _need_root()
    cfg = socket_dir / "sluice.yaml"
    cfg.write_text(NULL_FWD)
    ns = NotifySocket(socket_dir, abstract)
    p = subprocess.Popen([sys.executable, "-m", "sluice", "up", str(cfg), "--socket-dir", str(socket_dir)],
                         env=_env(NOTIFY_SOCKET=ns.name, SLUICE_BUILD_DIR=real_build), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = ns.wait_for(lambda m: "READY" in m, 40, "READY=1", proc=p)
        # at READY=1 sluiced answers and every NF is attached already
        assert _attached(socket_dir) == NF_NAMES
        assert ready["READY"] == "1" and "3 NF(s) attached" in ready["STATUS"] and "MAINPID" not in ready
        assert [m for m in ns.got[:-1] if "READY" in m] == []
        assert any(m.get("STATUS") == "starting sluiced" for m in ns.got[:-1]), ns.got
        assert p.stdout.readline().startswith("sluice up: sluiced pid")
        st = json.loads((socket_dir / "state.json").read_text())
        children = [st["sluiced"]["pid"]] + [n["pid"] for n in st["nfs"]]
        assert all(_no_notify_socket(pid) for pid in children), "a child inherited NOTIFY_SOCKET"

        if not abstract:  # an NF's crash and restart show in STATUS=
            fwd0 = next(n["pid"] for n in st["nfs"] if n["name"] == "fwd.0")
            os.kill(fwd0, signal.SIGKILL)
            crash = ns.wait_for(lambda m: "NF fwd.0" in m.get("STATUS", ""), 10, "STATUS= of the crash")
            assert "killed by SIGKILL; restarting" in crash["STATUS"] and "2/3 NF(s) running" in crash["STATUS"]
            back = ns.wait_for(lambda m: "restarted" in m.get("STATUS", ""), 10, "STATUS= of the restart")
            assert back["STATUS"].startswith("NF fwd.0 restarted (#1)") and "3/3 NF(s) running" in back["STATUS"]
            wait_until(lambda: _attached(socket_dir) == NF_NAMES, 10, "the three NFs attached again")

        p.send_signal(signal.SIGTERM)
        ns.wait_for(lambda m: m.get("STOPPING") == "1", 10, "STOPPING=1", proc=p)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        ns.close()
    assert p.returncode == 0, err
    assert "received SIGTERM, stopping" in err and "sluiced exited with status 0" in err
    wait_until(lambda: not procs_of(socket_dir), 5, "every process of the deployment gone")
    for name in ("ctl.sock", "nf.sock", "state.json", "supervisor.sock"):
        assert not (socket_dir / name).exists(), name


def test_up_detached_notifies_mainpid(real_build, socket_dir):
    _need_root()
    cfg = socket_dir / "sluice.yaml"
    cfg.write_text(NULL_FWD)
    ns = NotifySocket(socket_dir, abstract=False)
    down = None
    try:
        r = subprocess.run([sys.executable, "-m", "sluice", "up", str(cfg), "-d", "--socket-dir", str(socket_dir)],
                           env=_env(NOTIFY_SOCKET=ns.name, SLUICE_BUILD_DIR=real_build), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        ready = ns.wait_for(lambda m: "READY" in m, 5, "READY=1")
        st = json.loads((socket_dir / "state.json").read_text())
        assert ready["MAINPID"] == str(st["supervisor"]["pid"]) != str(os.getpid())
        assert _no_notify_socket(st["sluiced"]["pid"]) and all(_no_notify_socket(n["pid"]) for n in st["nfs"])
        down = subprocess.run([sys.executable, "-m", "sluice", "down", "--socket-dir", str(socket_dir)], env=_env(),
                              capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr
        ns.wait_for(lambda m: m.get("STOPPING") == "1", 5, "STOPPING=1")
    finally:
        if down is None:
            subprocess.run([sys.executable, "-m", "sluice", "down", "--socket-dir", str(socket_dir)], env=_env(),
                           capture_output=True, timeout=60)
        ns.close()


# ------------------------------------------------------------------------------ the unit file

def _systemd_analyze():
    exe = shutil.which("systemd-analyze")
    if not exe:
        pytest.fail("systemd-analyze is missing: `make deps` installs the systemd package")
    return exe


def _verify(unit_text, directory, exec_path):
    """systemd-analyze verify of unit_text with its ExecStart= binary replaced by exec_path (verify
    checks that it is executable). Returns (returncode, its complaints)."""
    directory.mkdir(parents=True, exist_ok=True)
    unit = directory / "sluice.service"
    text = unit_text
    for key in ("ExecStart", "ExecReload"):
        text = text.replace(f"{key}=/usr/local/bin/sluice ", f"{key}={exec_path} ") \
                   .replace(f"{key}=/usr/bin/sluice ", f"{key}={exec_path} ")
    unit.write_text(text)
    r = subprocess.run([_systemd_analyze(), "verify", "--man=no", str(unit)], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="cat"))
    return r.returncode, (r.stdout + r.stderr).strip()


def _fake_exe(directory):
    exe = directory / "sluice"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


def test_unit_verifies(tmp_path):
    text = UNIT.read_text()
    assert "\nExecStart=/usr/local/bin/sluice up /etc/sluice/sluice.yaml\n" in text
    assert "\nExecReload=/usr/local/bin/sluice reload /etc/sluice/sluice.yaml\n" in text
    for line in ("Type=notify", "NotifyAccess=main", "Restart=on-failure", "RuntimeDirectory=sluice",
                 "KillMode=mixed", "LimitMEMLOCK=infinity"):
        assert f"\n{line}\n" in text, line
    exe = _fake_exe(tmp_path)
    assert _verify(text, tmp_path / "good", exe) == (0, "")
    # the checker itself: broken copies are refused or complained about
    rc, out = _verify(text, tmp_path / "missing", tmp_path / "no-such-sluice")
    assert rc != 0 and "is not executable" in out, out
    rc, out = _verify(text.replace("\nKillMode=mixed\n", "\nKilMode=mixed\n"), tmp_path / "typo", exe)
    assert "Unknown key" in out and "KilMode" in out, out
    rc, out = _verify(text.replace("\nType=notify\n", "\nType=notfy\n"), tmp_path / "type", exe)
    assert "notfy" in out, out


# ------------------------------------------------------------------------------- make install

def _make(*args):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DESTDIR")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), *args], capture_output=True,
                          text=True, timeout=600, env=env)


NF_SOURCE = r"""
#include <stdio.h>
#include <sluice/nf.h>

int main(void)
{
	struct sl_nf_config cfg;

	sl_nf_config_default(&cfg);
	printf("socket %s, abi %s\n", cfg.socket_path, sl_strerror(0));
	return 0;
}
"""


def test_make_install_destdir(real_build, tmp_path):
    _need_root()
    dest, sd = short_tmpdir(), short_tmpdir()
    try:
        r = _make("install", f"DESTDIR={dest}", "PREFIX=/usr", f"BUILD={real_build}")
        assert r.returncode == 0, r.stdout + r.stderr
        usr = dest / "usr"
        libs = {p.name: p for p in usr.glob("lib/**/*") if p.is_file() or p.is_symlink()}
        for name in ["sluiced", "sluice-stackd", "sluice"] + [f"sluice-nf-{n}" for n in BUILTIN_NFS]:
            assert os.access(usr / "bin" / name, os.X_OK), name
        for h in (REPO / "include" / "sluice").glob("*.h"):  # every public header
            assert (usr / "include" / "sluice" / h.name).read_bytes() == h.read_bytes(), h.name
        for lib in ("libsluice.so", "libsluice.a", "libsluice-sock.so", "sluice.pc"):
            assert lib in libs, lib
        assert (usr / "lib" / "sluice" / "python" / "sluice" / "notify.py").is_file()
        assert (dest / "etc" / "sluice" / "sluice.yaml.example").is_file()
        pc = libs["sluice.pc"]
        assert "prefix=/usr\n" in pc.read_text()

        # the unit names the installed CLI and verifies with it
        unit = (usr / "lib" / "systemd" / "system" / "sluice.service").read_text()
        assert "\nExecStart=/usr/bin/sluice up /etc/sluice/sluice.yaml\n" in unit
        assert _verify(unit, tmp_path / "unit", usr / "bin" / "sluice") == (0, "")

        # an out-of-tree NF: cc nf.c $(pkg-config --cflags --libs sluice)
        env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent), PKG_CONFIG_SYSROOT_DIR=str(dest))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "sluice"], env=env, capture_output=True,
                               text=True, check=True).stdout.split()
        (tmp_path / "nf.c").write_text(NF_SOURCE)
        r = subprocess.run(["cc", "-Wall", "-Werror", str(tmp_path / "nf.c"), *flags, "-o", str(tmp_path / "nf")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{flags}\n{r.stderr}"
        r = subprocess.run([str(tmp_path / "nf")], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(libs["libsluice.so"].parent)))
        assert r.returncode == 0 and r.stdout.startswith("socket /run/sluice/nf.sock"), r.stdout + r.stderr

        # every library NF's plugin form and the group host are installed; the host loads them
        group = usr / "bin" / "sluice-group"
        assert os.access(group, os.X_OK)
        plugins = {p.name: p for p in usr.glob("lib/**/sluice/nfs/*.so")}
        assert set(plugins) == {f"sluice-nf-{n}.so" for n in BUILTIN_NFS}, sorted(plugins)
        plugin_dir = plugins["sluice-nf-fwd.so"].parent
        r = subprocess.run([str(group), "--plugin-dir", str(plugin_dir), "--", "firewall", "--help"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "--ct-max N" in r.stdout, r.stdout + r.stderr
        # an out-of-tree NF in both forms from one file (examples/nf-plugin), against the installation
        ex = tmp_path / "nf-plugin"
        shutil.copytree(REPO / "examples" / "nf-plugin", ex)
        menv = {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DESTDIR")}
        r = subprocess.run(["make", "-C", str(ex)], env=menv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([str(ex / "sluice-nf-ttl_guard"), "--help"], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(libs["libsluice.so"].parent)))
        assert r.returncode == 0 and r.stdout.startswith("usage: sluice-nf-ttl_guard") and "--min-ttl" in r.stdout, \
            r.stdout + r.stderr
        r = subprocess.run([str(group), "--plugin-dir", str(ex), "--", "ttl_guard", "--name", "a", "--min-ttl", "900"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "--min-ttl '900': expected 0..255" in r.stderr, r.stdout + r.stderr

        # the installed CLI, on its own: no PYTHONPATH, no build dir, PATH without the installation
        env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        sluice = str(usr / "bin" / "sluice")
        r = subprocess.run([sluice, "--help"], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout.startswith("usage: sluice"), r.stderr
        # ... whose `sluice up` finds sluiced, the NFs, sluice-stackd and libsluice-sock.so installed
        cfg = sd / "sluice.yaml"
        cfg.write_text(NULL_FWD + "stack: true\n")
        r = subprocess.run([sluice, "up", str(cfg), "-d", "--socket-dir", str(sd)], env=env, capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
        try:
            assert r.returncode == 0, r.stderr
            st = json.loads((sd / "state.json").read_text())
            exes = {os.path.realpath(f"/proc/{n['pid']}/exe") for n in st["nfs"]}
            assert st["sluiced"]["binary"] == str(usr / "bin" / "sluiced")
            assert exes == {str(usr / "bin" / f"sluice-nf-{n}") for n in ("count", "fwd")} | \
                {str(usr / "bin" / "sluice-stackd")}, exes
            python = (usr / "bin" / "sluice").read_text().splitlines()[0][2:]  # what the wrapper runs on
            r = subprocess.run([python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                "from sluice.supervisor import find_stack_file as f; print(f('libsluice-sock.so'))",
                                str(usr / "lib" / "sluice" / "python")], capture_output=True, text=True,
                               env=dict(env, PATH=f"{usr / 'bin'}:{env['PATH']}"))  # as the wrapper does
            assert r.stdout.strip() == str(libs["libsluice-sock.so"]), r.stdout + r.stderr
        finally:
            down = subprocess.run([sluice, "down", "--socket-dir", str(sd)], env=env, capture_output=True, text=True,
                                  timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr

        r = _make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr", f"BUILD={real_build}")
        assert r.returncode == 0, r.stdout + r.stderr
        left = [str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir()]
        assert left == [], left
    finally:
        left = kill_procs_of(sd)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(sd, ignore_errors=True)
    assert not left, f"processes left running: {left}"

