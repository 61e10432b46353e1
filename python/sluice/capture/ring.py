"""Reading a capture ring file (include/sluice/capture.h): a header page, then one byte ring per
sluiced worker, each holding records {len, wire_len, ts_ns, cap_len, point, action} + packet bytes.

The reader's only write is each ring's tail, after it has read the records before it. sluiced
publishes head after the records are written (a release store); on x86 a load of head followed by
loads of the records sees them whole."""

import mmap
import os
import struct

MAGIC = 0x50414353
VERSION = 1
HDR_SIZE = 4096
WRAP = 0xFFFFFFFF
HDR = struct.Struct("<6IQ")            # magic version nrings ring_size snaplen npoints tsc_hz
CTL_BASE, CTL_SIZE, TAIL_OFF = 64, 128, 64
CTL = struct.Struct("<5Q")             # head packets bytes lost lost_bytes
REC = struct.Struct("<IIQIBBH")        # len wire_len ts_ns cap_len point action pad
U64 = struct.Struct("<Q")


class RingError(Exception):
    """The file is not a capture ring, or a record in it is impossible (names what)."""


class CaptureRing:
    def __init__(self, path):
        self.path = path
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < HDR_SIZE:
                raise RingError(f"{path}: {size} bytes, shorter than a capture ring's header")
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        magic, version, self.nrings, self.ring_size, self.snaplen, self.npoints, _ = HDR.unpack_from(self.mm, 0)
        if magic != MAGIC or version != VERSION:
            raise RingError(f"{path}: not a version-{VERSION} capture ring (magic {magic:#x}, version {version})")
        if self.nrings < 1 or self.ring_size % 8 or HDR_SIZE + self.nrings * self.ring_size > size:
            raise RingError(f"{path}: {self.nrings} ring(s) of {self.ring_size} bytes do not fit {size} bytes")
        self.tails = [U64.unpack_from(self.mm, self._ctl(r) + TAIL_OFF)[0] for r in range(self.nrings)]

    def _ctl(self, r):
        return CTL_BASE + r * CTL_SIZE

    def counters(self):
        """{packets, bytes, lost, lost_bytes} summed over the rings: what sluiced copied and lost."""
        tot = dict.fromkeys(("packets", "bytes", "lost", "lost_bytes"), 0)
        for r in range(self.nrings):
            _, pk, by, lost, lost_by = CTL.unpack_from(self.mm, self._ctl(r))
            tot["packets"] += pk
            tot["bytes"] += by
            tot["lost"] += lost
            tot["lost_bytes"] += lost_by
        return tot

    def drain(self, emit, limit=None):
        """emit(ts_ns, wire_len, point, action, data) for each record waiting, at most `limit`;
        returns how many. Records of different workers interleave in ring order, not time order.
        When emit raises, the records emitted before it stay read (the next drain starts after them):
        an exception part-way through never makes a later drain emit a record twice."""
        done = 0
        mm, size = self.mm, self.ring_size
        for r in range(self.nrings):
            ctl = self._ctl(r)
            head = U64.unpack_from(mm, ctl)[0]
            tail = self.tails[r]
            base = HDR_SIZE + r * size
            if head - tail > size:
                raise RingError(f"{self.path}: ring {r}: head {head} is more than a ring ahead of tail {tail}")
            try:
                while tail < head and (limit is None or done < limit):
                    off = tail % size
                    length = struct.unpack_from("<I", mm, base + off)[0]
                    if length == WRAP:
                        tail += size - off
                        continue
                    length, wire_len, ts, cap_len, point, action, _ = REC.unpack_from(mm, base + off)
                    if length < REC.size + cap_len or off + length > size or length % 8:
                        raise RingError(f"{self.path}: ring {r}: a record of {length} bytes at {off} is impossible")
                    start = base + off + REC.size
                    emit(ts, wire_len, point, action, mm[start:start + cap_len])
                    tail += length
                    done += 1
            finally:
                if tail != self.tails[r]:
                    self.tails[r] = tail
                    U64.pack_into(mm, ctl + TAIL_OFF, tail)
        return done

    def close(self):
        self.mm.close()
