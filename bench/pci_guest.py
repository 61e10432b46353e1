#!/usr/bin/env python3
"""PCI NICs in a guest (issue 36): Sluice on two emulated PCI NICs against DPDK testpmd's io forwarding on
the same NICs in the same guest.

    bench/pci_guest.py [--rounds 3] [--duration 4] [--size 64] [--quick] [--results DIR] [--no-report]

The guest is tests/integration/test_pci_guest.py's: the guest image with its DPDK overlay, a
virtio-net-pci and an e1000e behind intel-iommu, bound to vfio-pci, each NIC a host tap moved into a
namespace of its own (TCG here: everything in the guest is emulated, so the figures say how the two
forwarders compare on one emulated machine, not what a NIC does). Per round and system a fresh guest
boots and runs either
  - sluice:  sluiced, chains a->b and b->a through one sluice-nf-fwd (poll), zero copy (regions
             DMA-mapped), or
  - testpmd: dpdk-testpmd --forward-mode=io between the two ports;
then bench/udpgen.c floods SIZE-byte UDP frames into the virtio NIC's tap for DURATION seconds and the
e1000e's tap counts what comes out (rx_packets over the middle of the run). Rows alternate within each
round; median of rounds with min and max. Results: bench/results/<stamp>-pci_guest.json (scenario
"pci_guest"), then BENCHMARKS.md (not after --quick).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))
from common import BenchError, Progress, machine_info, regenerate_report, save_results  # noqa: E402
from peer_linux import udpgen  # noqa: E402
from sluice import config as sconfig  # noqa: E402
from sluice import guests  # noqa: E402

BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or HERE.parent / "build").resolve()
GUEST = BUILD / "guest"
NIC_A, NIC_B = "0000:00:04.0", "0000:00:05.0"
TAP_A, TAP_B = "slb-pg-ta", "slb-pg-tb"
NS_A, NS_B = "slb-pg-a", "slb-pg-b"
MAC_A, MAC_B = "02:00:00:81:01:02", "02:00:00:81:02:02"
IP_A, IP_B = "10.81.0.1", "10.81.0.2"
SYSTEMS = ("sluice", "testpmd")


def sh(*argv, check=True):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if check and r.returncode:
        raise BenchError(f"{' '.join(map(str, argv))}: {r.stderr.strip()}")
    return r


def guest_script(work: Path, system: str) -> Path:
    if system == "sluice":
        cfg = sconfig.load_string(f"""
sluiced: {{pool_mbufs: 8192, lcores: "0,1", huge_pages: "on"}}
ports:
  - {{name: a, vdev: "pci:{NIC_A}", chain: ab}}
  - {{name: b, vdev: "pci:{NIC_B}", chain: ba}}
chains:
  - {{name: ab, nfs: [fwd], exit: b}}
  - {{name: ba, nfs: [fwd], exit: a}}
nfs:
  - {{name: fwd, program: fwd, wakeup: poll}}
""", check_programs=False)
        (work / "sluiced.json").write_text(sconfig.to_sluiced_json(cfg, socket_dir="/run/sl"))
        run = (f"sluiced --config {work / 'sluiced.json'} --socket-dir /run/sl &\n"
               "i=0; while [ ! -S /run/sl/nf.sock ] && [ $i -lt 600 ]; do usleep 100000; i=$((i + 1)); done\n"
               "SLUICE_NF_SOCKET=/run/sl/nf.sock SLUICE_NF_NAME=fwd.0 SLUICE_NF_SERVICE=fwd SLUICE_NF_WAKEUP=poll "
               "sluice-nf-fwd &\n"
               "i=0; while ! grep -q 'nf fwd.0 attached' /run/sl.log 2>/dev/null && [ $i -lt 600 ]; do usleep 100000; "
               "i=$((i + 1)); done\necho BENCH-READY\nwait\n")
    else:
        run = (f"dpdk-testpmd -l 0,1 -n 1 --in-memory -a {NIC_A} -a {NIC_B} -- --forward-mode=io --auto-start "
               "--total-num-mbufs 8192 --txd 1024 --rxd 1024 --stats-period 5 &\nsleep 2\necho BENCH-READY\nwait\n")
    path = work / f"guest-{system}.sh"
    path.write_text(f"""#!/bin/sh
chmod 755 /
echo 256 >/proc/sys/vm/nr_hugepages
mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages
for bdf in {NIC_A} {NIC_B}; do
    d=/sys/bus/pci/devices/$bdf
    echo vfio-pci >$d/driver_override
    [ -e $d/driver ] && echo $bdf >$d/driver/unbind
    echo $bdf >/sys/bus/pci/drivers_probe
done
mkdir -p /run/sl
exec >/run/sl.log 2>&1 </dev/null
tail -f /run/sl.log >/dev/console &
{run}""")
    return path


def boot(work: Path, system: str) -> subprocess.Popen:
    script = guest_script(work, system)
    initrd = work / f"initrd-{system}.img"
    with open(initrd, "wb") as o:
        for part in (GUEST / "initrd.img", GUEST / "dpdk.cpio"):
            o.write(part.read_bytes())
            o.write(b"\0" * (-o.tell() % 4))
        o.write(guests.files_cpio([str(p) for p in (script, work / "sluiced.json") if p.exists()]))
    kernel = GUEST / ("vmlinux" if (GUEST / "vmlinux").exists() else "vmlinuz")
    argv64 = base64.b64encode(b"\0".join([b"/bin/sh", str(script).encode()])).decode()
    argv = [guests.qemu_binary(), "-name", "slb-pci-guest", *guests.accel_args(), "-m", "1024", "-smp", "2",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", " ".join(guests.BOOT_WORDS + ["intel_iommu=on", "iommu=pt", f"sluice.argv={argv64}"]),
            "-M", "q35", "-device", "intel-iommu,aw-bits=48",
            "-netdev", f"tap,id=na,ifname={TAP_A},script=no,downscript=no",
            "-device", "virtio-net-pci,netdev=na,addr=0x4,disable-legacy=on,iommu_platform=on,ats=on",
            "-netdev", f"tap,id=nb,ifname={TAP_B},script=no,downscript=no",
            "-device", "e1000e,netdev=nb,addr=0x5"]
    console = open(work / f"console-{system}.log", "wb")
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)


def rx_packets(ns: str, dev: str) -> int:
    return int(sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/statistics/rx_packets").stdout)


def measure(work: Path, system: str, size: int, duration: float, gen: Path) -> dict:
    for t in (TAP_A, TAP_B):
        sh("ip", "link", "del", t, check=False)
        sh("ip", "tuntap", "add", "dev", t, "mode", "tap")
        sh("ip", "link", "set", t, "up")
    q = boot(work, system)
    try:
        log = work / f"console-{system}.log"
        t0 = time.monotonic()
        while b"BENCH-READY" not in log.read_bytes():
            if q.poll() is not None or time.monotonic() - t0 > 240:
                raise BenchError(f"{system} in the guest did not come up:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        for ns, tap, mac, ip in ((NS_A, TAP_A, MAC_A, IP_A), (NS_B, TAP_B, MAC_B, IP_B)):
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", tap, "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", tap, "address", mac)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", tap)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", tap, "up")
        time.sleep(1.0)
        g = subprocess.Popen(["ip", "netns", "exec", NS_A, gen, TAP_A, MAC_B, MAC_A, IP_A, IP_B, str(size),
                              str(duration)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(duration / 4)
        a, ta = rx_packets(NS_B, TAP_B), time.monotonic()
        time.sleep(duration / 2)
        b, tb = rx_packets(NS_B, TAP_B), time.monotonic()
        out, _ = g.communicate(timeout=duration + 30)
        sent = int(out.split()[1]) if out.startswith("sent") else None
        return {"pps": (b - a) / (tb - ta), "offered_pps": sent / duration if sent else None}
    finally:
        q.kill()
        q.wait(10)
        for ns in (NS_A, NS_B):
            sh("ip", "netns", "del", ns, check=False)
        for t in (TAP_A, TAP_B):
            sh("ip", "link", "del", t, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick 1)")
    ap.add_argument("--duration", type=float, default=None, help="seconds of traffic per run (default 4; --quick 2)")
    ap.add_argument("--size", type=int, default=64, help="frame bytes (default 64)")
    ap.add_argument("--quick", action="store_true", help="one short round (checks that it runs)")
    ap.add_argument("--results", default=str(HERE / "results"), help="results directory (default bench/results)")
    ap.add_argument("--no-report", action="store_true", help="do not regenerate BENCHMARKS.md")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/pci_guest.py: run as root (taps, namespaces)", file=sys.stderr)
        return 2
    if not (GUEST / "dpdk.cpio").exists():
        print(f"bench/pci_guest.py: no {GUEST / 'dpdk.cpio'}: run `make guest-image`", file=sys.stderr)
        return 2
    rounds = args.rounds or (1 if args.quick else 3)
    duration = args.duration or (2.0 if args.quick else 4.0)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prog = Progress(rounds * len(SYSTEMS))
    runs = {s: [] for s in SYSTEMS}
    gen = udpgen()
    with tempfile.TemporaryDirectory(prefix="slb-pg-") as w:
        work = Path(w)
        try:
            for r in range(rounds):
                for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                    runs[s].append(measure(work, s, args.size, duration, gen))
                    prog.step(f"round {r + 1}/{rounds} {s}: {runs[s][-1]['pps'] / 1e3:.1f} kpps delivered")
        except BenchError as e:
            print(f"bench/pci_guest.py: {e}", file=sys.stderr)
            return 1
    rows = []
    for s in SYSTEMS:
        v = [x["pps"] for x in runs[s]]
        rows.append({"scenario": "pci_guest", "system": s, "size": args.size, "runs": runs[s],
                     "median_pps": statistics.median(v), "min_pps": min(v), "max_pps": max(v)})
    data = {"started": started, "quick": args.quick, "machine": machine_info(),
            "config": {"rounds": rounds, "duration_s": duration, "size": args.size, "accel": guests.accel(),
                       "command": " ".join(["bench/pci_guest.py"] + sys.argv[1:])},
            "results": rows}
    save_results(args, "bench/pci_guest.py", stamp, "pci_guest", data)
    for r in rows:
        print(f"{r['system']:8s} {r['median_pps'] / 1e3:8.1f} kpps (min {r['min_pps'] / 1e3:.1f}, "
              f"max {r['max_pps'] / 1e3:.1f})")
    regenerate_report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
