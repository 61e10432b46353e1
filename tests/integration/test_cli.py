"""The `sluice` CLI: help, errors without sluiced, config check, and the supervisor
(up/down/status/stats/top/chain/port chain, restart policy, foreground SIGINT) with the
real sluiced and NFs from the build dir (build/src/manager/sluiced, build/nfs/sluice-nf-*)
on net_null ports. Run as root (DPDK)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import kill_procs_of as _kill_leftovers, pid_alive as _alive, procs_of as _procs_of

HERE = Path(__file__).resolve().parent

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
    ["port"], ["port", "chain"], ["port", "add"], ["port", "del"], ["port", "list"], ["config"],
    ["config", "check"], ["config", "json"], ["api"], ["bench"],
    ["rule"], ["rule", "list"], ["rule", "add"], ["rule", "del"], ["rule", "load"], ["rule", "test"], ["flows"],
    ["service"], ["service", "list"], ["service", "set"], ["nf"], ["nf", "scale"],
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


# ------------------------------------------- supervisor with the real sluiced and NFs
#
# Every test below runs build/src/manager/sluiced and build/nfs/sluice-nf-* on net_null ports
# (no network setup). NFs use wakeup: block: sluiced's worker busy-polls a core and there may be
# only two. Each test gets its own socket dir (fixture socket_dir), so a sluiced started by someone
# else elsewhere does not interfere; every process started for that dir is found through /proc
# (_procs_of) and killed in the fixture finalizers whatever happens.

NULL_PORTS = """\
sluiced: {pool_mbufs: 8192}
ports:
  - {name: src, vdev: "net_null0,size=64,copy=0", chain: c}
  - {name: dst, vdev: "net_null1,size=64,copy=0"}
"""

# one fwd NF: src -> fwd -> dst
FWD = NULL_PORTS + """\
chains:
  - {name: c, nfs: [fwd], exit: dst}
nfs:
  - {name: fwd, program: fwd, wakeup: block}
"""

# every built-in NF: src -> count -> fwd (2 instances) -> dst; reflect attached but in no chain
FULL = NULL_PORTS + """\
chains:
  - {name: c, nfs: [count, fwd], exit: dst}
nfs:
  - {name: count, program: count, wakeup: block}
  - {name: fwd, program: fwd, instances: 2, wakeup: block}
  - {name: reflect, program: reflect, wakeup: block}
"""

# Fault injection around the real NF: exits 3 the first time (creating $CRASH_ONCE_MARKER),
# afterwards execs the real binary.
CRASH_ONCE = """\
#!/bin/sh
if [ ! -e "$CRASH_ONCE_MARKER" ]; then
    : > "$CRASH_ONCE_MARKER"
    echo "crash-once: exiting 3 before exec"
    exit 3
fi
exec {nf} "$@"
"""


@pytest.fixture(scope="session")
def real_build(build_dir):
    """The meson build dir with sluiced and the built-in NFs (runs ninja if they are missing)."""
    need = [build_dir / "src" / "manager" / "sluiced"] + [build_dir / "nfs" / f"sluice-nf-{n}"
                                                         for n in ("fwd", "count", "reflect")]
    if not all(os.access(p, os.X_OK) for p in need) and (build_dir / "build.ninja").exists():
        subprocess.run(["ninja", "-C", str(build_dir)], check=False, capture_output=True, timeout=600)
    missing = [str(p) for p in need if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make build`)")
    return build_dir


def _wait(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


@pytest.fixture
def up(run_sluice, tmp_path, socket_dir, real_build):
    """up(text=FWD, env=None) runs `sluice up -d` on the real build. Afterwards always `sluice down`,
    then SIGKILL whatever is still running for socket_dir (and fail the test if anything was)."""
    started = []

    def start(text=FWD, env=None, extra=()):
        f = tmp_path / "sluice.yaml"
        f.write_text(text)
        started.append(True)
        return run_sluice("up", f, "-d", "--build-dir", real_build, "--socket-dir", socket_dir,
                          "--ready-timeout", 20, "--attach-timeout", 15, *extra, env=env)
    yield start
    if started:
        run_sluice("down", "--socket-dir", socket_dir)
    left = _kill_leftovers(socket_dir)
    assert not left, f"processes left running for {socket_dir} after `sluice down`: {left}"


def _state(socket_dir):
    return json.loads((socket_dir / "state.json").read_text())


def _api(socket_dir, cmd):
    from sluice.client import Client
    with Client(str(socket_dir / "ctl.sock"), timeout=5.0) as c:
        return c.call(cmd)


def _port(st, name):
    return next(p for p in st["ports"] if p["name"] == name)


def _service(st, name):
    return next(s for s in st["services"] if s["name"] == name)


def _grows(socket_dir, get, timeout=5.0):
    """get(stats) increases within timeout (from the value at the call)."""
    v0 = get(_api(socket_dir, "stats"))
    return _wait(lambda: get(_api(socket_dir, "stats")) > v0, timeout, 0.1)


def _steady(socket_dir, get, period=0.3):
    """get(stats) does not change over period seconds."""
    v0 = get(_api(socket_dir, "stats"))
    time.sleep(period)
    return get(_api(socket_dir, "stats")) == v0


def _dst_tx(st):
    return _port(st, "dst")["tx_pkts"]


def _nf_pids(socket_dir):
    return {n["name"]: n["pid"] for n in _api(socket_dir, "nfs")["nfs"]}


def _num(cell):
    """'5.68M' / '12.3k' / '950' -> float."""
    mult = {"k": 1e3, "M": 1e6, "G": 1e9}
    return float(cell[:-1]) * mult[cell[-1]] if cell[-1] in mult else float(cell)


def test_up_status_stats_down(up, run_sluice, socket_dir):
    r = up(FULL)
    assert r.returncode == 0, r.stderr
    assert "4 NF(s) attached (count.0 fwd.0 fwd.1 reflect.0)" in r.stdout
    st = _state(socket_dir)
    sup_pid, sluiced_pid = st["supervisor"]["pid"], st["sluiced"]["pid"]
    nf_pids = {n["name"]: n["pid"] for n in st["nfs"]}
    assert list(nf_pids) == ["count.0", "fwd.0", "fwd.1", "reflect.0"]
    pids = [sup_pid, sluiced_pid, *nf_pids.values()]
    assert all(_alive(p) for p in pids)
    assert sorted(_procs_of(socket_dir)) == sorted(pids)
    # the NFs sluiced sees attached are the processes the supervisor started
    assert _nf_pids(socket_dir) == nf_pids
    cfg = json.loads((socket_dir / "config.json").read_text())
    assert cfg["sluiced"]["socket_dir"] == str(socket_dir)
    for n in nf_pids:
        assert (socket_dir / "logs" / f"{n}.log").exists()
    assert "data path running" in (socket_dir / "logs" / "sluiced.log").read_text()

    # packets flow src -> count -> fwd -> dst
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)

    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert f"pid {sluiced_pid}" in r.stdout and f"supervisor: pid {sup_pid} (running)" in r.stdout
    assert "2 port(s), 1 chain(s), 4 NF(s) attached" in r.stdout and "RESTARTS" in r.stdout
    for n, pid in nf_pids.items():
        assert re.search(rf"^{re.escape(n)}\s+\S+\s+{pid}\s+block\s", r.stdout, re.M), r.stdout
    r = run_sluice("status", "--json", "--socket-dir", socket_dir)
    j = json.loads(r.stdout)
    assert j["ok"] is True and j["nf_count"] == 4 and j["pid"] == sluiced_pid and j["port_count"] == 2

    r = run_sluice("stats", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert "PORTS" in r.stdout and "count -> fwd" in r.stdout and "POOL   mbufs=8192" in r.stdout
    r = run_sluice("stats", "--json", "--socket-dir", socket_dir)
    j = json.loads(r.stdout)
    assert {"ports", "nfs", "services", "chains", "drops", "pool"} <= set(j)
    assert _port(j, "src")["rx_pkts"] > 0 and _dst_tx(j) > 0
    # instances are listed in the order they attached (docs/api.md); the supervisor starts both
    # replicas at once, so either may come first
    assert sorted(_service(j, "fwd")["instances"]) == ["fwd.0", "fwd.1"]
    assert _service(j, "reflect")["instances"] == ["reflect.0"]

    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "sluice stopped" in r.stdout, r.stdout + r.stderr
    assert _wait(lambda: not any(_alive(p) for p in pids), 5), [p for p in pids if _alive(p)]
    assert _procs_of(socket_dir) == []
    for f in ("ctl.sock", "nf.sock", "state.json"):
        assert not (socket_dir / f).exists(), f
    assert "sluiced exited with status 0" in (socket_dir / "logs" / "supervisor.log").read_text()
    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 1 and "sluiced is not running" in r.stderr


def test_top_prints_rates(up, run_sluice, socket_dir):
    assert up(FULL).returncode == 0
    t = time.monotonic()
    r = run_sluice("top", "--iterations", 2, "--interval", 0.5, "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t < 10
    frames = [f for f in re.split(r"^\d\d:\d\d:\d\d  sluice top", r.stdout, flags=re.M) if f.strip()]
    assert len(frames) == 2, r.stdout
    for fr in frames:
        assert "(every 0.5s; rates per second)" in fr
        assert fr.count("RX PPS") == 2  # port table and NF table
        rows = {ln.split()[0]: ln.split() for ln in fr.splitlines() if ln.strip()}
        # PORT CHAIN RX-PPS RX-MBIT/S TX-PPS TX-MBIT/S DROP/S RX-TOTAL TX-TOTAL
        assert rows["src"][1] == "c" and _num(rows["src"][2]) > 0, fr
        assert rows["dst"][1] == "-" and _num(rows["dst"][4]) > 0, fr  # TX PPS
        # NF SERVICE WAKEUP RX-PPS ...
        assert rows["count.0"][1:3] == ["count", "block"] and _num(rows["count.0"][3]) > 0, fr
        assert rows["reflect.0"][1:3] == ["reflect", "block"] and _num(rows["reflect.0"][3]) == 0, fr
        assert "fwd.0" in rows and "fwd.1" in rows
        assert "DROPS  ring_full" in fr


def test_chain_set_at_runtime(up, run_sluice, socket_dir):
    assert up(FULL).returncode == 0

    def chains():
        r = run_sluice("chain", "list", "--json", "--socket-dir", socket_dir)
        assert r.returncode == 0, r.stderr
        return {c["name"]: {"nfs": c["nfs"], "exit": c["exit"]} for c in json.loads(r.stdout)["chains"]}

    assert chains() == {"c": {"nfs": ["count", "fwd"], "exit": "dst"}}
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)
    assert _port(_api(socket_dir, "stats"), "src")["tx_pkts"] == 0

    # reflect sends packets back out of src; dst stops transmitting
    r = run_sluice("chain", "set", "c", "--nfs", "reflect", "--exit", "dst", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "chain c: reflect -> exit dst"
    assert chains() == {"c": {"nfs": ["reflect"], "exit": "dst"}}
    assert _wait(lambda: _port(_api(socket_dir, "stats"), "src")["tx_pkts"] > 0, 5)
    assert _wait(lambda: _steady(socket_dir, _dst_tx), 5)
    refl = next(n for n in _api(socket_dir, "nfs")["nfs"] if n["name"] == "reflect.0")
    assert refl["rx_pkts"] > 0

    # a new chain without exit on src: everything drops as no_path
    r = run_sluice("chain", "set", "sink", "--nfs", "fwd", "--json", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["chain"]["exit"] is None
    r = run_sluice("port", "chain", "src", "sink", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "port src: ingress chain sink" in r.stdout, r.stdout + r.stderr
    assert _grows(socket_dir, lambda s: s["drops"]["no_path"])
    assert chains()["sink"] == {"nfs": ["fwd"], "exit": None}

    # back to the original chain
    r = run_sluice("port", "chain", "src", "c", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    r = run_sluice("chain", "set", "c", "--nfs", "count,fwd", "--exit", "dst", "--socket-dir", socket_dir)
    assert r.returncode == 0 and "chain c: count -> fwd -> exit dst" in r.stdout
    assert chains()["c"] == {"nfs": ["count", "fwd"], "exit": "dst"}
    assert _grows(socket_dir, _dst_tx)

    # errors from sluiced name the field; nothing changes
    r = run_sluice("chain", "set", "c", "--nfs", "fwd", "--exit", "nosuch", "--socket-dir", socket_dir)
    assert r.returncode == 1 and "unknown port 'nosuch'" in r.stderr, r.stderr
    r = run_sluice("port", "chain", "nosuch", "c", "--socket-dir", socket_dir)
    assert r.returncode == 1 and "nosuch" in r.stderr, r.stderr
    assert chains()["c"] == {"nfs": ["count", "fwd"], "exit": "dst"}
    r = run_sluice("api", '{"cmd":"chains"}', "--socket-dir", socket_dir)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


def test_second_up_refused(up, socket_dir):
    assert up().returncode == 0
    pids = _procs_of(socket_dir)
    r = up()
    assert r.returncode == 1 and "already running" in r.stderr
    assert sorted(_procs_of(socket_dir)) == sorted(pids)  # the first one is untouched
    assert _nf_pids(socket_dir).keys() == {"fwd.0"}


def test_restart_on_failure_after_sigkill(up, run_sluice, socket_dir):
    assert up(FWD).returncode == 0  # restart: on-failure is the default
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)
    old = _state(socket_dir)["nfs"][0]
    assert old["name"] == "fwd.0" and _nf_pids(socket_dir) == {"fwd.0": old["pid"]}

    os.kill(old["pid"], signal.SIGKILL)
    assert _wait(lambda: _nf_pids(socket_dir).get("fwd.0") not in (None, old["pid"]), 5), _nf_pids(socket_dir)
    new_pid = _nf_pids(socket_dir)["fwd.0"]
    assert _alive(new_pid) and not _alive(old["pid"])
    st = _state(socket_dir)["nfs"][0]
    assert st["pid"] == new_pid and st["restarts"] == 1 and st["state"] == "running"
    # packets flow again through the new instance
    assert _grows(socket_dir, _dst_tx)
    nf = _api(socket_dir, "nfs")["nfs"][0]
    assert nf["pid"] == new_pid and nf["rx_pkts"] > 0
    log = (socket_dir / "logs" / "supervisor.log").read_text()
    assert f"NF fwd.0 (pid {old['pid']}) killed by SIGKILL" in log
    assert "restarting NF fwd.0 in 0.1s (restart #1, restart: on-failure)" in log
    r = run_sluice("status", "--socket-dir", socket_dir)
    assert re.search(rf"^fwd\.0\s+fwd\s+{new_pid}\s.*\s1$", r.stdout, re.M), r.stdout


def test_restart_never_stays_gone(up, run_sluice, socket_dir):
    assert up(FWD.replace("wakeup: block}", "wakeup: block, restart: never}")).returncode == 0
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)
    st = _state(socket_dir)
    pid = st["nfs"][0]["pid"]

    os.kill(pid, signal.SIGKILL)
    assert _wait(lambda: _nf_pids(socket_dir) == {}, 5), _nf_pids(socket_dir)
    assert _wait(lambda: _state(socket_dir)["nfs"][0]["state"] == "exited", 5)
    # the service has no NF: packets drop as nf_gone, nothing reaches dst
    assert _grows(socket_dir, lambda s: _service(s, "fwd")["drops"]["nf_gone"])
    assert _service(_api(socket_dir, "stats"), "fwd")["instances"] == []
    assert _steady(socket_dir, _dst_tx, 1.0)  # well past the 0.1 s restart delay
    # sluiced took back the buffers the killed NF held
    assert _wait(lambda: _api(socket_dir, "stats")["pool"]["lent"] == 0, 5), _api(socket_dir, "stats")["pool"]
    assert _nf_pids(socket_dir) == {}
    nf = _state(socket_dir)["nfs"][0]
    assert nf["pid"] is None and nf["restarts"] == 0 and nf["last_status"] == -signal.SIGKILL
    # the supervisor and sluiced keep running
    assert _alive(st["supervisor"]["pid"]) and _alive(st["sluiced"]["pid"])
    assert sorted(_procs_of(socket_dir)) == sorted([st["supervisor"]["pid"], st["sluiced"]["pid"]])
    r = run_sluice("status", "--socket-dir", socket_dir)
    assert re.search(r"^fwd\.0\s+fwd\s+-\s.*\(exited\)", r.stdout, re.M), r.stdout
    assert "will not be restarted (restart: never)" in (socket_dir / "logs" / "supervisor.log").read_text()


@pytest.fixture
def crash_once_fwd(tmp_path, real_build):
    """An NF program that exits 3 on its first start, then is the real sluice-nf-fwd."""
    p = tmp_path / "crash-once-fwd"
    p.write_text(CRASH_ONCE.format(nf=real_build / "nfs" / "sluice-nf-fwd"))
    p.chmod(0o755)
    return p


def test_nf_crash_at_startup_is_restarted(up, socket_dir, tmp_path, crash_once_fwd):
    marker = tmp_path / "crashed"
    r = up(FWD.replace("program: fwd", f"program: {crash_once_fwd}"), env={"CRASH_ONCE_MARKER": str(marker)})
    assert r.returncode == 0, r.stderr
    assert marker.exists()
    nf = _state(socket_dir)["nfs"][0]
    assert nf["restarts"] == 1 and _nf_pids(socket_dir) == {"fwd.0": nf["pid"]}
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)
    log = (socket_dir / "logs" / "supervisor.log").read_text()
    assert "NF fwd.0" in log and "exited with status 3" in log and "restarting NF fwd.0 in 0.1s" in log


def test_nf_crash_at_startup_restart_never_fails_up(up, socket_dir, tmp_path, crash_once_fwd):
    text = FWD.replace("program: fwd, wakeup: block}", f"program: {crash_once_fwd}, wakeup: block, restart: never}}")
    r = up(text, env={"CRASH_ONCE_MARKER": str(tmp_path / "m")})
    assert r.returncode == 1
    assert "NF fwd.0 exited with status 3 during startup (restart: never)" in r.stderr
    assert "crash-once: exiting 3" in r.stderr
    assert not (socket_dir / "ctl.sock").exists() and not (socket_dir / "state.json").exists()
    assert _wait(lambda: _procs_of(socket_dir) == [], 5), _procs_of(socket_dir)


def test_up_bad_config_real_build(up, socket_dir):
    r = up(FWD.replace("exit: dst", "exit: dts"))
    assert r.returncode == 2
    assert "config error: chains[0].exit: unknown port 'dts'" in r.stderr
    assert not (socket_dir / "ctl.sock").exists() and _procs_of(socket_dir) == []


def test_sluiced_fails_to_start(up, socket_dir):
    bad = FWD.replace("net_null1,size=64,copy=0", "net_af_packet0,iface=doesnotexist0")
    r = up(bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "sluiced exited with status 1 during startup" in r.stderr
    assert "DPDK could not create 'net_af_packet0,iface=doesnotexist0'" in r.stderr
    assert "ports[1].vdev (port dst)" in r.stderr
    assert "Traceback" not in r.stderr
    assert _procs_of(socket_dir) == []
    for f in ("ctl.sock", "nf.sock", "state.json"):
        assert not (socket_dir / f).exists(), f


def test_down_kills_stopped_nf(up, run_sluice, socket_dir):
    """An NF that does not react to SIGTERM (here: SIGSTOPped) is SIGKILLed after the grace period."""
    assert up(FWD).returncode == 0
    st = _state(socket_dir)
    pids = _procs_of(socket_dir)
    os.kill(st["nfs"][0]["pid"], signal.SIGSTOP)
    t = time.monotonic()
    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 2.5 < time.monotonic() - t < 15
    assert not any(_alive(p) for p in pids) and _procs_of(socket_dir) == []
    assert "NF fwd.0" in (socket_dir / "logs" / "supervisor.log").read_text()
    assert "ignored SIGTERM for 3s; killing it" in (socket_dir / "logs" / "supervisor.log").read_text()


def test_sluiced_death_restarts_it_and_the_nf_attaches_again(up, socket_dir):
    """docs/architecture.md "Restarts": a killed sluiced is started again; the NF process stays."""
    assert up(FWD).returncode == 0
    st = _state(socket_dir)
    nf_pid = st["nfs"][0]["pid"]
    # runtime changes the new sluiced must replay (runtime.json): a port added at its id, a chain
    from sluice.client import Client
    with Client(str(socket_dir / "ctl.sock")) as c:
        c.call("port_add", name="extra", vdev="net_null7", id=5)
        c.call("chain_set", name="spare", nfs=["fwd"], exit="extra")
    os.kill(st["sluiced"]["pid"], signal.SIGKILL)

    def back():
        sd = _state(socket_dir)["sluiced"]
        if sd["pid"] == st["sluiced"]["pid"] or sd["restarts"] != 1:  # restarts: once the new one answered
            return False
        try:
            nfs = _api(socket_dir, "nfs")["nfs"]
        except Exception:  # noqa: BLE001 - not answering yet
            return False
        return [n["pid"] for n in nfs] == [nf_pid]
    assert _wait(back, 15), _state(socket_dir)
    assert _state(socket_dir)["sluiced"]["restarts"] == 1 and _state(socket_dir)["nfs"][0]["pid"] == nf_pid
    assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)  # traffic flows again
    ports = {p["name"]: p for p in _api(socket_dir, "ports")["ports"]}
    assert ports["extra"]["id"] == 5 and ports["extra"]["vdev"] == "net_null7"
    assert {"id": 1, "name": "spare", "nfs": ["fwd"], "exit": "extra"} in _api(socket_dir, "chains")["chains"]
    log = (socket_dir / "logs" / "supervisor.log").read_text()
    assert f"sluiced (pid {st['sluiced']['pid']}) killed by SIGKILL" in log and "sluiced restarted" in log


def test_sluiced_that_keeps_dying_stops_everything(up, socket_dir):
    """More than 5 deaths within a minute: the supervisor gives up and stops everything."""
    from sluice.supervisor import SLUICED_RESTARTS_MAX
    assert up(FWD).returncode == 0
    first = _state(socket_dir)
    for i in range(SLUICED_RESTARTS_MAX + 1):
        pid = _state(socket_dir)["sluiced"]["pid"]
        os.kill(pid, signal.SIGKILL)
        if i < SLUICED_RESTARTS_MAX:
            assert _wait(lambda: _state(socket_dir)["sluiced"]["pid"] != pid and
                         _state(socket_dir)["sluiced"]["restarts"] == i + 1, 15), i
    assert _wait(lambda: _procs_of(socket_dir) == [], 15), _procs_of(socket_dir)
    log = (socket_dir / "logs" / "supervisor.log").read_text()
    assert f"sluiced died {SLUICED_RESTARTS_MAX + 1} times within 60s; not restarting it again" in log
    assert "supervisor exiting (1)" in log
    assert not (socket_dir / "state.json").exists() and not _alive(first["nfs"][0]["pid"])


def test_supervisor_death_takes_children_along(up, run_sluice, socket_dir):
    assert up(FWD).returncode == 0
    st = _state(socket_dir)
    os.kill(st["supervisor"]["pid"], signal.SIGKILL)
    # sluiced and the NFs get SIGTERM from the kernel (PR_SET_PDEATHSIG)
    assert _wait(lambda: _procs_of(socket_dir) == [], 10), _procs_of(socket_dir)
    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (socket_dir / "state.json").exists() and not (socket_dir / "ctl.sock").exists()


def test_foreground_sigint(tmp_path, socket_dir, real_build):
    import select
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "python"))
    env.pop("SLUICE_SOCKET_DIR", None)
    f = tmp_path / "sluice.yaml"
    f.write_text(FULL)
    p = subprocess.Popen([sys.executable, "-m", "sluice", "up", str(f), "--build-dir", str(real_build),
                          "--socket-dir", str(socket_dir)], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 30)
        assert ready, "sluice up printed nothing within 30 s"
        first = p.stdout.readline()  # printed once sluiced is ready and every NF attached
        assert first.startswith("sluice up: sluiced pid"), first
        assert "4 NF(s) attached" in first
        st = _state(socket_dir)
        pids = [st["supervisor"]["pid"], st["sluiced"]["pid"]] + [n["pid"] for n in st["nfs"]]
        assert st["supervisor"]["pid"] == p.pid
        assert sorted(_procs_of(socket_dir)) == sorted(pids)
        assert _wait(lambda: _dst_tx(_api(socket_dir, "stats")) > 0, 5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        left = _kill_leftovers(socket_dir)
    assert p.returncode == 0, err
    assert "received SIGINT, stopping" in err and "stopped 4 NF(s)" in err and "sluiced exited with status 0" in err
    assert not left and not any(_alive(x) for x in pids)
    for name in ("ctl.sock", "nf.sock", "state.json"):
        assert not (socket_dir / name).exists(), name


# ---------------------------------------------------------------- CPU weights (cgroups)

WEIGHTED = NULL_PORTS + """\
chains:
  - {name: c, nfs: [heavy, light], exit: dst}
nfs:
  - {name: heavy, program: fwd, wakeup: block, cpu_weight: 400}
  - {name: light, program: fwd, wakeup: block, instances: 2, cpu_weight: 25}
"""


def test_cpu_weight_puts_each_nf_in_its_own_cgroup(up, run_sluice, socket_dir):
    from sluice import cgroups
    found = cgroups.find_cpu_controller()
    if found is None:
        pytest.skip("no cgroup cpu controller on this machine")
    kind, root = found
    r = up(WEIGHTED)
    assert r.returncode == 0, r.stdout + r.stderr
    sup_pid = _state(socket_dir)["supervisor"]["pid"]
    base = os.path.join(root, f"sluice-{sup_pid}")
    pids = _nf_pids(socket_dir)
    want = {"heavy.0": 400, "light.0": 25, "light.1": 25}
    assert set(pids) == set(want), pids
    for name, weight in want.items():
        d = os.path.join(base, name)
        procs = open(os.path.join(d, "cgroup.procs")).read().split()
        assert str(pids[name]) in procs, (name, procs)
        if kind == "v2":
            assert int(open(os.path.join(d, "cpu.weight")).read()) == weight
        else:
            assert int(open(os.path.join(d, "cpu.shares")).read()) == cgroups.CpuWeights.shares(weight)
    assert run_sluice("down", "--socket-dir", socket_dir).returncode == 0
    assert _wait(lambda: not os.path.exists(base), 10), f"{base} left behind after `sluice down`"


def test_cpu_weight_out_of_range_names_the_field(run_sluice, tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text(WEIGHTED.replace("cpu_weight: 400", "cpu_weight: 0"))
    r = run_sluice("config", "check", f)
    assert r.returncode == 2
    assert "nfs[0].cpu_weight" in r.stdout + r.stderr


# ---------------------------------------------------------------- nf_sched fifo and nfs[].cpus

# no chain on src: a flood through a real-time NF would leave core 0 to it
PINNED = """\
sluiced: {pool_mbufs: 8192, nf_sched: fifo}
ports:
  - {name: src, vdev: "net_null0,size=64,copy=0"}
  - {name: dst, vdev: "net_null1,size=64,copy=0"}
chains:
  - {name: c, nfs: [pinned, loose], exit: dst}
nfs:
  - {name: pinned, program: fwd, wakeup: adaptive, cpus: "0"}
  - {name: loose, program: fwd, wakeup: adaptive}
"""


def test_nf_cpus_and_fifo_from_the_config(up, run_sluice, socket_dir):
    """nfs[].cpus pins an instance before it runs, so sluiced sees it off the worker core when it
    attaches and makes it SCHED_FIFO (sluiced.nf_sched); the unpinned one stays fair."""
    assert "nf_sched: fifo" in PINNED
    r = up(PINNED)
    assert r.returncode == 0, r.stdout + r.stderr
    pids = _nf_pids(socket_dir)
    assert os.sched_getaffinity(pids["pinned.0"]) == {0}
    assert os.sched_getscheduler(pids["pinned.0"]) & ~os.SCHED_RESET_ON_FORK == os.SCHED_FIFO
    assert os.sched_getscheduler(pids["loose.0"]) == os.SCHED_OTHER
    assert {n["name"]: n["sched"] for n in _api(socket_dir, "nfs")["nfs"]} == {"pinned.0": "fifo", "loose.0": "other"}
    out = run_sluice("status", "--socket-dir", socket_dir).stdout
    assert re.search(r"^pinned\.0 .* adaptive fifo ", out, re.M) and re.search(r"^loose\.0 .* adaptive ", out, re.M), out
    assert run_sluice("down", "--socket-dir", socket_dir).returncode == 0


@pytest.mark.parametrize("cpus, fragment", [("0-", "CPU list"), ("3-1", "must go up"), ("4096", "not one this machine")])
def test_nf_cpus_errors_name_the_field(run_sluice, tmp_path, cpus, fragment):
    f = tmp_path / "p.yaml"
    f.write_text(PINNED.replace('cpus: "0"', f'cpus: "{cpus}"'))
    r = run_sluice("config", "check", f)
    assert r.returncode == 2
    assert "nfs[0].cpus" in r.stdout + r.stderr and fragment in r.stdout + r.stderr, r.stdout + r.stderr
