"""PCI NICs in a guest (bench/pci_guest.py, issue 36): Sluice against testpmd's io forwarding on the same
two emulated PCI NICs of one guest."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, fmt_rate, headline, rows_of


def pci_guest_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    L = ["## PCI NICs in a guest: Sluice and testpmd on the same emulated NICs (`bench/pci_guest.py`)", ""]
    h = headline(loaded, "pci_guest")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/pci_guest.py` (after `make guest-image`).", ""]
    p, d = h
    cfg = d.get("config", {})
    rows = {r["system"]: r for r in rows_of(d["results"], "pci_guest")}
    L += [_headline_line(p, d, out_dir), "",
          f"**Method.** One guest ({cfg.get('accel', '?').upper()}: everything in it emulated) with a virtio-net-pci "
          "and an e1000e behind intel-iommu, bound to vfio-pci; each NIC a host tap in a namespace of its own. Per "
          "round and system a fresh guest runs either sluiced (chains a->b and b->a through one `fwd`, poll; its "
          "region DMA-mapped, no copy) or `dpdk-testpmd --forward-mode=io`; `bench/udpgen.c` floods "
          f"{cfg.get('size', '?')}-byte UDP frames into the virtio NIC's tap for {cfg.get('duration_s', '?')} s and the "
          "e1000e's tap counts what comes out over the middle half. Systems alternate within each of "
          f"{cfg.get('rounds', '?')} rounds; median with min–max. Under emulation the figures compare the two "
          "forwarders on one machine; they are not what a NIC does.", "",
          "| system | delivered Mpps, median (min–max) | vs testpmd |", "|---|---:|---:|"]
    base = rows.get("testpmd", {}).get("median_pps")
    for s in ("sluice", "testpmd"):
        r = rows.get(s)
        if not r:
            continue
        ratio = r["median_pps"] / base if base and s != "testpmd" else None
        L.append(f"| {s} | **{fmt_rate(r['median_pps'])}** ({fmt_rate(r['min_pps'])}–{fmt_rate(r['max_pps'])}) | "
                 f"{f'{ratio:.2f}x' if ratio is not None else '–'} |")
    L += ["", "Sluice's packet crosses a process boundary (worker -> fwd -> worker) where testpmd's stays in one "
          "loop; under TCG every instruction is emulated, so that extra work shows as it would on a slow core.", ""]
    return L
