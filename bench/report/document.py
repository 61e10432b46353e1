"""BENCHMARKS.md as a whole: the machine, the sections in order, the hand-written notes and the
history."""

from __future__ import annotations

from pathlib import Path

from .chain import chain_method, chain_table, pipes_table, reading
from .common import (CHAIN, LATENCY, NOTES, NOTES_OVS, REPO, SCENARIOS, ZEROLOSS, _headline_line, _link, headline,
                     rows_of)
from .density import density_section
from .figures import _images
from .history import history_rows
from .latency import common_load_table, latency_method, latency_reading, latency_tables
from .nfs import nfs_section
from .sockets import sockets_section
from .userstack import userstack_section
from .steering import steering_section
from .trust import trust_section
from .restart import restart_section
from .soak import soak_section
from .observability import observability_section
from .pci_guest import pci_guest_section
from .zeroloss import zeroloss_method, zeroloss_reading, zeroloss_table


def machine_rows(m: dict, cfg: dict | None = None) -> list[str]:
    hp = m.get("hugepages_2m_total", 0)
    hp_txt = (f"{hp} × 2 MiB reserved ({hp * 2} MiB), hugetlbfs {'mounted' if m.get('hugetlbfs_mounted') else 'not mounted'}"
              if hp else "none (DPDK ran on 4 KiB pages, --no-huge)")
    return [
        "| | |", "|---|---|",
        f"| CPU | {m.get('cpu_model', '?')}" + (f" ({m['cpu_mhz']:.0f} MHz reported)" if m.get("cpu_mhz") else "") + " |",
        f"| cores | {m.get('cpus_online', '?')} online, {m.get('cpus_usable', '?')} usable by the benchmark |",
        f"| memory | {m.get('mem_gib', '?')} GiB |",
        f"| OS / kernel | {m.get('os', '?')} / Linux {m.get('kernel', '?')} |",
        f"| DPDK | {m.get('dpdk_version', '?')} |",
        f"| huge pages | {hp_txt} |",
        f"| load average at start | {m.get('loadavg', '?')} |",
    ] + _switch_row(m) + _stall_row(m)


def _switch_row(m: dict) -> list[str]:
    """The switch-cost probe's figures (bench/switchcost.c), where the run recorded them."""
    a, b = m.get("switch_cost_start"), m.get("switch_cost_end")
    if not a and not b:
        return []
    ends = " / ".join(f"{x['switch_ns'] / 1000:.2f}" if x else "?" for x in (a, b))
    x = a or b
    return [f"| process switch on core {x.get('cpu', 0)} | {ends} µs at start / end of the run "
            f"({x.get('procs', '?')} {x.get('policy', '?').upper()} processes yielding in turn, `sluice-bench-switchcost`; "
            f"between threads of one process {x.get('thread_switch_ns', 0) / 1000:.2f} µs, a yield alone "
            f"{x.get('yield_alone_ns', 0) / 1000:.2f} µs) |"]


def _stall_row(m: dict) -> list[str]:
    """The CPU-stall probe's figures (bench/stalls.c), where the run recorded them."""
    st = m.get("cpu_stalls")
    if not st:
        return []
    cells = "; ".join(f"core {x['cpu']}: longest {x['max_us'] / 1000:.2f} ms, {x['stalls_over']['1000']} over 1 ms, "
                      f"{x['lost_share']:.2%} of the time lost" for x in st)
    return [f"| CPU stalls ({st[0]['seconds']:.0f} s, a SCHED_FIFO spinner per core, `sluice-bench-stalls`) | {cells} |"]


def _machine_key(m: dict) -> tuple:
    return (m.get("cpu_model"), m.get("cpus_online"), m.get("kernel"), m.get("mem_gib"), m.get("dpdk_version"))


def render(loaded: list[tuple[Path, dict]], results_dir: Path, out_dir: Path = REPO, draw: bool = True) -> str:
    L = ["# Sluice benchmarks", "",
         "<!-- GENERATED FILE: do not edit. -->",
         "> **Generated from `bench/results/*.json` by `bench/gen_report.py`; never hand-edited.** "
         "Re-run `bench/run.py` (measures and regenerates) or `bench/gen_report.py` (regenerates only). "
         "The hand-written commentary lives in `bench/notes.md`.", ""]
    if not loaded:
        L += ["No results yet: run `sudo .venv/bin/python bench/run.py`.", ""]
        return "\n".join(L)
    heads = {s: headline(loaded, s) for s in SCENARIOS}
    present = [h for h in heads.values() if h]
    newest = max(present, key=lambda h: h[0].name) if present else loaded[-1]
    L += ["## Machine", "", f"From [`{newest[0].name}`]({_link(newest[0], out_dir)}), the newest headline run:", ""]
    L += machine_rows(newest[1].get("machine", {})) + [""]
    others = {}
    for s, h in heads.items():
        if h and _machine_key(h[1].get("machine", {})) != _machine_key(newest[1].get("machine", {})):
            others.setdefault(h[0].name, (h[1].get("machine", {}), []))[1].append(s)
    for name, (m, scens) in others.items():
        L += [f"Note: the {', '.join(scens)} headline (`{name}`) ran on a different machine: {m.get('cpu_model', '?')}, "
              f"{m.get('cpus_online', '?')} cores, {m.get('mem_gib', '?')} GiB, Linux {m.get('kernel', '?')}, "
              f"DPDK {m.get('dpdk_version', '?')}.", ""]

    # scenario 1
    L += ["## Scenario 1: chain length", ""]
    h = heads[CHAIN]
    if h:
        p, d = h
        L += [_headline_line(p, d, out_dir), ""] + chain_method(d) + [""]
        L += chain_table(rows_of(d["results"], CHAIN)) + [""]
        pt = pipes_table(rows_of(d["results"], CHAIN))
        L += pt + [""] if pt else []
        L += _images(p, d, CHAIN, results_dir, out_dir, draw)
        L += ["### Reading", "", "Computed from the headline run's numbers:", ""] + reading(d) + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py chain`.", ""]

    # scenario 2
    L += ["## Scenario 2: zero-loss throughput (RFC 2544 §26.1)", ""]
    h = heads[ZEROLOSS]
    if h:
        p, d = h
        table, _ = zeroloss_table(rows_of(d["results"], ZEROLOSS))
        L += [_headline_line(p, d, out_dir), ""] + zeroloss_method(d) + [""] + table + [""]
        L += _images(p, d, ZEROLOSS, results_dir, out_dir, draw)
        rd = zeroloss_reading(d)
        if rd:
            L += ["### Reading", "", "Computed from the headline run's numbers:", ""] + rd + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py zeroloss`.", ""]

    # scenario 3
    L += ["## Scenario 3: latency at 10/50/90 % of the zero-loss rate", ""]
    h = heads[LATENCY]
    if h:
        p, d = h
        L += [_headline_line(p, d, out_dir), ""] + latency_method(d) + [""]
        L += latency_tables(rows_of(d["results"], LATENCY))
        L += common_load_table(d["results"])
        L += _images(p, d, LATENCY, results_dir, out_dir, draw)
        rd = latency_reading(d)
        if rd:
            L += ["### Reading", "", "Computed from the headline run's numbers (p99, median of rounds):", ""] + rd + [""]
    else:
        L += ["Not measured yet: `sudo .venv/bin/python bench/run.py latency`.", ""]

    L += ["## Scenario 4: realistic mix", "",
          "Not measured yet: needs the firewall, NAT and router NFs (issue 5).", "",
          ]
    L += density_section(loaded, results_dir, out_dir, draw)
    L += steering_section(loaded, out_dir)
    L += nfs_section(loaded, results_dir, out_dir, draw)
    L += trust_section(loaded, out_dir)
    L += sockets_section(loaded, out_dir)
    L += userstack_section(loaded, out_dir)
    L += restart_section(loaded, out_dir, draw)
    L += soak_section(loaded, out_dir, draw)
    L += observability_section(loaded, out_dir, draw)
    L += pci_guest_section(loaded, out_dir)

    if NOTES.exists():
        notes = NOTES.read_text().strip()
        if notes:
            L += ["## Notes (hand-written, `bench/notes.md`)", "", notes, ""]
    if NOTES_OVS.exists():
        ovs = NOTES_OVS.read_text().strip()
        if ovs:
            # demote the file's own headings below this section's
            ovs = "\n".join(("##" + ln if ln.startswith("#") else ln) for ln in ovs.splitlines())
            L += ["## Open vSwitch with DPDK (hand-written, `bench/notes_ovs.md`)", "", ovs, ""]
    L += ["## All runs", "", "Newest first; `quick` runs (1 short window) are smoke tests, not figures to quote. "
          "Scenario 1 columns are Mpps; ≥ marks a generator-bound zero-loss figure.", ""]
    L += history_rows(loaded, out_dir) + [""]
    return "\n".join(L)
