"""The web view's HTTP side (stdlib, one thread per request): GET / is the page and its script and style
(static/, shipped with the package: no CDN, no build step, works offline), GET /api/state the view the
sampler keeps (state.py), GET /api/trace the latest packet trace. Nothing here changes anything."""

import http.server
import ipaddress
import json
import os
import socket

from ..exporter.listen import parse_listen
from .state import Sampler

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
# path -> (file in static/, content type); nothing else is served
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/web.js": ("web.js", "text/javascript; charset=utf-8"),
          "/web.css": ("web.css", "text/css; charset=utf-8")}
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host):
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_static():
    """The page's files, read once (a missing file is an installation error, reported at start-up)."""
    out = {}
    for path, (name, ctype) in STATIC.items():
        with open(os.path.join(STATIC_DIR, name), "rb") as f:
            out[path] = (f.read(), ctype)
    return out


def make_handler(sampler, static, loopback_only):
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "sluice-web"

        def _send(self, code, ctype, data):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            # the page loads nothing from anywhere else, and says so to the browser
            self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _json(self, obj):
            self._send(200, "application/json", json.dumps(obj, separators=(",", ":")).encode())

        def _host_allowed(self):
            # Served on loopback, answer only requests addressed to loopback: a web page elsewhere cannot
            # point a name of its own at 127.0.0.1 and read the deployment (DNS rebinding).
            if not loopback_only:
                return True
            host = self.headers.get("Host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            return is_loopback(name or "localhost")

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if not self._host_allowed():
                self._send(403, "text/plain; charset=utf-8",
                           f"Host {self.headers.get('Host')!r} is not a loopback address; this view answers "
                           "requests to 127.0.0.1 or localhost only\n".encode())
            elif path == "/api/state":
                self._json(sampler.view())
            elif path == "/api/trace":
                self._json(sampler.trace())
            elif path in static:
                data, ctype = static[path]
                self._send(200, ctype, data)
            else:
                self._send(404, "text/plain; charset=utf-8",
                           f"not found: {path} (the page is /, its data /api/state and /api/trace)\n".encode())

        do_HEAD = do_GET

        def log_message(self, fmt, *args):  # a line per poll, every second, is noise
            pass

    return Handler


def serve(ctl_path, listen, socket_dir=None, timeout=5.0, ready=None):
    """Serve the web view on `listen` (HOST:PORT) until interrupted. `ready(server)` is called once the
    socket listens and the sampler runs."""
    host, port = parse_listen(listen, example="127.0.0.1:9465")
    static = load_static()
    cls = http.server.ThreadingHTTPServer
    if ":" in host:
        class V6(cls):
            address_family = socket.AF_INET6
        cls = V6
    sampler = Sampler(ctl_path, socket_dir, timeout)
    srv = cls((host, port), make_handler(sampler, static, loopback_only=is_loopback(host)))
    srv.daemon_threads = True
    sampler.start()
    try:
        if ready:
            ready(srv)
        srv.serve_forever()
    finally:
        srv.server_close()
        sampler.stop()
