"""Sluice: the Python CLI and orchestrator for the sluiced NFV manager.

Modules: config (YAML validation), client (control socket), supervisor
(sluice up/down), cli (the `sluice` command), top (live rates).
"""

__version__ = "0.1.0"
