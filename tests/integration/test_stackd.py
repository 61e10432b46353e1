"""sluice-stackd (docs/sockets.md) spoken to directly, without the shim: its control API, every way
a program can misuse stack.sock or its region, and that nothing it gives out is leaked. The shim and
real programs are in test_sockets.py."""

import errno
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from stackproto import (REGION_APP_POLL_US, S_RX_EOF, S_TX_CLOSED, SLOT_ERROR, SLOT_RD_TOKEN, SLOT_RX_SPIN, SLOT_STATE,
                        SLOT_TX_TAIL, Chan, ctl, inet, shim_preload)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stackd(build_dir, socket_dir):
    binary = build_dir / "src" / "stack" / "sluice-stackd"
    if not binary.exists():
        pytest.fail(f"{binary} is not built (make build)")
    p = subprocess.Popen([str(binary), "--socket-dir", str(socket_dir), "--slots", "32", "--ring-kb", "64"],
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        assert "ready on" in line, line
        yield str(socket_dir)
        assert p.poll() is None, "sluice-stackd died during the test"
        # nothing a test made may be left over once its programs are gone
        deadline = time.time() + 5
        while time.time() < deadline:
            st = ctl(str(socket_dir), "status")
            if st["apps"] == 0 and st["sockets"] == 0:
                break
            time.sleep(0.05)
        assert (st["apps"], st["sockets"], st["region_bytes"]) == (0, 0, 0), st
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stderr.close()
    assert not os.path.exists(os.path.join(str(socket_dir), "stack.sock")), "stack.sock left behind"


def _wait(pred, what, timeout=5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_control_api(stackd):
    st = ctl(stackd, "status")
    assert st["ok"] and st["pid"] > 0 and st["apps"] == 0 and st["poll_us"] == 0
    assert st["socket"].endswith("/stack.sock")
    bad = ctl(stackd, "nosuch")
    assert not bad["ok"] and "status, stats, sockets" in bad["error"]
    c = Chan(stackd, "shm", name=b"myprog")
    stats = ctl(stackd, "stats")
    assert [a["name"] for a in stats["apps"]] == ["myprog"]
    assert stats["apps"][0]["pids"] == [os.getpid()] and stats["apps"][0]["stack"] == "shm"
    c.close()


def _connected(c):
    """A listener and a connection through it, accepted: (ls, lfd, cs, cfd, a, afd, peer address)."""
    port = _port()
    ls, _, lfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    assert c.call("BIND", ls, payload=inet("127.0.0.1", port))[0] == 0
    assert c.call("LISTEN", ls, arg0=8)[0] == 0
    cs, _, cfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    assert c.call("CONNECT", cs, payload=inet("127.0.0.1", port))[0] in (0, -errno.EINPROGRESS)
    a, peer, afd = _wait(lambda: (lambda r: r[0] >= 0 and r)(c.call("ACCEPT", ls)), "accept")
    _wait(lambda: c.u32(cs, SLOT_STATE) & 0x01, "connected")
    return ls, lfd, cs, cfd, a, afd, peer


def _recv_n(c, slot, n, timeout=5.0):
    """What slot's receive ring gets until n bytes came (or timeout)."""
    got, deadline = b"", time.time() + timeout
    while len(got) < n and time.time() < deadline:
        got += c.recv(slot)
        time.sleep(0.01)
    return got


@pytest.mark.parametrize("stack", ["shm", "kernel", "auto"])
def test_stream_through_rings(stackd, stack):
    """Connect, accept and bytes both ways through the rings; the close reaches the peer as EOF."""
    c = Chan(stackd, stack)
    ls, lfd, cs, cfd, a, afd, peer = _connected(c)
    assert peer[2:4] == c.call("GETSOCKNAME", cs)[1][2:4]  # the accepted socket's peer port is the client's
    c.send(cs, cfd, b"hello server")
    assert _recv_n(c, a, 12) == b"hello server"
    c.send(a, afd, b"hi")
    assert _wait(lambda: c.recv(cs), "reply") == b"hi"
    conns = ctl(stackd, "stats")["apps"][0]
    assert conns["conns_shm" if stack != "kernel" else "conns_kernel"] >= 1
    os.close(afd)  # the server closes: the client sees the end
    _wait(lambda: c.u32(cs, SLOT_STATE) & S_RX_EOF, "EOF at the client")
    for fd in (lfd, cfd):
        os.close(fd)
    c.close()


def test_doorbell_without_kick(stackd):
    """sock.h "Kicks": an idle engine says it sleeps (engine_awake 0), so a sender must kick; data only
    flagged in tx_dirty (no kick) is found on the engine's next turn, here the one after a call (the
    engine serves a socket it was never kicked for only through the flag)."""
    c = Chan(stackd, "shm")
    ls, lfd, cs, cfd, a, afd, _ = _connected(c)
    _wait(lambda: c.engine_awake() == 0, "the idle engine says it sleeps")
    c.send(cs, cfd, b"flagged only", kick=False)
    c.call("GETSOCKNAME", ls)  # wakes it (a call about another socket): its next turn finds the flag
    assert _recv_n(c, a, 12) == b"flagged only"
    for fd in (lfd, cfd, afd):
        os.close(fd)
    c.close()


def test_polled_ring_gets_no_token(stackd):
    """sock.h "Polling receivers": while a slot's rx_spin is 1 the engine puts no readable token for
    new data (counted as tokens_polled); once it is 0 again, a kick brings the token as usual. This
    service does not poll, and says so to its programs (app_poll_us 0)."""
    c = Chan(stackd, "shm")
    assert struct.unpack_from("<I", c.map, REGION_APP_POLL_US)[0] == 0
    ls, lfd, cs, cfd, a, afd, _ = _connected(c)
    c.put_u32(a, SLOT_RX_SPIN, 1)
    c.send(cs, cfd, b"polled")
    _wait(lambda: c.u64(a, 192) - c.u64(a, 128) == 6, "the data in the receive ring")
    time.sleep(0.05)
    os.set_blocking(afd, False)
    with pytest.raises(BlockingIOError):
        os.read(afd, 1)
    assert c.u32(a, SLOT_RD_TOKEN) == 0
    st = next(k for k in ctl(stackd, "sockets")["sockets"] if k["slot"] == a)
    assert st["tokens_polled"] >= 1 and st["tokens"] == 0, st
    c.put_u32(a, SLOT_RX_SPIN, 0)
    os.write(afd, b"k")  # the shim's kick after its poll: readable, and no token
    _wait(lambda: c.u32(a, SLOT_RD_TOKEN) == 1, "the token once the slot is no longer polled")
    assert os.read(afd, 1) == b"t"
    assert c.recv(a) == b"polled"
    for fd in (lfd, cfd, afd):
        os.close(fd)
    c.close()


def _sockaddr(family, host, port):
    if family == socket.AF_INET:
        return inet(host, port)
    return struct.pack("<HHI16sI", socket.AF_INET6, socket.htons(port), 0, socket.inet_pton(socket.AF_INET6, host), 0)


# two binds to one port: (family, address, IPV6_V6ONLY) each; the kernel decides what each must give
BIND_PAIRS = [
    ((socket.AF_INET6, "::", 1), (socket.AF_INET, "0.0.0.0", 0)),  # redis's default: both listen
    ((socket.AF_INET6, "::", 0), (socket.AF_INET, "0.0.0.0", 0)),  # [::] takes IPv4 too
    ((socket.AF_INET, "0.0.0.0", 0), (socket.AF_INET6, "::", 0)),
    ((socket.AF_INET, "0.0.0.0", 0), (socket.AF_INET6, "::", 1)),
    ((socket.AF_INET, "127.0.0.1", 0), (socket.AF_INET6, "::1", 0)),
    ((socket.AF_INET, "0.0.0.0", 0), (socket.AF_INET6, "::1", 0)),
    ((socket.AF_INET, "127.0.0.1", 0), (socket.AF_INET6, "::ffff:127.0.0.1", 0)),
    ((socket.AF_INET6, "::1", 0), (socket.AF_INET6, "::", 1)),
]


def test_bind_conflicts_as_the_kernel(stackd):
    """shm binds conflict exactly where the kernel's do, IPv4 against IPv6 and IPV6_V6ONLY included
    (redis binds * and ::* with IPV6_V6ONLY on the second)."""
    def kernel(pair, port):
        socks, out = [], []
        try:
            for fam, host, v6only in pair:
                k = socket.socket(fam, socket.SOCK_STREAM)
                socks.append(k)
                if v6only:
                    k.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    k.bind((host, port))
                    k.listen(1)
                    out.append(0)
                except OSError as e:
                    out.append(-e.errno)
        finally:
            for k in socks:
                k.close()
        return out

    c = Chan(stackd, "shm")
    for pair in BIND_PAIRS:
        port = _port()
        want = kernel(pair, port)
        got, made = [], []
        try:
            for fam, host, v6only in pair:
                slot, _, fd = c.call("SOCKET", arg0=fam, arg1=socket.SOCK_STREAM)
                made.append(fd)
                if v6only:
                    assert c.call("SETSOCKOPT", slot, arg0=socket.IPPROTO_IPV6, arg1=socket.IPV6_V6ONLY,
                                  payload=struct.pack("<i", 1))[0] == 0
                r = c.call("BIND", slot, payload=_sockaddr(fam, host, port))[0]
                if r == 0:
                    r = c.call("LISTEN", slot, arg0=1)[0]
                got.append(r)
        finally:
            for fd in made:
                os.close(fd)  # the program's last close: the service unbinds it
        assert got == want, f"binds {pair}: shm gave {got}, the kernel {want}"
    c.close()


def test_garbage_on_the_channel(stackd):
    """Short messages, lengths that lie, calls before HELLO, a HELLO of another version: the
    channel is closed or the call refused, and the service keeps serving."""
    path = os.path.join(stackd, "stack.sock")
    for msg in (b"x", b"\0" * 31, bytes(range(32)) + b"extra", b"\xff" * 32):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(5)
        s.connect(path)
        s.send(msg)
        try:
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b"" or len(got) >= 32, got
        s.close()
    c = Chan(stackd, hello=False)
    assert c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)[0] == -errno.EPROTO
    r = c.call("HELLO", arg0=2, payload=b"\x09\0\0\0" + b"\0" * 52)[0]
    assert r == -errno.EPROTO
    r = c.call("HELLO", arg0=2, payload=b"\x01\0\0\0" + b"\0" * 4 + b"\x07" * 16 + b"\0" * 32)[0]
    assert r == -errno.ENOENT  # a token no program has
    c.close()
    assert ctl(stackd, "status")["ok"]
    good = Chan(stackd)
    assert good.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_RAW)[0] == -errno.EPROTONOSUPPORT
    assert good.call("SOCKET", arg0=socket.AF_UNIX, arg1=socket.SOCK_STREAM)[0] == -errno.EAFNOSUPPORT
    assert good.call("BIND", 31, payload=inet("127.0.0.1", 1))[0] == -errno.EBADF
    assert good.call("BIND", 1 << 30, payload=inet("127.0.0.1", 1))[0] == -errno.EBADF
    us, _, ufd = good.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_DGRAM)
    assert good.call("LISTEN", us, arg0=1)[0] == -errno.EOPNOTSUPP
    assert good.call("BIND", us, payload=b"\x02")[0] == -errno.EINVAL
    os.close(ufd)
    good.close()


def test_forged_ring_indices_reset_only_that_socket(stackd):
    """A program that writes nonsense into its send ring's index gets that socket reset (counted);
    its peer sees the reset; another connection keeps working."""
    c = Chan(stackd, "shm")
    port = _port()
    ls, _, lfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    c.call("BIND", ls, payload=inet("127.0.0.1", port))
    c.call("LISTEN", ls, arg0=8)
    pairs = []
    for _ in range(2):
        cs, _, cfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
        assert c.call("CONNECT", cs, payload=inet("127.0.0.1", port))[0] == 0
        a, _, afd = c.call("ACCEPT", ls)
        pairs.append((cs, cfd, a, afd))
    (bad, badfd, bad_a, bad_afd), (ok, okfd, ok_a, ok_afd) = pairs
    c.put_u64(bad, SLOT_TX_TAIL, 10 ** 12)
    os.write(badfd, b"k")
    _wait(lambda: c.u32(bad_a, SLOT_STATE) & S_TX_CLOSED, "the peer to see the reset")
    assert c.u32(bad_a, SLOT_ERROR) == errno.ECONNRESET
    assert ctl(stackd, "stats")["apps"][0]["resets"] >= 1
    c.send(ok, okfd, b"still fine")
    assert _wait(lambda: c.recv(ok_a), "the other connection") == b"still fine"
    for fd in (lfd, badfd, bad_afd, okfd, ok_afd):
        os.close(fd)
    c.close()


def test_privileged_port_needs_root(stackd):
    """sluice-stackd runs as root; it must not bind a port below 1024 for a program that could not."""
    os.chmod(stackd, 0o755)  # the temp dir is 0700; stack.sock itself is 0666
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            c = Chan(stackd, "kernel")
            s, _, fd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
            rc = c.call("BIND", s, payload=inet("127.0.0.1", 81))[0]
            os.write(w, str(rc).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    got = os.read(r, 64)
    os.close(r)
    assert os.waitpid(pid, 0)[1] == 0
    assert int(got) == -errno.EACCES


def test_child_joins_its_parent_program(stackd):
    """A second channel with the region's token joins the same program (what a thread or a forked
    child does); a wrong token is refused. The program goes when its last channel and socket go."""
    c = Chan(stackd, "shm")
    s, _, fd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    t = Chan(stackd, "shm", token=c.token)
    assert t.map is None and t.app_id == c.app_id
    assert t.call("GETSOCKNAME", s)[0] == 0  # its sockets are the program's
    assert ctl(stackd, "status")["apps"] == 1
    c.close()
    assert ctl(stackd, "status")["apps"] == 1
    t.close()
    assert ctl(stackd, "status")["sockets"] == 1  # the socket is still open
    os.close(fd)


SERVICE_GONE_CLIENT = r"""
import errno, socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
print("ready", flush=True)
try:
    c.recv(10)                          # blocks: nothing is ever sent
    print("recv returned", flush=True)
except OSError as e:
    print("recv:", errno.errorcode[e.errno], flush=True)
try:
    socket.socket()
    print("socket: ok", flush=True)
except OSError as e:
    print("socket:", errno.errorcode[e.errno], flush=True)
"""


@pytest.mark.parametrize("stack", ["kernel", "shm"])
def test_service_killed_under_a_blocked_call(build_dir, socket_dir, stack):
    """sluice-stackd killed (-9) while a program is blocked in recv(): the call fails at once with a
    clear errno instead of hanging, new sockets fail with ENETDOWN, and the shim says why on stderr."""
    binary = build_dir / "src" / "stack" / "sluice-stackd"
    p = subprocess.Popen([str(binary), "--socket-dir", str(socket_dir)], stderr=subprocess.PIPE, text=True)
    assert "ready" in p.stderr.readline()
    env = dict(os.environ, SLUICE_STACK=stack, SLUICE_SOCKET_DIR=str(socket_dir), **shim_preload(build_dir))
    app = subprocess.Popen([sys.executable, "-c", SERVICE_GONE_CLIENT], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert app.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        p.kill()
        p.wait()
        out, err = app.communicate(timeout=10)
        assert out.splitlines() == ["recv: ECONNRESET", "socket: ENETDOWN"], (out, err)
        assert "sluice-stackd" in err and "gone" in err, err
    finally:
        for q in (app, p):
            if q.poll() is None:
                q.kill()
                q.wait()
        p.stderr.close()
