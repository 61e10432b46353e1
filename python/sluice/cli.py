"""The `sluice` command line: the top-level parser and main(). The commands themselves are in
sluice/commands/, one module per thing they act on; each adds its subcommands with register()."""

import argparse
import os
import sys

from . import __version__
from .client import ApiError, SluiceError
from .commands import api, bench, capture, chains, config, daemon, metrics, nf, ports, run, stats, steering, top, trace, web
from .commands.common import EXIT_FAIL, Formatter, die, wrap

# in the order `sluice --help` lists them
COMMAND_MODULES = (daemon, stats, top, metrics, capture, trace, web, chains, ports, steering, nf, run, config, bench, api)


def build_parser():
    p = argparse.ArgumentParser(
        prog="sluice", formatter_class=Formatter,
        description=wrap("Sluice: zero-copy NFV platform. Starts sluiced and network functions from a YAML "
                         "config and talks to sluiced over its control socket (docs/api.md)."),
        epilog="examples:\n"
               "  sluice config check sluice.yaml     # validate a config\n"
               "  sluice up sluice.yaml -d            # start sluiced + NFs in the background\n"
               "  sluice status                       # what is running\n"
               "  sluice stats                        # counters per port / NF / service\n"
               "  sluice top                          # live rates\n"
               "  sluice metrics --listen 127.0.0.1:9464   # Prometheus endpoint\n"
               "  sluice capture --port client -w c.pcapng # live pcapng at a port or NF hop\n"
               "  sluice trace --port client -c 3         # the next 3 packets' path, step by step\n"
               "  sluice chain set c2s --nfs count,fwd --exit server\n"
               "  sluice port add mirror net_pcap9,tx_pcap=m.pcap   # ports at runtime (port del, port list)\n"
               "  sluice rule add proto=tcp dst_port=80 --chain web\n"
               "  sluice rule list                    # rules and their hits\n"
               "  sluice nf scale fwd 3               # replicas at runtime\n"
               "  sluice run -- redis-server          # a program's sockets through sluice-stackd\n"
               "  sluice down                         # stop everything\n\n"
               "`sluice COMMAND --help` for details. Config format:\n" + config.EXAMPLE_CONFIG)
    p.add_argument("--version", action="version", version=f"sluice {__version__}")
    subs = p.add_subparsers(dest="command", metavar="COMMAND")
    subs.required = True
    for mod in COMMAND_MODULES:
        mod.register(subs)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ApiError as e:
        return die(f"sluiced: {e}")
    except SluiceError as e:
        return die(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
