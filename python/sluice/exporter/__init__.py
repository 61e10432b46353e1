"""Prometheus metrics for Sluice (docs/observability.md "Metrics").

Every metric comes from the control API's `stats` and `status` -- the same answers `sluice stats`
prints -- so a scrape never touches a worker's hot path: sluiced's control thread builds those answers
from the counters the workers keep anyway. One module per area registers its collector with @area;
each turns its part of the answers into families (expo.Exposition). A failing collector costs its own
metrics only: `sluice_exporter_collector_up{collector=...}` says which (node_exporter's habit).

    render(stats, status) -> exposition text
"""

from .registry import COLLECTORS, collector, render  # noqa: F401

# the collectors register themselves on import (one module per area)
from . import fabric, nfs, ports, services, sockets  # noqa: E402,F401
