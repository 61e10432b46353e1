"""bench/switchcost.c (sluice-bench-switchcost) and bench/common.switch_cost, which bench/run.py records
with every run and BENCHMARKS.md shows under Machine and in the latency reading.

What the probe reports is checked for form only: how long a switch takes is the machine's business,
and timings stay out of pass/fail tests."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import common  # noqa: E402
from report.document import machine_rows  # noqa: E402
from report.latency import _floor_reading  # noqa: E402

KEYS = {"cpu", "procs", "yields", "policy", "switch_ns", "thread_switch_ns", "yield_alone_ns"}


@pytest.fixture
def probe(build_dir):
    exe = build_dir / "bench" / "sluice-bench-switchcost"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    return exe


def test_reports_a_fifo_ring_as_one_json_line(probe):
    cp = subprocess.run([str(probe), "--procs", "3", "--yields", "2000"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert len(lines) == 1
    r = json.loads(lines[0])
    assert set(r) == KEYS
    assert (r["cpu"], r["procs"], r["yields"]) == (0, 3, 2000)
    assert r["policy"] == "fifo"  # the tests run as root, so SCHED_FIFO is granted
    assert all(r[k] > 0 for k in ("switch_ns", "thread_switch_ns", "yield_alone_ns"))


@pytest.mark.parametrize("argv,field", [
    (["--procs", "1"], "--procs 1"),
    (["--procs", "65"], "--procs 65"),
    (["--yields", "0"], "--yields 0"),
    (["--cpu", "x"], "--cpu x"),
    (["stray"], "'stray'"),
])
def test_bad_arguments_name_the_field(probe, argv, field):
    cp = subprocess.run([str(probe), *argv], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 1
    assert field in cp.stderr and cp.stdout == ""


def test_switch_cost_records_the_probe_or_none(build_dir, tmp_path, probe, capsys):
    r = common.switch_cost(build_dir, cpu=0, procs=2)
    assert r is not None and set(r) == KEYS and r["procs"] == 2
    assert common.switch_cost(tmp_path) is None  # not built: no figure, and a note that says why
    assert "not built" in capsys.readouterr().err


def test_report_shows_the_figures_and_the_floor():
    cost = {"cpu": 0, "procs": 5, "yields": 100000, "policy": "fifo", "switch_ns": 1200, "thread_switch_ns": 900,
            "yield_alone_ns": 300}
    m = {"switch_cost_start": cost, "switch_cost_end": dict(cost, switch_ns=1500)}
    row = [x for x in machine_rows(m) if "process switch" in x]
    assert row == ["| process switch on core 0 | 1.20 / 1.50 µs at start / end of the run (5 FIFO processes "
                   "yielding in turn, `sluice-bench-switchcost`; between threads of one process 0.90 µs, a yield "
                   "alone 0.30 µs) |"]
    floor = _floor_reading({"machine": m}, [1, 3])
    assert len(floor) == 1 and "1 NF: 2 switches, 2.4 µs, 3 NFs: 4 switches, 4.8 µs" in floor[0]
    # runs from before the probe: no row, no floor line
    assert not [x for x in machine_rows({}) if "process switch" in x]
    assert _floor_reading({"machine": {}}, [1, 3]) == []
