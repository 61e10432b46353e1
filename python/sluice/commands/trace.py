"""`sluice trace`: follow the next packets through the fabric, step by step, as VPP's trace does
(docs/observability.md "Trace")."""

import ipaddress
import json
import signal
import struct
import sys
import time

from ..client import SluiceError
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, add_common, client_for, die, sub

POLL_S = 0.05


def summary(head_hex, length):
    """'10.0.0.1:1000 > 10.0.0.2:53 udp' from a packet's first bytes (what can be read of them)."""
    b = bytes.fromhex(head_hex)
    if len(b) < 14:
        return f"{length} bytes"
    et, off = struct.unpack_from("!H", b, 12)[0], 14
    while et in (0x8100, 0x88A8) and len(b) >= off + 4:
        et, off = struct.unpack_from("!H", b, off + 2)[0], off + 4
    proto = src = dst = None
    if et == 0x0800 and len(b) >= off + 20:
        ihl = (b[off] & 15) * 4
        proto, src, dst = b[off + 9], ipaddress.ip_address(b[off + 12:off + 16]), ipaddress.ip_address(b[off + 16:off + 20])
        off += ihl
    elif et == 0x86DD and len(b) >= off + 40:
        proto, src, dst = b[off + 6], ipaddress.ip_address(b[off + 8:off + 24]), ipaddress.ip_address(b[off + 24:off + 40])
        off += 40
    else:
        return f"{length} bytes, ethertype {et:#06x}"
    name = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmp6"}.get(proto, f"proto {proto}")
    if proto in (6, 17) and len(b) >= off + 4:
        sp, dp = struct.unpack_from("!HH", b, off)
        return f"{src}:{sp} > {dst}:{dp} {name}, {length} bytes"
    return f"{src} > {dst} {name}, {length} bytes"


def render(trace, out=sys.stdout):
    pkts = trace.get("packets") or []
    if not pkts:
        print("no packet matched" + (f" '{trace['filter']}'" if trace.get("filter") else ""), file=out)
        return
    for i, p in enumerate(pkts, 1):
        state = "" if p["done"] else "  (still in the fabric when the trace ended)"
        print(f"Packet {i}: {summary(p['head'], p['len'])}, at +{p['t_ns'] / 1e9:.6f} s{state}", file=out)
        for s in p["steps"]:
            w = "ctl" if s["worker"] == 255 else f"w{s['worker']}"
            print(f"  {s['t_ns'] / 1e3:>10.3f} us  {w:<3}  {s['step']:<8}  {s['text']}", file=out)
        print(file=out)


def cmd_trace(args):
    if args.last:
        try:
            with client_for(args) as c:
                t = c.call("trace_last")["trace"]
        except SluiceError as e:
            return die(str(e))
        if args.json:
            print(json.dumps({"trace": t}, indent=2))
        elif t is None:
            print("no trace taken yet")
        else:
            render(t)
        return EXIT_OK
    if not 1 <= args.count <= 64:
        return die("-c: 1..64 packets", EXIT_USAGE)
    req = {"count": args.count}
    if args.port:
        req["port"] = args.port
    if args.filter:
        req["filter"] = args.filter
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends the wait, even in a background job
    client = client_for(args)
    try:
        client.call("trace_start", **req)
        where = f"port {args.port}" if args.port else "any port"
        print(f"sluice trace: waiting for {args.count} packet(s) at {where}"
              + (f" matching '{args.filter}'" if args.filter else "") + f" (up to {args.wait:g} s)",
              file=sys.stderr, flush=True)
        end = time.monotonic() + args.wait
        try:
            while time.monotonic() < end:
                g = client.call("trace_get")
                if g["marked"] == g["want"] and g["done"] == g["want"]:
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            pass
        t = client.call("trace_stop")["trace"]
    except SluiceError as e:
        return die(str(e))
    finally:
        client.close()
    if args.json:
        print(json.dumps({"trace": t}, indent=2))
    else:
        render(t)
    if t["marked"] < t["want"]:
        print(f"sluice trace: {t['marked']} of {t['want']} packets seen in {args.wait:g} s", file=sys.stderr)
        return EXIT_FAIL if t["marked"] == 0 else EXIT_OK
    return EXIT_OK


def register(subs):
    s = sub(subs, "trace", "follow the next packets through the fabric, every step with its time",
            "sluice trace --port client -c 3\n"
            "sluice trace -f 'tcp port 80' --json\n"
            "sluice trace --last            # the last trace again",
            description="Marks the next N packets that arrive at the port (any port without --port) and "
                        "match the filter (tcpdump's syntax), and prints each worker step they take: RX port "
                        "and queue, the steering decision (rule, flow-table hit or miss), the replica picked "
                        "and why, each NF with the action it set, copies at trust-domain boundaries, hand-offs "
                        "between workers, hops over NF-to-NF pipes and through fused group segments, and TX "
                        "or the drop with its reason. Times are from the packet's arrival.")
    s.add_argument("--port", metavar="NAME", help="mark packets arriving at this port (default: any)")
    s.add_argument("-f", "--filter", metavar="EXPR", help="a pcap-filter expression, e.g. 'udp port 53'")
    s.add_argument("-c", "--count", type=int, default=1, metavar="N", help="packets to follow, 1..64 (default 1)")
    s.add_argument("--wait", type=float, default=10.0, metavar="S",
                   help="give up waiting for packets after S seconds (default 10)")
    s.add_argument("--last", action="store_true", help="show the last trace taken")
    add_common(s, json_flag=True)
    s.set_defaults(func=cmd_trace)
