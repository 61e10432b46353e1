"""The Prometheus text exposition format (version 0.0.4), written family by family: each metric name
once with its HELP and TYPE, then its samples. Names follow Prometheus's conventions: `sluice_<area>_
<what>`, counters end in `_total`, one name per meaning with labels for the rest."""

import math
import re

NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = ("counter", "gauge", "untyped", "histogram")


def escape_label(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


class Exposition:
    """Families in the order they were first declared; samples in the order they were added."""

    def __init__(self):
        self._fam = {}   # name -> [type, help, [(labels, value)]]

    def _add(self, kind, name, help_, labels, value, suffix=""):
        if not NAME_RE.match(name):
            raise ValueError(f"metric name {name!r} is not a valid Prometheus name")
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name!r} must end in _total")
        fam = self._fam.get(name)
        if fam is None:
            fam = self._fam[name] = [kind, help_, []]
        elif fam[0] != kind:
            raise ValueError(f"metric {name!r} declared as {fam[0]} and as {kind}")
        for k in labels:
            if not LABEL_RE.match(k) or k.startswith("__"):
                raise ValueError(f"label name {k!r} of {name} is not a valid Prometheus label")
        if value is None:
            return
        fam[2].append((suffix, labels, value))

    def counter(self, name, help_, value, **labels):
        self._add("counter", name, help_, labels, value)

    def gauge(self, name, help_, value, **labels):
        self._add("gauge", name, help_, labels, value)

    def untyped(self, name, help_, value, **labels):
        self._add("untyped", name, help_, labels, value)

    def histogram(self, name, help_, buckets, total, count, **labels):
        """buckets: [(upper bound, observations <= it)], cumulative, ending with +Inf (== count)."""
        if "le" in labels:
            raise ValueError(f"histogram {name!r}: 'le' is the bucket label")
        for le, n in buckets:
            self._add("histogram", name, help_, dict(labels, le=fmt_value(le)), n, "_bucket")
        self._add("histogram", name, help_, labels, total, "_sum")
        self._add("histogram", name, help_, labels, count, "_count")

    def text(self) -> str:
        out = []
        for name, (kind, help_, samples) in self._fam.items():
            if not samples:
                continue
            out.append(f"# HELP {name} {escape_help(help_)}")
            out.append(f"# TYPE {name} {kind}")
            for suffix, labels, value in samples:
                lab = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
                n = name + suffix
                out.append(f"{n}{{{lab}}} {fmt_value(value)}" if lab else f"{n} {fmt_value(value)}")
        return "\n".join(out) + "\n"
