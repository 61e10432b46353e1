"""What the command modules share: exit codes, error printing, the control client for the
--socket-dir/--timeout options, config loading, and the argparse helpers that give every command
the same help layout."""

import argparse
import sys
import textwrap

from .. import config as sconfig
from ..client import Client, ctl_path

EXIT_OK = 0
EXIT_FAIL = 1      # runtime failure: sluiced not running, API error, startup failure
EXIT_USAGE = 2     # bad command line or bad config


def nf_groups(socket_dir):
    """{NF instance: its group's process} from the supervisor's state in socket_dir (docs/groups.md): the
    GROUP column of `stats` and `top`. {} without groups, or without a supervisor there (sluiced alone
    knows NFs, not groups: members show as NFs with their group's pid)."""
    from ..supervisor import read_state
    try:
        st = read_state(socket_dir) or {}
    except (OSError, ValueError):
        return {}
    return {m: n["name"] for n in st.get("nfs", []) if n.get("kind") == "group" for m in n.get("members") or []}


def die(msg, code=EXIT_FAIL):
    print(f"sluice: {msg}", file=sys.stderr)
    return code


def client_for(args):
    return Client(ctl_path(args.socket_dir), timeout=args.timeout)


def print_json_raw(client):
    """--json prints exactly the API's response line."""
    print(client.last_raw)


def load_config_or_exit(path, check_programs=True, check_devices=None):
    try:
        return sconfig.load_file(path, check_programs=check_programs, check_devices=check_devices), None
    except sconfig.ConfigError as e:
        return None, e


# --------------------------------------------------------------------- argparse

class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=30)


def add_common(p, json_flag=False):
    p.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="sluiced socket directory (default: $SLUICE_SOCKET_DIR or /run/sluice)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                   help="seconds to wait for each answer from sluiced (default 5)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the control API's JSON response as is")


def wrap(text, width=78):
    """Wrap prose paragraphs; leave indented blocks (examples) alone."""
    pars = text.split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else textwrap.fill(p, width) for p in pars)


def sub(subs, name, help_, example, description=None):
    return subs.add_parser(name, help=help_, formatter_class=Formatter,
                           description=wrap(description or help_[0].upper() + help_[1:] + "."),
                           epilog="example:\n" + textwrap.indent(example, "  "))
