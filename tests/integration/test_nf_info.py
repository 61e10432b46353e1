"""The NF info page (include/sluice/abi.h, struct sl_nf_info) end to end: sluiced hands every NF its
port names (the SDK's sl_nf_port_id) and reports the NF's own named counters (sl_nf_counter) in the
NF object's `counters`. Real sluiced, real NFs, net_null ports:

  src (net_null, chain c) -> count -> fwd --out side -> port side (not the chain's exit, dst)
"""

import subprocess

from harness import NF_BINS, base_config, sluice, wait_until, workdir  # noqa: F401

PORTS = [{"name": "src", "vdev": "net_null0,size=64,copy=0", "chain": "c"},
         {"name": "dst", "vdev": "net_null1"}, {"name": "side", "vdev": "net_null2"}]


def test_counters_and_port_names_reach_across(sluice):  # noqa: F811
    sluice.start(base_config(ports=PORTS, chains=[{"name": "c", "nfs": ["count", "fwd"], "exit": "dst"}],
                             nfs=["count", "fwd"]))
    sluice.start_nf("count", "count", wakeup="block")
    sluice.start_nf("fwd", "fwd", wakeup="block", extra=["--out", "side"])
    wait_until(lambda: sluice.port("side")["tx_pkts"] > 10000, 10, "packets out of side")
    st = sluice.stats()
    assert sluice.port("dst", st)["tx_pkts"] == 0  # fwd chose the port by name, not NEXT
    c = sluice.nf("count", st)["counters"]
    # the NF's own, and the SDK's (sdk.*: batches, sleeps, wakeups, the handler-time histogram)
    assert {k for k in c if not k.startswith("sdk.")} == {"packets", "bytes", "flows", "table_full"}, c
    assert {"sdk.batches", "sdk.sleeps", "sdk.wakeups", "sdk.handler_ns_sum", "sdk.handler_le_256",
            "sdk.handler_le_inf"} <= set(c), c
    # every batch it handled is in one bucket of the histogram; a block NF was woken at least once
    buckets = sum(v for k, v in c.items() if k.startswith("sdk.handler_le_"))
    assert 0 < c["sdk.batches"] and abs(c["sdk.batches"] - buckets) <= max(10, c["sdk.batches"] // 100), c
    assert c["sdk.handler_ns_sum"] > 0, c
    assert c["sdk.wakeups"] > 0, c
    # count publishes its totals after each batch: never ahead of what sluiced handed it (read after:
    # within one stats answer sluiced reads rx_pkts before the counters, while traffic flows)
    assert 0 < c["packets"] <= sluice.nf("count")["rx_pkts"]
    assert c["bytes"] == 64 * c["packets"] and c["flows"] == 1 and c["table_full"] == 0, c
    assert {k for k in sluice.nf("fwd", st)["counters"] if not k.startswith("sdk.")} == set()
    # the values are live
    before = c["packets"]
    wait_until(lambda: sluice.nf("count")["counters"]["packets"] > before, 5, "count's counter moves")


def test_an_unknown_port_name_is_refused_with_the_names_there_are(sluice):  # noqa: F811
    sluice.start(base_config(ports=PORTS, chains=[{"name": "c", "nfs": ["fwd"], "exit": "dst"}], nfs=["fwd"]))
    r = subprocess.run([str(NF_BINS["fwd"]), "--socket", str(sluice.nf_sock), "--name", "fwd", "--out", "nosuch"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 1
    assert "sluice-nf-fwd: --out 'nosuch': sluiced has no such port (ports: src dst side)" in r.stderr, r.stderr
    wait_until(lambda: "fwd" not in sluice.attached(), 5, "fwd detached")
    assert sluice.stats()["pool"]["lent"] == 0
