"""Frames for `sluice rule test`: build one from rule-like fields, or read them from a pcap file.

    build_frame({"proto": "tcp", "dst": "10.0.0.2", "dst_port": "80"}) -> bytes
    read_pcap("capture.pcap") -> [bytes, ...]
    write_pcap("out.pcap", [bytes, ...])

Only what classification looks at is filled in properly; checksums of TCP/UDP are left 0.
"""

import ipaddress
import struct
import time

from .steering import PROTOCOLS, TCP_FLAGS

__all__ = ["FrameError", "build_frame", "read_pcap", "write_pcap", "inet_checksum", "FIELDS"]

FIELDS = ("src_mac", "dst_mac", "vlan", "src", "dst", "proto", "src_port", "dst_port", "dscp", "tcp_flags",
          "payload")
PCAP_MAGICS = {0xA1B2C3D4: ("<", 1e-6), 0xD4C3B2A1: (">", 1e-6), 0xA1B23C4D: ("<", 1e-9), 0x4D3CB2A1: (">", 1e-9)}
LINKTYPE_ETHERNET = 1
PCAP_SNAPLEN = 262144  # tcpdump's: above any jumbo or BIG TCP frame


class FrameError(ValueError):
    """A field (named first in the message) or file that cannot make a frame."""


def _mac(v, field):
    parts = v.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise FrameError(f"{field}: must be a MAC address like 02:00:00:00:00:01 (got {v!r})")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise FrameError(f"{field}: must be a MAC address like 02:00:00:00:00:01 (got {v!r})") from None


def _num(v, field, lo, hi):
    try:
        n = int(v, 0)
    except (TypeError, ValueError):
        raise FrameError(f"{field}: must be an integer {lo}..{hi} (got {v!r})") from None
    if not lo <= n <= hi:
        raise FrameError(f"{field}: must be an integer {lo}..{hi} (got {v!r})")
    return n


def _addr(v, field):
    try:
        return ipaddress.ip_address(v)
    except ValueError:
        raise FrameError(f"{field}: must be an IPv4 or IPv6 address (got {v!r})") from None


def inet_checksum(b):
    """The Internet checksum (RFC 1071) of b, as IPv4, UDP and TCP headers carry it."""
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def build_frame(fields):
    """A frame from {field: string}: src/dst (IPv4 or IPv6; default 10.0.0.1 -> 10.0.0.2, or ::1 -> ::2
    when the other is IPv6), proto (name or number; default udp), src_port/dst_port (default 1024/80),
    vlan, src_mac/dst_mac, dscp, tcp_flags ("syn,ack"; default syn), payload (text)."""
    for k in fields:
        if k not in FIELDS:
            raise FrameError(f"{k}: unknown field ({', '.join(FIELDS)})")
    src = _addr(fields["src"], "src") if "src" in fields else None
    dst = _addr(fields["dst"], "dst") if "dst" in fields else None
    v6 = any(a is not None and a.version == 6 for a in (src, dst))
    if src is not None and dst is not None and src.version != dst.version:
        raise FrameError("dst: src and dst must both be IPv4 or both IPv6")
    src = src or ipaddress.ip_address("::1" if v6 else "10.0.0.1")
    dst = dst or ipaddress.ip_address("::2" if v6 else "10.0.0.2")
    pv = fields.get("proto", "udp")
    proto = PROTOCOLS.get(pv.lower()) if pv.lower() in PROTOCOLS else _num(pv, "proto", 0, 255)
    sport = _num(fields.get("src_port", "1024"), "src_port", 0, 65535)
    dport = _num(fields.get("dst_port", "80"), "dst_port", 0, 65535)
    dscp = _num(fields.get("dscp", "0"), "dscp", 0, 63)
    flags = 0
    for w in filter(None, (x.strip().lower() for x in fields.get("tcp_flags", "syn").split(","))):
        if w not in TCP_FLAGS:
            raise FrameError(f"tcp_flags: unknown TCP flag {w!r} ({', '.join(TCP_FLAGS)})")
        flags |= TCP_FLAGS[w]
    payload = fields.get("payload", "").encode()

    if proto == 6:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 65535, 0, 0) + payload
    elif proto == 17:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    elif proto in (1, 58):
        l4 = struct.pack("!BBHHH", 128 if proto == 58 else 8, 0, 0, 1, 1) + payload
    else:
        l4 = payload
    if v6:
        ip = struct.pack("!IHBB", (6 << 28) | (dscp << 22), len(l4), proto, 64) + src.packed + dst.packed
        ethertype = 0x86DD
    else:
        hdr = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, 20 + len(l4), 1, 0, 64, proto, 0,
                          src.packed, dst.packed)
        ip = hdr[:10] + struct.pack("!H", inet_checksum(hdr)) + hdr[12:]
        ethertype = 0x0800
    eth = _mac(fields.get("dst_mac", "02:00:00:00:00:02"), "dst_mac") + \
        _mac(fields.get("src_mac", "02:00:00:00:00:01"), "src_mac")
    if "vlan" in fields:
        eth += struct.pack("!HH", 0x8100, _num(fields["vlan"], "vlan", 0, 4095))
    frame = eth + struct.pack("!H", ethertype) + ip + l4
    return frame + b"\0" * max(0, 60 - len(frame))


def read_pcap(path, limit=100000, whole=False):
    """Frames of a classic pcap file with Ethernet link type (pcapng is refused by name), at most
    `limit` (None: all). whole=True also refuses a file whose frames are not all there: a record cut
    off at the end, or a frame captured shorter than it was on the wire (snaplen)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FrameError(f"{path}: {e.strerror}") from None
    if len(data) < 24:
        raise FrameError(f"{path}: too short for a pcap file")
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x0A0D0D0A:
        raise FrameError(f"{path}: pcapng is not supported; convert it with `editcap -F pcap IN OUT`")
    if magic not in PCAP_MAGICS:
        raise FrameError(f"{path}: not a pcap file (magic {magic:#010x})")
    end = PCAP_MAGICS[magic][0]
    linktype = struct.unpack(end + "I", data[20:24])[0]
    if linktype != LINKTYPE_ETHERNET:
        raise FrameError(f"{path}: link type {linktype} is not Ethernet (1)")
    frames, off = [], 24
    while off + 16 <= len(data) and (limit is None or len(frames) < limit):
        incl, orig = struct.unpack(end + "II", data[off + 8:off + 16])
        off += 16
        if off + incl > len(data):
            raise FrameError(f"{path}: record {len(frames)} is cut short")
        if whole and incl != orig:
            raise FrameError(f"{path}: frame {len(frames)} captured {incl} of its {orig} bytes")
        frames.append(data[off:off + incl])
        off += incl
    if whole and off != len(data) and (limit is None or len(frames) < limit):
        raise FrameError(f"{path}: record {len(frames)} is cut short (its header)")
    return frames


def write_pcap(path, frames):
    """Write frames (bytes, or anything bytes() takes, e.g. scapy packets) to a classic little-endian
    pcap file, Ethernet link type, timestamps 1 us apart from now."""
    t0 = int(time.time())
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, PCAP_SNAPLEN, LINKTYPE_ETHERNET))
        for i, fr in enumerate(frames):
            b = bytes(fr)
            if len(b) > PCAP_SNAPLEN:
                raise FrameError(f"{path}: frame {i} of {len(b)} bytes is longer than the snaplen {PCAP_SNAPLEN}")
            f.write(struct.pack("<IIII", t0 + i // 1000000, i % 1000000, len(b), len(b)))
            f.write(b)
    return path
