#!/usr/bin/env bash
# The DPDK overlay of the guest image (docs/ports.md "PCI NICs"): what a guest needs to run sluiced
# itself on its own PCI NICs -- tests/integration/test_pci_guest.py boots the guest image with it.
#
#   scripts/guest-dpdk-overlay.sh BUILD_DIR OUT_DIR
#
# writes OUT_DIR/dpdk.cpio (newc, uncompressed: appended to initrd.img, the kernel unpacks both):
# BUILD_DIR's sluiced and sluice-ctl-relay and Debian's dpdk-testpmd in /usr/bin, the DPDK PMDs the
# guest's NICs and sluiced's pools need in DPDK's plugin directory, and every shared library they
# use. Symlinks stay symlinks: a PMD that is both a plugin and a program's dependency must be one file,
# or EAL registers it twice and panics. Paths under /lib go to /usr/lib (the image's /lib is a link).
# Idempotent: OUT_DIR/.dpdk-inputs holds a hash of the inputs.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
BUILD_DIR=$(realpath -- "$1")
OUT_DIR=$(realpath -- "$2")
PMD_DIR=/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0
PMDS=(bus_pci bus_vdev mempool_ring net_virtio net_e1000 net_null net_ring)
# dpdk-testpmd (bench/pci_guest.py's peer) links a dozen more PMDs; their files are copied as plain
# libraries, not into the plugin directory, or EAL would load each as a plugin (put_plain below).
BINS=("$BUILD_DIR/src/manager/sluiced" "$BUILD_DIR/tests/guest/sluice-ctl-relay" /usr/bin/dpdk-testpmd)
log() { echo "guest dpdk overlay: $*"; }
die() { echo "guest dpdk overlay: error: $*" >&2; exit 1; }
for b in "${BINS[@]}"; do [ -x "$b" ] || die "missing $b (make guest-image builds it)"; done
for p in "${PMDS[@]}"; do [ -e "$PMD_DIR/librte_$p.so" ] || die "missing $PMD_DIR/librte_$p.so (apt-get install dpdk)"; done
mkdir -p -- "$OUT_DIR"

deps() { ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $2 != "=>" && $1 ~ /^\// {print $1}'; }
files=("${BINS[@]}")
for p in "${PMDS[@]}"; do files+=("$(readlink -f "$PMD_DIR/librte_$p.so")"); done
hash=$({ sha256sum -- "$0" "${files[@]}"; for f in "${files[@]}"; do deps "$f"; done | sort -u | xargs sha256sum; } |
       sha256sum | cut -d' ' -f1)
if [ -f "$OUT_DIR/dpdk.cpio" ] && [ "$(cat "$OUT_DIR/.dpdk-inputs" 2>/dev/null)" = "$hash" ]; then
    log "up to date"
    exit 0
fi

root=$(mktemp -d)
trap 'rm -rf -- "$root"' EXIT
usr() { case $1 in /lib/* | /lib64/* | /bin/* | /sbin/*) echo "/usr$1" ;; *) echo "$1" ;; esac; }
put() { # path $1 into the overlay: a symlink as a symlink, then what it points to
    local p=$1 d t
    d=$(usr "$p")
    if [ -e "$root$d" ] || [ -L "$root$d" ]; then return 0; fi
    mkdir -p "$root$(dirname -- "$d")"
    if [ -L "$p" ]; then
        t=$(readlink -- "$p")
        ln -s -- "$t" "$root$d"
        case $t in /*) put "$t" ;; *) put "$(dirname -- "$p")/$t" ;; esac
    else
        cp -- "$p" "$root$d"
    fi
}
for p in "${PMDS[@]}"; do put "$PMD_DIR/librte_$p.so"; done
mkdir -p "$root/usr/bin"
for b in "${BINS[@]}"; do install -m 0755 "$b" "$root/usr/bin/$(basename -- "$b")"; done
# A library that is a PMD this overlay does not load as a plugin: a plain file at its library path.
put_plain() {
    local p=$1 d real b
    real=$(readlink -f -- "$p")
    b=$(basename -- "$real")
    case $real in "$PMD_DIR"/*) ;; *) put "$p"; return ;; esac
    for q in "${PMDS[@]}"; do [[ $b == librte_$q.so* ]] && { put "$p"; return; }; done
    d=$(usr "$p")
    if [ -e "$root$d" ] || [ -L "$root$d" ]; then return 0; fi
    mkdir -p "$root$(dirname -- "$d")"
    cp -L -- "$p" "$root$d"
}
for f in "${files[@]}"; do
    while read -r l; do put_plain "$l"; done < <(deps "$f")
done
(cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible) >"$OUT_DIR/dpdk.cpio.tmp"
mv -f -- "$OUT_DIR/dpdk.cpio.tmp" "$OUT_DIR/dpdk.cpio"
echo "$hash" >"$OUT_DIR/.dpdk-inputs"
log "wrote $OUT_DIR/dpdk.cpio ($(du -h --apparent-size "$OUT_DIR/dpdk.cpio" | cut -f1): sluiced, sluice-ctl-relay," \
    "dpdk-testpmd, PMDs ${PMDS[*]})"
