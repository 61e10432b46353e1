"""Sluice: the Python CLI and orchestrator for the sluiced NFV manager.

Modules: cli (the `sluice` command: parser and main), commands/ (the commands,
one module per thing they act on), config and steering (YAML validation; their
ConfigError lives in errors), client (control socket), supervisor (sluice up/down,
NF restarts), cgroups (cpu_weight), frames (test frames for `rule test`),
fmt (tables, counts, rates).
"""

__version__ = "0.1.0"
