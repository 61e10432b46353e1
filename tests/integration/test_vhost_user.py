"""vhost-user ports (docs/guests.md "vhost-user ports and ordinary guests", issue 17): an unmodified
virtio guest (the guest image: stock kernel, virtio_net, busybox, iperf3) attached to sluiced through
DPDK's vhost-user PMD (net_vhost), talking to a network namespace through NF chains.

  guest [eth0 10.83.0.1/24, virtio-net] -- vhost-user socket -- port "vm" (net_vhost0, sluiced listens)
  slt-vuns [slt-vu1 10.83.0.2/24] -- veth -- slt-vu0 (host, no IP) = port "ns" (net_af_packet)

  vm -> v2n = [v2n-count, v2n-fwd] -> ns          ns -> n2v = [n2v-count, n2v-fwd] -> vm

The guest's payload pings the namespace and runs iperf3 against a server there; it prints what it
saw on the serial console (the QEMU log). Guests run under TCG where /dev/kvm is PVM
(guests.accel()): slow, but correct. Also: the same guest started by `sluice up` from `guests:`.
"""

import contextlib
import json
import os
import re
import signal
import subprocess

import pytest

from harness import BUILD, base_config, net, sh, sluice, wait_until, workdir  # noqa: F401

NS = "slt-vuns"
GUEST_IP, NS_IP = "10.83.0.1", "10.83.0.2"
IPERF_PORT = 5283

# the guest image: $SLUICE_GUEST_DIR, else <build>/guest (`make guest-image`)
GUEST_DIR = os.environ.get("SLUICE_GUEST_DIR") or str(BUILD / "guest")
# the uncompressed kernel, when the image has it, boots sooner under TCG (as guests.image_paths picks)
KERNEL = next((k for k in (os.path.join(GUEST_DIR, "vmlinux"), os.path.join(GUEST_DIR, "vmlinuz"))
               if os.path.isfile(k)), os.path.join(GUEST_DIR, "vmlinuz"))
INITRD = os.path.join(GUEST_DIR, "initrd.img")



@pytest.fixture(autouse=True)
def guest_image():
    """A missing image is a failure, not a skip: `make test` builds it (make guest-image)."""
    for f in (KERNEL, INITRD):
        assert os.path.isfile(f), f"no guest image file {f}: run `make guest-image`"

PAYLOAD = (f"ping -c 5 -i 0.3 -W 5 {NS_IP}; echo PING-RC=$?; "
           f"iperf3 -c {NS_IP} -p {IPERF_PORT} -t 3 -J > /tmp/i.json; echo IPERF-RC=$?; "
           "echo IPERF-JSON-BEGIN; cat /tmp/i.json; echo IPERF-JSON-END")


@contextlib.contextmanager
def qemu(argv, log_path):
    """Run QEMU; always killed (its whole process group) at the end, also on failure."""
    with open(log_path, "ab") as lf:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        yield p
    finally:
        if p.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            p.wait(10)


def test_guest_ping_and_iperf3_through_vhost_user(net, sluice, workdir):  # noqa: F811
    from sluice import guests
    net.add_ns(NS)
    net.add_veth("slt-vu0", "slt-vu1", peer_ns=NS, peer_addr=f"{NS_IP}/24")
    vsock = workdir / "vm.sock"
    sluice.start(base_config(
        ports=[{"name": "vm", "vdev": f"net_vhost0,iface={vsock},queues=1", "chain": "v2n"},
               {"name": "ns", "vdev": "net_af_packet0,iface=slt-vu0,framecnt=4096", "chain": "n2v"}],
        chains=[{"name": "v2n", "nfs": ["v2n-count", "v2n-fwd"], "exit": "ns"},
                {"name": "n2v", "nfs": ["n2v-count", "n2v-fwd"], "exit": "vm"}]))
    assert vsock.is_socket(), "sluiced (vhost-user server) did not create the socket"
    for chain in ("v2n", "n2v"):
        sluice.start_nf("count", f"{chain}-count", wakeup="adaptive", batch=4, timeout_us=50)
        sluice.start_nf("fwd", f"{chain}-fwd", wakeup="block", batch=4, timeout_us=50)
    # no guest yet: the port is open and its link down; what is sent toward it is dropped, not stuck
    vm = sluice.port("vm")
    assert vm["rx_pkts"] == 0, vm

    server = net.popen(["iperf3", "-s", "-1", "-B", NS_IP, "-p", str(IPERF_PORT)], ns=NS,
                       stdout=open(workdir / "iperf3-server.log", "wb"), stderr=subprocess.STDOUT)
    wait_until(lambda: str(IPERF_PORT) in sh("ss", "-ltn", ns=NS).stdout, 10, "iperf3 server listening")

    guest = {"name": "vu1", "memory": 256, "vcpus": 1, "ip": f"{GUEST_IP}/24",
             "command": ["/bin/sh", "-c", PAYLOAD]}
    log_path = workdir / "guest-vu1.log"
    with qemu(guests.vhost_user_qemu_argv(guest, KERNEL, INITRD, str(vsock)), log_path) as p:
        try:
            p.wait(45)
        except subprocess.TimeoutExpired:
            pass
        out = log_path.read_text(errors="replace")
        assert p.returncode == 0, f"guest still running or failed (rc {p.returncode}):\n{out[-4000:]}"
    assert "sluice-guest: payload exited with status 0" in out, out[-4000:]
    assert "PING-RC=0" in out and re.search(r"5 packets transmitted, 5 (packets )?received", out), out[-4000:]
    assert "IPERF-RC=0" in out, out[-4000:]
    res = json.loads(out.split("IPERF-JSON-BEGIN", 1)[1].split("IPERF-JSON-END", 1)[0].replace("\r", ""))
    assert "error" not in res, res["error"]
    sent, received = res["end"]["sum_sent"]["bytes"], res["end"]["sum_received"]["bytes"]
    assert sent > 0 and received > 0, res["end"]
    server.wait(10)

    st = sluice.stats()
    rx = {n["name"]: n["rx_pkts"] for n in st["nfs"]}
    # 5 echo requests + ARP one way, 5 replies + ARP back, plus iperf3's TCP segments and ACKs
    assert rx["v2n-count"] >= 5 and rx["v2n-fwd"] >= 5 and rx["n2v-count"] >= 5, rx
    assert rx["v2n-count"] > 100 and rx["n2v-count"] > 50, rx
    v2n = next(n for n in st["nfs"] if n["name"] == "v2n-count")
    assert v2n["rx_bytes"] >= received, (v2n, received)
    vmp, nsp = sluice.port("vm", st), sluice.port("ns", st)
    assert vmp["rx_bytes"] >= received and nsp["tx_bytes"] >= received, (vmp, nsp)
    assert st["drops"]["invalid_desc"] == 0
    print(f"iperf3 through vhost-user: {res['end']['sum_received']['bits_per_second'] / 1e6:.1f} Mbit/s "
          f"({received} bytes); nf rx {rx}")

    # the socket file goes with the port
    assert sluice.stop() == 0
    assert not vsock.exists(), "vhost-user socket left after sluiced's exit"


UP_NS = "slt-vuup"
UP_YAML = """\
sluiced: {{pool_mbufs: 8192, lcores: "0,1"}}
ports:
  - {{name: vm, vdev: "net_vhost0,iface={sock}", chain: v2n}}
  - {{name: ns, vdev: "net_af_packet0,iface=slt-vp0,framecnt=4096", chain: n2v}}
chains:
  - {{name: v2n, nfs: [fwd], exit: ns}}
  - {{name: n2v, nfs: [fwd], exit: vm}}
nfs:
  - {{name: fwd, program: fwd, wakeup: block, batch: 4, timeout_us: 50}}
guests:
  - name: g1
    port: vm
    ip: {ip}/24
    memory: 192
    kernel: {kernel}
    initrd: {initrd}
"""


def _guest_state(socket_dir):
    st = json.loads((socket_dir / "state.json").read_text())
    return next((n for n in st["nfs"] if n.get("kind") == "guest"), None)


def test_sluice_up_starts_a_guest_on_a_vhost_user_port(net, run_sluice, socket_dir, build_dir):  # noqa: F811
    """`sluice up` with `guests:` boots the guest on its port's socket once sluiced and the NFs are up;
    `sluice status` shows it; the namespace pings it through fwd both ways; `sluice down` stops it."""
    net.add_ns(UP_NS)
    net.add_veth("slt-vp0", "slt-vp1", peer_ns=UP_NS, peer_addr=f"{NS_IP}/24")
    sock = socket_dir / "vm.sock"
    cfg = socket_dir / "sluice.yaml"
    cfg.write_text(UP_YAML.format(sock=sock, ip=GUEST_IP, kernel=KERNEL, initrd=INITRD))
    qemu_pid = None
    try:
        r = run_sluice("up", cfg, "-d", "--build-dir", build_dir, "--socket-dir", socket_dir,
                       "--ready-timeout", 20, "--attach-timeout", 15)
        assert r.returncode == 0, r.stdout + r.stderr
        g = _guest_state(socket_dir)
        assert g and g["name"] == "g1" and g["port"] == "vm" and g["state"] == "running" and g["pid"], g
        qemu_pid = g["pid"]
        glog = socket_dir / "logs" / "g1.log"
        wait_until(lambda: "sluice-guest: ready" in glog.read_text(errors="replace"), 30, "guest booted")

        r = run_sluice("status", "--json", "--socket-dir", socket_dir)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["ok"] is True and j["nf_count"] == 1, j
        assert [(x["name"], x["port"], x["pid"], x["state"]) for x in j["guests"]] == \
            [("g1", "vm", qemu_pid, "running")], j["guests"]
        r = run_sluice("status", "--socket-dir", socket_dir)
        assert r.returncode == 0 and re.search(rf"^g1\s+vm\s+{qemu_pid}\s+running\s+{GUEST_IP}/24", r.stdout, re.M), \
            r.stdout

        # the unmodified guest answers through sluiced (its eth0 may still be coming up: retry)
        def pinged():
            return sh("ping", "-c", "2", "-i", "0.3", "-W", "3", GUEST_IP, ns=UP_NS, check=False,
                      timeout=20).returncode == 0
        wait_until(pinged, 25, f"ping {GUEST_IP} from {UP_NS}", interval=0.5)
    finally:
        r = run_sluice("down", "--socket-dir", socket_dir)
        if qemu_pid and os.path.exists(f"/proc/{qemu_pid}"):
            with contextlib.suppress(OSError):
                os.kill(qemu_pid, signal.SIGKILL)
            pytest.fail(f"guest QEMU {qemu_pid} still running after `sluice down`")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not sock.exists(), "vhost-user socket left after `sluice down`"
    assert "sluice-guest: ready" in (socket_dir / "logs" / "g1.log").read_text(errors="replace")
