"""The packet tracer (`sluice trace`, src/manager/trace.c, tracetap.c; docs/observability.md "Trace").

A pcap of DNS queries enters through a steering rule into a chain of two services in two trust domains,
the first with two replicas: every traced packet must show, in order, its RX, the rule that matched, the
replica picked and why, the first NF and its action, the copy into the other domain, the second NF and
its action, and its TX -- and the packets the filter leaves out must not be traced."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import base_config, sluice, udp_frames, wait_until, workdir, write_pcap  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from sluice.commands.trace import summary  # noqa: E402

PY_ENV = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))
RULES = [{"name": "dns", "priority": 10, "match": {"in_port": "in", "proto": 17, "dst_port": [53, 53]},
          "action": {"chain": "c"}}]


def cli(sluice, *args, **kw):  # noqa: F811
    return subprocess.Popen([sys.executable, "-m", "sluice", "trace", "--socket-dir", str(sluice.sock_dir), *args],
                            env=PY_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_a_trace_shows_rule_replica_copy_and_both_nfs_in_order(sluice, workdir):  # noqa: F811
    frames = (udp_frames(20, "10.7.0.1", "10.7.0.2", b"q" * 40, lambda i: 2000 + i, 53)
              + udp_frames(20, "10.7.0.1", "10.7.0.2", b"n" * 40, lambda i: 3000 + i, 123))
    frames = [f for pair in zip(frames[20:], frames[:20]) for f in pair]  # NTP first, then DNS, alternating
    write_pcap(workdir / "in.pcap", frames)
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={workdir / 'in.pcap'}"},
                             {"name": "out", "vdev": f"net_pcap1,tx_pcap={workdir / 'out.pcap'}"}],
                      chains=[{"name": "c", "nfs": ["fw", "mon"], "exit": "out"}])
    cfg["nfs"] = [{"name": "fw"}, {"name": "mon", "domain": "jail"}]
    cfg["domains"] = [{"name": "jail", "pool_mbufs": 4096}]
    sluice.start(cfg)
    sluice.start_nf("fwd", "fw1", service="fw")
    sluice.start_nf("fwd", "fw2", service="fw")
    sluice.start_nf("count", "mon")
    p = cli(sluice, "--port", "in", "-f", "udp dst port 53", "-c", "3", "--json")
    try:
        wait_until(lambda: sluice.request("trace_get")["armed"], 10, "the trace to be armed")
        rules = sluice.ok("rules_set", rules=RULES)["rules"]  # the port is polled from now on
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    trace = json.loads(out)["trace"]
    assert trace["marked"] == 3 and trace["filter"] == "udp dst port 53"
    rule_id = rules[0]["id"]
    for pkt in trace["packets"]:
        assert pkt["done"], pkt
        # hand-offs between workers come in between where the next NF or port is another worker's
        # (two workers): each names the worker the next step runs on
        steps = pkt["steps"]
        for i, s in enumerate(steps):
            if s["step"] == "handoff":
                assert steps[i + 1]["worker"] == int(s["text"].split()[2]) != s["worker"], steps
        steps = [s for s in steps if s["step"] != "handoff"]
        assert [s["step"] for s in steps] == ["rx", "steer", "replica", "to_nf", "nf", "replica", "copy", "to_nf",
                                              "nf", "tx"], steps
        rx, steer, rep1, to1, nf1, rep2, copy, to2, nf2, tx = steps
        assert rx["port"] == "in" and tx["port"] == "out"
        assert steer["rule"] == rule_id and "chain c" in steer["text"]
        assert rep1["service"] == "fw" and rep1["nf"] in ("fw1", "fw2") and rep1["why"] in ("flow hash", "a replica on this worker")
        assert to1["nf"] == nf1["nf"] == rep1["nf"] and nf1["action"] == "next"
        assert rep2["service"] == "mon" and rep2["why"] == "only replica"
        assert copy["text"] == "domain default -> jail"
        assert to2["nf"] == nf2["nf"] == "mon" and nf2["action"] == "next"
        assert [s["t_ns"] for s in steps] == sorted(s["t_ns"] for s in steps)
        assert ":53 udp" in summary(pkt["head"], pkt["len"])
    # the NTP packets between them were not marked: three DNS queries, the first three
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 20, 10, "the DNS queries through")
    # the last trace is kept (the web view shows it), and the text form reads it
    r = subprocess.run([sys.executable, "-m", "sluice", "trace", "--socket-dir", str(sluice.sock_dir), "--last"],
                       env=PY_ENV, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.count("Packet ") == 3 and "domain default -> jail" in r.stdout, r.stdout
    sluice.wait_pool_whole()


def test_trace_errors_and_a_trace_ending_with_its_connection(sluice, workdir):  # noqa: F811
    cfg = base_config(ports=[{"name": "in", "vdev": "net_null0,size=64,copy=0"}, {"name": "out", "vdev": "net_null1"}])
    sluice.start(cfg)
    for args, fragment in ((["--port", "nope"], "field 'port': no port named 'nope'"),
                           (["-f", "udp port"], "filter 'udp port': can't parse filter expression"),
                           (["-c", "65"], "-c: 1..64 packets")):
        p = cli(sluice, *args)
        _, err = p.communicate(timeout=30)
        assert p.returncode != 0 and fragment in err, err
    # nothing arrives (no port is polled): the wait ends, and says so
    p = cli(sluice, "--wait", "0.5")
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "0 of 1 packets seen" in err and "no packet matched" in out, (out, err)
    assert sluice.request("trace_get")["armed"] is False
    # a killed tracer disarms it
    p = cli(sluice, "--wait", "60")
    wait_until(lambda: sluice.request("trace_get")["armed"], 10, "the trace to be armed")
    p.kill()
    p.wait()
    wait_until(lambda: not sluice.request("trace_get")["armed"], 10, "the trace to end with its connection")


@pytest.mark.parametrize("form", ["processes", "group"])
def test_a_trace_follows_a_pipe_and_a_fused_segment(sluice, workdir, form):  # noqa: F811
    """Pipes stay open while a trace is armed: a hop over a pipe is the step where the worker accounts
    for it, a fused segment (two members of one group) the step where its last member's return is
    adopted."""
    write_pcap(workdir / "in.pcap", udp_frames(10, "10.7.0.1", "10.7.0.2", b"p" * 40, lambda i: 4000 + i, 9))
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={workdir / 'in.pcap'}"},
                             {"name": "out", "vdev": f"net_pcap1,tx_pcap={workdir / 'out.pcap'}"}],
                      chains=[{"name": "c", "nfs": ["a", "b"], "exit": "out"}], nfs=["a", "b"], pipes=True,
                      ring_size=2048)
    sluice.start(cfg)
    if form == "group":
        sluice.start_group("g", [("fwd", "a", None, []), ("count", "b", None, [])])
    else:
        sluice.start_nf("fwd", "a")
        sluice.start_nf("count", "b")
    wait_until(lambda: sluice.stats()["pipes"]["open"] == 1, 10, "the pipe a -> b to open")
    p = cli(sluice, "--port", "in", "-c", "3", "--json")
    try:
        wait_until(lambda: sluice.request("trace_get")["armed"], 10, "the trace to be armed")
        sluice.ok("port_chain_set", port="in", chain="c")
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert sluice.stats()["pipes"]["open"] == 1  # the trace did not close it
    # a group's members may pass packets over their pipe ring until fusion starts; processes never fuse
    hops = {"processes": {"pipe"}, "group": {"pipe", "fused"}}[form]
    for pkt in json.loads(out)["trace"]["packets"]:
        steps = [s for s in pkt["steps"] if s["step"] != "handoff"]
        assert [s["step"] for s in steps][:3] == ["rx", "replica", "to_nf"] and steps[2]["nf"] == "a", steps
        assert steps[3]["step"] in hops and (steps[3]["from"], steps[3]["to"]) == ("a", "b"), steps
        assert [(s["step"], s.get("nf"), s.get("action")) for s in steps[4:]] == [("nf", "b", "next"), ("tx", None, None)]
