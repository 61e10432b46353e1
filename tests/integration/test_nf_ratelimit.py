"""sluice-nf-ratelimit end to end: policing, re-marking, colour-aware metering, per-flow meters, reload,
ping through an unpoliced class, malformed frames, config errors.

  slt-rlc [slt-rlc1] -- veth -- slt-rlc0 = port "lan" -> chain l2w [rl] -> exit "wan"
  slt-rls [slt-rls1] -- veth -- slt-rls0 = port "wan" -> chain w2l [rl] -> exit "lan"

Packets are crafted with scapy and sent from a raw socket in the client namespace; the server
namespace's raw socket collects what the policer passed. The checks are deterministic: every packet
sent reaches the NF (the sender waits for the NF's counters every few packets, so no ring overflows),
green + yellow + red = sent, delivered = the passed colours, yellow packets carry the mark, and the
bytes passed never exceed the RFC bound CBS + EBS + CIR * T, where T is a wall-clock upper bound on
the time between the first and the last packet metered. No assertion depends on the machine being
fast except through that upper bound (a slower machine only loosens it).
"""

import signal
import subprocess
import time

import pytest

import harness
from harness import base_config, net, sh, sluice, wait_until, workdir  # noqa: F401
from rawwire import Wire

RL_BIN = harness.BUILD / "nfs" / "sluice-nf-ratelimit"
harness.NF_BINS.setdefault("ratelimit", RL_BIN)  # start_nf("ratelimit", ...); harness.py untouched

scapy_all = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Ether, IPv6, Raw  # noqa: E402

CLI_MAC, SRV_MAC = "02:81:00:00:01:01", "02:81:00:00:02:01"
C4, S4, C6, S6 = "10.81.0.1", "10.81.0.2", "fd81::1", "fd81::2"
PKT_LEN = 1000  # IP length of the test packets: the metered length (`length ip`)

CONF = """\
# test classes (docs/nfs/ratelimit.md)
class slow match proto udp dport 5001 srtcm cir 8k cbs 3000 ebs 3000 yellow mark af11
class tr   match proto udp dport 5003 trtcm cir 8k pir 16k cbs 2000 pbs 4000 yellow mark af12
class aware color-aware match proto udp dport 5004 srtcm cir 10G cbs 1m ebs 1m
class fast match proto udp dport 5002 srtcm cir 10G cbs 1m ebs 1m
class v6   match family ipv6 proto udp srtcm cir 8k cbs 0 ebs 1m yellow mark ef
class pf   per-flow match proto udp dport 5005 srtcm cir 8k cbs 2000 ebs 0
"""

# ---------------------------------------------------------------- fixtures


def rl_wire(ns, ifname):
    """A rawwire.Wire with an 8 MiB receive buffer (SO_RCVBUFFORCE): a whole class's burst can queue."""
    return Wire(ns, ifname, rcvbuf=8 << 20, rcvbuf_force=True)


def start_path(net, sluice, conf_text, addrs=False, rl_args=()):  # noqa: F811
    net.add_ns("slt-rlc")
    net.add_ns("slt-rls")
    net.add_veth("slt-rlc0", "slt-rlc1", peer_ns="slt-rlc", mac=CLI_MAC,
                 peer_addr=f"{C4}/24" if addrs else None)
    net.add_veth("slt-rls0", "slt-rls1", peer_ns="slt-rls", mac=SRV_MAC,
                 peer_addr=f"{S4}/24" if addrs else None)
    sluice.start(base_config(
        ports=[{"name": "lan", "vdev": "net_af_packet0,iface=slt-rlc0", "chain": "l2w"},
               {"name": "wan", "vdev": "net_af_packet1,iface=slt-rls0", "chain": "w2l"}],
        chains=[{"name": "l2w", "nfs": ["rl"], "exit": "wan"},
                {"name": "w2l", "nfs": ["rl"], "exit": "lan"}],
        pool_mbufs=4096))
    conf = sluice.dir / "rl.conf"
    conf.write_text(conf_text)
    sluice.start_nf("ratelimit", "rl", wakeup="block", batch=1, timeout_us=50,
                    extra=["--config", conf, *rl_args])
    return conf


def counters(s):
    nf = s.nf("rl")
    assert nf is not None, "ratelimit NF not attached"
    return nf["counters"]


def colours(c, cls):
    return {k: c.get(f"{cls}.{k}", 0) for k in ("green", "green_b", "yellow", "yellow_b", "red", "red_b")}


def metered(c, cls):
    return c.get(f"{cls}.green", 0) + c.get(f"{cls}.yellow", 0) + c.get(f"{cls}.red", 0)


def udp4(dport, sport=4000, tos=0, ident=0):
    pay = PKT_LEN - 28
    return Ether(src=CLI_MAC, dst=SRV_MAC) / IP(src=C4, dst=S4, tos=tos, id=ident) / \
        UDP(sport=sport, dport=dport) / Raw(b"x" * pay)


def send_class(sluice, wire, cls, frames, chunk=16):  # noqa: F811
    """Send frames of one class, waiting for the NF to meter each chunk (no ring can overflow).
    Returns T, an upper bound on the seconds between the NF metering the first and the last."""
    base = metered(counters(sluice), cls)
    t0 = time.monotonic()
    for i in range(0, len(frames), chunk):
        for f in frames[i:i + chunk]:
            wire.send(f)
        want = base + min(i + chunk, len(frames))
        wait_until(lambda: metered(counters(sluice), cls) >= want, 30, f"{cls}: {want} packets metered")
    t = time.monotonic() - t0
    assert metered(counters(sluice), cls) == base + len(frames)
    return t


def bound(cbs_ebs, cir_bits, t):
    """Most bytes a meter starting (at most) full can pass in t seconds of its clock. The NF's TSC is
    calibrated against CLOCK_MONOTONIC to a few ppm: 1 % slack covers it with room to spare."""
    return cbs_ebs + cir_bits / 8 * (t * 1.01 + 0.001)


def received_by_dport(frames):
    out = {}
    for f in frames:
        p = Ether(f)
        if UDP in p:
            out.setdefault(p[UDP].dport, []).append(p)
    return out


# ---------------------------------------------------------------- 1. policing and marking


def test_policing_marking_colour_aware(net, sluice):  # noqa: F811
    start_path(net, sluice, CONF)
    cli, srv = rl_wire("slt-rlc", "slt-rlc1"), rl_wire("slt-rls", "slt-rls1")
    try:
        srv.recv_all()
        # srTCM 8 kbit/s, CBS 3000, EBS 3000: a burst of 200 x 1000 bytes far above CIR; ECN 01 set
        t_slow = send_class(sluice, cli, "slow", [udp4(5001, tos=0x01, ident=i) for i in range(200)])
        # trTCM 8/16 kbit/s, CBS 2000, PBS 4000
        t_tr = send_class(sluice, cli, "tr", [udp4(5003, ident=i) for i in range(200)])
        # colour-aware with huge buckets: the colour is the packet's AF drop precedence
        aware = [udp4(5004, tos=d << 2, ident=i) for i, d in enumerate([10, 12, 14, 0] * 20)]
        send_class(sluice, cli, "aware", aware)
        # a class with a huge CIR passes everything
        send_class(sluice, cli, "fast", [udp4(5002, ident=i) for i in range(300)])
        # IPv6, CBS 0: every packet yellow, re-marked EF; ECN and flow label kept
        v6 = [Ether(src=CLI_MAC, dst=SRV_MAC) / IPv6(src=C6, dst=S6, tc=0x02, fl=0x12345) /
              UDP(sport=4000, dport=6000) / Raw(b"y" * (PKT_LEN - 48)) for _ in range(50)]
        send_class(sluice, cli, "v6", v6)

        c = counters(sluice)
        passed = {k: colours(c, k)["green"] + colours(c, k)["yellow"] for k in ("slow", "tr", "aware", "fast", "v6")}
        want_delivered = {5001: passed["slow"], 5003: passed["tr"], 5004: passed["aware"], 5002: 300, 6000: 50}
        got = {}

        def delivered():
            for k, v in received_by_dport(srv.recv_all()).items():
                got.setdefault(k, []).extend(v)
            return all(len(got.get(k, [])) >= n for k, n in want_delivered.items())

        wait_until(delivered, 30, "every passed packet delivered")
        time.sleep(0.3)
        delivered()
        print({k: colours(c, k) for k in ("slow", "tr", "aware", "fast", "v6")}, "T", t_slow, t_tr)
        for k, n in want_delivered.items():
            assert len(got.get(k, [])) == n, (k, len(got.get(k, [])), n)

        # slow (srTCM): counters consistent, the RFC bound holds, the burst overflowed
        s = colours(c, "slow")
        assert s["green"] + s["yellow"] + s["red"] == 200, s
        assert (s["green_b"], s["yellow_b"], s["red_b"]) == (s["green"] * PKT_LEN, s["yellow"] * PKT_LEN,
                                                             s["red"] * PKT_LEN), s
        assert s["green_b"] <= bound(3000, 8000, t_slow), (s, t_slow)
        assert s["green_b"] + s["yellow_b"] <= bound(6000, 8000, t_slow), (s, t_slow)
        assert s["green"] >= 3, s                      # C starts full: 3000 bytes
        assert s["red"] == 0 or s["yellow"] >= 3, s    # E (3000 bytes) drains before any red
        if 6000 + 1000 * t_slow * 1.01 < 200 * PKT_LEN:
            assert s["red"] > 0, s                     # implied by the bound, stated for clarity
        marks = [p[IP].tos for p in got[5001]]
        assert sum(1 for t in marks if t == (10 << 2 | 1)) == s["yellow"], marks   # AF11, ECN kept
        assert sum(1 for t in marks if t == 0x01) == s["green"], marks
        for p in got[5001]:  # the header checksum was updated: scapy recomputes it from scratch
            q = IP(bytes(p[IP]))
            ck = q.chksum
            del q.chksum
            assert IP(bytes(q)).chksum == ck

        # tr (trTCM)
        t = colours(c, "tr")
        assert t["green"] + t["yellow"] + t["red"] == 200, t
        assert t["green_b"] <= bound(2000, 8000, t_tr), (t, t_tr)
        assert t["green_b"] + t["yellow_b"] <= bound(4000, 16000, t_tr), (t, t_tr)
        assert t["green"] >= 2 and (t["red"] == 0 or t["green"] + t["yellow"] >= 4), t
        assert sum(1 for p in got[5003] if p[IP].tos == 12 << 2) == t["yellow"]

        # colour-aware: exactly by precedence (AF11 and 0 green, AF12 yellow, AF13 red)
        a = colours(c, "aware")
        assert (a["green"], a["yellow"], a["red"]) == (40, 20, 20), a
        assert sorted(p[IP].tos >> 2 for p in got[5004]) == sorted([10, 0, 12] * 20)

        f = colours(c, "fast")
        assert (f["green"], f["yellow"], f["red"]) == (300, 0, 0), f

        v = colours(c, "v6")
        assert (v["green"], v["yellow"], v["red"]) == (0, 50, 0), v
        assert all(p[IPv6].tc == (46 << 2 | 0x02) and p[IPv6].fl == 0x12345 for p in got[6000])

        # NF totals
        total = 200 + 200 + 80 + 300 + 50
        assert c["passed"] + c["dropped"] == total + c["non_ip"] + c["unmatched"], c
        assert c["dropped"] == s["red"] + t["red"] + a["red"], c
        assert c["marked"] == s["yellow"] + t["yellow"] + v["yellow"], c
        assert c["malformed"] == 0 and c["flow_full"] == 0, c
        assert sluice.nfs["rl"].poll() is None
    finally:
        cli.close()
        srv.close()


# ---------------------------------------------------------------- 2. per-flow meters, reload


def test_per_flow_table_full_and_reload(net, sluice):  # noqa: F811
    conf = start_path(net, sluice, CONF, rl_args=["--flows", "4"])
    cli, srv = rl_wire("slt-rlc", "slt-rlc1"), rl_wire("slt-rls", "slt-rls1")
    try:
        srv.recv_all()
        frames = [udp4(5005, sport=7000 + f, ident=f * 100 + i) for f in range(5) for i in range(10)]
        t = send_class(sluice, cli, "pf", frames)
        c = counters(sluice)
        p = colours(c, "pf")
        print(p, "T", t, c)
        assert p["green"] + p["red"] == 50 and p["yellow"] == 0, p
        # 4 flows got a table entry, the 5th found the table full and used the class's shared meter
        assert c["flows"] == 4 and c["flow_full"] == 10, c
        # five meters, each starting with CBS = 2000 bytes: at least 2 green packets each
        assert p["green"] >= 10, p
        assert p["green_b"] <= 5 * bound(2000, 8000, t), (p, t)
        got = []
        wait_until(lambda: len(got.extend(received_by_dport(srv.recv_all()).get(5005, [])) or got)
                   >= p["green"], 30, "green packets delivered")
        time.sleep(0.3)
        got.extend(received_by_dport(srv.recv_all()).get(5005, []))
        assert len(got) == p["green"], (len(got), p)

        # reload: the new file takes effect at the next batch, the flow table restarts empty
        conf.write_text(CONF.replace("cbs 2000 ebs 0", "cbs 5000 ebs 0"))
        sluice.nfs["rl"].send_signal(signal.SIGHUP)
        t2 = send_class(sluice, cli, "pf", [udp4(5005, sport=7100, ident=i) for i in range(10)])
        c = counters(sluice)
        assert c["reloads"] == 1 and c["reload_errors"] == 0, c
        assert c["flows"] == 1, c
        p2 = colours(c, "pf")
        assert p2["green"] - p["green"] >= 5, (p, p2, t2)    # a fresh meter with CBS 5000
        assert "reloaded" in sluice.nf_log("rl")

        # a broken file: reported with file, line and field; the classes in force stay
        conf.write_text(CONF + "class bad match any srtcm cir 10X cbs 1 ebs 1\n")
        sluice.nfs["rl"].send_signal(signal.SIGHUP)
        send_class(sluice, cli, "pf", [udp4(5005, sport=7200)])
        wait_until(lambda: counters(sluice)["reload_errors"] == 1, 10, "reload error counted")
        assert "rl.conf:8: cir: '10X' is not a rate in bit/s" in sluice.nf_log("rl")
        assert counters(sluice)["flows"] == 2
        assert sluice.nfs["rl"].poll() is None
    finally:
        cli.close()
        srv.close()


# ---------------------------------------------------------------- 3. ping, malformed frames, errors


def malformed_frames():
    eth4 = Ether(src=CLI_MAC, dst=SRV_MAC, type=0x0800)
    eth6 = Ether(src=CLI_MAC, dst=SRV_MAC, type=0x86DD)
    good4 = bytes(IP(src=C4, dst=S4) / UDP(sport=1, dport=5001) / Raw(b"abcd"))
    good6 = bytes(IPv6(src=C6, dst=S6) / UDP(sport=1, dport=53) / Raw(b"abcd"))
    return [
        bytes(eth4) + good4[:19],                                   # IPv4 header cut
        bytes(eth4) + bytes([0x43]) + good4[1:],                    # IHL 3
        bytes(eth4) + bytes([0x65]) + good4[1:],                    # version 6 in an IPv4 frame
        bytes(eth4) + good4[:2] + b"\x00\xff" + good4[4:],          # total length > frame
        bytes(eth4) + good4[:2] + b"\x00\x18" + good4[4:24],        # UDP header cut (total 24)
        bytes(eth6) + good6[:39],                                   # IPv6 header cut
        bytes(eth6) + good6[:4] + b"\x01\x00" + good6[6:],          # payload length > frame
        bytes(eth6) + bytes(IPv6(src=C6, dst=S6, nh=0, plen=2))[:40] + b"\x11\x05",  # ext hdr cut
    ]


def test_ping_malformed_and_config_errors(net, sluice, workdir):  # noqa: F811
    start_path(net, sluice, CONF, addrs=True)
    # ICMP matches no class: ping (and the ARP before it) passes both ways
    cp = sh("ping", "-c", "3", "-i", "0.2", "-W", "5", S4, ns="slt-rlc", check=False, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    c = counters(sluice)
    assert c["unmatched"] >= 6 and c["non_ip"] >= 2 and c["dropped"] == 0, c

    cli = rl_wire("slt-rlc", "slt-rlc1")
    try:
        frames = malformed_frames()
        for f in frames:
            cli.send(f)
        wait_until(lambda: counters(sluice).get("malformed", 0) >= len(frames), 20, "malformed counted")
        c = counters(sluice)
        assert c["malformed"] == len(frames) and metered(c, "slow") == 0, c
        assert sluice.nfs["rl"].poll() is None, "ratelimit died"
    finally:
        cli.close()
    # still forwarding
    cp = sh("ping", "-c", "1", "-W", "5", S4, ns="slt-rlc", check=False, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    for name in ("passed", "dropped", "marked", "unmatched", "non_ip", "malformed", "flows", "flow_full",
                 "flow_expired", "reloads", "reload_errors", "slow.green", "slow.yellow_b", "pf.red_b"):
        assert name in c, (name, c)

    # configuration errors name the file, line and field (--check needs no sluiced)
    bad = workdir / "bad.conf"
    for text, msg in (
            ("class a match any srtcm cir 1k cbs 1 ebs 1\nclass b match proto udp dport 99999 srtcm cir 1k "
             "cbs 1 ebs 1\n", "bad.conf:2: dport: '99999' is not a port or range"),
            ("# x\nclass a match any trtcm cir 2M pir 1M cbs 1 pbs 1\n",
             "bad.conf:2: pir: must be at least cir (RFC 2698)"),
            ("class a match any srtcm cir 1k cbs 1 ebs 1 yellow mark af99\n",
             "bad.conf:1: yellow: mark needs a DSCP"),
            ("class a match any\n", "bad.conf:1: meter: missing")):
        bad.write_text(text)
        cp = subprocess.run([str(RL_BIN), "--config", str(bad), "--check"], capture_output=True, text=True,
                            timeout=20)
        assert cp.returncode == 1 and msg in cp.stderr, (text, cp.stderr)
    good = workdir / "good.conf"
    good.write_text(CONF)
    cp = subprocess.run([str(RL_BIN), "--config", str(good), "--check"], capture_output=True, text=True,
                        timeout=20)
    assert cp.returncode == 0 and "6 classes (1 per-flow)" in cp.stdout, cp.stdout + cp.stderr
    cp = subprocess.run([str(RL_BIN), "--config", str(workdir / "missing.conf"), "--check"],
                        capture_output=True, text=True, timeout=20)
    assert cp.returncode == 1 and "missing.conf: No such file or directory" in cp.stderr, cp.stderr
