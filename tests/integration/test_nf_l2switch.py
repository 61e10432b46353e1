"""sluice-nf-l2switch (nfs/l2switch/main.c, docs/nfs/l2switch.md): a learning bridge over sluiced's ports.

Every test bridges network namespaces through sluiced, the l2switch the only thing between them:

  slt-l2<x> [slt-l2<x>1, MAC 02:82:00:00:00:<n>] -- veth -- slt-l2<x>0 = port "p<x>" (net_af_packet)
  every port's chain: [sw] (the l2switch sends every frame OUT / OUT_SET itself)

1. Plain bridge (no config): ping between every pair (ARP floods, replies are learned), a frame to
   an unknown MAC reaches every other port, after learning unicast reaches only its port, frames to a
   MAC behind the ingress port are filtered, a station move is followed; the SIGUSR1 dump lists the
   stations on their ports.
2. VLANs: two access VLANs, a second access port in one, a trunk: marked frames (EtherType 0x88b5)
   from every port, tagged and untagged, known and unknown; every frame's set of (port, VLAN tag) out
   must be exactly the expected one: nothing leaks between VLANs, the trunk gets the right VID.
3. Differential against the Linux bridge (vlan_filtering 1) in a namespace, same port VLANs, the
   same frames: the same ports out, with the same tags.
4. Aging (aging 2): an entry is gone from the dump and counted as aged; a frame to it floods again.
5. Config errors name the file, line and field; an unknown port is refused at attach.

Received frames are read with PACKET_AUXDATA: the kernel moves a received 802.1Q tag out of the
frame into metadata, the test puts it back.
"""

import json
import signal
import struct
import subprocess
import time

import pytest

import harness
from harness import base_config, net, sh, sluice, wait_until, workdir  # noqa: F401
from rawwire import Wire

L2_BIN = harness.BUILD / "nfs" / "sluice-nf-l2switch"
harness.NF_BINS.setdefault("l2switch", L2_BIN)  # start_nf("l2switch", ...); harness.py untouched

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import Dot1Q, Ether, Raw  # noqa: E402

ETYPE = 0x88B5  # IEEE local experimental: no kernel stack answers it
BCAST = "ff:ff:ff:ff:ff:ff"
DECISIONS = ("forwarded", "flooded", "filtered", "vlan_drop", "malformed", "link_local", "no_room")


def mac(n):
    return f"02:82:00:00:00:{n:02x}"


def marked(dst, src, ident, vid=None, prio=0):
    """A test frame: Ethernet (+ 802.1Q tag) + EtherType 0x88b5 + b'SLL2' + id."""
    payload = Raw(b"SLL2" + struct.pack("!I", ident) + b"\x00" * 38)
    if vid is None:
        return Ether(dst=dst, src=src, type=ETYPE) / payload
    return Ether(dst=dst, src=src) / Dot1Q(vlan=vid, prio=prio, type=ETYPE) / payload


def mark_of(frame):
    """(id, vid or None) of a received test frame, or None for any other frame."""
    vid, o = None, 12
    if frame[12:14] == b"\x81\x00":
        vid, o = int.from_bytes(frame[14:16], "big") & 0xFFF, 16
    if frame[o:o + 2] != ETYPE.to_bytes(2, "big") or frame[o + 2:o + 6] != b"SLL2":
        return None
    return int.from_bytes(frame[o + 6:o + 10], "big"), vid


# ---------------------------------------------------------------- sluiced + l2switch


def start_bridge(net, sluice, letters, conf_text=None, extra=()):  # noqa: F811
    """Namespaces slt-l2<x>, ports p<x>, the l2switch "sw" on every port. Returns {x: Wire}."""
    for i, x in enumerate(letters):
        ns = net.add_ns(f"slt-l2{x}")
        net.add_veth(f"slt-l2{x}0", f"slt-l2{x}1", peer_ns=ns, mac=mac(i + 1))
    sluice.start(base_config(
        ports=[{"name": f"p{x}", "vdev": f"net_af_packet{i},iface=slt-l2{x}0", "chain": "sw"}
               for i, x in enumerate(letters)],
        chains=[{"name": "sw", "nfs": ["sw"]}], pool_mbufs=4096))
    args = ["--dump", sluice.dir / "fdb.json", *extra]
    if conf_text is not None:
        conf = sluice.dir / "sw.conf"
        conf.write_text(conf_text)
        args += ["--config", conf]
    sluice.start_nf("l2switch", "sw", wakeup="block", batch=1, timeout_us=50, extra=args)
    return {x: Wire(f"slt-l2{x}", f"slt-l2{x}1", restore_vlan=True) for x in letters}


def counters(s):
    nf = s.nf("sw")
    assert nf is not None, "l2switch not attached"
    return nf["counters"]


def decisions(s):
    c = counters(s)
    return sum(c.get(k, 0) for k in DECISIONS)


def dump_fdb(s, trigger):
    """SIGUSR1, then trigger() sends a frame so the NF runs a batch and writes the dump."""
    path = s.dir / "fdb.json"

    def attempt():
        before = path.stat().st_mtime_ns if path.exists() else 0
        s.nfs["sw"].send_signal(signal.SIGUSR1)
        trigger()
        try:
            wait_until(lambda: path.exists() and path.stat().st_mtime_ns != before, 5, "fdb dump")
        except AssertionError:
            return None
        return json.loads(path.read_text())

    return wait_until(attempt, 60, "a fresh fdb dump", interval=0.2)


def fdb_set(d):
    return {(e["vlan"], e["mac"], e["port"]) for e in d["fdb"]}


class Exchange:
    """Sends marked frames one at a time (each decided by the switch before the next, so learning
    happens in order) and records which wires received which (id, vid)."""

    def __init__(self, s, wires):
        self.s, self.wires = s, wires
        self.got = {x: set() for x in wires}
        self.expected = {x: set() for x in wires}
        self.n = 0
        self.labels = {}
        for w in wires.values():
            w.recv_all()

    def collect(self):
        for x, w in self.wires.items():
            for f in w.recv_all():
                m = mark_of(f)
                if m is not None:
                    self.got[x].add(m)

    def send(self, label, src, dst, smac, expect, vid=None, prio=0, counter=None):
        """expect: {port letter: vid or None} where the frame must come out. counter: a counter the
        frame must raise (for frames that go nowhere), else any decision counter."""
        i = self.n
        self.n += 1
        self.labels[i] = label
        if counter:
            base = counters(self.s)[counter]
            done = lambda: counters(self.s)[counter] >= base + 1  # noqa: E731
        else:
            base = decisions(self.s)
            done = lambda: decisions(self.s) >= base + 1  # noqa: E731
        self.wires[src].send(marked(dst, smac, i, vid, prio))
        wait_until(done, 20, f"switch decision on #{i} {label}")
        for x, v in expect.items():
            self.expected[x].add((i, v))

        def arrived():
            self.collect()
            return all((i, v) in self.got[x] for x, v in expect.items())

        wait_until(arrived, 20, f"#{i} {label} out of {sorted(expect)}")
        return i

    def check(self):
        time.sleep(0.5)  # stragglers: a leak arriving late still fails the comparison below
        self.collect()
        bad = []
        for x in self.wires:
            extra, missing = self.got[x] - self.expected[x], self.expected[x] - self.got[x]
            for i, v in sorted(extra, key=str):
                bad.append(f"p{x}: unexpected #{i} {self.labels.get(i)} vid={v}")
            for i, v in sorted(missing, key=str):
                bad.append(f"p{x}: missing #{i} {self.labels.get(i)} vid={v}")
        assert not bad, "\n".join(bad)


def ping(ns, addr, count=2):
    return sh("ping", "-c", count, "-i", "0.2", "-W", "5", addr, ns=ns, check=False).returncode == 0


# ---------------------------------------------------------------- 1. plain bridge


def test_plain_bridge_ping_flood_learn(net, sluice):  # noqa: F811
    wires = start_bridge(net, sluice, "abc")
    ip = {x: f"10.82.0.{i + 1}" for i, x in enumerate("abc")}
    for x in "abc":
        sh("ip", "addr", "add", ip[x] + "/24", "dev", f"slt-l2{x}1", ns=f"slt-l2{x}")
    try:
        for a, b in (("a", "b"), ("a", "c"), ("b", "c"), ("c", "a")):
            assert ping(f"slt-l2{a}", ip[b]), f"ping {a} -> {b} through the l2switch failed\n" + sluice.nf_log("sw")
        c = counters(sluice)
        assert c["learned"] == 3 and c["macs"] == 3, c
        assert c["flooded"] >= 3 and c["forwarded"] >= 12, c  # ARP requests flood; replies, pings unicast
        assert c["malformed"] == 0 and c["vlan_drop"] == 0 and c["moved"] == 0, c

        ex = Exchange(sluice, wires)
        ex.send("unknown unicast from a", "a", mac(0x99), mac(1), {"b": None, "c": None})
        ex.send("known unicast a -> b", "a", mac(2), mac(1), {"b": None})
        ex.send("known unicast c -> a", "c", mac(1), mac(3), {"a": None})
        ex.send("broadcast from b", "b", BCAST, mac(2), {"a": None, "c": None})
        ex.send("multicast from c", "c", "01:00:5e:01:02:03", mac(3), {"a": None, "b": None})
        # a second station behind port a; a frame from a to it is filtered
        ex.send("station a2 behind pa", "a", BCAST, mac(0xa2), {"b": None, "c": None})
        ex.send("a -> a2 (same port: filtered)", "a", mac(0xa2), mac(1), {}, counter="filtered")
        # link-local (STP) and a multicast source are never forwarded
        ex.send("STP BPDU", "b", "01:80:c2:00:00:00", mac(2), {}, counter="link_local")
        ex.send("multicast source", "b", mac(1), "01:00:00:00:00:01", {}, counter="malformed")
        # station b moves to port c: a's frames to b follow it
        ex.send("b's MAC now on pc", "c", BCAST, mac(2), {"a": None, "b": None})
        ex.send("a -> b after the move", "a", mac(2), mac(1), {"c": None})
        ex.check()
        c = counters(sluice)
        assert c["moved"] == 1 and c["link_local"] == 1 and c["malformed"] == 1, c

        d = dump_fdb(sluice, lambda: wires["b"].send(marked(mac(1), "01:00:00:00:00:02", 9999)))
        assert fdb_set(d) == {(1, mac(1), "pa"), (1, mac(2), "pc"), (1, mac(3), "pc"), (1, mac(0xA2), "pa")}, d
        assert d["macs"] == 4 and d["aging_s"] == 300
        assert sluice.nfs["sw"].poll() is None
        st = sluice.stats()
        assert st["drops"]["invalid_desc"] == 0, st["drops"]
    finally:
        for w in wires.values():
            w.close()


# ---------------------------------------------------------------- 2. VLANs

VLAN_CONF = """\
# two access VLANs, a second port in VLAN 10, a trunk carrying both (native 30: nobody else)
port pa access 10
port pb access 20
port pt trunk 10,20 native 30
port pd access 10
"""
A, B, D, T1, T2 = mac(1), mac(2), mac(4), mac(0x71), mac(0x72)


def vlan_sequence():
    """(label, src port, dst, src MAC, vid or None, prio, {port: vid or None}) for ports a b t d."""
    return [
        ("bcast from a (10)", "a", BCAST, A, None, 0, {"d": None, "t": 10}),
        ("bcast from b (20)", "b", BCAST, B, None, 0, {"t": 20}),
        ("bcast on trunk vid 10", "t", BCAST, T1, 10, 0, {"a": None, "d": None}),
        ("bcast on trunk vid 20", "t", BCAST, T2, 20, 0, {"b": None}),
        ("trunk 10 -> A (known)", "t", A, T1, 10, 0, {"a": None}),
        ("a -> T1 (known on trunk)", "a", T1, A, None, 0, {"t": 10}),
        ("b -> T1 (known only in 10)", "b", T1, B, None, 0, {"t": 20}),
        ("trunk 20 -> A (known only in 10)", "t", A, T2, 20, 0, {"b": None}),
        ("trunk vid 30 tagged (native, only member)", "t", BCAST, T1, 30, 0, {}),
        ("trunk vid 99 (not carried)", "t", BCAST, T1, 99, 0, {}),
        ("a tagged 20 (access 10)", "a", BCAST, A, 20, 0, {}),
        ("trunk untagged (native 30)", "t", BCAST, T1, None, 0, {}),
        ("d -> A (same VLAN)", "d", A, D, None, 0, {"a": None}),
        ("d tagged 10 on access 10", "d", BCAST, D, 10, 0, {"a": None, "t": 10}),
        ("a priority-tagged", "a", BCAST, A, 0, 3, {"d": None, "t": 10}),
        ("unknown unicast from a", "a", mac(0x99), A, None, 0, {"d": None, "t": 10}),
        ("unknown unicast trunk 20", "t", mac(0x99), T2, 20, 0, {"b": None}),
        ("b -> A (A known only in 10)", "b", A, B, None, 0, {"t": 20}),
        ("trunk 20 -> B (known)", "t", B, T2, 20, 0, {"b": None}),
        ("d -> T1", "d", T1, D, None, 0, {"t": 10}),
    ]


def test_vlans_never_leak(net, sluice):  # noqa: F811
    wires = start_bridge(net, sluice, "abtd", VLAN_CONF)
    try:
        ex = Exchange(sluice, wires)
        for label, src, dst, smac, vid, prio, expect in vlan_sequence():
            ex.send(label, src, dst, smac, expect, vid=vid, prio=prio)
        ex.check()
        c = counters(sluice)
        assert c["vlan_drop"] == 2 and c["filtered"] == 2, c
        assert c["forwarded"] == 5 and c["malformed"] == 0, c
        # one MAC, two VLANs, two entries: T1 in 10 and in the trunk's native 30 (never in 20)
        d = dump_fdb(sluice, lambda: wires["b"].send(marked(A, "01:00:00:00:00:02", 9999)))
        assert fdb_set(d) == {(10, A, "pa"), (20, B, "pb"), (10, T1, "pt"), (30, T1, "pt"), (20, T2, "pt"),
                              (10, D, "pd")}, d
        st = sluice.stats()
        assert st["drops"]["invalid_desc"] == 0 and st["out_set"]["copies"] > 0, st
    finally:
        for w in wires.values():
            w.close()


# ---------------------------------------------------------------- 3. differential vs the Linux bridge


def linux_vlan_filtering(net):  # noqa: F811
    """Whether this kernel's bridge can filter VLANs (CONFIG_BRIDGE_VLAN_FILTERING); probed in a
    namespace of its own."""
    ns = net.add_ns("slt-l2vf")
    return sh("ip", "link", "add", "br0", "type", "bridge", "vlan_filtering", "1", ns=ns, check=False).returncode == 0


def start_linux_bridge(net, letters, vlans=None):  # noqa: F811
    """Namespace slt-l2br with br0 (no multicast snooping, no STP; vlan_filtering 1 when `vlans`
    {x: [("pvid", vid) | ("tagged", vid)]} is given), one veth per port to namespace slt-l2r<x>
    with the same MAC as the sluiced side's. Returns {x: Wire}."""
    br = net.add_ns("slt-l2br")
    sh("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", ns=br)
    sh("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1", ns=br)
    opts = ["vlan_filtering", "1"] if vlans else []
    sh("ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0", *opts, ns=br)
    if vlans:
        sh("bridge", "vlan", "del", "dev", "br0", "vid", "1", "self", ns=br)
    sh("ip", "link", "set", "br0", "up", ns=br)
    wires = {}
    for i, x in enumerate(letters):
        ns = net.add_ns(f"slt-l2r{x}")
        sh("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", ns=ns)
        sh("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1", ns=ns)
        port, peer = f"slt-l2r{x}0", f"slt-l2r{x}1"
        sh("ip", "link", "add", port, "netns", br, "type", "veth", "peer", "name", peer, "netns", ns,
           "address", mac(i + 1))
        sh("ip", "link", "set", port, "master", "br0", ns=br)
        if vlans:
            sh("bridge", "vlan", "del", "dev", port, "vid", "1", ns=br)
            for kind, vid in vlans[x]:
                extra = ["pvid", "untagged"] if kind == "pvid" else []
                sh("bridge", "vlan", "add", "dev", port, "vid", vid, *extra, ns=br)
        sh("ip", "link", "set", port, "up", ns=br)
        sh("ip", "link", "set", peer, "up", ns=ns)
        wires[x] = Wire(ns, peer, restore_vlan=True)

    def forwarding():
        out = sh("bridge", "link", ns=br).stdout
        return all(any(f"slt-l2r{x}0" in l and "forwarding" in l for l in out.splitlines()) for x in letters)

    wait_until(forwarding, 30, "Linux bridge ports forwarding")
    return wires


LINUX_VLANS = {"a": [("pvid", 10)], "b": [("pvid", 20)],
               "t": [("tagged", 10), ("tagged", 20), ("pvid", 30)], "d": [("pvid", 10)]}


def random_sequence(n, letters, vids, seed=82):
    import random
    rnd = random.Random(seed)
    stations = [mac(1), mac(2), mac(3), mac(4), mac(0x71), mac(0x72), mac(0x55)]
    # link-local groups the Linux bridge never forwards (pause, LACP, LLDP); not 01:80:c2:00:00:00
    # (STP), which Linux forwards while STP is off and the l2switch never does (docs)
    dsts = stations + [BCAST, "01:00:5e:00:00:fb", "33:33:00:00:00:01", mac(0x99), "01:80:c2:00:00:0e",
                       "01:80:c2:00:00:02"]
    seq = []
    for k in range(n):
        smac = rnd.choice(stations) if rnd.random() > 0.03 else "01:00:00:00:00:07"  # invalid source
        seq.append((f"random {k}", rnd.choice(letters), rnd.choice(dsts), smac, rnd.choice(vids),
                    rnd.randint(0, 7)))
    return seq


@pytest.mark.parametrize("mode", ["plain", "vlan"])
def test_differential_vs_linux_bridge(net, sluice, mode):  # noqa: F811
    """The same frames through the l2switch and the Linux bridge: the same ports out, same tags.
    'plain': no config / a VLAN-unaware bridge, untagged frames. 'vlan': VLAN_CONF / vlan_filtering
    with the same port VLANs, tagged and untagged frames (needs CONFIG_BRIDGE_VLAN_FILTERING)."""
    if mode == "vlan" and not linux_vlan_filtering(net):
        pytest.skip("this kernel's bridge has no vlan_filtering (CONFIG_BRIDGE_VLAN_FILTERING)")
    if mode == "plain":
        letters = "abcd"
        sl_wires = start_bridge(net, sluice, letters)
        ref_wires = start_linux_bridge(net, letters)
        seq = random_sequence(200, letters, [None])
    else:
        letters = "abtd"
        sl_wires = start_bridge(net, sluice, letters, VLAN_CONF)
        ref_wires = start_linux_bridge(net, letters, LINUX_VLANS)
        seq = [s[:6] for s in vlan_sequence()] + random_sequence(200, letters, [None, None, 10, 20, 30, 0, 99])
    ex = Exchange(sluice, sl_wires)
    ref = {x: set() for x in ref_wires}
    try:
        for w in ref_wires.values():
            w.recv_all()

        def ref_collect():
            for x, w in ref_wires.items():
                for f in w.recv_all():
                    m = mark_of(f)
                    if m is not None:
                        ref[x].add(m)

        for i, (label, src, dst, smac, vid, prio) in enumerate(seq):
            ref_wires[src].send(marked(dst, smac, i, vid, prio))
            # the kernel bridges synchronously (softirq of the send); a frame arriving later is
            # still compared at the end, only the switch's wait below would not wait for it
            time.sleep(0.02)
            ref_collect()
            expect = {x: v for x in ref for (j, v) in ref[x] if j == i}
            ex.send(label, src, dst, smac, expect, vid=vid, prio=prio)
        time.sleep(0.5)
        ref_collect()
        ex.collect()
        table, diffs = [], []
        for i, (label, src, dst, smac, vid, _prio) in enumerate(seq):
            out_sl = sorted((x, v) for x in ex.got for (j, v) in ex.got[x] if j == i)
            out_ref = sorted((x, v) for x in ref for (j, v) in ref[x] if j == i)
            row = f"#{i:3} {label:42} p{src} vid={vid} {smac}->{dst}: l2switch={out_sl} linux={out_ref}"
            table.append(row)
            if out_sl != out_ref:
                diffs.append(row)
        print("\n".join(table))
        assert not diffs, "l2switch and the Linux bridge disagree:\n" + "\n".join(diffs)
        c = counters(sluice)
        # the sequence exercised every kind of decision (the comparison above can fail)
        assert c["forwarded"] > 20 and c["flooded"] > 20 and c["moved"] > 5 and c["malformed"] > 0, c
        assert c["filtered"] > 0 and c["link_local"] > 0, c
        if mode == "vlan":
            assert c["vlan_drop"] > 10, c
    finally:
        for w in list(sl_wires.values()) + list(ref_wires.values()):
            w.close()


# ---------------------------------------------------------------- 4. aging


def test_aging(net, sluice):  # noqa: F811
    wires = start_bridge(net, sluice, "abc", "port pa\nport pb\nport pc\naging 2\n")
    try:
        ex = Exchange(sluice, wires)
        ex.send("A announces itself", "a", BCAST, mac(1), {"b": None, "c": None})
        ex.send("b -> A (known)", "b", mac(1), mac(2), {"a": None})
        # SIGUSR1 first, then A's own frame: the batch that refreshes A writes the dump, so A is in it
        d = dump_fdb(sluice, lambda: wires["a"].send(marked(BCAST, mac(1), 9998)))
        assert (1, mac(1), "pa") in fdb_set(d) and d["aging_s"] == 2, d
        # no frame from A any more: after 2 s its entry is dead (the dump sweeps the table first)
        junk = lambda: wires["c"].send(marked(mac(1), "01:00:00:00:00:03", 9999))  # noqa: E731
        wait_until(lambda: (1, mac(1), "pa") not in fdb_set(dump_fdb(sluice, junk)), 60, "A aged out",
                   interval=0.5)
        c = counters(sluice)
        assert c["aged"] >= 1 and c["learned"] >= 2, c
        ex.collect()
        ex.got = {x: set() for x in wires}
        ex.expected = {x: set() for x in wires}
        ex.send("b -> A after aging: flooded", "b", mac(1), mac(2), {"a": None, "c": None})
        ex.check()
    finally:
        for w in wires.values():
            w.close()


# ---------------------------------------------------------------- 5. config errors


def test_config_errors(net, sluice, workdir):  # noqa: F811
    bad = workdir / "bad.conf"
    for text, msg in (
            ("port pa access 10\nport pa access 20\n", "bad.conf:2: port: 'pa' configured twice (first on line 1)"),
            ("# x\nport pa access 4095\n", "bad.conf:2: access: '4095' is not a VLAN id (1..4094)"),
            ("port pt trunk 10,20-x\n", "bad.conf:1: trunk: '20-x' is not a VLAN id"),
            ("port pt trunk 10 native 0\n", "bad.conf:1: native: '0' is not a VLAN id (1..4094)"),
            ("port pa hybrid\n", "bad.conf:1: mode: 'hybrid' is not access or trunk"),
            ("aging 0\n", "bad.conf:1: aging: '0' is not a number in 1..1000000 (seconds)"),
            ("max-macs lots\n", "bad.conf:1: max-macs: 'lots' is not a number"),
            ("vlan 10\n", "bad.conf:1: 'vlan': unknown statement (port, aging, max-macs)")):
        bad.write_text(text)
        cp = subprocess.run([str(L2_BIN), "--config", str(bad), "--check"], capture_output=True, text=True,
                            timeout=20)
        assert cp.returncode == 1 and msg in cp.stderr, (text, cp.stderr)
    good = workdir / "good.conf"
    good.write_text(VLAN_CONF + "aging 60\n")
    cp = subprocess.run([str(L2_BIN), "--config", str(good), "--check"], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 0 and "ok, 4 ports, aging 60 s, max-macs 8192" in cp.stdout, cp.stdout + cp.stderr
    cp = subprocess.run([str(L2_BIN), "--help"], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 0 and "port NAME trunk VLANS [native VLAN]" in cp.stdout
    # an unknown port is found at attach, with the ports sluiced has
    net.add_ns("slt-l2x")
    net.add_veth("slt-l2x0", "slt-l2x1", peer_ns="slt-l2x")
    sluice.start(base_config(ports=[{"name": "px", "vdev": "net_af_packet0,iface=slt-l2x0", "chain": "sw"}],
                             chains=[{"name": "sw", "nfs": ["sw"]}], pool_mbufs=4096))
    bad.write_text("port px access 10\nport dmz access 10\n")
    p = sluice.start_nf("l2switch", "sw", wait=False, extra=["--config", bad])
    assert p.wait(20) == 1
    assert "bad.conf:2: port: sluiced has no port 'dmz' (ports: px)" in sluice.nf_log("sw"), sluice.nf_log("sw")
