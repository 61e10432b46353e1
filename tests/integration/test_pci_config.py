"""Port device options and PCI checks (docs/ports.md "PCI NICs"), without a NIC:

- ports[].rx_desc, tx_desc, mtu, offloads: the CLI's and sluiced's validation, errors naming the field;
- a pci: port whose device is absent, bound to another driver or without an IOMMU group: the CLI's
  check against a fake sysfs tree (SLUICE_SYSFS_ROOT), sluiced with a BDF that does not exist here
  (EAL's allowlist names it; no real device is touched) and with the fake tree;
- an offload the PMD lacks refuses the port at start, naming the field and what the device offers;
- link and xstats in the control API for net_null / net_ring ports, and in `sluice status` / `stats`.
"""

import json
import os
import subprocess

import pytest

from harness import SLUICED, base_config, run_sluiced_once, sluice, workdir, write_config  # noqa: F401
from sluice import config as sc

ABSENT = "0000:7f:1f.7"  # a BDF this machine does not have (checked: the test skips otherwise)


def _absent():
    if os.path.exists(f"/sys/bus/pci/devices/{ABSENT}"):
        pytest.skip(f"this machine has a PCI device {ABSENT}")


def _err(port, buffer_size=None, **kw):
    data = {"ports": [dict({"name": "p", "vdev": "net_null0"}, **port)]}
    if buffer_size:
        data["sluiced"] = {"buffer_size": buffer_size}
    with pytest.raises(sc.ConfigError) as e:
        sc.normalize(data, check_programs=False, **kw)
    return str(e.value)


# ---------------------------------------------------------------- validation (CLI)

@pytest.mark.parametrize("port, field, words", [
    ({"rx_desc": 1000}, "ports[0].rx_desc", "power of two 64..16384"),
    ({"tx_desc": 32}, "ports[0].tx_desc", "64..16384"),
    ({"rx_desc": 32768}, "ports[0].rx_desc", "64..16384"),
    ({"rx_desc": "1024"}, "ports[0].rx_desc", "integer"),
    ({"mtu": 67}, "ports[0].mtu", "68..9600"),
    ({"mtu": 9601}, "ports[0].mtu", "68..9600"),
    ({"mtu": 9000}, "ports[0].mtu", "sluiced.buffer_size to at least 9024"),
    ({"mtu": 2031}, "ports[0].mtu", "a buffer holds 2048"),
    ({"offloads": "vlan_strip"}, "ports[0].offloads", "must be a list"),
    ({"offloads": ["tx_checksum"]}, "ports[0].offloads[0]", "tx_checksum is not offered yet"),
    ({"offloads": ["vlan_strip", "lro"]}, "ports[0].offloads[1]", "rx_checksum, vlan_strip, vlan_insert"),
    ({"offloads": ["vlan_strip", "vlan_strip"]}, "ports[0].offloads[1]", "twice"),
    ({"rx_queues": 2}, "ports[0].rx_queues", "unknown key"),
])
def test_option_errors_name_the_field(port, field, words):
    msg = _err(port)
    assert msg.startswith(field + ":"), msg
    assert words in msg, msg


def test_options_accepted_and_passed_to_sluiced():
    assert _err({"mtu": 9000}, buffer_size=9024 - 64).startswith("ports[0].mtu")
    cfg = sc.normalize({"sluiced": {"buffer_size": 9216}, "ports": [
        {"name": "a", "vdev": "net_null0", "rx_desc": 4096, "tx_desc": 64, "mtu": 9000,
         "offloads": ["vlan_insert", "rx_checksum"]},
        {"name": "b", "vdev": "net_null1", "offloads": []},
        {"name": "c", "vdev": "net_null2"}]}, check_programs=False)
    ports = json.loads(sc.to_sluiced_json(cfg))["ports"]
    assert ports[0] == {"name": "a", "vdev": "net_null0", "chain": None, "queues": 1, "rx_desc": 4096, "tx_desc": 64,
                        "mtu": 9000, "offloads": ["vlan_insert", "rx_checksum"]}
    assert ports[1]["offloads"] == []          # explicit: none at all
    assert set(ports[2]) == {"name", "vdev", "chain", "queues"}  # no options: the JSON as before (queues: 1)


# ---------------------------------------------------------------- sluiced's own validation

@pytest.mark.parametrize("port, expect", [
    ({"rx_desc": 100}, "ports[0].rx_desc: must be a power of two 64..16384"),
    ({"mtu": 9000}, "ports[0].mtu: 9000 needs frames of 9018 bytes"),
    ({"offloads": ["tx_checksum"]}, "ports[0].offloads[0]: tx_checksum is not offered yet"),
    ({"offloads": ["nope"]}, "ports[0].offloads[0]: unknown offload 'nope'"),
    ({"offloads": "vlan_strip"}, "ports[0].offloads: must be a list"),
    ({"queue": 1}, "ports[0].queue: unknown field"),
])
def test_sluiced_validates_options(workdir, port, expect):  # noqa: F811
    cp, _ = run_sluiced_once(base_config([dict({"name": "a", "vdev": "net_null0"}, **port)],
                                         huge_pages="off", pool_mbufs=4096, ring_size=256), workdir)
    assert cp.returncode != 0
    assert expect in cp.stdout + cp.stderr, cp.stdout + cp.stderr


def test_sluiced_refuses_an_offload_the_pmd_lacks(workdir):  # noqa: F811
    cp, _ = run_sluiced_once(base_config([{"name": "n0", "vdev": "net_null0"},
                                          {"name": "a", "vdev": "net_null1", "offloads": ["rx_checksum"]}],
                                         huge_pages="off", pool_mbufs=4096, ring_size=256), workdir)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0
    assert ("config error: ports[1].offloads (port a): the device (net_null1, driver net_null) does not offer "
            "rx_checksum; it offers: ") in out, out


# ---------------------------------------------------------------- PCI devices in sysfs

def _fake_sysfs(root, bdf=ABSENT, driver=None, group=True, noiommu=False):
    dev = root / "bus/pci/devices" / bdf
    dev.mkdir(parents=True)
    if driver:
        (root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        (dev / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
    if group:
        (root / "kernel/iommu_groups/7").mkdir(parents=True, exist_ok=True)
        (dev / "iommu_group").symlink_to("../../../kernel/iommu_groups/7")
    p = root / "module/vfio/parameters"
    p.mkdir(parents=True, exist_ok=True)
    (p / "enable_unsafe_noiommu_mode").write_text("Y\n" if noiommu else "N\n")
    return root


@pytest.mark.parametrize("kw, words", [
    (None, [f"no PCI device {ABSENT} on this machine"]),
    ({"driver": "e1000e"}, [f"bound to e1000e, not vfio-pci", "driver_override", "drivers_probe", "unbind"]),
    ({"driver": None}, ["bound to no driver", "modprobe vfio-pci"]),
    ({"driver": "e1000e", "group": False}, ["bound to e1000e", "no IOMMU group either", "intel_iommu=on"]),
    ({"driver": "vfio-pci", "group": False}, ["bound to vfio-pci but has no IOMMU group", "intel_iommu=on",
                                               "enable_unsafe_noiommu_mode"]),
    ({"driver": "vfio-pci"}, None),
    ({"driver": "vfio-pci", "group": False, "noiommu": True}, None),
    ({"driver": "uio_pci_generic", "group": False}, None),
])
def test_pci_device_problem(tmp_path, kw, words):
    root = tmp_path / "sys"
    root.mkdir()
    if kw is not None:
        _fake_sysfs(root, **kw)
    msg = sc.pci_device_problem(ABSENT.upper(), str(root))
    if words is None:
        assert msg is None
    else:
        for w in words:
            assert w in msg, msg


def test_config_check_and_up_say_why(tmp_path, run_sluice, socket_dir):
    root = _fake_sysfs(tmp_path / "sys", driver="e1000e")
    f = tmp_path / "nic.yaml"
    f.write_text(f"ports:\n  - name: wan\n    vdev: pci:{ABSENT}\n    offloads: [vlan_strip]\n")
    env = {"SLUICE_SYSFS_ROOT": str(root)}
    r = run_sluice("config", "check", f, env=env)
    assert r.returncode == 2
    assert f"config error: ports[0].vdev: PCI device {ABSENT} is bound to e1000e, not vfio-pci" in r.stderr, r.stderr
    for skip in ("--no-devices", "--no-programs"):  # a config checked for another machine
        r = run_sluice("config", "check", skip, f, env=env)
        assert r.returncode == 0, r.stderr
    _absent()
    r = run_sluice("up", f, "-d", "--socket-dir", socket_dir, timeout=30)  # the real /sys: nothing started
    assert r.returncode != 0
    assert f"ports[0].vdev: no PCI device {ABSENT} on this machine" in r.stderr + r.stdout
    assert not (socket_dir / "ctl.sock").exists()


def test_sluiced_absent_pci_device(workdir, tmp_path):  # noqa: F811
    _absent()
    cfg = base_config([{"name": "nic", "vdev": f"pci:{ABSENT}"}], huge_pages="off", pool_mbufs=4096, ring_size=256)
    cp, _ = run_sluiced_once(cfg, workdir)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0
    assert f"config error: ports[0].vdev (port nic): no PCI device {ABSENT} on this machine" in out, out
    # the same BDF as sluiced would see it on a machine where e1000e holds it (fake sysfs: only
    # sluiced's diagnosis reads it; EAL scans the real bus, where the device does not exist)
    root = _fake_sysfs(tmp_path / "sys", driver="e1000e")
    cp = subprocess.run([str(SLUICED), "--config", str(write_config(workdir / "cfg.json", cfg)), "--socket-dir",
                         str(workdir / "s2")], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, SLUICE_SYSFS_ROOT=str(root)))
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0
    assert f"ports[0].vdev (port nic): PCI device {ABSENT} is bound to e1000e, not vfio-pci" in out, out


# ---------------------------------------------------------------- link, xstats, options in the API and CLI

def test_link_and_xstats(sluice, run_sluice):  # noqa: F811
    sluice.start(base_config([{"name": "src", "vdev": "net_null0", "rx_desc": 512, "tx_desc": 256, "mtu": 1400,
                               "offloads": []},
                              {"name": "loop", "vdev": "net_ring0"}]))
    ports = {p["name"]: p for p in sluice.request("ports")["ports"]}
    for p in ports.values():
        assert p["link"]["up"] is True and p["link"]["speed_mbps"] == 10000, p["link"]
        assert p["link"]["duplex"] == "full" and isinstance(p["link"]["autoneg"], bool)
        assert all(v != 0 for v in p["xstats"].values()), p["xstats"]  # nonzero ones only by default
    src, loop = ports["src"], ports["loop"]
    assert (src["rx_desc"], src["tx_desc"], src["mtu"]) == (512, 256, 1400)
    assert src["options"] == {"rx_desc": 512, "tx_desc": 256, "mtu": 1400, "offloads": []}
    assert src["offloads"] == [] and src["rx_csum_bad"] == 0
    assert loop["options"] == {} and (loop["rx_desc"], loop["tx_desc"]) == (1024, 1024)
    every = {p["name"]: p for p in sluice.request("ports", xstats=True)["ports"]}
    for name in ("src", "loop"):
        assert {"rx_good_packets", "tx_good_packets", "rx_q0_packets"} <= set(every[name]["xstats"]), every[name]
    st = sluice.request("stats", xstats=True)
    assert "rx_good_packets" in st["ports"][0]["xstats"] and st["ports"][0]["link"]["up"]
    assert "device options: 512 RX and 256 TX descriptors, MTU 1400, offloads none" in sluice.log()

    r = run_sluice("status", "--socket-dir", sluice.sock_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("PORT "))
    assert "LINK" in lines[head] and "OFFLOADS" in lines[head]
    row = next(line for line in lines[head:] if line.startswith("src "))
    assert "up 10G full" in row and "1400" in row and "512/256" in row, row
    r = run_sluice("stats", "--xstats", "--socket-dir", sluice.sock_dir)
    assert r.returncode == 0 and "LINK" in r.stdout and "up 10G full" in r.stdout, r.stdout
    assert "PORT XSTATS (nonzero)" in r.stdout
    r = run_sluice("stats", "--json", "--socket-dir", sluice.sock_dir)
    assert json.loads(r.stdout)["ports"][1]["link"]["up"] is True
