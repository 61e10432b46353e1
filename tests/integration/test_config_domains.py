"""Trust-domain config (issue 15): domains:, nfs[].domain / trusted / access / pool_mbufs; every error
names the field, in the CLI's YAML validation and in sluiced's own JSON check."""

import json

import pytest

from sluice import config as sc
from sluice.config import ConfigError

from harness import run_sluiced_once, workdir  # noqa: F401

BASE = {
    "ports": [{"name": "p", "vdev": "net_null0", "chain": "c"}],
    "chains": [{"name": "c", "nfs": ["a", "u", "n"], "exit": "p"}],
    "nfs": [{"name": "a", "program": "fwd"}, {"name": "u", "program": "fwd"}, {"name": "n", "program": "fwd"}],
}


def mod(fn):
    c = json.loads(json.dumps(BASE))
    fn(c)
    return c


def norm(c):
    return sc.normalize(c, check_programs=False)


def test_defaults_one_default_domain_rw_no_sandbox():
    c = norm(BASE)
    assert "domains" not in c
    assert all(n["domain"] == "default" and n["access"] == "rw" and n["trusted"] and n["sandbox"] == "none"
               for n in c["nfs"])


def test_untrusted_nf_private_domain_strict_sandbox_and_named_domains():
    def f(c):
        c["domains"] = [{"name": "blue", "pool_mbufs": 2048}]
        c["nfs"][1].update(trusted=False, instances=2)
        c["nfs"][2].update(domain="blue", access="ro")
    c = norm(mod(f))
    assert c["domains"] == [{"name": "blue", "pool_mbufs": 2048, "buffer_size": 2048},
                            {"name": "u", "buffer_size": 2048, "pool_mbufs": 2 * 2 * 1024}]
    a, u, n = c["nfs"]
    assert (u["domain"], u["sandbox"], u["access"]) == ("u", "strict", "rw")
    assert (n["domain"], n["sandbox"], n["access"]) == ("blue", "none", "ro")
    assert sc.default_sandbox(u) == "strict" and sc.default_sandbox(a) == "none"
    # an explicit sandbox still wins, and pool_mbufs sizes the private domain
    c = norm(mod(lambda c: c["nfs"][1].update(trusted=False, sandbox="none", pool_mbufs=1500)))
    assert c["nfs"][1]["sandbox"] == "none" and c["domains"] == [{"name": "u", "buffer_size": 2048, "pool_mbufs": 1500}]
    out = json.loads(sc.to_sluiced_json(c))
    assert out["domains"] == [{"name": "u", "buffer_size": 2048, "pool_mbufs": 1500}] and out["nfs"][1]["domain"] == "u"


@pytest.mark.parametrize("fn,field", [
    (lambda c: c["nfs"][1].update(trusted=False, domain="blue"), "nfs[1].domain"),
    (lambda c: c["nfs"][0].update(domain="nope"), "nfs[0].domain"),
    (lambda c: c["nfs"][0].update(trusted="no"), "nfs[0].trusted"),
    (lambda c: c["nfs"][0].update(access="wo"), "nfs[0].access"),
    (lambda c: c["nfs"][0].update(pool_mbufs=2048), "nfs[0].pool_mbufs"),
    (lambda c: c["nfs"][1].update(trusted=False, pool_mbufs=10), "nfs[1].pool_mbufs"),
    (lambda c: c.update(domains=[{"name": "default"}]), "domains[0].name"),
    (lambda c: c.update(domains=[{"name": "x"}, {"name": "x"}]), "domains[1].name"),
    (lambda c: c.update(domains=[{"name": "x", "pool_mbufs": 5}]), "domains[0].pool_mbufs"),
    (lambda c: c.update(domains=[{"name": "x", "size": 5}]), "domains[0].size"),
    (lambda c: c.update(domains=[{"pool_mbufs": 2048}]), "domains[0].name"),
    (lambda c: (c.update(domains=[{"name": "u"}]), c["nfs"][1].update(trusted=False)), "domains[0].name"),
    (lambda c: c.update(domains=[{"name": f"d{i}"} for i in range(64)]), "domains"),
    (lambda c: c.update(domains="blue"), "domains"),
])
def test_errors_name_the_field(fn, field):
    with pytest.raises(ConfigError) as e:
        norm(mod(fn))
    assert str(e.value).startswith(field + ":"), str(e.value)


def sluiced_json(**top):
    c = {"sluiced": {"pool_mbufs": 4096, "ring_size": 256}, "ports": [{"name": "p", "vdev": "net_null0"}],
         "nfs": [{"name": "a"}]}
    c.update(top)
    return c


@pytest.mark.parametrize("cfg,msg", [
    (sluiced_json(domains=[{"name": "x", "pool_mbufs": 10}]), "domains[0].pool_mbufs"),
    (sluiced_json(domains=[{"name": "x"}, {"name": "x"}]), "domains[1].name: duplicate domain name"),
    (sluiced_json(domains=[{"name": "x", "bad": 1}]), "domains[0].bad: unknown field"),
    (sluiced_json(domains=[{"name": f"d{i}"} for i in range(64)]), "domains: at most 63 domains besides default"),
    (sluiced_json(nfs=[{"name": "a", "domain": "nope"}]), "nfs[0].domain: unknown domain 'nope'"),
    (sluiced_json(nfs=[{"name": "a", "access": "wo"}]), "nfs[0].access: must be rw or ro"),
])
def test_sluiced_rejects_bad_domain_config(workdir, cfg, msg):  # noqa: F811
    r, _ = run_sluiced_once(cfg, workdir)
    assert r.returncode == 2 and msg in (r.stdout + r.stderr), r.stdout + r.stderr
