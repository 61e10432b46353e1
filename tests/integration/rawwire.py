"""Raw Ethernet frames into and out of network namespaces, for the NF integration tests.

The NF tests bridge namespaces through sluiced and craft or collect frames at the namespace ends
without any address, route or listening socket there. This module holds the two helpers they share:

- ``in_netns(name)``   run a block in network namespace ``/run/netns/<name>`` (this thread only).
                       Sockets created inside stay in that namespace after the block, so a test can
                       open a TCP connection or a raw socket "from" a namespace in its own process.
- ``Wire(ns, ifname)`` a raw AF_PACKET socket bound to interface ``ifname`` of namespace ``ns``,
                       non-blocking: ``send(frame)`` (bytes or a scapy packet), ``recv_all()`` (the
                       frames received since the last call), ``drain()`` (every frame received since
                       the Wire was made), ``close()``. Frames the socket's own interface sent out
                       (PACKET_OUTGOING: ours, or the kernel's) are never returned.
                       Options: ``rcvbuf`` (bytes, SO_RCVBUF, capped by net.core.rmem_max) or
                       ``rcvbuf`` with ``rcvbuf_force=True`` (SO_RCVBUFFORCE, not capped; needs
                       CAP_NET_ADMIN) for tests that let many frames queue up before reading them;
                       ``restore_vlan=True`` to get received frames with their 802.1Q tag: the
                       kernel moves a received tag out of the frame into PACKET_AUXDATA metadata,
                       the Wire puts it back in.

Both need root (setns, AF_PACKET); the tests that use them run as root anyway (harness.require_env).
"""

import contextlib
import ctypes
import errno
import os
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNET = 0x40000000  # <sched.h>
ETH_P_ALL = 0x0003  # <linux/if_ether.h>
SOL_PACKET = 263  # <linux/socket.h>
PACKET_AUXDATA = 8  # <linux/if_packet.h>
PACKET_OUTGOING = 4  # sll_pkttype of a frame the interface sent (address[2] of recvfrom/recvmsg)
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; not in Python's socket module


@contextlib.contextmanager
def in_netns(name):
    """Run the block in network namespace `name` (this thread only); sockets made there stay there."""
    orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
        yield
    finally:
        if _libc.setns(orig, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        os.close(fd)
        os.close(orig)


class Wire:
    """A raw AF_PACKET socket on interface `ifname` of namespace `ns` (see the module docstring).

    rcvbuf:       receive buffer size in bytes (None: the system default).
    rcvbuf_force: set it with SO_RCVBUFFORCE, beyond net.core.rmem_max (root only).
    restore_vlan: put the 802.1Q tag the kernel took off a received frame back into it
                  (PACKET_AUXDATA); without it a tagged frame is returned untagged.
    """

    def __init__(self, ns, ifname, rcvbuf=None, rcvbuf_force=False, restore_vlan=False):
        self.restore_vlan = restore_vlan
        with in_netns(ns):
            self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            if rcvbuf is not None:
                self.s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE if rcvbuf_force else socket.SO_RCVBUF,
                                  rcvbuf)
            if restore_vlan:
                self.s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            self.s.bind((ifname, 0))
        self.s.setblocking(False)
        self.got = []  # every frame recv_all() returned, for drain()

    def send(self, frame):
        self.s.send(bytes(frame))

    def recv_all(self):
        """The frames received since the last call (none of them outgoing), oldest first."""
        out = []
        while True:
            try:
                data, anc, _flags, addr = self.s.recvmsg(65535, socket.CMSG_SPACE(64))
            except BlockingIOError:
                self.got.extend(out)
                return out
            except OSError as e:  # ENETDOWN once if the link bounced (sluiced starting its port)
                if e.errno != errno.ENETDOWN:
                    raise
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            if self.restore_vlan:
                data = _with_vlan_tag(data, anc)
            out.append(data)

    def drain(self):
        """Every frame received since the Wire was made (reads what is queued first)."""
        self.recv_all()
        return self.got

    def close(self):
        self.s.close()


def _with_vlan_tag(data, anc):
    """`data` with the 802.1Q tag from its PACKET_AUXDATA (if the kernel took one off) put back."""
    for level, typ, d in anc:
        if level == SOL_PACKET and typ == PACKET_AUXDATA and len(d) >= 20:
            # struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid
            status, _l, _s, _m, _n, tci, tpid = struct.unpack("IIIHHHH", d[:20])
            if status & TP_STATUS_VLAN_VALID:
                tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
    return data
