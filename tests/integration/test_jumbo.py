"""Jumbo frames (issue 16): larger buffers per region, set by sluiced.buffer_size / domains[].buffer_size.

1. A pcap of frames from 60 to 9,018 bytes (IPv4 TCP/UDP/ICMP; the 9,018-byte ones carry an 802.1Q
   tag: a 9000-byte MTU plus Ethernet and VLAN headers) goes through fwd -> firewall -> nat -> monitor
   between two net_pcap ports with buffer_size 9216 and comes out whole. The NAT rewrites the source
   address (SNAT to 203.0.113.1, source ports and ICMP ids kept because they are free), so the test
   applies the same rewrite to what it sent with scapy (new source, checksums recomputed) and compares
   every byte of the result: that checks the untouched bytes and the NAT's incremental checksum updates
   over long payloads at once. The monitor's pcapng holds the same frames, full length (caplen = len).
   Frames longer than the buffer (9,217 and 12,000 bytes) are dropped as `too_long`, never cut.
2. The same frames with the default buffer_size 2048: everything longer than 2048 bytes is dropped as
   `too_long` (the port's and the total counter), the rest comes out whole. With jumbo support removed
   the first test fails (its big frames would be dropped like here).
3. A trust domain with smaller buffers: big frames crossing into it are dropped as `too_long`, counted
   for the (from, to) pair; small ones are copied.
4. iperf3 between two namespaces joined only through sluiced by veth pairs of MTU 9000 (net_af_packet,
   sluiced sizes framesz from the buffer), through fwd -> firewall: the TCP segments are ~9000-byte
   frames (MSS 8960), seen in the NFs' byte/packet counters; a DF ping of 9000 bytes crosses too.
5. Config errors name the field (Python loader and sluiced agree); an af_packet port whose interface
   MTU is above what its frames hold is refused, naming the port.

Names used here: temp dirs from harness, namespaces slt-jbc / slt-jbs, veths slt-jbc0/1, slt-jbs0/1,
slt-jbm0/1 (all removed by the `net` fixture, also on failure).
"""

import copy
import json
import shutil
import subprocess

import pytest

import harness
from harness import base_config, net, read_pcap, run_sluiced_once, sh, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import ICMP, IP, TCP, UDP, Dot1Q, Ether, Raw, rdpcap  # noqa: E402

from sluice import config as sc  # noqa: E402
from sluice.errors import ConfigError  # noqa: E402

for _nf in ("firewall", "nat", "monitor"):  # start_nf(...) for the library NFs; harness.py untouched
    harness.NF_BINS.setdefault(_nf, harness.BUILD / "nfs" / f"sluice-nf-{_nf}")

JUMBO = 9216                     # buffer_size for a 9000-byte MTU (+ Ethernet + VLAN, a multiple of 64)
SIZES = [60, 1514, 1515, 2048, 2100, 4000, 8000, 9000]
TAGGED = 9018                    # 9000-byte IP packet + Ethernet header + 802.1Q tag
TOO_LONG = [JUMBO + 1, 12000]    # longer than a 9216-byte buffer
INSIDE, DST, PUB = "10.0.0.2", "10.9.0.1", "203.0.113.1"
SMALL = dict(pool_mbufs=1024, ring_size=256)  # huge pages are shared: small regions only


def frame(size, kind, i, vlan=False, tail=b""):
    """An IPv4 frame of exactly `size` bytes (no FCS, no Ethernet padding) of kind tcp/udp/icmp,
    its payload ending in `tail`."""
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if vlan:
        eth = eth / Dot1Q(vlan=100)
    ip = IP(src=INSIDE, dst=DST, id=i)
    l4 = {"tcp": TCP(sport=20000 + i, dport=80, flags="A", seq=i),
          "udp": UDP(sport=30000 + i, dport=53),
          "icmp": ICMP(type=8, id=1000 + i, seq=i)}[kind]
    hdr = eth / ip / l4
    tag = f"J{i:04d}{size:05d}".encode()
    body = (tag * (size // len(tag) + 1))[: size - len(hdr) - len(tail)] + tail
    p = hdr / Raw(body)
    assert len(bytes(p)) == size, (size, kind, len(bytes(p)))
    return p


def make_frames(sizes=SIZES, tagged=(TAGGED,)):
    out, i = [], 0
    for size in sizes:
        for kind in ("tcp", "udp", "icmp"):
            out.append(frame(size, kind, i))
            i += 1
    for size in tagged:
        for kind in ("tcp", "udp", "icmp"):
            out.append(frame(size, kind, i, vlan=True))
            i += 1
    return out


def snat(p):
    """What the NAT makes of p: source address PUB (ports and ids are free, so kept), checksums
    recomputed from scratch by scapy (the NAT updates them incrementally: they must agree)."""
    q = p.copy()
    q[IP].src = PUB
    del q[IP].chksum
    for layer in (TCP, UDP, ICMP):
        if layer in q:
            del q[layer].chksum
    return bytes(q)


def fw_rules(workdir):  # noqa: F811
    path = workdir / "fw.rules"
    path.write_text("default drop\nallow in lan src 10.0.0.0/24 name lan\n")
    return path


def pcap_chain(sluice, workdir, frames, buffer_size=None):  # noqa: F811
    """Replay `frames` from port lan through fwd -> fw -> nat -> mon to port wan (net_pcap both).
    Returns (stats, frames out of wan, frames in the monitor's pcapng, the monitor's pcapng path)."""
    inp, out, cap = workdir / "in.pcap", workdir / "out.pcap", workdir / "mon.pcapng"
    write_pcap(inp, frames)
    nat_conf = workdir / "nat.conf"
    nat_conf.write_text(f"snat from 10.0.0.0/24 to {PUB}\n")
    extra = {} if buffer_size is None else {"buffer_size": buffer_size}
    # "lan" starts without an ingress chain (not polled): packets flow once every NF is attached
    cfg = base_config(ports=[{"name": "lan", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "wan", "vdev": f"net_pcap1,tx_pcap={out}"}],
                      chains=[{"name": "c", "nfs": ["fwd", "fw", "nat", "mon"], "exit": "wan"}],
                      nfs=["fwd", "fw", "nat", "mon"], **SMALL, **extra)
    sluice.start(cfg)
    kw = dict(wakeup="block", batch=4, timeout_us=100)
    sluice.start_nf("fwd", "fwd", **kw)
    sluice.start_nf("firewall", "fw", extra=["--config", fw_rules(workdir)], **kw)
    sluice.start_nf("nat", "nat", extra=["--inside", "lan", "--outside", "wan", "--next", "--config", nat_conf], **kw)
    sluice.start_nf("monitor", "mon", extra=["--pcap", cap], **kw)
    sluice.ok("port_chain_set", port="lan", chain="c")
    wait_until(lambda: sluice.port("lan")["rx_pkts"] == len(frames), 30, "every frame read")

    def settled():
        st = sluice.stats()
        return st if st["pool"]["lent"] == 0 and sluice.nf("mon", st)["rx_pkts"] == sluice.port("wan", st)["tx_pkts"] \
            and sluice.port("wan", st)["tx_pkts"] + st["drops"]["too_long"] == len(frames) else None
    st = wait_until(settled, 30, "every frame out or dropped")
    assert sluice.stop_nf("mon") == 0, sluice.nf_log("mon")  # writes the rest of its capture
    assert sluice.stop() == 0, sluice.log()                  # closes (and flushes) out.pcap
    assert "mbufs not back in the pool" not in sluice.log()
    return st, read_pcap(out), [bytes(p) for p in rdpcap(str(cap))], cap  # pcapng: scapy reads it


def test_jumbo_frames_through_fwd_firewall_nat_monitor_whole(sluice, workdir):  # noqa: F811
    fit = make_frames()
    big = [frame(size, kind, 900 + k * 3 + j) for k, size in enumerate(TOO_LONG)
           for j, kind in enumerate(("tcp", "udp", "icmp"))]
    frames = fit[:12] + big[:3] + fit[12:] + big[3:]  # the too-long ones among the others
    st, out, mon, cap = pcap_chain(sluice, workdir, frames, buffer_size=JUMBO)
    assert "data room 9216" in sluice.log(), sluice.log()[-2000:]

    # every frame that fits a buffer came out whole: byte for byte after the NAT's rewrite, in order
    want = [snat(p) for p in fit]
    assert len(out) == len(want), (len(out), len(want), st["drops"])
    for i, (a, b) in enumerate(zip(want, out)):
        assert a == b, f"frame {i}: expected {len(a)} bytes, got {len(b)}"
    assert max(map(len, out)) == TAGGED
    # those longer than the buffer: dropped with their reason at the port, none cut short
    assert st["drops"]["too_long"] == len(big), st["drops"]
    assert sluice.port("lan", st)["drops"]["too_long"] == len(big)
    assert {k: v for k, v in st["drops"].items() if k != "too_long"} == dict.fromkeys(
        [k for k in st["drops"] if k != "too_long"], 0), st["drops"]
    lan = sluice.port("lan", st)
    assert lan["max_frame"] == JUMBO and lan["rx_bytes"] == sum(len(bytes(p)) for p in frames)
    assert sluice.port("wan", st)["tx_bytes"] == sum(map(len, want))
    for name in ("fwd", "fw", "nat", "mon"):
        nf = sluice.nf(name, st)
        assert nf["rx_pkts"] == len(fit) and nf["tx_pkts"] == len(fit), (name, nf)
    assert sluice.nf("fw", st)["counters"]["rule.lan"] == len(fit)
    assert sluice.nf("nat", st)["counters"]["translated_out"] == len(fit)
    assert st["domains"][0]["buffer_size"] == JUMBO

    # the monitor's pcapng: the same frames (it sits after the NAT), full length
    assert mon == want
    if shutil.which("tshark"):
        cp = subprocess.run(["tshark", "-r", str(cap), "-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"],
                            capture_output=True, text=True, timeout=60)
        rows = [tuple(map(int, ln.split())) for ln in cp.stdout.split("\n") if ln.strip()]
        assert rows == [(len(w), len(w)) for w in want], (rows, cp.stderr)


def test_default_buffers_drop_frames_longer_than_2048_as_too_long(sluice, workdir):  # noqa: F811
    frames = make_frames()
    st, out, mon, _ = pcap_chain(sluice, workdir, frames)  # no buffer_size: 2048
    fits = [p for p in frames if len(bytes(p)) <= 2048]
    assert len(fits) == 12 and len(frames) - len(fits) == 15
    assert out == [snat(p) for p in fits] and mon == out
    assert st["drops"]["too_long"] == len(frames) - len(fits), st["drops"]
    assert sluice.port("lan", st)["drops"]["too_long"] == len(frames) - len(fits)
    assert sluice.port("lan", st)["drops"]["rx_invalid"] == 0
    assert sluice.port("lan", st)["max_frame"] == 2048 and st["domains"][0]["buffer_size"] == 2048


def test_copy_into_a_domain_of_smaller_buffers_drops_big_frames_as_too_long(sluice, workdir):  # noqa: F811
    frames = make_frames(sizes=[60, 2048, 2049, 9000], tagged=())
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, frames)
    cfg = base_config(ports=[{"name": "lan", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "wan", "vdev": f"net_pcap1,tx_pcap={out}"}],
                      chains=[{"name": "c", "nfs": ["big", "small"], "exit": "wan"}],
                      nfs=["big", "small"], buffer_size=JUMBO, **SMALL)
    cfg["domains"] = [{"name": "lite", "pool_mbufs": 1024, "buffer_size": 2048}]
    cfg["nfs"][1]["domain"] = "lite"
    sluice.start(cfg)
    sluice.start_nf("fwd", "big")
    sluice.start_nf("fwd", "small")
    sluice.ok("port_chain_set", port="lan", chain="c")
    fits = [p for p in frames if len(bytes(p)) <= 2048]

    def settled():
        st = sluice.stats()
        return st if st["pool"]["lent"] == 0 and sluice.port("wan", st)["tx_pkts"] == len(fits) \
            and st["drops"]["too_long"] == len(frames) - len(fits) else None
    st = wait_until(settled, 30, "small frames out, big ones dropped")
    pair = next(c for c in st["copies"] if c["from"] == "default" and c["to"] == "lite")
    assert pair["packets"] == len(fits) and pair["too_long"] == len(frames) - len(fits), pair
    assert pair["no_buffer"] == 0 and st["drops"]["no_buffer"] == 0
    assert [d["buffer_size"] for d in st["domains"]] == [JUMBO, 2048]
    assert sluice.stop() == 0
    assert read_pcap(out) == [bytes(p) for p in fits]


def test_more_library_nfs_pass_jumbo_frames_whole(sluice, workdir):  # noqa: F811
    """count -> ids -> ratelimit -> reflect (back out of the pcap port it came in on, addresses and
    ports swapped: checked byte for byte); ids scans whole payloads (a signature in the last bytes of
    a 9,000-byte frame drops it); the meter's byte counts include the jumbo frames."""
    frames = make_frames()
    deep = frame(9000, "udp", 800, tail=b"JUMBOTAIL")
    frames.insert(5, deep)
    inp, out = workdir / "in.pcap", workdir / "out.pcap"
    write_pcap(inp, frames)
    ids_rules, rl_conf = workdir / "ids.rules", workdir / "rl.conf"
    ids_rules.write_text('drop udp any any -> any any (msg:"deep"; content:"JUMBOTAIL"; sid:1;)\n')
    rl_conf.write_text("length frame\nclass all match any srtcm cir 10G cbs 16m ebs 16m\n")
    for nf in ("ids", "ratelimit"):
        harness.NF_BINS.setdefault(nf, harness.BUILD / "nfs" / f"sluice-nf-{nf}")
    names = ["cnt", "ids", "rl", "refl"]
    cfg = base_config(ports=[{"name": "lan", "vdev": f"net_pcap0,rx_pcap={inp},tx_pcap={out}"}],
                      chains=[{"name": "c", "nfs": names}], nfs=names, buffer_size=JUMBO, **SMALL)
    sluice.start(cfg)
    kw = dict(wakeup="block", batch=4, timeout_us=100)
    sluice.start_nf("count", "cnt", **kw)
    sluice.start_nf("ids", "ids", extra=["--rules", ids_rules], **kw)
    sluice.start_nf("ratelimit", "rl", extra=["--config", rl_conf], **kw)
    sluice.start_nf("reflect", "refl", **kw)
    sluice.ok("port_chain_set", port="lan", chain="c")

    def settled():
        st = sluice.stats()
        return st if sluice.port("lan", st)["tx_pkts"] == len(frames) - 1 and st["pool"]["lent"] == 0 else None
    try:
        st = wait_until(settled, 30, "every frame but the deep one out")
    except AssertionError:
        st = sluice.stats()
        raise AssertionError(json.dumps({"drops": st["drops"], "nfs": st["nfs"], "ports": st["ports"]})) from None
    total = sum(len(bytes(p)) for p in frames)
    c = sluice.nf("cnt", st)["counters"]
    assert c["packets"] == len(frames) and c["bytes"] == total, c
    i = sluice.nf("ids", st)["counters"]
    assert i["drops"] == 1 and i["packets"] == len(frames), i
    r = sluice.nf("rl", st)["counters"]
    assert r["all.green"] == len(frames) - 1 and r["all.green_b"] == total - len(bytes(deep)), r
    assert all(v == 0 for v in st["drops"].values()), st["drops"]
    assert sluice.stop() == 0, sluice.log()
    assert read_pcap(out) == [reflected(p) for p in frames if p is not deep]


def reflected(p):
    """p as sluice-nf-reflect sends it back: MACs, IP addresses and TCP/UDP ports swapped, checksums
    untouched (a one's-complement sum does not depend on the order)."""
    q = Ether(bytes(p))  # checksums now explicit: kept as they are
    q.src, q.dst = q.dst, q.src
    q[IP].src, q[IP].dst = q[IP].dst, q[IP].src
    for layer in (TCP, UDP):
        if layer in q:
            q[layer].sport, q[layer].dport = q[layer].dport, q[layer].sport
    return bytes(q)


def test_gen_writes_jumbo_packets_for_sink(sluice, workdir):  # noqa: F811
    """gen fills 9216-byte buffers with 9,000-byte test packets; sink reads every stamp."""
    n, gen_dump, sink_dump = 200, workdir / "gen.json", workdir / "sink.json"
    cfg = base_config(ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"}, {"name": "out", "vdev": "net_null1"}],
                      chains=[{"name": "c", "nfs": ["gen", "sink"], "exit": "out"}], nfs=["gen", "sink"],
                      buffer_size=JUMBO, pool_mbufs=2048, ring_size=256)
    sluice.start(cfg)
    sluice.start_nf("gen", "gen", wakeup="block", batch=8, timeout_us=100,
                    extra=["--rate-pps", 20000, "--count", n, "--size", 9000, "--dump", gen_dump])
    sluice.start_nf("sink", "sink", wakeup="block", batch=8, timeout_us=100, extra=["--dump", sink_dump])
    sluice.ok("port_chain_set", port="src", chain="c")
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] >= n, 60, f"sink got {n} packets")
    sluice.ok("port_chain_set", port="src", chain=None)
    assert sluice.nf("sink")["rx_bytes"] == n * 9000
    for name in ("gen", "sink"):
        assert sluice.stop_nf(name) == 0, sluice.nf_log(name)
    g, k = json.loads(gen_dump.read_text()), json.loads(sink_dump.read_text())
    assert g["generated"] == n and g["too_small"] == 0 and g["size"] == 9000, g
    assert k["received"] == n and k["unstamped"] == 0 and k["generators"][0]["lost"] == 0, k


# ---------------------------------------------------------------- iperf3 over MTU 9000 veths

CLI_NS, SRV_NS = "slt-jbc", "slt-jbs"
CLI_IP, SRV_IP = "10.83.0.1", "10.83.0.2"


def mtu(dev, value, ns=None):
    sh("ip", "link", "set", "dev", dev, "mtu", value, ns=ns)


def test_iperf3_over_mtu_9000_veths_through_fwd_firewall(net, sluice, workdir):  # noqa: F811
    if not shutil.which("iperf3"):
        pytest.skip("iperf3 not installed")
    net.add_ns(CLI_NS)
    net.add_ns(SRV_NS)
    net.add_veth("slt-jbc0", "slt-jbc1", peer_ns=CLI_NS, peer_addr=f"{CLI_IP}/24")
    net.add_veth("slt-jbs0", "slt-jbs1", peer_ns=SRV_NS, peer_addr=f"{SRV_IP}/24")
    for host, peer, ns in (("slt-jbc0", "slt-jbc1", CLI_NS), ("slt-jbs0", "slt-jbs1", SRV_NS)):
        mtu(host, 9000)
        mtu(peer, 9000, ns=ns)
    rules = workdir / "fw.rules"
    rules.write_text("default drop\nallow in cli proto tcp dport 5299 name iperf\nallow in cli proto icmp name ping\n")
    # framecnt: ring slots per direction; sluiced adds framesz/blocksz for the jumbo buffers
    sluice.start(base_config(
        ports=[{"name": "cli", "vdev": "net_af_packet0,iface=slt-jbc0,framecnt=1024", "chain": "c2s"},
               {"name": "srv", "vdev": "net_af_packet1,iface=slt-jbs0,framecnt=1024", "chain": "s2c"}],
        chains=[{"name": "c2s", "nfs": ["c2s-fwd", "fw"], "exit": "srv"},
                {"name": "s2c", "nfs": ["s2c-fwd", "fw"], "exit": "cli"}],
        nfs=["c2s-fwd", "s2c-fwd", "fw"], buffer_size=JUMBO, pool_mbufs=4096, ring_size=512))
    # 9216-byte slots in 36 KiB blocks: the PMD addresses slot i at i * framesz, so a block holds whole slots
    assert "frames of 9216 bytes in blocks of 36864" in sluice.log(), sluice.log()[-2000:]
    for name in ("c2s-fwd", "s2c-fwd"):
        sluice.start_nf("fwd", name, wakeup="adaptive", batch=4, timeout_us=50)
    sluice.start_nf("firewall", "fw", wakeup="adaptive", batch=4, timeout_us=50, extra=["--config", rules])
    st = sluice.stats()
    assert all(sluice.port(p, st)["max_frame"] >= TAGGED for p in ("cli", "srv")), st["ports"]

    # ARP first (small pings), then 9000-byte IP packets that may not be fragmented cross both ways
    sh("ping", "-c", "2", "-i", "0.2", "-W", "3", SRV_IP, ns=CLI_NS, check=False, timeout=30)
    cp = sh("ping", "-c", "3", "-i", "0.2", "-W", "3", "-M", "do", "-s", "8972", SRV_IP, ns=CLI_NS, check=False, timeout=30)
    assert cp.returncode == 0 and " 3 received" in cp.stdout, cp.stdout + cp.stderr + sluice.log()[-2000:]

    server = net.popen(["iperf3", "-s", "-1", "-B", SRV_IP, "-p", "5299"], ns=SRV_NS,
                       stdout=open(workdir / "iperf3-server.log", "wb"), stderr=subprocess.STDOUT)
    wait_until(lambda: "5299" in sh("ss", "-ltn", ns=SRV_NS).stdout, 10, "iperf3 server listening")
    before = {n["name"]: (n["rx_pkts"], n["rx_bytes"]) for n in sluice.stats()["nfs"]}
    cp = sh("iperf3", "-c", SRV_IP, "-p", "5299", "-t", "3", "-J", ns=CLI_NS, check=False, timeout=60)
    res = json.loads(cp.stdout)
    assert cp.returncode == 0 and "error" not in res, res.get("error", cp.stderr)
    received = res["end"]["sum_received"]["bytes"]
    assert received > 0, res["end"]
    server.wait(10)

    st = sluice.stats()
    pkts = sluice.nf("c2s-fwd", st)["rx_pkts"] - before["c2s-fwd"][0]
    nbytes = sluice.nf("c2s-fwd", st)["rx_bytes"] - before["c2s-fwd"][1]
    # client -> server carried the data: full-MSS segments of ~9014 bytes (a 1500-byte MTU or a 2048-byte
    # buffer would keep every frame at or under 2048 bytes)
    assert nbytes >= received and nbytes / pkts > 4000, (nbytes, pkts)
    assert sluice.nf("fw", st)["counters"]["rule.iperf"] >= 1
    assert st["drops"]["too_long"] == 0 and st["drops"]["invalid_desc"] == 0, st["drops"]
    # the connection's MSS as iperf3 read it from its socket: a 9000-byte MTU's (8960 less options)
    assert res["start"]["tcp_mss_default"] > 8000, res["start"]


def test_af_packet_port_refused_when_its_interface_mtu_is_above_its_frames(net, workdir):  # noqa: F811
    net.add_veth("slt-jbm0", "slt-jbm1")
    mtu("slt-jbm0", 9000)
    cfg = base_config(ports=[{"name": "big", "vdev": "net_af_packet0,iface=slt-jbm0"}], **SMALL)
    r, _ = run_sluiced_once(cfg, workdir)  # default buffer_size 2048: frames up to ~2000 bytes
    msg = r.stdout + r.stderr
    assert r.returncode != 0 and "ports[0].vdev (port big)" in msg and "MTU 9000" in msg, msg
    assert "buffer_size to at least 9216" in msg, msg
    cfg["ports"][0]["vdev"] = "net_af_packet0,iface=slt-jbm0,framesz=16384"
    cfg["sluiced"]["buffer_size"] = JUMBO
    r, _ = run_sluiced_once(cfg, workdir)  # a slot longer than the buffer: the PMD would refuse it
    msg = r.stdout + r.stderr
    assert r.returncode != 0 and "ports[0].vdev (port big): framesz=16384 needs buffers of at least 16352" in msg, msg


# ---------------------------------------------------------------- config errors name the field

def yaml_cfg(**top):
    c = {"ports": [{"name": "p", "vdev": "net_null0"}], "nfs": [{"name": "a", "program": "fwd"}]}
    c.update(top)
    return c


BAD = [
    (dict(sluiced={"buffer_size": 1024}), "sluiced.buffer_size", "2048..16384"),
    (dict(sluiced={"buffer_size": 32768}), "sluiced.buffer_size", "2048..16384"),
    (dict(sluiced={"buffer_size": "9k"}), "sluiced.buffer_size", "2048..16384"),
    (dict(sluiced={"buffer_size": 9000}), "sluiced.buffer_size", "multiple of 64"),
    (dict(sluiced={"buffer_size": 16384, "pool_mbufs": 1048576}), "sluiced.buffer_size", "at most 4 GiB"),
    (dict(domains=[{"name": "x", "buffer_size": 100}]), "domains[0].buffer_size", "2048..16384"),
    (dict(domains=[{"name": "x", "buffer_size": 4100}]), "domains[0].buffer_size", "multiple of 64"),
    (dict(domains=[{"name": "x", "buffer_size": 16384, "pool_mbufs": 300000}]), "domains[0].buffer_size",
     "at most 4 GiB"),
    (dict(sluiced={"buffer_size": 16384}, domains=[{"name": "x", "pool_mbufs": 300000}]), "domains[0].pool_mbufs",
     "at most 4 GiB"),
]


@pytest.mark.parametrize("top,field,text", BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_buffer_size_is_named_by_the_python_loader(top, field, text):
    with pytest.raises(ConfigError) as e:
        sc.normalize(yaml_cfg(**copy.deepcopy(top)), check_programs=False)
    assert str(e.value).startswith(field + ":") and text in str(e.value), str(e.value)


@pytest.mark.parametrize("top,field,text", BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_bad_buffer_size_is_named_by_sluiced(workdir, top, field, text):  # noqa: F811
    harness.require_env()
    cfg = {"ports": [{"name": "p", "vdev": "net_null0"}]}
    cfg.update(copy.deepcopy(top))
    r, _ = run_sluiced_once(cfg, workdir)
    msg = r.stdout + r.stderr
    assert r.returncode == 2 and f"{field}: " in msg and text in msg, msg


def test_buffer_size_good_values_normalize_and_reach_sluiced_json():
    c = sc.normalize(yaml_cfg(sluiced={"buffer_size": JUMBO}, domains=[{"name": "x"}, {"name": "y", "buffer_size": 4096}]),
                     check_programs=False)
    assert c["sluiced"]["buffer_size"] == JUMBO
    assert [(d["name"], d["buffer_size"]) for d in c["domains"]] == [("x", JUMBO), ("y", 4096)]
    out = json.loads(sc.to_sluiced_json(c))
    assert out["sluiced"]["buffer_size"] == JUMBO and out["domains"][1]["buffer_size"] == 4096
    assert sc.normalize(yaml_cfg(), check_programs=False)["sluiced"]["buffer_size"] == 2048
