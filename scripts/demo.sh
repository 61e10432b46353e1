#!/usr/bin/env bash
# Sluice demo (make demo): two network namespaces whose only link is sluiced.
#
#   sl-client (10.77.0.1/24)                                   sl-server (10.77.0.2/24)
#     sl-c <-veth-> sl-c-host == [port client] sluiced [port server] == sl-s-host <-veth-> sl-s
#                  c2s: count -> fwd -> server      s2c: count -> fwd -> client
#
# Runs `sluice up -d`, ping -c 5, a 5 s iperf3 TCP test, prints `sluice stats`, then
# tears everything down (always, via trap: on success, failure or Ctrl-C).
# Needs root and a build (make build). Environment:
#   SLUICE_BUILD_DIR   meson build dir (default <repo>/build)
#   SLUICE_SOCKET_DIR  sluiced socket dir (default /run/sluice)
#   PYTHON             python with the sluice package (default <repo>/.venv/bin/python)
#   DEMO_WAKEUP        NF wakeup mode: block (default), adaptive or poll
#   DEMO_SECONDS       iperf3 duration (default 5)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${SLUICE_BUILD_DIR:-$ROOT/build}
SOCK=${SLUICE_SOCKET_DIR:-/run/sluice}
PY=${PYTHON:-$ROOT/.venv/bin/python}
WAKEUP=${DEMO_WAKEUP:-block}
SECS=${DEMO_SECONDS:-5}
NS_C=sl-client
NS_S=sl-server

if [ ! -x "$PY" ]; then
	PY=/usr/bin/python3
	export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
fi
sluice() { "$PY" -m sluice "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

[ "$(id -u)" -eq 0 ] || { echo "demo: must run as root (network namespaces, DPDK)" >&2; exit 1; }
for b in "$BUILD/src/manager/sluiced" "$BUILD/nfs/sluice-nf-fwd" "$BUILD/nfs/sluice-nf-count"; do
	[ -x "$b" ] || { echo "demo: $b missing; run 'make build' first" >&2; exit 1; }
done
for t in ip ethtool ping iperf3; do
	command -v "$t" >/dev/null || { echo "demo: $t missing; run 'make deps'" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/sluice-demo.XXXXXX)
UP=0
IPERF_PID=

remove_net() {
	ip netns pids "$NS_S" 2>/dev/null | xargs -r kill 2>/dev/null || true
	ip netns pids "$NS_C" 2>/dev/null | xargs -r kill 2>/dev/null || true
	ip netns del "$NS_C" 2>/dev/null || true
	ip netns del "$NS_S" 2>/dev/null || true
	ip link del sl-c-host 2>/dev/null || true
	ip link del sl-s-host 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	say "teardown"
	if [ -n "$IPERF_PID" ]; then kill "$IPERF_PID" 2>/dev/null || true; fi
	if [ "$UP" = 1 ]; then sluice down --socket-dir "$SOCK" || true; fi
	remove_net
	rm -rf "$WORK"
	if [ "$rc" -eq 0 ]; then echo "demo: done"; else echo "demo: FAILED (status $rc)" >&2; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted" >&2; exit 130' INT TERM

say "network namespaces $NS_C and $NS_S"
remove_net # leftovers of an earlier run that was killed hard
ip netns add "$NS_C"
ip netns add "$NS_S"
ip link add sl-c-host type veth peer name sl-c
ip link add sl-s-host type veth peer name sl-s
ip link set sl-c netns "$NS_C"
ip link set sl-s netns "$NS_S"
# no addresses on the host ends (no IPv6 link-local either): they only carry frames to sluiced
for dev in sl-c-host sl-s-host; do
	sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" || true
	ip link set "$dev" up
done
ip -n "$NS_C" link set lo up
ip -n "$NS_S" link set lo up
ip netns exec "$NS_C" sysctl -qw net.ipv6.conf.sl-c.disable_ipv6=1 || true
ip netns exec "$NS_S" sysctl -qw net.ipv6.conf.sl-s.disable_ipv6=1 || true
ip -n "$NS_C" addr add 10.77.0.1/24 dev sl-c
ip -n "$NS_S" addr add 10.77.0.2/24 dev sl-s
ip -n "$NS_C" link set sl-c up
ip -n "$NS_S" link set sl-s up
# af_packet hands frames over as they are: no checksum offload, no segmentation offload
OFFLOADS=(tx off rx off tso off gso off gro off)
ethtool -K sl-c-host "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ethtool -K sl-s-host "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip netns exec "$NS_C" ethtool -K sl-c "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip netns exec "$NS_S" ethtool -K sl-s "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip -br addr show sl-c-host; ip -br addr show sl-s-host
ip -n "$NS_C" -br addr show sl-c; ip -n "$NS_S" -br addr show sl-s

say "config"
cat >"$WORK/demo.yaml" <<EOF
sluiced:
  socket_dir: $SOCK
ports:
  - name: client
    vdev: net_af_packet0,iface=sl-c-host,framecnt=4096
    chain: c2s
  - name: server
    vdev: net_af_packet1,iface=sl-s-host,framecnt=4096
    chain: s2c
chains:
  - name: c2s
    nfs: [count, fwd]
    exit: server
  - name: s2c
    nfs: [count, fwd]
    exit: client
nfs:
  - name: count
    program: count
    wakeup: $WAKEUP
  - name: fwd
    program: fwd
    wakeup: $WAKEUP
EOF
cat "$WORK/demo.yaml"
sluice config check "$WORK/demo.yaml"

say "sluice up -d"
sluice up "$WORK/demo.yaml" -d --build-dir "$BUILD" --socket-dir "$SOCK"
UP=1
sluice status --socket-dir "$SOCK"

say "ping -c 5 10.77.0.2 (from $NS_C)"
if ! ip netns exec "$NS_C" ping -c 5 -i 0.2 -W 2 10.77.0.2; then
	echo "demo: ping failed; sluice stats:" >&2
	sluice stats --socket-dir "$SOCK" || true
	exit 1
fi

say "iperf3 TCP, ${SECS}s ($NS_C -> $NS_S)"
ip netns exec "$NS_S" iperf3 -s -1 -B 10.77.0.2 >"$WORK/iperf3-server.log" 2>&1 &
IPERF_PID=$!
for _ in $(seq 50); do
	ip netns exec "$NS_S" ss -ltn 2>/dev/null | grep -q ':5201 ' && break
	sleep 0.1
done
if ! timeout $((SECS + 30)) ip netns exec "$NS_C" iperf3 -c 10.77.0.2 -t "$SECS" -i 1 --connect-timeout 3000; then
	echo "demo: iperf3 failed; server log:" >&2
	cat "$WORK/iperf3-server.log" >&2 || true
	sluice stats --socket-dir "$SOCK" || true
	exit 1
fi
wait "$IPERF_PID" 2>/dev/null || true
IPERF_PID=

say "sluice stats (what crossed each port and NF)"
sluice stats --socket-dir "$SOCK"
