"""`sluice port add|del|list|chain`: ports at runtime (docs/ports.md "Ports at runtime") and their
ingress chains (live)."""

from .. import config as sconfig
from ..fmt import table
from .common import EXIT_OK, EXIT_USAGE, add_common, client_for, die, print_json_raw, sub


def _port_row(p):
    return f"port {p.get('name')}: id {p.get('id')}, {p.get('vdev')}, ingress chain {p.get('chain') or '(none)'}"


def cmd_port_add(args):
    if not sconfig.NAME_RE.match(args.name):
        return die(f"invalid name {args.name!r} (must match {sconfig.NAME_RULE})", EXIT_USAGE)
    with client_for(args) as c:
        p = c.port_add(args.name, args.vdev, args.chain, args.id, args.queues)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print("added " + _port_row(p))
    return EXIT_OK


def cmd_port_del(args):
    with client_for(args) as c:
        c.port_del(args.name)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"deleted port {args.name}")
    return EXIT_OK


def cmd_port_list(args):
    with client_for(args) as c:
        ports = c.ports()
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    if not ports:
        print("(no ports)")
        return EXIT_OK
    print(table(["ID", "NAME", "VDEV", "CHAIN", "WORKER", "QUEUES", "POLLED", "RX PKTS", "TX PKTS"],
                [[p.get("id"), p.get("name"), p.get("vdev"), p.get("chain") or "-", p.get("worker"),
                  len(p.get("queues") or [0]), "yes" if p.get("polled") else "no", p.get("rx_pkts"),
                  p.get("tx_pkts")] for p in ports],
                right={0, 4, 5, 7, 8}))
    return EXIT_OK


def cmd_port_chain(args):
    chain = None if args.chain in ("none", "-") else args.chain
    with client_for(args) as c:
        p = c.port_chain_set(args.port, chain)
        if args.json:
            print_json_raw(c)
            return EXIT_OK
    print(f"port {p.get('name')}: ingress chain {p.get('chain') or '(none: drop)'}")
    return EXIT_OK


def register(subs):
    s = sub(subs, "port", "add, delete or list ports, or change a port's ingress chain (live)",
            "sluice port list\n"
            "sluice port add mirror net_pcap9,tx_pcap=/tmp/mirror.pcap\n"
            "sluice port chain client c2s")
    psubs = s.add_subparsers(dest="port_cmd", metavar="SUBCOMMAND")
    psubs.required = True
    pa = sub(psubs, "add", "add a port to the running sluiced",
             "sluice port add mirror net_pcap9,tx_pcap=/tmp/mirror.pcap      # TX only: an exit or an NF's OUT\n"
             "sluice port add guest2 net_af_packet2,iface=veth-g2 --chain c2s  # polled into chain c2s\n"
             "sluice port add tap1 net_tap1,iface=sl-tap1 --id 5             # with a given free port id\n"
             "sluice port add wan net_af_packet3,iface=eth1,qpairs=2 --queues 2 --chain c2s  # two RX queues",
             description="Add port NAME from a DPDK vdev string, as a port of the config would be (its "
                         "buffers, MTU and counters alike); its worker starts polling it between two bursts "
                         "and nothing on the other ports is lost. Without --chain it is TX only (a chain's "
                         "exit, an NF's OUT); --chain makes it polled into that ingress chain. It takes the "
                         "lowest free port id unless --id names one. PCI devices are not added at runtime. "
                         "The port lasts until `sluice port del` or sluiced stops: it is not written into the "
                         "YAML config.")
    add_common(pa, json_flag=True)
    pa.add_argument("name", metavar="NAME", help="port name (1-31 of A-Z a-z 0-9 _ - .)")
    pa.add_argument("vdev", metavar="VDEV", help="DPDK virtual device, e.g. net_null3 or net_af_packet2,iface=veth0")
    pa.add_argument("--chain", metavar="CHAIN", default=None, help="ingress chain (default: none, TX only)")
    pa.add_argument("--id", type=int, metavar="ID", default=None, help="a free port id 0..31 (default: the lowest free)")
    pa.add_argument("--queues", type=int, metavar="N", default=None,
                    help="RX queues 1..8, spread over the workers (default 1; docs/ports.md \"Multi-queue ports\")")
    pa.set_defaults(func=cmd_port_add)
    pd = sub(psubs, "del", "delete a port from the running sluiced",
             "sluice port del mirror\n"
             "sluice chain set c2s --nfs fwd && sluice port del server   # an exit: change the chain first",
             description="Delete port NAME: its worker stops polling it between two bursts, what waits for it "
                         "is sent or freed, then the device is closed; the other ports lose nothing and keep "
                         "their ids. Refused, changing nothing, while the port is a chain's exit, a steering "
                         "rule names it (action or in_port), or NFs pinned flows to it.")
    add_common(pd, json_flag=True)
    pd.add_argument("name", metavar="NAME")
    pd.set_defaults(func=cmd_port_del)
    pl = sub(psubs, "list", "list the ports", "sluice port list\nsluice port list --json")
    add_common(pl, json_flag=True)
    pl.set_defaults(func=cmd_port_list)
    pc = sub(psubs, "chain", "set the ingress chain of a port",
             "sluice port chain client c2s\nsluice port chain client none   # drop everything from client")
    add_common(pc, json_flag=True)
    pc.add_argument("port", metavar="PORT")
    pc.add_argument("chain", metavar="CHAIN", help="chain name, or 'none'")
    pc.set_defaults(func=cmd_port_chain)
