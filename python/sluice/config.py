"""Load and validate a Sluice YAML configuration.

Every problem raises ConfigError naming the dotted path of the field at fault,
e.g. ``chains[0].exit: unknown port 'srv'``.

    cfg = load_file("sluice.yaml")       # parsed, validated, normalized
    json_text = to_sluiced_json(cfg)     # what sluiced --config reads
"""

import copy
import ipaddress
import json
import os
import re
import secrets
import shutil

import yaml

from . import steering
from .errors import ConfigError

__all__ = [
    "ConfigError", "load_file", "load_string", "validate", "normalize",
    "to_sluiced_json", "instance_names", "group_slots", "default_sandbox", "BUILTIN_NFS", "DEFAULT_SOCKET_DIR", "STACK_DEFAULTS",
]

DEFAULT_SOCKET_DIR = "/run/sluice"
# `program: <name>` runs <build>/nfs/sluice-nf-<name>: every NF in nfs/ (nf_programs in nfs/meson.build;
# tests/integration/test_builtin_programs.py checks that the two lists agree)
BUILTIN_NFS = ("fwd", "reflect", "count", "gen", "sink",
               "firewall", "nat", "router", "monitor", "ids", "lb", "ratelimit", "l2switch")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,30}\Z")
NAME_RULE = "[a-z0-9][a-z0-9_-]{0,30}"
NAME_MAX = 31            # SL_NAME_MAX (32) minus the NUL
SUN_PATH_MAX = 107       # sockaddr_un.sun_path (108) minus the NUL
SOCKET_DIR_MAX = 80      # bytes of sluiced's --socket-dir at most (src/manager/main.c SOCK_DIR_MAX)
MAX_PORTS = 32           # sluiced's ports at most (SL_MAX_PORTS)
CHAIN_MAX = 250          # services in a chain at most (sluiced's config loader)
PCI_RE = re.compile(r"pci:[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")
VDEV_RE = re.compile(r"net_[A-Za-z0-9_]+(,.*)?\Z")

WAKEUP_MODES = ("poll", "block", "adaptive")
RESTART_POLICIES = ("always", "on-failure", "never")
SANDBOX_MODES = ("strict", "none")  # docs/abi.md "Sandbox"; python/sluice/sandbox.py
ACCESS_MODES = ("rw", "ro")          # nfs[].access: ro maps the NF's packet region read-only
MAX_DOMAINS = 64                     # trust domains, default and private ones included (sluiced's limit)
HUGE_PAGES = ("auto", "on", "off")
# packet data bytes per buffer (sluiced.buffer_size, domains[].buffer_size; docs/abi.md "Buffer size
# and jumbo frames"): SL_DATA_ROOM_MIN..SL_DATA_ROOM_MAX in steps of SL_DATA_ROOM_ALIGN (sluiced.h)
BUFFER_SIZE_DEFAULT, BUFFER_SIZE_MIN, BUFFER_SIZE_MAX, BUFFER_SIZE_ALIGN = 2048, 2048, 16384, 64
HEADROOM = 128                       # RTE_PKTMBUF_HEADROOM: every buffer is headroom + buffer_size
REGION_MAX_BYTES = (1 << 32) - (2 << 20)  # descriptor offsets are 32-bit (sluiced checks the same)


# ---------------------------------------------------------------- YAML loading

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ConfigError("", f"line {key_node.start_mark.line + 1}: unhashable mapping key")
        if key in seen:
            raise ConfigError(
                str(key), f"duplicate key (line {seen[key] + 1} and line {key_node.start_mark.line + 1})")
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text, source):
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError("", f"invalid YAML at {where}: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML in {source}: {e}") from None
    if data is None:
        raise ConfigError("", f"{source} is empty (need at least a 'ports' list)")
    return data


def load_string(text, base_dir=None, source="<string>", check_programs=True, check_devices=None):
    """Parse YAML text, validate and return the normalized config dict."""
    data = _parse_yaml(text, source)
    return normalize(data, base_dir=base_dir, check_programs=check_programs, check_devices=check_devices)


def load_file(path, check_programs=True, check_devices=None):
    """Read, validate and normalize the YAML file at path. Relative NF program
    paths are resolved against the file's directory."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("", f"{path} is not UTF-8 text") from None
    base = os.path.dirname(os.path.abspath(path))
    return load_string(text, base_dir=base, source=path, check_programs=check_programs,
                       check_devices=check_devices)


# ----------------------------------------------------------------- validators

def _join(path, key):
    return f"{path}.{key}" if path else str(key)


def _type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "mapping"
    return type(v).__name__


def _mapping(v, path, allowed):
    if not isinstance(v, dict):
        raise ConfigError(path or "config", f"must be a mapping (got {_type_name(v)})")
    for k in v:
        if not isinstance(k, str) or k not in allowed:
            # the key as written; an empty or blank one quoted, so that the error still names it
            shown = k if isinstance(k, str) and k.strip() else repr(k)
            raise ConfigError(_join(path, shown), "unknown key (expected one of " + ", ".join(allowed) + ")")
    return v


def _list(v, path, min_len=0, what="entry"):
    if not isinstance(v, list):
        raise ConfigError(path, f"must be a list (got {_type_name(v)})")
    if len(v) < min_len:
        raise ConfigError(path, f"must have at least {min_len} {what}")
    return v


def _int(v, path, lo, hi):
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(path, f"must be an integer {lo}..{hi} (got {_type_name(v)} {v!r})")
    if not lo <= v <= hi:
        raise ConfigError(path, f"must be in {lo}..{hi} (got {v})")
    return v


def _pow2(v, path, lo, hi):
    """_int, and a power of two."""
    n = _int(v, path, lo, hi)
    if n & (n - 1):
        raise ConfigError(path, f"must be a power of two {lo}..{hi} (got {n})")
    return n


def _text(v, path):
    """A string that can reach sluiced and the kernel: no NUL (sluiced's JSON loader, argv and paths
    refuse it) and encodable as UTF-8 (YAML's "\\ud800" is a lone surrogate)."""
    if "\0" in v:
        raise ConfigError(path, f"must not contain a NUL character (got {v!r})")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(path, f"must be UTF-8 text (got {v!r}: a lone surrogate)") from None
    return v


def _str(v, path, nonempty=True):
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string (got {_type_name(v)})")
    if nonempty and not v.strip():
        raise ConfigError(path, "must not be empty")
    return _text(v, path)


def _choice(v, path, choices):
    if isinstance(v, str) and v in choices:
        return v
    got = repr(v) if isinstance(v, str) else f"{_type_name(v)} {v!r}"
    raise ConfigError(path, f"must be one of {', '.join(choices)} (got {got})")


def _name(v, path):
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string matching {NAME_RULE} (got {_type_name(v)} {v!r})")
    if not NAME_RE.match(v):
        raise ConfigError(path, f"invalid name {v!r} (must match {NAME_RULE}: lower-case letters, "
                                "digits, '_' and '-', at most 31 characters)")
    return v


def _unique_names(items, path):
    seen = {}
    for i, item in enumerate(items):
        n = item["name"]
        if n in seen:
            raise ConfigError(f"{path}[{i}].name", f"duplicate name {n!r} (also {path}[{seen[n]}])")
        seen[n] = i
    return seen


# ------------------------------------------------------------------ sections

SLUICED_DEFAULTS = {
    "pool_mbufs": 16384,
    "buffer_size": BUFFER_SIZE_DEFAULT,
    "ring_size": 1024,
    "max_nfs": 64,
    "huge_pages": "auto",
    "socket_dir": DEFAULT_SOCKET_DIR,
    "lcores": "0,1",
    "pipes": False,
    "workers": 1,
    "nf_sched": "other",
}

NF_DEFAULTS = {
    "args": [],
    "instances": 1,
    "wakeup": "poll",
    "batch": 32,
    "timeout_us": 100,
    "spin_us": 200,
    "restart": "on-failure",
}


# `stack:` (docs/sockets.md "Who serves the sockets"): `sluice up` also runs sluice-stackd, the socket
# service of `sluice run`, in the same socket dir. Its options are sluice-stackd's --ring-kb, --slots,
# --poll-us and --no-direct.
STACK_DEFAULTS = {
    "ring_kb": 256,     # each socket's send and receive ring, KiB: a power of two 4..16384
    "slots": 1024,      # sockets per program, 1..65536
    "poll_us": 0,       # poll this long after activity before sleeping, 0..10000 (docs/sockets.md "Polling")
    "direct": True,     # shm connections of one owner bypass the engine (docs/sockets.md "Direct connections")
}


# `stack.user` (docs/sockets.md "The user module"): sluice-stackd's userspace TCP/IP stack (lwIP), attached
# to sluiced as an NF of `service`; its frames go out along `egress_chain` (a chain that starts with the
# service and exits on a port), and come in through a chain that ends with it (a port's chain or a rule's).
STACK_USER_DEFAULTS = {
    "service": "stack",
    "addresses": None,      # required: ["10.0.0.1/24", "fd00::1/64"]: one IPv4, up to five IPv6
    "gateway": None,        # IPv4 next hop off the IPv4 prefix
    "mtu": 1500,
    "mac": None,            # default 02:00 and the IPv4 address
    "supply": 256,          # empty buffers it holds for the frames it sends (docs/abi.md "Supply")
    "egress_chain": None,   # required
}


def _stack_user(v, path):
    if not isinstance(v, dict):
        raise ConfigError(path, f"must be a mapping with addresses, egress_chain and optionally service, gateway, mtu, "
                                f"mac, supply (got {_type_name(v)} {v!r})")
    _mapping(v, path, list(STACK_USER_DEFAULTS))
    out = dict(STACK_USER_DEFAULTS)
    for req in ("addresses", "egress_chain"):
        if v.get(req) is None:
            raise ConfigError(f"{path}.{req}", "required" + (" (a list such as [10.0.0.1/24, fd00::1/64])"
                                                             if req == "addresses" else
                                                             " (the chain its frames take: it starts with the service)"))
    if "service" in v:
        out["service"] = _name(v["service"], f"{path}.service")
    addrs = _list(v["addresses"], f"{path}.addresses", 1, "address")
    out["addresses"] = []
    n4 = 0
    for i, a in enumerate(addrs):
        ap = f"{path}.addresses[{i}]"
        if not isinstance(a, str):
            raise ConfigError(ap, f"must be ADDRESS/PREFIX, e.g. 10.0.0.1/24 (got {_type_name(a)} {a!r})")
        try:
            iface = ipaddress.ip_interface(a if "/" in a else a + ("/64" if ":" in a else "/32"))
        except ValueError:
            raise ConfigError(ap, f"{a!r} is not an IPv4 or IPv6 address with a prefix length, e.g. 10.0.0.1/24")
        if iface.ip.is_multicast or iface.ip.is_unspecified or iface.ip.is_loopback:
            raise ConfigError(ap, f"{a!r} cannot be a host's address (multicast, unspecified or loopback)")
        if iface.version == 4:
            n4 += 1
            if n4 > 1:
                raise ConfigError(ap, "a second IPv4 address: the stack's interface has one (lwIP)")
        elif len(out["addresses"]) - n4 >= 5:
            raise ConfigError(ap, "a sixth IPv6 address: the stack's interface has at most five (and its link-local one)")
        out["addresses"].append(str(iface))
    if v.get("gateway") is not None:
        try:
            gw = ipaddress.IPv4Address(v["gateway"])
        except (ValueError, TypeError):
            raise ConfigError(f"{path}.gateway", f"{v['gateway']!r} is not an IPv4 address (IPv6 routers come by "
                                                 f"router advertisement)")
        nets = [ipaddress.ip_interface(a).network for a in out["addresses"] if ":" not in a]
        if not nets:
            raise ConfigError(f"{path}.gateway", "an IPv4 gateway needs an IPv4 address in addresses")
        if gw not in nets[0]:
            raise ConfigError(f"{path}.gateway", f"{gw} is not on the IPv4 prefix {nets[0]}")
        out["gateway"] = str(gw)
    if "mtu" in v:
        out["mtu"] = _int(v["mtu"], f"{path}.mtu", 576, 9000)
    if v.get("mac") is not None:
        m = v["mac"]
        if not isinstance(m, str) or not re.fullmatch(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}", m):
            raise ConfigError(f"{path}.mac", f"must be a MAC address such as 02:00:0a:00:00:01 (got {m!r})")
        if int(m[:2], 16) & 1:
            raise ConfigError(f"{path}.mac", f"{m} is a multicast address")
        out["mac"] = m.lower()
    if "supply" in v:
        out["supply"] = _int(v["supply"], f"{path}.supply", 16, 4096)
    out["egress_chain"] = _name(v["egress_chain"], f"{path}.egress_chain")
    return out


def _stack(v, path="stack"):
    """stack: true | {ring_kb, slots, poll_us, direct, user} | null (the key alone): the socket service with these
    options; stack: false: none. Returns the options, or None for no service."""
    if v is False:
        return None
    out = dict(STACK_DEFAULTS)
    if v is None or v is True:
        return out
    if not isinstance(v, dict):
        raise ConfigError(path, f"must be true, false or a mapping with ring_kb, slots, poll_us, direct, user "
                                f"(got {_type_name(v)} {v!r})")
    _mapping(v, path, list(STACK_DEFAULTS) + ["user"])
    if v.get("user") is not None:
        out["user"] = _stack_user(v["user"], f"{path}.user")
    if "ring_kb" in v:
        out["ring_kb"] = _pow2(v["ring_kb"], f"{path}.ring_kb", 4, 16384)
    if "slots" in v:
        out["slots"] = _int(v["slots"], f"{path}.slots", 1, 65536)
    if "poll_us" in v:
        out["poll_us"] = _int(v["poll_us"], f"{path}.poll_us", 0, 10000)
    if "direct" in v:
        if not isinstance(v["direct"], bool):
            raise ConfigError(f"{path}.direct", f"must be true or false (got {_type_name(v['direct'])} {v['direct']!r})")
        out["direct"] = v["direct"]
    return out


def _sluiced(v, path="sluiced"):
    out = dict(SLUICED_DEFAULTS)
    if v is None:
        return out
    _mapping(v, path, list(SLUICED_DEFAULTS))
    if "pool_mbufs" in v:
        out["pool_mbufs"] = _int(v["pool_mbufs"], f"{path}.pool_mbufs", 1024, 1048576)
    if "ring_size" in v:
        out["ring_size"] = _pow2(v["ring_size"], f"{path}.ring_size", 16, 65536)
    if "max_nfs" in v:
        out["max_nfs"] = _int(v["max_nfs"], f"{path}.max_nfs", 1, 16384)
    if "buffer_size" in v:
        out["buffer_size"] = _buffer_size(v["buffer_size"], f"{path}.buffer_size")
    _region_size(out["pool_mbufs"], out["buffer_size"], f"{path}.buffer_size")
    if "huge_pages" in v:
        hp = v["huge_pages"]
        # YAML 1.1 reads bare on/off as booleans: take them back.
        if hp is True:
            hp = "on"
        elif hp is False:
            hp = "off"
        out["huge_pages"] = _choice(hp, f"{path}.huge_pages", HUGE_PAGES)
    if "socket_dir" in v:
        sd = _str(v["socket_dir"], f"{path}.socket_dir")
        if not os.path.isabs(sd):
            raise ConfigError(f"{path}.socket_dir", f"must be an absolute path (got {sd!r})")
        sd = os.path.normpath(sd)
        if len(sd.encode()) > SOCKET_DIR_MAX:  # sluiced's limit (--socket-dir), below sun_path's
            raise ConfigError(f"{path}.socket_dir",
                              f"too long for sluiced's sockets ({len(sd.encode())} bytes; at most "
                              f"{SOCKET_DIR_MAX})")
        out["socket_dir"] = sd
    if "lcores" in v:
        out["lcores"] = _lcores(v["lcores"], f"{path}.lcores")
    if "workers" in v:
        out["workers"] = _int(v["workers"], f"{path}.workers", 1, 8)
    ncores = len(out["lcores"].split(","))
    if ncores != out["workers"] + 1:
        raise ConfigError(f"{path}.lcores", f"names {ncores} cores; sluiced.workers {out['workers']} needs "
                                            f"{out['workers'] + 1} (the main lcore, then one per worker; a "
                                            f"core may be named twice, e.g. \"0,1,1\")")
    if "pipes" in v:
        if not isinstance(v["pipes"], bool):
            raise ConfigError(f"{path}.pipes", f"must be true or false (got {v['pipes']!r})")
        out["pipes"] = v["pipes"]
    if "nf_sched" in v:
        if v["nf_sched"] not in ("other", "fifo"):
            raise ConfigError(f"{path}.nf_sched", f"must be other or fifo (got {v['nf_sched']!r})")
        out["nf_sched"] = v["nf_sched"]
    if out["ring_size"] * 4 > out["pool_mbufs"]:
        # one NF may hold a whole ring's worth of buffers (sluiced checks the same)
        raise ConfigError(f"{path}.ring_size",
                          f"{out['ring_size']} is too large for pool_mbufs {out['pool_mbufs']} "
                          f"(need pool_mbufs >= 4 x ring_size)")
    return out


def _buffer_size(v, path):
    n = _int(v, path, BUFFER_SIZE_MIN, BUFFER_SIZE_MAX)
    if n % BUFFER_SIZE_ALIGN:
        raise ConfigError(path, f"{n} is not a multiple of {BUFFER_SIZE_ALIGN} (e.g. 9216 for a 9000-byte MTU)")
    return n


def _region_size(mbufs, buffer_size, path):
    """A domain's region (mbufs buffers of headroom + buffer_size bytes) stays below 4 GiB."""
    total = mbufs * (buffer_size + HEADROOM)
    if total > REGION_MAX_BYTES:
        raise ConfigError(path, f"{mbufs} buffers of {buffer_size + HEADROOM} bytes (buffer_size {buffer_size} + "
                                f"{HEADROOM} headroom) make a region of {total / (1 << 30):.1f} GiB; a region is "
                                "at most 4 GiB (descriptor offsets are 32-bit): lower pool_mbufs or buffer_size")


def _lcores(v, path):
    if isinstance(v, list):
        parts = v
    elif isinstance(v, str):
        parts = [p.strip() for p in v.split(",")]
    else:
        raise ConfigError(path, f"must be a string \"MAIN,WORKER\" such as \"0,1\" (got {_type_name(v)})")
    nums = []
    for p in parts:
        if isinstance(p, bool):
            p = None
        if isinstance(p, int):
            n = p
        elif isinstance(p, str) and p.isascii() and p.isdigit():  # int() refuses '²', which isdigit() takes
            n = int(p)
        else:
            raise ConfigError(path, f"must be \"MAIN,WORKER\" lcore numbers such as \"0,1\" (got {v!r})")
        if n > 1023:
            raise ConfigError(path, f"lcore {n} out of range 0..1023")
        nums.append(n)
    if len(nums) < 2:
        raise ConfigError(path, f"must name at least two lcores \"MAIN,WORKER\" (got {v!r})")
    if nums[0] == nums[1]:
        raise ConfigError(path, f"main and (first) worker lcore must differ (got {v!r})")
    return ",".join(map(str, nums))


def _vdev(v, path):
    _str(v, path)
    if len(v.encode()) > 255:
        raise ConfigError(path, f"too long ({len(v.encode())} bytes; sluiced takes at most 255)")
    if any(c.isspace() for c in v):
        raise ConfigError(path, f"must not contain whitespace (got {v!r})")
    if v.startswith("pci:"):
        if not PCI_RE.match(v):
            raise ConfigError(path, f"PCI address must look like pci:0000:00:00.0 (got {v!r})")
        return v
    if not VDEV_RE.match(v):
        raise ConfigError(path, "must be a DPDK vdev starting with 'net_' (e.g. "
                                f"net_af_packet0,iface=eth1) or pci:DDDD:BB:DD.F (got {v!r})")
    if _vdev_device(v).startswith("net_vhost"):
        _vhost_args(v, path)
    return v


def _vdev_args(vdev):
    """{key: value} of a vdev string's arguments (after the device name)."""
    return dict(a.partition("=")[::2] for a in vdev.split(",")[1:] if a)


def _vhost_args(vdev, path):
    """net_vhost (vhost-user, docs/guests.md): iface= is the socket's absolute path (sluiced listens
    there unless client=1); sluiced uses one queue per port."""
    args = _vdev_args(vdev)
    iface = args.get("iface", "")
    if not iface.startswith("/"):
        raise ConfigError(path, f"net_vhost needs iface=/absolute/path/of/the/vhost-user.sock (got {vdev!r})")
    if len(iface) > SUN_PATH_MAX:
        raise ConfigError(path, f"iface {iface!r} is longer than a UNIX socket path may be ({SUN_PATH_MAX})")
    if args.get("queues", "1") != "1":
        raise ConfigError(path, f"queues={args['queues']}: sluiced uses one queue per port (queues=1 or none)")
    return iface


def vhost_socket(port):
    """The vhost-user socket path of a normalized net_vhost port entry, else None."""
    if not _vdev_device(port["vdev"]).startswith("net_vhost"):
        return None
    return _vdev_args(port["vdev"]).get("iface")


def _vdev_device(vdev):
    """The device name a vdev string creates (before the first comma)."""
    return vdev.split(",", 1)[0]


# ports[].offloads (docs/ports.md "PCI NICs"); sluiced's port_offload_names
PORT_OFFLOADS = ("rx_checksum", "vlan_strip", "vlan_insert")
PORT_MTU_MIN, PORT_MTU_MAX = 68, 9600
PORT_DESC_MIN, PORT_DESC_MAX = 64, 16384
PORT_OPTIONS = ("rx_desc", "tx_desc", "mtu", "offloads")
QUEUES_MAX = 8  # ports[].queues at most (sluiced.h SL_MAX_QUEUES)


def _queues(v, path):
    """ports[].queues: RX queues 1..8 (docs/ports.md "Multi-queue ports")."""
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= QUEUES_MAX:
        raise ConfigError(path, f"must be 1..{QUEUES_MAX} (got {v!r})")
    return v


def _port(v, path, buffer_size=BUFFER_SIZE_DEFAULT):
    _mapping(v, path, ["name", "vdev", "chain", "queues", *PORT_OPTIONS])
    for req in ("name", "vdev"):
        if req not in v:
            raise ConfigError(f"{path}.{req}", "required")
    out = {"name": _name(v["name"], f"{path}.name"), "vdev": _vdev(v["vdev"], f"{path}.vdev"), "chain": None,
           "queues": 1 if v.get("queues") is None else _queues(v["queues"], f"{path}.queues")}
    if v.get("chain") is not None:
        out["chain"] = _name(v["chain"], f"{path}.chain")
    for k in ("rx_desc", "tx_desc"):  # only when given: the JSON of a port without options is as before
        if v.get(k) is not None:
            out[k] = _pow2(v[k], f"{path}.{k}", PORT_DESC_MIN, PORT_DESC_MAX)
    if v.get("mtu") is not None:
        mtu = out["mtu"] = _int(v["mtu"], f"{path}.mtu", PORT_MTU_MIN, PORT_MTU_MAX)
        if mtu + 18 > buffer_size:
            need = -(-(mtu + 18) // BUFFER_SIZE_ALIGN) * BUFFER_SIZE_ALIGN
            raise ConfigError(f"{path}.mtu", f"{mtu} needs frames of {mtu + 18} bytes (MTU + 14 bytes of Ethernet "
                                             f"header + 4 of a VLAN tag), but a buffer holds {buffer_size} "
                                             "(sluiced.buffer_size; a frame is carried in one buffer): set "
                                             f"sluiced.buffer_size to at least {need}, or lower the MTU")
    if v.get("offloads") is not None:
        out["offloads"] = _offloads(v["offloads"], f"{path}.offloads")
    dev = _vdev_device(out["vdev"])
    qpairs = _vdev_args(out["vdev"]).get("qpairs", "1")
    qpairs = qpairs if qpairs.isascii() and qpairs.isdigit() else None  # int() refuses '²' (isdigit() takes it)
    if dev.startswith(("net_af_packet", "eth_af_packet")) and qpairs and int(qpairs) != out["queues"]:
        # its qpairs sockets form one fanout group: the kernel spreads frames over all of them
        raise ConfigError(f"{path}.queues", f"net_af_packet with qpairs={qpairs} receives on {qpairs} queues; "
                                            f"set queues: {qpairs} (got {out['queues']})")
    if dev.startswith("net_vhost") and out["queues"] != 1:
        raise ConfigError(f"{path}.queues", f"net_vhost ports have one queue (got {out['queues']})")
    return out


def _offloads(v, path):
    if isinstance(v, str):
        raise ConfigError(path, f"must be a list, e.g. [{v}] (got string)")
    _list(v, path)
    out = []
    for i, o in enumerate(v):
        if o == "tx_checksum":
            raise ConfigError(f"{path}[{i}]", "tx_checksum is not offered yet: the device computes a checksum only "
                                              "for packets whose mbuf asks for it, and NFs cannot ask (the descriptor "
                                              "has no room for it); NFs fix checksums themselves (docs/ports.md "
                                              "\"PCI NICs\")")
        if not isinstance(o, str) or o not in PORT_OFFLOADS:
            got = repr(o) if isinstance(o, str) else f"{_type_name(o)} {o!r}"
            raise ConfigError(f"{path}[{i}]", f"must be one of {', '.join(PORT_OFFLOADS)} (got {got})")
        if o in out:
            raise ConfigError(f"{path}[{i}]", f"{o} is listed twice")
        out.append(o)
    return out


def sysfs_root():
    """The sysfs root: $SLUICE_SYSFS_ROOT (tests only: a fake tree), else /sys (sluiced reads the same)."""
    return os.environ.get("SLUICE_SYSFS_ROOT") or "/sys"


def _link_base(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return ""


def pci_device_problem(bdf, root=None):
    """Why the PCI device bdf ("0000:03:00.0") cannot be a DPDK port on this machine, from sysfs, or
    None if it looks usable (bound to vfio-pci with an IOMMU group or vfio's no-IOMMU mode, or to
    uio_pci_generic / igb_uio). The same reasons and words as sluiced (src/manager/pcisys.c)."""
    root = root or sysfs_root()
    bdf = bdf.lower()
    dev = f"{root}/bus/pci/devices/{bdf}"
    if not os.path.exists(dev):
        return f"no PCI device {bdf} on this machine (nothing at {dev}; `lspci -D` lists the devices)"
    drv, grp = _link_base(f"{dev}/driver"), _link_base(f"{dev}/iommu_group")
    try:
        with open(f"{root}/module/vfio/parameters/enable_unsafe_noiommu_mode") as f:
            noiommu = f.read(1) in ("Y", "y", "1")
    except OSError:
        noiommu = False
    uio = drv in ("uio_pci_generic", "igb_uio")
    howto = (f"modprobe vfio-pci; echo vfio-pci > {root}/bus/pci/devices/{bdf}/driver_override; "
             f"echo {bdf} > {root}/bus/pci/drivers_probe (or: dpdk-devbind.py -b vfio-pci {bdf})")
    no_group = ("enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line) or vfio's "
                "no-IOMMU mode")
    if drv != "vfio-pci" and not uio:
        if drv:
            msg = (f"PCI device {bdf} is bound to {drv}, not vfio-pci (DPDK uses only devices bound to vfio-pci or "
                   f"uio_pci_generic): unbind and bind it: echo {bdf} > {dev}/driver/unbind; {howto}")
        else:
            msg = (f"PCI device {bdf} is bound to no driver, not vfio-pci (DPDK uses only devices bound to "
                   f"vfio-pci or uio_pci_generic): bind it: {howto}")
        if not grp and not noiommu:
            msg += f"; it has no IOMMU group either: {no_group} first"
        return msg
    if not uio and not grp and not noiommu:
        return (f"PCI device {bdf} is bound to vfio-pci but has no IOMMU group: {no_group} (echo 1 > "
                "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode, then bind the device again)")
    return None


def _chain(v, path):
    _mapping(v, path, ["name", "nfs", "exit"])
    for req in ("name", "nfs"):
        if req not in v:
            raise ConfigError(f"{path}.{req}", "required")
    out = {"name": _name(v["name"], f"{path}.name"), "nfs": [], "exit": None}
    nfs = v["nfs"]
    if isinstance(nfs, str):
        raise ConfigError(f"{path}.nfs", f"must be a list of service names, e.g. [{nfs}] (got string)")
    _list(nfs, f"{path}.nfs", 1, "service")
    if len(nfs) > CHAIN_MAX:
        raise ConfigError(f"{path}.nfs", f"{len(nfs)} services; a chain has at most {CHAIN_MAX}")
    out["nfs"] = [_name(s, f"{path}.nfs[{i}]") for i, s in enumerate(nfs)]
    if v.get("exit") is not None:
        out["exit"] = _name(v["exit"], f"{path}.exit")
    return out


def default_sandbox(nf):
    """The sandbox of an NF entry that names none. The one place that decides it: `strict` for an
    untrusted NF (trusted: false, a private trust domain of its own), `none` otherwise."""
    if nf.get("vm"):
        return "none"  # a guest NF: its VM isolates it (docs/guests.md)
    return "strict" if nf.get("trusted") is False else "none"


def _sandbox(v, path):
    if isinstance(v, str) and v in SANDBOX_MODES:
        return v
    got = repr(v) if isinstance(v, str) else f"{_type_name(v)} {v!r}"
    raise ConfigError(path, f"must be strict or none (got {got})")


def _cpus(v, path):
    """A CPU list as taskset -c takes it ("0", "0,2", "1-3", or an int) -> sorted list of CPU numbers
    this machine has."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ConfigError(path, f"must be a CPU list like \"0\" or \"2-3,5\" (got {_type_name(v)})")
    have = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    cpus = set()
    for part in str(v).split(","):
        lo, dash, hi = part.strip().partition("-")
        if not (lo + hi).isascii() or not lo.isdigit() or (dash and not hi.isdigit()):
            raise ConfigError(path, f"must be a CPU list like \"0\" or \"2-3,5\" (got {v!r})")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ConfigError(path, f"{part.strip()!r}: a range must go up")
        cpus.update(range(a, b + 1))
    missing = sorted(c for c in cpus if have and c not in have)
    if missing:
        raise ConfigError(path, f"CPU {missing[0]} is not one this machine lets us use "
                                f"(available: {','.join(map(str, sorted(have)))})")
    return sorted(cpus)


def _nf(v, path, base_dir, check_programs):
    _mapping(v, path, ["name", "program", "policy", "cpu_weight", "cpus", "sandbox", "quota", "may_send",
                       "domain", "trusted", "access", "pool_mbufs", "vm", "group"] + list(NF_DEFAULTS))
    for req in ("name", "program"):
        if req not in v:
            raise ConfigError(f"{path}.{req}", "required")
    out = {"name": _name(v["name"], f"{path}.name")}
    out["program"] = _str(v["program"], f"{path}.program")
    if check_programs:
        out["program_path"] = _program(out["program"], f"{path}.program", base_dir)
    args = v.get("args", [])
    if args is None:
        args = []
    _list(args, f"{path}.args")
    for i, a in enumerate(args):
        if isinstance(a, bool) or not isinstance(a, (str, int, float)):
            raise ConfigError(f"{path}.args[{i}]", f"must be a string (got {_type_name(a)})")
        if isinstance(a, str):
            _text(a, f"{path}.args[{i}]")
    out["args"] = [str(a) for a in args]
    out["instances"] = _int(v.get("instances", 1), f"{path}.instances", 1, 1024)
    longest = f"{out['name']}.{out['instances'] - 1}"
    if len(longest) > NAME_MAX:
        raise ConfigError(f"{path}.instances",
                          f"instance name {longest!r} would exceed {NAME_MAX} characters; "
                          "use a shorter service name")
    out["wakeup"] = _choice(v.get("wakeup", "poll"), f"{path}.wakeup", WAKEUP_MODES)
    out["batch"] = _int(v.get("batch", 32), f"{path}.batch", 1, 65536)
    out["timeout_us"] = _int(v.get("timeout_us", 100), f"{path}.timeout_us", 0, 10_000_000)
    out["spin_us"] = _int(v.get("spin_us", 200), f"{path}.spin_us", 0, 10_000_000)
    out["restart"] = _choice(v.get("restart", "on-failure"), f"{path}.restart", RESTART_POLICIES)
    # CPU share under contention (cgroup cpu.weight semantics; python/sluice/cgroups.py); None: no group
    if v.get("cpu_weight") is not None:
        out["cpu_weight"] = _int(v["cpu_weight"], f"{path}.cpu_weight", 1, 10000)
    # CPUs its processes may run on (sched_setaffinity before exec), e.g. "0" or "2-3,5"
    if v.get("cpus") is not None:
        out["cpus"] = _cpus(v["cpus"], f"{path}.cpus")
    # how sluiced picks one of the instances (docs/steering.md "Services and replicas")
    out["policy"] = _choice(v.get("policy", "flow"), f"{path}.policy", steering.POLICIES)
    # trust domains (docs/architecture.md "Memory"): trusted: false puts the NF in a private domain
    # of its own (named after the NF, sized by pool_mbufs or 2 x instances x ring_size, see normalize)
    trusted = v.get("trusted", True)
    if not isinstance(trusted, bool):
        raise ConfigError(f"{path}.trusted", f"must be true or false (got {_type_name(trusted)})")
    out["trusted"] = trusted
    if not trusted and v.get("domain") is not None:
        raise ConfigError(f"{path}.domain", "an NF with trusted: false has a private domain of its own; "
                                            "drop domain: or trusted: false")
    out["domain"] = _name(v["domain"], f"{path}.domain") if v.get("domain") is not None \
        else (out["name"] if not trusted else "default")
    if v.get("pool_mbufs") is not None:
        if trusted:
            raise ConfigError(f"{path}.pool_mbufs", "only for an NF with trusted: false (its private domain's "
                                                    "pool); size a named domain under domains:")
        out["pool_mbufs"] = _int(v["pool_mbufs"], f"{path}.pool_mbufs", 1024, 1048576)
    out["access"] = _choice(v.get("access", "rw"), f"{path}.access", ACCESS_MODES)
    # strict: own uid, empty network namespace, seccomp filter from the run loop on (docs/abi.md)
    out["sandbox"] = _sandbox(v["sandbox"], f"{path}.sandbox") if v.get("sandbox") is not None \
        else default_sandbox(out)
    # buffers one instance may hold (<= sluiced.ring_size, checked in normalize); None: the ring size
    out["quota"] = _int(v["quota"], f"{path}.quota", 1, 65536) if v.get("quota") is not None else None
    # destinations it may name beyond its chains' (docs/abi.md "Next hops"): any, or service/port names
    ms = v.get("may_send")
    if ms is None:
        out["may_send"] = []
    elif ms == "any":
        out["may_send"] = "any"
    else:
        if isinstance(ms, str):
            raise ConfigError(f"{path}.may_send", f"must be any or a list of service and port names (got {ms!r})")
        out["may_send"] = [_name(x, f"{path}.may_send[{i}]") for i, x in enumerate(_list(ms, f"{path}.may_send"))]
    out["vm"] = _vm(v.get("vm"), f"{path}.vm", out, base_dir, sandbox_given=v.get("sandbox") is not None)
    # the group whose process runs it (docs/groups.md; checked with groups: in _groups); only when set
    if v.get("group") is not None:
        out["group"] = _name(v["group"], f"{path}.group")
    return out


def _image_files(v, path, base_dir, out):
    """A guest's own kernel and initrd (default: the build's guest image): existing files."""
    for k in ("kernel", "initrd"):
        if v.get(k) is not None:
            p = _str(v[k], f"{path}.{k}")
            if base_dir and not os.path.isabs(p):
                p = os.path.join(base_dir, p)
            if not os.path.isfile(p):
                raise ConfigError(f"{path}.{k}", f"no such file: {p}")
            out[k] = p


def _vm(v, path, nf, base_dir, sandbox_given):
    """nfs[].vm (docs/guests.md): run each instance in a KVM guest. true (defaults) or a mapping of
    memory (MiB), vcpus, kernel, initrd. None/false: a process."""
    if v is None or v is False:
        return None
    if v is True:
        v = {}
    _mapping(v, path, ["memory", "vcpus", "kernel", "initrd"])
    out = {"memory": _int(v.get("memory", 256), f"{path}.memory", 64, 65536),
           "vcpus": _int(v.get("vcpus", 1), f"{path}.vcpus", 1, 64)}
    _image_files(v, path, base_dir, out)
    if nf["sandbox"] == "strict" and not sandbox_given:
        nf["sandbox"] = "none"  # trusted: false: the VM is its sandbox (default_sandbox)
    if nf["sandbox"] == "strict":
        raise ConfigError(f"{path}", "sandbox: strict is for NF processes; a guest NF is isolated by its VM "
                                     "(set sandbox: none)")
    if nf["access"] == "ro":
        raise ConfigError(f"{path}", "access: ro is not supported for guest NFs (QEMU maps the region "
                                     "read-write)")
    if nf["program"] not in BUILTIN_NFS:
        raise ConfigError(f"{path}", f"program {nf['program']!r}: a guest runs the built-in NFs its image "
                                     "carries (scripts/guest-image.sh)")
    return out


IPV4_CIDR_RE = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})\Z")
MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}\Z")


def _ipv4(v, path, prefix):
    m = IPV4_CIDR_RE.match(v + ("" if prefix else "/32")) if isinstance(v, str) else None
    if not m or any(int(x) > 255 for x in m.groups()[:4]) or int(m.group(5)) > 32:
        raise ConfigError(path, f"must be an IPv4 address{'/PREFIX such as 10.0.0.1/24' if prefix else ''} "
                                f"(got {v!r})")
    return v


def _guest(v, path, base_dir):
    """guests[] (docs/guests.md "vhost-user ports and ordinary guests"): an ordinary VM whose only NIC
    is a virtio-net device on a net_vhost port; the supervisor runs it under QEMU from the guest image.
    The port is checked in normalize (it must exist and be net_vhost)."""
    _mapping(v, path, ["name", "port", "memory", "vcpus", "ip", "gw", "mtu", "mac", "command", "kernel",
                       "initrd", "restart"])
    for req in ("name", "port"):
        if req not in v:
            raise ConfigError(f"{path}.{req}", "required")
    out = {"name": _name(v["name"], f"{path}.name"), "port": _name(v["port"], f"{path}.port"),
           "memory": _int(v.get("memory", 256), f"{path}.memory", 64, 65536),
           "vcpus": _int(v.get("vcpus", 1), f"{path}.vcpus", 1, 64),
           "restart": _choice(v.get("restart", "on-failure"), f"{path}.restart", RESTART_POLICIES)}
    out["ip"] = _ipv4(v["ip"], f"{path}.ip", True) if v.get("ip") is not None else None
    out["gw"] = _ipv4(v["gw"], f"{path}.gw", False) if v.get("gw") is not None else None
    if out["gw"] and not out["ip"]:
        raise ConfigError(f"{path}.gw", "needs ip (the guest configures its interface only with ip)")
    out["mtu"] = _int(v["mtu"], f"{path}.mtu", 68, 65535) if v.get("mtu") is not None else None
    mac = v.get("mac")
    if mac is not None and not (isinstance(mac, str) and MAC_RE.match(mac) and not int(mac[:2], 16) & 1):
        raise ConfigError(f"{path}.mac", f"must be a unicast MAC such as 52:54:00:12:34:56 (got {mac!r})")
    out["mac"] = mac
    cmd = v.get("command")
    if cmd is not None:
        if isinstance(cmd, str):
            raise ConfigError(f"{path}.command", f"must be a list (the payload's argv), e.g. [/bin/sh, -c, {cmd!r}]")
        _list(cmd, f"{path}.command", 1, "word")
        for i, a in enumerate(cmd):
            if isinstance(a, bool) or not isinstance(a, (str, int, float)):
                raise ConfigError(f"{path}.command[{i}]", f"must be a string (got {_type_name(a)})")
            if isinstance(a, str):
                _text(a, f"{path}.command[{i}]")
        cmd = [str(a) for a in cmd]
        if "=" in cmd[0]:
            raise ConfigError(f"{path}.command[0]", "the program must not contain '=' (guest /init runs it with env)")
        if sum(len(a.encode()) + 1 for a in cmd) > 1200:
            raise ConfigError(f"{path}.command", "too long: it travels on the kernel command line "
                                                 "(at most about 1200 bytes)")
    out["command"] = cmd
    _image_files(v, path, base_dir, out)
    return out


def _program(prog, path, base_dir):
    """Resolve an NF program: a built-in name stays symbolic ('builtin:fwd',
    resolved against the build directory at launch), anything else must be an
    executable file (relative paths against the config file's directory) or a
    command on PATH."""
    if prog in BUILTIN_NFS:
        return f"builtin:{prog}"
    if "/" in prog:
        p = prog if os.path.isabs(prog) else os.path.join(base_dir or os.getcwd(), prog)
        p = os.path.normpath(p)
        if not os.path.isfile(p):
            raise ConfigError(path, f"no such file {p!r} (built-ins: {', '.join(BUILTIN_NFS)})")
        if not os.access(p, os.X_OK):
            raise ConfigError(path, f"{p!r} is not executable")
        return p
    found = shutil.which(prog)
    if not found:
        raise ConfigError(path, f"unknown program {prog!r}: not a built-in NF, not a path, not on PATH "
                                f"(built-ins: {', '.join(BUILTIN_NFS)})")
    return os.path.abspath(found)


# -------------------------------------------------------------------- public

# `metrics:` (docs/observability.md "Metrics"): `sluice up` also serves sluiced's counters for Prometheus
# (`sluice metrics --listen`), supervised like the socket service. `web:` ("Web view") likewise the web view
# (`sluice web --listen`).
METRICS_DEFAULT_LISTEN = "127.0.0.1:9464"
WEB_DEFAULT_LISTEN = "127.0.0.1:9465"


def _served(v, path, default):
    """metrics: / web: true | null (the key alone) | {listen: HOST:PORT}: served on that address (loopback
    `default` when not given); false: not served. Returns {"listen": ...} or None."""
    if v is False:
        return None
    if v is None or v is True:
        return {"listen": default}
    if not isinstance(v, dict):
        raise ConfigError(path, f"must be true, false or a mapping with listen (got {_type_name(v)} {v!r})")
    _mapping(v, path, ["listen"])
    listen = v.get("listen", default)
    from .exporter.listen import parse_listen
    try:
        parse_listen(listen, example=default)
    except ValueError as e:
        raise ConfigError(f"{path}.listen", str(e)) from None
    return {"listen": listen}


def _metrics(v, path="metrics"):
    return _served(v, path, METRICS_DEFAULT_LISTEN)


def _stack_user_chains(user, cfg, chain_idx, port_idx, buffer_size):
    """stack.user's chains: egress_chain starts with the service and exits on a port (sluiced sends the
    stack's frames along the first chain that does both); every other chain with the service ends with it
    and has no exit: those bring its traffic in."""
    svc, path = user["service"], "stack.user"
    ec = user["egress_chain"]
    if ec not in chain_idx:
        raise ConfigError(f"{path}.egress_chain", f"unknown chain {ec!r}" + _known(chain_idx))
    c = cfg["chains"][chain_idx[ec]]
    if c["nfs"][0] != svc:
        raise ConfigError(f"{path}.egress_chain", f"chain {ec!r} must start with the stack's service {svc!r} "
                                                  f"(e.g. nfs: [{svc}, firewall, monitor])")
    if c["exit"] is None:
        raise ConfigError(f"{path}.egress_chain", f"chain {ec!r} needs an exit port: the stack's frames leave by it")
    ingress = []
    for i, ch in enumerate(cfg["chains"]):
        if ch["name"] == ec or svc not in ch["nfs"]:
            continue
        j = ch["nfs"].index(svc)
        if j != len(ch["nfs"]) - 1 or ch["exit"] is not None:
            raise ConfigError(f"chains[{i}]" + (".exit" if j == len(ch["nfs"]) - 1 else f".nfs[{j}]"),
                              f"the stack's service {svc!r} takes in what reaches it: chain {ch['name']!r} must end "
                              f"with it, with no exit (only {path}.egress_chain goes on from it)")
        ingress.append(ch["name"])
    if not ingress:
        raise ConfigError(f"{path}.service", f"no chain brings traffic to {svc!r}: add a chain that ends with it "
                                             f"(e.g. nfs: [firewall, {svc}]) and name it in a port's chain or a rule")
    if user["mtu"] + 18 > buffer_size - 128:
        raise ConfigError(f"{path}.mtu", f"{user['mtu']} does not fit sluiced's buffers (buffer_size {buffer_size}: "
                                         f"at most {buffer_size - 128 - 18})")


def normalize(data, base_dir=None, check_programs=True, check_devices=None):
    """Validate a parsed config (dict) and return a new dict with every default
    filled in. Raises ConfigError naming the first bad field.

    check_programs: resolve each NF program (adds 'program_path'); off, only its
    type is checked. check_devices: check that each pci: port's device is on this machine and
    usable by DPDK (sysfs: pci_device_problem); default: as check_programs (both are checks
    against this machine)."""
    _mapping(data, "", ["sluiced", "ports", "chains", "nfs", "rules", "steering", "domains", "guests", "stack",
                        "groups", "metrics", "web"])
    cfg = {"sluiced": _sluiced(data.get("sluiced"))}
    if "stack" in data:
        stack = _stack(data["stack"])
        if stack is not None:
            cfg["stack"] = stack
            sd = cfg["sluiced"]["socket_dir"]
            if len(sd) + len("/stack-ctl.sock") > SUN_PATH_MAX:
                raise ConfigError("sluiced.socket_dir", f"too long for the socket service's stack-ctl.sock "
                                                        f"({len(sd)} characters; at most "
                                                        f"{SUN_PATH_MAX - len('/stack-ctl.sock')} with stack:)")

    if "metrics" in data:
        metrics = _metrics(data["metrics"])
        if metrics is not None:
            cfg["metrics"] = metrics
    if "web" in data:
        web = _served(data["web"], "web", WEB_DEFAULT_LISTEN)
        if web is not None:
            if web["listen"] == (cfg.get("metrics") or {}).get("listen"):
                raise ConfigError("web.listen", f"{web['listen']} is metrics.listen too; give each its own port")
            cfg["web"] = web

    if data.get("ports") is None:
        raise ConfigError("ports", "required (a list of at least one port)")
    ports = _list(data["ports"], "ports", 1, "port")
    if len(ports) > MAX_PORTS:
        raise ConfigError("ports", f"{len(ports)} ports; sluiced serves at most {MAX_PORTS}")
    cfg["ports"] = [_port(p, f"ports[{i}]", cfg["sluiced"]["buffer_size"]) for i, p in enumerate(ports)]
    if check_devices is None:
        check_devices = check_programs
    for i, p in enumerate(cfg["ports"]):  # against this machine: `config check --no-devices` skips it
        if check_devices and p["vdev"].startswith("pci:"):
            problem = pci_device_problem(p["vdev"][4:])
            if problem:
                raise ConfigError(f"ports[{i}].vdev", problem)

    chains = data.get("chains")
    chains = [] if chains is None else _list(chains, "chains")
    cfg["chains"] = [_chain(c, f"chains[{i}]") for i, c in enumerate(chains)]

    nfs = data.get("nfs")
    nfs = [] if nfs is None else _list(nfs, "nfs")
    cfg["nfs"] = [_nf(n, f"nfs[{i}]", base_dir, check_programs) for i, n in enumerate(nfs)]

    port_idx = _unique_names(cfg["ports"], "ports")
    chain_idx = _unique_names(cfg["chains"], "chains")
    nf_idx = _unique_names(cfg["nfs"], "nfs")

    devices = {}
    for i, p in enumerate(cfg["ports"]):
        dev = _vdev_device(p["vdev"])
        if dev in devices:
            raise ConfigError(f"ports[{i}].vdev", f"device {dev!r} already used by ports[{devices[dev]}]")
        devices[dev] = i

    for i, p in enumerate(cfg["ports"]):
        if p["chain"] is not None and p["chain"] not in chain_idx:
            raise ConfigError(f"ports[{i}].chain", f"unknown chain {p['chain']!r}" + _known(chain_idx))
    user = (cfg.get("stack") or {}).get("user")
    user_svc = user["service"] if user else None
    if user_svc in nf_idx:
        raise ConfigError("stack.user.service", f"{user_svc!r} is nfs[{nf_idx[user_svc]}]'s name too: the user stack "
                                                f"attaches as a service of its own")
    for i, c in enumerate(cfg["chains"]):
        for j, s in enumerate(c["nfs"]):
            if s not in nf_idx and s != user_svc:
                raise ConfigError(f"chains[{i}].nfs[{j}]", f"unknown service {s!r}" + _known(nf_idx))
        if c["exit"] is not None and c["exit"] not in port_idx:
            raise ConfigError(f"chains[{i}].exit", f"unknown port {c['exit']!r}" + _known(port_idx))

    for i, nf in enumerate(cfg["nfs"]):
        if nf["quota"] is not None and nf["quota"] > cfg["sluiced"]["ring_size"]:
            raise ConfigError(f"nfs[{i}].quota", f"{nf['quota']} is more than sluiced.ring_size "
                                                 f"{cfg['sluiced']['ring_size']} (an NF can hold at most a ring)")
        if nf["may_send"] != "any":
            for j, x in enumerate(nf["may_send"]):
                if x not in nf_idx and x not in port_idx:
                    raise ConfigError(f"nfs[{i}].may_send[{j}]", f"unknown service or port {x!r}"
                                      + _known(set(nf_idx) | set(port_idx)))

    if user:
        _stack_user_chains(user, cfg, chain_idx, port_idx, buffer_size=cfg["sluiced"]["buffer_size"])

    domains = _domains(data.get("domains"), cfg)
    if domains:  # absent: only the default domain
        cfg["domains"] = domains

    # steering (docs/steering.md): services are the NF names plus those the chains name
    services = set(nf_idx) | ({user_svc} if user_svc else set())
    rules = data.get("rules")
    rules = [] if rules is None else _list(rules, "rules")
    if rules:
        cfg["rules"] = [steering.normalize_rule(r, f"rules[{i}]", set(port_idx), set(chain_idx), services)
                        for i, r in enumerate(rules)]
    st = steering.normalize_steering(data.get("steering"), "steering", set(port_idx), set(chain_idx), services)
    if st:
        cfg["steering"] = st

    guests = data.get("guests")
    if guests is not None:
        cfg["guests"] = _guests(_list(guests, "guests"), cfg, base_dir)

    cfg["groups"] = _groups(data.get("groups"), cfg)
    # Members hand packets to the next member through their pipes, in the same thread and turn (run to
    # completion, docs/groups.md): with groups, pipes are on unless the config says sluiced.pipes: false
    if cfg["groups"] and "pipes" not in (data.get("sluiced") or {}):
        cfg["sluiced"]["pipes"] = True

    if len(instance_names(cfg)) > cfg["sluiced"]["max_nfs"]:
        raise ConfigError("sluiced.max_nfs", f"{len(instance_names(cfg))} NF instances configured "
                                             f"but max_nfs is {cfg['sluiced']['max_nfs']}")
    return cfg


def _guests(v, cfg, base_dir):
    """guests: each on its own net_vhost port of this config, names unique (and not an NF service's)."""
    out = [_guest(g, f"guests[{i}]", base_dir) for i, g in enumerate(v)]
    _unique_names(out, "guests")
    ports = {p["name"]: p for p in cfg["ports"]}
    services = {nf["name"] for nf in cfg["nfs"]}
    used = {}
    for i, g in enumerate(out):
        path = f"guests[{i}]"
        if g["name"] in services:
            raise ConfigError(f"{path}.name", f"{g['name']!r} is also an NF service name; choose another")
        p = ports.get(g["port"])
        if p is None:
            raise ConfigError(f"{path}.port", f"unknown port {g['port']!r}" + _known(ports))
        if vhost_socket(p) is None:
            raise ConfigError(f"{path}.port", f"port {g['port']!r} is {_vdev_device(p['vdev'])!r}; a guest needs a "
                                              "net_vhost port (vdev: net_vhost0,iface=/path/to.sock)")
        if _vdev_args(p["vdev"]).get("client", "0") not in ("0", ""):
            raise ConfigError(f"{path}.port", f"port {g['port']!r} is a vhost-user client (client=1): QEMU "
                                              "connects to sluiced, so sluiced must be the server")
        if g["port"] in used:
            raise ConfigError(f"{path}.port", f"port {g['port']!r} already serves guests[{used[g['port']]}] "
                                              "(one guest per vhost-user port)")
        used[g["port"]] = i
    return out


# ------------------------------------------------------------------- groups
#
# NF groups (docs/groups.md, issue 37): NFs that trust each other may share one process, sluice-group,
# which runs them as members, each attached to sluiced as an NF of its own. Two forms, which may be mixed:
#
#   groups: [{name: edge, nfs: [fw, nat], cpus: "1", wakeup: block, restart: always}]
#   nfs: [{name: fw, program: firewall, group: edge}, ...]      # sugar: the NFs naming it make the group
#
# Without a top-level `groups:` list, nfs[].group makes groups implicitly; with one, nfs[].group must name
# one of its groups (and adds the NF to it: a groups[] entry may then leave out `nfs`). An NF is in at
# most one group. Members run the plugin form of a built-in NF (sluice-nf-<program>.so), so a member
# must be a built-in, trusted (not trusted: false), rw, not a guest, and without a sandbox (one process
# has one sandbox, and sluice-group runs its members without one); all members are in one trust domain.
#
# Instances: every member has the same `instances` count N, and the group has N processes: group
# instance k (process "<group>.<k>") hosts instance k of every member (<service>.<k>). A group's wakeup,
# restart policy, cpus (and cpu_weight) are the group's own when set, else its members' common value
# (an error when they differ). Normalized: cfg["groups"] = [{name, nfs, cpus, wakeup, restart,
# instances}] (plus cpu_weight when the members set one), and each member's nfs[] entry gets "group".

GROUP_KEYS = ("name", "nfs", "cpus", "wakeup", "restart")


def _group_name_free(name, path, nf_idx, guest_names):
    if name in nf_idx:
        raise ConfigError(path, f"group name {name!r} is also an NF service name; give the group a name of its own")
    if name in guest_names:
        raise ConfigError(path, f"group name {name!r} is also a guest's name; give the group a name of its own")


def _groups(v, cfg):
    """groups: and nfs[].group -> the normalized group list (see above)."""
    declared = v is not None
    v = [] if v is None else _list(v, "groups")
    nf_idx = {nf["name"]: i for i, nf in enumerate(cfg["nfs"])}
    guest_names = {g["name"] for g in cfg.get("guests") or []}
    groups, by_name = [], {}
    member_of = {}  # service -> (group, where it joined)
    for i, g in enumerate(v):
        path = f"groups[{i}]"
        _mapping(g, path, list(GROUP_KEYS))
        if "name" not in g:
            raise ConfigError(f"{path}.name", "required")
        name = _name(g["name"], f"{path}.name")
        if name in by_name:
            raise ConfigError(f"{path}.name", f"duplicate group {name!r} (also {by_name[name]['path']})")
        _group_name_free(name, f"{path}.name", nf_idx, guest_names)
        ent = {"name": name, "path": path, "given": g, "members": []}
        nfs = g.get("nfs")
        if nfs is not None:
            if isinstance(nfs, str):
                raise ConfigError(f"{path}.nfs", f"must be a list of service names, e.g. [{nfs}] (got string)")
            for j, svc in enumerate(_list(nfs, f"{path}.nfs")):
                where = f"{path}.nfs[{j}]"
                _name(svc, where)
                if svc not in nf_idx:
                    raise ConfigError(where, f"unknown service {svc!r}" + _known(nf_idx))
                if svc in member_of:
                    prev, pwhere = member_of[svc]
                    raise ConfigError(where, f"service {svc!r} is already in group {prev!r} ({pwhere}); an NF "
                                             "belongs to at most one group")
                member_of[svc] = (name, where)
                ent["members"].append(svc)
        by_name[name] = ent
        groups.append(ent)
    for i, nf in enumerate(cfg["nfs"]):
        gname = nf.get("group")
        if gname is None:
            continue
        where = f"nfs[{i}].group"
        if gname not in by_name:
            if declared:
                raise ConfigError(where, f"unknown group {gname!r}" + _known(by_name)
                                  + " (with a groups: list, nfs[].group names one of its groups)")
            _group_name_free(gname, where, nf_idx, guest_names)
            by_name[gname] = {"name": gname, "path": None, "given": {}, "members": []}
            groups.append(by_name[gname])
        prev = member_of.get(nf["name"])
        if prev is not None:
            if prev[0] != gname:
                raise ConfigError(where, f"service {nf['name']!r} is in group {prev[0]!r} ({prev[1]}) but names "
                                         f"group {gname!r}; an NF belongs to at most one group")
            continue  # listed in groups[].nfs and naming the same group: one membership
        member_of[nf["name"]] = (gname, where)
        by_name[gname]["members"].append(nf["name"])
    return [_group(ent, cfg, nf_idx, member_of) for ent in groups]


def _group(ent, cfg, nf_idx, member_of):
    name, path, given = ent["name"], ent["path"], ent["given"]
    if not ent["members"]:
        raise ConfigError(f"{path}.nfs", f"group {name!r} has no members (list services in {path}.nfs, or name "
                                         "the group in nfs[].group)")
    members = [(nf_idx[svc], cfg["nfs"][nf_idx[svc]]) for svc in ent["members"]]

    def note(nf):
        return f"service {nf['name']!r} is in group {name!r} ({member_of[nf['name']][1]})"

    for i, nf in members:
        p = f"nfs[{i}]"
        if not nf["trusted"]:
            raise ConfigError(f"{p}.trusted", f"{note(nf)}, but trusted: false NFs run only as processes of their "
                                              "own (a group's members share one address space): take it out of "
                                              "the group")
        if nf["access"] == "ro":
            raise ConfigError(f"{p}.access", f"{note(nf)}, but access: ro maps the packet region read-only in the "
                                             "NF's own process, and a group's process maps it once for every "
                                             "member: take it out of the group or drop access: ro")
        if nf.get("vm"):
            raise ConfigError(f"{p}.vm", f"{note(nf)}, but a guest NF runs in a VM of its own, not in a group's "
                                         "process: take it out of the group or drop vm")
        if nf["program"] not in BUILTIN_NFS:
            raise ConfigError(f"{p}.program", f"{note(nf)}, but program {nf['program']!r} is not a built-in NF: a "
                                              "group runs its members' plugin form (sluice-nf-<name>.so), which "
                                              f"the built-ins have ({', '.join(BUILTIN_NFS)})")
        for j, a in enumerate(nf["args"]):
            if a == "--":
                raise ConfigError(f"{p}.args[{j}]", f"{note(nf)}: '--' separates the members on sluice-group's "
                                                    "command line, so a member's args cannot contain it")
    i0, first = members[0]
    for i, nf in members[1:]:
        p = f"nfs[{i}]"
        if nf["domain"] != first["domain"]:
            raise ConfigError(f"{p}.domain", f"{note(nf)}: its trust domain {nf['domain']!r} differs from "
                                             f"{first['domain']!r} of nfs[{i0}] ({first['name']!r}); a group's "
                                             "members share one process, so one trust domain")
        if nf["sandbox"] != first["sandbox"]:
            raise ConfigError(f"{p}.sandbox", f"{note(nf)}: sandbox {nf['sandbox']!r} differs from "
                                              f"{first['sandbox']!r} of nfs[{i0}] ({first['name']!r}); one "
                                              "process has one sandbox")
    if first["sandbox"] == "strict":
        raise ConfigError(f"nfs[{i0}].sandbox", f"{note(first)}, but sandbox: strict is per process and sluice-group "
                                                "runs its members without one: set sandbox: none or take it out "
                                                "of the group")
    for i, nf in members[1:]:
        if nf["instances"] != first["instances"]:
            raise ConfigError(f"nfs[{i}].instances", f"{note(nf)}: instances {nf['instances']} differs from "
                                                     f"{first['instances']} of nfs[{i0}] ({first['name']!r}); group "
                                                     "instance k hosts instance k of every member, so members "
                                                     "have one instance count")

    def common(key, what):
        """The members' common value of nfs[].key (None when unset everywhere); an error naming the
        first member that differs."""
        val = first.get(key)
        for i, nf in members[1:]:
            if nf.get(key) != val:
                fix = f"set {path}.{key}" if path else f"declare the group under groups: with {key}"
                raise ConfigError(f"nfs[{i}].{key}", f"{note(nf)}: {key} {nf.get(key)!r} differs from {val!r} of "
                                                     f"nfs[{i0}] ({first['name']!r}) and the group sets none; "
                                                     f"{what}: give its members one, or {fix}")
        return val

    one = "one thread runs every member"
    out = {"name": name, "nfs": [nf["name"] for _, nf in members]}
    out["cpus"] = _cpus(given["cpus"], f"{path}.cpus") if given.get("cpus") is not None \
        else common("cpus", "the group is one process")
    out["wakeup"] = _choice(given["wakeup"], f"{path}.wakeup", WAKEUP_MODES) if given.get("wakeup") is not None \
        else common("wakeup", one)
    out["restart"] = _choice(given["restart"], f"{path}.restart", RESTART_POLICIES) \
        if given.get("restart") is not None else common("restart", "the group restarts as one process")
    out["instances"] = first["instances"]
    weight = common("cpu_weight", "the group is one process")
    if weight is not None:
        out["cpu_weight"] = weight
    for _, nf in members:
        nf["group"] = name
    return out


def group_slots(cfg):
    """[(process name, group entry, k, [(instance name, nf entry)])] of a normalized config: group
    instance k, process "<group>.<k>", hosts instance k of every member."""
    nfs = {nf["name"]: nf for nf in cfg["nfs"]}
    return [(f"{g['name']}.{k}", g, k, [(f"{svc}.{k}", nfs[svc]) for svc in g["nfs"]])
            for g in cfg.get("groups") or [] for k in range(g["instances"])]


def _domains(v, cfg):
    """domains: [{name, pool_mbufs, buffer_size}] plus one private domain per trusted: false NF; checks
    every nfs[].domain. The list sluiced gets (domain 0, "default", is implicit: sluiced.pool_mbufs and
    sluiced.buffer_size). A domain without buffer_size (private ones too) has sluiced.buffer_size."""
    v = [] if v is None else _list(v, "domains")
    out, seen = [], {"default": None}
    private = {nf["name"]: i for i, nf in enumerate(cfg["nfs"]) if not nf["trusted"]}
    bsize = cfg["sluiced"]["buffer_size"]
    for i, d in enumerate(v):
        path = f"domains[{i}]"
        _mapping(d, path, ["name", "pool_mbufs", "buffer_size"])
        if "name" not in d:
            raise ConfigError(f"{path}.name", "required")
        name = _name(d["name"], f"{path}.name")
        if name == "default":
            raise ConfigError(f"{path}.name", "'default' always exists (it holds the ports); size it with "
                                              "sluiced.pool_mbufs")
        if name in seen:
            raise ConfigError(f"{path}.name", f"duplicate domain {name!r}")
        if name in private:
            raise ConfigError(f"{path}.name", f"{name!r} is the private domain of nfs[{private[name]}] "
                                              "(trusted: false); choose another name")
        seen[name] = i
        dom = {"name": name, "pool_mbufs": _int(d.get("pool_mbufs", 4096), f"{path}.pool_mbufs", 1024, 1048576),
               "buffer_size": _buffer_size(d["buffer_size"], f"{path}.buffer_size") if "buffer_size" in d
               else bsize}
        _region_size(dom["pool_mbufs"], dom["buffer_size"],
                     f"{path}.buffer_size" if "buffer_size" in d else f"{path}.pool_mbufs")
        out.append(dom)
    ring = cfg["sluiced"]["ring_size"]
    for i, nf in enumerate(cfg["nfs"]):
        if not nf["trusted"] and nf["name"] == "default":
            raise ConfigError(f"nfs[{i}].name", "an NF with trusted: false has a private domain named after it, and "
                                                "'default' is the default domain's (it holds the ports): rename the NF")
        if not nf["trusted"]:
            dom = {"name": nf["name"], "buffer_size": bsize,
                   "pool_mbufs": nf.get("pool_mbufs") or min(1048576, max(1024, 2 * nf["instances"] * ring))}
            _region_size(dom["pool_mbufs"], bsize, f"nfs[{i}].pool_mbufs")
            out.append(dom)
        elif nf["domain"] not in seen:
            raise ConfigError(f"nfs[{i}].domain", f"unknown domain {nf['domain']!r}"
                                                  + _known(set(seen)))
    if len(out) + 1 > MAX_DOMAINS:
        raise ConfigError("domains", f"{len(out) + 1} trust domains (default, {len(v)} named, "
                                     f"{len(out) - len(v)} private for trusted: false NFs); at most {MAX_DOMAINS}")
    return out


def _known(idx):
    if not idx:
        return " (none defined)"
    return " (known: " + ", ".join(sorted(idx)) + ")"


def validate(data, base_dir=None, check_programs=True, check_devices=None):
    """Raise ConfigError if data is not a valid config; return None."""
    normalize(data, base_dir=base_dir, check_programs=check_programs, check_devices=check_devices)


def instance_names(cfg):
    """[(instance name, nf entry)] for a normalized config, e.g. ('fwd.0', {...})."""
    return [(f"{nf['name']}.{i}", nf) for nf in cfg["nfs"] for i in range(nf["instances"])]


def new_tokens(cfg):
    """A fresh random attach token per service (docs/abi.md "Service tokens"): 32 hex characters. The user
    stack's service has one too (sluice-stackd attaches as it)."""
    t = {nf["name"]: secrets.token_hex(16) for nf in cfg["nfs"]}
    user = (cfg.get("stack") or {}).get("user")
    if user:
        t[user["service"]] = secrets.token_hex(16)
    return t


def to_sluiced_json(cfg, socket_dir=None, indent=2, tokens=None):
    """The JSON text handed to `sluiced --config`: the normalized config with
    supervisor-only fields (resolved program paths) removed. socket_dir, when
    given, overrides sluiced.socket_dir. tokens ({service: token}, new_tokens()): sluiced
    refuses NFs without their service's token (`sluiced.attach: token`; `sluice up` always
    passes them). Each NF's `may_send` becomes {"services", "ports"} (what it may name besides
    its chains' next services, exits and ingress ports, which sluiced derives from its live
    chains) or "any"."""
    out = copy.deepcopy(cfg)
    out.pop("guests", None)  # the supervisor's business: sluiced sees only their net_vhost ports
    out.pop("stack", None)   # the supervisor's business too: it runs sluice-stackd beside sluiced
    out.pop("metrics", None)  # and the exporter
    out.pop("web", None)      # and the web view
    out.pop("groups", None)  # so are groups (sluiced refuses the key): each member attaches as an NF
    if socket_dir is not None:
        out["sluiced"]["socket_dir"] = socket_dir
    ports = {p["name"] for p in cfg["ports"]}
    services = {nf["name"] for nf in cfg["nfs"]}
    if tokens is not None:
        out["sluiced"]["attach"] = "token"
    for nf in out["nfs"]:
        nf.pop("program_path", None)
        nf.pop("vm", None)  # the supervisor's business: sluiced sees the guest's NF like any other
        nf.pop("group", None)  # ... and a group's member like any other NF
        ms = nf.get("may_send", [])
        if ms != "any":
            nf["may_send"] = {"services": [x for x in ms if x in services],
                              "ports": [x for x in ms if x in ports]}
        if nf.get("quota") is None:
            nf.pop("quota", None)
        if tokens is not None:
            nf["token"] = tokens[nf["name"]]
    user = (cfg.get("stack") or {}).get("user")
    if user:  # sluice-stackd's user module attaches as this service (docs/sockets.md "The user module")
        entry = {"name": user["service"], "may_send": {"services": [], "ports": []}}
        if tokens is not None:
            entry["token"] = tokens[user["service"]]
        out["nfs"].append(entry)
    return json.dumps(out, indent=indent, sort_keys=False) + "\n"
