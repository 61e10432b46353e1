"""Malformed input on both sluiced sockets gets an error and a closed connection, never a crash.

NF socket: raw AF_UNIX messages built with struct per include/sluice/abi.h (128-byte messages,
header <IHH magic, version, type). Control socket: newline-delimited JSON (docs/api.md).
"""

import array
import os
import socket
import struct
import threading
import time

import pytest

from harness import (SL_ERR, SL_MAGIC, SL_MSG, SL_MSG_SIZE, SL_VERSION, Ctl, base_config, sluice,  # noqa: F401
                     wait_until, workdir)

# ---------------------------------------------------------------- NF socket helpers


def msg(mtype, body=b"", magic=SL_MAGIC, version=SL_VERSION):
    m = struct.pack("<IHH", magic, version, mtype) + body
    assert len(m) <= SL_MSG_SIZE
    return m.ljust(SL_MSG_SIZE, b"\0")


def name_field(s):
    b = s.encode() if isinstance(s, str) else s
    return b.ljust(32, b"\0")[:32]


def init_msg(name="raw", service="raw", wakeup=0, batch=32, timeout_us=100, **kw):
    body = name_field(name) + name_field(service) + struct.pack("<B3xIII", wakeup, batch, timeout_us, os.getpid())
    return msg(SL_MSG["INIT"], body, **kw)


def recv_msg(s, timeout=10.0):
    """(bytes, fds) of one whole message; (partial bytes, fds) at EOF."""
    s.settimeout(timeout)
    data, fds = b"", []
    while len(data) < SL_MSG_SIZE:
        try:
            chunk, anc, _flags, _addr = s.recvmsg(SL_MSG_SIZE - len(data), socket.CMSG_SPACE(8 * 4))
        except ConnectionResetError:
            break
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(cdata[: len(cdata) - (len(cdata) % a.itemsize)])
                fds.extend(a)
        if not chunk:
            break
        data += chunk
    return data, fds


def mtype(m):
    return struct.unpack_from("<IHH", m)[2]


def disconnect_code(m):
    assert len(m) == SL_MSG_SIZE, f"expected a whole message, got {len(m)} bytes"
    magic, version, t = struct.unpack_from("<IHH", m)
    assert (magic, version, t) == (SL_MAGIC, SL_VERSION, SL_MSG["DISCONNECT"]), (hex(magic), version, t)
    code = struct.unpack_from("<I", m, 8)[0]
    reason = m[12:12 + 96].split(b"\0", 1)[0].decode(errors="replace")
    return code, reason


class RawNF:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(str(path))
        hello, fds = recv_msg(self.s)
        assert len(hello) == SL_MSG_SIZE and mtype(hello) == SL_MSG["HELLO"] and not fds
        self.hello = hello

    def send(self, data, fds=()):
        if fds:
            self.s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.s.sendall(data)

    def expect_disconnect(self, code, timeout=10.0):
        m, fds = recv_msg(self.s, timeout)
        for fd in fds:
            os.close(fd)
        got, reason = disconnect_code(m)
        assert got == code, f"DISCONNECT code {got} ({reason}), expected {code}"
        self.expect_closed()
        return reason

    def expect_closed(self, timeout=5.0):
        self.s.settimeout(timeout)
        try:
            rest = self.s.recv(4096)
        except ConnectionResetError:
            rest = b""
        assert rest == b"", f"connection not closed (got {len(rest)} more bytes)"

    def attach(self, name):
        """Complete a real attach; returns (connected message, fds received)."""
        self.send(init_msg(name, name))
        all_fds = []
        while True:
            m, fds = recv_msg(self.s)
            all_fds += fds
            assert len(m) == SL_MSG_SIZE, f"EOF during attach after {len(all_fds)} fds"
            if mtype(m) == SL_MSG["CONNECTED"]:
                return m, all_fds
            assert mtype(m) in (SL_MSG["ADD_REGION"], SL_MSG["ADD_RING"]), mtype(m)

    def close(self):
        self.s.close()


def alive_and_serving(sluice):
    assert sluice.alive(), sluice.log()[-2000:]
    assert sluice.ok("status")["ok"] is True


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def plain(sluice):  # noqa: F811
    """sluiced with a null source feeding chain c=[f] -> sink1; sink2 also exists (TX only)."""
    sluice.start(base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0", "chain": "c"},
               {"name": "sink1", "vdev": "net_null1"},
               {"name": "sink2", "vdev": "net_null2"}],
        chains=[{"name": "c", "nfs": ["f"], "exit": "sink1"}],
        nfs=["f"], max_nfs=8))
    return sluice


BAD_NF_MESSAGES = {
    "garbage": (os.urandom(SL_MSG_SIZE - 4) + b"\xde\xad\xbe\xef", SL_ERR["MAGIC"]),
    "wrong_magic": (init_msg(magic=0x12345678), SL_ERR["MAGIC"]),
    "wrong_version": (init_msg(version=2), SL_ERR["VERSION"]),
    "type_zero": (msg(0), SL_ERR["TYPE"]),
    "type_unknown": (msg(77), SL_ERR["TYPE"]),
    "connected_from_nf": (msg(SL_MSG["CONNECTED"]), SL_ERR["ORDER"]),
    "hello_from_nf": (msg(SL_MSG["HELLO"], b"\0" * 8 + name_field("x")), SL_ERR["ORDER"]),
    "name_unterminated": (init_msg(name=b"n" * 32), SL_ERR["FIELD"]),
    "name_bad_chars": (init_msg(name="bad/name"), SL_ERR["FIELD"]),
    "name_space": (init_msg(name="bad name"), SL_ERR["FIELD"]),
    "name_empty": (init_msg(name=""), SL_ERR["FIELD"]),
    "service_bad_chars": (init_msg(service="svc\n"), SL_ERR["FIELD"]),
    "wakeup_out_of_range": (init_msg(wakeup=9), SL_ERR["FIELD"]),
    "batch_zero": (init_msg(batch=0), SL_ERR["FIELD"]),
}


def test_nf_socket_bad_messages(plain):
    for case, (data, code) in BAD_NF_MESSAGES.items():
        nf = RawNF(plain.nf_sock)
        try:
            # split the message across two writes: sluiced must reassemble it
            nf.send(data[:50])
            time.sleep(0.01)
            nf.send(data[50:])
            try:
                nf.expect_disconnect(code)
            except AssertionError as e:
                raise AssertionError(f"case {case}: {e}") from None
        finally:
            nf.close()
        assert plain.alive(), f"sluiced died on case {case}"
    # a message carrying a file descriptor
    nf = RawNF(plain.nf_sock)
    r, w = os.pipe()
    try:
        nf.send(init_msg("withfd", "withfd"), fds=[r])
        nf.expect_disconnect(SL_ERR["FDS"])
    finally:
        os.close(r)
        os.close(w)
        nf.close()
    alive_and_serving(plain)
    assert plain.attached() == set()
    plain.start_nf("fwd", "f")
    assert plain.attached() == {"f"}


def test_nf_socket_half_message_and_abrupt_close(plain):
    # half a message, then close: sluiced drops the connection and keeps going
    for n in (0, 1, 8, 64, 127):
        nf = RawNF(plain.nf_sock)
        nf.send(init_msg()[:n]) if n else None
        nf.close()
    # half a message and a half-close: the connection is closed (no attach happens)
    nf = RawNF(plain.nf_sock)
    nf.send(init_msg()[:60])
    nf.s.shutdown(socket.SHUT_WR)
    m, _ = recv_msg(nf.s, timeout=5)
    assert len(m) in (0, SL_MSG_SIZE)
    if m:
        assert disconnect_code(m)[0] == SL_ERR["TRUNCATED"]
    nf.close()
    # a connection that closes right after a whole, valid INIT
    nf = RawNF(plain.nf_sock)
    nf.send(init_msg("gone", "gone"))
    nf.close()
    wait_until(lambda: "gone" not in plain.attached(), 5, "the closed NF to be gone")
    alive_and_serving(plain)
    plain.start_nf("fwd", "f")


def test_nf_socket_state_errors(plain):
    # a raw NF completes a real attach (region + 2 rings + CONNECTED)
    a = RawNF(plain.nf_sock)
    connected, fds = a.attach("rawnf")
    try:
        assert len(fds) == 1 + 2 * 2, f"expected region + 2x(ring, eventfd) fds, got {len(fds)}"
        assert "rawnf" in plain.attached()
        # the same name again is refused
        b = RawNF(plain.nf_sock)
        b.send(init_msg("rawnf", "x"))
        b.expect_disconnect(SL_ERR["NAME"])
        b.close()
        # INIT again on an attached connection: out of order, and the NF is detached
        a.send(init_msg("rawnf", "rawnf"))
        a.expect_disconnect(SL_ERR["ORDER"])
        wait_until(lambda: "rawnf" not in plain.attached(), 5, "rawnf detached")
    finally:
        for fd in fds:
            os.close(fd)
        a.close()
    # an NF that says DISCONNECT itself is detached without a reply
    c = RawNF(plain.nf_sock)
    cfds = c.attach("polite")[1]
    body = struct.pack("<I", SL_ERR["SHUTDOWN"]) + b"bye".ljust(96, b"\0")
    c.send(msg(SL_MSG["DISCONNECT"], body))
    c.expect_closed()
    for fd in cfds:
        os.close(fd)
    c.close()
    wait_until(lambda: plain.attached() == set(), 5, "polite NF detached")
    # max_nfs (8) counts connections still in the handshake: the 9th is refused with LIMIT
    held = [RawNF(plain.nf_sock) for _ in range(8)]
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(plain.nf_sock))
        m, _ = recv_msg(s)
        assert disconnect_code(m)[0] == SL_ERR["LIMIT"]
        s.close()
    finally:
        for h in held:
            h.close()
    wait_until(lambda: plain.ok("status")["nf_count"] == 0, 5, "no NFs")
    pool = plain.stats()["pool"]
    assert pool["lent"] == 0
    plain.start_nf("fwd", "f")


def test_nf_socket_attach_timeout(plain):
    nf = RawNF(plain.nf_sock)  # HELLO read, INIT never sent
    t0 = time.monotonic()
    try:
        nf.expect_disconnect(SL_ERR["TIMEOUT"], timeout=10)
    finally:
        nf.close()
    assert time.monotonic() - t0 >= 4.0, "dropped before the 5 s attach timeout"
    alive_and_serving(plain)
    plain.start_nf("fwd", "f")


# ---------------------------------------------------------------- control socket


def err_of(resp):
    assert resp is not None and resp.get("ok") is False and isinstance(resp.get("error"), str), resp
    return resp["error"]


def test_control_malformed_requests(plain):
    with Ctl(plain.ctl_sock) as c:
        cases = [
            (b"this is not json\n", "invalid JSON"),
            (b"{\"cmd\": \"status\"\n", "invalid JSON"),
            (b"[1, 2, 3]\n", "object"),
            (b"\"status\"\n", ("object", "invalid JSON")),  # jansson rejects scalars at top level
            (b"42\n", ("object", "invalid JSON")),
            (b"{}\n", "'cmd'"),
            (b"{\"cmd\": 7}\n", "'cmd'"),
            (b"{\"cmd\": null}\n", "'cmd'"),
            (b"{\"cmd\": \"frobnicate\"}\n", "unknown command"),
            (b"{\"cmd\": \"status\", \"cmd\": \"ports\"}\n", "invalid JSON"),
            (b"\n", "invalid JSON"),
            (b"\x00\xff\xfe\n", "invalid JSON"),
        ]
        for line, needle in cases:
            c.send_raw(line)
            e = err_of(c.read_line())
            assert any(n in e for n in ((needle,) if isinstance(needle, str) else needle)), f"{line!r}: {e}"
        # still the same connection, still serving
        assert c.request("status")["ok"] is True
        # pipelined requests: one response each, in order
        c.send_raw(b'{"cmd":"ports"}\n{"cmd":"bogus"}\n{"cmd":"chains"}\n')
        r1, r2, r3 = c.read_line(), c.read_line(), c.read_line()
        assert "ports" in r1 and r2["ok"] is False and "chains" in r3


def test_control_overlong_line_and_abrupt_close(plain):
    with Ctl(plain.ctl_sock) as c:
        c.send_raw(b"{\"cmd\":\"" + b"x" * (16 * 1024 * 1024 + 1024))  # over the 16 MiB limit, no newline
        e = err_of(c.read_line())
        assert "longer than 16777216 bytes" in e, e
        assert c.at_eof(), "connection not closed after an over-long line"
    # a long line (the buffer grows past its first 64 KiB) is answered, and the connection stays
    with Ctl(plain.ctl_sock) as c:
        c.send_raw(b'{"cmd":"status","pad":"' + b"y" * (3 * 1024 * 1024) + b'"}\n')
        assert c.read_line()["ok"] is True
        c.send_raw(b'{"cmd":"status"}\n')
        assert c.read_line()["ok"] is True
    # close in the middle of a line, with and without a reset
    for i in range(10):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(plain.ctl_sock))
        s.sendall(b'{"cmd":"sta')
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # a client that sends a request and closes without reading the response
    for _ in range(10):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(plain.ctl_sock))
        s.sendall(b'{"cmd":"stats"}\n')
        s.close()
    alive_and_serving(plain)


def test_control_100_concurrent_connections(plain):
    conns, results, errors = [], [], []
    try:
        for _ in range(100):
            conns.append(Ctl(plain.ctl_sock, timeout=10))

        def one(c):
            try:
                try:
                    c.send_raw(b'{"cmd":"status"}\n')
                except BrokenPipeError:
                    pass  # refused at accept: the error line is already in our receive queue
                results.append(c.read_line())
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=one, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
    finally:
        for c in conns:
            c.close()
    ok = [r for r in results if r and r.get("ok") is True]
    refused = [r for r in results if r and r.get("ok") is False]
    assert len(ok) >= 32, f"only {len(ok)} of 100 connections served"
    for r in refused:
        assert "too many" in r["error"], r
    assert len(ok) + len(refused) + len(errors) == 100
    assert len(ok) + len(refused) == 100, f"{len(errors)} connections got no response: {errors[:3]}"
    # every slot is free again
    served = []
    held = []
    try:
        for _ in range(60):
            c = Ctl(plain.ctl_sock)
            held.append(c)
            served.append(c.request("status")["ok"])
    finally:
        for c in held:
            c.close()
    assert all(served), "control connection slots leaked"
    alive_and_serving(plain)


CHAIN_SET_ERRORS = [
    ({"nfs": ["f"], "exit": "sink1"}, "'name'"),
    ({"name": 5, "nfs": ["f"]}, "'name'"),
    ({"name": "c"}, "'nfs'"),
    ({"name": "c", "nfs": "f"}, "'nfs'"),
    ({"name": "c", "nfs": []}, "'nfs'"),
    ({"name": "c", "nfs": ["f", 3]}, "'nfs[1]'"),
    ({"name": "c", "nfs": ["f", "x" * 40]}, "'nfs[1]'"),
    ({"name": "c", "nfs": ["f"], "exit": "nosuch"}, "'exit'"),
    ({"name": "c", "nfs": ["f"], "exit": 1}, "'exit'"),
]

PORT_CHAIN_SET_ERRORS = [
    ({"chain": "c"}, "'port'"),
    ({"port": "nosuch", "chain": "c"}, "'port'"),
    ({"port": 0, "chain": "c"}, "'port'"),
    ({"port": "src", "chain": "nosuch"}, "'chain'"),
    ({"port": "src", "chain": ["c"]}, "'chain'"),
]


def test_control_bad_fields_name_the_field(plain):
    before = plain.ok("chains")["chains"]
    for fields, needle in CHAIN_SET_ERRORS:
        e = err_of(plain.request("chain_set", **fields))
        assert needle in e and e.startswith("chain_set"), f"{fields}: {e}"
    for fields, needle in PORT_CHAIN_SET_ERRORS:
        e = err_of(plain.request("port_chain_set", **fields))
        assert needle in e and e.startswith("port_chain_set"), f"{fields}: {e}"
    assert plain.ok("chains")["chains"] == before, "a failed command changed the chains"
    assert plain.port("src")["chain"] == "c"


@pytest.mark.parametrize("fields,needle", [
    ({"name": "", "nfs": ["f"]}, "'name'"),
    ({"name": "bad name", "nfs": ["f"]}, "'name'"),
    ({"name": "n" * 40, "nfs": ["f"]}, "'name'"),
    ({"name": "c2", "nfs": ["bad/svc"]}, "'nfs[0]'"),
    ({"name": "c2", "nfs": [""]}, "'nfs[0]'"),
])
def test_control_chain_set_rejects_invalid_names(plain, fields, needle):
    e = err_of(plain.request("chain_set", **fields))
    assert needle in e, e


def test_chain_set_replaces_chain_under_traffic(plain):
    plain.start_nf("fwd", "f", wakeup="block", batch=32, timeout_us=100)
    plain.start_nf("fwd", "g", wakeup="block", batch=32, timeout_us=100)
    tx = lambda name: plain.port(name)["tx_pkts"]  # noqa: E731
    wait_until(lambda: tx("sink1") > 1000, 10, "traffic to sink1")
    assert tx("sink2") == 0

    r = plain.ok("chain_set", name="c", nfs=["f", "g"], exit="sink2")
    assert r["chain"] == {"id": 0, "name": "c", "nfs": ["f", "g"], "exit": "sink2"}
    assert plain.port("src")["chain"] == "c"
    s1 = tx("sink1")
    wait_until(lambda: tx("sink2") > 1000, 10, "traffic to the new exit sink2")
    time.sleep(0.2)
    assert tx("sink1") == s1, "old exit still receives after the chain was replaced"
    assert plain.nf("g")["rx_pkts"] > 0, "the new second hop got nothing"

    # a new chain, then move the port to it; exit null drops as no_path
    r = plain.ok("chain_set", name="d", nfs=["g"], exit=None)
    assert r["chain"]["exit"] is None and r["chain"]["id"] == 1
    plain.ok("port_chain_set", port="src", chain="d")
    wait_until(lambda: plain.stats()["drops"]["no_path"] > 1000, 10, "no_path drops on an exit-less chain")
    s2 = tx("sink2")
    time.sleep(0.2)
    assert tx("sink2") == s2
    plain.ok("port_chain_set", port="src", chain=None)
    wait_until(lambda: (lambda p: p["free"] == p["mbufs"] and p["lent"] == 0)(plain.stats()["pool"]), 5,
               "pool drained")
    assert plain.stats()["drops"]["invalid_desc"] == 0
    alive_and_serving(plain)
