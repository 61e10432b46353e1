"""Trust domains (issue 15): one packet region per domain, a copy at every domain boundary, and no
NF able to reach the pool or another domain's packets.

  in.pcap -> "inI" (net_pcap rx) -> chain I -> "outI" (net_pcap tx)        the innocent traffic
  "srcH" (net_null, endless) -> chain H = [evil] -> "sinkH" (net_null)      the hostile NF's traffic

- hole 5: the mbuf headers and the pool's ring lived in the region every NF maps read-write; an NF
  that zeroed it destroyed the pool for everyone. Now they are in sluiced's own memory: an NF that
  zeroes all it can reach (tests/hostile/hostile_nf.c --mode zero-region) breaks only its packets.
- an NF maps only its own domain's region and its own rings (/proc/PID/maps).
- access: ro: the region is mapped read-only; a write faults in that NF (SIGSEGV) and nothing else.
- a chain across domains delivers every byte as sent; copies are counted per domain pair.
- an NF that keeps every buffer exhausts its own domain's pool, never the default's.
"""

import re
import signal
import subprocess

import pytest

from harness import base_config, BUILD, read_pcap, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

HOSTILE = BUILD / "tests" / "hostile" / "sluice-hostile-nf"
N = 1000
RING = 2048  # N stays under backpressure's 3/4 mark: no drops by design


def make_frames(n=N, tag="innocent"):
    return [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.15.0.1", dst="10.15.0.2", id=i)
                  / UDP(sport=1000 + i % 3000, dport=9) / Raw(f"{tag}-{i:06d}".encode() * (1 + i % 40)))
            for i in range(n)]


def nf_entry(name, domain=None, access=None):
    e = {"name": name}
    if domain:
        e["domain"] = domain
    if access:
        e["access"] = access
    return e


def config(wd, inp, chain_i, nfs, domains=(), ring=RING, **sluiced):
    cfg = base_config(
        ports=[{"name": "inI", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "outI", "vdev": f"net_pcap1,tx_pcap={wd / 'out.pcap'}"},
               {"name": "srcH", "vdev": "net_null0,size=64,copy=0"},
               {"name": "sinkH", "vdev": "net_null1"}],
        chains=[{"name": "I", "nfs": chain_i, "exit": "outI"},
                {"name": "H", "nfs": ["evil"], "exit": "sinkH"}],
        ring_size=ring, **sluiced)
    cfg["nfs"] = nfs
    if domains:
        cfg["domains"] = list(domains)
    return cfg


def start_hostile(s, mode, name="evil"):
    log = open(s.dir / f"nf-{name}.log", "ab")
    p = subprocess.Popen([str(HOSTILE), "--socket", str(s.nf_sock), "--name", name, "--mode", mode],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    s.nfs[name] = p
    s.wait_attached(name)
    return p


def counter(s, nf, key, st=None):
    n = s.nf(nf, st)
    return n["counters"].get(key, 0) if n else 0


def alive_stats(s):
    if not s.alive():
        raise AssertionError(f"sluiced died ({s.proc.returncode}):\n{s.log()[-3000:]}")
    return s.stats()


def run_innocent(s, frames):
    s.ok("port_chain_set", port="inI", chain="I")
    return wait_until(lambda: (lambda st: st if s.port("outI", st)["tx_pkts"] >= len(frames) else None)(alive_stats(s)),
                      30, f"{len(frames)} innocent packets out")


def pool_whole(s):
    def whole():
        st = alive_stats(s)
        p = st["pool"]
        doms = st["domains"]
        return (p["free"] == p["mbufs"] and p["lent"] == 0 and all(d["free"] == d["mbufs"] for d in doms)
                and st)
    try:
        return wait_until(whole, 10, "every domain's pool whole")
    except AssertionError:
        st = s.stats()
        raise AssertionError(f"pool not whole: {st['pool']} {st['domains']}") from None


def check_out(wd, frames):
    got = read_pcap(wd / "out.pcap")
    assert len(got) == len(frames)
    for i, (a, b) in enumerate(zip(frames, got)):
        assert a == b, f"packet {i} differs"


def need_hostile():
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")


@pytest.mark.parametrize("domain", [None, "jail"])
def test_zero_region_breaks_nothing_outside_its_packets(sluice, workdir, domain):  # noqa: F811
    """Hole 5: the hostile NF zeroes every byte of packet memory it maps. Without domains (one
    region) that is every packet buffer, yet no mbuf header: the pool stays whole and later traffic is
    exact. In a domain of its own it reaches only that domain's region."""
    need_hostile()
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    domains = [{"name": "jail", "pool_mbufs": 4096}] if domain else []
    sluice.start(config(workdir, inp, ["ia", "ib"], [nf_entry("ia"), nf_entry("ib"), nf_entry("evil", domain)],
                        domains))
    sluice.start_nf("fwd", "ia")
    sluice.start_nf("fwd", "ib")
    evil = start_hostile(sluice, "zero-region")
    sluice.ok("port_chain_set", port="srcH", chain="H")
    wait_until(lambda: counter(sluice, "evil", "zeroed") > 0, 20, "the region zeroed")
    before = counter(sluice, "evil", "rx")
    wait_until(lambda: counter(sluice, "evil", "rx") > before + 20000, 20, "traffic through the NF after it")
    st = alive_stats(sluice)
    zeroed = counter(sluice, "evil", "zeroed", st)
    dom = next(d for d in st["domains"] if d["name"] == (domain or "default"))
    assert zeroed == dom["region_bytes"], (zeroed, st["domains"])  # all of its region, nothing else
    if domain:
        # every packet it saw crossed from the ports' domain into its own
        sluice.ok("port_chain_set", port="srcH", chain=None)
        st = wait_until(lambda: (lambda s: s if s["pool"]["lent"] == 0 else None)(alive_stats(sluice)), 10,
                        "its packets back")
        pair = next(c for c in st["copies"] if c["from"] == "default" and c["to"] == "jail")
        ev = sluice.nf("evil", st)
        # copied once each: those it got, and those its full ring refused after the copy
        assert ev["rx_pkts"] <= pair["packets"] <= ev["rx_pkts"] + ev["drops"]["ring_full"], (pair, ev)
        assert all(c["to"] != "default" for c in st["copies"])  # it sends to a port: no copy back
    st = run_innocent(sluice, frames)
    sluice.ok("port_chain_set", port="srcH", chain=None)
    assert sluice.port("outI", st)["tx_pkts"] == N
    for name in ("ia", "ib"):
        nf = sluice.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N, nf
    evil.send_signal(signal.SIGTERM)
    assert evil.wait(10) == 0, sluice.nf_log("evil")
    sluice.wait_gone("evil")
    pool_whole(sluice)
    assert sluice.stop() == 0, sluice.log()[-3000:]
    assert "mbufs not back in the pool" not in sluice.log()
    check_out(workdir, frames)


def memfd_maps(pid):
    """{memfd name: set of permission strings} of a process's memfd mappings."""
    out = {}
    for line in open(f"/proc/{pid}/maps"):
        m = re.search(r"^\S+ (\S+) \S+ \S+ \S+\s+/memfd:(\S+)", line)
        if m:
            out.setdefault(m.group(2), set()).add(m.group(1))
    return out


def test_an_nf_maps_only_its_own_domain(sluice, workdir):  # noqa: F811
    """/proc/PID/maps: an NF of domain `jail` maps its region (sluice-region1) and its rings, nothing of
    the default domain's region nor any other manager memory; a default NF maps region 0 only."""
    inp = workdir / "in.pcap"
    write_pcap(inp, make_frames(10))
    sluice.start(config(workdir, inp, ["ia", "u"], [nf_entry("ia"), nf_entry("u", "jail"), nf_entry("evil")],
                        [{"name": "jail", "pool_mbufs": 2048}, {"name": "blue", "pool_mbufs": 2048}]))
    pa = sluice.start_nf("fwd", "ia")
    pu = sluice.start_nf("fwd", "u")
    st = sluice.stats()
    assert [d["name"] for d in st["domains"]] == ["default", "jail", "blue"]
    assert sluice.nf("u", st)["domain"] == "jail" and sluice.nf("ia", st)["domain"] == "default"
    mu, ma = memfd_maps(pu.pid), memfd_maps(pa.pid)
    # with sluiced.pipes on, an rw NF also maps its own domain's pipe area (descriptors only)
    assert set(mu) <= {"sluice-region1", "sluice-nf-rings", "sluice-pipes-jail"} and "sluice-region1" in mu, mu
    assert set(ma) <= {"sluice-region0", "sluice-nf-rings", "sluice-pipes-default"} and "sluice-region0" in ma, ma
    # no other file-backed mapping of the manager's: everything else is a library, the binary or anon
    for line in open(f"/proc/{pu.pid}/maps"):
        assert "sluice-region0" not in line and "sluice-region2" not in line and "hugepage" not in line, line
    # and only one ring memfd: its own
    rings = {line.split()[4] for line in open(f"/proc/{pu.pid}/maps") if "sluice-nf-rings" in line}
    assert len(rings) == 1, rings


def test_read_only_nf_write_faults_in_that_nf_only(sluice, workdir):  # noqa: F811
    """access: ro: the hostile NF writes one byte into a packet: SIGSEGV in it; sluiced and the
    innocent chain (whose second NF is a read-only fwd) carry on exactly."""
    need_hostile()
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp, ["ia", "ro"], [nf_entry("ia"), nf_entry("ro", access="ro"),
                                                     nf_entry("evil", access="ro")]))
    sluice.start_nf("fwd", "ia")
    sluice.start_nf("fwd", "ro")
    ro_maps = memfd_maps(sluice.nfs["ro"].pid)
    assert ro_maps["sluice-region0"] == {"r--s"}, ro_maps
    evil = start_hostile(sluice, "write-ro")
    sluice.ok("port_chain_set", port="srcH", chain="H")
    rc = evil.wait(20)
    # SIGSEGV (under ASan/UBSan its handler reports the SEGV and exits 1)
    assert rc == -signal.SIGSEGV or (rc == 1 and "AddressSanitizer: SEGV" in sluice.nf_log("evil")), \
        (rc, sluice.nf_log("evil"))
    assert "the write went through" not in sluice.nf_log("evil")
    sluice.ok("port_chain_set", port="srcH", chain=None)
    sluice.wait_gone("evil")
    st = run_innocent(sluice, frames)
    assert sluice.nf("ro", st)["access"] == "ro" and sluice.nf("ro", st)["tx_pkts"] == N
    assert st["drops"]["invalid_desc"] == 0
    pool_whole(sluice)
    assert sluice.stop() == 0
    check_out(workdir, frames)


def test_mixed_chain_byte_for_byte(sluice, workdir):  # noqa: F811
    """pcap in -> fwd (default) -> fwd (private domain u) -> fwd (domain blue) -> fwd (default) -> pcap
    out: every byte as sent, and each boundary's copies counted."""
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp, ["a", "u", "n", "b"],
                        [nf_entry("a"), nf_entry("u", "u"), nf_entry("n", "blue"), nf_entry("b"), nf_entry("evil")],
                        [{"name": "u", "pool_mbufs": 4096}, {"name": "blue", "pool_mbufs": 4096}]))
    for n in ("a", "u", "n", "b"):
        sluice.start_nf("fwd", n)
    st = run_innocent(sluice, frames)
    pairs = {(c["from"], c["to"]): c for c in st["copies"]}
    assert set(pairs) == {("default", "u"), ("u", "blue"), ("blue", "default")}, pairs
    for c in pairs.values():
        assert c["packets"] == N and c["no_buffer"] == 0, c
    assert pairs[("default", "u")]["bytes"] == sum(len(f) for f in frames)
    from sluice.commands.stats import format_stats
    text = format_stats(st)
    assert "COPIES default -> u  packets=1000" in text and "DOMAIN blue" in text, text
    pool_whole(sluice)
    assert sluice.stop() == 0
    assert "mbufs not back in the pool" not in sluice.log()
    check_out(workdir, frames)


def test_hoarding_exhausts_only_its_domain(sluice, workdir):  # noqa: F811
    """An NF that keeps every buffer it gets (hostile --mode hold) in domain `greedy` (1024 buffers, a
    ring of 2048): it empties its own pool (up to the domain's bound), the packets for it then drop at
    the boundary, and the default domain's pool and chain are untouched."""
    need_hostile()
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp, ["ia", "ib"], [nf_entry("ia"), nf_entry("ib"), nf_entry("evil", "greedy")],
                        [{"name": "greedy", "pool_mbufs": 1024}]))
    sluice.start_nf("fwd", "ia")
    sluice.start_nf("fwd", "ib")
    evil = start_hostile(sluice, "hold")
    sluice.ok("port_chain_set", port="srcH", chain="H")

    def exhausted():
        # packets for it are refused at the boundary: its pool is empty (no_buffer), or its NFs hold
        # their domain's bound (drops.quota, when sluiced keeps one)
        st = alive_stats(sluice)
        refused = st["drops"]["no_buffer"] + st["drops"].get("quota", 0)
        return counter(sluice, "evil", "held", st) > 800 and refused > 1000 and st
    st = wait_until(exhausted, 20, "the greedy domain's pool empty")
    greedy = next(d for d in st["domains"] if d["name"] == "greedy")
    assert greedy["free"] < 300, greedy  # at most the pool's per-lcore caches left
    default = next(d for d in st["domains"] if d["name"] == "default")
    assert default["free"] > default["mbufs"] - 2 * 1024, default
    st = run_innocent(sluice, frames)  # while it still hoards
    assert counter(sluice, "evil", "held", st) > 0
    for name in ("ia", "ib"):
        nf = sluice.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N, nf
    sluice.ok("port_chain_set", port="srcH", chain=None)
    evil.send_signal(signal.SIGTERM)
    assert evil.wait(10) == 0, sluice.nf_log("evil")
    sluice.wait_gone("evil")
    pool_whole(sluice)
    assert sluice.stop() == 0
    check_out(workdir, frames)
