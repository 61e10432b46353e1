"""The RFC 2544 zero-loss search of bench/rfc2544.py, against a modelled system.

The model is a system that loses packets above `capacity` behind a generator that cannot offer
more than `ceiling`; the real systems are exercised by `make test`'s `bench/run.py --quick`.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import rfc2544  # noqa: E402


class Model:
    def __init__(self, capacity, ceiling, flaky_at=None, share=1.0):
        """share: the part of the asked rate the generator really sends (< 1: it shares its core)."""
        self.capacity, self.ceiling, self.flaky_at, self.share = capacity, ceiling, flaky_at, share
        self.offered = []

    def trial(self, rate, duration, warmup):
        self.offered.append(rate)
        sent_pps = min(rate * self.share, self.ceiling)
        sent = int(sent_pps * duration)
        lost = 0 if sent_pps <= self.capacity else int((sent_pps - self.capacity) * duration) + 1
        if self.flaky_at is not None and abs(rate - self.flaky_at) < 1:
            lost = 1
        return {"offered_pps": rate, "sent": sent, "received": sent - lost, "lost": lost, "sent_pps": sent_pps,
                "latency_ns": None, "histogram": []}


@pytest.mark.parametrize("capacity", [1e5, 7.3e5, 2.9e6, 9.99e6])
def test_finds_capacity_within_resolution(capacity):
    m = Model(capacity=capacity, ceiling=12e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=0.01, max_trials=40)
    assert not r.generator_bound
    assert r.ceiling_pps == 12e6
    assert capacity * 0.99 <= r.zero_loss_pps <= capacity   # never claims more than it passed
    assert r.trials[0]["offered_pps"] == 15e6 and len(r.trials) == len(m.offered)


def test_generator_bound_when_ceiling_passes():
    m = Model(capacity=5e6, ceiling=2e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1)
    assert r.generator_bound and r.zero_loss_pps == 2e6
    assert len(r.trials) == 2    # the probe and one full trial at the ceiling


def test_generator_falling_short_in_a_passing_trial_is_a_lower_bound():
    """The probe overestimates the ceiling; the next trial sends less than offered, losing nothing."""
    class Drifting(Model):
        def trial(self, rate, duration, warmup):
            if not self.offered:  # the probe: a short burst looks faster than the sustained rate
                self.offered.append(rate)
                return {"offered_pps": rate, "sent": 400000, "received": 400000, "lost": 0, "sent_pps": 4e6,
                        "latency_ns": None, "histogram": []}
            return super().trial(rate, duration, warmup)
    m = Drifting(capacity=9e6, ceiling=1.5e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1)
    assert r.generator_bound and r.zero_loss_pps == 1.5e6
    # the second full trial asked for more to make up for the shortfall, and got no more
    assert len(r.trials) == 3 and r.trials[2]["offered_pps"] > r.trials[1]["offered_pps"]


@pytest.mark.parametrize("share", [0.5, 0.96])
def test_generator_that_always_sends_less_than_asked_is_searched_on_what_it_sent(share):
    """A generator sharing its core sends a fixed share of the asked rate: the search must still
    bracket the system's capacity (on the sent rate), not stop at the first short pass."""
    m = Model(capacity=1e5, ceiling=6e6, share=share)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=0.01, max_trials=40)
    assert not r.generator_bound
    assert 0.99e5 <= r.zero_loss_pps <= 1e5
    assert r.efficiency == pytest.approx(share)
    # latency trials ask for enough that the generator really sends the load
    assert r.ask_for(0.5) * share == pytest.approx(0.5 * r.zero_loss_pps)


def test_loss_at_generator_limit_searches_below_what_was_really_sent():
    m = Model(capacity=1e6, ceiling=1.5e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=0.01, max_trials=40)
    assert not r.generator_bound
    assert 0.99e6 <= r.zero_loss_pps <= 1e6
    assert max(t["offered_pps"] for t in r.trials[1:]) <= 1.5e6


def test_max_trials_bounds_the_search_and_result_passed():
    m = Model(capacity=3.3e6, ceiling=12e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=1e-9, max_trials=5)
    assert len(r.trials) == 5
    assert r.zero_loss_pps <= 3.3e6


def test_nothing_passes():
    m = Model(capacity=0, ceiling=12e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, max_trials=6)
    assert r.zero_loss_pps == 0 and not r.generator_bound


def test_rows():
    s = [rfc2544.SearchResult(1e6, False, 2e6, []), rfc2544.SearchResult(3e6, True, 3e6, []),
         rfc2544.SearchResult(2e6, False, 2e6, [])]
    row = rfc2544.zeroloss_row("sluice", 1, 66, "poll", s, 1.0)
    assert row["median_pps"] == 2e6 and row["min_pps"] == 1e6 and row["max_pps"] == 3e6
    assert row["runs_generator_bound"] == [False, True, False]
    lat = {"min": 1, "mean": 2, "p50": 10, "p90": 20, "p99": 30, "p999": 40, "max": 50, "samples": 9}
    runs = [{"offered_pps": 1e5, "lost": 0, "latency_ns": lat, "histogram": [[10, 4], [50, 5]]},
            {"offered_pps": 1e5, "lost": 2, "latency_ns": {**lat, "p50": 30}, "histogram": [[10, 1]]}]
    lr = rfc2544.latency_row("sluice", 1, 66, "poll", 0.5, runs)
    assert lr["histogram"] == [[10, 5], [50, 5]] and lr["runs_lost"] == [0, 2]
    assert lr["median_ns"]["p50"] == 20 and lr["min_ns"]["p50"] == 10 and lr["max_ns"]["p50"] == 30


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_system_far_below_the_generator_is_bracketed_within_the_default_budget(share):
    """OVS with testpmd NFs sharing the generator's core takes ~2e4 pps behind a 5 Mpps generator:
    the search must find a passing rate (and say where loss began) within 11 trials."""
    m = Model(capacity=2e4, ceiling=5e6, share=share)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=0.02, max_trials=11)
    assert len(r.trials) <= 11
    assert 0.8 * 2e4 <= r.zero_loss_pps <= 2e4
    assert r.upper_pps is not None and 2e4 < r.upper_pps <= 2 * 2e4


def test_upper_bound_is_the_lowest_sent_rate_that_lost():
    m = Model(capacity=1e6, ceiling=12e6)
    r = rfc2544.zero_loss_search(m, 15e6, 1.0, 0.1, resolution=0.01, max_trials=40)
    lossy = [t["sent_pps"] for t in r.trials if t["lost"]]
    assert r.upper_pps == pytest.approx(min(lossy), abs=1) and r.upper_pps > r.zero_loss_pps
    row = rfc2544.zeroloss_row("ovs-dpdk", 1, 66, None, [r], 1.0)
    assert row["runs_upper_pps"] == [round(min(lossy))]


def test_no_loss_means_no_upper_bound():
    r = rfc2544.zero_loss_search(Model(capacity=5e6, ceiling=2e6), 15e6, 1.0, 0.1)
    assert r.upper_pps is None
