"""Live operations section (bench/restart.py, issue 35): how long traffic stops when sluiced restarts
(killed, planned, and the cold `down` + `up` an operator had before), and what a reload loses."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, _pyplot, headline, png_path, rows_of

RELOAD_TARGET = 0  # packets lost on unchanged chains during a reload


def _ms(x):
    return "–" if x is None else f"{x * 1000:.0f}"


def _plot(p: Path, rows: list[dict], out_dir: Path) -> list[str]:
    plt = _pyplot()
    if plt is None:
        return []
    rs = [r for r in rows if r.get("samples")]
    if not rs:
        return []
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.boxplot([[s["flowing_s"] * 1000 for s in r["samples"]] for r in rs], vert=False)
    ax.set_yticks(range(1, len(rs) + 1), [r["row"] for r in rs])  # (boxplot's labels= is gone in matplotlib 3.9)
    ax.set_xlabel("ms from the stop until packets leave the chain again")
    ax.set_title("sluiced restart: 3-NF chain")
    fig.tight_layout()
    img = png_path(p.with_suffix(""), "times")
    fig.savefig(img, dpi=100)
    plt.close(fig)
    import os
    return [f"![restart times]({os.path.relpath(img, out_dir)})", ""]


def restart_section(loaded: list[tuple[Path, dict]], out_dir: Path, draw: bool = True) -> list[str]:
    L = ["## Live operations: sluiced restarts and reloads (`bench/restart.py`)", ""]
    h = headline(loaded, "restart")
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/restart.py`.", ""]
    p, d = h
    cfg = d.get("config", {})
    rows = rows_of(d["results"], "restart")
    L += [_headline_line(p, d, out_dir), "",
          "**Method.** `sluice up` of port `src` (net_null) -> f1 -> f2 -> f3 (`fwd`, adaptive) -> port `dst` "
          "(net_null). Each run stops sluiced one way and times, from that moment, a new sluiced answering "
          "(`ready`), the three NFs attached (`attached`) and packets leaving `dst` again (`flowing`; the control "
          f"API polled every 2 ms). Rows alternate within each of {cfg.get('runs', '?')} runs: `kill` (SIGKILL; the "
          "supervisor restarts sluiced, the NF processes re-attach with their state), `planned` (`sluice restart`, "
          "timed from launching the command: ports paused, NFs drained, then the same), `cold` (`sluice down` + "
          "`sluice up -d`, what an operator had before: every NF restarted, its state lost). Median of runs with "
          "min–max.", "",
          "| row | flowing again, ms (min–max) | ready, ms | NFs attached, ms | NF state |",
          "|---|---:|---:|---:|---|"]
    for r in rows:
        if r.get("row") == "reload":
            continue
        L.append(f"| {r['row']} | **{_ms(r.get('median_flowing_s'))}** ({_ms(r.get('min_flowing_s'))}–"
                 f"{_ms(r.get('max_flowing_s'))}) | {_ms(r.get('median_ready_s'))} | {_ms(r.get('median_attached_s'))} "
                 f"| {'lost' if r['row'] == 'cold' else 'kept'} |")
    L.append("")
    if draw:
        L += _plot(p, rows, out_dir)
    rl = next((r for r in rows if r.get("row") == "reload"), None)
    if rl:
        runs = rl.get("runs") or []
        nfs = runs[0].get("nfs") if runs else cfg.get("reload_nfs")
        L += [f"**Reload.** A deployment of {nfs} NFs: chain `probe` = gen -> fwd -> sink paces exactly "
              f"{cfg.get('gen_packets', '?')} packets at {cfg.get('gen_rate_pps', '?')} pps; the other NFs are idle "
              f"`fwd` services, a chain each. While gen runs, {cfg.get('reloads', '?')} `sluice reload`s each edit one "
              "idle chain. Lost = packets gen sent that sink did not count.", "",
              "| runs | lost on the unchanged chain, median (max) | one reload, s (max) |", "|---:|---:|---:|",
              f"| {len(runs)} | **{rl.get('median_lost')}** ({rl.get('max_lost')}) | {rl.get('median_reload_s', 0):.2f} "
              f"({rl.get('max_reload_s', 0):.2f}) |", "",
              f"- **Target** (0 packets lost on unchanged chains): **{'met' if rl.get('max_lost') == RELOAD_TARGET else 'NOT met'}**.",
              ""]
    return L
