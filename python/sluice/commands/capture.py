"""`sluice capture`: copies of the packets at ports and NF hops, live, into a pcapng file
(docs/observability.md "Capture")."""

import json
import signal
import sys
import time

from ..capture import CaptureRing, PcapngWriter, RingError
from ..client import SluiceError
from .common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, add_common, client_for, die, sub

ACTIONS = {0: "next", 1: "to_nf", 2: "out", 3: "drop", 4: "out_set"}
PORT_HOPS = {"in": ["rx"], "out": ["tx"], "both": ["rx", "tx"]}
NF_HOPS = {"in": ["in"], "out": ["out"], "both": ["in", "out"]}
DIRECTION = {"rx": 1, "in": 1, "tx": 2, "out": 2}  # pcapng epb_flags: inbound, outbound
REPORT_EVERY_S = 1.0
PEER_CHECK_S = 0.2


def _points(args):
    pts = [{"port": p, "hop": h} for p in args.port or [] for h in PORT_HOPS[args.hop]]
    pts += [{"nf": n, "hop": h} for n in args.nf or [] for h in NF_HOPS[args.hop]]
    return pts


def _list(args):
    try:
        with client_for(args) as c:
            caps = c.call("captures")["captures"]
    except SluiceError as e:
        return die(str(e))
    if args.json:
        print(json.dumps({"captures": caps}, indent=2))
        return EXIT_OK
    if not caps:
        print("no capture running")
        return EXIT_OK
    print(f"{'ID':>4}  {'PACKETS':>10}  {'LOST':>8}  {'FILTER':<24}  POINTS")
    for k in caps:
        pts = ", ".join(f"{p['kind']} {p['name']} {p['hop']}" for p in k["points"])
        print(f"{k['id']:>4}  {k['packets']:>10}  {k['lost']:>8}  {(k['filter'] or '-'):<24}  {pts}")
    return EXIT_OK


def _open_output(path):
    if path == "-":
        if sys.stdout.isatty():
            raise ValueError("-w -: standard output is a terminal; pipe it (| tshark -r -) or name a file")
        return sys.stdout.buffer, False
    return open(path, "wb"), True


def cmd_capture(args):
    if args.list:
        return _list(args)
    if not args.port and not args.nf:
        return die("name a capture point: --port NAME or --nf NAME (either may be repeated)", EXIT_USAGE)
    if not args.write:
        return die("-w FILE is required (-w - writes to standard output, e.g. | tshark -r -)", EXIT_USAGE)
    if args.count is not None and args.count < 1:
        return die("-c: a positive number of packets", EXIT_USAGE)
    req = {"points": _points(args)}
    if args.filter:
        req["filter"] = args.filter
    if args.snaplen:
        req["snaplen"] = args.snaplen
    if args.buffer:
        req["buffer_kib"] = args.buffer
    client = client_for(args)
    try:
        ans = client.call("capture_start", **req)
    except SluiceError as e:
        client.close()
        return die(str(e))
    try:  # opened once sluiced took the capture: a refused one leaves no empty file
        out, owned = _open_output(args.write)
    except (OSError, ValueError) as e:
        client.close()  # which ends the capture
        return die(f"-w {args.write}: {getattr(e, 'strerror', None) or e}", EXIT_USAGE)
    try:
        return _run(args, client, ans, out)
    finally:
        client.close()
        if owned:
            out.close()


def _run(args, client, ans, out):
    ring = CaptureRing(ans["path"])
    points = ans["points"]
    writer = PcapngWriter(out, [(f"{p['name']}:{p['hop']}", f"sluice {p['kind']} {p['name']} {p['hop']}",
                                 ans["snaplen"]) for p in points])
    dirs = [DIRECTION[p["hop"]] for p in points]
    is_out = [p["kind"] == "nf" and p["hop"] == "out" for p in points]
    written = [0]

    def emit(ts, wire_len, point, action, data):
        if point >= len(points):
            raise RingError(f"a record names point {point}; the capture has {len(points)}")
        writer.packet(point, ts, wire_len, data, dirs[point], ACTIONS.get(action, str(action)) if is_out[point] else None)
        written[0] += 1

    # Ctrl-C and SIGTERM end the loop between two drains, never inside one: a drain cut short would
    # leave the packets it had written unread in the ring, and the last drain would write them again
    stop = []

    def on_signal(signo, frame):
        stop.append(signo)
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    where = ", ".join(f"{p['kind']} {p['name']} {p['hop']}" for p in points)
    print(f"sluice capture: capture {ans['id']} at {where}"
          + (f", filter '{ans['filter']}'" if ans["filter"] else "")
          + (f", first {args.count} packets" if args.count else "")
          + (" (Ctrl-C ends it)" if not args.count and not args.duration else ""), file=sys.stderr, flush=True)
    live = sys.stderr.isatty()
    end = time.monotonic() + args.duration if args.duration else None
    next_report = time.monotonic() + REPORT_EVERY_S
    next_check = 0.0
    stopped_by = "count"
    rc = EXIT_OK
    try:
        while args.count is None or written[0] < args.count:
            if stop:
                stopped_by = "signal"
                break
            if time.monotonic() >= next_check:  # sluiced gone: no more copies will come
                next_check = time.monotonic() + PEER_CHECK_S
                if client.peer_closed():
                    stopped_by = "sluiced closed the control connection"
                    rc = EXIT_FAIL
                    break
            left = None if args.count is None else args.count - written[0]
            if ring.drain(emit, left) == 0:
                out.flush()
                time.sleep(0.001)
            now = time.monotonic()
            if end is not None and now >= end:
                stopped_by = "duration"
                break
            if live and now >= next_report:
                next_report = now + REPORT_EVERY_S
                c = ring.counters()
                print(f"\r  {written[0]} packets written, {c['lost']} lost", end="", file=sys.stderr, flush=True)
    except BrokenPipeError:
        stopped_by = "reader of the output went away"
    except RingError as e:
        rc = die(f"capture {ans['id']}: {e}")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    try:  # end it in sluiced first: what was copied before is still in the ring, and read now
        if rc == EXIT_OK:
            client.call("capture_stop", id=ans["id"])
    except SluiceError as e:
        print(f"sluice capture: stopping capture {ans['id']}: {e}", file=sys.stderr)
    try:
        if args.count is None or written[0] < args.count:
            ring.drain(emit, None if args.count is None else args.count - written[0])
        out.flush()
    except (BrokenPipeError, RingError):
        pass
    c = ring.counters()
    ring.close()
    if live:
        print(file=sys.stderr)
    print(f"sluice capture: {written[0]} packets written to {args.write if args.write != '-' else 'standard output'} "
          f"({stopped_by}); sluiced copied {c['packets']}, lost {c['lost']} (the reader was behind)"
          + (f", {c['packets'] - written[0]} left unread past -c" if args.count and c['packets'] > written[0] else ""),
          file=sys.stderr)
    return rc


def register(subs):
    s = sub(subs, "capture", "copies of the packets at ports and NF hops, live, into a pcapng file",
            "sluice capture --port client -w client.pcapng          # both directions, until Ctrl-C\n"
            "sluice capture --nf firewall --hop out -c 100 -w fw.pcapng\n"
            "sluice capture --port client -f 'udp port 53' -w - | tshark -r -",
            description="Each matching packet crossing a capture point is copied (never held) into a ring "
                        "sluiced shares with this command, which writes pcapng: one interface per point "
                        "(PORT:rx, PORT:tx, NF:in, NF:out), nanosecond timestamps, and at an NF's way out the "
                        "NF's action (next, out, to_nf, drop) as each packet's comment. A point that is a "
                        "service name means each of its NFs. Filters are tcpdump's (pcap-filter(7)), run in "
                        "sluiced. When this command cannot keep up, copies are lost and counted, traffic is "
                        "not slowed. While an NF hop is captured its pipes are closed (its packets pass "
                        "sluiced's worker, where copies are taken). The capture ends when this command exits.")
    s.add_argument("--port", action="append", metavar="NAME", help="capture at this port (repeatable)")
    s.add_argument("--nf", action="append", metavar="NAME", help="capture at this NF or service's NFs (repeatable)")
    s.add_argument("--hop", choices=("in", "out", "both"), default="both",
                   help="in: a port's RX, an NF's way in; out: a port's TX, an NF's way out (default: both)")
    s.add_argument("-f", "--filter", metavar="EXPR", help="a pcap-filter expression, e.g. 'tcp port 80'")
    s.add_argument("-c", "--count", type=int, metavar="N", help="stop after writing N packets")
    s.add_argument("-s", "--snaplen", type=int, metavar="BYTES", help="bytes kept of each packet (default: all)")
    s.add_argument("-w", "--write", metavar="FILE", help="pcapng output file, or - for standard output")
    s.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    s.add_argument("--buffer", type=int, metavar="KIB", help="ring size per sluiced worker in KiB (default 4096)")
    s.add_argument("--list", action="store_true", help="list the captures running, with their copy and loss counts")
    add_common(s, json_flag=True)
    s.set_defaults(func=cmd_capture)
