"""The listen address of the exporter and the web view, HOST:PORT (no imports: the config checks it too)."""


def parse_listen(s, example="127.0.0.1:9464"):
    """'HOST:PORT' (or '[v6]:PORT', or ':PORT' for loopback) -> (host, port); ValueError naming the problem.
    example: the address the message suggests (the caller's default)."""
    if not isinstance(s, str) or ":" not in s:
        raise ValueError(f"{s!r}: expected HOST:PORT, e.g. {example}")
    host, _, port = s.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"{s!r}: port must be 1..65535")
    return host, int(port)
