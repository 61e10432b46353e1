"""Real ping and iperf3 between two network namespaces joined only through sluiced.

  slt-cli [slt-c1 10.78.0.1/24] -- veth -- slt-c0 (host, no IP) = port "cli" (net_af_packet)
  slt-srv [slt-s1 10.78.0.2/24] -- veth -- slt-s0 (host, no IP) = port "srv" (net_af_packet)

  cli -> c2s = [c2s-count, c2s-fwd] -> srv        srv -> s2c = [s2c-count, s2c-fwd] -> cli
"""

import json
import shutil

import pytest

from harness import base_config, net, sh, sluice, wait_until, workdir  # noqa: F401

CLI_NS, SRV_NS = "slt-cli", "slt-srv"
CLI_IP, SRV_IP = "10.78.0.1", "10.78.0.2"


@pytest.fixture
def two_ns(net, sluice):  # noqa: F811
    net.add_ns(CLI_NS)
    net.add_ns(SRV_NS)
    net.add_veth("slt-c0", "slt-c1", peer_ns=CLI_NS, peer_addr=f"{CLI_IP}/24")
    net.add_veth("slt-s0", "slt-s1", peer_ns=SRV_NS, peer_addr=f"{SRV_IP}/24")
    sluice.start(base_config(
        ports=[{"name": "cli", "vdev": "net_af_packet0,iface=slt-c0,framecnt=4096", "chain": "c2s"},
               {"name": "srv", "vdev": "net_af_packet1,iface=slt-s0,framecnt=4096", "chain": "s2c"}],
        chains=[{"name": "c2s", "nfs": ["c2s-count", "c2s-fwd"], "exit": "srv"},
                {"name": "s2c", "nfs": ["s2c-count", "s2c-fwd"], "exit": "cli"}]))
    for chain in ("c2s", "s2c"):
        sluice.start_nf("count", f"{chain}-count", wakeup="adaptive", batch=4, timeout_us=50)
        sluice.start_nf("fwd", f"{chain}-fwd", wakeup="block", batch=4, timeout_us=50)
    return net, sluice


def nf_rx(sluice, st=None):  # noqa: F811
    st = st or sluice.stats()
    return {n["name"]: n["rx_pkts"] for n in st["nfs"]}


def test_ping_and_iperf3_through_chains(two_ns):
    net, s = two_ns  # noqa: F811
    # nothing but sluiced joins the two namespaces
    assert sh("ip", "route", "get", SRV_IP, ns=CLI_NS).returncode == 0
    before = nf_rx(s)

    cp = sh("ping", "-c", "5", "-i", "0.2", "-W", "2", SRV_IP, ns=CLI_NS, check=False, timeout=30)
    assert cp.returncode == 0 and " 5 received" in cp.stdout, cp.stdout + cp.stderr
    mid = nf_rx(s)
    for name in ("c2s-count", "c2s-fwd", "s2c-count", "s2c-fwd"):
        assert mid[name] - before.get(name, 0) >= 5, f"{name}: {before} -> {mid}"

    if not shutil.which("iperf3"):
        pytest.skip("iperf3 not installed")
    server = net.popen(["iperf3", "-s", "-1", "-B", SRV_IP, "-p", "5299"], ns=SRV_NS,
                       stdout=open(s.dir / "iperf3-server.log", "wb"), stderr=-2)
    wait_until(lambda: "5299" in sh("ss", "-ltn", ns=SRV_NS).stdout, 10, "iperf3 server listening")
    cp = sh("iperf3", "-c", SRV_IP, "-p", "5299", "-t", "3", "-J", ns=CLI_NS, check=False, timeout=40)
    res = json.loads(cp.stdout)
    assert cp.returncode == 0 and "error" not in res, res.get("error", cp.stderr)
    sent = res["end"]["sum_sent"]["bytes"]
    received = res["end"]["sum_received"]["bytes"]
    assert sent > 0 and received > 0, res["end"]
    server.wait(10)

    st = s.stats()
    after = nf_rx(s, st)
    for name in after:
        assert after[name] > mid[name], f"{name} saw no iperf3 packets"
    assert st["drops"]["invalid_desc"] == 0
    # the TCP payload crossed c2s: its counters carry at least the bytes iperf3 delivered
    c2s = next(n for n in st["nfs"] if n["name"] == "c2s-count")
    assert c2s["rx_bytes"] >= received
    cli, srv = s.port("cli", st), s.port("srv", st)
    assert srv["tx_bytes"] >= received and cli["rx_bytes"] >= received
