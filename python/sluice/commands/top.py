"""`sluice top`: live per-second rates from deltas of the `stats` command.

Plain ANSI (no curses dependency): on a terminal the screen is redrawn in place
in the alternate screen; otherwise each frame is printed after the previous one.
"""

import sys
import time

from ..client import SluiceError, socket_dir_default
from ..fmt import drops_total, human_count, mbps, rate, table
from .common import EXIT_USAGE, add_common, client_for, die, nf_groups, sub

CLEAR = "\x1b[H\x1b[2J"
ALT_ON = "\x1b[?1049h\x1b[?25l"
ALT_OFF = "\x1b[?25h\x1b[?1049l"


def _rate(cur, prev, key, dt):
    if prev is None or dt <= 0:
        return None
    c, p = cur.get(key), prev.get(key)
    if not isinstance(c, (int, float)) or not isinstance(p, (int, float)):
        return None
    d = c - p
    if d < 0:          # counter reset (NF restarted under the same name)
        d = c
    return d / dt


def _drop_rate(cur, prev, dt):
    if prev is None or dt <= 0:
        return None
    d = drops_total(cur.get("drops")) - drops_total(prev.get("drops"))
    return max(d, 0) / dt


def _mbps(bytes_per_s):
    return None if bytes_per_s is None else bytes_per_s * 8 / 1e6


def render(cur, prev, dt, status=None, interval=1.0, groups=None):
    """One frame of text from the current and previous `stats` responses; groups: {NF instance: group
    process} (nf_groups), a GROUP column when not empty."""
    lines = []
    head = time.strftime("%H:%M:%S") + "  sluice top"
    if status:
        head += f"  sluiced pid {status.get('pid')}"
    pool = cur.get("pool") or {}
    if pool:
        head += f"  pool {pool.get('free')}/{pool.get('mbufs')} free, {pool.get('lent')} lent"
    head += f"  (every {interval:g}s; rates per second)"
    lines.append(head)
    lines.append("")

    prev_ports = {p.get("name"): p for p in (prev or {}).get("ports", [])}
    rows = []
    for p in cur.get("ports", []):
        q = prev_ports.get(p.get("name"))
        rows.append([p.get("name"), p.get("chain") or "-",
                     rate(_rate(p, q, "rx_pkts", dt)), mbps(_mbps(_rate(p, q, "rx_bytes", dt))),
                     rate(_rate(p, q, "tx_pkts", dt)), mbps(_mbps(_rate(p, q, "tx_bytes", dt))),
                     rate(_drop_rate(p, q, dt)), human_count(p.get("rx_pkts")), human_count(p.get("tx_pkts"))])
    lines.append(table(["PORT", "CHAIN", "RX PPS", "RX MBIT/S", "TX PPS", "TX MBIT/S", "DROP/S", "RX TOTAL",
                        "TX TOTAL"], rows, right=set(range(2, 9))))
    lines.append("")

    prev_nfs = {n.get("name"): n for n in (prev or {}).get("nfs", [])}
    rows = []
    for n in cur.get("nfs", []):
        q = prev_nfs.get(n.get("name"))
        rows.append([n.get("name"), n.get("service"), n.get("wakeup"),
                     rate(_rate(n, q, "rx_pkts", dt)), mbps(_mbps(_rate(n, q, "rx_bytes", dt))),
                     rate(_rate(n, q, "tx_pkts", dt)), rate(_rate(n, q, "kicks", dt)),
                     rate(_drop_rate(n, q, dt)), n.get("lent")] + ([groups.get(n.get("name"), "-")] if groups else []))
    if rows:
        lines.append(table(["NF", "SERVICE", "WAKEUP", "RX PPS", "RX MBIT/S", "TX PPS", "KICKS/S", "DROP/S",
                            "LENT"] + (["GROUP"] if groups else []), rows, right=set(range(3, 9))))
    else:
        lines.append("(no NF attached)")
    lines.append("")

    drops, pdrops = cur.get("drops") or {}, (prev or {}).get("drops") or {}
    parts = []
    for k, v in drops.items():
        r = None
        if prev is not None and dt > 0 and isinstance(v, (int, float)):
            r = max(v - pdrops.get(k, 0), 0) / dt
        parts.append(f"{k} {rate(r)}/s ({human_count(v)})")
    lines.append("DROPS  " + ("  ".join(parts) if parts else "none"))
    return "\n".join(lines)


def run_top(client, interval=1.0, iterations=None, out=None, groups=None):
    """Loop until interrupted or `iterations` frames are shown. Returns an exit code. groups: a callable
    giving {NF instance: group process} for each frame (groups restart and scale), or None."""
    groups = groups or dict
    out = out or sys.stdout
    tty = out.isatty()
    shown = 0
    last = None
    try:
        with client:
            status = client.status()
            prev, prev_t = client.stats(), time.monotonic()
            if tty:
                out.write(ALT_ON + CLEAR + render(prev, None, 0, status, interval, groups()) + "\n")
                out.flush()
            while iterations is None or shown < iterations:
                time.sleep(interval)
                cur, now = client.stats(), time.monotonic()
                frame = last = render(cur, prev, now - prev_t, status, interval, groups())
                if tty:
                    out.write(CLEAR + frame + "\n")
                else:
                    out.write(frame + "\n\n")
                out.flush()
                prev, prev_t = cur, now
                shown += 1
    except KeyboardInterrupt:
        pass
    except SluiceError as e:
        if tty:
            out.write(ALT_OFF)
            tty = False
        print(f"sluice: {e}", file=sys.stderr)
        return 1
    finally:
        if tty:
            out.write(ALT_OFF)
            if last:
                out.write(last + "\n")  # leave the final frame on the normal screen
            out.flush()
    return 0


def cmd_top(args):
    if args.interval <= 0:
        return die("--interval must be positive", EXIT_USAGE)
    sd = args.socket_dir or socket_dir_default()
    return run_top(client_for(args), interval=args.interval, iterations=args.iterations,
                   groups=lambda: nf_groups(sd))


def register(subs):
    s = sub(subs, "top", "live table of packet and byte rates per port and NF",
            "sluice top                        # refresh every second until Ctrl-C\n"
            "sluice top --interval 0.5 --iterations 3   # three frames, then exit (works without a tty)",
            description="Poll `stats` and show per-second rates computed from counter deltas. On a terminal the "
                        "screen is redrawn in place; otherwise frames are printed one after another.")
    add_common(s)
    s.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between frames (default 1)")
    s.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="stop after N frames (default: run until interrupted)")
    s.set_defaults(func=cmd_top)
