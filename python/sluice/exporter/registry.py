"""The collectors' registry and the rendering of one scrape (see the package's docstring)."""

import time

from .expo import Exposition

COLLECTORS = {}   # name -> (fn(ex, stats, status), needs sluiced), in registration order


def collector(name, needs_sluiced=True):
    """needs_sluiced=False: it runs when sluiced does not answer too (on stats = {"_stack": ...})."""
    def reg(fn):
        if name in COLLECTORS:
            raise ValueError(f"collector {name!r} registered twice")
        COLLECTORS[name] = (fn, needs_sluiced)
        return fn
    return reg


def render(stats, status, only=None, stack=None) -> str:
    """The exposition of one scrape: every collector (or those named in `only`) on the answers of
    `stats` and `status` (None: sluiced did not answer -- then sluice_up 0, and only the collectors
    that do not need sluiced: the socket service's, on `stack`, sluice-stackd's own stats)."""
    ex = Exposition()
    up = stats is not None and status is not None
    ex.gauge("sluice_up", "1 if sluiced answered the exporter's stats request, else 0", 1 if up else 0)
    if not up:
        stats, status = {}, {}
    if stack is not None:
        stats = dict(stats, _stack=stack)
    for name, (fn, needs_sluiced) in COLLECTORS.items():
        if (only is not None and name not in only) or (needs_sluiced and not up):
            continue
        if not needs_sluiced and "_stack" not in stats:
            continue  # no socket service here
        t0 = time.monotonic()
        try:
            fn(ex, stats, status)
            ok = 1
        except Exception:  # noqa: BLE001 -- one area's surprise must not cost the others
            ok = 0
        ex.gauge("sluice_exporter_collector_up", "1 if the collector produced its metrics in this scrape",
                 ok, collector=name)
        ex.gauge("sluice_exporter_collector_duration_seconds", "time the collector took in this scrape",
                 round(time.monotonic() - t0, 6), collector=name)
    return ex.text()
