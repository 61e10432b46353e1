"""Boot tests of the guest image (`make guest-image`: scripts/guest-image.sh, scripts/guest-init.sh;
docs/guests.md "The guest image"). Each test boots QEMU once with a payload and reads the serial
console:

- a shell payload: arguments with spaces and empty ones, sluice.env, "payload exited with status 3",
  and QEMU exits by itself (init powers the guest off);
- an NF binary runs inside (its shared libraries are in the image);
- the modules are loaded and the devices work: a virtio-serial port named "sluice" (sysfs name,
  /dev/vport*, /dev/virtio-ports/sluice, a line each way), an ivshmem-plain BAR2 of 1 MiB that
  shares bytes with the host's /dev/shm file both ways (busybox devmem mmaps it through /dev/mem),
  and a virtio-net eth0 configured from sluice.ip= (user-mode network, restrict=on).

Boot-to-ready times are printed (never asserted). The accelerator is sluice.guests.accel(): KVM, or
TCG where /dev/kvm cannot boot stock kernels (PVM hosts); SLUICE_GUEST_ACCEL=kvm|tcg overrides.
"""

import base64
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sluice import guests

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SLUICE_BUILD_DIR") or REPO / "build").resolve()
IMAGE = BUILD / "guest"
QEMU = shutil.which("qemu-system-x86_64")
BOOT_TIMEOUT = 60

pytestmark = [
    pytest.mark.skipif(QEMU is None, reason="qemu-system-x86_64 not installed (make deps)"),
    pytest.mark.skipif(not (IMAGE / "initrd.img").is_file() or not (IMAGE / "vmlinuz").is_file(),
                       reason=f"no guest image in {IMAGE} (make guest-image)"),
]


def b64_nul(items):
    return base64.b64encode(b"\0".join(s.encode() for s in items)).decode()


class Boot:
    """One finished guest run: its console output, the QEMU exit code, times."""

    def __init__(self, out, rc, wall, kernel):
        self.out, self.rc, self.wall, self.kernel = out, rc, wall, kernel
        m = re.search(r"sluice-guest: ready in ([0-9.]+) s", out)
        self.ready = float(m.group(1)) if m else None
        m = re.search(r"sluice-guest: payload exited with status (\d+)", out)
        self.status = int(m.group(1)) if m else None

    def lines(self, prefix):
        return [ln[len(prefix):].strip() for ln in self.out.splitlines() if ln.startswith(prefix)]


def boot(argv, env=None, qemu_args=(), append=(), kernel="vmlinux"):
    """Boot the image with payload argv (and env dict) under QEMU; kill QEMU whatever happens.
    kernel: "vmlinux" (uncompressed, PVH entry: faster) when the image has it, else "vmlinuz"."""
    k = IMAGE / kernel
    if not k.is_file():
        k = IMAGE / "vmlinuz"
    cmdline = ["console=ttyS0", "quiet", "loglevel=3", "panic=-1", f"sluice.argv={b64_nul(argv)}", *append]
    if env:
        cmdline.append(f"sluice.env={b64_nul(f'{n}={v}' for n, v in env.items())}")
    cmd = [QEMU, *guests.accel_args(), "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config",
           "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(k),
           "-initrd", str(IMAGE / "initrd.img"), "-append", " ".join(cmdline), *qemu_args]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=BOOT_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"QEMU still running after {BOOT_TIMEOUT} s; console:\n"
                             + out.decode(errors="replace"))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return Boot(out.decode(errors="replace").replace("\r", ""), p.returncode, time.monotonic() - t0, k.name)


def report(capsys, what, b):
    """Boot-to-ready time in the test output (information, not a pass/fail criterion)."""
    with capsys.disabled():
        print(f"\n    guest boot ({what}; {guests.accel()}, {b.kernel}): ready in {b.ready} s (guest "
              f"uptime), QEMU ran {b.wall:.2f} s")


def test_shell_payload_args_env_status(capsys):
    script = 'echo hello "a b"; printf "<%s>" "$@"; echo; echo "GREETING=$GREETING PATH=$PATH"; exit 3'
    b = boot(["/bin/sh", "-c", script, "sh", "x  y", "", "z"], env={"GREETING": "hi there"},
             kernel="vmlinuz")
    report(capsys, "shell", b)
    assert b.ready is not None, b.out
    assert "hello a b\n" in b.out, b.out
    assert "<x  y><><z>\n" in b.out, b.out
    assert "GREETING=hi there PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" in b.out, b.out
    assert b.status == 3, b.out
    assert b.rc == 0, b.out  # QEMU exited by itself: the guest powered off
    # init prints nothing but its own lines (and the payload's); kernel messages are the caller's
    # business (loglevel=)
    noise = [ln for ln in b.out.splitlines()
             if ln.strip() and not ln.startswith(("sluice-guest: ", "hello ", "<", "GREETING="))
             and not re.match(r"\[\s*\d+\.\d+\] ", ln)]
    assert not noise, b.out


def test_nf_binary_runs(capsys):
    b = boot(["/usr/bin/sluice-nf-fwd", "--help"])
    report(capsys, "sluice-nf-fwd --help", b)
    assert "usage: sluice-nf-fwd" in b.out, b.out
    assert b.status == 0 and b.rc == 0, b.out


GUEST_CHECK = r"""
for m in virtio_pci virtio_console virtio_net uio_pci_generic; do
    [ -d /sys/module/$m ] && echo "module: $m"
done
for p in /sys/class/virtio-ports/*; do echo "port: ${p##*/} $(cat $p/name)"; done
for c in /dev/vport*; do [ -c "$c" ] && echo "chardev: $c"; done
[ -c /dev/virtio-ports/sluice ] && echo "link: $(readlink /dev/virtio-ports/sluice)"
# one open for both directions: what the host sends while the port is closed is discarded
exec 3<>/dev/virtio-ports/sluice
echo "ping from guest" >&3
read -r reply <&3
exec 3>&-
echo "reply: $reply"
for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor) $(cat $d/device)" = "0x1af4 0x1110" ] || continue
    set -- $(sed -n 3p $d/resource)
    echo "ivshmem: $1 $2"
    echo "bar2: $(devmem $1 32) $(devmem $(($1 + 4)) 32)"
    devmem $(($1 + 4096)) 32 0x4B4F4B4F
done
ip -4 -o addr show dev eth0 | sed 's/^/eth0: /'
"""


def test_modules_and_devices(capsys):
    magic = b"SLUICE-GUEST-IMG"
    tmp = Path(tempfile.mkdtemp(prefix="slt-gimg-", dir="/tmp"))
    shm = Path(f"/dev/shm/slt-gimg-{os.getpid()}")
    sock_path = tmp / "chan.sock"
    got = {}
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with open(shm, "wb") as f:
            f.write(magic)
            f.truncate(1 << 20)
        srv.bind(str(sock_path))
        srv.listen(1)
        srv.settimeout(BOOT_TIMEOUT)

        def serve():  # the host end of the virtio-serial port: one line in, one line out
            try:
                c, _ = srv.accept()
                with c:
                    c.settimeout(BOOT_TIMEOUT)
                    buf = b""
                    while b"\n" not in buf:
                        d = c.recv(4096)
                        if not d:
                            break
                        buf += d
                    got["line"] = buf
                    c.sendall(b"pong from host\n")
                    c.recv(1)  # until QEMU closes
            except OSError as e:
                got["error"] = e

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        b = boot(["/bin/sh", "-c", GUEST_CHECK], append=["sluice.ip=10.0.2.15/24"], qemu_args=[
            "-object", f"memory-backend-file,id=m0,mem-path={shm},size=1M,share=on",
            "-device", "ivshmem-plain,memdev=m0",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=c0,path={sock_path}",
            "-device", "virtserialport,chardev=c0,name=sluice",
            "-netdev", "user,id=n0,restrict=on", "-device", "virtio-net-pci,netdev=n0"])
        t.join(5)
        report(capsys, "virtio-serial + ivshmem + virtio-net", b)
        assert b.status == 0 and b.rc == 0, b.out
        assert set(b.lines("module:")) == {"virtio_pci", "virtio_console", "virtio_net", "uio_pci_generic"}, b.out
        ports = b.lines("port:")
        assert len(ports) == 1 and ports[0].endswith(" sluice"), b.out
        vport = ports[0].split()[0]
        assert b.lines("chardev:") == [f"/dev/{vport}"], b.out
        assert b.lines("link:") == [f"../{vport}"], b.out
        assert got.get("line") == b"ping from guest\n", (got, b.out)
        assert b.lines("reply:") == ["pong from host"], b.out
        (bar,) = b.lines("ivshmem:")
        start, end = (int(x, 16) for x in bar.split())
        assert end - start + 1 == 1 << 20, b.out
        words = [int(x, 16) for x in b.lines("bar2:")[0].split()]
        assert words == list(struct.unpack("<2I", magic[:8])), b.out
        with open(shm, "rb") as f:
            f.seek(4096)
            assert f.read(4) == b"OKOK", "the guest's write through BAR2 is not in the host's file"
        assert any("inet 10.0.2.15/24" in ln for ln in b.lines("eth0:")), b.out
    finally:
        srv.close()
        shm.unlink(missing_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
