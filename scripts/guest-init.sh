#!/bin/sh
# /init of the Sluice KVM guest image (built by scripts/guest-image.sh; runs under busybox sh).
#
# The contract other code relies on (also in docs/guests.md, "The guest image"):
#
# Boot: QEMU -kernel vmlinuz -initrd initrd.img -no-reboot, console on ttyS0; the caller passes
#   "console=ttyS0 quiet loglevel=3 panic=-1" plus the sluice.* parameters below.
# Setup, in this order: mount proc (/proc), sysfs (/sys), devtmpfs (/dev), devpts (/dev/pts), tmpfs
#   on /dev/shm and /run (/tmp is the initramfs' own, RAM already, mode 1777); hostname from
#   sluice.name= (default "sluice-guest"); insmod the modules listed in /etc/sluice-guest/modules
#   (virtio_pci, virtio_console, virtio_net, uio_pci_generic and their dependencies, in load
#   order); bring lo up.
# virtio-serial: if a virtio console device exists, wait (up to 1 s) until every port has its
#   name, then link /dev/virtio-ports/NAME -> ../vportNpM (what udev would do; there is no udev).
# Network (optional): sluice.ip=ADDR/PREFIX configures eth0 (else the first ethernet interface):
#   optional sluice.mtu=N, the address, link up, and optional sluice.gw=ADDR as the default route.
#   Without sluice.ip= no interface but lo is touched.
# Payload: sluice.argv=BASE64 decodes to the program and its arguments separated by NUL bytes (one
#   trailing NUL is allowed and ignored); optional sluice.env=BASE64 decodes to NAME=VALUE entries
#   separated by NUL. The payload runs as a child of this init with stdin/stdout/stderr on the
#   console, and exactly this environment: PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/ TERM=linux,
#   then the sluice.env entries (which may override those three). Entries without '=' are ignored.
#   The program must not contain '=' (env(1) would take it for an assignment); NF binaries are in
#   /usr/bin (/usr/bin/sluice-nf-fwd, ...), so is iperf3; busybox applets are in /bin, /sbin, ...
#   Base64 uses the standard alphabet with padding; the whole kernel command line is limited to
#   2048 bytes on x86, so argv+env must stay well below ~1400 bytes before encoding.
# Output: init prints nothing but these lines (stdout = console):
#   "sluice-guest: ready in X.XX s"                 (/proc/uptime) just before the payload starts
#   "sluice-guest: payload exited with status N"    (N = exit status; 128+SIG if killed; 127 if the
#                                                    program cannot be run or argv cannot be decoded)
#   "sluice-guest: <problem>"                       for a setup step that failed (boot continues)
#   Then it waits for the console to drain and powers off at once (poweroff -f), so QEMU
#   (-no-reboot) exits.
# Without sluice.argv=, an interactive /bin/sh runs on the console instead; when it exits, the same
#   status line is printed and the guest powers off. If this script itself dies, the kernel panics
#   and panic=-1 reboots, which -no-reboot turns into QEMU exiting too.

# shellcheck disable=SC3045  # busybox ash has read -d '' (NUL-separated entries)
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022
set -f  # the command line is split into words below: no globbing of its contents

log() { echo "sluice-guest: $*"; }

mount -t proc -o nosuid,nodev,noexec proc /proc || log "cannot mount /proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || log "cannot mount /sys"
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev || log "cannot mount /dev"
# The image has /dev/console, so the kernel opened it for us; if not, open it now.
[ -t 1 ] || exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,ptmxmode=0666,mode=0620 devpts /dev/pts || log "cannot mount /dev/pts"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm || log "cannot mount /dev/shm"
# /tmp stays the initramfs' own (already RAM): files appended to the initrd for the NF (an NF's rule
# file at its host path, docs/guests.md "Files") may live under /tmp
chmod 1777 /tmp 2>/dev/null || true
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run || log "cannot mount /run"

name=sluice-guest argv_b64='' env_b64='' ip='' gw='' mtu=''
read -r cmdline </proc/cmdline
for w in $cmdline; do
    case "$w" in
        sluice.name=*) name=${w#*=} ;;
        sluice.argv=*) argv_b64=${w#*=} ;;
        sluice.env=*) env_b64=${w#*=} ;;
        sluice.ip=*) ip=${w#*=} ;;
        sluice.gw=*) gw=${w#*=} ;;
        sluice.mtu=*) mtu=${w#*=} ;;
    esac
done
set +f

hostname "$name" || log "cannot set hostname '$name'"

if [ -r /etc/sluice-guest/modules ]; then
    while read -r ko params; do  # a line: the module's path, then its parameters if any
        [ -n "$ko" ] || continue
        # shellcheck disable=SC2086 # params are words
        insmod "$ko" $params || log "insmod $ko failed"
    done </etc/sluice-guest/modules
fi
ip link set lo up || log "cannot bring lo up"

# virtio-serial ports: their names arrive from the host asynchronously, after the driver's probe.
have_console=0
for d in /sys/bus/virtio/devices/*; do
    [ "$(cat "$d/device" 2>/dev/null)" = 0x0003 ] && have_console=1
done
if [ "$have_console" = 1 ]; then
    i=0
    while :; do
        n=0 named=0
        for p in /sys/class/virtio-ports/*; do
            [ -e "$p" ] || continue
            n=$((n + 1))
            [ -e "$p/name" ] && named=$((named + 1))
        done
        [ "$n" -gt 0 ] && [ "$named" = "$n" ] && break
        i=$((i + 1))
        [ "$i" -ge 100 ] && break
        usleep 10000
    done
    mkdir -p /dev/virtio-ports
    for p in /sys/class/virtio-ports/*; do
        [ -r "$p/name" ] || continue
        pname=$(cat "$p/name")
        [ -n "$pname" ] && ln -sf "../${p##*/}" "/dev/virtio-ports/$pname"
    done
fi

if [ -n "$ip" ]; then
    dev=
    if [ -e /sys/class/net/eth0 ]; then
        dev=eth0
    else
        for n in /sys/class/net/*; do
            [ "$(cat "$n/type" 2>/dev/null)" = 1 ] && { dev=${n##*/}; break; }
        done
    fi
    if [ -z "$dev" ]; then
        log "sluice.ip=$ip given but there is no ethernet interface"
    else
        [ -z "$mtu" ] || ip link set dev "$dev" mtu "$mtu" || log "cannot set mtu $mtu on $dev"
        ip link set dev "$dev" up || log "cannot bring $dev up"
        ip addr add "$ip" dev "$dev" || log "cannot add $ip to $dev"
        [ -z "$gw" ] || ip route add default via "$gw" dev "$dev" || log "cannot add default route via $gw"
    fi
fi

ready() {
    read -r up _ </proc/uptime
    log "ready in $up s"
}

# Wait until the console has sent everything (stty applies settings with TCSADRAIN), then power off.
finish() {
    log "payload exited with status $1"
    stty -F /dev/console "$(stty -F /dev/console -g 2>/dev/null)" 2>/dev/null
    echo 0 >/proc/sys/kernel/printk  # no "reboot: Power down" from the kernel
    poweroff -f
    echo o >/proc/sysrq-trigger
    sleep 10
}

if [ -z "$argv_b64" ]; then
    ready
    setsid cttyhack /bin/sh -l
    finish $?
fi

mkdir -p /run/sluice-guest
# Positional parameters: the env entries, then argv; "$nenv" says where argv starts.
set --
if [ -n "$env_b64" ]; then
    if printf '%s' "$env_b64" | base64 -d >/run/sluice-guest/env 2>/dev/null; then
        while IFS= read -r -d '' e || [ -n "$e" ]; do
            case "$e" in
                [A-Za-z_]*=*) set -- "$@" "$e" ;;
                ?*) log "ignoring sluice.env entry without NAME=: $e" ;;
            esac
        done </run/sluice-guest/env
    else
        log "cannot decode sluice.env (ignored)"
    fi
fi
nenv=$#
if ! printf '%s' "$argv_b64" | base64 -d >/run/sluice-guest/argv 2>/dev/null; then
    log "cannot decode sluice.argv"
    finish 127
fi
while IFS= read -r -d '' a || [ -n "$a" ]; do
    set -- "$@" "$a"
done </run/sluice-guest/argv
if [ "$#" = "$nenv" ]; then
    log "sluice.argv is empty"
    finish 127
fi

ready
env -i PATH="$PATH" HOME=/ TERM=linux "$@"
finish $?
