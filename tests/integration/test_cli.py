"""The `sluice` CLI: help, errors without sluiced, config check, and the supervisor
(up/down/status/stats/top/chain) against fake_sluiced.py, a stdlib stand-in for
sluiced and the NFs. None of these need DPDK or a built sluiced."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_sluiced.py"

GOOD = """\
ports:
  - {name: client, vdev: "net_null0", chain: c2s}
  - {name: server, vdev: "net_null1"}
chains:
  - {name: c2s, nfs: [count, fwd], exit: server}
nfs:
  - {name: count, program: count}
  - {name: fwd, program: fwd, instances: 2, wakeup: block}
"""

SUBCOMMANDS = [
    ["up"], ["down"], ["status"], ["stats"], ["top"], ["chain"], ["chain", "set"], ["chain", "list"],
    ["port"], ["port", "chain"], ["config"], ["config", "check"], ["config", "json"], ["api"],
]


# --------------------------------------------------------------------- help

def test_help(run_sluice):
    r = run_sluice("--help")
    assert r.returncode == 0
    for cmd in ("up", "down", "status", "stats", "top", "chain", "config"):
        assert cmd in r.stdout
    assert "example" in r.stdout


def test_no_command_is_usage_error(run_sluice):
    r = run_sluice()
    assert r.returncode == 2
    assert "usage" in r.stderr.lower()


@pytest.mark.parametrize("sub", SUBCOMMANDS, ids=[" ".join(s) for s in SUBCOMMANDS])
def test_subcommand_help(run_sluice, sub):
    r = run_sluice(*sub, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: sluice " + " ".join(sub))
    assert "example" in r.stdout


def test_version(run_sluice):
    r = run_sluice("--version")
    assert r.returncode == 0 and r.stdout.startswith("sluice ")


def test_console_script_entry_point():
    from sluice.cli import main  # what the `sluice` console script calls
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0


# ------------------------------------------------------ without a sluiced

@pytest.mark.parametrize("cmd", [["status"], ["status", "--json"], ["stats"], ["stats", "--json"],
                                 ["top", "--iterations", "1"], ["chain", "set", "c", "--nfs", "a"],
                                 ["chain", "list"], ["port", "chain", "p", "c"], ["api", '"status"']])
def test_not_running_message(run_sluice, socket_dir, cmd):
    r = run_sluice(*cmd, "--socket-dir", socket_dir)
    assert r.returncode == 1
    assert f"sluiced is not running (no socket at {socket_dir}/ctl.sock)" in r.stderr
    assert "Traceback" not in r.stderr


def test_not_running_default_socket_dir(run_sluice):
    if os.path.exists("/run/sluice/ctl.sock"):
        pytest.skip("a sluiced socket exists at /run/sluice")
    r = run_sluice("status")
    assert r.returncode == 1
    assert "sluiced is not running (no socket at /run/sluice/ctl.sock)" in r.stderr


def test_stale_socket_is_not_running(run_sluice, socket_dir):
    import socket as s
    path = str(socket_dir / "ctl.sock")
    sock = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    sock.bind(path)
    sock.close()  # the file stays, nobody listens
    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 1
    assert "sluiced is not running (nothing listening on" in r.stderr


def test_socket_dir_from_env(run_sluice, socket_dir):
    r = run_sluice("status", env={"SLUICE_SOCKET_DIR": str(socket_dir)})
    assert r.returncode == 1 and str(socket_dir) in r.stderr


def test_down_when_not_running_succeeds(run_sluice, socket_dir):
    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0
    assert "not running" in r.stdout


def test_chain_set_validates_names_locally(run_sluice, socket_dir):
    r = run_sluice("chain", "set", "Bad", "--nfs", "a", "--socket-dir", socket_dir)
    assert r.returncode == 2 and "invalid name 'Bad'" in r.stderr


# ------------------------------------------------------------ config check

def test_config_check_good(run_sluice, tmp_path):
    f = tmp_path / "good.yaml"
    f.write_text(GOOD)
    r = run_sluice("config", "check", f)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout and "2 port(s)" in r.stdout and "3 NF instance(s)" in r.stdout


@pytest.mark.parametrize("text,expect", [
    (GOOD.replace("exit: server", "exit: srv"),
     "config error: chains[0].exit: unknown port 'srv'"),
    (GOOD.replace("wakeup: block", "wakeup: sleepy"),
     "config error: nfs[1].wakeup: must be one of poll, block, adaptive (got 'sleepy')"),
    (GOOD.replace("chain: c2s", "chain: c2x"), "config error: ports[0].chain: unknown chain 'c2x'"),
    (GOOD.replace("program: count", "program: count, colour: red"), "config error: nfs[0].colour: unknown key"),
    ("ports: []\n", "config error: ports: must have at least 1 port"),
    ("ports: [\n", "config error: invalid YAML at"),
])
def test_config_check_bad(run_sluice, tmp_path, text, expect):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = run_sluice("config", "check", f)
    assert r.returncode == 2
    assert expect in r.stderr
    assert "Traceback" not in r.stderr


def test_config_check_missing_file(run_sluice, tmp_path):
    r = run_sluice("config", "check", tmp_path / "nope.yaml")
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_config_check_no_programs(run_sluice, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("ports: [{name: p, vdev: net_null0}]\nnfs: [{name: x, program: /nonexistent/x}]\n")
    assert run_sluice("config", "check", f).returncode == 2
    assert run_sluice("config", "check", "--no-programs", f).returncode == 0


def test_config_json(run_sluice, tmp_path):
    f = tmp_path / "good.yaml"
    f.write_text(GOOD)
    r = run_sluice("config", "json", f, "--socket-dir", "/tmp/slq")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["sluiced"]["socket_dir"] == "/tmp/slq"
    assert j["chains"] == [{"name": "c2s", "nfs": ["count", "fwd"], "exit": "server"}]
    assert j["ports"][1]["chain"] is None


def test_up_bad_config_exits_2(run_sluice, tmp_path, socket_dir):
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("exit: server", "exit: srv"))
    r = run_sluice("up", f, "-d", "--socket-dir", socket_dir)
    assert r.returncode == 2
    assert "config error: chains[0].exit: unknown port 'srv'" in r.stderr


def test_up_without_sluiced_binary(run_sluice, tmp_path, socket_dir):
    f = tmp_path / "good.yaml"
    f.write_text(GOOD)
    r = run_sluice("up", f, "-d", "--socket-dir", socket_dir, "--build-dir", tmp_path / "nobuild")
    assert r.returncode == 1
    assert "no sluiced binary at" in r.stderr


# ------------------------------------------- supervisor against a fake sluiced

@pytest.fixture
def fake_build(tmp_path):
    """A build dir whose sluiced and sluice-nf-* are fake_sluiced.py."""
    b = tmp_path / "build"
    (b / "src" / "manager").mkdir(parents=True)
    (b / "nfs").mkdir()
    (b / "src" / "manager" / "sluiced").symlink_to(FAKE)
    for n in ("fwd", "count", "reflect"):
        (b / "nfs" / f"sluice-nf-{n}").symlink_to(FAKE)
    return b


@pytest.fixture
def up(run_sluice, tmp_path, socket_dir, fake_build):
    """Start `sluice up -d` on the fake; always `sluice down` afterwards."""
    started = []

    def start(text=GOOD, env=None, extra=()):
        f = tmp_path / "sluice.yaml"
        f.write_text(text)
        r = run_sluice("up", f, "-d", "--build-dir", fake_build, "--socket-dir", socket_dir,
                       "--ready-timeout", 10, "--attach-timeout", 10, *extra, env=env)
        started.append(True)
        return r
    yield start
    if started:
        run_sluice("down", "--socket-dir", socket_dir)


def _state(socket_dir):
    return json.loads((socket_dir / "state.json").read_text())


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _wait(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_up_status_stats_down(up, run_sluice, socket_dir):
    r = up()
    assert r.returncode == 0, r.stderr
    assert "3 NF(s) attached (count.0 fwd.0 fwd.1)" in r.stdout
    st = _state(socket_dir)
    pids = [st["supervisor"]["pid"], st["sluiced"]["pid"]] + [n["pid"] for n in st["nfs"]]
    assert all(_alive(p) for p in pids)
    assert [n["name"] for n in st["nfs"]] == ["count.0", "fwd.0", "fwd.1"]
    cfg = json.loads((socket_dir / "config.json").read_text())
    assert cfg["sluiced"]["socket_dir"] == str(socket_dir)
    assert (socket_dir / "logs" / "fwd.1.log").exists()

    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert "fwd.1" in r.stdout and "RESTARTS" in r.stdout
    r = run_sluice("status", "--json", "--socket-dir", socket_dir)
    assert json.loads(r.stdout)["nf_count"] == 3
    r = run_sluice("stats", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "PORTS" in r.stdout and "count -> fwd" in r.stdout
    r = run_sluice("stats", "--json", "--socket-dir", socket_dir)
    assert {"ports", "nfs", "services", "chains", "drops", "pool"} <= set(json.loads(r.stdout))
    r = run_sluice("top", "--interval", "0.2", "--iterations", "2", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("RX PPS") == 4  # ports + NF table, two frames
    r = run_sluice("chain", "set", "c2s", "--nfs", "fwd", "--exit", "client", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "fwd -> exit client" in r.stdout
    r = run_sluice("chain", "set", "c2s", "--nfs", "fwd", "--exit", "nosuch", "--socket-dir", socket_dir)
    assert r.returncode == 1 and "unknown port 'nosuch'" in r.stderr
    r = run_sluice("api", '{"cmd":"chains"}', "--socket-dir", socket_dir)
    assert json.loads(r.stdout)["chains"][0]["nfs"] == ["fwd"]

    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "stopped" in r.stdout
    assert _wait(lambda: not any(_alive(p) for p in pids), 5)
    assert not (socket_dir / "ctl.sock").exists() and not (socket_dir / "state.json").exists()


def test_second_up_refused(up, socket_dir):
    assert up().returncode == 0
    r = up()
    assert r.returncode == 1 and "already running" in r.stderr


def test_nf_restart_with_backoff(up, run_sluice, socket_dir, tmp_path):
    marker = tmp_path / "crashed"
    r = up(env={"FAKE_NF_CRASH_ONCE": str(marker)})
    assert r.returncode == 0, r.stderr
    assert marker.exists()
    st = _state(socket_dir)
    assert sum(n["restarts"] for n in st["nfs"]) == 1
    victim = st["nfs"][2]
    os.kill(victim["pid"], signal.SIGKILL)
    assert _wait(lambda: [n for n in _state(socket_dir)["nfs"] if n["name"] == victim["name"]][0]["pid"]
                 not in (None, victim["pid"]), 5)
    log = (socket_dir / "logs" / "supervisor.log").read_text()
    assert f"NF {victim['name']} (pid {victim['pid']}) killed by SIGKILL" in log
    assert "restarting NF" in log and "in 0.1s" in log


def test_restart_never_fails_startup(up, socket_dir, tmp_path):
    text = GOOD.replace("program: count}", "program: count, restart: never}").replace(
        "wakeup: block}", "wakeup: block, restart: never}")
    r = up(text, env={"FAKE_NF_CRASH_ONCE": str(tmp_path / "m")})
    assert r.returncode == 1
    assert re.search(r"NF (count\.0|fwd\.[01]) exited with status 3 during startup \(restart: never\)", r.stderr)
    assert "fake nf: crashing once" in r.stderr
    assert not (socket_dir / "ctl.sock").exists()


def test_sluiced_dies_at_startup_shows_output(up, socket_dir):
    r = up(env={"FAKE_SLUICED_FAIL": "config: field 'ports[0].vdev': no such device"})
    assert r.returncode == 1
    assert "sluiced exited with status 1 during startup" in r.stderr
    assert "no such device" in r.stderr
    assert not (socket_dir / "state.json").exists()


def test_down_kills_nf_ignoring_sigterm(up, run_sluice, socket_dir):
    assert up(env={"FAKE_NF_IGNORE_TERM": "1"}).returncode == 0
    pids = [n["pid"] for n in _state(socket_dir)["nfs"]]
    t = time.monotonic()
    assert run_sluice("down", "--socket-dir", socket_dir).returncode == 0
    assert 2.5 < time.monotonic() - t < 15
    assert not any(_alive(p) for p in pids)


def test_foreground_sigint(run_sluice, tmp_path, socket_dir, fake_build):
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "python"))
    f = tmp_path / "sluice.yaml"
    f.write_text(GOOD)
    p = subprocess.Popen([sys.executable, "-m", "sluice", "up", str(f), "--build-dir", str(fake_build),
                          "--socket-dir", str(socket_dir)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()  # printed once sluiced is ready and every NF attached
        assert first.startswith("sluice up: sluiced pid"), first
        st = _state(socket_dir)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "received SIGINT, stopping" in err
    assert not any(_alive(n["pid"]) for n in st["nfs"]) and not _alive(st["sluiced"]["pid"])
    assert not (socket_dir / "ctl.sock").exists()
