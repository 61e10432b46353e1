"""Scenarios 2 and 3: zero-loss throughput (RFC 2544 section 26.1) and latency at fractions of it.

Every system provides a *trials session*: a context manager that builds its chain of N NFs once,
with a rate-controlled, timestamping generator and sink attached, and answers

    session.trial(rate_pps, duration, warmup) -> {"offered_pps", "sent", "received", "lost",
        "sent_pps", "latency_ns": {min, mean, p50, p90, p99, p999, max, samples} | None,
        "histogram": [[upper_ns, count], ...], "reordered", "duplicates", ...}

(sluice_fabric.SluiceTrials, peer_memif.MemifTrials, peer_linux.LinuxTrials, peer_ovs.OvsTrials).
A trial sends at the rate for `warmup` seconds (not counted), then round(rate x duration) packets
(counted), then waits for stragglers; `lost` = counted packets sent - counted packets received.

Search, per session (one per system, chain length and round):
  1. probe: a short trial at `start_pps` (above what any generator here reaches); its achieved
     send rate `sent_pps` is the generator's ceiling G for this set-up.
  2. binary search on the rate the generator really sends, in (0, G], starting at G: a trial with
     no loss raises the lower bound to its sent rate, any loss lowers the upper bound to it, until
     the bounds are within `resolution` (relative) or `max_trials` ran. Until a trial has passed,
     the next target is a quarter (not half) of the upper bound, so systems 100x slower than the
     generator are bracketed within a few trials. The result is the highest sent rate that lost
     nothing, with the lowest sent rate that lost (`upper_pps`) as the other bound.
  3. generators here share core 0 with the NFs and often send less than asked. Each trial asks for
     target / e, where e is the share of the asked rate the previous trial really sent, so the
     sent rate lands near the target. A loss-free trial at the ceiling, or a loss-free trial that
     fell short (< 97 %) and did not raise the lower bound, ends the search *generator bound*: a
     lower bound, the system may take more than the generator could offer.
Latency (scenario 3) then runs, in the same session, one trial at 10, 50 and 90 % of that
round's zero-loss rate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

LOADS = (0.1, 0.5, 0.9)
SHORTFALL = 0.97  # a trial whose generator sent below this share of the offered rate fell short


@dataclass
class SearchResult:
    zero_loss_pps: float
    generator_bound: bool
    ceiling_pps: float
    trials: list[dict] = field(default_factory=list)
    efficiency: float = 1.0  # share of the asked rate the generator really sent in the passing trial
    upper_pps: float | None = None  # lowest sent rate that lost packets (None: no trial lost)

    def ask_for(self, load: float) -> float:
        """The rate to ask for so the generator really sends load x the zero-loss rate."""
        return load * self.zero_loss_pps / self.efficiency


def _brief(r: dict) -> dict:
    return {"offered_pps": round(r["offered_pps"]), "sent_pps": round(r.get("sent_pps") or 0),
            "sent": r["sent"], "lost": r["lost"]}


def zero_loss_search(session, start_pps: float, duration: float, warmup: float, resolution: float = 0.02,
                     max_trials: int = 10, probe_duration: float = 0.1, on_trial=None) -> SearchResult:
    """RFC 2544 26.1 binary search (see the module docstring); on_trial(rate, result) per trial."""
    trials: list[dict] = []

    def run(rate: float, dur: float, warm: float = warmup) -> dict:
        r = session.trial(rate, dur, warm)
        trials.append(_brief(r))
        if on_trial:
            on_trial(rate, r)
        return r

    # short, barely warmed: generators that send exactly rate x duration packets take
    # start/ceiling times longer than asked
    probe = run(start_pps, probe_duration, min(warmup, 0.05))
    ceiling = min(probe.get("sent_pps") or 0.0, start_pps)
    if ceiling <= 0:
        return SearchResult(0.0, False, 0.0, trials)
    lo, hi, lost_at = 0.0, ceiling, None  # bounds on the *sent* rate: lo passed, hi lost (or untested)
    target, efficiency, eff_lo = ceiling, 1.0, 1.0
    while len(trials) < max_trials:
        # ask for more than the target when the generator has been falling short, so the rate it
        # really sends lands on the target
        ask = min(target / efficiency, start_pps)
        r = run(ask, duration)
        sent_pps = r.get("sent_pps") or 0.0
        achieved = min(ask, sent_pps)
        short = sent_pps < SHORTFALL * ask
        if sent_pps > 0:
            efficiency = min(1.0, sent_pps / ask)
        if r["lost"] == 0 and r["sent"] > 0:
            raised = achieved > lo * (1 + resolution)
            if achieved >= lo:
                lo, eff_lo = achieved, efficiency
            if not short and target >= ceiling:
                # passed at the generator's ceiling
                return SearchResult(lo, True, ceiling, trials, eff_lo, lost_at)
            if short and not raised:
                # asked for more, got no more than already passed: what the generator can offer
                return SearchResult(lo, True, ceiling, trials, eff_lo, lost_at)
        else:
            hi = min(hi, achieved)
            lost_at = hi
        if hi - lo <= resolution * hi:
            break
        target = (lo + hi) / 2 if lo > 0 else hi / 4
    return SearchResult(lo, False, ceiling, trials, eff_lo, lost_at)


def merge_histograms(hists: list[list]) -> list[list[int]]:
    acc: dict[int, int] = {}
    for h in hists:
        for upper, count in h or []:
            acc[int(upper)] = acc.get(int(upper), 0) + int(count)
    return [[u, acc[u]] for u in sorted(acc)]


def zeroloss_row(system: str, nfs: int, size: int, mode, searches: list[SearchResult], duration: float) -> dict:
    vals = [s.zero_loss_pps for s in searches]
    row = {"scenario": "zeroloss", "system": system, "nfs": nfs, "size": size, "mode": mode,
           "runs_pps": [round(v) for v in vals],
           "runs_generator_bound": [s.generator_bound for s in searches],
           "runs_ceiling_pps": [round(s.ceiling_pps) for s in searches],
           "runs_upper_pps": [round(s.upper_pps) if s.upper_pps is not None else None for s in searches],
           "runs_search": [s.trials for s in searches], "trial_duration_s": duration}
    if vals:
        med = statistics.median(vals)
        row.update(median_pps=round(med), min_pps=round(min(vals)), max_pps=round(max(vals)),
                   median_mpps=round(med / 1e6, 4), median_gbps=round(med * size * 8 / 1e9, 3))
    else:
        row.update(median_pps=None, min_pps=None, max_pps=None, median_mpps=None, median_gbps=None)
    return row


PCTS = ("p50", "p99", "p999", "max")


def latency_row(system: str, nfs: int, size: int, mode, load: float, runs: list[dict]) -> dict:
    """runs: the trial dicts of this (system, N, load), one per round."""
    lat = [r.get("latency_ns") for r in runs]
    good = [x for x in lat if x]
    row = {"scenario": "latency", "system": system, "nfs": nfs, "size": size, "mode": mode, "load": load,
           "runs_rate_pps": [round(r["offered_pps"]) for r in runs],
           "runs_sent_pps": [round(r.get("sent_pps") or 0) for r in runs],
           "runs_latency_ns": lat, "runs_lost": [r["lost"] for r in runs],
           "histogram": merge_histograms([r.get("histogram") for r in runs])}
    if good:
        row["median_ns"] = {p: round(statistics.median(x[p] for x in good)) for p in PCTS}
        row["min_ns"] = {p: min(x[p] for x in good) for p in PCTS}
        row["max_ns"] = {p: max(x[p] for x in good) for p in PCTS}
    else:
        row["median_ns"] = row["min_ns"] = row["max_ns"] = None
    return row
