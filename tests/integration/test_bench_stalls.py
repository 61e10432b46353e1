"""bench/stalls.c (sluice-bench-stalls) and bench/common.cpu_stalls, which bench/run.py records with
every latency run and BENCHMARKS.md reads as the floor under the tail (Machine, latency reading).

What the probe reports is checked for form and arithmetic only: how long this host stalls a CPU is its
business, and timings stay out of pass/fail tests."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import common  # noqa: E402
from report.document import machine_rows  # noqa: E402
from report.latency import _stall_reading  # noqa: E402

KEYS = {"cpu", "policy", "seconds", "stalls_over", "max_us", "lost_share", "late_share_100us", "late_share_1000us",
        "steal_share"}


@pytest.fixture
def probe(build_dir):
    exe = build_dir / "bench" / "sluice-bench-stalls"
    assert exe.exists(), f"{exe} not built"
    return exe


@pytest.mark.parametrize("policy", ["other", "fifo"])
def test_reports_one_json_line_whose_shares_add_up(probe, policy):
    cp = subprocess.run([str(probe), "--cpu", "1", "--seconds", "0.3", "--policy", policy],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    [line] = cp.stdout.splitlines()
    r = json.loads(line)
    assert set(r) == KEYS and (r["cpu"], r["policy"]) == (1, policy)
    over = r["stalls_over"]
    # counts over rising thresholds cannot rise; shares are fractions, the longer-stall share the smaller
    assert over["5"] >= over["10"] >= over["100"] >= over["1000"] >= 0
    assert 0 <= r["late_share_1000us"] <= r["late_share_100us"] <= r["lost_share"] < 1
    assert (r["max_us"] > 5) == (over["5"] > 0)
    assert (r["max_us"] > 1000) == (over["1000"] > 0)


@pytest.mark.parametrize("argv,field", [
    (["--cpu", "x"], "--cpu x"),
    (["--cpu", "4096"], "CPU 4096"),
    (["--seconds", "0"], "--seconds 0"),
    (["--policy", "rr"], "--policy rr"),
    (["stray"], "'stray'"),
])
def test_bad_arguments_name_the_field(probe, argv, field):
    cp = subprocess.run([str(probe), *argv], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 1
    assert field in cp.stderr and cp.stdout == ""


def test_cpu_stalls_measures_both_cores_or_says_why_not(build_dir, tmp_path, probe, capsys):
    r = common.cpu_stalls(build_dir, seconds=0.2)
    assert r is not None and [x["cpu"] for x in r] == [0, 1] and all(set(x) == KEYS for x in r)
    assert common.cpu_stalls(tmp_path) is None  # not built: no figure, and a note that says why
    assert "not built" in capsys.readouterr().err


def stalls(cpu, late, longest, over_ms):
    return {"cpu": cpu, "policy": "fifo", "seconds": 10.0, "stalls_over": {"5": 3000, "10": 2900, "100": 20,
            "1000": over_ms}, "max_us": longest, "lost_share": 0.009, "late_share_100us": late,
            "late_share_1000us": late / 2, "steal_share": 0.0}


def test_report_names_the_cores_that_rule_out_the_tail_target():
    quiet = {"machine": {"cpu_stalls": [stalls(0, 0.00002, 400.0, 0), stalls(1, 0.00003, 900.0, 0)]}}
    [line] = _stall_reading(quiet)
    assert "core 0: 20 stalls > 100 µs and 0 > 1 ms" in line and "whatever the system" not in line
    noisy = {"machine": {"cpu_stalls": [stalls(0, 0.0005, 3200.0, 2), stalls(1, 0.00003, 900.0, 0)]}}
    [line] = _stall_reading(noisy)
    assert "no path through core 0 can have p99.99 ≤ 100 µs" in line
    assert "none through core 0 can keep every packet under 1 ms" in line
    assert _stall_reading({"machine": {}}) == []
    rows = "\n".join(machine_rows(noisy["machine"]))
    assert "CPU stalls (10 s" in rows and "core 0: longest 3.20 ms, 2 over 1 ms" in rows
