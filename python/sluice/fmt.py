"""Text formatting shared by the commands: plain tables, counts, byte sizes, rates, durations and
drop-reason maps. No I/O; every function returns a string (or a number for drops_total)."""

__all__ = ["human_count", "human_bytes", "table", "drops_str", "drops_total", "duration", "rate", "mbps", "link_str"]


def link_str(link):
    """A port object's `link` ({up, speed_mbps, duplex, autoneg}) -> 'up 10G full', 'down', '-'."""
    if not link:
        return "-"
    if not link.get("up"):
        return "down"
    sp = link.get("speed_mbps")
    speed = "" if sp is None else (f" {sp // 1000}G" if sp >= 1000 and sp % 1000 == 0 else f" {sp}M")
    return f"up{speed} {link.get('duplex', '?')}"


def human_count(n):
    """1234567 -> '1.23M' (plain below 10000)."""
    if n is None:
        return "-"
    try:
        n = float(n)
    except (TypeError, ValueError):
        return str(n)
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div and (unit != "k" or abs(n) >= 1e4):
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}" if n == int(n) else f"{n:.1f}"


def human_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def table(headers, rows, right=None):
    """Plain text table. right: set of column indexes to right-align
    (default: every column after the first whose cells look numeric)."""
    rows = [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    if right is None:
        right = set()
        for i in range(1, len(headers)):
            cells = [r[i] for r in rows if r[i] not in ("-", "")]
            if cells and all(_numeric_like(c) for c in cells):
                right.add(i)

    def fmt(r):
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                         for i, c in enumerate(r)).rstrip()
    out = [fmt(list(headers))]
    out += [fmt(r) for r in rows]
    return "\n".join(out)


def _numeric_like(s):
    s = s.strip().rstrip("kMGB/s% ").replace(".", "", 1).replace("KiB", "").replace("MiB", "")
    return s.isdigit()


def drops_str(d):
    if not d:
        return "0"
    nz = [f"{k}={v}" for k, v in d.items() if v]
    return " ".join(nz) if nz else "0"


def drops_total(d):
    return sum(v for v in (d or {}).values() if isinstance(v, (int, float)))


def duration(s):
    """Seconds -> '1d2h3m04s' / '3m04s' ('-' for None)."""
    if s is None:
        return "-"
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d" if d else "") + (f"{h}h" if d or h else "") + f"{m}m{s:02d}s"


def rate(v):
    """A per-second rate as a count ('-' when unknown, e.g. on the first frame)."""
    return "-" if v is None else human_count(v)


def mbps(v):
    """Mbit/s with one decimal ('-' when unknown)."""
    return "-" if v is None else f"{v:.1f}"
