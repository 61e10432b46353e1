"""Steering section (bench/steering.py, issue 4): throughput with 10 vs 10,000 rules and 1M flows."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, fmt_rate, headline, rows_of


def steering_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    """Steering (issue 4, bench/steering.py): throughput with 10 vs 10,000 rules and 1M flows."""
    L = ["## Steering: rules and flows (`bench/steering.py`)", ""]
    h = headline(loaded, "steering")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/steering.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    L += [_headline_line(p, d, out_dir), "",
          f"**Method.** A fresh sluiced per measurement; port `load` (net_pcap, `infinite_rx`) replays "
          f"{cfg.get('load_flows', '?'):,} UDP flows forever, port `out` (net_null) discards; the large rows first "
          f"read {cfg.get('big_flows', '?'):,} more distinct flows from a second pcap port, so the flow table holds "
          "them all while the load runs. Rules: all but one or two never match the traffic (random prefixes, "
          "protocols and ports, many in the traffic's /16, at higher priorities); the last send it out (`port`) "
          f"or through chain [fwd] (`NF`). Figure: packets out per second, median of {cfg.get('windows', '?')} windows "
          f"of {cfg.get('duration_s', '?')} s per round; median of {cfg.get('runs', '?')} rounds with min–max, "
          "configurations alternating in each round. The pcap PMD's replay is part of the cost, like the net_null "
          "port's in scenario 1.", "",
          "| configuration | median Mpps (min–max) | flows in the table | vs the 10-rule row of the same path |",
          "|---|---:|---:|---:|"]
    rows = rows_of(d["results"], "steering")
    base = {}
    for r in rows:
        if r.get("rules") == 10 and r.get("median_pps"):
            base[(r.get("nf"), r.get("flow_table"))] = r["median_pps"]
    for r in rows:
        if r.get("median_pps") is None:
            L.append(f"| {r['label']} | failed | | |")
            continue
        b = base.get((r.get("nf"), r.get("flow_table")))
        ratio = f"{r['median_pps'] / b:.0%}" if b and r.get("rules") != 10 else "–"
        flows = max(r.get("runs_flow_entries") or [0])
        L.append(f"| {r['label']} | **{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–{fmt_rate(r['max_pps'])}) "
                 f"| {flows:,} | {ratio} |")
    L.append("")
    return L
