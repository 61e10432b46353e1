"""NFs in KVM guests (docs/guests.md, issue 17): the same NF binaries, booted in the guest image under
QEMU/KVM, attached through ivshmem devices and a virtio-serial channel.

- a pcap through process -> guest -> process comes out byte for byte and in order, pipes on and off;
- QEMU maps only its own domain's region (/proc/<qemu>/maps);
- SIGKILL of QEMU under traffic: every buffer comes back, another chain is untouched, and a new QEMU
  attaches again to the same guest slot;
- control errors name the problem (bad names, ro services, a second channel connection).
"""

import json
import os
import signal
import subprocess

import pytest

from harness import base_config, net, sluice, wait_until, workdir, write_pcap  # noqa: F401
from test_pcap_chain import make_packets, stop_and_expect_pcap

scapy = pytest.importorskip("scapy.all")

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


@pytest.mark.parametrize("pipes,wakeup", [(False, "poll"), (True, "poll"), (False, "block")],
                         ids=["no-pipes", "pipes", "block-doorbell"])
def test_pcap_through_process_guest_process(sluice, workdir, pipes, wakeup):  # noqa: F811
    """block-doorbell: the guest NF sleeps until sluiced's kick arrives as its ivshmem-doorbell MSI-X
    interrupt (through VFIO in the guest) and rings sluiced through the doorbell register."""
    _, raws = make_packets()
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, raws)
    cfg = base_config(
        ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "out", "vdev": f"net_pcap1,tx_pcap={out}"}],
        chains=[{"name": "c", "nfs": ["a", "g", "c"], "exit": "out"}],
        nfs=["a", "g", "c"], ring_size=2048, pipes=pipes)
    sluice.start(cfg)
    kw = {"wakeup": wakeup}
    if wakeup == "block":
        kw["extra"] = ["--batch", "8", "--timeout-us", "200"]
    qemu = sluice.start_guest_nf("fwd", "g", **kw)  # first: polling NFs would slow its (emulated) boot
    sluice.start_nf("fwd", "a")
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
    if wakeup == "block":
        assert "no doorbell" not in sluice.nf_log("g"), sluice.nf_log("g")
        assert sluice.nf("g", st)["kicks"] > 0, "the sleeping guest NF was never kicked"
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
    qemu = sluice.start_guest_nf("fwd", "g")  # first: polling NFs would slow its (emulated) boot
    # chain cf's NFs sleep when idle (adaptive), so the second boot below, under cf's traffic, does not
    # share its CPU with three busy-polling processes
    for n in ("sink", "sink2"):
        sluice.start_nf("sink", n, wakeup="adaptive" if n == "sink2" else "poll")
    sluice.start_nf("fwd", "f", wakeup="adaptive")
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
        if m["id"] == "rings":  # served with its eventfds by sluiced's ivshmem server
            assert os.path.exists(m["server"]), m
        else:
            assert os.stat(m["path"]).st_size == m["size"], m
    e = sluice.request("guest_prepare", name="a0", service="b")
    assert not e["ok"] and "prepared for service a" in e["error"], e
    assert sluice.ok("guests")["guests"][0]["name"] == "a0"
    sluice.ok("guest_release", name="a0")
    assert not os.path.exists(r["channel"])
    e = sluice.request("guest_release", name="a0")
    assert not e["ok"] and "no guest named" in e["error"], e


FW_RULES = """\
default drop
allow in lan proto icmp name ping
allow in lan proto tcp dport 80 name web
allow in lan proto tcp dport 5201 name iperf
"""


def fw_between_namespaces(net, sluice, where):  # noqa: F811
    """Two namespaces joined only through sluiced: lan -> [fw] -> wan and back, the firewall NF as a
    process or in a guest. Returns what the client saw of ping, two web ports and iperf3."""
    from harness import sh
    cli, srv = "slt-gfc", "slt-gfs"
    net.add_ns(cli)
    net.add_ns(srv)
    net.add_veth("slt-gfc0", "slt-gfc1", peer_ns=cli, peer_addr="10.81.0.1/24")
    net.add_veth("slt-gfs0", "slt-gfs1", peer_ns=srv, peer_addr="10.81.0.2/24")
    sluice.start(base_config(
        ports=[{"name": "lan", "vdev": "net_af_packet0,iface=slt-gfc0", "chain": "l2w"},
               {"name": "wan", "vdev": "net_af_packet1,iface=slt-gfs0", "chain": "w2l"}],
        chains=[{"name": "l2w", "nfs": ["fw"], "exit": "wan"}, {"name": "w2l", "nfs": ["fw"], "exit": "lan"}],
        pool_mbufs=4096))
    rules = sluice.dir / "fw.rules"
    rules.write_text(FW_RULES)
    if where == "guest":
        sluice.start_guest_nf("firewall", "fw", wakeup="adaptive", extra=["--config", rules])
    else:
        import harness
        harness.NF_BINS.setdefault("firewall", harness.BUILD / "nfs" / "sluice-nf-firewall")
        sluice.start_nf("firewall", "fw", wakeup="adaptive", extra=["--config", rules])
    www = sluice.dir / "www"
    www.mkdir()
    (www / "index.html").write_text("hello through sluice\n")
    for port in (80, 8081):
        net.popen(["python3", "-m", "http.server", port, "--bind", "10.81.0.2", "--directory", www], ns=srv,
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    net.popen(["iperf3", "-s", "-1", "-B", "10.81.0.2", "-p", "5201"], ns=srv, stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    wait_until(lambda: all(p in sh("ss", "-ltn", ns=srv).stdout for p in (":80 ", ":8081 ", ":5201 ")), 10,
               "servers listening")
    out = {}
    out["ping"] = sh("ping", "-c", "3", "-i", "0.2", "-W", "5", "10.81.0.2", ns=cli, check=False).returncode == 0
    web = sh("curl", "-s", "-m", "10", "http://10.81.0.2/", ns=cli, check=False)
    out["web"] = web.stdout.strip() if web.returncode == 0 else f"curl exit {web.returncode}"
    blocked = sh("curl", "-s", "-m", "3", "http://10.81.0.2:8081/", ns=cli, check=False)
    out["blocked"] = blocked.returncode  # 28: timed out (the SYN was dropped)
    ip = sh("iperf3", "-c", "10.81.0.2", "-p", "5201", "-t", "2", "-J", ns=cli, check=False, timeout=60)
    out["iperf3"] = ip.returncode == 0 and json.loads(ip.stdout)["end"]["sum_received"]["bytes"] > 0
    c = sluice.nf("fw")["counters"]
    out["rules_hit"] = {k: c.get(f"rule.{k}", 0) > 0 for k in ("ping", "web", "iperf")}
    return out


@pytest.mark.parametrize("where", ["process", "guest"])
def test_firewall_between_namespaces(net, sluice, where):  # noqa: F811
    """ping, curl and iperf3 through the firewall NF: the same results as a process and in a guest."""
    got = fw_between_namespaces(net, sluice, where)
    assert got == {"ping": True, "web": "hello through sluice", "blocked": 28, "iperf3": True,
                   "rules_hit": {"ping": True, "web": True, "iperf": True}}, got


# `sluice up` with a guest NF: nfs[].vm
from test_cli import NULL_PORTS, _api, _state, real_build, up  # noqa: E402,F401

VM_FWD = NULL_PORTS + """\
chains:
  - {name: c, nfs: [count, fwd], exit: dst}
nfs:
  - {name: count, program: count, wakeup: adaptive}
  - {name: fwd, program: fwd, wakeup: adaptive, vm: {memory: 192}}
"""


def test_sluice_up_with_a_guest_nf(up, run_sluice, socket_dir):  # noqa: F811
    r = up(VM_FWD)
    assert r.returncode == 0, r.stderr
    assert "2 NF(s) attached (count.0 fwd.0)" in r.stdout, r.stdout
    st = _state(socket_dir)
    fwd = next(n for n in st["nfs"] if n["name"] == "fwd.0")
    assert fwd["vm"] == {"memory": 192, "vcpus": 1}, fwd
    nfs = {n["name"]: n for n in _api(socket_dir, "nfs")["nfs"]}
    assert nfs["fwd.0"]["guest"] is True and nfs["fwd.0"]["pid"] == fwd["pid"]  # its QEMU
    assert nfs["count.0"]["guest"] is False
    with open(f"/proc/{fwd['pid']}/cmdline", "rb") as f:
        assert b"qemu-system-x86_64" in f.read()
    # traffic crosses the guest
    t0 = nfs["fwd.0"]["rx_pkts"]
    assert wait_until(lambda: _api(socket_dir, "nfs")["nfs"] and
                      {n["name"]: n for n in _api(socket_dir, "nfs")["nfs"]}["fwd.0"]["rx_pkts"] > t0 + 1000,
                      20, "packets through the guest NF")
    s = run_sluice("status", "--socket-dir", socket_dir)
    assert s.returncode == 0 and "fwd.0 (guest)" in s.stdout and "count.0 (guest)" not in s.stdout, \
        s.stdout + s.stderr
    # SIGKILL of its QEMU: sluiced reclaims, the supervisor boots a new guest (restart: on-failure)
    os.kill(fwd["pid"], signal.SIGKILL)

    def restarted():
        n = {x["name"]: x for x in _api(socket_dir, "nfs")["nfs"]}.get("fwd.0")
        return n and n["pid"] != fwd["pid"] and n["guest"]
    assert wait_until(restarted, 60, "fwd.0 attached again from a new QEMU")
    st = _state(socket_dir)
    assert next(n for n in st["nfs"] if n["name"] == "fwd.0")["restarts"] == 1
    assert "fwd.0 detached" in (socket_dir / "logs" / "sluiced.log").read_text()
    d = run_sluice("down", "--socket-dir", socket_dir)
    assert d.returncode == 0, d.stderr
