"""NFs in KVM guests (docs/guests.md, issue 17): the same NF binaries, booted in the guest image under
QEMU/KVM, attached through ivshmem devices and a virtio-serial channel.

- a pcap through process -> guest -> process comes out byte for byte and in order, pipes on and off;
- QEMU maps only its own domain's region (/proc/<qemu>/maps);
- SIGKILL of QEMU under traffic: every buffer comes back, another chain is untouched, and a new QEMU
  attaches again to the same guest slot;
- control errors name the problem (bad names, ro services, a second channel connection).
"""

import os
import signal
import time

import pytest

from harness import base_config, sluice, wait_until, workdir  # noqa: F401
from test_pcap_chain import make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")
from scapy.all import wrpcap  # noqa: E402

pytestmark = pytest.mark.skipif(not os.access("/dev/kvm", os.R_OK | os.W_OK), reason="needs /dev/kvm")

N = 1000


def memfd_maps(pid):
    """The memfd names a process maps (/proc/PID/maps: 'memfd:NAME (deleted)')."""
    names = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if "/memfd:" in line:
                names.add(line.split("/memfd:", 1)[1].split(" (deleted)")[0].strip())
    return names


@pytest.mark.parametrize("pipes", [False, True], ids=["no-pipes", "pipes"])
def test_pcap_through_process_guest_process(sluice, workdir, pipes):  # noqa: F811
    pkts, raws = make_packets()
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    wrpcap(str(inp), pkts)
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}],
        chains=[{"name": "c", "nfs": ["a", "g", "c"], "exit": "out"}],
        nfs=["a", "g", "c"], ring_size=2048, pipes=pipes)
    sluice.start(cfg)
    sluice.start_nf("fwd", "a")
    qemu = sluice.start_guest_nf("fwd", "g")
    sluice.start_nf("fwd", "c")
    st = sluice.stats()
    g = sluice.nf("g", st)
    assert g["guest"] is True and g["pid"] == qemu.pid, g
    # QEMU maps the guest's rings, its domain's region (and pipe area), nothing else of sluiced's
    maps = memfd_maps(qemu.pid)
    assert "sluice-region0" in maps and "sluice-guest-rings" in maps, maps
    assert not {m for m in maps if m.startswith("sluice-nf-rings")}, maps
    if pipes:
        wait_until(lambda: sluice.stats()["pipes"]["open"] == 2, 10, "pipes a->g and g->c open")
    sluice.ok("port_chain_set", port="in", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= N, 60, f"{N} packets out")
    st = sluice.stats()
    assert sluice.nf("g", st)["rx_pkts"] == N and sluice.nf("g", st)["tx_pkts"] == N
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    if pipes:
        assert st["pipes"]["packets"] >= N, st["pipes"]
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 5, "no buffers lent")
    stop_and_expect_pcap(sluice, out, raws)


def test_guest_sees_only_its_domain(sluice, workdir):  # noqa: F811
    cfg = base_config(ports=[{"name": "p0", "vdev": "net_null0"}], chains=[])
    cfg["nfs"] = [{"name": "a"}, {"name": "g", "domain": "blue"}]
    cfg["domains"] = [{"name": "blue", "pool_mbufs": 4096}]
    sluice.start(cfg)
    qemu = sluice.start_guest_nf("fwd", "g")
    maps = memfd_maps(qemu.pid)
    assert "sluice-region1" in maps, maps
    assert "sluice-region0" not in maps, f"a guest of domain blue maps the default region: {maps}"
    assert sluice.nf("g")["domain"] == "blue"


def test_kill_qemu_under_traffic(sluice, workdir):  # noqa: F811
    """src1 -> [gen, g (guest), sink] and an independent src2 -> [gen2, f, sink2]. SIGKILL of QEMU under
    traffic: its buffers come back (pool whole), the other chain keeps delivering, and a new QEMU for
    the same guest slot attaches and carries traffic again."""
    cfg = base_config(ports=[{"name": "src1", "vdev": "net_null0,size=64,copy=0"},
                             {"name": "src2", "vdev": "net_null1,size=64,copy=0"},
                             {"name": "o1", "vdev": "net_null2"}, {"name": "o2", "vdev": "net_null3"}],
                      chains=[{"name": "cg", "nfs": ["gen", "g", "sink"], "exit": "o1"},
                              {"name": "cf", "nfs": ["gen2", "f", "sink2"], "exit": "o2"}],
                      nfs=["gen", "g", "sink", "gen2", "f", "sink2"], ring_size=2048, pool_mbufs=32768)
    sluice.start(cfg)
    for n in ("sink", "sink2"):
        sluice.start_nf("sink", n)
    sluice.start_nf("fwd", "f")
    qemu = sluice.start_guest_nf("fwd", "g")
    for n in ("gen", "gen2"):
        sluice.start_nf("gen", n, extra=["--rate-pps", 200000])
    sluice.ok("port_chain_set", port="src1", chain="cg")
    sluice.ok("port_chain_set", port="src2", chain="cf")
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > 20000, 30, "traffic through the guest")
    before = sluice.nf("sink2")["rx_pkts"]
    os.kill(qemu.pid, signal.SIGKILL)
    qemu.wait(10)
    sluice.wait_gone("g", timeout=10)
    assert "nf g detached" in sluice.log()
    wait_until(lambda: sluice.nf("sink2")["rx_pkts"] > before + 20000, 20, "chain cf still delivering")
    a = sluice.pool_audit()  # under cf's traffic: every buffer once, the ledger agrees with every NF
    assert a["whole"] and not a["lent_mismatch"], a
    # a new QEMU for the same guest slot
    sluice.start_guest_nf("fwd", "g")
    base = sluice.nf("sink")["rx_pkts"]
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > base + 20000, 30, "traffic through the new guest")
    sluice.ok("port_chain_set", port="src1", chain=None)
    sluice.ok("port_chain_set", port="src2", chain=None)
    for n in ("gen", "gen2"):  # they hold a ring of supply buffers
        assert sluice.stop_nf(n) == 0, sluice.nf_log(n)
    sluice.wait_pool_whole()


def test_guest_control_errors(sluice, workdir):  # noqa: F811
    cfg = base_config(ports=[{"name": "p0", "vdev": "net_null0"}], chains=[])
    cfg["nfs"] = [{"name": "a"}, {"name": "b"}, {"name": "r", "access": "ro"}]
    sluice.start(cfg)
    e = sluice.request("guest_prepare", name="bad/name", service="a")
    assert not e["ok"] and "field 'name'" in e["error"], e
    e = sluice.request("guest_prepare", name="r0", service="r")
    assert not e["ok"] and "access: ro" in e["error"], e
    r = sluice.ok("guest_prepare", name="a0", service="a")
    assert {m["id"] for m in r["memory"]} >= {"rings", "region"}
    for m in r["memory"]:  # every BAR a power of two; the file is what QEMU will map
        assert m["size"] & (m["size"] - 1) == 0, m
        assert os.stat(m["path"]).st_size == m["size"], m
    e = sluice.request("guest_prepare", name="a0", service="b")
    assert not e["ok"] and "prepared for service a" in e["error"], e
    assert sluice.ok("guests")["guests"][0]["name"] == "a0"
    sluice.ok("guest_release", name="a0")
    assert not os.path.exists(r["channel"])
    e = sluice.request("guest_release", name="a0")
    assert not e["ok"] and "no guest named" in e["error"], e
