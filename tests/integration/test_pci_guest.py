"""Real PCI NICs (issue 36; docs/ports.md "PCI NICs"), on the only PCI path these machines have: sluiced
runs inside a QEMU guest (TCG here, KVM where it can) whose two NICs -- virtio-net-pci (DPDK's
net_virtio) and e1000e (net_e1000_em) -- sit behind QEMU's vIOMMU (intel-iommu) and are bound to
vfio-pci in the guest. Each NIC is a host tap moved into a namespace of its own, so the two
namespaces reach each other only through the guest's sluiced:

    slt-pg-c (client 10.80.1.2) -- tap -- [virtio-net-pci | sluiced: firewall -> nat | e1000e] -- tap -- slt-pg-s

sluiced maps its packet region for both devices' DMA (IOVA = VA): packets go NIC -> region -> NFs ->
NIC without a copy (`dma_mapped`, no `tx_copied`). The guest's control socket reaches the host through
a virtio-serial port (tests/guest/ctl_relay.c), so the test asks the guest's sluiced for its ports,
NFs and pool audit as it would a local one. Checked: ping, curl and iperf3 through firewall -> nat
(the server sees the NAT's address), 160 UDP frames of 16 flows steered by a rule through `fwd` arrive
byte-identical and in order per flow over the virtio NIC's two queues (two workers in the guest),
the pool audit is whole. Then the e1000e is unplugged through QEMU's monitor: the port goes down, the
device is released (the guest completes the unplug), packets for it are counted as no_path, nothing
crashes and the pool is whole. A functional test, not a benchmark: everything in the guest is emulated.
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import (BUILD, GUEST_INITRD, GUEST_KERNEL, PREFIX, _claim, _release, net, sh, udp_frames,  # noqa: F401
                     wait_until, workdir)
from sluice import config as sconfig
from sluice import guests

NS_C, NS_S = "slt-pg-c", "slt-pg-s"
TAP_C, TAP_S = "slt-pg-tc", "slt-pg-ts"
CLIENT, SERVER, PUBLIC, GW = "10.80.1.2", "10.80.2.2", "10.80.2.1", "10.80.1.1"
MAC_C, MAC_S = "02:00:00:80:01:02", "02:00:00:80:02:02"
NIC_C, NIC_S = "0000:00:04.0", "0000:01:00.0"   # the guest's PCI addresses of the two NICs (e1000e: on a root port)
OVERLAY = BUILD / "guest" / "dpdk.cpio"
PLAIN_PORT = 9999  # UDP to this port is steered through `fwd` alone: must arrive byte-identical


def require_guest():
    missing = [str(p) for p in (GUEST_KERNEL, GUEST_INITRD, OVERLAY) if not p.exists()]
    if missing:
        pytest.fail(f"guest image incomplete ({', '.join(missing)}): run `make guest-image`")


class Ctl:
    """The guest's control socket through the relay: newline-delimited JSON, as ctl.sock."""

    def __init__(self, path):
        self.path = str(path)
        self.s = None
        self.buf = b""

    def call(self, cmd, timeout=20.0, **fields):
        if self.s is None:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.connect(self.path)
        self.s.settimeout(timeout)
        self.s.sendall(json.dumps(dict(cmd=cmd, **fields)).encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("relay closed")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def close(self):
        if self.s is not None:
            self.s.close()
            self.s = None


class Qmp:
    """QEMU's monitor (QMP) on a UNIX socket: commands, and the events that come between."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(str(path))
        self.f = self.s.makefile("rw")
        self.events = []
        json.loads(self.f.readline())  # the greeting
        self.call("qmp_capabilities")

    def _read(self):
        msg = json.loads(self.f.readline())
        if "event" in msg:
            self.events.append(msg["event"])
        return msg

    def call(self, cmd, **args):
        self.f.write(json.dumps({"execute": cmd, "arguments": args}) + "\n")
        self.f.flush()
        while True:
            msg = self._read()
            if "return" in msg:
                return msg["return"]
            if "error" in msg:
                raise AssertionError(f"QMP {cmd}: {msg['error']}")

    def wait_event(self, name, timeout):
        self.s.settimeout(timeout)
        while name not in self.events:
            self._read()


def sluiced_config(wd):
    (wd / "fw.rules").write_text("default drop\n"
                                 "allow in client proto icmp name ping\n"
                                 "allow in client proto tcp dport 80 name web\n"
                                 "allow in client proto tcp dport 5201 name iperf3\n")
    (wd / "nat.conf").write_text(f"snat from 10.80.1.0/24 to {PUBLIC}\n")
    text = f"""\
sluiced: {{pool_mbufs: 4096, lcores: "0,1,1", workers: 2, huge_pages: "on"}}
ports:
  - {{name: client, vdev: "pci:{NIC_C}", chain: c2s, queues: 2, offloads: [rx_checksum]}}
  - {{name: server, vdev: "pci:{NIC_S}", chain: s2c, rx_desc: 512, offloads: [rx_checksum, vlan_strip, vlan_insert]}}
chains:
  - {{name: c2s, nfs: [firewall, nat], exit: server}}
  - {{name: s2c, nfs: [nat, firewall], exit: client}}
  - {{name: plain, nfs: [fwd], exit: server}}
rules:
  - {{name: plain, priority: 10, match: {{in_port: client, proto: udp, dst_port: {PLAIN_PORT}}}, action: {{chain: plain}}}}
nfs:
  - {{name: firewall, program: firewall, wakeup: adaptive, args: [--config, {wd / 'fw.rules'}]}}
  - {{name: nat, program: nat, wakeup: adaptive,
      args: [--inside, client, --outside, server, --next, --config, {wd / 'nat.conf'}]}}
  - {{name: fwd, program: fwd, wakeup: adaptive, instances: 2}}
"""
    cfg = sconfig.load_string(text, check_programs=False)
    path = wd / "sluiced.json"
    path.write_text(sconfig.to_sluiced_json(cfg, socket_dir="/run/sl"))
    return path, cfg


def guest_script(wd, cfg_json, cfg):
    """What the guest runs: its NICs to vfio-pci, huge pages, sluiced, the NFs, then the relay."""
    nfs = "\n".join(
        f"SLUICE_NF_SOCKET=/run/sl/nf.sock SLUICE_NF_NAME={name} SLUICE_NF_SERVICE={n['name']} "
        f"SLUICE_NF_WAKEUP={n['wakeup']} sluice-nf-{n['program']} {' '.join(n['args'])} &"
        for name, n in sconfig.instance_names(cfg))
    path = wd / "guest.sh"
    path.write_text(f"""#!/bin/sh
chmod 755 /   # EAL refuses to load PMDs from a path under a world-writable directory
echo 256 >/proc/sys/vm/nr_hugepages
mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages
for bdf in {NIC_C} {NIC_S}; do
    d=/sys/bus/pci/devices/$bdf
    echo vfio-pci >$d/driver_override
    [ -e $d/driver ] && echo $bdf >$d/driver/unbind
    echo $bdf >/sys/bus/pci/drivers_probe
    echo "pci-guest: $bdf $(cat $d/vendor):$(cat $d/device) -> $(basename $(readlink $d/driver))"
done
mkdir -p /run/sl
sluiced --config {cfg_json} --socket-dir /run/sl &
i=0
while [ ! -S /run/sl/nf.sock ] && [ $i -lt 600 ]; do usleep 100000; i=$((i + 1)); done
{nfs}
exec sluice-ctl-relay /dev/virtio-ports/sluice-ctl /run/sl/ctl.sock
""")
    return path


def qemu_argv(initrd, script, ctl_path, iommu_bits=48):
    which = guests.accel()
    return [guests.qemu_binary(), "-name", "slt-pci-guest", *guests.accel_args(which),
            "-m", "1024", "-smp", "2", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-serial", "stdio", "-kernel", str(GUEST_KERNEL), "-initrd", str(initrd),
            "-append", " ".join(guests.BOOT_WORDS + ["intel_iommu=on", "iommu=pt", "sluice.name=pci-guest",
                                                     f"sluice.argv={guests._b64_nul(['/bin/sh', str(script)])}"]),
            # q35 with an IOMMU of 48 address bits: the region's address (IOVA = VA) is a user address
            # above the default 39 bits
            "-M", "q35", "-device", f"intel-iommu,aw-bits={iommu_bits}",
            # the client's NIC has two queue pairs: the tap spreads flows over them by hash
            "-netdev", f"tap,id=nc,ifname={TAP_C},script=no,downscript=no,queues=2",
            "-device", f"virtio-net-pci,netdev=nc,addr=0x4,disable-legacy=on,iommu_platform=on,ats=on,mq=on,"
                       "vectors=6,mac=52:54:00:80:00:01",
            "-netdev", f"tap,id=ns,ifname={TAP_S},script=no,downscript=no",
            # on a PCIe root port, so that it can be unplugged (device_del): the root bus has no hotplug
            "-device", "pcie-root-port,id=rp1,slot=1,chassis=1",
            "-device", "e1000e,netdev=ns,bus=rp1,id=nic1,mac=52:54:00:80:00:02",
            "-qmp", f"unix:{ctl_path.parent / 'qmp.sock'},server=on,wait=off",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=ctl,path={ctl_path},server=on,wait=off",
            "-device", "virtserialport,chardev=ctl,name=sluice-ctl"]


@pytest.fixture
def taps():
    made = []
    try:
        for t in (TAP_C, TAP_S):
            _claim(t)
            sh("ip", "link", "del", t, check=False)
            sh("ip", "tuntap", "add", "dev", t, "mode", "tap", *(["multi_queue"] if t == TAP_C else []))
            sh("ip", "link", "set", t, "up")
            made.append(t)
        yield made
    finally:
        for t in made:
            sh("ip", "link", "del", t, check=False)  # wherever it is now: its namespace goes with `net`
            _release(t)


RAW_SEND = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for h in sys.stdin.read().split():
    s.send(bytes.fromhex(h))
"""

RAW_CAPTURE = """
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(0.5)
want, port, end, got = int(sys.argv[2]), int(sys.argv[3]), time.time() + float(sys.argv[4]), []
print("ready", flush=True)
while len(got) < want and time.time() < end:
    try:
        f, addr = s.recvfrom(65536)
    except socket.timeout:
        continue
    if addr[2] != socket.PACKET_OUTGOING and len(f) >= 38 and f[12:14] == b"\\x08\\x00" and f[23] == 17 \\
            and int.from_bytes(f[36:38], "big") == port:
        got.append(f.hex())
print("\\n".join(got), flush=True)
"""


# 48 address bits: the regions map (zero copy); 39 (QEMU's default): they cannot (the region's address is
# above the IOMMU's reach), and the ports fall back to their own pools and copies -- the same traffic
@pytest.mark.parametrize("iommu_bits", [48, 39], ids=["dma-mapped", "copy-fallback"])
def test_sluiced_on_pci_nics_in_a_guest(net, taps, workdir, iommu_bits):  # noqa: F811
    require_guest()
    cfg_json, cfg = sluiced_config(workdir)
    script = guest_script(workdir, cfg_json, cfg)
    initrd = workdir / "initrd.img"
    with open(initrd, "wb") as o:
        for part in (GUEST_INITRD, OVERLAY):
            o.write(Path(part).read_bytes())
            o.write(b"\0" * (-o.tell() % 4))
        o.write(guests.files_cpio([str(script), str(cfg_json), str(workdir / "fw.rules"),
                                   str(workdir / "nat.conf")]))
    ctl_path = workdir / "guest-ctl.sock"
    console = open(workdir / "console.log", "wb")
    qemu = net.popen(qemu_argv(initrd, script, ctl_path, iommu_bits), stdin=subprocess.DEVNULL, stdout=console,
                     stderr=subprocess.STDOUT)
    ctl = Ctl(ctl_path)
    try:
        # each NIC's tap goes to its namespace once QEMU holds it
        wait_until(lambda: ctl_path.exists() or qemu.poll() is not None, 30, "QEMU up")
        for ns, tap, addr, mac in ((NS_C, TAP_C, CLIENT, MAC_C), (NS_S, TAP_S, SERVER, MAC_S)):
            net.add_ns(ns)
            sh("ip", "link", "set", tap, "netns", ns)
            sh("ip", "link", "set", tap, "address", mac, ns=ns)
            sh("ip", "addr", "add", f"{addr}/24", "dev", tap, ns=ns)
            sh("ip", "link", "set", tap, "up", ns=ns)
            sh("sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1", ns=ns, check=False)
            sh("ethtool", "-K", tap, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off", ns=ns,
               check=False)
        sh("ip", "route", "add", "default", "via", GW, ns=NS_C)
        sh("ip", "neigh", "replace", GW, "lladdr", MAC_S, "dev", TAP_C, "nud", "permanent", ns=NS_C)
        sh("ip", "neigh", "replace", PUBLIC, "lladdr", MAC_C, "dev", TAP_S, "nud", "permanent", ns=NS_S)

        def attached():
            if qemu.poll() is not None:
                raise AssertionError("QEMU exited:\n" + (workdir / "console.log").read_text(errors="replace")[-3000:])
            try:
                return len(ctl.call("nfs")["nfs"]) == 4
            except (OSError, ValueError, KeyError):
                ctl.close()
                return False
        try:
            wait_until(attached, 180, "sluiced and 4 NFs up in the guest", interval=1.0)
        except AssertionError as e:
            raise AssertionError(f"{e}; the guest's console:\n"
                                 + (workdir / "console.log").read_text(errors="replace")[-4000:]) from None
        ports = {p["name"]: p for p in ctl.call("ports")["ports"]}
        log = (workdir / "console.log").read_text(errors="replace")
        mapped = iommu_bits == 48
        assert ports["client"]["dma_mapped"] == mapped and ports["server"]["dma_mapped"] == mapped, (ports, log[-3000:])
        assert ("tx_copied" in ports["client"]) != mapped and ("rx_copied" in ports["client"]) != mapped
        if not mapped:
            assert "cannot DMA into the packet regions" in log, log[-3000:]
        # the devices' offloads, as configured (both PMDs offer these), and the descriptor count asked for
        assert ports["client"]["offloads"] == ["rx_checksum"], ports["client"]
        assert ports["server"]["offloads"] == ["rx_checksum", "vlan_strip", "vlan_insert"], ports["server"]
        assert ports["server"]["rx_desc"] == 512 and ports["server"]["link"]["up"], ports["server"]
        assert (f"mapped for DMA by {NIC_C}" in log and f"mapped for DMA by {NIC_S}" in log) == mapped, log
        assert "(net_virtio)" in log and "(net_e1000_em)" in log, log

        # ping, curl, iperf3 through firewall -> nat
        out = sh("ping", "-c", "3", "-i", "0.3", "-W", "5", SERVER, ns=NS_C, check=False).stdout
        assert " 0% packet loss" in out, out
        (workdir / "www").mkdir()
        (workdir / "www" / "index.html").write_text("hello through a PCI NIC\n")
        http = net.popen([sys.executable, "-m", "http.server", "80", "--bind", SERVER, "--directory",
                          workdir / "www"], ns=NS_S, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        srv = net.popen(["iperf3", "-s", "-1", "-B", SERVER], ns=NS_S, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
        wait_until(lambda: sh("ss", "-ltnH", "sport = :80", ns=NS_S, check=False).stdout.strip() and
                   sh("ss", "-ltnH", "sport = :5201", ns=NS_S, check=False).stdout.strip(), 10, "servers")
        r = sh("curl", "-s", "--max-time", "20", f"http://{SERVER}/", ns=NS_C, check=False)
        assert r.stdout == "hello through a PCI NIC\n", (r.stdout, r.stderr)
        r = sh("iperf3", "-c", SERVER, "-t", "2", "-J", ns=NS_C, check=False, timeout=60)
        res = json.loads(r.stdout)
        assert "error" not in res and res["end"]["sum_received"]["bytes"] > 0, r.stdout[-1500:]
        srv.wait(10)
        http.terminate()
        _, err = http.communicate(timeout=10)
        assert f'{PUBLIC} - - ' in err and CLIENT not in err, err  # the server saw the NAT's address

        # frames through fwd alone (a rule steers them): 16 flows of 10, each with its sequence number,
        # spread over the client NIC's two queues (and the guest's two workers): every one arrives
        # byte-identical, and each flow in order
        frames = udp_frames(160, CLIENT, SERVER, bytes(range(64)), sport=lambda i: 40000 + i % 16, dport=PLAIN_PORT,
                            ip_id=lambda i: i // 16, mac_src=MAC_C, mac_dst=MAC_S)
        cap = net.popen([sys.executable, "-c", RAW_CAPTURE, TAP_S, len(frames), PLAIN_PORT, 30], ns=NS_S,
                        stdout=subprocess.PIPE, text=True)
        assert cap.stdout.readline().strip() == "ready"
        send = net.popen([sys.executable, "-c", RAW_SEND, TAP_C], ns=NS_C, stdin=subprocess.PIPE, text=True)
        send.communicate("\n".join(f.hex() for f in frames), timeout=30)
        got = [bytes.fromhex(h) for h in cap.communicate(timeout=60)[0].split()]
        assert sorted(got) == sorted(frames), f"{len(got)} of {len(frames)} frames came back identical"
        for flow in range(16):  # per flow, the IP ids (the sequence numbers) in the order they arrived
            seq = [int.from_bytes(f[18:20], "big") for f in got if int.from_bytes(f[34:36], "big") == 40000 + flow]
            assert seq == sorted(seq), (flow, seq)
        queues = next(p for p in ctl.call("ports")["ports"] if p["name"] == "client")["queues"]
        assert len(queues) == 2 and all(q["rx_pkts"] > 0 for q in queues), queues
        plain = next(c for c in ctl.call("chains")["chains"] if c["name"] == "plain")
        assert plain["nfs"] == ["fwd"]
        assert sum(n["rx_pkts"] for n in ctl.call("nfs")["nfs"] if n["service"] == "fwd") >= len(frames)

        if not mapped:  # every packet went through the ports' own pools, copied both ways
            ports = {p["name"]: p for p in ctl.call("ports")["ports"]}
            assert ports["client"]["rx_copied"] > 0 and ports["client"]["tx_copied"] > 0, ports["client"]
        audit = ctl.call("pool_audit")
        assert audit["whole"], json.dumps({k: v for k, v in audit.items() if k not in ("missing",)})
        # the NICs' rings hold buffers (posted for RX, sent and not yet reclaimed): counted as in the device;
        # copying ports' rings hold their own pools' buffers, none of the region's
        assert (0 < audit["in_device"] <= audit["device_descriptors"]) if mapped else audit["in_device"] == 0, audit
        st = ctl.call("stats")
        assert st["drops"]["invalid_desc"] == 0 and st["drops"]["no_buffer"] == 0, st["drops"]
        # every frame came with a good checksum: the devices checked them (rx_checksum), none flagged bad
        assert all(p["rx_csum_bad"] == 0 for p in st["ports"]), [(p["name"], p["rx_csum_bad"]) for p in st["ports"]]

        # hot-unplug of the e1000e through QEMU's monitor: sluiced takes the port out of use and releases
        # the device (the guest finishes the unplug: DEVICE_DELETED), keeps running, counts what would
        # have gone out on it, and the pool is whole again
        qmp = Qmp(workdir / "qmp.sock")
        qmp.call("device_del", id="nic1")

        def removed():
            ports = {p["name"]: p for p in ctl.call("ports")["ports"]}
            return ports["server"].get("state") == "removed" and not ports["server"]["link"]["up"]
        wait_until(removed, 90, "the server port removed after the unplug", interval=0.5)
        qmp.wait_event("DEVICE_DELETED", 60)
        log = (workdir / "console.log").read_text(errors="replace")
        assert "was removed (hot-unplug): the port is down" in log and "device released" in log, log[-2000:]
        before = ctl.call("stats")["drops"]["no_path"]
        sh("ping", "-c", "3", "-i", "0.2", "-W", "1", SERVER, ns=NS_C, check=False)
        try:
            wait_until(lambda: ctl.call("stats")["drops"]["no_path"] >= before + 3, 10, "no_path counting the pings")
        except AssertionError:
            st = ctl.call("stats")
            raise AssertionError((before, st["drops"], [(p["name"], p.get("rx_pkts"), p.get("drops")) for p in st["ports"]],
                                  [(n["name"], n["rx_pkts"], n["tx_pkts"]) for n in st["nfs"]])) from None
        # the other NIC still receives into the region (the IOMMU mapping its DMA uses is shared, and stays)
        assert ctl.call("stats")["drops"]["malformed"] == 0
        audit = ctl.call("pool_audit")
        assert audit["whole"], json.dumps({k: v for k, v in audit.items() if k not in ("missing",)})
        assert qemu.poll() is None and len(ctl.call("nfs")["nfs"]) == 4
    finally:
        ctl.close()
        with contextlib.suppress(OSError):
            qemu.kill()
        with contextlib.suppress(Exception):
            qemu.wait(10)
        console.close()
