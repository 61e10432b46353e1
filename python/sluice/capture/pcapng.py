"""A pcapng writer (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng): a section header, one
interface description per capture point (nanosecond timestamps), and an enhanced packet block per
packet, with its direction and, at an NF's way out, the NF's action as a comment."""

import struct

LINKTYPE_ETHERNET = 1
DIR_INBOUND, DIR_OUTBOUND = 1, 2


def _opt(code, value):
    pad = (-len(value)) % 4
    return struct.pack("<HH", code, len(value)) + value + b"\0" * pad


def _block(btype, body):
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


class PcapngWriter:
    def __init__(self, f, interfaces, app="sluice capture"):
        """interfaces: [(name, description, snaplen)], one per capture point, in point order."""
        self.f = f
        shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + _opt(4, app.encode()) + _opt(0, b"")
        f.write(_block(0x0A0D0D0A, shb))
        for name, desc, snaplen in interfaces:
            idb = (struct.pack("<HHI", LINKTYPE_ETHERNET, 0, snaplen) + _opt(2, name.encode()) +
                   _opt(3, desc.encode()) + _opt(9, bytes([9])) + _opt(0, b""))
            f.write(_block(1, idb))

    def packet(self, iface, ts_ns, wire_len, data, direction=0, comment=None):
        opts = b""
        if direction:
            opts += _opt(2, struct.pack("<I", direction))
        if comment:
            opts += _opt(1, comment.encode())
        if opts:
            opts += _opt(0, b"")
        body = (struct.pack("<IIIII", iface, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(data), wire_len) + data +
                b"\0" * ((-len(data)) % 4) + opts)
        self.f.write(_block(6, body))
