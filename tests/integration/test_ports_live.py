"""Ports added and deleted at runtime (control API port_add / port_del, `sluice port add|del|list`;
docs/ports.md "Ports at runtime"), with real sluiced, NFs and packets:

  src (net_null supply) -> chain c = [gen, sink] -> out (net_null)      the path that must lose nothing
  rin (net_pcap rx, added) -> chain rc = [rfwd] -> rout (net_pcap tx, added)   the new path

gen runs unbounded at a modest rate while ports come and go on the other path; once the supply stops,
every packet gen made must have reached sink and left through "out" (exact counts), and the new path's
pcap must hold exactly the frames replayed into it. The pool audit is whole after every step. Refusals
leave the ports, chains and rules exactly as they were. No timing thresholds: counts only.
"""

import json
import re

from harness import (TEST_WORKERS, base_config, read_pcap, sluice, udp_frames, wait_until,  # noqa: F401
                     workdir, write_pcap)

RATE = 50000   # gen's packets per second: the supply (net_null) runs at full rate, gen drops the rest
N_PCAP = 300


def whole(sluice, step):
    a = sluice.pool_audit()
    assert a["whole"], f"pool audit after {step}: {a}"


def deployment(sluice):
    """What a refusal must leave untouched (no traffic runs meanwhile: the counters stand still too)."""
    return sluice.ok("ports")["ports"], sluice.ok("chains")["chains"], sluice.ok("rules")


def refused(sluice, cmd, match, **fields):
    before = deployment(sluice)
    r = sluice.request(cmd, **fields)
    assert r.get("ok") is False and re.search(match, r.get("error", "")), f"{cmd} {fields}: {r}"
    assert deployment(sluice) == before, f"{cmd} {fields} changed the deployment"
    return r["error"]


def new_path_round(sluice, workdir, rnd, frames):
    """Add rout (TX) and rin (RX, chain rc) under traffic on the other path, run the pcap through,
    check the refusal of rout's deletion, delete both; returns what rout wrote."""
    inp, outp = workdir / f"in{rnd}.pcap", workdir / f"out{rnd}.pcap"
    write_pcap(inp, frames)
    # a TX port first (the chain's exit must exist), then the chain, then its RX port
    rout = sluice.ok("port_add", name="rout", vdev=f"net_pcap0,tx_pcap={outp}")["port"]
    assert (rout["id"], rout["name"], rout["chain"], rout["polled"]) == (2, "rout", None, False), rout
    whole(sluice, f"round {rnd}: adding rout")
    sluice.ok("chain_set", name="rc", nfs=["rfwd"], exit="rout")
    rin = sluice.ok("port_add", name="rin", vdev=f"net_pcap1,rx_pcap={inp}", chain="rc")["port"]
    assert (rin["id"], rin["chain"], rin["polled"]) == (3, "rc", True), rin
    wait_until(lambda: sluice.port("rout")["tx_pkts"] >= N_PCAP, 20, f"{N_PCAP} frames through the new ports")
    st = sluice.stats()
    assert sluice.port("rin", st)["rx_pkts"] == N_PCAP and sluice.port("rout", st)["tx_pkts"] == N_PCAP
    assert [p["name"] for p in st["ports"]] == ["src", "out", "rout", "rin"]
    whole(sluice, f"round {rnd}: traffic through rin -> rfwd -> rout")

    # rout is rc's exit: refused, nothing changes (the traffic on c keeps moving the counters, so
    # only the ports' set, the chains and the rules are compared here)
    chains, rules = sluice.ok("chains")["chains"], sluice.ok("rules")
    r = sluice.request("port_del", name="rout")
    assert r == {"ok": False, "error": "port_del: port 'rout' is the exit of chain 'rc'; change the chain first"}, r
    assert [p["name"] for p in sluice.ok("ports")["ports"]] == ["src", "out", "rout", "rin"]
    assert sluice.ok("chains")["chains"] == chains and sluice.ok("rules") == rules
    # an ingress port with a chain goes; then rout, once rc no longer exits there
    sluice.ok("port_del", name="rin")
    whole(sluice, f"round {rnd}: deleting rin")
    sluice.ok("chain_set", name="rc", nfs=["rfwd"], exit=None)
    sluice.ok("port_del", name="rout")
    whole(sluice, f"round {rnd}: deleting rout")
    assert [(p["id"], p["name"]) for p in sluice.ok("ports")["ports"]] == [(0, "src"), (1, "out")]
    assert sluice.ok("status")["port_count"] == 2
    return read_pcap(outp)  # closed with the port


def test_ports_come_and_go_under_traffic(sluice, workdir):  # noqa: F811
    gen_dump, sink_dump = workdir / "gen.json", workdir / "sink.json"
    sluice.start(base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0"}, {"name": "out", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": ["gen", "sink"], "exit": "out"}],
        nfs=["gen", "sink"], ring_size=4096, pool_mbufs=32768))
    sluice.start_nf("gen", "gen", wakeup="block", extra=["--rate-pps", RATE, "--size", 128, "--dump", gen_dump])
    sluice.start_nf("sink", "sink", wakeup="block", extra=["--action", "next", "--dump", sink_dump])
    sluice.start_nf("fwd", "rfwd", wakeup="block", batch=1, timeout_us=50)
    sluice.ok("port_chain_set", port="src", chain="c")
    wait_until(lambda: sluice.nf("sink")["rx_pkts"] > 1000, 20, "traffic through gen -> sink")

    # three rounds of the same names and devices: each adds, carries, deletes (add-del-add too)
    for rnd in range(3):
        rx_before = sluice.nf("sink")["rx_pkts"]
        frames = udp_frames(N_PCAP, "10.7.0.1", "10.7.0.2", b"live-port%d" % rnd * 9, sport=lambda i: 1000 + i % 13,
                            dport=53, ip_id=lambda i: i)
        assert new_path_round(sluice, workdir, rnd, frames) == frames, f"round {rnd}: the pcap written"
        assert sluice.nf("sink")["rx_pkts"] > rx_before, f"round {rnd}: the other path ran meanwhile"
    assert sluice.nf("rfwd")["rx_pkts"] == 3 * N_PCAP

    # stop the supply and let the chain drain: every packet gen made went through
    sluice.ok("port_chain_set", port="src", chain=None)
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 10, "gen -> sink drained")
    st = sluice.stats()
    for name in ("gen", "sink", "rfwd"):
        assert sluice.stop_nf(name) == 0, sluice.nf_log(name)
    g, s = json.loads(gen_dump.read_text()), json.loads(sink_dump.read_text())
    ctx = f"\ngen: {g}\nsink: { {k: v for k, v in s.items() if k != 'histogram'} }\ndrops: {st['drops']}"
    n = g["generated"]
    assert n > 0 and s["received"] == n and sluice.nf("sink", st)["rx_pkts"] == n, ctx
    assert s["generators"] == [{"id": 0, "received": n, "max_seq": n - 1, "lost": 0, "reordered": 0,
                                "duplicates": 0}], ctx
    assert sluice.port("out", st)["tx_pkts"] == n, ctx
    assert sluice.nf("sink", st)["drops"]["ring_full"] == 0, ctx
    assert st["drops"]["no_path"] == 0 and st["drops"]["tx_full"] == 0, ctx
    sluice.wait_pool_whole()

    log = sluice.log()  # one line per add and per delete
    for name, vdev in (("rout", "net_pcap0"), ("rin", "net_pcap1")):
        assert len(re.findall(rf"control: port {name} added: {vdev}", log)) == 3, log
        assert len(re.findall(rf"control: port {name} deleted", log)) == 3, log
    assert sluice.stop() == 0, sluice.log()
    assert "mbufs not back in the pool" not in sluice.log()


def test_refusals_change_nothing(sluice, workdir):  # noqa: F811
    # a is polled (a rule matches on it) but receives nothing: net_ring, not net_null's endless supply
    sluice.start(base_config(
        ports=[{"name": "a", "vdev": "net_ring0"}, {"name": "b", "vdev": "net_null1"},
               {"name": "m", "vdev": "net_null2"}],
        chains=[{"name": "ch", "nfs": ["x"], "exit": "b"}]))
    sluice.ok("rule_add", rule={"name": "from-a", "match": {"in_port": "a"}, "action": {"chain": "ch"}})
    sluice.ok("rule_add", rule={"name": "dns", "match": {"proto": 17, "dst_port": [53, 53]},
                                "action": {"port": "m"}})
    start = deployment(sluice)

    refused(sluice, "port_del", r"^port_del: port 'b' is the exit of chain 'ch'; change the chain first$", name="b")
    refused(sluice, "port_del", r"^port_del: port 'a' is matched \(in_port\) by rule \d+ from-a", name="a")
    refused(sluice, "port_del", r"^port_del: port 'm' is the action of rule \d+ dns", name="m")
    refused(sluice, "port_del", r"^port_del: field 'name': unknown port 'nosuch'", name="nosuch")
    refused(sluice, "port_add", r"^port_add: field 'name': duplicate port name 'a'", name="a", vdev="net_null5")
    refused(sluice, "port_add", r"^port_add: field 'name': must be a name", name="bad name", vdev="net_null5")
    refused(sluice, "port_add", r"^port_add: field 'vdev': 'eth_foo0' is not a DPDK virtual device", name="n",
            vdev="eth_foo0")
    refused(sluice, "port_add", r"^port_add: field 'vdev': must be a DPDK vdev string", name="n", vdev="")
    refused(sluice, "port_add", r"^port_add: field 'vdev': device 'net_null1' is port 'b' already", name="n",
            vdev="net_null1,size=64")
    refused(sluice, "port_add", r"^port_add: field 'vdev' \(port n\): DPDK could not create 'net_bogus0'", name="n",
            vdev="net_bogus0")
    refused(sluice, "port_add", r"^port_add: field 'vdev' \(port n\): DPDK could not create", name="n",
            vdev="net_pcap7,rx_pcap=/nonexistent/x.pcap")
    # never probed: the refusal comes before DPDK is asked anything
    refused(sluice, "port_add", r"^port_add: field 'vdev': 'pci:0000:00:1f.0': PCI ports are not added at runtime",
            name="n", vdev="pci:0000:00:1f.0")
    refused(sluice, "port_add", r"^port_add: field 'chain': unknown chain 'nosuch'", name="n", vdev="net_null5",
            chain="nosuch")
    refused(sluice, "port_add", r"^port_add: field 'id': port id 1 is port 'b'", name="n", vdev="net_null5", id=1)
    refused(sluice, "port_add", r"^port_add: field 'id': must be a port id 0\.\.31", name="n", vdev="net_null5", id=32)
    refused(sluice, "port_add", r"^port_add: field 'id': must be a port id", name="n", vdev="net_null5", id="3")
    whole(sluice, "the refusals")

    # up to the limit: 29 more make 32; the 33rd is refused
    for i in range(3, 32):
        assert sluice.ok("port_add", name=f"p{i}", vdev=f"net_null{i}")["port"]["id"] == i
    assert sluice.ok("status")["port_count"] == 32
    refused(sluice, "port_add", r"^port_add: sluiced has 32 ports, the most it takes; delete one first", name="p32",
            vdev="net_null32")
    for i in range(3, 32):
        sluice.ok("port_del", name=f"p{i}")
    assert deployment(sluice) == start
    whole(sluice, "32 ports and back")
    # the rule and the chain go first, then the ports they held go too
    rules = {r["name"]: r["id"] for r in sluice.ok("rules")["rules"]}
    sluice.ok("rule_del", id=rules["dns"])
    sluice.ok("port_del", name="m")
    sluice.ok("chain_set", name="ch", nfs=["x"], exit=None)
    sluice.ok("port_del", name="b")
    assert [p["name"] for p in sluice.ok("ports")["ports"]] == ["a"]
    sluice.wait_pool_whole()
    assert sluice.stop() == 0, sluice.log()


def test_add_del_add_ids_nf_info_and_cli(sluice, workdir, run_sluice):  # noqa: F811
    sluice.start(base_config(
        ports=[{"name": "a", "vdev": "net_null0,size=64,copy=0"}, {"name": "b", "vdev": "net_null1"}],
        chains=[{"name": "cc", "nfs": ["f"], "exit": "b"}]))
    # add-del-add of one name: the same lowest free id, a working device each time
    for _ in range(2):
        p = sluice.ok("port_add", name="x", vdev="net_null2")["port"]
        assert (p["id"], p["vdev"]) == (2, "net_null2"), p
        sluice.ok("port_del", name="x")
        whole(sluice, "add-del of x")
    assert sluice.ok("port_add", name="x", vdev="net_null2")["port"]["id"] == 2
    # an id asked for (a restart replaying its ports keeps their ids); the ids below stay free
    y = sluice.ok("port_add", name="y", vdev="net_null3", id=9)["port"]
    assert (y["id"], y["worker"]) == (9, 9 % TEST_WORKERS), y  # no ingress chain: id mod workers
    assert [(p["id"], p["name"]) for p in sluice.ok("ports")["ports"]] == [(0, "a"), (1, "b"), (2, "x"), (9, "y")]
    assert sluice.ok("status")["port_count"] == 4

    # an NF attached now sees the new port by name (the info page) and sends to it by id
    sluice.start_nf("fwd", "f", wakeup="block", extra=["--out", "y"])
    sluice.ok("port_chain_set", port="a", chain="cc")
    wait_until(lambda: sluice.port("y")["tx_pkts"] > 1000, 10, "fwd --out y sending to the added port")
    sluice.ok("port_chain_set", port="a", chain=None)
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 10, "chain cc drained")
    assert sluice.port("b")["tx_pkts"] == 0
    # flows an NF pinned to y (fwd --pin --out y: later packets of each flow go to y past the NF)
    # keep y: refused; they came in on pin_in, and deleting pin_in takes them along
    pin_pcap = workdir / "pin.pcap"
    write_pcap(pin_pcap, udp_frames(50, "10.8.0.1", "10.8.0.2", b"pinned", sport=lambda i: 3000 + i % 5, dport=80))
    sluice.ok("chain_set", name="pc", nfs=["fp"], exit=None)
    sluice.start_nf("fwd", "fp", wakeup="block", extra=["--pin", "--out", "y"])
    y_tx = sluice.port("y")["tx_pkts"]
    sluice.ok("port_add", name="pin_in", vdev=f"net_pcap0,rx_pcap={pin_pcap}", chain="pc")
    wait_until(lambda: sluice.port("y")["tx_pkts"] == y_tx + 50, 10, "the pinned flows' packets out of y")
    assert sluice.ok("flows")["flows"]["pinned"] == 5
    before = deployment(sluice)
    r = sluice.request("port_del", name="y")
    assert r["ok"] is False and r["error"].startswith("port_del: port 'y' is where 5 flows NFs pinned send"), r
    assert deployment(sluice) == before and sluice.ok("flows")["flows"]["pinned"] == 5
    sluice.ok("port_del", name="pin_in")
    flows = sluice.ok("flows")["flows"]
    assert flows["pinned"] == 0 and flows["entries"] == 0, flows
    assert "control: port pin_in deleted (port id 3; 50 packets received, 0 sent; 5 flows from it removed" \
        in sluice.log(), sluice.log()
    whole(sluice, "deleting pin_in")

    # y deleted while f sends every packet to it (with two workers from the other worker: handoffs to
    # a dying port); f keeps its copy of the names and its packets for y's id drop as no_path
    sluice.ok("port_chain_set", port="a", chain="cc")
    y_tx = sluice.port("y")["tx_pkts"]
    wait_until(lambda: sluice.port("y")["tx_pkts"] > y_tx + 1000, 10, "f sending to y again")
    assert sluice.stats()["drops"]["no_path"] == 0
    sluice.ok("port_del", name="y")
    whole(sluice, "deleting y under traffic to it")
    wait_until(lambda: sluice.stats()["drops"]["no_path"] > 1000, 10, "packets for y's id dropping as no_path")
    sluice.ok("port_chain_set", port="a", chain=None)
    wait_until(lambda: sluice.stats()["pool"]["lent"] == 0, 10, "chain cc drained")
    st = sluice.stats()
    assert st["drops"]["invalid_desc"] == 0 and sluice.nf("f", st)["drops"]["invalid_desc"] == 0, st["drops"]
    # an NF attached now does not know y (its id stays, unnamed: 3..9 print as empty names)
    sluice.start_nf("fwd", "g", wakeup="block", extra=["--out", "y"], wait=False)
    assert sluice.nfs["g"].wait(20) == 1
    assert re.search(r"--out 'y': sluiced has no such port \(ports: a b x {7}\)", sluice.nf_log("g")), \
        sluice.nf_log("g")

    # the CLI: add, list (the API's response unchanged with --json), del
    sd = ["--socket-dir", sluice.sock_dir]
    r = run_sluice("port", "add", "z", "net_null4", "--chain", "cc", *sd)
    assert r.returncode == 0 and "added port z: id 3, net_null4, ingress chain cc" in r.stdout, r.stdout + r.stderr
    assert sluice.port("z")["worker"] == 0  # its ingress chain's (chain 0)
    r = run_sluice("port", "list", *sd)
    assert r.returncode == 0 and re.search(r"\b3\s+z\s+net_null4\s+cc\b", r.stdout), r.stdout + r.stderr
    r = run_sluice("port", "list", "--json", *sd)
    assert r.returncode == 0 and json.loads(r.stdout)["ports"][3]["name"] == "z", r.stdout + r.stderr
    r = run_sluice("port", "del", "b", *sd)
    assert r.returncode == 1 and "port 'b' is the exit of chain 'cc'" in r.stderr, r.stdout + r.stderr
    r = run_sluice("port", "del", "z", *sd)
    assert r.returncode == 0 and "deleted port z" in r.stdout, r.stdout + r.stderr
    assert [p["name"] for p in sluice.ok("ports")["ports"]] == ["a", "b", "x"]
    assert sluice.stop_nf("f") == 0 and sluice.stop_nf("fp") == 0
    sluice.wait_pool_whole()
    assert sluice.stop() == 0, sluice.log()
