"""Sandboxed NF processes (issue 15): `nfs[].sandbox: strict` under `sluice up`.

A strict NF runs as its own unprivileged uid (2000000000 + n), with no_new_privs, in an empty
network namespace, with only stdin (/dev/null), stdout/stderr (its log) and the attach socket the
supervisor connected for it (SLUICE_NF_FD); from the run loop on the SDK's seccomp filter allows only
what the loop, stdio and malloc need (docs/abi.md "Sandbox"). Checked here with the real sluiced:

- a strict fwd attaches, forwards, and /proc shows the confinement (uid, NoNewPrivs, Seccomp, its
  own network namespace with only lo, its open fds);
- a strict NF cannot open a file nor a socket: the probe NF (tests/sandbox/sandbox_probe.c) tries on
  SIGUSR1 and dies with the SDK's line naming the call, status 159;
- the restart policy applies to such a death: on-failure restarts it (strict again), never does not;
- sandbox: none (explicit or by default) behaves as before, and a bad value is a config error naming
  the field;
- every library NF runs strict with real traffic (a pcap of UDP flows) and ends cleanly at `sluice
  down`; count's dump, firewall's SIGHUP reload and monitor's capture show how files work under it.
Run as root (DPDK, setuid, network namespaces).
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from sluice import sandbox as ssandbox
from test_cli import _alive, _api, _wait, up  # noqa: F401  (up uses this file's real_build)

LIBRARY = ("fwd", "count", "firewall", "nat", "router", "monitor", "ids", "lb", "ratelimit", "l2switch")
PROBE = "tests/sandbox/sluice-sandbox-probe"

NULL_PORTS = """\
sluiced: {pool_mbufs: 8192}
ports:
  - {name: src, vdev: "net_null0,size=64,copy=0", chain: c}
  - {name: dst, vdev: "net_null1,size=64,copy=0"}
"""


@pytest.fixture(scope="session")
def real_build(build_dir):
    need = [build_dir / "src" / "manager" / "sluiced", build_dir / PROBE] + \
        [build_dir / "nfs" / f"sluice-nf-{n}" for n in LIBRARY]
    missing = [str(p) for p in need if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make build` or set SLUICE_BUILD_DIR)")
    return build_dir


@pytest.fixture
def open_dir():
    """A directory a sandboxed NF can read files in and create files in (mode 1777, like /tmp):
    pytest's tmp_path is under a 0700 directory its uid cannot even traverse."""
    d = Path(tempfile.mkdtemp(prefix="sl-sbx-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ helpers

def _state(socket_dir):
    return json.loads((socket_dir / "state.json").read_text())


def _slot(socket_dir, name):
    return next(n for n in _state(socket_dir)["nfs"] if n["name"] == name)


def _status(pid):
    """/proc/<pid>/status as {field: value}."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def _nf_stats(socket_dir, name):
    return next((n for n in _api(socket_dir, "stats")["nfs"] if n["name"] == name), None)


def _rx_grows(socket_dir, name, by=1000, timeout=10.0):
    first = _nf_stats(socket_dir, name)
    base = first["rx_pkts"] if first else 0
    return _wait(lambda: ((_nf_stats(socket_dir, name) or {}).get("rx_pkts", 0)) >= base + by, timeout, 0.1)


def _log(socket_dir, name):
    return (socket_dir / "logs" / f"{name}.log").read_text(errors="replace")


def _sup_log(socket_dir):
    return (socket_dir / "logs" / "supervisor.log").read_text(errors="replace")


def _filtered(pid, timeout=10.0):
    """Wait until pid runs under its seccomp filter: the SDK installs it when the run loop starts,
    a moment after sluiced lists the NF as attached."""
    return _wait(lambda: _status(pid).get("Seccomp") == "2", timeout)


def _assert_confined(pid, uid, sup_pid):
    st = _status(pid)
    assert st["Uid"].split() == [str(uid)] * 4, st["Uid"]
    assert st["Gid"].split() == [str(uid)] * 4, st["Gid"]
    assert st["Groups"] == "", st["Groups"]
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"  # filter mode
    assert st["CapEff"] == "0000000000000000" and st["CapPrm"] == "0000000000000000"
    assert ssandbox.UID_BASE <= uid < ssandbox.UID_BASE + ssandbox.UID_COUNT
    # its own network namespace: not the supervisor's, and nothing in it but a loopback device
    for ns in ("net", "ipc"):
        assert os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/{sup_pid}/ns/{ns}"), ns
    devs = [line.split(":")[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
    assert devs == ["lo"], devs
    links = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link"], capture_output=True,
                           text=True, check=True).stdout
    assert "lo:" in links and "state DOWN" in links, links


# ----------------------------------------------------------- confinement

def test_strict_fwd_attaches_forwards_and_is_confined(up, socket_dir):
    r = up(NULL_PORTS + """\
chains:
  - {name: c, nfs: [fwd], exit: dst}
nfs:
  - {name: fwd, program: fwd, wakeup: block, sandbox: strict}
""")
    assert r.returncode == 0, r.stdout + r.stderr
    st = _state(socket_dir)
    slot = _slot(socket_dir, "fwd.0")
    pid, uid = slot["pid"], slot["uid"]
    assert slot["sandbox"] == "strict" and isinstance(uid, int)
    # the process sluiced sees attached (SO_PEERCRED: the pid of the child that connected) is it
    assert {n["name"]: n["pid"] for n in _api(socket_dir, "nfs")["nfs"]} == {"fwd.0": pid}
    assert _rx_grows(socket_dir, "fwd.0", 10000)
    assert _filtered(pid)
    dst = next(p for p in _api(socket_dir, "stats")["ports"] if p["name"] == "dst")
    assert dst["tx_pkts"] > 0
    _assert_confined(pid, uid, st["supervisor"]["pid"])

    # nothing inherited: /dev/null, the log twice, the attach socket, the two ring eventfds
    fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert fds[0] == "/dev/null"
    assert fds[1] == fds[2] == str(socket_dir / "logs" / "fwd.0.log")
    rest = sorted(v.split(":")[0] for k, v in fds.items() if k > 2)
    assert rest == ["anon_inode", "anon_inode", "socket"], fds
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"SLUICE_NF_SANDBOX=strict" in env
    fd_var = next(e for e in env if e.startswith(b"SLUICE_NF_FD="))
    assert fds[int(fd_var.split(b"=")[1])].startswith("socket:")
    assert f"started NF fwd.0 (pid {pid}, sandbox strict, uid {uid})" in _sup_log(socket_dir)


def test_instances_get_their_own_uids(up, socket_dir):
    r = up(NULL_PORTS + """\
chains:
  - {name: c, nfs: [fwd], exit: dst}
nfs:
  - {name: fwd, program: fwd, instances: 2, wakeup: block, sandbox: strict}
""")
    assert r.returncode == 0, r.stdout + r.stderr
    uids = {n["name"]: n["uid"] for n in _state(socket_dir)["nfs"]}
    assert len(set(uids.values())) == 2, uids
    for n in _state(socket_dir)["nfs"]:
        assert _status(n["pid"])["Uid"].split()[0] == str(n["uid"])


def test_binary_the_uid_cannot_execute_is_named(up, socket_dir, real_build, tmp_path):
    # tmp_path's parents are 0700: the NF's uid cannot even reach the binary
    prog = tmp_path / "probe"
    shutil.copy(real_build / PROBE, prog)
    r = up(NULL_PORTS + f"""\
chains:
  - {{name: c, nfs: [probe], exit: dst}}
nfs:
  - {{name: probe, program: {prog}, wakeup: block, restart: never, sandbox: strict}}
""")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"NF probe.0 could not be started ({prog}: Permission denied; under sandbox: strict uid "
            in r.stderr), r.stderr
    assert "must be able to execute it (and search every directory above it)" in r.stderr


# ------------------------------------------------------------ violations

def _probe_config(build, restart, tries=("write", "open"), sandbox="strict", name="probe"):
    sb = f", sandbox: {sandbox}" if sandbox else ""
    args = ", ".join(f"--try, {t}" for t in tries)
    return NULL_PORTS + f"""\
chains:
  - {{name: c, nfs: [{name}], exit: dst}}
nfs:
  - {{name: {name}, program: {build / PROBE}, wakeup: block, restart: {restart}{sb}, args: [{args}]}}
"""


@pytest.mark.parametrize("call,syscall", [("open", "openat"), ("socket", "socket")])
def test_strict_nf_cannot_open_a_file_or_a_socket(up, socket_dir, real_build, call, syscall):
    r = up(_probe_config(real_build, "never", ("write", call)))
    assert r.returncode == 0, r.stdout + r.stderr
    slot = _slot(socket_dir, "probe.0")
    pid = slot["pid"]
    assert _filtered(pid)  # after the probe's attached(), which logs its uid
    assert f"sandbox-probe: attached, uid {slot['uid']}" in _log(socket_dir, "probe.0")
    os.kill(pid, signal.SIGUSR1)
    assert _wait(lambda: _slot(socket_dir, "probe.0")["state"] == "exited", 10), _slot(socket_dir, "probe.0")
    log = _log(socket_dir, "probe.0")
    # what is allowed worked; the refused call never returned (no "ok", no "failed")
    assert "sandbox-probe: write: ok" in log
    assert f"sluice-nf: sandbox: system call {syscall} (" in log, log
    assert "is not allowed (sandbox: strict); exiting" in log
    assert f"sandbox-probe: {call}:" not in log
    assert _slot(socket_dir, "probe.0")["last_status"] == ssandbox.EXIT_STATUS
    sup = _sup_log(socket_dir)
    assert (f"NF probe.0 (pid {pid}) exited with status 159 (sandbox: strict refused a system call; "
            "the allowed set is in docs/abi.md)") in sup, sup
    assert "NF probe.0 will not be restarted (restart: never)" in sup
    assert not _alive(pid)
    # sluiced took it out of its service
    assert _wait(lambda: "probe.0" not in {n["name"] for n in _api(socket_dir, "nfs")["nfs"]}, 5)


def test_violation_is_restarted_under_on_failure(up, run_sluice, socket_dir, real_build):
    r = up(_probe_config(real_build, "on-failure", ("open",)))
    assert r.returncode == 0, r.stdout + r.stderr
    first = _slot(socket_dir, "probe.0")
    assert _filtered(first["pid"])
    os.kill(first["pid"], signal.SIGUSR1)

    def restarted():
        s = _slot(socket_dir, "probe.0")
        return s if s["restarts"] == 1 and s["state"] == "running" and s["pid"] != first["pid"] else None
    assert _wait(restarted, 10), _slot(socket_dir, "probe.0")
    second = restarted()
    assert second["last_status"] == ssandbox.EXIT_STATUS
    # attached again, sandboxed again, under the same uid
    assert _wait(lambda: {n["name"]: n["pid"] for n in _api(socket_dir, "nfs")["nfs"]}.get("probe.0")
                 == second["pid"], 10)
    assert second["uid"] == first["uid"]
    assert _filtered(second["pid"])
    _assert_confined(second["pid"], second["uid"], _state(socket_dir)["supervisor"]["pid"])
    sup = _sup_log(socket_dir)
    assert f"NF probe.0 (pid {first['pid']}) exited with status 159 (sandbox: strict refused" in sup
    assert "restarting NF probe.0 in 0.1s (restart #1, restart: on-failure)" in sup
    # `sluice status` shows the restart
    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("probe.0"))
    assert line.split()[-1] == "1", r.stdout


# ------------------------------------------------------------ sandbox: none

@pytest.mark.parametrize("sandbox", ["none", None])
def test_sandbox_none_behaves_as_before(up, socket_dir, real_build, sandbox):
    r = up(_probe_config(real_build, "never", ("open", "socket"), sandbox=sandbox))
    assert r.returncode == 0, r.stdout + r.stderr
    slot = _slot(socket_dir, "probe.0")
    assert slot["sandbox"] == "none" and slot["uid"] is None
    pid = slot["pid"]
    st = _status(pid)
    assert st["Uid"].split()[0] == "0" and st["Seccomp"] == "0" and st["NoNewPrivs"] == "0"
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not any(e.startswith((b"SLUICE_NF_FD=", b"SLUICE_NF_SANDBOX=")) for e in env)
    os.kill(pid, signal.SIGUSR1)
    assert _wait(lambda: (_nf_stats(socket_dir, "probe.0") or {}).get("counters", {}).get("usr1") == 1, 10)
    log = _log(socket_dir, "probe.0")
    assert "sandbox-probe: open: ok" in log and "sandbox-probe: socket: ok" in log, log
    assert _slot(socket_dir, "probe.0")["state"] == "running"


@pytest.mark.parametrize("value,got", [("maybe", "'maybe'"), ("yes", "boolean True"), ("1", "integer 1"),
                                       ("Strict", "'Strict'")])
def test_bad_sandbox_value_names_the_field(run_sluice, tmp_path, value, got):
    f = tmp_path / "bad.yaml"
    f.write_text(NULL_PORTS + f"chains: [{{name: c, nfs: [fwd], exit: dst}}]\n"
                              f"nfs:\n  - {{name: fwd, program: fwd}}\n  - {{name: x, program: fwd, sandbox: {value}}}\n")
    r = run_sluice("config", "check", f)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"config error: nfs[1].sandbox: must be strict or none (got {got})" in r.stderr, r.stderr


def test_sandbox_in_the_normalized_config():
    from sluice import config as sconfig
    text = "ports: [{name: p, vdev: net_null0}]\nnfs:\n  - {name: a, program: fwd, sandbox: strict}\n" \
        "  - {name: b, program: fwd}\n"
    cfg = sconfig.load_string(text)
    assert [nf["sandbox"] for nf in cfg["nfs"]] == ["strict", sconfig.default_sandbox(cfg["nfs"][1])] \
        == ["strict", "none"]


# ------------------------------------------- the NF library under sandbox: strict

MAC_NF, MAC_SRC = "02:00:00:00:00:02", "02:00:00:00:00:01"
PAYLOAD = b"sluice-sandbox-probe-data"  # ids' rule matches "sandbox-probe": flow 0 carries it
FILLER = b"sluice-filler-data-abcdef"


def _csum(h):
    s = sum(struct.unpack(f"!{len(h) // 2}H", h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _write_pcap(path, flows=256):
    """UDP/IPv4 flows 10.0.0.x:1024+x -> 10.250.0.1:9 to the NF's MAC, one packet each; only the
    first carries PAYLOAD (ids alerts on 1 packet in `flows`, not on every one)."""
    eth = bytes.fromhex(MAC_NF.replace(":", "") + MAC_SRC.replace(":", "")) + b"\x08\x00"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(flows):
            udp_len = 8 + len(PAYLOAD)
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                             bytes([10, 0, i >> 8, i & 255]), bytes([10, 250, 0, 1]))
            ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
            pkt = eth + ip + struct.pack("!HHHH", 1024 + i, 9, udp_len, 0) + (FILLER if i else PAYLOAD)
            f.write(struct.pack("<IIII", 0, 0, len(pkt), len(pkt)) + pkt)


def _library_setup(nf, d):
    """(args, counter that must grow) of one library NF; its files in d (readable by its uid)."""
    def put(name, text):
        (d / name).write_text(text)
        return str(d / name)
    if nf == "count":
        return ["--dump", str(d / "count.json")], "packets"
    if nf == "firewall":
        return ["--config", put("fw.rules", "default drop\nallow proto udp dport 9 name udp9\n")], "rule.udp9"
    if nf == "nat":
        return ["--inside", "load", "--outside", "out",
                "--config", put("nat.conf", "snat from 10.0.0.0/8 to 198.51.100.1\n")], "snat_new"
    if nf == "router":
        return ["--config", put("router.conf", f"addr load 10.248.0.1/24 {MAC_NF}\n"
                                               "addr out 10.249.0.1/24 02:00:00:00:01:01\n"
                                               "neigh 10.249.0.2 lladdr 02:00:00:00:01:02 dev out\n"
                                               "route 10.250.0.0/24 via 10.249.0.2 dev out\n")], None
    if nf == "monitor":
        return ["--records", str(d / "mon.jsonl"), "--pcap", str(d / "mon.pcapng"), "--idle", "600",
                "--capture-max", "5000"], "captured"
    if nf == "ids":
        return ["--rules", put("ids.rules", 'alert udp any any -> any 9 (msg:"sandbox probe"; '
                                            'content:"sandbox-probe"; sid:1000001; rev:1;)\n'),
                "--alert-log", str(d / "fast.log")], "alerts"
    if nf == "lb":
        return ["--config", put("lb.conf", "vip 10.250.0.1 udp 9\nbackend b0 10.251.0.1\n"
                                           "backend b1 10.251.0.2\n")], "new_conns"
    if nf == "ratelimit":
        return ["--config", put("rl.conf", "class all match any srtcm cir 10g cbs 1000000 ebs 1000000 "
                                           "red drop\n")], "passed"
    return [], None   # fwd, l2switch


@pytest.mark.parametrize("nf", LIBRARY)
def test_library_nf_runs_strict(up, run_sluice, socket_dir, open_dir, tmp_path, nf):
    pcap = tmp_path / "flows.pcap"
    _write_pcap(pcap)
    args, counter = _library_setup(nf, open_dir)
    arglist = ", ".join(json.dumps(a) for a in args)
    r = up(f"""\
sluiced: {{pool_mbufs: 8192}}
ports:
  - {{name: load, vdev: "net_pcap0,rx_pcap={pcap},infinite_rx=1", chain: c}}
  - {{name: out, vdev: "net_null0"}}
chains:
  - {{name: c, nfs: [{nf}], exit: out}}
nfs:
  - {{name: {nf}, program: {nf}, wakeup: block, restart: never, sandbox: strict, args: [{arglist}]}}
""")
    assert r.returncode == 0, r.stdout + r.stderr
    name = f"{nf}.0"
    slot = _slot(socket_dir, name)
    pid = slot["pid"]
    assert _rx_grows(socket_dir, name, 5000, 15), _nf_stats(socket_dir, name)
    assert _filtered(pid)
    _assert_confined(pid, slot["uid"], _state(socket_dir)["supervisor"]["pid"])
    if counter:
        assert _wait(lambda: (_nf_stats(socket_dir, name).get("counters") or {}).get(counter, 0) > 0, 10), \
            _nf_stats(socket_dir, name)

    if nf == "count":
        # a dump would open a file: refused with a line, the NF carries on
        os.kill(pid, signal.SIGUSR1)
        assert _wait(lambda: "not writing " + str(open_dir / "count.json") in _log(socket_dir, name), 10)
    if nf == "firewall":
        # a reload would open the rule file: SIGHUP says it is not available, the NF carries on
        os.kill(pid, signal.SIGHUP)
        assert _wait(lambda: "SIGHUP: reload is not available under sandbox: strict" in _log(socket_dir, name), 10)
        assert _rx_grows(socket_dir, name, 5000, 10)
    if nf == "monitor":
        os.kill(pid, signal.SIGUSR1)  # flush + records through the helper thread, under the filter
        assert _wait(lambda: '"reason":"signal"' in (open_dir / "mon.jsonl").read_text(), 10)

    assert _slot(socket_dir, name)["state"] == "running" and _alive(pid)
    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    # it ended cleanly under the filter: its summary line, no refused call, status 0
    log = _log(socket_dir, name)
    assert "is not allowed (sandbox: strict)" not in log, log
    assert " exit=" in log.splitlines()[-1], log
    assert "killed by" not in _sup_log(socket_dir)

    if nf == "monitor":
        # the capture it opened before attach (as its own uid) is a complete pcapng file
        cap = open_dir / "mon.pcapng"
        assert cap.stat().st_uid == slot["uid"]
        out = subprocess.run(["tshark", "-r", str(cap), "-T", "fields", "-e", "udp.dstport", "-c", "100"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert set(out.stdout.split()) == {"9"}, out.stdout[:200]
        assert '"state":"end"' in (open_dir / "mon.jsonl").read_text()
    if nf == "ids":
        assert "sandbox probe" in (open_dir / "fast.log").read_text()
    if nf == "count":
        assert "not writing" in log and not (open_dir / "count.json").exists()
