"""Steering rules in the YAML config (docs/steering.md): friendly forms -> the normalized JSON form
sluiced takes. Every problem raises ConfigError naming the field, e.g. ``rules[2].match.dst_port``.

    normalize_rule(rule, "rules[0]", ports, chains, services) -> {"name", "priority", "match", ...}
    normalize_steering(steering, "steering", ports, chains, services) -> {"malformed", "flows", ...}
"""

import ipaddress
import re

from .errors import ConfigError

__all__ = ["normalize_rule", "normalize_action", "normalize_steering", "PROTOCOLS", "TCP_FLAGS", "POLICIES"]

PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "icmpv6": 58, "sctp": 132}
TCP_FLAGS = {"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08, "ack": 0x10, "urg": 0x20, "ece": 0x40, "cwr": 0x80}
POLICIES = ("flow", "least_loaded", "round_robin")
MATCH_KEYS = ("in_port", "src_mac", "dst_mac", "vlan", "ethertype", "src", "dst", "proto", "src_port", "dst_port",
              "dscp", "tcp_flags")
MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}\Z")


def _err(path, msg):
    return ConfigError(path, msg)


def _int(v, path, lo, hi):
    if isinstance(v, str) and re.fullmatch(r"0[xX][0-9a-fA-F]+|[0-9]+", v.strip()):
        v = int(v.strip(), 0)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _err(path, f"must be an integer {lo}..{hi} (got {v!r})")
    return v


def _ref(v, path, known, what):
    if not isinstance(v, str) or v not in known:
        raise _err(path, f"unknown {what} {v!r}" + (f" (known: {', '.join(sorted(known))})" if known else ""))
    return v


def normalize_action(v, path, ports, chains, services):
    """`drop`, {chain: C}, {service: S} or {port: P}."""
    if v == "drop":
        return "drop"
    if not isinstance(v, dict) or len(v) != 1:
        raise _err(path, f"must be drop, {{chain: C}}, {{service: S}} or {{port: P}} (got {v!r})")
    (k, name), = v.items()
    known = {"chain": chains, "service": services, "port": ports}.get(k)
    if known is None:
        raise _err(f"{path}.{k}", "unknown action (chain, service, port, or drop)")
    return {k: _ref(name, f"{path}.{k}", known, k)}


def _ports(v, path):
    if isinstance(v, int) and not isinstance(v, bool):
        lo = hi = v
    elif isinstance(v, str) and re.fullmatch(r"\s*\d+\s*(-\s*\d+\s*)?", v):
        parts = [int(x) for x in v.split("-")]
        lo, hi = parts[0], parts[-1]
    elif isinstance(v, list) and len(v) == 2:
        lo, hi = (_int(x, path, 0, 65535) for x in v)
    else:
        raise _err(path, f"must be a port or a range like 1000-2000 (got {v!r})")
    if not 0 <= lo <= hi <= 65535:
        raise _err(path, f"{v!r} is not a range within 0..65535")
    return [lo, hi]


def _prefix(v, path):
    if not isinstance(v, str):
        raise _err(path, f"must be a prefix like 10.0.0.0/8 or 2001:db8::/32 (got {v!r})")
    try:
        return str(ipaddress.ip_network(v.strip(), strict=True))
    except ValueError as e:
        raise _err(path, f"{v!r}: {e}") from None


def _tcp_flags(v, path):
    if isinstance(v, dict):
        extra = set(v) - {"set", "clear"}
        if extra:
            raise _err(f"{path}.{sorted(extra, key=str)[0]}", "unknown key (set, clear)")  # keys of any type
        s, c = _int(v.get("set", 0), f"{path}.set", 0, 255), _int(v.get("clear", 0), f"{path}.clear", 0, 255)
    elif isinstance(v, str):
        s = c = 0
        for word in filter(None, (w.strip().lower() for w in v.split(","))):
            neg = word.startswith("!")
            bit = TCP_FLAGS.get(word.lstrip("!"))
            if bit is None:
                raise _err(path, f"unknown TCP flag {word.lstrip('!')!r} (" + ", ".join(TCP_FLAGS) + ")")
            c, s = (c | bit, s) if neg else (c, s | bit)
    else:
        raise _err(path, f'must be like "syn,!ack" or {{set: 2, clear: 16}} (got {v!r})')
    if s & c:
        raise _err(path, "a flag is both required and excluded")
    return {"set": s, "clear": c}


def _match(m, path, ports):
    if m is None:
        return {}
    if not isinstance(m, dict):
        raise _err(path, "must be a mapping of fields to match")
    out = {}
    for k, v in m.items():
        p = f"{path}.{k}"
        if k not in MATCH_KEYS:
            raise _err(p, "unknown field (" + ", ".join(MATCH_KEYS) + ")")
        if k == "in_port":
            out[k] = _ref(v, p, ports, "port")
        elif k in ("src_mac", "dst_mac"):
            if not isinstance(v, str) or not MAC_RE.match(v):
                raise _err(p, f"must be a MAC address like 02:00:00:00:00:01 (got {v!r})")
            out[k] = v.lower()
        elif k == "vlan":
            out[k] = _int(v, p, 0, 4095)
        elif k == "ethertype":
            out[k] = _int(v, p, 0, 65535)
        elif k in ("src", "dst"):
            out[k] = _prefix(v, p)
        elif k == "proto":
            out[k] = PROTOCOLS[v.lower()] if isinstance(v, str) and v.lower() in PROTOCOLS else _int(v, p, 0, 255)
        elif k in ("src_port", "dst_port"):
            out[k] = _ports(v, p)
        elif k == "dscp":
            out[k] = _int(v, p, 0, 63)
        else:
            out[k] = _tcp_flags(v, p)
    fams = {ipaddress.ip_network(out[k]).version for k in ("src", "dst") if k in out}
    if len(fams) > 1:
        raise _err(f"{path}.dst", "an IPv4 and an IPv6 prefix in one rule can never both match")
    return out


def _payload(v, path):
    if not isinstance(v, dict):
        raise _err(path, "must be a mapping {pattern, regex, caseless, depth}")
    for k in v:
        if k not in ("pattern", "regex", "caseless", "depth"):
            raise _err(f"{path}.{k}", "unknown key (pattern, regex, caseless, depth)")
    pat = v.get("pattern")
    # 1..1024 bytes of UTF-8 (sluiced counts bytes), without NUL (sluiced's JSON loader refuses it)
    if not isinstance(pat, str) or "\0" in pat or not 1 <= len(pat.encode("utf-8", "surrogatepass")) <= 1024:
        raise _err(f"{path}.pattern", "must be a string of 1..1024 bytes (UTF-8), without NUL")
    try:
        pat.encode("utf-8")
    except UnicodeEncodeError:
        raise _err(f"{path}.pattern", f"must be UTF-8 text (got {pat!r}: a lone surrogate)") from None
    out = {"pattern": pat}
    for k in ("regex", "caseless"):
        if k in v:
            if not isinstance(v[k], bool):
                raise _err(f"{path}.{k}", "must be true or false")
            out[k] = v[k]
    if "depth" in v:
        out["depth"] = _int(v["depth"], f"{path}.depth", 1, 65535)
    return out


def normalize_rule(r, path, ports, chains, services):
    if not isinstance(r, dict):
        raise _err(path, "must be a mapping with match and action")
    for k in r:
        if k not in ("name", "priority", "match", "payload", "action"):
            raise _err(f"{path}.{k}", "unknown key (name, priority, match, payload, action)")
    out = {}
    if r.get("name") is not None:
        if not isinstance(r["name"], str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,31}", r["name"]):
            raise _err(f"{path}.name", "must be 1-31 characters of A-Z a-z 0-9 _ - .")
        out["name"] = r["name"]
    out["priority"] = _int(r.get("priority", 0), f"{path}.priority", 0, 65535)
    out["match"] = _match(r.get("match"), f"{path}.match", ports)
    if r.get("payload") is not None:
        out["payload"] = _payload(r["payload"], f"{path}.payload")
    if "action" not in r:
        raise _err(f"{path}.action", "required: drop, {chain: C}, {service: S} or {port: P}")
    out["action"] = normalize_action(r["action"], f"{path}.action", ports, chains, services)
    return out


def normalize_steering(s, path, ports, chains, services):
    if s is None:
        return None
    if not isinstance(s, dict):
        raise _err(path, "must be a mapping (malformed, flows, flow_idle_ms)")
    out = {}
    for k, v in s.items():
        if k == "malformed":
            out[k] = normalize_action(v, f"{path}.malformed", ports, chains, services)
        elif k == "flows":
            out[k] = _int(v, f"{path}.flows", 0, 1 << 24)
        elif k == "flow_idle_ms":
            out[k] = _int(v, f"{path}.flow_idle_ms", 1, 86_400_000)
        else:
            raise _err(f"{path}.{k}", "unknown key (malformed, flows, flow_idle_ms)")
    return out
