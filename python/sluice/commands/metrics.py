"""`sluice metrics`: sluiced's counters in the Prometheus text format, printed once or served over HTTP
for a Prometheus server to scrape (docs/observability.md "Metrics"). `sluice up` runs the server
itself when the config has `metrics:`."""

import sys

from ..client import ctl_path
from ..exporter import render
from ..exporter.server import Scraper, parse_listen, serve
from .common import EXIT_FAIL, EXIT_OK, add_common, die, sub

DEFAULT_LISTEN = "127.0.0.1:9464"


def cmd_metrics(args):
    path = ctl_path(args.socket_dir)
    if not args.listen:
        scraper = Scraper(path, args.timeout)
        text = scraper.text()
        sys.stdout.write(text)
        if scraper.failures:
            print(f"sluice metrics: sluiced did not answer at {path} (sluice_up 0)", file=sys.stderr)
            return EXIT_FAIL
        return EXIT_OK
    try:
        parse_listen(args.listen)
    except ValueError as e:
        return die(f"--listen {e}")

    def ready(srv):
        host, port = srv.server_address[:2]
        print(f"sluice metrics: serving http://{host}:{port}/metrics for sluiced at {path}", file=sys.stderr,
              flush=True)
    try:
        serve(path, args.listen, args.timeout, ready=ready)
    except OSError as e:
        return die(f"--listen {args.listen}: {e.strerror or e}")
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def register(subs):
    s = sub(subs, "metrics", "sluiced's counters in the Prometheus text format (once, or served over HTTP)",
            "sluice metrics                          # one exposition on stdout (promtool check metrics)\n"
            "sluice metrics --listen 127.0.0.1:9464  # serve /metrics for Prometheus",
            description="Every counter `sluice stats` shows, named by Prometheus's conventions "
                        "(sluice_port_rx_packets_total{port=\"client\"}, ...; docs/observability.md lists them), "
                        "plus each NF's process CPU time. Without --listen, prints one exposition and exits "
                        "(status 1 if sluiced did not answer). With --listen, serves GET /metrics until "
                        "interrupted; a scrape asks sluiced's control thread for its stats, never a worker. "
                        "`sluice up` runs this server for you when the config has `metrics: {listen: ...}`.")
    s.add_argument("--listen", nargs="?", const=DEFAULT_LISTEN, default=None, metavar="HOST:PORT",
                   help=f"serve over HTTP on this address (default with the flag alone: {DEFAULT_LISTEN}; "
                        "loopback unless you name another address)")
    add_common(s)
    s.set_defaults(func=cmd_metrics)
