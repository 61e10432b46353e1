"""Differential test of sluiced's classifier (pktkey.c + rte_acl in steer.c) against the plain Python
linear-scan reference in steer_ref.py, written from docs/steering.md.

Thousands of random rules (values drawn from the packets, so packets hit them) and thousands of random
scapy frames (VLAN/QinQ, IPv4/IPv6, extension headers, fragments, ARP, malformed ones) go through
`rules_set` + `classify`; every frame's (malformed, winning rule, action) must agree. Coverage
counters make sure the comparison is not vacuous. SLUICE_DIFF_SEED=N replays (or explores) a seed.
"""

import ipaddress
import json
import os
import random
import time
from collections import Counter

import pytest

import steer_ref as ref
from harness import Ctl, base_config, sluice, workdir  # noqa: F401

pytest.importorskip("scapy.all")
from scapy.all import (ARP, ICMP, IP, TCP, UDP, Dot1AD, Dot1Q, Ether, ICMPv6EchoRequest,  # noqa: E402
                       IPOption_NOP, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
                       IPv6ExtHdrRouting, PadN, Raw)
from scapy.layers.ipsec import AH  # noqa: E402

SEED = int(os.environ.get("SLUICE_DIFF_SEED", "20240611"))

# p0 and p2 have ingress chains (no match -> that chain), p1 and p3 none (no match -> null / no_path)
PORTS = {"p0": "c0", "p1": None, "p2": "c1", "p3": None}
MALFORMED_ACTION = {"port": "p3"}
ACTIONS = ["drop", {"chain": "c0"}, {"chain": "c1"}, {"service": "a"}, {"service": "sx"},
           {"port": "p0"}, {"port": "p1"}, {"port": "p2"}, {"port": "p3"}]

MACS = ["02:00:00:00:00:01", "02:00:00:00:00:02", "0a:1b:2c:3d:4e:5f", "ff:ff:ff:ff:ff:ff", "33:33:00:00:00:01"]
VLANS = [0, 1, 100, 2047, 4095]
V4 = ["10.0.0.1", "10.0.0.2", "10.1.2.3", "10.255.0.9", "192.168.1.1", "192.168.1.200", "172.16.5.4",
      "0.0.0.0", "255.255.255.255"]
V6 = ["2001:db8::1", "2001:db8::2", "2001:db8:1::80", "fd00::1", "fd00:0:0:1::1", "::ffff:10.0.0.1",
      "fe80::1", "::"]
L4PORTS = [0, 1, 53, 80, 443, 1023, 1024, 8080, 65535]
DSCPS = [0, 10, 46, 63]
OTHER_PROTOS = [0, 2, 47, 50, 51, 59, 132, 255]  # IPv4 51 is just a protocol; IPv6 0/51 would be walked
ETHERTYPES = [0x0800, 0x86DD, 0x0806, 0x8100, 0x88A8, 0x88CC]
PRIORITIES = [0, 0, 1, 2, 3, 5, 10, 100, 1000, 65535]


def cfg():
    c = base_config(ports=[{"name": p, "vdev": f"net_null{i}", **({"chain": ch} if ch else {})}
                           for i, (p, ch) in enumerate(PORTS.items())],
                    chains=[{"name": "c0", "nfs": ["a"], "exit": "p1"}, {"name": "c1", "nfs": ["b"], "exit": "p3"}],
                    nfs=["a", "b"])
    c["steering"] = {"malformed": MALFORMED_ACTION, "flows": 0}
    return c


# ---------------------------------------------------------------- packets

def _eth(rnd):
    return Ether(src=rnd.choice(MACS), dst=rnd.choice(MACS))


def _tags(rnd):
    """A VLAN tag stack: none, 802.1Q, QinQ (802.1ad + 802.1Q or Q + Q), a lone 802.1ad, or three tags."""
    kind = rnd.choices(["none", "q", "qinq", "qq", "ad", "triple"], [55, 20, 10, 5, 5, 5])[0]
    mk = {"q": [Dot1Q], "qinq": [Dot1AD, Dot1Q], "qq": [Dot1Q, Dot1Q], "ad": [Dot1AD],
          "triple": [Dot1AD, Dot1Q, Dot1Q]}.get(kind, [])
    return kind, [t(prio=rnd.randrange(8), dei=rnd.randrange(2), vlan=rnd.choice(VLANS)) for t in mk]


def _l4(rnd, v6):
    """(scapy L4 layer or Raw, protocol number)."""
    kind = rnd.choices(["tcp", "udp", "icmp", "other"], [40, 30, 15, 15])[0]
    if kind == "tcp":
        return TCP(sport=rnd.choice(L4PORTS), dport=rnd.choice(L4PORTS), flags=rnd.randrange(256),
                   dataofs=rnd.choice([5, 5, 5, 0, 15])), 6
    if kind == "udp":
        return UDP(sport=rnd.choice(L4PORTS), dport=rnd.choice(L4PORTS)), 17
    if kind == "icmp":
        return (ICMPv6EchoRequest(), 58) if v6 else (ICMP(), 1)
    p = rnd.choice([x for x in OTHER_PROTOS if not (v6 and x in (0, 51))])
    return Raw(bytes(rnd.randrange(256) for _ in range(rnd.randrange(24)))), p


def _ext(rnd, kind, nh):
    if kind == "hop":
        return IPv6ExtHdrHopByHop(nh=nh, options=[PadN(optdata=b"\0" * rnd.choice([4, 12]))])
    if kind == "rt":
        return IPv6ExtHdrRouting(nh=nh, addresses=[rnd.choice(V6) for _ in range(rnd.randrange(3))])
    if kind == "dst":
        return IPv6ExtHdrDestOpt(nh=nh)
    if kind == "ah":
        icv = rnd.choice([4, 12, 20])
        return AH(nh=nh, payloadlen=icv // 4 + 1, spi=rnd.randrange(1, 1 << 32), icv=b"\0" * icv)
    if kind == "frag1":
        return IPv6ExtHdrFragment(nh=nh, offset=0, m=1, id=rnd.randrange(1 << 32))
    return IPv6ExtHdrFragment(nh=nh, offset=rnd.randrange(1, 8192), m=rnd.randrange(2), id=rnd.randrange(1 << 32))


EXT_NH = {"hop": 0, "rt": 43, "dst": 60, "ah": 51, "frag1": 44, "fragn": 44}


def gen_packet(rnd):
    """(frame bytes, set of tags describing it). The tags drive coverage counts, not expectations."""
    tagkind, tags = _tags(rnd)
    info = {tagkind}
    kind = rnd.choices(["v4", "v6", "arp", "l2"], [45, 40, 8, 7])[0]
    pay = Raw(bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 0, 1, 8, 30]))))
    if kind == "arp":
        l3 = ARP(psrc=rnd.choice(V4), pdst=rnd.choice(V4))
    elif kind == "l2":
        l3 = Raw(bytes(rnd.randrange(256) for _ in range(rnd.randrange(50))))
        l2type = rnd.choice([0x88CC, 0x0806, 0x1234])
    elif kind == "v4":
        l4, proto = _l4(rnd, False)
        frag = rnd.choices(["none", "first", "nonfirst"], [80, 8, 12])[0]
        info |= {"v4", "v4frag_" + frag}
        # "evil" is the reserved bit: neither it nor DF makes a fragment; a non-first one may have MF or not
        flags = "MF" if frag == "first" else rnd.choice([0, "DF", "evil"] + (["MF"] if frag == "nonfirst" else []))
        l3 = IP(src=rnd.choice(V4), dst=rnd.choice(V4), tos=rnd.choice(DSCPS) << 2 | rnd.randrange(4), proto=proto,
                flags=flags,
                frag=rnd.randrange(1, 8192) if frag == "nonfirst" else 0,
                options=[IPOption_NOP()] * rnd.choice([0, 0, 0, 4, 8, 40]))
        l3 = l3 / l4 / pay
    else:
        l4, proto = _l4(rnd, True)
        n = rnd.choices([0, 1, 2, 3, 8, 9], [45, 25, 12, 8, 5, 5])[0]
        exts = [rnd.choice(["hop", "rt", "dst", "ah", "frag1", "fragn"]) if n < 8 else "dst" for _ in range(n)]
        if n >= 8 and rnd.random() < 0.5:
            exts[-1] = "fragn"
        info |= {"v6", f"v6ext{min(n, 4)}"} | ({"v6ext"} if n else set()) | ({"v6fragn"} if "fragn" in exts else set())
        nhs = [EXT_NH[e] for e in exts] + [proto]
        l3 = IPv6(src=rnd.choice(V6), dst=rnd.choice(V6), tc=rnd.choice(DSCPS) << 2 | rnd.randrange(4),
                  fl=rnd.randrange(1 << 20), nh=nhs[0])
        for i, e in enumerate(exts):
            l3 = l3 / _ext(rnd, e, nhs[i + 1])
        l3 = l3 / l4 / pay
    p = _eth(rnd)
    if kind == "l2":
        (tags[-1] if tags else p).type = l2type
    for t in tags:
        p = p / t
    frame = bytes(p / l3)
    if rnd.random() < 0.1:  # Ethernet padding after the datagram is fine
        frame += bytes(rnd.randrange(1, 20))
        info.add("padded")
    return frame, info


def l3_offset(frame):
    off = 12
    for _ in range(3):
        if frame[off:off + 2] in (b"\x81\x00", b"\x88\xa8"):
            off += 4
    return off + 2


def mutate(rnd, frame):
    """A damaged copy of a frame (usually malformed, not always: the reference decides)."""
    b = bytearray(frame)
    l3 = l3_offset(b)
    v = b[l3] >> 4 if len(b) > l3 else None
    et = b[l3 - 2:l3]
    choices = ["trunc", "trunc"]
    if et == b"\x08\x00" and v == 4:
        choices += ["ihl_small", "ihl_big", "tot_small", "tot_big", "version", "l4cut"]
    elif et == b"\x86\xdd" and v == 6:
        choices += ["plen_big", "version", "l4cut", "extlen"]
    m = rnd.choice(choices)
    if m == "trunc":
        b = b[:rnd.randrange(max(1, len(b)))]
    elif m == "ihl_small":
        b[l3] = 0x40 | rnd.randrange(5)
    elif m == "ihl_big":
        b[l3] = 0x40 | rnd.randrange(min((b[l3] & 15) + 1, 15), 16)
    elif m == "tot_small":
        b[l3 + 2:l3 + 4] = rnd.randrange(max(1, (b[l3] & 15) * 4)).to_bytes(2, "big")
    elif m == "tot_big":
        b[l3 + 2:l3 + 4] = rnd.randrange(len(b) - l3 + 1, 65536).to_bytes(2, "big")
    elif m == "version":
        b[l3] = rnd.choice([x for x in range(16) if x != v]) << 4 | (b[l3] & 15)
    elif m == "plen_big":
        b[l3 + 4:l3 + 6] = rnd.randrange(len(b) - l3 - 40 + 1, 65536).to_bytes(2, "big")
    elif m == "extlen":  # the first header's length byte (an extension header's, if any)
        b[l3 + 40 + 1:l3 + 40 + 2] = bytes([rnd.randrange(256)])
    elif m == "l4cut":  # shrink the datagram so the L4 header is cut inside it, the rest stays as padding
        k = ref.parse_key(bytes(b), "p0")
        l4len = 14 if k and k.get("proto") == 6 else 8
        if v == 4:
            ihl = (b[l3] & 15) * 4
            b[l3 + 2:l3 + 4] = (ihl + rnd.randrange(l4len)).to_bytes(2, "big")
        else:
            plen = int.from_bytes(b[l3 + 4:l3 + 6], "big")
            b[l3 + 4:l3 + 6] = max(0, plen - rnd.randrange(1, 40)).to_bytes(2, "big")
    return bytes(b), {"mutated", "mut_" + m}


# ---------------------------------------------------------------- rules

def _prefix(rnd, version, addr):
    bits = 32 if version == 4 else 128
    plen = rnd.choice([0, 8, 16, 24, 30, 32] if version == 4 else [0, 16, 32, 48, 64, 96, 120, 128]
                      + [rnd.randrange(bits + 1)])
    mask = ((1 << plen) - 1) << (bits - plen)
    if plen and rnd.random() < 0.15:  # a near miss: one bit inside the prefix flipped
        addr ^= 1 << (bits - 1 - rnd.randrange(plen))
    net = addr & mask
    a = ipaddress.IPv4Address(net) if version == 4 else ipaddress.IPv6Address(net)
    return f"{a}/{plen}"


def field_value(rnd, f, key):
    """A match value for field f that the key satisfies (mostly) -- or a near miss."""
    miss = rnd.random() < 0.15
    x = key[f]
    if f == "in_port":
        return rnd.choice(list(PORTS)) if miss else x
    if f in ("src_mac", "dst_mac"):
        m = rnd.choice(MACS) if miss else x
        return m.upper() if rnd.random() < 0.2 else m
    if f == "vlan":
        return rnd.choice(VLANS) if miss else x
    if f == "ethertype":
        return rnd.choice(ETHERTYPES) if miss else x
    if f in ("src", "dst"):
        return _prefix(rnd, key["ip"], x)
    if f == "proto":
        return rnd.choice([1, 6, 17, 58] + OTHER_PROTOS) if miss else x
    if f == "dscp":
        return rnd.choice(DSCPS) if miss else x
    if f in ("src_port", "dst_port"):
        lo = max(0, x - rnd.choice([0, 0, 1, 10, 1000, 65535]))
        hi = min(65535, x + rnd.choice([0, 0, 1, 10, 1000, 65535]))
        if miss:
            lo, hi = (hi + 1, min(65535, hi + 100)) if hi < 65535 else (max(0, lo - 100), lo - 1)
            if lo > hi or lo < 0:
                lo, hi = 0, 65535
        return [lo, hi]
    if f == "tcp_flags":
        s = x & rnd.randrange(256)
        c = ~x & 0xFF & rnd.randrange(256)
        if miss:
            s |= ~x & 0xFF & (1 << rnd.randrange(8))
            c &= ~s
        out = {}
        if s or rnd.random() < 0.5:
            out["set"] = s
        if c or not out:
            out["clear"] = c
        return out
    raise AssertionError(f)


def gen_rules(rnd, keys, n, sizes=(1, 25, 35, 22, 12, 5)):
    """n rules, each built from a random (non-malformed) packet key: a few of its fields (how many:
    weights `sizes` for 0, 1, 2, ... fields), sometimes a field borrowed from another packet
    (possibly one this packet lacks)."""
    rules = []
    while len(rules) < n:
        key = rnd.choice(keys)
        fields = [f for f in ref.MATCH_FIELDS if f in key]
        k = rnd.choices(range(len(sizes)), sizes)[0]
        chosen = rnd.sample(fields, min(k, len(fields)))
        match = {f: field_value(rnd, f, key) for f in chosen}
        if rnd.random() < 0.15:
            other = rnd.choice(keys)
            f = rnd.choice([f for f in ref.MATCH_FIELDS if f in other])
            match[f] = field_value(rnd, f, other)
        fam = {ipaddress.ip_network(match[f]).version for f in ("src", "dst") if f in match}
        if len(fam) > 1:
            continue  # sluiced refuses an IPv4 src with an IPv6 dst: never matchable anyway
        rule = {"name": f"r{len(rules)}", "match": match, "action": rnd.choice(ACTIONS)}
        prio = 0 if not match else rnd.choice(PRIORITIES + [rnd.randrange(65536)])
        if prio or rnd.random() < 0.5:
            rule["priority"] = prio
        if rnd.random() < 0.1:
            del rule["name"]
        rules.append(rule)
    return rules


# ---------------------------------------------------------------- running a round

def ok(ctl, cmd, **fields):
    r = ctl.request(cmd, **fields)
    assert r.get("ok") is True, f"{cmd} failed (seed {SEED}): {str(r)[:2000]}"
    return r


def push_rules(ctl, rules):
    """rules_set; returns the list index -> id map. sluiced numbers a new list's rules in list order
    (docs/api.md: list order breaks ties, by id); the names checked below confirm the mapping."""
    r = ok(ctl, "rules_set", rules=rules)["rules"]
    assert len(r) == len(rules)
    base = min(x["id"] for x in r)
    idx_of = {x["id"]: x["id"] - base for x in r}
    for x in r:
        i = idx_of[x["id"]]
        assert x["name"] == rules[i].get("name") and x["match"] == rules[i]["match"], (x, rules[i])
    # sluiced lists rules in evaluation order: the reference's order
    assert [idx_of[x["id"]] for x in r] == ref.evaluation_order(rules), "evaluation order differs"
    return [base + i for i in range(len(rules))]


def classify_all(ctl, frames_by_port):
    out = {}
    for port, items in frames_by_port.items():
        for s in range(0, len(items), 2500):
            chunk = items[s:s + 2500]
            res = ok(ctl, "classify", port=port, packets=[f.hex() for _, f in chunk])["results"]
            assert len(res) == len(chunk)
            for (j, _), r in zip(chunk, res):
                out[j] = r
    return out


def explain(seed, rnd_name, rules, ids, frame, port, info, mine, got):
    key = ref.parse_key(frame, port)
    id2i = {v: i for i, v in enumerate(ids)}
    lines = [f"seed {seed} ({rnd_name}), port {port} (ingress chain {PORTS[port]}), tags {sorted(info)}",
             f"  frame  {frame.hex()}", f"  key    {key}",
             f"  ref    malformed={mine[0]} rule=#{mine[1]} (id {ids[mine[1]] if mine[1] is not None else None})"
             f" action={mine[2]}"
             + (f"\n         {json.dumps(rules[mine[1]])}" if mine[1] is not None else ""),
             f"  sluiced {got}"]
    gi = id2i.get(got.get("rule"))
    if gi is not None:
        lines.append(f"         #{gi} {json.dumps(rules[gi])}")
        if key is not None:
            lines.append(f"         reference says its failing fields are {ref.failing_fields(rules[gi], key)}")
    return "\n".join(lines)


# A payload rule above everything whose pattern no frame carries: sluiced must fall back to its
# header-only classifier for every frame, which must then agree with the reference on the other rules.
DECOY = {"name": "decoy", "priority": 65535, "match": {}, "payload": {"pattern": "sluice-decoy-never-seen"},
         "action": "drop"}


def run_round(ctl, seed, name, rules, packets, cov, decoy=False):
    """Classify every (frame, info, port) under rules in sluiced and in the reference; returns mismatches."""
    ids = push_rules(ctl, [DECOY] + rules)[1:] if decoy else push_rules(ctl, rules)
    order = ref.evaluation_order(rules)
    rank = {i: k for k, i in enumerate(order)}
    by_port = {}
    for j, (frame, _, port) in enumerate(packets):
        by_port.setdefault(port, []).append((j, frame))
    got = classify_all(ctl, by_port)
    bad = []
    for j, (frame, info, port) in enumerate(packets):
        mine = ref.classify(rules, frame, port, PORTS[port], MALFORMED_ACTION, order=order)
        g = got[j]
        want = {"malformed": mine[0], "rule": ids[mine[1]] if mine[1] is not None else None, "action": mine[2]}
        if g != want:
            bad.append(explain(seed, name, rules, ids, frame, port, info, mine, g))
            continue
        account(cov, rules, order, rank, frame, port, info, mine)
    return bad


def account(cov, rules, order, rank, frame, port, info, mine):
    """Coverage: what happened, and which match fields made a difference."""
    cov["packets"] += 1
    malformed, win, action = mine
    if malformed:
        cov["malformed"] += 1
        return
    key = ref.parse_key(frame, port)
    if win is None:
        cov["nomatch_chain" if action else "nomatch_null"] += 1
        return
    cov["matched"] += 1
    act = action if isinstance(action, str) else next(iter(action))
    cov["action_" + act] += 1
    w = rules[win]
    for f in w["match"]:
        cov["win_" + f] += 1
    for t in info:
        cov["matched_" + t] += 1
    if "v6ext" in info and {"proto", "src_port", "dst_port", "tcp_flags"} & set(w["match"]):
        cov["v6ext_matched_l4"] += 1
    # a field "decided" a packet when it alone kept a better-ranked rule from matching
    for i in order[:rank[win]]:
        ff = ref.failing_fields(rules[i], key)
        if len(ff) == 1:
            cov["decided_" + ff[0]] += 1
    # ties: the next matching rule has the same priority (list order decided)
    for i in order[rank[win] + 1:]:
        if ref.rule_matches(rules[i], key):
            if rules[i].get("priority", 0) == w.get("priority", 0):
                cov["tie_decided"] += 1
            break


def make_packets(rnd, n, n_mut):
    base = [gen_packet(rnd) for _ in range(n)]
    muts = [mutate(rnd, rnd.choice(base)[0]) for _ in range(n_mut)]  # base first: callers rely on it
    return base + muts


# ---------------------------------------------------------------- tests

def test_random_rules_and_packets_agree(sluice):  # noqa: F811
    sluice.start(cfg())
    with Ctl(sluice.ctl_sock, timeout=120) as ctl:  # a rules_set of thousands of varied rules takes seconds
        random_rounds(ctl)
    print("\n".join(ln for ln in sluice.log().splitlines() if "rte_acl" in ln))  # how the rules were compiled


def random_rounds(ctl):
    t0 = time.monotonic()
    rnd = random.Random(SEED)
    pool = make_packets(rnd, 3000, 800)
    base = pool[:3000]
    cov = Counter()
    mismatches = []
    rounds = [("big0", 2000), ("big1", 3000), ("big2", 1000), ("big3-decoy", 2500), ("few", 12)]
    per_round = {}
    for name, nrules in rounds:
        packets = [(f, info, rnd.choice(list(PORTS))) for f, info in pool]
        packets += [(f, info, rnd.choice(list(PORTS))) for f, info in
                    (mutate(rnd, rnd.choice(base)[0]) for _ in range(300))]
        keys = [k for k in (ref.parse_key(f, p) for f, _, p in packets) if k is not None]
        # the few-rules round: narrow rules, so that many packets meet none
        rules = gen_rules(rnd, keys, nrules, (0, 0, 0, 1, 1) if name == "few" else (1, 25, 35, 22, 12, 5))
        before = Counter(cov)
        t = time.monotonic()
        mismatches += run_round(ctl, SEED, name, rules, packets, cov, decoy=name.endswith("decoy"))
        d = cov - before
        per_round[name] = d
        print(f"round {name}: {len(rules)} rules, {d['packets']} packets, {d['matched']} matched, "
              f"{d['malformed']} malformed, no match -> chain {d['nomatch_chain']} / null {d['nomatch_null']}"
              f" ({time.monotonic() - t:.1f}s)")
        if mismatches:
            break
        if name.startswith("big"):  # most well-formed packets must meet some rule, or the test proves little
            assert d["matched"] >= 0.6 * (d["packets"] - d["malformed"]), (SEED, name, d)
    elapsed = time.monotonic() - t0
    print(f"seed {SEED}: {cov['packets']} classifications in {elapsed:.1f}s; coverage: "
          + ", ".join(f"{k}={v}" for k, v in sorted(cov.items())))
    assert not mismatches, f"{len(mismatches)} disagreements (seed {SEED}); first ones:\n" + "\n\n".join(mismatches[:5])

    # the comparison must not be vacuous
    assert cov["malformed"] >= 300, cov
    for f in ref.MATCH_FIELDS:
        assert cov["win_" + f] >= 1, f"no packet was won by a rule matching {f} (seed {SEED}): {cov}"
        assert cov["decided_" + f] >= 5, f"field {f} never kept a better rule from matching (seed {SEED}): {cov}"
    for t in ("v6ext", "v6fragn", "v4frag_nonfirst", "v4frag_first", "qinq", "q", "ad", "triple", "padded"):
        assert cov["matched_" + t] >= 5, f"too few {t} packets matched rules (seed {SEED}): {cov}"
    assert cov["v6ext_matched_l4"] >= 20, cov
    assert cov["tie_decided"] >= 50, cov
    for a in ("drop", "chain", "service", "port"):
        assert cov["action_" + a] >= 20, cov
    few = per_round["few"]
    assert few["nomatch_chain"] >= 100 and few["nomatch_null"] >= 100, few


# ---- hand-written edge cases

E = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _b(p):
    return bytes(p)


def _set(frame, off, data):
    b = bytearray(frame)
    b[off:off + len(data)] = data
    return bytes(b)


EDGE_RULES = [
    {"name": "mac", "priority": 900, "match": {"src_mac": "0A:0B:0C:0D:0E:0F"}, "action": {"port": "p1"}},
    {"name": "syn", "priority": 800, "match": {"proto": 6, "tcp_flags": {"set": 2, "clear": 16}},
     "action": {"service": "a"}},
    {"name": "dport7", "priority": 700, "match": {"dst_port": [7, 7]}, "action": {"port": "p2"}},
    {"name": "vlan5", "priority": 600, "match": {"vlan": 5}, "action": {"chain": "c1"}},
    {"name": "et_q", "priority": 590, "match": {"ethertype": 0x8100}, "action": {"port": "p0"}},
    {"name": "v6tcp", "priority": 500, "match": {"dst": "2001:db8::/32", "proto": 6}, "action": {"chain": "c0"}},
    {"name": "v6esp", "priority": 500, "match": {"proto": 50}, "action": {"port": "p3"}},
    {"name": "dscp46", "priority": 400, "match": {"dscp": 46}, "action": {"port": "p1"}},
    {"name": "tie1", "priority": 300, "match": {"src": "10.3.0.0/16"}, "action": {"port": "p0"}},
    {"name": "tie2", "priority": 300, "match": {"src": "10.3.3.0/24"}, "action": {"port": "p1"}},
    {"name": "v4net", "priority": 100, "match": {"src": "10.0.0.0/8"}, "action": "drop"},
    {"name": "v6any", "priority": 50, "match": {"src": "::/0"}, "action": {"service": "sx"}},
    {"name": "arp", "priority": 10, "match": {"ethertype": 0x0806, "in_port": "p1"}, "action": {"port": "p2"}},
]

V4T = _b(Ether(**E) / IP(src="10.1.0.1", dst="10.2.0.1") / TCP(sport=1000, dport=7, flags="S"))
V6U = _b(Ether(**E) / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=1, dport=2))


def _v6chain(n, last=None, l4=None):
    p = IPv6(src="fd00::1", dst="2001:db8::9", nh=60)
    for i in range(n):
        p = p / IPv6ExtHdrDestOpt(nh=60 if i < n - 1 else (44 if last else 6))
    if last:
        p = p / last
    return _b(Ether(**E) / p / (l4 if l4 is not None else TCP(dport=9, flags="A")))


# (name, frame, port, expected (malformed, rule name or None))
EDGES = [
    ("13 bytes", bytes(13), "p0", (True, None)),
    ("bare Ethernet, ARP type", _b(Ether(**E, type=0x0806)), "p1", (False, "arp")),
    ("ARP on p0: no rule, ingress chain", _b(Ether(**E) / ARP()), "p0", (False, None)),
    ("ARP on p1: rule by in_port", _b(Ether(**E) / ARP()), "p1", (False, "arp")),
    ("IPv4 type, no header", _b(Ether(**E, type=0x0800)), "p0", (True, None)),
    ("VLAN tag cut short", _b(Ether(**E, type=0x8100)) + b"\x00", "p0", (True, None)),
    ("VLAN tag, no inner type", _b(Ether(**E, type=0x8100)) + b"\x00\x05", "p0", (True, None)),
    ("VLAN 5 with PCP/DEI bits", _b(Ether(**E) / Dot1Q(prio=7, dei=1, vlan=5) / ARP()), "p0", (False, "vlan5")),
    ("QinQ outer VID counts", _b(Ether(**E) / Dot1AD(vlan=5) / Dot1Q(vlan=6) / IP(src="10.1.0.1") / UDP()),
     "p0", (False, "vlan5")),
    ("QinQ inner VID does not", _b(Ether(**E) / Dot1AD(vlan=6) / Dot1Q(vlan=5) / IP(src="10.1.0.1") / UDP()),
     "p0", (False, "v4net")),
    ("three tags: ethertype 0x8100, no IP",
     _b(Ether(**E) / Dot1AD(vlan=6) / Dot1Q(vlan=6) / Dot1Q(vlan=6) / IP(src="10.1.0.1") / TCP(dport=7)),
     "p0", (False, "et_q")),
    ("IPv4 SYN", V4T, "p0", (False, "syn")),
    ("IPv4 IHL 4", _set(V4T, 14, b"\x44"), "p0", (True, None)),
    ("IPv4 IHL 15 past the frame", _set(V4T, 14, b"\x4f"), "p0", (True, None)),
    ("IPv4 total length < IHL", _set(V4T, 16, b"\x00\x13"), "p0", (True, None)),
    ("IPv4 total length past the frame", _set(V4T, 16, b"\x00\x29"), "p0", (True, None)),
    ("IPv4 version 5", _set(V4T, 14, b"\x55"), "p0", (True, None)),
    ("IPv4 with Ethernet padding", V4T + bytes(10), "p0", (False, "syn")),
    ("IPv4 options, TCP after them",
     _b(Ether(**E) / IP(src="10.1.0.1", options=[IPOption_NOP()] * 8) / TCP(dport=7, flags="A")), "p0",
     (False, "dport7")),
    ("IPv4 TCP of 14 bytes (flags present)", _set(V4T[:14 + 34], 16, b"\x00\x22"), "p0", (False, "syn")),
    ("IPv4 TCP of 13 bytes", _set(V4T[:14 + 33], 16, b"\x00\x21"), "p0", (True, None)),
    ("IPv4 TCP cut by total length, padding after", _set(V4T, 16, b"\x00\x21"), "p0", (True, None)),
    ("IPv4 UDP of 8 bytes", _b(Ether(**E) / IP(src="10.1.0.1") / UDP(dport=7)), "p0", (False, "dport7")),
    ("IPv4 UDP of 7 bytes", _set(_b(Ether(**E) / IP(src="10.1.0.1") / UDP(dport=7))[:41], 16, b"\x00\x1b"), "p0",
     (True, None)),
    ("IPv4 ICMP of 1 byte: not looked into", _set(_b(Ether(**E) / IP(src="10.1.0.1", proto=1) / b"\x08"), 16,
                                                    b"\x00\x15"), "p0", (False, "v4net")),
    ("IPv4 first fragment keeps ports", _b(Ether(**E) / IP(src="10.1.0.1", flags="MF") / TCP(dport=7, flags="A")),
     "p0", (False, "dport7")),
    ("IPv4 non-first fragment: no ports", _b(Ether(**E) / IP(src="10.1.0.1", frag=100, proto=6) / (b"\x00\x07" * 10)),
     "p0", (False, "v4net")),
    ("IPv4 non-first fragment cut short L4 is fine", _b(Ether(**E) / IP(src="10.1.0.1", frag=1, proto=6) / b"x"),
     "p0", (False, "v4net")),
    ("IPv4 DF is not a fragment", _b(Ether(**E) / IP(src="10.1.0.1", flags="DF") / TCP(dport=7, flags="A")), "p0",
     (False, "dport7")),
    ("IPv4 DSCP 46 with ECN", _b(Ether(**E) / IP(src="9.9.9.9", tos=46 << 2 | 3) / UDP()), "p0", (False, "dscp46")),
    ("priority tie: earlier rule wins", _b(Ether(**E) / IP(src="10.3.3.3") / UDP()), "p0", (False, "tie1")),
    ("no rule on p1: null", _b(Ether(**E) / IP(src="9.9.9.9") / UDP()), "p1", (False, None)),
    ("no rule on p2: chain c1", _b(Ether(**E) / IP(src="9.9.9.9") / UDP()), "p2", (False, None)),
    ("MAC rule, upper-case in the rule", _b(Ether(src="0a:0b:0c:0d:0e:0f", dst="ff:ff:ff:ff:ff:ff") / ARP()), "p0",
     (False, "mac")),
    ("IPv4 rule does not match an IPv4-mapped IPv6 src",
     _b(Ether(**E) / IPv6(src="::ffff:10.1.0.1", dst="fd00::1") / UDP()), "p0", (False, "v6any")),
    ("IPv6 UDP", V6U, "p0", (False, "v6any")),
    ("IPv6 39 bytes", _b(Ether(**E, type=0x86DD)) + V6U[14:53], "p0", (True, None)),
    ("IPv6 version 4", _set(V6U, 14, b"\x40"), "p0", (True, None)),
    ("IPv6 payload length past the frame", _set(V6U, 18, b"\x00\x09"), "p0", (True, None)),
    ("IPv6 with padding", V6U + bytes(6), "p0", (False, "v6any")),
    ("IPv6 traffic class DSCP 46", _b(Ether(**E) / IPv6(src="fd00::1", dst="fd00::2", tc=46 << 2 | 1) / UDP()),
     "p0", (False, "dscp46")),
    ("IPv6 8 extension headers", _v6chain(8), "p0", (False, "v6tcp")),
    ("IPv6 9 extension headers", _v6chain(9), "p0", (True, None)),
    ("IPv6 8 headers then a non-first fragment (the 9th)",
     _v6chain(8, IPv6ExtHdrFragment(nh=6, offset=5)), "p0", (True, None)),
    ("IPv6 non-first fragment ends the walk, proto its next header",
     _v6chain(2, IPv6ExtHdrFragment(nh=6, offset=5), Raw(b"x")), "p0", (False, "v6tcp")),
    ("IPv6 first fragment: walk goes on to TCP", _v6chain(1, IPv6ExtHdrFragment(nh=6, offset=0, m=1)), "p0",
     (False, "v6tcp")),
    ("IPv6 hop-by-hop length past the payload",
     _set(_b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1") / IPv6ExtHdrHopByHop() / TCP()), 55, b"\x05"),
     "p0", (True, None)),
    ("IPv6 AH then TCP",
     _b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1", nh=51) / AH(nh=6, payloadlen=4, icv=bytes(12))
        / TCP(dport=9, flags="A")), "p0", (False, "v6tcp")),
    ("IPv6 AH length past the payload",
     _b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1", nh=51) / AH(nh=6, payloadlen=15, icv=bytes(12))
        / TCP(dport=9)), "p0", (True, None)),
    ("IPv6 ESP", _b(Ether(**E) / IPv6(src="fd00::1", dst="fd00::2", nh=50) / bytes(16)), "p0", (False, "v6esp")),
    ("IPv6 no next header", _b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1", nh=59)), "p0",
     (False, "v6any")),
    ("IPv6 TCP cut to 13 bytes", _b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1", nh=6, plen=13)
                                    / TCP(dport=9)), "p0", (True, None)),
    ("IPv6 routing header with addresses",
     _b(Ether(**E) / IPv6(src="fd00::1", dst="2001:db8::1", nh=43) / IPv6ExtHdrRouting(nh=6, addresses=["::1"] * 3)
        / TCP(dport=9, flags="PA")), "p0", (False, "v6tcp")),
    ("port-range rule does not match ICMP", _b(Ether(**E) / IP(src="9.9.9.9", proto=1) / b"\x00\x07\x00\x07"),
     "p1", (False, None)),
    ("tcp_flags rule does not match UDP", _b(Ether(**E) / IP(src="9.9.9.9", proto=17) / UDP(dport=8)), "p1",
     (False, None)),
]


def test_edge_cases_agree(sluice):  # noqa: F811
    sluice.start(cfg())
    ids = push_rules(sluice, EDGE_RULES)
    names = {ids[i]: r["name"] for i, r in enumerate(EDGE_RULES)}
    probs = []
    for name, frame, port, (want_mal, want_rule) in EDGES:
        got = sluice.ok("classify", port=port, packets=[frame.hex()])["results"][0]
        mal, i, action = ref.classify(EDGE_RULES, frame, port, PORTS[port], MALFORMED_ACTION)
        mine = {"malformed": mal, "rule": ids[i] if i is not None else None, "action": action}
        exp_action = (MALFORMED_ACTION if want_mal else
                      next(r["action"] for r in EDGE_RULES if r["name"] == want_rule) if want_rule else
                      ({"chain": PORTS[port]} if PORTS[port] else None))
        expected = {"malformed": want_mal, "rule": next((x for x, n in names.items() if n == want_rule), None),
                    "action": exp_action}
        if got != mine or got != expected:
            probs.append(f"{name}: sluiced {got} rule {names.get(got['rule'])}; reference {mine} rule "
                         f"{names.get(mine['rule'])}; expected {expected}\n  frame {frame.hex()}\n"
                         f"  key {ref.parse_key(frame, port)}")
    assert not probs, "\n".join(probs)

    # no rules at all: frames are not judged, even malformed ones take the port's default
    sluice.ok("rules_set", rules=[])
    for port in PORTS:
        res = sluice.ok("classify", port=port, packets=[bytes(13).hex(), V4T.hex()])["results"]
        dflt = {"chain": PORTS[port]} if PORTS[port] else None
        assert res == [{"malformed": False, "rule": None, "action": dflt}] * 2, (port, res)
        assert [ref.classify([], f, port, PORTS[port], MALFORMED_ACTION) for f in (bytes(13), V4T)] == \
            [(False, None, dflt)] * 2
    # sluiced refuses a rule that could never match (IPv4 src, IPv6 dst)
    r = sluice.request("rules_set", rules=[{"match": {"src": "10.0.0.0/8", "dst": "2001:db8::/32"}, "action": "drop"}])
    assert r.get("ok") is not True and "could never match" in json.dumps(r), r
