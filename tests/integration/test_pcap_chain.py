"""A pcap replayed through a 3-NF chain (fwd, count, fwd) comes out byte-for-byte and in order.

in.pcap -> port "in" (net_pcap rx) -> a (fwd) -> b (count) -> c (fwd) -> port "out" (net_pcap tx)
"""

import functools
import json
import random

import pytest

from harness import base_config, read_pcap, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import ICMP, IP, TCP, UDP, Ether, ICMPv6EchoRequest, IPv6, Raw  # noqa: E402

N = 1000


@functools.lru_cache(maxsize=4)
def make_packets(n=N, seed=7):
    """n packets: IPv4/IPv6 x TCP/UDP/ICMP, frame sizes 60..1514, a sequence number in every payload.
    Built once per (n, seed) and test run (scapy takes about a second for 1000): the lists are shared,
    so callers must not change them."""
    rnd = random.Random(seed)
    pkts = []
    for i in range(n):
        size = 60 if i == 0 else 1514 if i == 1 else rnd.randint(60, 1514)
        v6 = i % 2 == 1
        kind = (i // 2) % 3
        eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        if v6:
            l3 = IPv6(src=f"fd00::{i % 7 + 1:x}", dst=f"fd00::{i % 11 + 100:x}")
            l4 = [TCP(sport=10000 + i % 13, dport=80, seq=i), UDP(sport=20000 + i % 5, dport=53),
                  ICMPv6EchoRequest(id=i % 9, seq=i)][kind]
        else:
            l3 = IP(src=f"10.1.0.{i % 7 + 1}", dst=f"10.2.0.{i % 11 + 1}", id=i)
            l4 = [TCP(sport=10000 + i % 13, dport=80, seq=i), UDP(sport=20000 + i % 5, dport=53),
                  ICMP(id=i % 9, seq=i)][kind]
        hdr = eth / l3 / l4
        hlen = len(hdr)
        tag = f"S{i:05d}".encode()
        body = (tag * ((size // len(tag)) + 2))[: max(size - hlen, len(tag))]  # always >= 1 tag
        p = hdr / Raw(body)
        pkts.append(p)
    raws = [bytes(p) for p in pkts]
    assert len(set(raws)) == n
    return tuple(pkts), tuple(raws)


def stop_and_expect_pcap(sluice, out, raws):
    """Stop sluiced (it flushes the out pcap when its port closes; every buffer must be back) and
    check the capture holds exactly `raws`, byte for byte and in order."""
    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()
    got = read_pcap(out)
    assert len(got) == len(raws)
    for i, (a, b) in enumerate(zip(raws, got)):
        assert a == b, f"packet {i} differs or is out of order: sent {len(a)} bytes, got {len(b)}"


@pytest.mark.parametrize("wakeup,huge", [("poll", "auto"), ("block", "auto"), ("adaptive", "auto"),
                                         ("poll", "off")], ids=["poll", "block", "adaptive", "poll-4k-pages"])
def test_pcap_through_three_nf_chain(sluice, workdir, wakeup, huge):  # noqa: F811
    _, raws = make_packets()
    assert min(map(len, raws)) == 60 and max(map(len, raws)) == 1514
    inp, out, dump = workdir / "in.pcap", workdir / "out.pcap", workdir / "count.json"
    write_pcap(inp, raws)
    # "in" starts without an ingress chain (not polled): packets flow only once every NF is attached.
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}],
        chains=[{"name": "c", "nfs": ["a", "b", "c"], "exit": "out"}],
        # rings of 2048: the whole pcap (1000 packets, read at once) fits under the backpressure
        # threshold (3/4 of a ring), so NFs sharing cores with the worker never saturate and
        # nothing is dropped at the chain's entry -- this test is about the chain, not overload
        nfs=["a", "b", "c"], huge_pages=huge, ring_size=2048)
    sluice.start(cfg)
    if huge == "off":  # the packet region on ordinary pages (EAL --no-huge) works the same
        assert "using 4 KiB pages" in sluice.log() and "4 KiB ordinary" in sluice.log()
    kw = {"wakeup": wakeup}
    if wakeup != "poll":
        kw.update(batch=8, timeout_us=200)
    sluice.start_nf("fwd", "a", **kw)
    sluice.start_nf("count", "b", extra=["--dump", dump], **kw)
    sluice.start_nf("fwd", "c", **kw)
    r = sluice.ok("port_chain_set", port="in", chain="c")
    assert r["port"]["chain"] == "c"

    total_bytes = sum(map(len, raws))
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= N, 30, f"{N} packets out")
    st = sluice.stats()
    pin, pout = sluice.port("in", st), sluice.port("out", st)
    assert pin["rx_pkts"] == N and pin["rx_bytes"] == total_bytes
    assert pout["tx_pkts"] == N and pout["tx_bytes"] == total_bytes
    for name in "abc":
        nf = sluice.nf(name, st)
        assert nf["wakeup"] == wakeup
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N and nf["rx_bytes"] == total_bytes, nf
        assert nf["drops"] == {"ring_full": 0, "invalid_desc": 0}
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    if wakeup != "poll":
        assert sum(sluice.nf(n, st)["kicks"] for n in "abc") > 0, "block/adaptive NFs were never kicked"
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")

    # count writes its JSON dump on exit; sluiced flushes out.pcap when its port closes.
    assert sluice.stop_nf("b") == 0, sluice.nf_log("b")
    stop_and_expect_pcap(sluice, out, raws)

    d = json.loads(dump.read_text())
    assert d["total_pkts"] == N and d["total_bytes"] == total_bytes, {k: d[k] for k in d if k != "flows"}
    assert sum(f["pkts"] for f in d["flows"]) == N
    assert sum(f["bytes"] for f in d["flows"]) == total_bytes
    assert {f["proto"] for f in d["flows"]} == {6, 17, 1, 58}
