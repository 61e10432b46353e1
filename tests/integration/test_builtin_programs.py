"""Every NF of nfs/ is a built-in program name: `program: firewall` in a config runs
<build>/nfs/sluice-nf-firewall, like fwd, reflect and count.

- the names (sluice.config.BUILTIN_NFS) are the NFs nfs/meson.build builds (nf_programs);
- `sluice config check` accepts each of them and names the field of an unknown one;
- `sluice up` resolves them in the build dir (and says which binary is missing);
- end to end: `sluice up` with `program: firewall` (+ its rule file) starts the firewall and it
  attaches and handles packets (real sluiced on net_null ports; root, DPDK).
"""

import json
import os
import re
from pathlib import Path

import pytest

from sluice import config as sconfig
from test_cli import _alive, _api, _wait, up  # noqa: F401  (up uses this file's real_build)

REPO_ROOT = Path(__file__).resolve().parents[2]

PORTS = """\
sluiced: {pool_mbufs: 8192}
ports:
  - {name: src, vdev: "net_null0,size=64,copy=0", chain: c}
  - {name: dst, vdev: "net_null1,size=64,copy=0"}
"""


def firewall_config(rules):
    """src -> chain c [fw] -> dst; fw is `program: firewall` with its rule file."""
    return PORTS + f"""\
chains:
  - {{name: c, nfs: [fw], exit: dst}}
nfs:
  - {{name: fw, program: firewall, args: [--config, {rules}], wakeup: block}}
"""


RULES = """\
default allow
drop in dst name from-dst
"""


def meson_nf_programs():
    """The NF names nfs/meson.build builds: the keys of its nf_programs dictionary."""
    text = (REPO_ROOT / "nfs" / "meson.build").read_text()
    text = re.sub(r"#[^\n]*", "", text)
    names = []
    for body in re.findall(r"\bnf_programs\s*\+?=\s*\{(.*?)\}", text, re.S):
        names += re.findall(r"'([A-Za-z0-9_-]+)'\s*:", body)
    return names


def all_builtins_config():
    """One service per built-in, all in one chain (so the config is valid as a whole)."""
    names = list(sconfig.BUILTIN_NFS)
    return PORTS + "chains:\n  - {name: c, nfs: [%s], exit: dst}\nnfs:\n%s" % (
        ", ".join(names), "".join(f"  - {{name: {n}, program: {n}}}\n" for n in names))


# ------------------------------------------------------------------ the list

def test_builtins_are_the_nfs_meson_builds():
    built = meson_nf_programs()
    assert len(built) >= 13, f"could not read nf_programs from nfs/meson.build (got {built})"
    assert sorted(sconfig.BUILTIN_NFS) == sorted(built), \
        "BUILTIN_NFS in python/sluice/config.py and nf_programs in nfs/meson.build differ"
    assert len(set(sconfig.BUILTIN_NFS)) == len(sconfig.BUILTIN_NFS)


@pytest.mark.parametrize("name", ["firewall", "nat", "router", "monitor", "ids", "lb", "ratelimit", "l2switch",
                                  "gen", "sink", "fwd", "reflect", "count"])
def test_library_nf_is_builtin(name):
    assert name in sconfig.BUILTIN_NFS


# ------------------------------------------------------------ config check

def test_config_check_accepts_every_builtin(run_sluice, tmp_path):
    f = tmp_path / "all.yaml"
    f.write_text(all_builtins_config())
    r = run_sluice("config", "check", f)
    assert r.returncode == 0, r.stderr
    n = len(sconfig.BUILTIN_NFS)
    assert f"ok (2 port(s), 1 chain(s), {n} service(s), {n} NF instance(s))" in r.stdout
    cfg = sconfig.load_string(all_builtins_config())
    assert {nf["name"]: nf["program_path"] for nf in cfg["nfs"]} == {n: f"builtin:{n}" for n in sconfig.BUILTIN_NFS}


def test_config_check_firewall_with_args(run_sluice, tmp_path):
    rules = tmp_path / "fw.rules"
    rules.write_text(RULES)
    f = tmp_path / "fw.yaml"
    f.write_text(firewall_config(rules))
    r = run_sluice("config", "check", f)
    assert r.returncode == 0, r.stderr
    assert "1 service(s), 1 NF instance(s)" in r.stdout
    r = run_sluice("config", "json", f)
    assert r.returncode == 0, r.stderr
    nf = json.loads(r.stdout)["nfs"][0]
    assert nf["program"] == "firewall" and nf["args"] == ["--config", str(rules)]


@pytest.mark.parametrize("prog", ["firewal", "fire-wall", "FIREWALL"])
def test_config_check_rejects_unknown_name(run_sluice, tmp_path, prog):
    f = tmp_path / "bad.yaml"
    f.write_text(PORTS + f"chains:\n  - {{name: c, nfs: [fw], exit: dst}}\nnfs:\n  - {{name: fw, program: {prog}}}\n")
    r = run_sluice("config", "check", f)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip()
    assert err.startswith(f"config error: nfs[0].program: unknown program {prog!r}: not a built-in NF, "
                          "not a path, not on PATH (built-ins: "), err
    # every built-in is named, in one readable list
    assert err.endswith("(built-ins: " + ", ".join(sconfig.BUILTIN_NFS) + ")"), err
    assert "Traceback" not in r.stderr


def test_config_check_missing_file_lists_builtins(tmp_path):
    with pytest.raises(sconfig.ConfigError) as e:
        sconfig.load_string(PORTS + "chains:\n  - {name: c, nfs: [fw], exit: dst}\n"
                            "nfs:\n  - {name: fw, program: ./no-such-nf}\n", base_dir=str(tmp_path))
    assert e.value.path == "nfs[0].program"
    assert "no such file" in e.value.msg and "firewall" in e.value.msg and "l2switch" in e.value.msg


# ----------------------------------------------------- resolution at `sluice up`

def _stub_build(root, nfs=()):
    """A fake meson build dir: src/manager/sluiced and nfs/sluice-nf-<name> as executable stubs."""
    for rel in ["src/manager/sluiced"] + [f"nfs/sluice-nf-{n}" for n in nfs]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/sh\nexit 1\n")
        p.chmod(0o755)
    return root


def test_every_builtin_resolves_in_the_build_dir(tmp_path):
    from sluice.supervisor import find_binaries, nf_program
    bdir = _stub_build(tmp_path / "b", sconfig.BUILTIN_NFS)
    cfg = sconfig.load_string(all_builtins_config())
    sluiced, builtins = find_binaries(cfg, str(bdir))
    assert sluiced == str(bdir / "src" / "manager" / "sluiced")
    assert builtins == {n: str(bdir / "nfs" / f"sluice-nf-{n}") for n in sconfig.BUILTIN_NFS}
    fw = next(nf for nf in cfg["nfs"] if nf["name"] == "firewall")
    assert nf_program(fw, builtins) == str(bdir / "nfs" / "sluice-nf-firewall")


def test_up_names_a_missing_builtin_binary(run_sluice, tmp_path, socket_dir):
    bdir = _stub_build(tmp_path / "b", ["fwd"])  # sluiced and fwd, no firewall
    rules = tmp_path / "fw.rules"
    rules.write_text(RULES)
    f = tmp_path / "fw.yaml"
    f.write_text(firewall_config(rules))
    r = run_sluice("up", f, "--build-dir", bdir, "--socket-dir", socket_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cannot find built-in NF sluice-nf-firewall (looked in {bdir}/nfs)" in r.stderr, r.stderr
    assert not (socket_dir / "state.json").exists()


# ------------------------------------------------ end to end: sluice up, firewall

@pytest.fixture(scope="session")
def real_build(build_dir):
    need = [build_dir / "src" / "manager" / "sluiced", build_dir / "nfs" / "sluice-nf-firewall"]
    missing = [str(p) for p in need if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make build` or set SLUICE_BUILD_DIR)")
    return build_dir


def test_up_starts_firewall_by_name(up, run_sluice, socket_dir, tmp_path, real_build):
    rules = tmp_path / "fw.rules"
    rules.write_text(RULES)
    r = up(firewall_config(rules))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 NF(s) attached (fw.0)" in r.stdout, r.stdout

    # the supervisor started build/nfs/sluice-nf-firewall, and that is the process attached to sluiced
    state = json.loads((socket_dir / "state.json").read_text())
    pid = {n["name"]: n["pid"] for n in state["nfs"]}["fw.0"]
    assert os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(real_build / "nfs" / "sluice-nf-firewall")
    nfs = {n["name"]: n for n in _api(socket_dir, "nfs")["nfs"]}
    assert nfs["fw.0"]["pid"] == pid and nfs["fw.0"]["service"] == "fw"

    # it read its rule file (the rule's counter; port names resolve at attach) and handles packets
    def fw():
        return next(n for n in _api(socket_dir, "stats")["nfs"] if n["name"] == "fw.0")
    assert _wait(lambda: "rule.from-dst" in (fw().get("counters") or {}), 5), fw()
    assert _wait(lambda: fw()["rx_pkts"] > 0, 5), fw()
    counters = fw()["counters"]
    assert sum(counters.get(k, 0) for k in ("allowed", "dropped", "non_ip", "malformed")) > 0, counters

    r = run_sluice("status", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^fw\.0\s+fw\s+{pid}\s+block\s", r.stdout, re.M), r.stdout
    r = run_sluice("down", "--socket-dir", socket_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _wait(lambda: not _alive(pid), 5)
