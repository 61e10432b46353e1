"""sluice-stackd (docs/sockets.md) spoken to directly, without the shim: its control API, every way
a program can misuse stack.sock or its region, and that nothing it gives out is leaked. The shim and
real programs are in test_sockets.py."""

import contextlib
import errno
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from stackproto import (DGRAM, DGRAM_HDR, REGION_APP_POLL_US, S_DIRECT, S_RX_EOF, S_TX_CLOSED, SL_SK_VERSION, SLOT_ERROR,
                        SLOT_RD_TOKEN, SLOT_RX_HEAD, SLOT_RX_OPTS, SLOT_RX_SPIN, SLOT_RX_TAIL, SLOT_STATE, SLOT_TX_TAIL,
                        Chan, Direct, ctl, inet, shim_preload)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _stackd(build_dir, socket_dir, direct):
    binary = build_dir / "src" / "stack" / "sluice-stackd"
    if not binary.exists():
        pytest.fail(f"{binary} is not built (make build)")
    p = subprocess.Popen([str(binary), "--socket-dir", str(socket_dir), "--slots", "32", "--ring-kb", "64",
                          *([] if direct else ["--no-direct"])],
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
        with open(f"/proc/{p.pid}/maps") as f:
            assert "sluice-conn" not in f.read(), "a direct connection's memfd is still mapped"
    finally:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stderr.close()
    assert not os.path.exists(os.path.join(str(socket_dir), "stack.sock")), "stack.sock left behind"


@pytest.fixture
def stackd(build_dir, socket_dir):
    """--no-direct: these tests read and write the rings of the engine path (which programs with a
    rate limit keep); direct connections (sock.h "Direct connections") have `direct_stackd`."""
    with _stackd(build_dir, socket_dir, False) as d:
        yield d


@pytest.fixture
def direct_stackd(build_dir, socket_dir):
    with _stackd(build_dir, socket_dir, True) as d:
        yield d


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
    assert st["ok"] and st["pid"] > 0 and st["apps"] == 0 and st["poll_us"] == 0 and st["direct"] is False
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


def test_port_free_once_closed(stackd):
    """close() of a listener frees its port at once, as the kernel's does: a program that closes and
    binds the port again (iperf3 -s between tests) must not get EADDRINUSE because the engine has not
    served the hang-up of the old placeholder yet."""
    c = Chan(stackd, "shm")
    port = _port()
    s, _, fd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    assert c.call("BIND", s, payload=inet("127.0.0.1", port))[0] == 0
    pid = ctl(stackd, "status")["pid"]
    for _ in range(3):
        assert c.call("LISTEN", s, arg0=4)[0] == 0
        s2, _, fd2 = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
        # The engine stopped meanwhile, so that it finds the BIND before the hang-up in one turn, as a
        # busy engine does (the BIND goes first here only to make that order certain).
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(0.2, os.kill, (pid, signal.SIGCONT)).start()
        threading.Timer(0.1, os.close, (fd,)).start()
        assert c.call("BIND", s2, payload=inet("127.0.0.1", port))[0] == 0
        s, fd = s2, fd2
    os.close(fd)
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
    r = c.call("HELLO", arg0=2, payload=b"\x01\0\0\0" + b"\0" * 52)[0]  # version 1: records without control
    assert r == -errno.EPROTO
    r = c.call("HELLO", arg0=2, payload=struct.pack("<I", SL_SK_VERSION) + b"\0" * 4 + b"\x07" * 16 + b"\0" * 32)[0]
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


def _dgram(payload, dest=b"", ver=1, has=0, ttl=0, tos=0, spec_dst=b"\0" * 4, ts=0):
    """A datagram record for a send ring (sock.h), its control area as given, padded to 8."""
    rec = DGRAM.pack(len(payload), len(dest), 0, dest.ljust(28, b"\0"), 0, ver, has, ttl, tos, 0, 0, 0, 0, spec_dst,
                     b"\0" * 4, b"\0" * 16, ts) + payload
    return rec + b"\0" * (-len(rec) % 8)


def _dgrams(raw):
    """The records of receive-ring bytes: [(payload, source port, control fields)]."""
    out = []
    while len(raw) >= DGRAM_HDR:
        f = DGRAM.unpack_from(raw)
        n, alen = f[0], f[1]
        ctl = dict(zip(("ver", "has", "ttl", "tos", "hoplimit", "tclass", "ifindex4", "ifindex6", "spec_dst", "addr4",
                        "addr6", "ts"), f[5:]))
        out.append((raw[DGRAM_HDR:DGRAM_HDR + n], struct.unpack(">H", f[3][2:4])[0] if alen else None, ctl))
        raw = raw[DGRAM_HDR + n + (-n % 8):]
    return out


@pytest.mark.parametrize("stack", ["shm", "kernel"])
def test_forged_datagram_control_area(stackd, stack):
    """The control area of a send record (sock.h "Control messages") is read from memory the program
    writes: a version the engine does not know, bits it does not know, a TTL of 0 and a time stamp are
    ignored; a source address (IP_PKTINFO) that is not this host's fails as the kernel's sendmsg does
    (ENETUNREACH, as the socket's pending error). The receiving record carries what the receive options ask
    for, from the kernel's cmsgs or made up by shm alike, and the engine goes on serving."""
    c = Chan(stackd, stack)
    r, _, rfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_DGRAM)
    s, _, sfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_DGRAM)
    rport, sport = _port(), _port()
    assert c.call("BIND", r, payload=inet("127.0.0.1", rport))[0] == 0
    assert c.call("BIND", s, payload=inet("127.0.0.1", sport))[0] == 0
    for opt in (8, 12, 13):  # IP_PKTINFO, IP_RECVTTL, IP_RECVTOS
        assert c.call("SETSOCKOPT", r, arg0=socket.IPPROTO_IP, arg1=opt, payload=struct.pack("<i", 1))[0] == 0
    assert c.u32(r, SLOT_RX_OPTS) == 0x07  # SL_SK_O_PKTINFO | RECVTTL | RECVTOS
    ttl = int(open("/proc/sys/net/ipv4/ip_default_ttl").read())
    dest = inet("127.0.0.1", rport)
    c.send(s, sfd, _dgram(b"one", dest, ver=0x7777, has=0xffff, ttl=3, tos=9)
           + _dgram(b"two", dest, has=0xffff, ttl=0, tos=0x28, ts=12345)
           + _dgram(b"bad", dest, has=0x01, spec_dst=socket.inet_aton("192.0.2.1"))
           + _dgram(b"three", dest, has=0x06, ttl=9, tos=0))
    got = []
    _wait(lambda: got.extend(_dgrams(c.recv(r))) or len(got) >= 3, "three datagrams")
    assert [(p, port, x["ttl"], x["tos"]) for p, port, x in got] == [
        (b"one", sport, ttl, 0), (b"two", sport, ttl, 0x28), (b"three", sport, 9, 0)], got
    lo = socket.inet_aton("127.0.0.1")
    for _, _, x in got:
        assert x["ver"] == 1 and x["has"] == 0x07, x  # PKTINFO, TTL, TOS; no time stamp (not asked)
        assert (x["ifindex4"], x["spec_dst"], x["addr4"]) == (1, lo, lo), x
    _wait(lambda: c.u32(s, SLOT_ERROR) == errno.ENETUNREACH, "ENETUNREACH for the source address not of this host")
    assert ctl(stackd, "status")["ok"]
    for fd in (rfd, sfd):
        os.close(fd)
    c.close()


def _read_token(fd):
    os.set_blocking(fd, True)
    return os.read(fd, 1)


def test_direct_connection(direct_stackd):
    """sock.h "Direct connections": both ends of one owner's connection get a memfd of their own two
    halves; a sender puts bytes straight into the peer's receive ring and the token into the peer's
    placeholder through the engine end it was given; the engine only says the end."""
    c = Chan(direct_stackd, "shm")
    assert ctl(direct_stackd, "status")["direct"] is True
    ls, lfd, cs, cfd, a, afd, _ = _connected(c)
    assert c.u32(cs, SLOT_STATE) & S_DIRECT and c.u32(a, SLOT_STATE) & S_DIRECT
    dc, da = Direct(c, cs), Direct(c, a)
    assert (dc.half, da.half) == (0, 1)
    dc.send(b"hello direct")
    assert _read_token(afd) == b"t" and da.recv() == b"hello direct"
    da.send(b"back")
    assert _read_token(cfd) == b"t" and dc.recv() == b"back"
    socks = {k["slot"]: k for k in ctl(direct_stackd, "sockets")["sockets"]}
    assert socks[cs]["direct"] and socks[a]["direct"], socks
    assert (socks[cs]["tx_bytes"], socks[a]["rx_bytes"], socks[a]["tx_bytes"]) == (12, 12, 4), socks
    assert ctl(direct_stackd, "stats")["apps"][0]["tx_bytes"] == 16
    assert c.call("SHUTDOWN", cs, arg0=socket.SHUT_WR)[0] == 0
    _wait(lambda: da.u32(SLOT_STATE) & S_RX_EOF, "the end in the server's half")
    assert os.read(afd, 16) == b""  # and on its placeholder
    assert not c.u32(a, SLOT_STATE) & S_RX_EOF  # the region slot is no longer written
    for fd in (lfd, cfd, afd):
        os.close(fd)
    dc.close()
    da.close()
    c.close()


def test_direct_forged_indices_stay_in_that_connection(direct_stackd):
    """The two ends of a direct connection index its rings themselves, so the engine, which cannot
    tell a forged index from one moving under it, only ever uses them clamped: indices forged both
    ways and kicks leave it serving, with its figures in range, and the program's other connection
    working (the shim's own checks are test_direct_hostile_peer_cannot_hang_the_shim)."""
    c = Chan(direct_stackd, "shm")
    port = _port()
    ls, _, lfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    c.call("BIND", ls, payload=inet("127.0.0.1", port))
    c.call("LISTEN", ls, arg0=8)
    ends, fds = [], [lfd]
    for _ in range(2):
        cs, _, cfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
        assert c.call("CONNECT", cs, payload=inet("127.0.0.1", port))[0] == 0
        a, _, afd = c.call("ACCEPT", ls)
        ends.append((cs, a, Direct(c, cs), Direct(c, a)))
        fds += [cfd, afd]
    (bad_cs, bad_as, bad, bad_a), (_, _, ok, ok_a) = ends
    bad.put_u64(SLOT_RX_TAIL, 10 ** 12, peer=True)
    bad.put_u64(SLOT_RX_HEAD, 7 * 10 ** 12)
    for fd in fds[1:3]:
        os.write(fd, b"k")  # kicks: the engine looks at both ends
    c.call("KICK", bad_cs)
    socks = {k["slot"]: k for k in ctl(direct_stackd, "sockets")["sockets"]}
    for slot in (bad_cs, bad_as):
        assert socks[slot]["tx_queued"] <= c.ring_bytes and socks[slot]["rx_queued"] <= c.ring_bytes, socks[slot]
    ok.send(b"still fine")
    assert _read_token(fds[4]) == b"t" and ok_a.recv() == b"still fine"
    for fd in fds:
        os.close(fd)
    for d in (bad, bad_a, ok, ok_a):
        d.close()
    c.close()


def test_direct_not_for_a_rate_limited_program(direct_stackd):
    """The engine meters only what it moves: a program with a rate limit keeps the engine path."""
    c = Chan(direct_stackd, "shm", rate=10 ** 9)
    ls, lfd, cs, cfd, a, afd, _ = _connected(c)
    assert not c.u32(cs, SLOT_STATE) & S_DIRECT and not c.u32(a, SLOT_STATE) & S_DIRECT
    assert c.call("ATTACH", cs)[0] == -errno.EINVAL
    c.send(cs, cfd, b"metered")
    assert _recv_n(c, a, 7) == b"metered"
    for fd in (lfd, cfd, afd):
        os.close(fd)
    c.close()


HOSTILE_PEER_CLIENT = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
for _ in range(2):
    print(c.recv(100).decode(), flush=True)
try:
    c.recv(100)
    print("recv returned", flush=True)
except ConnectionResetError:
    print("reset", flush=True)
"""


@contextlib.contextmanager
def _program_with_direct_peer(direct_stackd, build_dir, script):
    """A Python program under the shim that connects to a listener of this test's channel; yields the
    channel, the test's end of the direct connection (Direct), a reader of the program's stdout lines
    and the process (its stdin a pipe). Everything is closed, and the program killed, on the way out."""
    c = Chan(direct_stackd, "shm")
    port = _port()
    ls, _, lfd = c.call("SOCKET", arg0=socket.AF_INET, arg1=socket.SOCK_STREAM)
    c.call("BIND", ls, payload=inet("127.0.0.1", port))
    c.call("LISTEN", ls, arg0=1)
    env = dict(os.environ, SLUICE_STACK="shm", SLUICE_SOCKET_DIR=direct_stackd, **shim_preload(build_dir))
    app = subprocess.Popen([sys.executable, "-c", script, str(port)], env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fds, d = [lfd], None
    try:
        a, _, afd = _wait(lambda: (lambda r: r[0] >= 0 and r)(c.call("ACCEPT", ls)), "accept")
        fds.append(afd)

        def line():
            if not select.select([app.stdout], [], [], 10)[0]:
                raise AssertionError("the program under the shim hangs")
            return app.stdout.readline().strip()
        assert line() == "connected"
        d = Direct(c, a)
        yield c, d, line, app
    finally:
        if app.poll() is None:
            app.kill()
        app.wait()
        for f in (app.stdin, app.stdout, app.stderr):
            f.close()
        for fd in fds:
            os.close(fd)
        if d:
            d.close()
        c.close()


def test_direct_hostile_peer_cannot_hang_the_shim(direct_stackd, build_dir):
    """A real program under the shim, connected to a peer that breaks the rules of the connection
    memfd it shares: a token left WRITING for good costs the program ~50 ms, not a hang; a forged
    ring index is a reset of that connection."""
    with _program_with_direct_peer(direct_stackd, build_dir, HOSTILE_PEER_CLIENT) as (c, d, line, app):
        d.send(b"first")
        assert line() == "first"
        d.put_u32(SLOT_RD_TOKEN, 2, peer=True)  # WRITING, and never PRESENT
        d.send(b"second", token=False)
        os.write(d.peer_fd, b"t")
        assert line() == "second"
        d.put_u64(SLOT_RX_TAIL, d.u64(SLOT_RX_HEAD, peer=True) + 10 ** 9, peer=True)
        os.write(d.peer_fd, b"t")
        assert line() == "reset"
        assert app.wait(10) == 0, app.stderr.read()


STALE_TOKEN_CLIENT = r"""
import select, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.setblocking(False)
ep = select.epoll()
ep.register(c.fileno(), select.EPOLLIN)
print("connected", flush=True)
sys.stdin.readline()  # a token byte is in the placeholder, nothing in the ring
print("events", len(ep.poll(0.3)), flush=True)
sys.stdin.readline()  # data came, with its token
ev = ep.poll(10)
print("events", len(ev), c.recv(100).decode(), flush=True)
"""


def test_stale_token_is_not_reported(direct_stackd, build_dir):
    """A token byte with nothing in the ring behind it -- what a token writer descheduled past the
    reader's 50 ms give-up leaves (sock.h) -- is not reported by epoll: wrk counts the EAGAIN of such
    a wake-up as a read error. Real data afterwards is."""
    with _program_with_direct_peer(direct_stackd, build_dir, STALE_TOKEN_CLIENT) as (c, d, line, app):
        os.write(d.peer_fd, b"t")  # the late writer's byte, and its PRESENT
        d.put_u32(SLOT_RD_TOKEN, 1, peer=True)
        app.stdin.write("\n")
        app.stdin.flush()
        assert line() == "events 0", "a token with no data behind it was reported readable"
        d.send(b"data")
        app.stdin.write("\n")
        app.stdin.flush()
        assert line() == "events 1 data"
        assert app.wait(10) == 0, app.stderr.read()


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
import errno, os, socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
s.send(b"x"); c.recv(1)                 # both ends in use: under shm each holds the other's engine end
if sys.argv[1] == "fork" and os.fork():
    os._exit(0)                         # the parent goes, and the shim's thread with it: the child goes on
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


@pytest.mark.parametrize("stack,fork", [("kernel", False), ("shm", False), ("shm", True)])
def test_service_killed_under_a_blocked_call(build_dir, socket_dir, stack, fork):
    """sluice-stackd killed (-9) while a program is blocked in recv(): the call fails at once with a
    clear errno instead of hanging, new sockets fail with ENETDOWN, and the shim says why on stderr.
    Under shm the two ends are direct and each holds its peer's engine end, which alone would keep the
    placeholders up: the shim's thread shuts them down, and a fork child whose parent (and the
    parent's thread) is gone starts its own."""
    binary = build_dir / "src" / "stack" / "sluice-stackd"
    p = subprocess.Popen([str(binary), "--socket-dir", str(socket_dir)], stderr=subprocess.PIPE, text=True)
    assert "ready" in p.stderr.readline()
    env = dict(os.environ, SLUICE_STACK=stack, SLUICE_SOCKET_DIR=str(socket_dir), **shim_preload(build_dir))
    app = subprocess.Popen([sys.executable, "-c", SERVICE_GONE_CLIENT, "fork" if fork else "-"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert app.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        p.kill()
        p.wait()
        out, err = app.communicate(timeout=10)
        assert out.splitlines() == ["recv: ECONNRESET", "socket: ENETDOWN"], (out, err)
        assert "sluice-stackd" in err and "gone" in err, err
    finally:
        try:
            os.killpg(app.pid, signal.SIGKILL)  # the fork child too
        except ProcessLookupError:
            pass
        for q in (app, p):
            if q.poll() is None:
                q.kill()
            q.wait()
        p.stderr.close()
