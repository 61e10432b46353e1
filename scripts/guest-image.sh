#!/usr/bin/env bash
# Build the Sluice KVM guest image from Debian packages only (docs/guests.md, "The guest image"):
#
#   scripts/guest-image.sh BUILD_DIR OUT_DIR
#
# writes OUT_DIR/vmlinuz (the newest /boot/vmlinuz-*-amd64), OUT_DIR/vmlinux (the same kernel
# uncompressed, for a faster PVH boot) and OUT_DIR/initrd.img (gzip'd newc
# cpio): busybox-static and its applet links, /init (scripts/guest-init.sh), the kernel modules for
# virtio-pci, virtio-serial, virtio-net and uio_pci_generic with their dependencies, every
# BUILD_DIR/nfs/sluice-nf-* and iperf3 in /usr/bin, and every shared library they need.
# Idempotent: OUT_DIR/.inputs holds a hash of every input file; when it matches, nothing is done.
# Needs (make deps): linux-image-amd64 busybox-static cpio kmod iperf3. Runs as root (the kernel in
# /boot is readable by root only; /dev/console in the image is made with mknod).
set -euo pipefail

usage() { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
BUILD_DIR=$(realpath -- "$1")
OUT_DIR=$2

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
SELF=$SCRIPT_DIR/$(basename -- "${BASH_SOURCE[0]}")
INIT_SRC=$SCRIPT_DIR/guest-init.sh
BUSYBOX=/bin/busybox
# vfio-pci: libsluice takes the rings device's MSI-X doorbell interrupt through VFIO (docs/guests.md
# "Wakeups"; the guest NF's QEMU gives it an intel-iommu for that)
MODULES=(virtio_pci virtio_console virtio_net uio_pci_generic vfio-pci)
declare -A MODPARAMS=()  # insmod parameters per module name, if one ever needs some
EXTRA_BINS=(/usr/bin/iperf3)

log() { echo "guest image: $*"; }
die() { echo "guest image: error: $*" >&2; exit 1; }

[ -f "$INIT_SRC" ] || die "missing $INIT_SRC"
[ -x "$BUSYBOX" ] || die "missing $BUSYBOX (apt-get install busybox-static)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is dynamically linked (install busybox-static)"; fi
for t in cpio gzip xz modprobe depmod ldd flock; do
    command -v "$t" >/dev/null || die "missing $t (make deps)"
done

kernel=$(find /boot -maxdepth 1 -name 'vmlinuz-*-amd64' -type f 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || die "no /boot/vmlinuz-*-amd64 (apt-get install linux-image-amd64)"
[ -r "$kernel" ] || die "cannot read $kernel (run as root)"
kver=${kernel#/boot/vmlinuz-}
moddir=/lib/modules/$kver
[ -f "$moddir/modules.dep" ] || die "no $moddir/modules.dep"

nfs=()
for f in "$BUILD_DIR"/nfs/sluice-nf-*; do
    [[ -f $f && -x $f ]] && nfs+=("$f")
done
[ ${#nfs[@]} -gt 0 ] || die "no NF binaries in $BUILD_DIR/nfs (make build)"
march=$(sed -n 's/.*"name": "march", "value": "\([^"]*\)".*/\1/p' \
    "$BUILD_DIR/meson-info/intro-buildoptions.json" 2>/dev/null || true)
if [ "$march" = native ]; then
    log "warning: $BUILD_DIR is built with -march=native: its NFs may die of SIGILL in a guest on another" \
        "CPU or under TCG (make guest-image uses build-guest/, -Dmarch=x86-64-v2)"
fi
for b in "${EXTRA_BINS[@]}"; do [ -x "$b" ] || die "missing $b (make deps)"; done

# Modules in load order (modprobe resolves modules.dep; "builtin" lines need nothing).
mods=() builtin=()
for m in "${MODULES[@]}"; do
    out=$(modprobe -S "$kver" -D "$m" 2>&1) || die "modprobe -S $kver -D $m: $out"
    while read -r kind path _; do
        case $kind in
            insmod) [[ " ${mods[*]} " == *" $path "* ]] || mods+=("$path") ;;
            builtin) [[ " ${builtin[*]} " == *" $path "* ]] || builtin+=("$path") ;;
        esac
    done <<<"$out"
done

# Shared libraries (and the dynamic loader) of every dynamically linked program, at ldd's paths.
libs=()
for b in "${nfs[@]}" "${EXTRA_BINS[@]}"; do
    out=$(ldd "$b") || die "ldd $b failed"
    if grep -q 'not found' <<<"$out"; then die "ldd $b: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')"; fi
    while read -r p; do
        [[ " ${libs[*]} " == *" $p "* ]] || libs+=("$p")
    done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $2 != "=>" && $1 ~ /^\// {print $1}' <<<"$out")
done

# Everything the image is made of decides whether it is up to date.
hash=$( {
    echo "kver $kver"
    printf 'module %s\n' "${mods[@]}"
    sha256sum -- "$SELF" "$INIT_SRC" "$kernel" "$BUSYBOX" "${mods[@]}" "${nfs[@]}" "${EXTRA_BINS[@]}" "${libs[@]}"
} | sha256sum | cut -d' ' -f1)

mkdir -p -- "$OUT_DIR"
OUT_DIR=$(realpath -- "$OUT_DIR")
exec 9>"$OUT_DIR/.lock"
flock 9
if [ -f "$OUT_DIR/vmlinuz" ] && [ -f "$OUT_DIR/initrd.img" ] && [ "$(cat "$OUT_DIR/.inputs" 2>/dev/null)" = "$hash" ]; then
    log "up to date"
    exit 0
fi

log "building $OUT_DIR (kernel $kver, ${#mods[@]} modules, ${#nfs[@]} NFs + iperf3, ${#libs[@]} libraries)"
rm -rf -- "$OUT_DIR"/.stage.*  # left by an interrupted run (we hold the lock)
stage=$(mktemp -d "$OUT_DIR/.stage.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT
root=$stage/root

# Merged /usr, like Debian 12: /bin /sbin /lib /lib64 are links into /usr.
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,dev,proc,sys,tmp,run,etc/sluice-guest,root,mnt,var}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
ln -s ../run "$root/var/run"
chmod 1777 "$root/tmp"

install -m 0755 "$BUSYBOX" "$root/usr/bin/busybox"
while read -r applet; do
    case $applet in linuxrc | "") continue ;; esac
    [ -e "$root/$applet" ] || [ -L "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
done < <("$BUSYBOX" --list-full)

for b in "${nfs[@]}" "${EXTRA_BINS[@]}"; do
    install -m 0755 "$b" "$root/usr/bin/$(basename -- "$b")"
done
for l in "${libs[@]}"; do
    mkdir -p "$root$(dirname -- "$l")"
    cp -L -- "$l" "$root$l"
done

: >"$root/etc/sluice-guest/modules"
for m in "${mods[@]}"; do
    rel=${m#"$moddir"/}
    dst=$root/lib/modules/$kver/$rel
    mkdir -p "$(dirname -- "$dst")"
    case $m in
        *.ko.xz) xz -dc -- "$m" >"${dst%.xz}"; dst=${dst%.xz} ;;
        *.ko.zst) zstd -qdc -- "$m" >"${dst%.zst}"; dst=${dst%.zst} ;;
        *.ko.gz) gzip -dc -- "$m" >"${dst%.gz}"; dst=${dst%.gz} ;;
        *) cp -- "$m" "$dst" ;;
    esac
    base=$(basename -- "$dst" .ko)
    echo "${dst#"$root"}${MODPARAMS[$base]:+ ${MODPARAMS[$base]}}" >>"$root/etc/sluice-guest/modules"
done
# modules.dep etc. for the shipped modules only, so busybox modprobe works when debugging
cp -- "$moddir/modules.builtin" "$root/lib/modules/$kver/"
for m in "${mods[@]}"; do echo "${m#"$moddir"/}"; done >"$root/lib/modules/$kver/modules.order"
depmod -b "$root" "$kver" 2>/dev/null || log "depmod failed (modprobe in the guest will not work; insmod does)"

install -m 0755 "$INIT_SRC" "$root/init"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\ntty:x:5:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
# the kernel opens /dev/console before running /init (devtmpfs is mounted over /dev later)
mknod -m 0600 "$root/dev/console" c 5 1 2>/dev/null || log "cannot mknod /dev/console (not root?); /init reopens it"
mknod -m 0666 "$root/dev/null" c 1 3 2>/dev/null || true

(cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -n -6 >"$stage/initrd.img"
install -m 0644 "$kernel" "$stage/vmlinuz"
# The same kernel uncompressed (an ELF with a PVH entry note): QEMU boots it directly with
# -kernel vmlinux, skipping the decompressor (about 2 s under TCG, where nothing is accelerated).
vmlinux=''
off=$(LC_ALL=C grep -obUaP -m1 '\xfd7zXZ\x00' "$kernel" | head -n1 | cut -d: -f1 || true)
# (xz stops after the stream, so tail may die of SIGPIPE: keep it out of the pipefail pipeline)
if [ -n "$off" ] && xz -dc --single-stream < <(tail -c +$((off + 1)) "$kernel") >"$stage/vmlinux" 2>/dev/null &&
    printf '\177ELF' | cmp -s -n 4 - "$stage/vmlinux"; then
    chmod 0644 "$stage/vmlinux"
    mv -f -- "$stage/vmlinux" "$OUT_DIR/vmlinux"
    vmlinux=yes
else
    log "cannot extract an uncompressed vmlinux from $kernel (not xz?); only vmlinuz"
    rm -f -- "$OUT_DIR/vmlinux"
fi
mv -f -- "$stage/vmlinuz" "$OUT_DIR/vmlinuz"
mv -f -- "$stage/initrd.img" "$OUT_DIR/initrd.img"
echo "$hash" >"$OUT_DIR/.inputs"
size() { du -h --apparent-size "$1" | cut -f1; }
log "wrote $OUT_DIR: vmlinuz ($(size "$OUT_DIR/vmlinuz"))${vmlinux:+, vmlinux ($(size "$OUT_DIR/vmlinux"))}," \
    "initrd.img ($(size "$OUT_DIR/initrd.img"))"
log "modules: ${mods[*]##*/}${builtin:+; built in: ${builtin[*]}}"
