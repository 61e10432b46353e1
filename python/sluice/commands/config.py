"""`sluice config check|json`: validate a YAML config, or print the JSON that `sluice up` hands to
sluiced, without starting anything."""

import sys

from .. import config as sconfig
from .common import EXIT_OK, EXIT_USAGE, load_config_or_exit, sub

# the format in brief, shown by `sluice --help` and `sluice config check --help`
EXAMPLE_CONFIG = """\
  ports:
    - {name: client, vdev: "net_af_packet0,iface=veth0", chain: c2s}
    - {name: server, vdev: "net_af_packet1,iface=veth1"}
  chains:
    - {name: c2s, nfs: [count, fwd], exit: server}
  nfs:
    - {name: count, program: count}
    - {name: fwd, program: fwd, instances: 2, wakeup: adaptive}
"""


def _check_devices(args):
    return False if args.no_devices or args.no_programs else None


def cmd_config_check(args):
    cfg, err = load_config_or_exit(args.config, check_programs=not args.no_programs,
                                   check_devices=_check_devices(args))
    if err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    n_inst = len(sconfig.instance_names(cfg))
    groups = cfg.get("groups") or []
    procs = len(sconfig.group_slots(cfg))
    print(f"{args.config}: ok ({len(cfg['ports'])} port(s), {len(cfg['chains'])} chain(s), "
          f"{len(cfg['nfs'])} service(s), {n_inst} NF instance(s)"
          + (f", {len(groups)} group(s) in {procs} process(es)" if groups else "") + ")")
    if groups and not cfg["sluiced"]["pipes"]:
        print(f"{args.config}: note: sluiced.pipes is false: packets between a group's members go through "
              "sluiced's worker instead of the members' pipes (docs/groups.md)")
    return EXIT_OK


def cmd_config_json(args):
    cfg, err = load_config_or_exit(args.config, check_programs=not args.no_programs,
                                   check_devices=_check_devices(args))
    if err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(sconfig.to_sluiced_json(cfg, socket_dir=args.socket_dir))
    return EXIT_OK


def register(subs):
    s = sub(subs, "config", "validate a config or show the JSON handed to sluiced",
            "sluice config check sluice.yaml\nsluice config json sluice.yaml")
    fsubs = s.add_subparsers(dest="config_cmd", metavar="SUBCOMMAND")
    fsubs.required = True
    fc = sub(fsubs, "check", "validate a YAML config (exit 0 valid, 2 invalid)",
             "sluice config check sluice.yaml\n\nErrors name the field, e.g.:\n"
             "  config error: chains[0].exit: unknown port 'srv'",
             description="Validate CONFIG.yaml without starting anything. Errors name the field at fault "
                         "with its dotted path. Format:\n\n" + EXAMPLE_CONFIG.rstrip())
    fc.add_argument("config", metavar="CONFIG.yaml")
    fc.add_argument("--no-programs", action="store_true",
                    help="do not check that NF programs exist, nor PCI devices (e.g. on another machine)")
    fc.add_argument("--no-devices", action="store_true",
                    help="do not check that pci: ports' devices are here and bound to vfio-pci (sysfs)")
    fc.set_defaults(func=cmd_config_check)
    fj = sub(fsubs, "json", "print the normalized JSON config that `sluice up` hands to sluiced",
             "sluice config json sluice.yaml > /tmp/sluiced.json\n"
             "sluiced --config /tmp/sluiced.json --socket-dir /tmp/sl")
    fj.add_argument("config", metavar="CONFIG.yaml")
    fj.add_argument("--socket-dir", metavar="DIR", default=None, help="override sluiced.socket_dir")
    fj.add_argument("--no-programs", action="store_true",
                    help="do not check that NF programs exist, nor PCI devices")
    fj.add_argument("--no-devices", action="store_true", help="do not check pci: ports' devices (sysfs)")
    fj.set_defaults(func=cmd_config_json)
