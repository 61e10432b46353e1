"""BENCHMARKS.md from bench/results/*.json, one module per section; bench/gen_report.py is the entry
point (command line, and the names bench/run.py and bench/density.py import from it).

    common.py    paths, the systems compared, loading results and looking rows up, number and table
                 formatting, the headline run of a scenario, matplotlib helpers
    chain.py     scenario 1, chain length
    zeroloss.py  scenario 2, zero-loss throughput (and the trial settings scenario 3 shares)
    latency.py   scenario 3, latency at 10/50/90 % of the zero-loss rate
    figures.py   the scenario 1-3 PNGs: plots() for run.py, and drawing a headline run's missing ones
    density.py   scenario 5, NF count sweep (bench/density.py)
    steering.py  steering: rules and flows (bench/steering.py)
    trust.py     trust domains: the cost of a copy at a boundary (bench/trust.py)
    userstack.py the user stack module against the kernel path (bench/userstack.py)
    restart.py   live operations: sluiced restarts and reloads (bench/restart.py)
    soak.py      the churn soak: operations, packets accounted, RSS and fds (bench/soak.py)
    pci_guest.py PCI NICs in a guest: Sluice and testpmd on the same NICs (bench/pci_guest.py)
    nfs.py       NF library, Mpps per NF (bench/nfs.py)
    history.py   the "All runs" table
    document.py  render(): the machine, every section in order, the hand-written notes, the history

Modules import only from those above them in this list (common.py from none).
"""

from __future__ import annotations

from .common import OUT, RESULTS, find, load_results
from .density import plot_density
from .document import render
from .figures import plots

__all__ = ["OUT", "RESULTS", "find", "load_results", "plot_density", "plots", "render"]
