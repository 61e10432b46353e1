"""A reference steering classifier in plain Python, written from docs/steering.md alone (not from
src/manager/pktkey.c or steer.c), for the differential test (test_steering_differential.py).

    parse_key(frame, in_port)          -> key dict, or None when the frame is malformed
    rule_matches(rule, key)            -> bool (rule: the normalized JSON form of docs/api.md)
    failing_fields(rule, key)          -> the rule's match fields the key does not satisfy
    evaluation_order(rules)            -> rule indexes, best first (priority high to low, then list order)
    classify(rules, frame, in_port, ingress_chain, malformed_action)
                                       -> (malformed, rule index or None, action)

A key holds only the fields the packet has: in_port, dst_mac, src_mac, ethertype always; vlan with a
tag; ip (4 or 6), src, dst (ints), proto, dscp for IP; src_port, dst_port for TCP/UDP with ports;
tcp_flags for TCP with flags. Rule values are compiled once per rule dict and cached by id().
"""

import ipaddress

ET_VLAN, ET_QINQ, ET_IPV4, ET_IPV6 = 0x8100, 0x88A8, 0x0800, 0x86DD
TCP, UDP = 6, 17
HOPOPTS, ROUTING, FRAGMENT, AH, DSTOPTS = 0, 43, 44, 51, 60
MAX_EXT_HDRS = 8

MATCH_FIELDS = ("in_port", "src_mac", "dst_mac", "vlan", "ethertype", "src", "dst", "proto", "src_port",
                "dst_port", "dscp", "tcp_flags")


def _u16(b, i):
    return b[i] << 8 | b[i + 1]


def _mac(b):
    return ":".join(f"{x:02x}" for x in b)


def _l4(key, proto, seg):
    """TCP/UDP ports and flags from the L4 bytes `seg` (up to the datagram's end). False: cut short."""
    if proto == TCP:
        if len(seg) < 14:          # up to the flags byte
            return False
        key["tcp_flags"] = seg[13]
    elif proto == UDP:
        if len(seg) < 8:
            return False
    else:
        return True                # other protocols are not looked into
    key["src_port"], key["dst_port"] = _u16(seg, 0), _u16(seg, 2)
    return True


def _ipv4(key, ip):
    n = len(ip)
    if n < 20 or ip[0] >> 4 != 4:
        return False
    ihl = (ip[0] & 0x0F) * 4
    total = _u16(ip, 2)
    if ihl < 20 or ihl > n or not ihl <= total <= n:
        return False
    key.update(ip=4, dscp=ip[1] >> 2, proto=ip[9],
               src=int.from_bytes(ip[12:16], "big"), dst=int.from_bytes(ip[16:20], "big"))
    frag = _u16(ip, 6)
    offset = frag & 0x1FFF         # MF (0x2000) alone makes a first fragment, which keeps its ports
    if offset:
        return True                # non-first fragment: no ports, no flags
    return _l4(key, key["proto"], ip[ihl:total])


def _ipv6(key, ip):
    n = len(ip)
    if n < 40 or ip[0] >> 4 != 6:
        return False
    end = 40 + _u16(ip, 4)
    if end > n:
        return False
    tclass = (ip[0] & 0x0F) << 4 | ip[1] >> 4
    key.update(ip=6, dscp=tclass >> 2,
               src=int.from_bytes(ip[8:24], "big"), dst=int.from_bytes(ip[24:40], "big"))
    nh, off, count = ip[6], 40, 0
    while nh in (HOPOPTS, ROUTING, DSTOPTS, AH, FRAGMENT):
        if count == MAX_EXT_HDRS:  # a ninth one
            return False
        if nh == FRAGMENT:
            size = 8
        else:
            if off + 2 > end:      # not even its length byte fits
                return False
            size = (ip[off + 1] + 2) * 4 if nh == AH else (ip[off + 1] + 1) * 8
        if off + size > end:
            return False
        if nh == FRAGMENT and _u16(ip, off + 2) >> 3:
            key["proto"] = ip[off]  # non-first fragment: the walk ends at its next header
            return True
        nh = ip[off]
        off += size
        count += 1
    key["proto"] = nh
    return _l4(key, nh, ip[off:end])


def parse_key(frame, in_port):
    """The packet key of docs/steering.md, or None when the frame is malformed."""
    frame = bytes(frame)
    if len(frame) < 14:
        return None
    key = {"in_port": in_port, "dst_mac": _mac(frame[0:6]), "src_mac": _mac(frame[6:12])}
    off = 12                        # where the current ethertype is
    et = _u16(frame, off)
    tags = 0
    while et in (ET_VLAN, ET_QINQ) and tags < 2:
        if off + 6 > len(frame):    # the tag's TCI and the ethertype after it
            return None
        if tags == 0:
            key["vlan"] = _u16(frame, off + 2) & 0x0FFF
        off += 4
        tags += 1
        et = _u16(frame, off)
    key["ethertype"] = et
    ip = frame[off + 2:]
    if et == ET_IPV4:
        ok = _ipv4(key, ip)
    elif et == ET_IPV6:
        ok = _ipv6(key, ip)
    else:
        ok = True                   # non-IP (or a third tag): only the L2 fields
    return key if ok else None


# ---------------------------------------------------------------- rules

_compiled = {}


def _compile(rule):
    c = _compiled.get(id(rule))
    if c is not None and c[0] is rule:
        return c[1]
    tests = []
    for f, v in (rule.get("match") or {}).items():
        if f in ("src_mac", "dst_mac"):
            tests.append((f, "eq", v.lower()))
        elif f in ("src", "dst"):
            net = ipaddress.ip_network(v, strict=True)
            bits = net.max_prefixlen
            mask = ((1 << net.prefixlen) - 1) << (bits - net.prefixlen)
            tests.append((f, "net", (net.version, int(net.network_address), mask)))
        elif f in ("src_port", "dst_port"):
            tests.append((f, "range", (v[0], v[1])))
        elif f == "tcp_flags":
            tests.append((f, "flags", (v.get("set", 0), v.get("clear", 0))))
        elif f in MATCH_FIELDS:
            tests.append((f, "eq", v))
        else:
            raise ValueError(f"unknown match field {f!r}")
    _compiled[id(rule)] = (rule, tests)
    return tests


def _field_ok(key, f, kind, v):
    x = key.get(f)
    if x is None:                   # a field the packet does not have never matches
        return False
    if kind == "eq":
        return x == v
    if kind == "net":
        version, net, mask = v
        return key["ip"] == version and x & mask == net
    if kind == "range":
        return v[0] <= x <= v[1]
    s, c = v                        # flags
    return x & s == s and x & c == 0


def rule_matches(rule, key):
    return all(_field_ok(key, f, kind, v) for f, kind, v in _compile(rule))


def failing_fields(rule, key):
    return [f for f, kind, v in _compile(rule) if not _field_ok(key, f, kind, v)]


def evaluation_order(rules):
    return sorted(range(len(rules)), key=lambda i: (-rules[i].get("priority", 0), i))


def first_match(rules, order, key):
    for i in order:
        if rule_matches(rules[i], key):
            return i
    return None


def classify(rules, frame, in_port, ingress_chain=None, malformed_action="drop", order=None):
    """(malformed, winning rule index or None, action); action None: no rule and no ingress chain.

    With no rules at all steering is off: frames are not judged and take the port's default."""
    default = {"chain": ingress_chain} if ingress_chain else None
    if not rules:
        return False, None, default
    key = parse_key(frame, in_port)
    if key is None:
        return True, None, malformed_action
    i = first_match(rules, order if order is not None else evaluation_order(rules), key)
    if i is None:
        return False, None, default
    return False, i, rules[i]["action"]
