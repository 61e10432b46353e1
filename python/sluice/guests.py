"""NFs in KVM guests (docs/guests.md): the QEMU command line for a guest NF.

sluiced makes the guest's slot (`guest_prepare`): what QEMU must map (the NF's rings, its domain's
packet region and pipe area, as /proc/<sluiced>/fd/<n> paths of memfds) and the UNIX socket its
virtio-serial port "sluice" connects to. The guest image (scripts/guest-image.sh, build/guest/)
boots to /init, which runs the program named by `sluice.argv=` with the environment of
`sluice.env=` and powers the guest off when it exits: the QEMU process lives exactly as long as the
NF, so the supervisor restarts it like a process.
"""

import base64
import hashlib
import os
import shutil

DEFAULT_MEMORY_MB = 256
DEFAULT_VCPUS = 1
GUEST_DIR = "guest"  # under the build directory: vmlinuz, initrd.img
GUEST_BIN = "/usr/bin"  # where the image keeps the NF programs


class GuestError(Exception):
    pass


def qemu_binary():
    q = shutil.which("qemu-system-x86_64")
    if not q:
        raise GuestError("qemu-system-x86_64 not found (Debian package qemu-system-x86; `make deps`)")
    return q


def accel():
    """"kvm" or "tcg" (SLUICE_GUEST_ACCEL overrides). KVM needs /dev/kvm of a kernel that runs stock
    guests: a host whose /dev/kvm is PVM (kvm_pvm, pagetable-based nested virtualization, as on our
    CI machines) boots only PVM-built guest kernels, and Debian's kernel hangs in its real-mode setup
    there, so such a host runs guests under TCG, QEMU's emulator (correct, much slower)."""
    want = os.environ.get("SLUICE_GUEST_ACCEL", "auto")
    if want in ("kvm", "tcg"):
        return want
    if not os.access("/dev/kvm", os.R_OK | os.W_OK) or os.path.isdir("/sys/module/kvm_pvm"):
        return "tcg"
    return "kvm"


def accel_args(which=None):
    which = which or accel()
    if which == "kvm":
        return ["-enable-kvm", "-cpu", "host"]
    return ["-accel", "tcg,thread=multi", "-cpu", "max"]


def image_paths(vm, build_dir):
    """(kernel, initrd) of a normalized `vm:` entry: its own, or the image `make guest-image` built."""
    kernel = vm.get("kernel")
    if not kernel and build_dir:  # the uncompressed kernel boots ~2 s sooner under TCG (docs/guests.md)
        kernel = os.path.join(build_dir, GUEST_DIR, "vmlinux")
        if not os.path.isfile(kernel):
            kernel = os.path.join(build_dir, GUEST_DIR, "vmlinuz")
    initrd = vm.get("initrd") or (os.path.join(build_dir, GUEST_DIR, "initrd.img") if build_dir else None)
    for what, p in (("kernel", kernel), ("initrd", initrd)):
        if not p or not os.path.isfile(p):
            raise GuestError(f"guest {what} {p or '(none)'} not found: run `make guest-image` "
                             f"or set vm.{what}")
    return kernel, initrd


def _newc(name, mode, data=b"", ino=1):
    name_b = name.encode() + b"\0"
    hdr = "070701" + "".join(f"{v:08x}" for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0,
                                                       len(name_b), 0))
    out = hdr.encode() + name_b
    out += b"\0" * (-len(out) % 4) + data
    return out + b"\0" * (-len(out) % 4)


def files_cpio(paths):
    """A newc cpio archive of the given host files at the same absolute paths (with their directories).
    Linux unpacks every cpio of an initrd made of several, so this, appended to the image's, puts an
    NF's rule files where its arguments name them (docs/guests.md "Files")."""
    out, dirs, ino = b"", set(), 1
    for p in paths:
        p = os.path.abspath(p)
        parts = p.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                ino += 1
                out += _newc(d, 0o40755, ino=ino)
        ino += 1
        with open(p, "rb") as f:
            out += _newc(p.strip("/"), 0o100644, f.read(), ino=ino)
    return out + _newc("TRAILER!!!", 0, ino=0)


def guest_initrd(base, argv, out_path):
    """The initrd for a guest NF: `base` plus the host files its arguments name, if any (written to
    out_path; else base itself). Output files an NF writes in a guest stay there."""
    files = [a for a in argv[1:] if a.startswith("/") and os.path.isfile(a)]
    if not files:
        return base
    with open(out_path, "wb") as o, open(base, "rb") as b:
        shutil.copyfileobj(b, o)
        o.write(b"\0" * (-o.tell() % 4))
        o.write(files_cpio(files))
    return out_path


def _b64_nul(items):
    return base64.b64encode(b"\0".join(s.encode() for s in items)).decode()


BOOT_WORDS = ["console=ttyS0", "quiet", "loglevel=3", "panic=-1"]  # the image's console, quiet boot


def _boot_argv(title, which, memory, vcpus, kernel, initrd, words):
    """What every guest's QEMU command starts with: a direct kernel boot of the image, its serial
    console on stdout (the log), no default devices, exit when the guest powers off."""
    return [qemu_binary(), "-name", title] + accel_args(which) + [
        "-m", str(memory), "-smp", str(vcpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-serial", "stdio", "-kernel", kernel, "-initrd", initrd, "-append", " ".join(BOOT_WORDS + words)]


def qemu_argv(prep, vm, kernel, initrd, guest_argv, guest_env, name):
    """The QEMU command for guest NF `name`: `prep` is sluiced's guest_prepare reply, guest_argv the NF
    program and its arguments as seen inside the guest, guest_env its SLUICE_* variables."""
    words = [
        "intel_iommu=on", "iommu=pt",  # the NF takes its doorbell interrupt through VFIO (docs/guests.md)
        f"sluice.name={name}",
        f"sluice.argv={_b64_nul(guest_argv)}",
        f"sluice.env={_b64_nul(f'{k}={v}' for k, v in guest_env.items())}",
    ]
    argv = _boot_argv(f"sluice-{name}", None, vm.get("memory", DEFAULT_MEMORY_MB), vm.get("vcpus", DEFAULT_VCPUS),
                      kernel, initrd, words) + [
        # q35 with an IOMMU: VFIO in the guest needs the rings device in an IOMMU group
        "-M", "q35", "-device", "intel-iommu"]
    # the guest's memory shares nothing; only the ivshmem devices below map sluiced's memfds
    for m in prep["memory"]:
        mid = f"sl-{m['id']}"
        if "server" in m:  # the rings, with doorbells: sluiced is this device's ivshmem server
            argv += ["-chardev", f"socket,id={mid},path={m['server']}",
                     "-device", f"ivshmem-doorbell,chardev={mid},vectors=1"]
        else:
            argv += ["-object", f"memory-backend-file,id={mid},mem-path={m['path']},size={m['size']},share=on",
                     "-device", f"ivshmem-plain,memdev={mid}"]
    argv += ["-device", "virtio-serial-pci",
             "-chardev", f"socket,id=sl-chan,path={prep['channel']}",
             "-device", "virtserialport,chardev=sl-chan,name=sluice"]
    return argv


# ---------------------------------------------------------------- ordinary guests on vhost-user ports

DEFAULT_GUEST_COMMAND = ["/bin/sh", "-c", "while :; do sleep 3600; done"]  # runs until stopped


def guest_mac(name):
    """A stable locally administered MAC for guest `name` (52:54:00 is QEMU's prefix)."""
    h = hashlib.sha256(name.encode()).digest()
    return "52:54:00:%02x:%02x:%02x" % (h[0], h[1], h[2])


def vhost_user_qemu_argv(guest, kernel, initrd, socket_path):
    """The QEMU command for an ordinary guest (top-level `guests:`, docs/guests.md) whose only NIC is a
    virtio-net device on the vhost-user socket `socket_path` (the `iface=` of its net_vhost port, where
    sluiced listens). `guest` is a normalized `guests:` entry: name, memory, vcpus, ip, mtu, mac,
    command. vhost-user needs the guest's RAM shared (a memfd backend): the backend in sluiced maps it
    and copies frames in and out of the virtqueues."""
    name = guest["name"]
    mem = guest.get("memory", DEFAULT_MEMORY_MB)
    words = [f"sluice.name={name}"]
    if guest.get("ip"):
        words.append(f"sluice.ip={guest['ip']}")
    if guest.get("gw"):
        words.append(f"sluice.gw={guest['gw']}")
    if guest.get("mtu"):
        words.append(f"sluice.mtu={guest['mtu']}")
    words.append(f"sluice.argv={_b64_nul(guest.get('command') or DEFAULT_GUEST_COMMAND)}")
    which = accel()
    # QEMU 7.2 under TCG segfaults starting vhost-user with MSI-X (vhost_net_start ->
    # msix_set_vector_notifiers): give the NIC no MSI-X vectors there, legacy INTx instead
    nic = f"virtio-net-pci,netdev=n0,mac={guest.get('mac') or guest_mac(name)}" + (",vectors=0" if which == "tcg" else "")
    return _boot_argv(f"sluice-guest-{name}", which, mem, guest.get("vcpus", DEFAULT_VCPUS), kernel, initrd,
                      words) + [
        "-object", f"memory-backend-memfd,id=mem,size={mem}M,share=on", "-numa", "node,memdev=mem",
        "-chardev", f"socket,id=vu0,path={socket_path}",
        "-netdev", "vhost-user,id=n0,chardev=vu0",
        "-device", nic]
