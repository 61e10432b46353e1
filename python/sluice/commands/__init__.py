"""The `sluice` commands, grouped by what they act on. Each module has register(subs), which adds its
commands to the top-level parser's subparsers (sluice/cli.py calls them in the order of `sluice --help`),
and the cmd_* functions the parsed arguments dispatch to:

    daemon    up, down, status      sluiced and the supervisor started by `sluice up`
    stats     stats                 counters and drop reasons
    top       top                   live rates
    metrics   metrics               Prometheus metrics, once or served (sluice/exporter/)
    capture   capture               live pcapng copies at ports and NF hops (sluice/capture/)
    trace     trace                 the next packets' path through the fabric, step by step
    web       web                   the web view: a live graph of the deployment (sluice/web/)
    chains    chain                 service chains
    ports     port                  ports at runtime (add, del, list) and their ingress chains
    steering  rule, flows, service  steering rules, the flow table, replica policies
    nf        nf scale              NF replicas at runtime (through the supervisor)
    run       run, stack            programs' sockets through sluice-stackd (docs/sockets.md)
    config    config check/json     the YAML config, offline
    bench     bench                 the benchmark suite (bench/run.py)
    api       api                   one raw control-API request

common holds what they share: exit codes, error printing, the control client, argparse helpers.
Formatting (tables, counts, rates) is sluice/fmt.py.
"""
