"""sluiced rejects bad JSON configs: non-zero exit, a message naming the field, no sockets left behind."""

import copy
import re

import pytest

from harness import base_config, require_env, run_sluiced_once, workdir  # noqa: F401


def good():
    return base_config(
        ports=[{"name": "in", "vdev": "net_null0", "chain": "c"}, {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": ["a"], "exit": "out"}], nfs=["a"])


def mutate(fn):
    c = good()
    fn(c)
    return c


def _set(path, value):
    def f(c):
        obj = c
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
    return f


def _del(path):
    def f(c):
        obj = c
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]
    return f


# (id, config (dict or raw text), regex the error must match)
CASES = [
    ("not_json", "{\"ports\": [", r"cfg\.json: line \d+"),
    ("top_level_list", "[]", r"top level must be an object"),
    ("duplicate_json_key", '{"ports": [], "ports": []}', r"duplicate"),
    ("missing_ports", mutate(_del(["ports"])), r"^ports: "),
    ("empty_ports", mutate(_set(["ports"], [])), r"^ports: "),
    ("unknown_top_key", mutate(_set(["bogus"], 1)), r"config\.bogus: unknown field"),
    ("unknown_sluiced_key", mutate(_set(["sluiced", "bogus"], 1)), r"sluiced\.bogus: unknown field"),
    ("unknown_port_key", mutate(_set(["ports", 0, "bogus"], 1)), r"ports\[0\]\.bogus: unknown field"),
    ("unknown_chain_key", mutate(_set(["chains", 0, "bogus"], 1)), r"chains\[0\]\.bogus: unknown field"),
    ("ring_size_not_pow2", mutate(_set(["sluiced", "ring_size"], 1000)), r"sluiced\.ring_size: .*power of two"),
    ("ring_size_string", mutate(_set(["sluiced", "ring_size"], "1024")), r"sluiced\.ring_size"),
    ("workers_vs_lcores", mutate(_set(["sluiced", "workers"], 3)), r"sluiced\.lcores: '[0-9,]+' names [23] cores; sluiced\.workers 3 needs 4"),
    ("workers_too_many", mutate(_set(["sluiced", "workers"], 9)), r"sluiced\.workers"),
    ("pipes_not_bool", mutate(_set(["sluiced", "pipes"], 1)), r"sluiced\.pipes: must be true or false"),
    ("nf_sched_bad", mutate(_set(["sluiced", "nf_sched"], "rr")), r"sluiced\.nf_sched: must be other or fifo"),
    ("ring_size_vs_pool", mutate(_set(["sluiced", "ring_size"], 8192)), r"sluiced\.ring_size: 8192 is too large for pool_mbufs"),
    ("pool_too_small", mutate(_set(["sluiced", "pool_mbufs"], 10)), r"sluiced\.pool_mbufs"),
    ("max_nfs_zero", mutate(_set(["sluiced", "max_nfs"], 0)), r"sluiced\.max_nfs"),
    ("huge_pages_bad", mutate(_set(["sluiced", "huge_pages"], "maybe")), r"sluiced\.huge_pages"),
    ("lcores_bad", mutate(_set(["sluiced", "lcores"], "0-1")), r"sluiced\.lcores"),
    ("port_missing_name", mutate(_del(["ports", 1, "name"])), r"ports\[1\]\.name: missing"),
    ("port_bad_name", mutate(_set(["ports", 1, "name"], "o ut")), r"ports\[1\]\.name"),
    ("port_missing_vdev", mutate(_del(["ports", 0, "vdev"])), r"ports\[0\]\.vdev"),
    ("port_not_net_vdev", mutate(_set(["ports", 1, "vdev"], "0000:00:03.0")), r"ports\[1\]\.vdev"),
    ("duplicate_port_name", mutate(_set(["ports", 1, "name"], "in")), r"ports\[1\]\.name: duplicate"),
    ("unknown_port_chain", mutate(_set(["ports", 0, "chain"], "nosuch")), r"ports\[0\]\.chain: unknown chain"),
    ("unknown_exit", mutate(_set(["chains", 0, "exit"], "nosuch")), r"chains\[0\]\.exit: unknown port"),
    ("chain_no_nfs", mutate(_set(["chains", 0, "nfs"], [])), r"chains\[0\]\.nfs"),
    ("chain_bad_service", mutate(_set(["chains", 0, "nfs"], ["a", "b/c"])), r"chains\[0\]\.nfs\[1\]"),
    ("duplicate_chain", mutate(lambda c: c["chains"].append(copy.deepcopy(c["chains"][0]))),
     r"chains\[1\]\.name: duplicate"),
    ("nfs_not_list", mutate(_set(["nfs"], {"a": 1})), r"^nfs: "),
    ("nf_bad_name", mutate(_set(["nfs"], [{"name": "a b"}])), r"nfs\[0\]\.name"),
    # these pass the parser and fail when DPDK creates the port or the lcores are set up
    ("vdev_unknown_driver", mutate(_set(["ports", 1, "vdev"], "net_bogus0")), r"ports\[(1|out)\]\.vdev"),
    ("vdev_no_such_iface", mutate(_set(["ports", 1, "vdev"], "net_af_packet0,iface=slt-doesnotexist")),
     r"ports\[(1|out)\]\.vdev"),
    ("vdev_iface_missing", mutate(_set(["ports", 1, "vdev"], "net_af_packet0,iface=slt-nonexist")),
     r"ports\[(1|out)\]\.vdev"),
    ("vdev_same_device_twice", mutate(_set(["ports", 1, "vdev"], "net_null0")), r"ports\[(1|out)\]\.vdev"),
    ("single_lcore", mutate(_set(["sluiced", "lcores"], "0")), r"sluiced\.lcores"),
]


@pytest.mark.parametrize("case,cfg,pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_config_is_rejected(workdir, case, cfg, pattern):  # noqa: F811
    require_env()
    cp, sock_dir = run_sluiced_once(cfg, workdir)
    out = cp.stderr + cp.stdout
    assert cp.returncode != 0, f"sluiced accepted a bad config ({case}):\n{out}"
    assert "sluiced: ready" not in out
    msgs = [l.split("error: ", 1)[-1].removeprefix("sluiced: ") for l in out.splitlines()]
    assert any(re.search(pattern, l) for l in msgs), \
        f"no error line matching {pattern!r}:\n{out}"
    left = sorted(p.name for p in sock_dir.iterdir()) if sock_dir.exists() else []
    assert not [n for n in left if n.endswith(".sock")], f"sockets left behind: {left}"


def test_missing_config_file(workdir):  # noqa: F811
    require_env()
    import subprocess
    from harness import SLUICED
    cp = subprocess.run([str(SLUICED), "--config", str(workdir / "nope.json"), "--socket-dir", str(workdir / "s")],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode != 0 and "nope.json" in cp.stderr
    cp = subprocess.run([str(SLUICED)], capture_output=True, text=True, timeout=30)
    assert cp.returncode != 0 and "usage" in cp.stderr


def test_good_config_is_accepted(workdir):  # noqa: F811
    """The base of every mutation above starts (so each rejection is due to its one change)."""
    require_env()
    from harness import Sluice
    s = Sluice(workdir)
    try:
        s.start(good())
        assert s.ok("status")["port_count"] == 2
        assert s.stop() == 0
        assert not (workdir / "s" / "nf.sock").exists() and not (workdir / "s" / "ctl.sock").exists()
    finally:
        s.cleanup()
