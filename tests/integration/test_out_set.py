"""SL_ACT_OUT_SET: one packet out of several ports (flooding, multicast) -- shared, untagged, tagged.

in.pcap -> port "in" (net_pcap rx) -> chain c [f: fwd --out-set ...] -> ports o1, o2, o3 (net_pcap tx)

o1 gets the buffer itself (reference counted, no copy), o2 a copy without the outer VLAN tag, o3 a
copy with an 802.1Q tag pushed. Checks every frame's bytes, the out_set counters, and that every
buffer is back in the pool afterwards (a reference-count mistake leaks or double-frees buffers).
"""

import random

import pytest

from harness import base_config, read_pcap, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Dot1AD, Dot1Q, Ether, Raw  # noqa: E402

N = 600


def make_frames(n=N, seed=11):
    rnd = random.Random(seed)
    frames = []
    for i in range(n):
        eth = Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff" if i % 3 == 0 else "02:00:00:00:00:02")
        l3 = IP(src="10.9.0.1", dst="10.9.0.2", id=i) / UDP(sport=1000 + i, dport=53)
        kind = i % 4  # untagged, 802.1Q, QinQ (802.1ad outer), untagged
        hdr = eth / Dot1Q(vlan=5) / l3 if kind == 1 else eth / Dot1AD(vlan=7) / Dot1Q(vlan=8) / l3 if kind == 2 else eth / l3
        size = 60 if i == 0 else 1514 if i == 1 else rnd.randint(60, 1514)
        frames.append(bytes(hdr / Raw(b"x" * max(size - len(hdr), 1))))
    return frames


def untag(f):
    et = f[12:14]
    return f[:12] + f[16:] if et in (b"\x81\x00", b"\x88\xa8") else f


def tag(f, vid):
    return f[:12] + b"\x81\x00" + vid.to_bytes(2, "big") + f[12:]


def config(workdir, inp):
    return base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"}]
        + [{"name": f"o{k}", "vdev": f"net_pcap{k},tx_pcap={workdir / f'o{k}.pcap'}"} for k in (1, 2, 3)],
        chains=[{"name": "c", "nfs": ["f"]}], nfs=["f"])


def test_out_set_shared_untag_tag(sluice, workdir):  # noqa: F811
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp))
    sluice.start_nf("fwd", "f", extra=["--out-set", "o1,o2:untag,o3:tag=100"])
    sluice.ok("port_chain_set", port="in", chain="c")

    wait_until(lambda: sluice.port("o3")["tx_pkts"] >= N, 30, f"{N} frames out of o3")
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")
    st = sluice.stats()
    tagged = sum(1 for f in frames if untag(f) != f)
    assert st["out_set"] == {"packets": N, "frames": 3 * N, "copies": tagged + N}, st["out_set"]
    for k in (1, 2, 3):
        assert sluice.port(f"o{k}", st)["tx_pkts"] == N
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    # every buffer back: the shared ones were freed once per port, never more, never less
    assert st["pool"]["free"] == st["pool"]["mbufs"], st["pool"]

    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()
    got = {k: read_pcap(workdir / f"o{k}.pcap") for k in (1, 2, 3)}
    assert got[1] == frames
    assert got[2] == [untag(f) for f in frames]
    assert got[3] == [tag(f, 100) for f in frames]


@pytest.mark.parametrize("spec", ["o1,#9", "#4", "o1,#63:untag"], ids=["as_is-beyond", "only-beyond", "untag-beyond"])
def test_out_set_naming_no_port_is_invalid(sluice, workdir, spec):  # noqa: F811
    """A set with a bit beyond the last port (here 4 ports: ids 0..3) invalidates the descriptor:
    the packet is dropped and counted, nothing goes out, every buffer comes back."""
    frames = make_frames(50)
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp))
    sluice.start_nf("fwd", "f", extra=["--out-set", spec])
    sluice.ok("port_chain_set", port="in", chain="c")
    wait_until(lambda: sluice.stats()["drops"]["invalid_desc"] >= 50, 30, "50 invalid descriptors")
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")
    st = sluice.stats()
    assert st["drops"]["invalid_desc"] == 50 and sluice.nf("f", st)["drops"]["invalid_desc"] == 50
    assert st["out_set"]["frames"] == 0
    assert all(sluice.port(f"o{k}", st)["tx_pkts"] == 0 for k in (1, 2, 3))
    assert st["pool"]["free"] == st["pool"]["mbufs"], st["pool"]


def test_out_set_unknown_port_name_is_an_attach_error(sluice, workdir):  # noqa: F811
    inp = workdir / "in.pcap"
    write_pcap(inp, make_frames(1))
    sluice.start(config(workdir, inp))
    p = sluice.start_nf("fwd", "f", extra=["--out-set", "o1,nosuch"], wait=False)
    assert p.wait(10) == 1
    assert "--out-set 'nosuch': sluiced has no such port (ports: in o1 o2 o3)" in sluice.nf_log("f")
