"""Several workers (sluiced.workers; docs/architecture.md "Workers"). The rest of the end-to-end suite
runs with two workers too (SLUICE_TEST_WORKERS=2 in `make test`); these tests pin down what is
particular to them: placement, packets handed between workers in both directions (byte for byte and
in order), and the pool audit while packets are in flight between workers (config errors:
test_config.py, test_config_errors.py).

    chains   c0 = [b]          (index 0: b's worker is 0)
             c1 = [a, b]       (index 1: a's worker is 1), exit "out"
    ports    out (exit of c1: worker 1), in (port 1, no ingress chain at start: worker 1)

so a packet goes in (worker 1) -> a (worker 1) -> b (worker 0: handed over) -> out (worker 1: handed
back). Both workers share core 1 ("0,1,1"): every handoff waits for the other thread's turn.
"""

import json

import pytest

from harness import base_config, sluice, wait_until, workdir, write_pcap  # noqa: F401
from test_pcap_chain import N, make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")


def two_worker_config(inp, out, **kw):
    cfg = base_config(
        ports=[{"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"},
               {"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"}],
        chains=[{"name": "c0", "nfs": ["b"]}, {"name": "c1", "nfs": ["a", "b"], "exit": "out"}],
        nfs=["a", "b"], ring_size=2048, workers=2, lcores="0,1,1", **kw)
    return cfg


@pytest.mark.parametrize("pipes", [False, True], ids=["no-pipes", "pipes"])
def test_packets_handed_between_workers_arrive_whole_and_in_order(sluice, workdir, pipes):  # noqa: F811
    _, raws = make_packets()
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, raws)
    # "in" starts without an ingress chain (not polled until the NFs are there); it is port 1, so
    # placed on worker 1 (port id mod 2), as is "out" (the exit of c1, chain index 1)
    sluice.start(two_worker_config(inp, out, pipes=pipes))
    log = sluice.log()
    assert "worker 0: data path running" in log and "worker 1: data path running" in log, log
    st = sluice.ok("status")
    assert len(st["worker_lcores"]) == 2, st
    sluice.start_nf("fwd", "a")
    sluice.start_nf("fwd", "b")
    assert sluice.nf("a")["worker"] == 1 and sluice.nf("b")["worker"] == 0
    sluice.ok("port_chain_set", port="in", chain="c1")
    total = sum(map(len, raws))
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= N, 30, f"{N} packets out")
    st = sluice.stats()
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    for name in ("a", "b"):
        nf = sluice.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N and nf["rx_bytes"] == total, nf
    assert st["pipes"]["open"] == 0  # a and b are served by different workers: no pipe between them
    sluice.wait_pool_whole()
    stop_and_expect_pcap(sluice, out, raws)


def test_pool_audit_with_packets_between_workers(sluice, workdir):  # noqa: F811
    """gen floods a -> b across the two workers; audits taken meanwhile find every buffer exactly once
    (in the pool, lent, staged, or in a worker's inbox): none missing, none twice."""
    gen_dump = workdir / "gen.json"
    cfg = base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"}, {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c0", "nfs": ["b"]}, {"name": "c1", "nfs": ["gen", "a", "b"], "exit": "out"}],
        nfs=["gen", "a", "b"], ring_size=1024, pool_mbufs=32768, workers=2, lcores="0,1,1")
    sluice.start(cfg)
    sluice.start_nf("gen", "gen", extra=["--rate-pps", 200000, "--size", 128, "--dump", gen_dump])
    sluice.start_nf("fwd", "a", wakeup="block")
    sluice.start_nf("fwd", "b", wakeup="block")
    sluice.ok("port_chain_set", port="src", chain="c1")
    wait_until(lambda: sluice.port("out")["tx_pkts"] > 20000, 30, "traffic across the workers")
    for _ in range(5):
        a = sluice.pool_audit()
        assert a["duplicates"] == [] and a["missing"] == [] and a["lent_mismatch"] == [], a
    out0 = sluice.port("out")["tx_pkts"]
    wait_until(lambda: sluice.port("out")["tx_pkts"] > out0 + 10000, 30, "traffic after the audits")
    sluice.ok("port_chain_set", port="src", chain=None)
    for name in ("gen", "a", "b"):
        assert sluice.stop_nf(name) == 0, sluice.nf_log(name)
    sluice.wait_pool_whole()
    g = json.loads(gen_dump.read_text())
    assert g["generated"] > 0
    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()
