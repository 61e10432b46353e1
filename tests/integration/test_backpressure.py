"""Backpressure at the chain's entry (NFVnice; datapath.c "Backpressure", docs/architecture.md).

in.pcap (replayed as fast as sluiced reads) -> chain c [a (fwd, fast), b (fwd --cost-ns: slow)] -> out

b cannot keep up. Without backpressure the excess would cross a (work spent) and die in b's full
ring (`ring_full`). With it, once b holds 3/4 of its budget the service is saturated and packets
are dropped at the chain's entry (`backpressure`), before a touches them: b's ring never overflows
except for what a already held, and every packet is accounted for.
"""

from harness import base_config, sluice, udp_frames, wait_until, workdir, write_pcap  # noqa: F401

# net_pcap replays as fast as the worker reads (some Mpps) and a must run at least once while it does:
# 20,000 frames took ~3 ms, shorter than a scheduler turn on a loaded core (a test run beside another
# one lost them all in a's ring before a ran, and b never saturated); 200,000 take tens of ms.
N = 200000
RING = 64


def test_slow_second_nf_backs_off_at_the_entry(sluice, workdir):  # noqa: F811
    inp = workdir / "in.pcap"
    write_pcap(inp, udp_frames(N, "10.6.0.1", "10.6.0.2", b"b" * 18, sport=lambda i: 1000 + i % 50000, dport=9))
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "out", "vdev": "net_null0"}],
                      chains=[{"name": "c", "nfs": ["a", "b"], "exit": "out"}], nfs=["a", "b"], ring_size=RING)
    sluice.start(cfg)
    sluice.start_nf("fwd", "a")
    sluice.start_nf("fwd", "b", extra=["--cost-ns", 20000])  # 20 us per packet: at most ~50 kpps
    sluice.ok("port_chain_set", port="in", chain="c")

    def settled():
        st = sluice.stats()
        return sluice.port("in", st)["rx_pkts"] == N and st["pool"]["lent"] == 0 and st
    st = wait_until(settled, 60, "all packets read and every buffer back")
    d = st["drops"]
    out = sluice.port("out", st)["tx_pkts"]
    a, b = sluice.nf("a", st), sluice.nf("b", st)
    svc_b = next(s for s in st["services"] if s["name"] == "b")
    assert d["backpressure"] > 0, d
    assert svc_b["drops"]["backpressure"] == d["backpressure"]
    assert out + d["backpressure"] + d["ring_full"] == N, (out, d)  # nothing unaccounted
    # what b's ring refused is only what had already passed the entry before b saturated: at most
    # what a and the staging could hold then, never the bulk of the overload
    assert b["drops"]["ring_full"] <= 2 * RING, b
    assert a["rx_pkts"] == N - d["backpressure"] - a["drops"]["ring_full"]
    assert not svc_b["saturated"], "b is idle again: the service must not stay saturated"
