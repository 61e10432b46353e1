"""The exporter's HTTP side: GET /metrics answers one scrape (a scrape within MIN_INTERVAL of the last
reuses it, as VPP's prom plugin does: two Prometheus servers, or a burst of curls, cost sluiced one
stats request); GET / is a page that links it. Stdlib only, one thread per request."""

import http.server
import os
import threading
import time

from ..client import Client, SluiceError
from .listen import parse_listen
from .registry import render

MIN_INTERVAL = 0.2
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Scraper:
    """Asks sluiced for `stats` and `status` over its control socket, one request at a time."""

    def __init__(self, ctl_path, timeout=5.0):
        self.ctl_path, self.timeout = ctl_path, timeout
        self._lock = threading.Lock()
        self._last = (0.0, None)
        self._client = None
        self.scrapes = 0
        self.failures = 0

    def _stack(self):
        """sluice-stackd's own stats when it answers beside sluiced, else None."""
        from ..commands.run import stack_stats_or_none
        return stack_stats_or_none(os.path.dirname(self.ctl_path), min(self.timeout, 2.0))

    def _ask(self):
        try:
            if self._client is None:
                self._client = Client(self.ctl_path, timeout=self.timeout)
            return self._client.call("stats"), self._client.call("status")
        except (SluiceError, OSError, ValueError):
            if self._client is not None:
                try:
                    self._client.close()
                except Exception:  # noqa: BLE001
                    pass
            self._client = None  # sluiced restarted, or is gone: a new connection next time
            self.failures += 1
            return None, None

    def text(self):
        with self._lock:
            t, body = self._last
            now = time.monotonic()
            if body is not None and now - t < MIN_INTERVAL:
                return body
            t0 = time.monotonic()
            stats, status = self._ask()
            self.scrapes += 1
            body = render(stats, status, stack=self._stack())
            body += ("# HELP sluice_exporter_scrape_duration_seconds time this scrape took (sluiced's answers "
                     "and the rendering)\n# TYPE sluice_exporter_scrape_duration_seconds gauge\n"
                     f"sluice_exporter_scrape_duration_seconds {time.monotonic() - t0:.6f}\n")
            self._last = (now, body)
            return body


INDEX = """<!doctype html><html><head><meta charset="utf-8"><title>Sluice exporter</title></head>
<body><h1>Sluice exporter</h1><p><a href="/metrics">/metrics</a>: sluiced's counters in the Prometheus text
format (docs/observability.md).</p></body></html>
"""


def make_handler(scraper):
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "sluice-exporter"

        def _send(self, code, ctype, body):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE, scraper.text())
            elif path == "/":
                self._send(200, "text/html; charset=utf-8", INDEX)
            else:
                self._send(404, "text/plain; charset=utf-8", f"not found: {path} (try /metrics)\n")

        do_HEAD = do_GET

        def log_message(self, fmt, *args):  # one line per request is noise at a 1 s scrape interval
            pass

    return Handler


def serve(ctl_path, listen, timeout=5.0, ready=None):
    """Serve until interrupted. `ready(server)` is called once the socket listens."""
    host, port = parse_listen(listen)
    cls = http.server.ThreadingHTTPServer
    if ":" in host:
        import socket

        class V6(cls):
            address_family = socket.AF_INET6
        cls = V6
    srv = cls((host, port), make_handler(Scraper(ctl_path, timeout)))
    srv.daemon_threads = True
    if ready:
        ready(srv)
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
