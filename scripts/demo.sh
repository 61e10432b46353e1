#!/usr/bin/env bash
# Sluice demo (make demo): a client and a server in two network namespaces whose only link is
# sluiced, with the NF library in between: a stateful firewall, a NAT and a packet monitor.
#
#   sl-client  sl-c 10.77.1.2/24                         sl-server  sl-s 10.77.2.2/24
#              default via 10.77.1.1                                HTTP :80 and :8080, iperf3 :5201
#     |                                                     |
#   sl-c-host == [port client]        sluiced       [port server] == sl-s-host
#                c2s: firewall -> nat -> monitor -> exit server
#                s2c: nat -> firewall -> monitor -> exit client
#
# firewall: the client may ping and open TCP to ports 80 and 5201; port 8080 is dropped by a rule;
#           replies pass by connection tracking. It sees the client's own address both ways (before
#           the NAT going out, after it coming back).
# nat:      masquerades 10.77.1.0/24 behind 10.77.2.1, so the server sees 10.77.2.1, never 10.77.1.2.
# monitor:  writes a pcapng capture (the first 5000 packets, 128 bytes of each) of what leaves the
#           chain; tshark reads it back.
# No NF routes or answers ARP (the NAT passes only IPv4), so each side has a static neighbour
# entry for the other side's MAC: 10.77.1.1 -> sl-s's MAC, 10.77.2.1 -> sl-c's MAC.
#
# Steps: sluice up -d; ping and curl :80 (allowed); curl :8080 (blocked: it times out, the
# firewall's rule counter shows the drop); iperf3 (allowed); what the server saw (the NAT's
# address); the monitor's capture read with tshark; sluice stats. About 15 s (more on a busy
# machine). Everything (namespaces, veths, processes, temp files) is removed at the end, via a
# trap: on success, failure or Ctrl-C.
# Needs root and a build (make build). Environment:
#   SLUICE_BUILD_DIR   meson build dir (default <repo>/build)
#   SLUICE_SOCKET_DIR  sluiced socket dir (default: a private directory under the demo's temp dir)
#   PYTHON             python with the sluice package (default <repo>/.venv/bin/python)
#   DEMO_WAKEUP        NF wakeup mode: block (default), adaptive or poll
#   DEMO_SECONDS       iperf3 duration (default 5)
#   DEMO_FAIL_AT       (tests) fail on purpose when the step with this key starts: net, config,
#                      up, servers, ping, http, blocked, iperf3, nat, capture, stats
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${SLUICE_BUILD_DIR:-$ROOT/build}
PY=${PYTHON:-$ROOT/.venv/bin/python}
WAKEUP=${DEMO_WAKEUP:-block}
SECS=${DEMO_SECONDS:-5}
FAIL_AT=${DEMO_FAIL_AT:-}
NS_C=sl-client
NS_S=sl-server
CLIENT=10.77.1.2   # sl-client's address (private)
GW=10.77.1.1       # sl-client's gateway: resolves to the server's MAC
SERVER=10.77.2.2   # sl-server's address
PUBLIC=10.77.2.1   # the NAT's public address: resolves to the client's MAC
MAC_C=02:00:00:77:01:02
MAC_S=02:00:00:77:02:02
CAPTURE_MAX=5000   # packets the monitor captures (iperf3 alone makes hundreds of thousands)

if [ ! -x "$PY" ]; then
	PY=/usr/bin/python3
	export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
fi
sluice() { "$PY" -m sluice "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ok() { printf '  ok: %s\n' "$*"; }
fail() { echo "demo: $*" >&2; exit 1; }
# step KEY TITLE: a section heading; DEMO_FAIL_AT=KEY makes the demo fail right there (tests)
step() {
	say "$2"
	if [ "$FAIL_AT" = "$1" ]; then fail "failing on purpose at step '$1' (DEMO_FAIL_AT)"; fi
}

[ "$(id -u)" -eq 0 ] || { echo "demo: must run as root (network namespaces, DPDK)" >&2; exit 1; }
for b in "$BUILD/src/manager/sluiced" "$BUILD"/nfs/sluice-nf-{firewall,nat,monitor}; do
	[ -x "$b" ] || { echo "demo: $b missing; run 'make build' first" >&2; exit 1; }
done
for t in ip ethtool ping ss iperf3 curl tshark timeout; do
	command -v "$t" >/dev/null || { echo "demo: $t missing; run 'make deps'" >&2; exit 1; }
done
"$PY" -c 'import sluice' 2>/dev/null || { echo "demo: $PY cannot import sluice; run 'make venv'" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX")
SOCK=${SLUICE_SOCKET_DIR:-$WORK/run}
export SLUICE_SOCKET_DIR=$SOCK # every sluice command below talks to this sluiced
UP=no     # no | starting (`sluice up -d` launched) | yes
UP_PID=

remove_net() {
	local pids p
	pids=$( { ip netns pids "$NS_S"; ip netns pids "$NS_C"; } 2>/dev/null || true)
	if [ -n "$pids" ]; then
		kill $pids 2>/dev/null || true
		for _ in $(seq 50); do # up to 5 s, then SIGKILL what is left
			for p in $pids; do kill -0 "$p" 2>/dev/null && break; p=; done
			[ -z "$p" ] && break
			sleep 0.1
		done
		kill -KILL $pids 2>/dev/null || true
	fi
	ip netns del "$NS_C" 2>/dev/null || true
	ip netns del "$NS_S" 2>/dev/null || true
	ip link del sl-c-host 2>/dev/null || true
	ip link del sl-s-host 2>/dev/null || true
}

cleanup() {
	local rc=$? f
	trap - EXIT
	trap '' INT TERM # a second Ctrl-C must not cut the teardown short
	say "teardown"
	# `sluice up -d` ignores SIGINT (it runs in the background): let it finish, so that `sluice down`
	# finds the supervisor it started, whether that came up or not. ($! if the signal came between
	# the launch and UP_PID=$!: no other job runs in the background before it)
	if [ "$UP" = starting ]; then
		UP_PID=${UP_PID:-${!:-}}
		if [ -n "$UP_PID" ]; then wait "$UP_PID" 2>/dev/null || true; fi
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ -d "$SOCK/logs" ]; then # failed, not interrupted
		for f in "$SOCK"/logs/*.log; do
			[ -s "$f" ] && { echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; }
		done
	fi
	if [ "$UP" != no ]; then sluice down || true; fi
	remove_net
	rm -rf "$WORK"
	if [ "$rc" -eq 0 ]; then echo "demo: done in ${SECONDS}s"; else echo "demo: FAILED (status $rc)" >&2; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted" >&2; exit 130' INT TERM

# NF counters: nf_counters NF NAME... prints "NAME=value ..." (NF: an instance, e.g. firewall.0)
nf_counters() {
	local nf=$1
	shift
	sluice api '{"cmd":"nfs"}' | "$PY" -c '
import json, sys
nf, names = sys.argv[1], sys.argv[2:]
c = next(n for n in json.load(sys.stdin)["nfs"] if n["name"] == nf)["counters"]
print(" ".join(f"{k}={c.get(k, 0)}" for k in names))' "$nf" "$@"
}
nf_counter() { nf_counters "$1" "$2" | cut -d= -f2; }
# tshark, without its warning about running as root (other errors still shown)
tsh() { tshark "$@" 2> >(grep -v 'Running as user' >&2); }

step net "network namespaces $NS_C and $NS_S"
remove_net # leftovers of an earlier run that was killed hard
ip netns add "$NS_C"
ip netns add "$NS_S"
ip link add sl-c-host type veth peer name sl-c
ip link add sl-s-host type veth peer name sl-s
ip link set sl-c netns "$NS_C"
ip link set sl-s netns "$NS_S"
ip -n "$NS_C" link set sl-c address "$MAC_C"
ip -n "$NS_S" link set sl-s address "$MAC_S"
# no addresses on the host ends (no IPv6 link-local either): they only carry frames to sluiced
for dev in sl-c-host sl-s-host; do
	sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" || true
	ip link set "$dev" up
done
ip -n "$NS_C" link set lo up
ip -n "$NS_S" link set lo up
ip netns exec "$NS_C" sysctl -qw net.ipv6.conf.sl-c.disable_ipv6=1 || true
ip netns exec "$NS_S" sysctl -qw net.ipv6.conf.sl-s.disable_ipv6=1 || true
ip -n "$NS_C" addr add "$CLIENT/24" dev sl-c
ip -n "$NS_S" addr add "$SERVER/24" dev sl-s
ip -n "$NS_C" link set sl-c up
ip -n "$NS_S" link set sl-s up
ip -n "$NS_C" route add default via "$GW"
ip -n "$NS_C" neigh replace "$GW" lladdr "$MAC_S" dev sl-c nud permanent
ip -n "$NS_S" neigh replace "$PUBLIC" lladdr "$MAC_C" dev sl-s nud permanent
# af_packet hands frames over as they are: no checksum offload, no segmentation offload
OFFLOADS=(tx off rx off tso off gso off gro off)
ethtool -K sl-c-host "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ethtool -K sl-s-host "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip netns exec "$NS_C" ethtool -K sl-c "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip netns exec "$NS_S" ethtool -K sl-s "${OFFLOADS[@]}" >/dev/null 2>&1 || true
ip -br link show sl-c-host; ip -br link show sl-s-host
echo "$NS_C: $(ip -n "$NS_C" -br addr show sl-c)"
echo "$NS_C: $(ip -n "$NS_C" route show default); $(ip -n "$NS_C" neigh show dev sl-c)"
echo "$NS_S: $(ip -n "$NS_S" -br addr show sl-s)"
echo "$NS_S: $(ip -n "$NS_S" neigh show dev sl-s)"

step config "config: firewall rules, NAT rule, $WORK/demo.yaml"
cat >"$WORK/fw.rules" <<EOF
# the client may ping and open TCP to 80 (web) and 5201 (iperf3); 8080 is off limits
default drop
allow in client proto icmp name ping
allow in client proto tcp dport 80 name web
allow in client proto tcp dport 5201 name iperf3
drop  in client proto tcp dport 8080 name block-8080
EOF
cat >"$WORK/nat.conf" <<EOF
# masquerade the client's network behind the public address
snat from 10.77.1.0/24 to $PUBLIC
EOF
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
  # the firewall sees the client's own address both ways: before the NAT out, after it back
  - name: c2s
    nfs: [firewall, nat, monitor]
    exit: server
  - name: s2c
    nfs: [nat, firewall, monitor]
    exit: client
nfs:
  - name: firewall
    program: firewall
    wakeup: $WAKEUP
    args: [--config, $WORK/fw.rules]
  - name: nat
    program: nat
    wakeup: $WAKEUP
    args: [--inside, client, --outside, server, --next, --config, $WORK/nat.conf]
  - name: monitor
    program: monitor
    wakeup: $WAKEUP
    # the first $CAPTURE_MAX packets (ping, HTTP, the start of iperf3), headers only
    args: [--pcap, $WORK/monitor.pcapng, --capture-max, "$CAPTURE_MAX", --snaplen, "128"]
EOF
for f in fw.rules nat.conf demo.yaml; do echo "--- $f"; cat "$WORK/$f"; done
sluice config check "$WORK/demo.yaml"

step up "sluice up -d"
# in the background, so that it ignores Ctrl-C: an interrupted `sluice up -d` would leave its
# supervisor starting with nobody to stop it (cleanup waits for it, then runs `sluice down`).
# A simple command, not the function: bash runs a function in the background in a subshell whose
# children get SIGINT back.
UP=starting
"$PY" -m sluice up "$WORK/demo.yaml" -d --build-dir "$BUILD" &
UP_PID=$!
wait "$UP_PID" || fail "sluice up failed"
UP=yes
sluice status

step servers "servers in $NS_S: HTTP on :80 and :8080, iperf3 on :5201"
mkdir "$WORK/www"
echo "hello from $NS_S" >"$WORK/www/index.html"
for port in 80 8080; do
	ip netns exec "$NS_S" "$PY" -u -m http.server "$port" --bind "$SERVER" --directory "$WORK/www" \
		>"$WORK/http-$port.log" 2>&1 </dev/null &
done
ip netns exec "$NS_S" iperf3 -s -1 -B "$SERVER" --forceflush >"$WORK/iperf3-server.log" 2>&1 </dev/null &
IPERF_PID=$!
for port in 80 8080 5201; do
	for i in $(seq 100); do
		ip netns exec "$NS_S" ss -ltnH "sport = :$port" | grep -q . && break
		[ "$i" -lt 100 ] || fail "nothing listens on :$port in $NS_S"
		sleep 0.1
	done
done
ip netns exec "$NS_S" ss -ltn

step ping "allowed: ping -c 3 $SERVER from $NS_C (firewall rule 'ping')"
out=$(ip netns exec "$NS_C" ping -c 3 -i 0.2 -W 5 "$SERVER" || true)
echo "$out"
if ! grep -q ' 3 received' <<<"$out"; then
	sluice stats || true
	fail "ping: not every echo request was answered"
fi
ok "ping: 3 echo replies through firewall -> nat -> monitor and back"

step http "allowed: curl http://$SERVER/ from $NS_C (firewall rule 'web')"
if ! body=$(ip netns exec "$NS_C" curl -sS --max-time 10 "http://$SERVER/"); then
	sluice stats || true
	fail "curl to port 80 failed"
fi
echo "$body"
[ "$body" = "hello from $NS_S" ] || fail "unexpected answer from the HTTP server: $body"
ok "curl http://$SERVER/: the server answered"

step blocked "blocked: curl http://$SERVER:8080/ from $NS_C (firewall rule 'block-8080')"
before=$(nf_counter firewall.0 rule.block-8080)
set +e
ip netns exec "$NS_C" curl -sS --connect-timeout 3 --max-time 5 "http://$SERVER:8080/"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "curl to port 8080 succeeded: the firewall let it through"
for i in $(seq 50); do # the NF publishes its counters after each batch
	after=$(nf_counter firewall.0 rule.block-8080)
	[ "$after" -gt "$before" ] && break
	[ "$i" -lt 50 ] || fail "curl to 8080 failed (exit $rc), but not by the firewall's rule"
	sleep 0.2
done
! grep -q GET "$WORK/http-8080.log" || fail "the server on :8080 got a request"
echo "curl exit status $rc ($([ "$rc" = 28 ] && echo 'timed out' || echo 'failed')); the server on :8080 logged no request"
echo "firewall.0: $(nf_counters firewall.0 rule.block-8080 rule.ping rule.web rule.iperf3 established allowed dropped)"
ok "blocked: port 8080 timed out, firewall rule.block-8080 dropped $((after - before)) SYN(s)"

step iperf3 "allowed: iperf3 TCP, ${SECS}s, $NS_C -> $NS_S (firewall rule 'iperf3')"
# --foreground: timeout stays in the script's process group, so Ctrl-C reaches iperf3
if ! timeout --foreground $((SECS + 30)) ip netns exec "$NS_C" iperf3 -c "$SERVER" -t "$SECS" -i 1 \
	--connect-timeout 3000; then
	cat "$WORK/iperf3-server.log" >&2 || true
	sluice stats || true
	fail "iperf3 failed"
fi
wait "$IPERF_PID" 2>/dev/null || true
ok "iperf3: ${SECS}s of TCP through the chain"

step nat "NAT: what $NS_S saw (the client is $CLIENT, the NAT's public address $PUBLIC)"
echo "--- HTTP server :80 log"
cat "$WORK/http-80.log"
echo "--- iperf3 server log"
grep -i 'accepted connection\|connected to' "$WORK/iperf3-server.log" || true
echo "nat.0: $(nf_counters nat.0 snat_new translated_out translated_in mappings no_rule no_mapping)"
grep -q "^$PUBLIC - - .*GET / " "$WORK/http-80.log" || fail "the HTTP server did not see $PUBLIC"
! grep -q "$CLIENT" "$WORK/http-80.log" "$WORK/iperf3-server.log" || fail "the server saw $CLIENT"
ok "NAT: the server saw only $PUBLIC, never $CLIENT"

step capture "monitor: its pcapng capture, read back with tshark"
PCAP=$WORK/monitor.pcapng
# the monitor flushes its capture once a second: wait until the file holds what it counted
for i in $(seq 100); do
	captured=$(nf_counter monitor.0 captured)
	# (a read racing a flush may see a block cut short: tshark complains, the next try is complete)
	n=$( (tshark -r "$PCAP" -T fields -e frame.number 2>/dev/null || true) | wc -l)
	[ "$n" -gt 0 ] && [ "$n" = "$captured" ] && break
	[ "$i" -lt 100 ] || fail "the capture holds $n packets, the monitor counted captured=$captured"
	sleep 0.2
done
echo "monitor.0: $(nf_counters monitor.0 packets captured capture_dropped malformed)" \
	"(it captures the first $CAPTURE_MAX packets: --capture-max)"
echo "--- packets in the capture per ingress port (interface names come from sluiced)"
tsh -r "$PCAP" -T fields -e frame.interface_name | sort | uniq -c
echo "--- the first packets: the ping, after the NAT out (from $PUBLIC) and back (to $CLIENT)"
tsh -r "$PCAP" -c 6
echo "--- TCP connections opened (SYNs that passed the firewall and the NAT): port, source, destination"
tsh -r "$PCAP" -Y 'tcp.flags.syn == 1 && tcp.flags.ack == 0' -T fields \
	-e frame.interface_name -e ip.src -e ip.dst -e tcp.dstport | sort | uniq -c
n8080=$(tsh -r "$PCAP" -Y 'tcp.port == 8080' -T fields -e frame.number | wc -l)
[ "$n8080" = 0 ] || fail "the capture has $n8080 packets to or from port 8080"
ok "capture: tshark read $n packets from $(basename "$PCAP"), none to or from port 8080"

step stats "sluice stats (what crossed each port and NF)"
sluice stats
