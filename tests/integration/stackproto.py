"""A small client of sluice-stackd's stack.sock (include/sluice/sock.h) for protocol tests: it
speaks NQEs and reads and writes a socket's rings in the region directly, as the shim does, so tests
can also do what a broken or hostile shim would."""

import array
import json
import mmap
import os
import socket
import struct

NQE = struct.Struct("<BBHIiIQQ")
OPS = dict(HELLO=1, SOCKET=2, BIND=3, LISTEN=4, ACCEPT=5, CONNECT=6, SHUTDOWN=7, GETSOCKNAME=8,
           GETPEERNAME=9, SETSOCKOPT=10, GETSOCKOPT=11, STATS=12, KICK=14, ATTACH=15)
STACKS = dict(kernel=1, shm=2, auto=3)
REGION_HDR = 4096
SLOT_RX_HEAD, SLOT_RX_TAIL, SLOT_TX_HEAD, SLOT_TX_TAIL = 128, 192, 256, 320
SLOT_STATE, SLOT_ERROR, SLOT_RD_TOKEN, SLOT_TX_KICK, SLOT_RX_WANTED = 4, 8, 64, 68, 72
S_RX_EOF, S_TX_CLOSED = 0x08, 0x10
REGION_ENGINE_AWAKE, REGION_TX_DIRTY = 56, 60  # sock.h "Kicks"
SLOT_RX_SPIN, REGION_APP_POLL_US = 76, 64     # sock.h "Polling receivers"
S_DIRECT, SLOT_PEER_TOKENS = 0x80, 80         # sock.h "Direct connections"
SL_SK_VERSION = 2                             # sock.h: HELLO's version, the region's
SLOT_RX_OPTS = 24                             # sock.h "Control messages": the receive options on
# a datagram record's header (struct sl_sk_dgram, 88 bytes): len, addr_len, pad, addr, pad1, then the
# control area (struct sl_sk_dctl): ver, has, ttl, tos, hoplimit, tclass, ifindex4, ifindex6, spec_dst,
# addr4, addr6, ts_ns
DGRAM = struct.Struct("<IHH28sIHHBBBBII4s4s16sq")
DGRAM_HDR = 88


def inet(host, port):
    return struct.pack("<HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))


def ctl(sockdir, cmd):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(os.path.join(sockdir, "stack-ctl.sock"))
        s.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


class Chan:
    """One channel (a thread's queue set) and, for a new program, its mapped region."""

    def __init__(self, sockdir, stack="shm", token=b"\0" * 16, rate=0, name=b"proto", hello=True):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(5)
        self.s.connect(os.path.join(sockdir, "stack.sock"))
        self.seq = 0
        self.map = None
        if hello:
            r, _, fd = self.call("HELLO", arg0=STACKS[stack], arg1=rate,
                                 payload=struct.pack("<II16s32s", SL_SK_VERSION, os.getpid(), token, name))
            assert r == 0, r
            self.size, self.app_id = self.last[6], self.last[7]
            if fd is not None:
                self.map = mmap.mmap(fd, self.size)
                os.close(fd)
                self.ring_bytes = struct.unpack_from("<I", self.map, 20)[0]
                self.slot_bytes = struct.unpack_from("<Q", self.map, 24)[0]
                self.token = bytes(self.map[40:56])

    def close(self):
        self.s.close()
        if self.map is not None:
            self.map.close()

    def call(self, op, sock=0, arg0=0, arg1=0, payload=b""):
        self.seq += 1
        self.s.sendmsg([NQE.pack(OPS[op], 0, len(payload), sock, 0, self.seq, arg0, arg1) + payload])
        fds = array.array("i")
        msg, anc, _, _ = self.s.recvmsg(32 + 1024, socket.CMSG_SPACE(4))
        for lvl, typ, data in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(data[:4])
        q = NQE.unpack(msg[:32])
        self.last = q
        assert q[5] == self.seq and q[0] == OPS[op], q
        return q[4], msg[32:32 + q[2]], (fds[0] if fds else None)

    # -- a socket's slot
    def slot(self, i):
        return REGION_HDR + i * self.slot_bytes

    def u32(self, i, off):
        return struct.unpack_from("<I", self.map, self.slot(i) + off)[0]

    def u64(self, i, off):
        return struct.unpack_from("<Q", self.map, self.slot(i) + off)[0]

    def put_u64(self, i, off, v):
        struct.pack_into("<Q", self.map, self.slot(i) + off, v)

    def send(self, i, fd, data, kick=True):
        """Put data in slot i's send ring and kick through its placeholder fd (as the shim does when
        the engine sleeps); kick=False: only flag it (tx_kick, the region's tx_dirty) as for an awake one."""
        tail = self.u64(i, SLOT_TX_TAIL)
        base = self.slot(i) + 4096 + self.ring_bytes
        for k, b in enumerate(data):
            self.map[base + (tail + k) % self.ring_bytes] = b
        self.put_u64(i, SLOT_TX_TAIL, tail + len(data))
        if kick:
            os.write(fd, b"k")
        else:
            struct.pack_into("<I", self.map, self.slot(i) + SLOT_TX_KICK, 1)
            struct.pack_into("<I", self.map, REGION_TX_DIRTY, 1)

    def put_u32(self, i, off, v):
        struct.pack_into("<I", self.map, self.slot(i) + off, v)

    def engine_awake(self):
        return struct.unpack_from("<I", self.map, REGION_ENGINE_AWAKE)[0]

    def recv(self, i):
        """What slot i's receive ring holds, taken."""
        head, tail = self.u64(i, SLOT_RX_HEAD), self.u64(i, SLOT_RX_TAIL)
        base = self.slot(i) + 4096
        out = bytes(self.map[base + (p % self.ring_bytes)] for p in range(head, tail))
        self.put_u64(i, SLOT_RX_HEAD, tail)
        return out


class Direct:
    """One end of a direct connection (sock.h "Direct connections"), attached as the shim does: its
    half of the connection memfd, and the peer's placeholder engine end for the peer's tokens."""

    def __init__(self, chan, slot):
        self.c = chan
        self.half, _, mfd = chan.call("ATTACH", slot, arg0=0)
        assert self.half in (0, 1) and mfd is not None, (self.half, mfd)
        self.map = mmap.mmap(mfd, 2 * chan.slot_bytes)
        os.close(mfd)
        r, _, self.peer_fd = chan.call("ATTACH", slot, arg0=1)
        assert r == 0 and self.peer_fd is not None, r
        self.mine, self.theirs = self.half * chan.slot_bytes, (1 - self.half) * chan.slot_bytes

    def close(self):
        os.close(self.peer_fd)
        self.map.close()

    def u32(self, off, peer=False):
        return struct.unpack_from("<I", self.map, (self.theirs if peer else self.mine) + off)[0]

    def u64(self, off, peer=False):
        return struct.unpack_from("<Q", self.map, (self.theirs if peer else self.mine) + off)[0]

    def put_u32(self, off, v, peer=False):
        struct.pack_into("<I", self.map, (self.theirs if peer else self.mine) + off, v)

    def put_u64(self, off, v, peer=False):
        struct.pack_into("<Q", self.map, (self.theirs if peer else self.mine) + off, v)

    def send(self, data, token=True):
        """Into the peer's receive ring; then the peer's token as its sender must put it (no CAS
        here: a test thread is the only writer it races with)."""
        tail, rb = self.u64(SLOT_RX_TAIL, peer=True), self.c.ring_bytes
        base = self.theirs + 4096
        for k, b in enumerate(data):
            self.map[base + (tail + k) % rb] = b
        self.put_u64(SLOT_RX_TAIL, tail + len(data), peer=True)
        if token and self.u32(SLOT_RD_TOKEN, peer=True) == 0:
            os.write(self.peer_fd, b"t")
            self.put_u32(SLOT_RD_TOKEN, 1, peer=True)

    def recv(self):
        head, tail, rb = self.u64(SLOT_RX_HEAD), self.u64(SLOT_RX_TAIL), self.c.ring_bytes
        out = bytes(self.map[self.mine + 4096 + (p % rb)] for p in range(head, tail))
        self.put_u64(SLOT_RX_HEAD, tail)
        return out


def shim_preload(build_dir):
    """LD_PRELOAD for the build's shim. An ASan/UBSan build's shim needs the ASan runtime loaded
    first into an uninstrumented program (python, redis): it goes in front, leak checks off."""
    import subprocess
    shim = os.path.join(str(build_dir), "src", "sock", "libsluice-sock.so")
    with open(shim, "rb") as f:
        asan = b"libasan.so" in f.read()
    if not asan:
        return {"LD_PRELOAD": shim}
    runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return {"LD_PRELOAD": f"{runtime}:{shim}", "ASAN_OPTIONS": "detect_leaks=0"}
