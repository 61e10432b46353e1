#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora into tests/fuzz/corpus/<target>/ (committed; rerun after a
change to the input formats of tests/fuzz/*.c). Frames are built with scapy, configs are the docs'
examples (docs/nfs/*.md) with the port names fuzz_nf.c's stub knows: lan wan a b lan1 up."""
import os
import struct
import sys

from scapy.all import (ARP, ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6EchoRequest, ICMPv6ND_NS, IPv6,
                       IPv6ExtHdrFragment, Raw)

HERE = os.path.dirname(os.path.abspath(__file__))
A, B = "02:00:00:00:00:01", "02:00:00:00:00:02"


def frames():
    e = Ether(src=A, dst=B)
    return [
        e / IP(src="10.0.0.1", dst="192.0.2.10") / TCP(sport=40000, dport=80, flags="S"),
        e / IP(src="10.0.0.1", dst="192.0.2.10") / TCP(sport=40000, dport=80, flags="PA") / Raw(b"GET /etc/passwd HTTP/1.0\r\n\r\n"),
        Ether(src=B, dst=A) / IP(src="192.0.2.10", dst="10.0.0.1") / TCP(sport=80, dport=40000, flags="SA"),
        e / IP(src="10.0.0.5", dst="203.0.113.1") / UDP(sport=5353, dport=53) / Raw(b"\x12\x34\x01\x00"),
        e / IP(src="10.81.1.2", dst="10.99.1.1", ttl=1) / ICMP(type=8) / Raw(b"ping"),
        e / IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=3, code=3) / IP(src="10.0.0.2", dst="10.0.0.1") / UDP(sport=53, dport=1234),
        e / IP(src="10.0.0.1", dst="10.0.0.2", flags="MF", frag=0) / UDP(sport=1, dport=2) / Raw(b"x" * 16),
        e / IPv6(src="2001:db8:81:1::2", dst="2001:db8:99::1") / TCP(sport=1234, dport=443, flags="S"),
        e / IPv6(src="2001:db8::1", dst="2001:db8::53") / UDP(sport=999, dport=53) / Raw(b"q"),
        e / IPv6(src="fe80::1", dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt="2001:db8:81:1::1"),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(m=1) / ICMPv6EchoRequest(),
        Ether(src=A, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="10.81.1.2", pdst="10.81.1.1"),
        e / Dot1Q(vlan=10) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2),
        e / Dot1Q(vlan=100) / Dot1Q(vlan=20) / IPv6(src="::1", dst="::2") / TCP(),
    ]


def rec(frame, in_port=0, head=64, tail=0):
    b = bytes(frame)
    return struct.pack(">HBBB", len(b), in_port, head, tail) + b


def frameset(fs, ports=(0, 1)):
    return b"".join(rec(f, ports[i % len(ports)], 64 if i % 3 else 0, 32 if i % 2 else 0)
                    for i, f in enumerate(fs))


CONFIGS = {
    "firewall": ["""default drop
allow in lan proto tcp dport 80 name web
allow in lan proto tcp dst 10.79.2.0/25 dport 8000-8099 name tcp-range
drop  in lan src 10.79.1.66 name blocked
allow in lan proto udp dport 53 name dns
allow in lan proto icmp name ping4
allow in lan proto icmpv6 name ping6
allow in lan family ipv6 proto tcp dport 443 name web6
allow in wan proto tcp src 10.79.2.1 dport 22 name admin-in
""", "default allow\ndrop proto udp sport 1-1024 stateless\n"],
    "nat": ["""snat from 10.0.0.0/24 to 203.0.113.1
snat from 10.1.0.0/16 to 203.0.113.2 ports 20000-29999
dnat proto tcp to 203.0.113.1:8080 -> 10.0.0.1:80
dnat proto udp to 203.0.113.1:5353 -> 10.0.0.5:53
timeout tcp_established 7440
timeout udp 120
"""],
    # no default route: a short prefix fills 2^(24 - len) entries of the 32 MiB first-level table (one
    # ASan-checked store each), and a default route made every input take half a second
    "router": ["""addr a 10.81.1.1/24 02:00:00:81:01:01
addr a 2001:db8:81:1::1/64 02:00:00:81:01:01
addr b 10.81.2.1/24 02:00:00:81:02:01
addr b 2001:db8:81:2::1/64 02:00:00:81:02:01
route 10.99.0.0/16 via 10.81.2.2 dev b
route 10.99.200.0/24 dev a
route 172.16.0.0/12 via 10.81.1.254 dev a
route 2001:db8:99::/48 via 2001:db8:81:2::2 dev b
neigh 10.81.2.2 lladdr 02:00:00:81:02:02 dev b
"""],
    "lb": ["""vip 192.0.2.10 tcp 80
backend web1 10.0.1.11 weight 2
backend web2 10.0.1.12:8080
backend web3 10.0.1.13 disabled

vip 2001:db8::53 udp 53
backend dns1 [2001:db8:1::1]
backend dns2 [2001:db8:1::2]:5353
"""],
    "ids": ["""alert tcp any any -> any 80 (msg:"ETC passwd"; content:"/etc/passwd"; nocase; sid:1000001; rev:2;)
drop  tcp any any -> any [80,8080] (msg:"SQLi"; content:"GET "; depth:4; pcre:"/union\\s+select/i"; sid:1000002;)
pass  ip  10.1.1.5 any <> any any (msg:"scanner"; sid:1000003;)
alert udp [10.0.0.0/16,!10.1.2.3] 1024: -> any !53 (content:"|de ad be ef|"; offset:4; depth:8; sid:7;)
alert udp any any -> any 53 (msg:"dns"; content:"|12 34|"; sid:8;)
"""],
    "ratelimit": ["""length ip
class web   match proto tcp dport 80 srtcm cir 10M cbs 64k ebs 128k yellow mark af12
class voice match dscp ef,cs5 trtcm cir 1M pir 2M cbs 8k pbs 16k red mark be
class flows per-flow color-aware match src 10.0.0.0/8 srtcm cir 800k cbs 3000 ebs 0
"""],
    "l2switch": ["""port lan access 10
port wan access 20
port a
port up trunk 10,20,100-199 native 1
aging 120
max-macs 16384
"""],
    "monitor": [None],
    "count": [None],
}


# fuzz_attach.c's handshake encoding (see its header comment): a manager that does everything right
INFO_SIZE, RING64 = 33856, 1216  # sizeof(struct sl_nf_info), sl_ring_bytes(64)


def attach_msg(t, body=b"", fds=b""):
    return bytes([t, len(body)]) + body + fds


def attach_seeds():
    ring_fd = bytes([1, 5, 0, 2, 1, 1])  # ring memfd: 64 slots at offset 0, 2 ports, info page
    ring_map = RING64 + INFO_SIZE
    hello = attach_msg(1, struct.pack("<II", 64, 2048) + b"sluiced\0")
    region = attach_msg(3 | 1 << 4, struct.pack("<QIIIIII", 65536, 0, 16, 2048, 128, 0, 0),
                        bytes([0]) + struct.pack("<I", 65536))
    rx = attach_msg(4 | 2 << 4, struct.pack("<QQIIII", 0, ring_map, 0, 0, 64, 0), ring_fd + bytes([2]))
    tx = attach_msg(4 | 2 << 4, struct.pack("<QQIIII", 0, ring_map, 1, 1, 64, 0), ring_fd + bytes([2]))
    conn = attach_msg(5, struct.pack("<IIIIQQ", 3, 1, 2, 0, RING64, INFO_SIZE))
    bye = attach_msg(6, struct.pack("<I", 3) + b"go away\0")
    good = bytes([1, 0]) + hello + region + rx + tx + conn
    return {
        "seed-handshake": good,
        "seed-handshake-block": bytes([1, 1]) + hello + region + rx + tx + conn,
        "seed-disconnect": bytes([1, 0]) + hello + region + bye,
        "seed-ro-region": bytes([1, 2]) + hello + attach_msg(3 | 1 << 4, struct.pack("<QIIIIII", 4096, 1, 2, 2048, 0, 1, 0),
                                                             bytes([4]) + struct.pack("<I", 4096)) + rx + tx + conn,
        "seed-msg-init": bytes([0, 0, 0, 2]) + struct.pack("<IHH", 0x534c4345, 1, 2) + b"fz.0".ljust(32, b"\0")
                         + b"fz".ljust(32, b"\0") + bytes(56) + b"block\0\0\0",
    }


# sluiced's JSON config as the CLI writes it (python/sluice/config.py to_sluiced_json)
CONFIG_YAML = [os.path.join(HERE, "..", "..", "dist", "sluice.yaml.example"), """
sluiced: {pool_mbufs: 4096, workers: 2, pipes: true, lcores: "0,1,1"}
domains:
  - {name: dmz, pool_mbufs: 2048}
ports:
  - {name: lan, vdev: "net_null0", chain: l2w, rx_desc: 512, mtu: 1500}
  - {name: wan, vdev: "net_null1", chain: w2l}
chains:
  - {name: l2w, nfs: [fw, nat], exit: wan}
  - {name: w2l, nfs: [nat, fw], exit: lan}
nfs:
  - {name: fw, program: fwd, may_send: [wan, nat]}
  - {name: nat, program: fwd, trusted: false}
steering:
  malformed: drop
  flows: 1024
"""]


def config_seeds():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    from sluice import config
    out = {}
    for i, y in enumerate(CONFIG_YAML):
        if os.path.exists(y):
            y = open(y).read()
        cfg = config.load_string(y, check_programs=False, check_devices=False)
        out["seed-%d.json" % i] = config.to_sluiced_json(cfg, socket_dir="/run/sluice").encode()
    return out


def guest_seeds():
    """fuzz_guest.c's encoding: a port named sluice, a rings device's header, region and pipes tags."""
    hdr = struct.pack("<IIQQQII", 0x55474c53, 1, 8192, 0x1111, 0x2222, 0, 64) + b"fw.0".ljust(32, b"\0") \
        + b"fw".ljust(32, b"\0") + struct.pack("<II", 0, 0)
    def tag(kind, nonce):
        return struct.pack("<IIQQII", 0x47544c53, kind, nonce, 4096, 0, 0)
    rings = bytes([8 | 16 | 32, 1]) + hdr
    return {
        "seed-rings-region-pipes": bytes([7, 3]) + rings + bytes([16, 1]) + tag(1, 0x1111) + bytes([16, 2]) + tag(2, 0x2222),
        "seed-rings-region": bytes([7, 2]) + rings + bytes([16 | 32, 1]) + tag(1, 0),
        "seed-no-region": bytes([7, 2]) + rings + bytes([16, 1]) + tag(1, 0x9999),
    }


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    fs = frames()
    for nf, confs in CONFIGS.items():
        for i, c in enumerate(confs):
            pre = b"" if c is None else c.encode() + b"\0"
            write("nf-" + nf, "seed-%d" % i, pre + frameset(fs))
            write("nf-" + nf, "seed-%d-small" % i, pre + frameset(fs[:3], (1,)))
    for name, data in config_seeds().items():
        write("config", name, data)
    for name, data in guest_seeds().items():
        write("guest", name, data)
    for name, data in attach_seeds().items():
        write("attach", name, data)
    for i, f in enumerate(fs):  # pktkey: [in_port] + frame
        write("pktkey", "seed-%02d" % i, bytes([i % 4]) + bytes(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
