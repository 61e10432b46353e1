"""The churn soak section (bench/soak.py, issue 40): minutes of traffic through three chains under a random
operation every second; operations by kind, packets sent and accounted, sluiced's RSS and fds (a plot),
the pool audits and the pass criteria."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, _link, _pyplot, headline, rows_of

SCENARIO = "soak"
CHECKS = (("sluiced_alive", "sluiced alive at the end"),
          ("never_restarted", "sluiced never restarted (one pid throughout)"),
          ("rss_growth_under_1pct", "RSS growth under 1 % after the warm-up"),
          ("fds_flat", "open fds back to their count before the churn"),
          ("pool_whole_every_audit", "the pool whole at every `pool_audit`"),
          ("final_pool_all_free", "every buffer free after the drain"),
          ("every_packet_accounted", "every packet accounted: sent = received + counted drops"))
KIND_TEXT = {"kill": "SIGKILL of an NF (the supervisor restarts it)",
             "scale": "`nf scale r N` (N in 1..4)",
             "chain": "chain edit (`chain_set`)",
             "rule": "steering rule added or removed",
             "hostile": "hostile NF attached (the one before it killed)"}


def plot(p: Path, d: dict) -> Path | None:
    """<stamp>-soak.png beside the results file: sluiced's RSS and open fds over the run."""
    plt = _pyplot()
    r = next(iter(rows_of(d.get("results", []), SCENARIO)), None)
    if plt is None or not r or not r.get("samples"):
        return None
    s = r["samples"]
    t = [x["t"] / 60 for x in s]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(t, [x["rss_kb"] / 1024 for x in s], color="C0", lw=1, label="RSS (MiB)")
    ax.set_xlabel("minutes since sluice up")
    ax.set_ylabel("sluiced RSS, MiB", color="C0")
    lo = min(x["rss_kb"] for x in s) / 1024
    hi = max(x["rss_kb"] for x in s) / 1024
    ax.set_ylim(lo * 0.98, hi * 1.02 + 0.1)
    fp = r.get("footprint") or {}
    churn = [x["t"] for x in s if x.get("phase") == "churn"]
    if churn and fp.get("warmup_s") is not None:
        ax.axvline((churn[0] + fp["warmup_s"]) / 60, color="grey", ls=":", lw=1)
    ax2 = ax.twinx()
    ax2.plot(t, [x["fds"] for x in s], color="C1", lw=1, drawstyle="steps-post", label="open fds")
    ax2.set_ylabel("sluiced open fds", color="C1")
    ax.set_title(f"churn soak: {r.get('operations_total', '?')} operations in {r.get('churn_s', 0) / 60:.0f} min "
                 "(dotted: end of warm-up)", fontsize=9)
    fig.tight_layout()
    img = p.with_suffix(".png")
    fig.savefig(img, dpi=100)
    plt.close(fig)
    return img


def soak_section(loaded: list[tuple[Path, dict]], out_dir: Path, draw: bool = True) -> list[str]:
    L = ["## Churn soak (`bench/soak.py`)", ""]
    h = headline(loaded, SCENARIO)
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/soak.py --minutes 30`.", ""]
    p, d = h
    r = rows_of(d["results"], SCENARIO)[0]
    cfg = d.get("config", {})
    acc, fp, ops = r.get("packets", {}), r.get("footprint", {}), r.get("operations", {})
    det = r.get("detail", {})
    audits = r.get("audits", [])
    L += [_headline_line(p, d, out_dir) + f" Command: `{cfg.get('command', 'bench/soak.py')}` (seed {cfg.get('seed')}).",
          "",
          "**Method.** `sluice up` of three chains, each fed at full rate by a `net_null` port and leaving by another "
          "(sluiced counts every frame in and out), every NF `fwd`, adaptive, `sluiced.pipes: true`: a = a1 → u "
          "(`trusted: false`: its own trust domain, sandbox strict, a copy at each boundary), b = p1 → p2 → p3 "
          "(NF-to-NF pipes), c = r (3 replicas) → c2; a fourth chain h = [evil] for the hostile NFs. Every second one "
          "operation, each kind as likely: SIGKILL of an NF, `nf scale r N`, a chain edit, a steering rule added or "
          "removed, a hostile NF (`tests/hostile/hostile_nf.c`, a random mode that forges, duplicates or rewrites "
          "descriptors or breaks the ring protocol) attached. `pool_audit` every "
          f"{cfg.get('audit_every_s', 10):.0f} s; sluiced's RSS and open fds sampled every second from /proc. At the "
          "end the deployment is put back as it started, the supply stopped and the NFs drained, then: frames "
          "received on the src ports = frames sent on every port + every drop sluiced counted.", "",
          f"**Result: {'PASS' if r.get('passed') else 'FAIL'}** after {r.get('churn_s', 0) / 60:.1f} minutes of churn.",
          "", "| criterion | |", "|---|---|"]
    for k, text in CHECKS:
        v = (r.get("checks") or {}).get(k)
        L.append(f"| {text} | {'yes' if v else '**NO**' if v is not None else '–'} |")
    L += ["", "| operation | performed | failed |", "|---|---:|---:|"]
    errs = r.get("operation_errors_n", {})
    for k, text in KIND_TEXT.items():
        L.append(f"| {text} | {ops.get(k, 0)} | {errs.get(k, 0)} |")
    L.append(f"| **total** | **{r.get('operations_total', 0)}** | {sum(errs.values())} |")
    modes = ", ".join(f"{m} {n}" for m, n in sorted(det.get("hostile_modes", {}).items()))
    L += ["", f"Hostile modes: {modes or '–'}; {det.get('hostile_disconnected', 0)} hostile NFs disconnected by "
              f"sluiced for breaking the ring protocol. Rules: {det.get('rules_added', 0)} added, "
              f"{det.get('rules_removed', 0)} removed during the churn.", ""]
    drops = {k: v for k, v in (acc.get("drops") or {}).items() if v}
    L += ["| packets | |", "|---|---:|",
          f"| sent (received on the src ports) | {acc.get('sent', 0):,} |",
          f"| received (sent on the ports) | {acc.get('received', 0):,} |"]
    for k, v in sorted(drops.items()):
        if k == "invalid_desc":
            L.append(f"| dropped: invalid_desc (of {v:,} rejected descriptors, those that cost the NF a packet) | "
                     f"{acc.get('invalid_desc_packets', 0):,} |")
        else:
            L.append(f"| dropped: {k} | {v:,} |")
    L += [f"| **accounted** | **{acc.get('accounted', 0):,}** |",
          f"| unaccounted | {acc.get('unaccounted', '?')} |", ""]
    if fp.get("rss_base_kb"):
        L += [f"sluiced's RSS {fp['rss_base_kb'] / 1024:.1f} MiB at the end of the warm-up ({fp['warmup_s']:.0f} s "
              f"into the churn), {fp['rss_end_kb'] / 1024:.1f} MiB at the end: **{fp['rss_growth']:+.2%}** "
              f"(most {fp['rss_max_after_warmup_kb'] / 1024:.1f} MiB, {fp['rss_max_growth']:+.2%}). Open fds "
              f"{fp['fds_before']:.0f} before the churn and {fp['fds_after']:.0f} after it with the same NFs "
              f"attached ({fp['fds_min']}–{fp['fds_max']} during it, as NFs come and go). "
              f"Pool audits: {sum(1 for a in audits if a.get('whole'))} of {len(audits)} whole.", ""]
    png = p.with_suffix(".png")
    if draw and not png.exists():
        plot(p, d)
    if png.exists():
        L += [f"![soak: RSS and fds]({_link(png, out_dir)})", ""]
    return L
