"""The "All runs" table: one line per results file, newest first."""

from __future__ import annotations

from pathlib import Path

from .common import (IO, LATENCY, LINUX, OVS, PEER, REPO, SCENARIOS, SLUICE, ZEROLOSS, _link, find, fmt, fmt_us, is_quick,
                     rows_of, scenario_of)
from .zeroloss import _zl_cell


def _sluice_zl(res):
    return find(res, SLUICE, 1, 66, "poll", scenario=ZEROLOSS) or next(
        (r for r in res if scenario_of(r) == ZEROLOSS and r.get("system") == SLUICE and r.get("nfs") == 1
         and r.get("median_pps") is not None), None)


def _sluice_lat(res, load=0.5):
    return next((r for r in res if scenario_of(r) == LATENCY and r.get("system") == SLUICE and r.get("nfs") == 1
                 and r.get("load") is not None and abs(r["load"] - load) < 1e-9 and r.get("median_ns")), None)


def history_rows(loaded: list[tuple[Path, dict]], out_dir: Path = REPO) -> list[str]:
    rows = ["| results file | kind | scenarios | rounds × window | Sluice 1 NF 64 B poll | memif 1 NF 64 B | ratio | "
            "one-core ceiling 64 B | Linux veth 1 NF 64 B | OVS 1 NF 64 B | Sluice 1 NF 1500 B poll | "
            "Sluice 1 NF zero-loss Mpps | Sluice 1 NF p99 at 50 % (µs) |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p, d in reversed(loaded):
        res, cfg = d["results"], d.get("config", {})
        scen = [s for s in SCENARIOS + ("density", "steering", "nfs", "trust") if rows_of(res, s)]
        s, pe, s15 = find(res, SLUICE, 1, 64, "poll"), find(res, PEER, 1, 64, None), find(res, SLUICE, 1, 1500, "poll")
        ratio = f"{s['median_mpps'] / pe['median_mpps']:.2f}×" if s and pe and pe["median_mpps"] else "–"
        li, ov, io = find(res, LINUX, 1, 64, None), find(res, OVS, 1, 64, None), find(res, IO, 1, 64, None)
        zl, lat = _sluice_zl(res), _sluice_lat(res)
        rows.append(f"| [{p.name}]({_link(p, out_dir)}) | {'quick' if is_quick(d) else 'full'} | "
                    f"{', '.join(scen) or '–'} | {cfg.get('runs', '?')} × {cfg.get('duration_s', '?')} s | "
                    f"{fmt(s and s['median_mpps'])} | {fmt(pe and pe['median_mpps'])} | {ratio} | "
                    f"{fmt(io and io['median_mpps'])} | {fmt(li and li['median_mpps'])} | {fmt(ov and ov['median_mpps'])} | "
                    f"{fmt(s15 and s15['median_mpps'])} | {_zl_cell(zl) if zl else '–'} | "
                    f"{fmt_us(lat['median_ns'].get('p99')) if lat else '–'} |")
    return rows
