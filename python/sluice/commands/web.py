"""`sluice web`: serve the web view (python/sluice/web/, docs/observability.md "Web view") -- the deployment
as a graph with live rates, drops and CPU, and the latest trace -- on loopback until interrupted."""

import signal
import sys

from ..client import ctl_path, socket_dir_default
from ..config import WEB_DEFAULT_LISTEN as DEFAULT_LISTEN  # the exporter's 9464, plus one
from ..exporter.listen import parse_listen
from .common import EXIT_OK, EXIT_USAGE, add_common, die, sub


def cmd_web(args):
    try:
        host, _ = parse_listen(args.listen, example=DEFAULT_LISTEN)
    except ValueError as e:
        return die(f"--listen {e}", EXIT_USAGE)
    from ..web.server import is_loopback, serve  # the HTTP server only when serving, not for --help

    sd = args.socket_dir or socket_dir_default()
    path = ctl_path(sd)
    if not is_loopback(host):
        print(f"sluice web: note: {host} is not a loopback address; whoever reaches it sees the deployment "
              "(the page changes nothing)", file=sys.stderr)

    # Ctrl-C (SIGINT) stops it even when it was started with SIGINT ignored, as a shell's background job
    # is: Python then leaves it ignored unless told otherwise
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def ready(srv):
        h, port = srv.server_address[:2]
        shown = f"[{h}]" if ":" in h else h
        print(f"sluice web: serving http://{shown}:{port}/ for sluiced at {path} (Ctrl-C stops it)",
              file=sys.stderr, flush=True)
    try:
        serve(path, args.listen, socket_dir=sd, timeout=args.timeout, ready=ready)
    except OSError as e:
        return die(f"--listen {args.listen}: cannot serve there: {e.strerror or e}")
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def register(subs):
    s = sub(subs, "web", "serve a live web view of the deployment on loopback",
            f"sluice web                          # http://{DEFAULT_LISTEN}/ (open it in a browser)\n"
            "sluice web --listen 127.0.0.1:8080  # another port\n"
            "ssh -L 9465:127.0.0.1:9465 HOST     # from another machine: forward the port, keep it on loopback",
            description="A page that draws the deployment as a graph: ports on the left and right, each chain a row "
                        "of service boxes with their replicas inside, trust domains as shaded regions, group "
                        "processes marked; live packet and drop rates on the edges, rates and CPU per NF, updated "
                        "every second; and the latest packet trace. It needs no internet access and loads nothing "
                        "from elsewhere.\n\n"
                        "The numbers come from sluiced's control API: `sluice web` asks for `stats` and `status` "
                        "once a second (whatever the number of open pages) and computes the rates from the last "
                        "two answers; CPU is each NF process's user + system time from /proc. It runs until "
                        "interrupted (Ctrl-C) and changes nothing. `sluice up` runs it for you when the config has "
                        "`web: {listen: ...}` (or `web: true`).")
    s.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}; loopback unless you name another "
                        "address)")
    add_common(s)
    s.set_defaults(func=cmd_web)
