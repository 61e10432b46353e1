"""A hostile NF next to an innocent chain (issue 15): sluiced survives, counts what the NF did with
its reason, and the innocent chain's traffic is exact.

  in.pcap -> "inI" (net_pcap rx) -> chain I = [ia, ib] (fwd) -> "outI" (net_pcap tx)
  "srcH" (net_null, endless) -> chain H = [evil] (tests/hostile/hostile_nf.c) -> "sinkH" (net_null)

The hostile NF attaches with the SDK, forwards 1000 packets, then misbehaves through the raw ring
memory (its --mode; see hostile_nf.c). Each mode is a hole this test found open before the fix:

- dup-return: ownership began when a packet was *staged* for an NF, so a duplicate return of a
  buffer staged for it again was accepted; the buffer went out twice (double free), `lent` fell
  below zero (to ~2^32) and the innocent chain lost packets.
- ring-mask / own-index: sluiced used the ring's size, mask and even its own indices from
  NF-writable memory: a mask of 0xffffffff made it write outside the ring (SIGSEGV); a rewound
  consumer index made it take the same descriptors again.
- index-back / index-past / rx-past: an NF index that moves backwards or past the ring was taken
  as it came; now it is a protocol violation: DISCONNECT with SL_ERR_RING, buffers reclaimed,
  counted in stats.violations.ring.
- truncate: the region and ring memfds were not sealed; an NF that shrank one killed sluiced with
  SIGBUS. Now they are sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL).

Every case also checks that no NF's `lent` ever exceeds its ring, and that the pool is whole once
the hostile NF is gone.
"""

import os
import signal
import subprocess

import pytest

from harness import base_config, BUILD, read_pcap, SL_ERR, sluice, wait_until, workdir, write_pcap  # noqa: F401

scapy = pytest.importorskip("scapy.all")
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

HOSTILE = BUILD / "tests" / "hostile" / "sluice-hostile-nf"
N = 1000
RING = 2048  # the innocent chain's 1000 packets stay under backpressure's 3/4 mark: no drops by design
SL_ERR_RING = SL_ERR["RING"]


def make_frames(n=N):
    return [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.15.0.1", dst="10.15.0.2", id=i)
                  / UDP(sport=1000 + i % 3000, dport=9) / Raw(f"innocent-{i:06d}".encode() * (1 + i % 40)))
            for i in range(n)]


def config(wd, inp):
    return base_config(
        ports=[{"name": "inI", "vdev": f"net_pcap0,rx_pcap={inp}"},
               {"name": "outI", "vdev": f"net_pcap1,tx_pcap={wd / 'out.pcap'}"},
               {"name": "srcH", "vdev": "net_null0,size=64,copy=0"},
               {"name": "sinkH", "vdev": "net_null1"}],
        chains=[{"name": "I", "nfs": ["ia", "ib"], "exit": "outI"},
                {"name": "H", "nfs": ["evil"], "exit": "sinkH"}],
        nfs=["ia", "ib", "evil"], ring_size=RING)


def start_hostile(s, mode, name="evil"):
    log = open(s.dir / f"nf-{name}.log", "ab")
    p = subprocess.Popen([str(HOSTILE), "--socket", str(s.nf_sock), "--name", name, "--mode", mode],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    s.nfs[name] = p  # the fixture kills it
    s.wait_attached(name)
    return p


class Watch:
    """Stats reads that fail clearly when sluiced died, and check every sample: no NF's `lent` above
    its ring (an underflow shows as ~2^32), the pool's `lent` never above the pool."""

    def __init__(self, s):
        self.sluice = s
        self.samples = 0

    def stats(self):
        s = self.sluice
        if not s.alive():
            rc = s.proc.returncode
            why = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
            raise AssertionError(f"sluiced died ({why}):\n{s.log()[-3000:]}")
        st = s.stats()
        self.samples += 1
        for nf in st["nfs"]:
            assert 0 <= nf["lent"] <= RING, f"NF {nf['name']} lent {nf['lent']}: underflow or overrun ({nf})"
        assert 0 <= st["pool"]["lent"] <= st["pool"]["mbufs"], st["pool"]
        return st

    def nf(self, name, st=None):
        st = st or self.stats()
        return next((n for n in st["nfs"] if n["name"] == name), None)

    def counter(self, name, key, st=None):
        nf = self.nf(name, st)
        return nf["counters"].get(key, 0) if nf else None


def hostile_gone(w, p):
    st = w.stats()
    return w.nf("evil", st) is None and p.poll() is not None and st


@pytest.mark.parametrize("mode", ["dup-return", "ring-mask", "own-index", "index-back", "index-past", "rx-past",
                                  "truncate"])
def test_hostile_nf_next_to_an_innocent_chain(sluice, workdir, mode):  # noqa: F811
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(config(workdir, inp))
    w = Watch(sluice)
    sluice.start_nf("fwd", "ia")
    sluice.start_nf("fwd", "ib")
    evil = start_hostile(sluice, mode)

    # the hostile chain under traffic until the NF has done its deed
    sluice.ok("port_chain_set", port="srcH", chain="H")
    index_mode = mode in ("index-back", "index-past", "rx-past")
    if index_mode:
        wait_until(lambda: hostile_gone(w, evil), 20, f"the {mode} NF disconnected by sluiced")
    elif mode == "truncate":
        wait_until(lambda: (w.counter("evil", "trunc_refused") or 0) + (w.counter("evil", "trunc_done") or 0) >= 4,
                   20, "the truncation attempts")
    else:
        key = "dup" if mode == "dup-return" else "tamper"
        wait_until(lambda: (w.counter("evil", key) or 0) > 0, 20, f"the NF's first {key}")
        wait_until(lambda: (w.counter("evil", "rx") or 0) > 20000, 20, "the NF to keep busy after its deed")

    # now the innocent chain's packets, next to it
    sluice.ok("port_chain_set", port="inI", chain="I")
    st = wait_until(lambda: (lambda s: s if sluice.port("outI", s)["tx_pkts"] >= N else None)(w.stats()), 30,
                    f"{N} innocent packets out")
    if not index_mode:  # still misbehaving after all that
        before = w.counter("evil", "rx")
        wait_until(lambda: w.counter("evil", "rx") > before + 10000, 20, "the hostile NF to keep going")
    # its traffic stops: the counters settle (the rejections by reason add up to invalid_desc, all of
    # them the hostile NF's while it is attached)
    sluice.ok("port_chain_set", port="srcH", chain=None)

    def settled():
        st = w.stats()
        bad = w.nf("evil", st)
        total = st["drops"]["invalid_desc"]
        return (sum(st["violations"]["invalid_desc"].values()) == total
                and (bad is None or bad["drops"]["invalid_desc"] == total) and st)
    st = wait_until(settled, 10, "the counters to settle")
    assert sluice.alive()

    # the innocent chain: exact
    assert sluice.port("inI", st)["rx_pkts"] == N
    assert sluice.port("outI", st)["tx_pkts"] == N
    for name in ("ia", "ib"):
        nf = w.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N, nf
        assert nf["drops"] == {"ring_full": 0, "invalid_desc": 0}, nf

    # what the hostile NF did, counted with its reason
    v = st["violations"]
    bad = w.nf("evil", st)
    if mode == "dup-return":
        assert v["invalid_desc"]["not_lent"] > 0, v
        assert bad["drops"]["invalid_desc"] == v["invalid_desc"]["not_lent"], (bad, v)
        assert all(n == 0 for n in v["ring"].values()), v
    elif mode in ("ring-mask", "own-index"):
        # sluiced never read the header or its own indices back: nothing to reject, the NF still works
        assert bad is not None and bad["counters"]["tamper"] > 0, bad
        assert st["drops"]["invalid_desc"] == 0, v
        assert all(n == 0 for n in v["ring"].values()), v
    elif index_mode:
        kind = {"index-back": "tx_prod_back", "index-past": "tx_prod_past", "rx-past": "rx_cons_past"}[mode]
        assert v["ring"] == {k: int(k == kind) for k in v["ring"]}, v
        assert evil.returncode == 3, sluice.nf_log("evil")
        assert f"disconnected: code {SL_ERR_RING} " in sluice.nf_log("evil"), sluice.nf_log("evil")
        assert "broke the ring protocol" in sluice.log()
        assert st["drops"]["nf_detached"] > 0  # it held buffers: reclaimed
    elif mode == "truncate":
        c = bad["counters"]
        assert c["trunc_done"] == 0 and c["trunc_refused"] == 4, (c, sluice.nf_log("evil"))
        assert c["seal_done"] == 0 and c["seal_refused"] == 1, (c, sluice.nf_log("evil"))
        # the region is still whole and writable for an NF attaching now
        sluice.start_nf("fwd", "late")
        assert sluice.stop_nf("late") == 0
        sluice.wait_gone("late")

    # the hostile NF goes; every buffer comes back
    if evil.poll() is None:
        evil.send_signal(signal.SIGTERM)
        assert evil.wait(10) == 0, sluice.nf_log("evil")
    wait_until(lambda: hostile_gone(w, evil), 10, "the hostile NF gone")

    def whole():
        pool = w.stats()["pool"]
        return pool["free"] == pool["mbufs"] and pool["lent"] == 0 and pool
    try:
        wait_until(whole, 10, "every mbuf back in the pool")
    except AssertionError:
        st = w.stats()
        raise AssertionError(f"pool not whole: {st['pool']}, nfs {[(n['name'], n['lent']) for n in st['nfs']]}")
    assert w.samples >= 4  # every wait above read the stats (and checked them) at least once

    assert sluice.stop() == 0, sluice.log()[-3000:]
    assert "mbufs not back in the pool" not in sluice.log()
    got = read_pcap(workdir / "out.pcap")
    assert len(got) == N
    for i, (a, b) in enumerate(zip(frames, got)):
        assert a == b, f"innocent packet {i} differs"


# ---------------------------------------------------------------- issue 15, parts 4 and 6

def auth_config(wd, inp, evil=None, **sluiced):
    """config() with the hostile service's entry replaced (may_send, quota, policy...)."""
    cfg = config(wd, inp)
    cfg["sluiced"].update(sluiced)
    cfg["nfs"] = [{"name": "ia"}, {"name": "ib"}, dict({"name": "evil"}, **(evil or {}))]
    return cfg


def start_hostile_args(s, mode, name="evil", args=(), env=None, wait=True):
    log = open(s.dir / f"nf-{name}.log", "ab")
    p = subprocess.Popen([str(HOSTILE), "--socket", str(s.nf_sock), "--name", name, "--mode", mode, *map(str, args)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         env=env)
    log.close()
    s.nfs[name] = p
    if wait:
        s.wait_attached(name)
    return p


def innocent_exact(sluice, w, workdir, frames):
    """The innocent chain's N packets, next to whatever the hostile NF does: every one out, in order."""
    sluice.ok("port_chain_set", port="inI", chain="I")
    wait_until(lambda: (lambda s: s if sluice.port("outI", s)["tx_pkts"] >= N else None)(w.stats()), 30,
               f"{N} innocent packets out")


def check_innocent(sluice, w, st):
    assert sluice.port("inI", st)["rx_pkts"] == N
    assert sluice.port("outI", st)["tx_pkts"] == N
    for name in ("ia", "ib"):
        nf = w.nf(name, st)
        assert nf["rx_pkts"] == N and nf["tx_pkts"] == N, nf
        assert nf["drops"] == {"ring_full": 0, "invalid_desc": 0}, nf


def finish(sluice, w, evil, workdir, frames):
    """The hostile NF goes: every buffer back, each exactly once (the audit); the innocent bytes exact."""
    if evil.poll() is None:
        evil.send_signal(signal.SIGTERM)
        assert evil.wait(10) == 0, sluice.nf_log("evil")
    wait_until(lambda: hostile_gone(w, evil), 10, "the hostile NF gone")
    audit = sluice.wait_pool_whole()
    assert audit["duplicates"] == [] and audit["missing"] == [], audit
    assert sluice.stop() == 0, sluice.log()[-3000:]
    assert "mbufs not back in the pool" not in sluice.log()
    got = read_pcap(workdir / "out.pcap")
    assert got == frames


def settle(sluice, w):
    sluice.ok("port_chain_set", port="srcH", chain=None)

    def settled():
        st = w.stats()
        total = st["drops"]["invalid_desc"]
        return sum(st["violations"]["invalid_desc"].values()) == total and st
    return wait_until(settled, 10, "the counters to settle")


QUOTA = 512


@pytest.mark.parametrize("mode", ["forge", "rewrite", "hold", "bell-spam", "forbidden-dest"])
def test_hostile_nf_authorisation_and_quotas(sluice, workdir, mode):  # noqa: F811
    """Forged descriptors of every kind, rewrites after return, holding everything, doorbell spam and
    destinations it may not name: sluiced lives, counts each, the innocent chain is exact, the pool
    whole afterwards."""
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    # evil may send along its own chain only (its exit sinkH, its ingress srcH), and hold QUOTA buffers
    cfg = auth_config(workdir, inp, {"may_send": {"services": [], "ports": []}, "quota": QUOTA})
    sluice.start(cfg)
    w = Watch(sluice)
    wake = "block" if mode == "bell-spam" else "poll"  # parked NFs: the doorbell epoll is live
    sluice.start_nf("fwd", "ia", wakeup=wake)
    sluice.start_nf("fwd", "ib", wakeup=wake)
    ia = sluice.service("ia")["id"]
    args = ["--to-service", ia, "--to-port", "outI"] if mode == "forbidden-dest" else []
    evil = start_hostile_args(sluice, mode, args=args)
    sluice.ok("port_chain_set", port="srcH", chain="H")
    key = {"forge": "forged", "rewrite": "rewrites", "hold": "held", "bell-spam": "bells",
           "forbidden-dest": "forbidden"}[mode]
    enough = QUOTA if mode == "hold" else 100000 if mode == "bell-spam" else 5000
    wait_until(lambda: (w.counter("evil", key) or 0) >= enough, 30, f"the NF's {key} >= {enough}")
    st0 = w.stats()
    innocent_exact(sluice, w, workdir, frames)
    # still at it, and sluiced's worker still receiving (not starved by it)
    rx0 = sluice.port("srcH")["rx_pkts"]
    more = w.counter("evil", key)
    wait_until(lambda: sluice.port("srcH")["rx_pkts"] > rx0 + 100000, 20, "the worker to keep receiving")
    if mode != "hold":
        wait_until(lambda: w.counter("evil", key) > more, 20, "the hostile NF to keep going")
    st = settle(sluice, w)
    check_innocent(sluice, w, st)
    v = st["violations"]
    bad = w.nf("evil", st)
    assert bad is not None, "the hostile NF was disconnected"
    assert bad["lent"] <= QUOTA, bad
    if mode == "forge":
        for k in ("region", "buf", "not_lent", "range", "action", "dest"):
            assert v["invalid_desc"][k] > 0, (k, v)
        assert bad["drops"]["invalid_desc"] == st["drops"]["invalid_desc"], (bad, v)
    elif mode == "rewrite":
        assert bad["counters"]["rewrites"] > 0
    elif mode == "hold":
        assert bad["lent"] == QUOTA and 1000 <= bad["tx_pkts"] < 1100, bad  # ~1000 forwarded, then nothing
        assert v["quota"]["nf"] > 0 and st["drops"]["quota"] >= v["quota"]["nf"], v
    elif mode == "bell-spam":
        bells, ep = bad["counters"]["bells"], st["doorbell_epoll"]
        # each epoll_wait(0) returns each ringing NF at most once, however often it rang: the worker's
        # cost follows its 20 us tick, not the spam
        assert ep["events"] <= ep["polls"], ep
        assert ep["polls"] < bells / 4, (ep, bells)
        assert st["active_set"]["doorbells"] <= ep["events"], st["active_set"]
    elif mode == "forbidden-dest":
        assert v["invalid_desc"]["forbidden_dest"] >= bad["counters"]["forbidden"] - 2 * 2048 > 0, v
        assert v["invalid_desc"]["forbidden_dest"] == st["drops"]["invalid_desc"], v
    assert st["violations"]["quota"]["domain"] == 0, v
    assert st0["pool"]["free"] >= 2048  # the RX reserve was never touched
    finish(sluice, w, evil, workdir, frames)


def test_hostile_replicas_hold_their_domain_bound(sluice, workdir):  # noqa: F811
    """Eight replicas that keep every buffer: together they stop at the domain's bound (the pool less
    its RX reserve), packets to them drop as quota, and the ports keep receiving."""
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")
    inp = workdir / "in.pcap"
    write_pcap(inp, make_frames(10))
    cfg = auth_config(workdir, inp, {"policy": "round_robin"})
    sluice.start(cfg)
    w = Watch(sluice)
    names = [f"evil.{i}" for i in range(8)]
    procs = [start_hostile_args(sluice, "hold", name=n, args=["--service", "evil", "--after", "0"]) for n in names]
    sluice.ok("port_chain_set", port="srcH", chain="H")
    pool = 16384
    reserve = max(pool // 8, 2 * 32 * 4)
    wait_until(lambda: w.stats()["violations"]["quota"]["domain"] > 1000, 30, "the domain bound reached")
    rx0 = sluice.port("srcH")["rx_pkts"]
    wait_until(lambda: sluice.port("srcH")["rx_pkts"] > rx0 + 100000, 20, "the ports to keep receiving")
    sluice.ok("port_chain_set", port="srcH", chain=None)
    st = w.stats()
    held = sum(n["lent"] for n in st["nfs"] if n["service"] == "evil")
    assert held == pool - reserve, (held, st["pool"])
    assert st["pool"]["free"] >= reserve - 64, st["pool"]
    assert st["drops"]["quota"] == st["violations"]["quota"]["domain"] + st["violations"]["quota"]["nf"]
    for p in procs:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    sluice.wait_gone(*names)
    sluice.wait_pool_whole()


def test_join_as_another_service_is_refused(sluice, workdir):  # noqa: F811
    """With `sluiced.attach: token` an NF joins only a service of the config, with that service's token:
    `fwd.evil` cannot join `fwd` without it (nor with a wrong one, nor a service not configured)."""
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")
    tok = "0123456789abcdef0123456789abcdef"
    cfg = base_config(ports=[{"name": "a", "vdev": "net_null0"}], chains=[{"name": "c", "nfs": ["fwd"], "exit": "a"}],
                      attach="token")
    cfg["nfs"] = [{"name": "fwd", "token": tok}]
    sluice.start(cfg)
    env = dict(os.environ, SLUICE_NF_TOKEN=tok)
    start_hostile_args(sluice, "none", name="fwd.0", args=["--service", "fwd"], env=env)
    cases = [("fwd.evil", ["--service", "fwd"], "bad_token"),
             ("fwd.evil2", ["--service", "fwd", "--token", "f" * 32], "bad_token"),
             ("other.0", ["--service", "other", "--token", tok], "unknown_service")]
    for name, args, _ in cases:
        p = start_hostile_args(sluice, "none", name=name, args=args, wait=False, env={})
        assert p.wait(10) == 1, sluice.nf_log(name)
        assert "attach:" in sluice.nf_log(name), sluice.nf_log(name)
    st = sluice.stats()
    assert st["violations"]["attach"] == {"bad_token": 2, "unknown_service": 1}, st["violations"]
    assert [n["name"] for n in st["nfs"]] == ["fwd.0"]
    assert sluice.service("fwd", st)["instances"] == ["fwd.0"]
    log = sluice.log()
    assert "wrong attach token for service 'fwd'" in log and "service 'other' is not in sluiced's config" in log


def test_pool_audit_catches_a_double_free(sluice, workdir):  # noqa: F811
    """The audit counts distinct buffers: a buffer freed twice (what hole 1's duplicate returns did)
    shows as a duplicate, where free-count checks saw a full pool."""
    sluice.start(base_config(ports=[{"name": "a", "vdev": "net_null0"}]), test_hooks=True)
    a = sluice.wait_pool_whole()
    assert a["free"] == a["mbufs"] == 16384 and a["duplicates"] == []
    buf = sluice.ok("test_hook", what="double_free")["buf"]
    a = sluice.pool_audit()
    assert not a["whole"], a
    assert a["duplicates"] == [{"buf": buf, "places": 2, "in": ["free"]}], a
    # the audit put the buffer back once: whole again
    sluice.wait_pool_whole()


def test_test_hooks_need_the_flag(sluice, workdir):  # noqa: F811
    sluice.start(base_config(ports=[{"name": "a", "vdev": "net_null0"}]))
    r = sluice.request("test_hook", what="double_free")
    assert r["ok"] is False and "--test-hooks" in r["error"], r
    sluice.wait_pool_whole()


RANDOM_COUNT = 2_000_000


def test_hostile_random_descriptors(sluice, workdir):  # noqa: F811
    """Millions of random descriptors (every field, its own buffers under random actions among them):
    sluiced lives, every one is accounted for, the innocent chain is exact, the pool whole."""
    if not HOSTILE.exists():
        pytest.skip(f"not built: {HOSTILE}")
    frames = make_frames()
    inp = workdir / "in.pcap"
    write_pcap(inp, frames)
    sluice.start(auth_config(workdir, inp, {"may_send": {"services": [], "ports": []}}))
    w = Watch(sluice)
    sluice.start_nf("fwd", "ia")
    sluice.start_nf("fwd", "ib")
    evil = start_hostile_args(sluice, "random", args=["--seed", "15", "--count", RANDOM_COUNT])
    sluice.ok("port_chain_set", port="srcH", chain="H")
    wait_until(lambda: (w.counter("evil", "random") or 0) > RANDOM_COUNT // 4, 60, "random descriptors")
    innocent_exact(sluice, w, workdir, frames)
    wait_until(lambda: (w.counter("evil", "random") or 0) >= RANDOM_COUNT, 60, f"{RANDOM_COUNT} random descriptors")
    st = settle(sluice, w)
    check_innocent(sluice, w, st)
    v = st["violations"]["invalid_desc"]
    assert sum(v.values()) > RANDOM_COUNT // 2, v
    for k in ("region", "buf", "not_lent"):
        assert v[k] > 0, v
    finish(sluice, w, evil, workdir, frames)


def test_stats_shows_violations():
    """`sluice stats`: one VIOLATIONS line with the non-zero entries, none when all are zero."""
    from sluice.commands.stats import violations_line
    zero = {"invalid_desc": {"not_lent": 0, "forbidden_dest": 0}, "ring": {"tx_prod_back": 0},
            "attach": {"bad_token": 0, "unknown_service": 0}, "quota": {"nf": 0, "domain": 0}}
    assert violations_line(zero) == ""
    some = dict(zero, invalid_desc={"not_lent": 3, "forbidden_dest": 7}, attach={"bad_token": 1})
    assert violations_line(some) == "VIOLATIONS  invalid_desc.not_lent=3  invalid_desc.forbidden_dest=7  attach.bad_token=1"
