"""sluice-nf-monitor end to end: real frames through sluiced, pcapng read back by tshark, flow records.

  slt-mona [slt-mona1 10.81.0.1/24] -- veth -- slt-mona0 = port "mona" -> chain a2b [mon] -> exit "monb"
  slt-monb [slt-monb1 10.81.0.2/24] -- veth -- slt-monb0 = port "monb" -> chain b2a [mon] -> exit "mona"

One monitor instance serves both chains, so its capture has two interfaces ("mona", "monb"). Crafted
frames (scapy) are sent from raw sockets in the namespaces to a MAC address nobody owns, so the
receiving kernel ignores them (no replies muddle the counts) while the raw socket on the far side
still sees them: that checks the monitor passed every frame on unchanged. A real ping adds kernel
traffic (ARP, echo request/reply).
"""

import collections
import json
import shutil
import signal
import subprocess
import time

import pytest

import harness
from harness import base_config, sh, sluice, wait_until, workdir  # noqa: F401
from rawwire import Wire

MON_BIN = harness.BUILD / "nfs" / "sluice-nf-monitor"
harness.NF_BINS.setdefault("monitor", MON_BIN)  # start_nf("monitor", ...); harness.py untouched

pytest.importorskip("scapy.all")
from scapy.all import ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6EchoRequest, IPv6, Raw  # noqa: E402

NS_A, NS_B = "slt-mona", "slt-monb"
IP_A, IP_B = "10.81.0.1", "10.81.0.2"
MAC_A, MAC_B = "02:81:00:00:00:01", "02:81:00:00:00:02"
NOBODY = "02:81:00:00:00:99"  # neither namespace's kernel takes these frames

# ---------------------------------------------------------------- fixtures and helpers


def stale_mon_cleanup():
    """Remove slt-mon* namespaces and links left by an earlier, killed run of this file. (Not
    harness.stale_cleanup(), which the `net` fixture calls: it removes every slt-* namespace and
    link, including those of tests running at the same time on this machine.)"""
    for line in sh("ip", "-o", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("slt-mon"):
            sh("ip", "netns", "del", name, check=False)
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1 and parts[1].strip().split("@")[0].startswith("slt-mon"):
            sh("ip", "link", "del", parts[1].strip().split("@")[0], check=False)


@pytest.fixture
def mon_netns():
    """Like harness's `net` fixture, but it only ever touches slt-mon* names."""
    harness.require_env()
    stale_mon_cleanup()
    n = harness.Net()
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def mon_net(mon_netns, sluice):  # noqa: F811
    net = mon_netns
    if not MON_BIN.exists():
        pytest.skip(f"not built: {MON_BIN}")
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed")
    net.add_ns(NS_A)
    net.add_ns(NS_B)
    net.add_veth("slt-mona0", "slt-mona1", peer_ns=NS_A, peer_addr=f"{IP_A}/24", mac=MAC_A)
    net.add_veth("slt-monb0", "slt-monb1", peer_ns=NS_B, peer_addr=f"{IP_B}/24", mac=MAC_B)
    sluice.start(base_config(
        ports=[{"name": "mona", "vdev": "net_af_packet0,iface=slt-mona0,framecnt=4096", "chain": "a2b"},
               {"name": "monb", "vdev": "net_af_packet1,iface=slt-monb0,framecnt=4096", "chain": "b2a"}],
        chains=[{"name": "a2b", "nfs": ["mon"], "exit": "monb"},
                {"name": "b2a", "nfs": ["mon"], "exit": "mona"}]))
    wires = [Wire(NS_A, "slt-mona1", rcvbuf=1 << 20), Wire(NS_B, "slt-monb1", rcvbuf=1 << 20)]
    yield sluice, wires
    for w in wires:
        w.close()


def start_monitor(s, *extra):
    pcap, records = s.dir / "mon.pcapng", s.dir / "mon.jsonl"
    s.start_nf("monitor", "mon", wakeup="block", batch=4, timeout_us=50,
               extra=["--pcap", pcap, "--records", records, *extra])
    return pcap, records


def settle(s, want_at_least, timeout=20.0, quiet=3.5):
    """Wait until the monitor received at least `want_at_least` packets and its count stopped moving
    for `quiet` seconds (longer than the kernel's 3 ARP retries, 1 s apart, that crafted frames to an
    on-link address can set off). Returns its rx_pkts."""
    wait_until(lambda: s.nf("mon")["rx_pkts"] >= want_at_least, timeout,
               f"monitor rx >= {want_at_least}")
    last = [None, time.monotonic()]

    def stable():
        rx = s.nf("mon")["rx_pkts"]
        if rx != last[0]:
            last[:] = [rx, time.monotonic()]
            return None
        return rx if time.monotonic() - last[1] >= quiet else None

    return wait_until(stable, timeout, "monitor rx count stable", interval=0.2)


def tshark_frames(path):
    """[(interface name, frame.len, frame.cap_len, time_epoch, raw bytes)] as tshark reads the file."""
    cp = sh("tshark", "-r", path, "-T", "fields", "-e", "frame.interface_name", "-e", "frame.len",
            "-e", "frame.cap_len", "-e", "frame.time_epoch", timeout=60)
    fields = [line.split("\t") for line in cp.stdout.splitlines() if line]
    cp = sh("tshark", "-r", path, "-T", "json", "-x", timeout=60)
    raws = [bytes.fromhex(p["_source"]["layers"]["frame_raw"][0]) for p in json.loads(cp.stdout or "[]")]
    assert len(raws) == len(fields), (len(raws), len(fields))
    return [(f[0], int(f[1]), int(f[2]), float(f[3]), r) for f, r in zip(fields, raws)]


def records(path):
    """(last record per flow id, export lines) from the JSON-lines records file."""
    flows, exports = {}, []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["type"] == "flow":
            flows[r["id"]] = r
        else:
            exports.append(r)
    return flows, exports


def find_flow(flows, **want):
    got = [f for f in flows.values() if all(f.get(k) == v for k, v in want.items())]
    assert len(got) == 1, f"{want}: {got}"
    return got[0]


def stop_monitor(s):
    rc = s.stop_nf("mon", timeout=20)
    assert rc == 0, s.nf_log("mon")
    return s.nf_log("mon")


# ---------------------------------------------------------------- the traffic


def scapy_flows():
    """{flow key: [frames]} with a known number of packets and bytes per flow; every frame unique."""
    e = Ether(src=MAC_A, dst=NOBODY)
    eb = Ether(src=MAC_B, dst=NOBODY)
    f = collections.OrderedDict()
    t4 = ("mona", 4, 6, "10.81.1.1", "10.81.2.1", 40000, 80)
    f[t4] = [e / IP(src=t4[3], dst=t4[4], id=100 + i) / TCP(sport=t4[5], dport=t4[6], flags=fl, seq=1000 + i)
             / Raw(b"x" * n) for i, (fl, n) in enumerate([("S", 0), ("PA", 10), ("PA", 200), ("A", 0), ("FA", 0)])]
    u4 = ("mona", 4, 17, "10.81.1.1", "10.81.2.2", 5000, 53)
    f[u4] = [e / IP(src=u4[3], dst=u4[4], id=200 + i) / UDP(sport=u4[5], dport=u4[6]) / Raw(bytes([i]) * n)
             for i, n in enumerate([1, 64, 1000])]
    i4 = ("mona", 4, 1, "10.81.1.1", "10.81.2.3", 8, 0)
    f[i4] = [e / IP(src=i4[3], dst=i4[4], id=300 + i) / ICMP(type=8, id=7, seq=i) / Raw(b"p" * 32)
             for i in range(2)]
    t6 = ("mona", 6, 6, "fd81::1", "fd81::2:1", 40001, 443)
    f[t6] = [e / IPv6(src=t6[3], dst=t6[4], fl=400 + i) / TCP(sport=t6[5], dport=t6[6], flags=fl, seq=i)
             / Raw(b"y" * n) for i, (fl, n) in enumerate([("S", 0), ("PA", 300), ("R", 0)])]
    u6 = ("mona", 6, 17, "fd81::1", "fd81::2:2", 6000, 5353)
    f[u6] = [e / IPv6(src=u6[3], dst=u6[4], fl=500 + i) / UDP(sport=u6[5], dport=u6[6]) / Raw(bytes([i]) * (10 * i + 1))
             for i in range(4)]
    i6 = ("mona", 6, 58, "fd81::1", "fd81::2:3", 128, 0)
    f[i6] = [e / IPv6(src=i6[3], dst=i6[4], fl=600 + i) / ICMPv6EchoRequest(id=9, seq=i) / Raw(b"q" * 16)
             for i in range(2)]
    ub = ("monb", 4, 17, "10.81.2.9", "10.81.1.9", 7000, 7001)
    f[ub] = [eb / IP(src=ub[3], dst=ub[4], id=700 + i) / UDP(sport=ub[5], dport=ub[6]) / Raw(b"b" * (i + 1))
             for i in range(2)]
    return f


def flow_query(key):
    in_if, fam, proto, src, dst, a, b = key
    q = dict(in_if=in_if, family=fam, proto=proto, src=src, dst=dst)
    if proto in (6, 17):
        q.update(sport=a, dport=b)
    else:
        q.update(icmp_type=a, icmp_code=b)
    return q


# ---------------------------------------------------------------- tests


def test_capture_and_records_of_real_traffic(mon_net):
    s, (wa, wb) = mon_net
    t0 = time.time()
    pcap, rec = start_monitor(s)

    cp = sh("ping", "-c", "4", "-i", "0.2", "-W", "2", IP_B, ns=NS_A, check=False, timeout=30)
    assert cp.returncode == 0 and " 4 received" in cp.stdout, cp.stdout + cp.stderr
    # B learned A's address from A's ARP request (STALE); its first echo reply moved the entry to
    # DELAY, and with nothing confirming it the kernel sends a unicast ARP probe (and A replies)
    # delay_first_probe_time = 5 s later: two more frames through the monitor, after the count
    # below has settled whenever the machine is slow. Pinning both entries cancels that timer; a
    # probe already sent is counted by settle().
    sh("ip", "neigh", "replace", IP_A, "lladdr", MAC_A, "nud", "permanent", "dev", "slt-monb1", ns=NS_B)
    sh("ip", "neigh", "replace", IP_B, "lladdr", MAC_B, "nud", "permanent", "dev", "slt-mona1", ns=NS_A)

    flows = scapy_flows()
    sent = {"mona": [], "monb": []}
    for key, frames in flows.items():
        for fr in frames:
            (wa if key[0] == "mona" else wb).send(fr)
            sent[key[0]].append(bytes(fr))
    n_sent = sum(len(v) for v in sent.values())
    # ping: at least 4 requests + 4 replies + an ARP exchange
    rx = settle(s, n_sent + 8 + 2)

    # every crafted frame crossed, unchanged, in order (the far side's raw socket saw them)
    wait_until(lambda: [f for f in wb.drain() if f in set(sent["mona"])] == sent["mona"], 10,
               "the crafted frames at the far side of a2b")
    wait_until(lambda: [f for f in wa.drain() if f in set(sent["monb"])] == sent["monb"], 10,
               "the crafted frames at the far side of b2a")

    # the NF's counters in sluiced's nfs output
    nf = next(n for n in s.ok("nfs")["nfs"] if n["name"] == "mon")
    c = nf["counters"]
    assert nf["rx_pkts"] == rx
    assert c["packets"] == rx and c["captured"] == rx, c
    assert c["bytes"] == nf.get("rx_bytes", c["bytes"]), (c, nf)
    assert c["malformed"] == 0 and c["capture_dropped"] == 0 and c["flows_full"] == 0, c
    assert c["flows"] >= len(flows) + 3, c  # + echo request, echo reply, ARP (both ways)

    # SIGUSR1 while running: the records get a snapshot and the capture is flushed and readable
    s.nfs["mon"].send_signal(signal.SIGUSR1)
    wait_until(lambda: rec.exists() and any(e["reason"] == "signal" for e in records(rec)[1]), 10,
               "a snapshot after SIGUSR1")
    snap = next(e for e in records(rec)[1] if e["reason"] == "signal")
    assert snap["packets"] == rx and snap["captured"] == rx, snap
    assert len(tshark_frames(pcap)) == rx

    log = stop_monitor(s)
    t1 = time.time()
    assert f"rx={rx} " in log, log

    # the capture: exactly what sluiced handed the monitor, on the right interfaces, byte-identical
    frames = tshark_frames(pcap)
    assert len(frames) == rx, (len(frames), rx)
    assert {f[0] for f in frames} == {"mona", "monb"}
    for ifname in ("mona", "monb"):
        got = [f[4] for f in frames if f[0] == ifname and f[4] in set(sent[ifname])]
        assert got == sent[ifname], f"crafted frames on {ifname} differ from what was sent"
    for name, length, caplen, ts, raw in frames:
        assert length == caplen == len(raw)
        assert t0 - 1 <= ts <= t1 + 1, (ts, t0, t1)  # nanosecond wall-clock timestamps
    pings = [f for f in frames if len(f[4]) == 98 and f[4][23] == 1]
    assert sum(1 for f in pings if f[0] == "mona") == 4 and sum(1 for f in pings if f[0] == "monb") == 4

    # the records: each crafted flow with exactly its packets and bytes
    fl, exports = records(rec)
    assert [e["reason"] for e in exports] == ["signal", "exit"]
    assert exports[-1]["packets"] == rx and exports[-1]["flows"] == len(fl)
    assert all(r["state"] == "end" for r in fl.values())
    assert sum(r["packets"] for r in fl.values()) == rx
    assert sum(r["bytes"] for r in fl.values()) == sum(f[1] for f in frames)
    for key, frs in flows.items():
        r = find_flow(fl, **flow_query(key))
        assert r["packets"] == len(frs) and r["bytes"] == sum(len(bytes(x)) for x in frs), (key, r)
        assert t0 * 1e9 <= r["first_ns"] <= r["last_ns"] <= t1 * 1e9, r
        assert r["malformed"] == 0
    assert find_flow(fl, **flow_query(next(iter(flows))))["tcp_flags_str"] == "FSPA"
    assert find_flow(fl, in_if="mona", proto=1, src=IP_A, dst=IP_B, icmp_type=8)["packets"] == 4
    req = find_flow(fl, in_if="mona", proto=1, src=IP_A, dst=IP_B, icmp_type=8)
    assert req["bytes"] == 4 * 98
    assert find_flow(fl, in_if="monb", proto=1, src=IP_B, dst=IP_A, icmp_type=0)["packets"] == 4
    arp = [r for r in fl.values() if r["ethertype"] == 0x0806]
    assert arp and all(r["family"] == 0 and "src" not in r for r in arp)


MALFORMED = [
    # (what, frame) -- raw bytes and truncated headers, as the wire carries them. (A frame cut inside
    # its VLAN tag or shorter than 14 bytes never gets here: the kernel drops it before the af_packet
    # port sees it; tests/unit/test_monitor.c covers those.)
    ("ipv4 header cut", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.2"))[:14 + 12]),
    ("ipv4 ihl 15, short", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.2", ihl=15)
                                 / UDP())[:14 + 28]),
    ("ipv4 total length 1000", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.3", len=1000)
                                     / UDP(sport=1, dport=2) / Raw(b"z" * 20))),
    ("tcp header cut", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.4", proto=6, len=28)
                             / Raw(bytes.fromhex("9c4000500000000a")))),
    ("tcp data offset 15", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.5")
                                 / TCP(sport=1, dport=2, dataofs=15))),
    ("udp header cut", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.6", proto=17, len=24)
                             / Raw(b"\x00\x01\x00\x02"))),
    ("ipv6 header cut", bytes(Ether(src=MAC_A, dst=NOBODY) / IPv6(src="fd81::3:1", dst="fd81::3:2"))[:14 + 20]),
    ("ipv6 payload length 500", bytes(Ether(src=MAC_A, dst=NOBODY) / IPv6(src="fd81::3:1", dst="fd81::3:3", plen=500)
                                      / UDP(sport=3, dport=4) / Raw(b"w" * 8))),
    ("ipv6 tcp cut", bytes(Ether(src=MAC_A, dst=NOBODY) / IPv6(src="fd81::3:1", dst="fd81::3:4", nh=6, plen=6)
                           / Raw(b"\x00\x05\x00\x06\x00\x00"))),
    ("raw garbage, ipv4 type", bytes.fromhex("0281000000990281000000010800") + bytes(range(7))),
]
GOOD = [
    ("big udp", bytes(Ether(src=MAC_A, dst=NOBODY) / IP(src="10.81.3.1", dst="10.81.3.9", id=9)
                      / UDP(sport=9, dport=9) / Raw(b"g" * 400))),
    ("vlan udp", bytes(Ether(src=MAC_A, dst=NOBODY) / Dot1Q(vlan=5) / IP(src="10.81.3.1", dst="10.81.3.10")
                       / UDP(sport=10, dport=10) / Raw(b"v" * 10))),
]


def test_malformed_frames_are_captured_as_they_are_and_counted(mon_net):
    s, (wa, wb) = mon_net
    snaplen = 128
    pcap, rec = start_monitor(s, "--snaplen", snaplen, "--flows", 64, "--idle", 0)
    sent = [f for _, f in MALFORMED] + [f for _, f in GOOD]
    for fr in sent:
        wa.send(fr)
    rx = settle(s, len(sent))
    assert rx == len(sent), "only the test's frames cross (no kernel traffic in this test)"
    # all passed on, unchanged (the monitor only observes). The receiving kernel takes the VLAN tag
    # off before a packet socket sees the frame (it keeps it aside as metadata): compare untagged.
    far = [f[:12] + f[16:] if f[12:14] == b"\x81\x00" else f for f in sent]
    wait_until(lambda: [f for f in wb.drain() if f in set(far)] == far, 10, "every frame at the far side")
    nf = s.nf("mon")
    assert nf["counters"]["malformed"] == len(MALFORMED), nf["counters"]
    assert nf["counters"]["captured"] == rx
    assert s.nfs["mon"].poll() is None, "the monitor is alive"

    log = stop_monitor(s)
    assert f"malformed={len(MALFORMED)} " in log, log
    frames = tshark_frames(pcap)
    assert len(frames) == len(sent)
    for (name, length, caplen, _, raw), want in zip(frames, sent):
        assert name == "mona"
        assert length == len(want) and caplen == min(len(want), snaplen)
        assert raw == want[:snaplen], "captured as sent (cut at the snaplen)"
    assert frames[len(MALFORMED)][1:3] == (len(GOOD[0][1]), snaplen)

    fl, exports = records(rec)
    assert exports[-1]["malformed"] == len(MALFORMED) and exports[-1]["packets"] == len(sent)
    assert sum(r["malformed"] for r in fl.values()) == len(MALFORMED)
    assert sum(r["packets"] for r in fl.values()) == len(sent)
    # flows keep what could be parsed: the cut TCP header still gave its ports
    r = find_flow(fl, dst="10.81.3.4")
    assert (r["proto"], r["sport"], r["dport"], r["malformed"]) == (6, 40000, 80, 1), r
    r = find_flow(fl, src="10.81.3.1", dst="10.81.3.10")
    assert r["malformed"] == 0 and r["sport"] == 10 and r["bytes"] == len(GOOD[1][1])


def test_idle_expiry_and_capture_limit(mon_net):
    s, (wa, wb) = mon_net
    # idle 3 s: long enough that the second flow is still live when its counters are read below
    pcap, rec = start_monitor(s, "--idle", 3, "--capture-max", 3)
    e = Ether(src=MAC_A, dst=NOBODY)
    first = [e / IP(src="10.81.4.1", dst="10.81.4.2", id=i) / UDP(sport=1, dport=2) for i in range(5)]
    for fr in first:
        wa.send(fr)
    settle(s, 5)
    # the flow goes idle: it is written as expired and leaves the table
    wait_until(lambda: rec.exists() and any(json.loads(l).get("state") == "idle"
                                            for l in rec.read_text().splitlines()), 15, "an expired flow")
    wait_until(lambda: s.nf("mon")["counters"]["flows"] == 0, 5, "the table empty again")
    wa.send(first[0])  # the same 5-tuple again: a new record
    # read as soon as the monitor handled it (a stability wait could outlast the idle timeout)
    c = wait_until(lambda: (lambda c: c if c["captured"] + c["capture_dropped"] >= 6 else None)(
        s.nf("mon")["counters"]), 10, "the sixth packet handled")
    assert (c["flows"], c["flows_total"], c["flows_expired"]) == (1, 2, 1), c
    assert (c["captured"], c["capture_dropped"]) == (3, 3), c
    stop_monitor(s)
    assert len(tshark_frames(pcap)) == 3
    fl, _ = records(rec)
    recs = sorted(fl.values(), key=lambda r: r["id"])
    assert [(r["state"], r["packets"]) for r in recs] == [("idle", 5), ("end", 1)]


def test_bad_flags_name_the_flag_and_value(workdir):  # noqa: F811
    if not MON_BIN.exists():
        pytest.skip(f"not built: {MON_BIN}")
    for args, needle in [(["--snaplen", "9"], "--snaplen '9'"), (["--flows", "0"], "--flows '0'"),
                         (["--pcap", "/nonexistent/x.pcapng"], "--pcap '/nonexistent/x.pcapng'"),
                         (["--idle", "x"], "--idle 'x'")]:
        cp = subprocess.run([str(MON_BIN), "--socket", str(workdir / "none.sock"), *args],
                            capture_output=True, text=True, timeout=10)
        assert cp.returncode != 0 and needle in cp.stderr, (args, cp.stderr)
