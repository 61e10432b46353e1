"""sluiced restarts that the NFs survive with their state (issue 35; docs/architecture.md "Restarts").

Two namespaces joined only through `sluice up`: client -> firewall -> nat -> server and back through
nat -> firewall. The firewall drops by default and lets the replies in by its connection tracking;
the NAT rewrites the client's address. Both are state an NF that lost it would show at once: a reply
with no conntrack entry hits the firewall's default drop, a packet with no NAT mapping makes a new one
(snat_new) or is dropped (no_mapping).

While one TCP connection (iperf3) and a ping run, sluiced is SIGKILLed: the supervisor starts a new
one, which replays what was changed at runtime, and the NFs attach again by themselves. The same
TCP connection carries on (iperf3 ends cleanly with bytes after the restart), ping resumes, no new
NAT mapping and no conntrack miss for it, the NF processes are the same, their counters went on,
and the pool audit is whole. Then `sluice restart` does a planned restart of the same deployment.
The test runs with NF-to-NF pipes off and on (firewall -> nat is a pipe edge).
"""

import json
import os
import signal
import subprocess
import time

import pytest

from harness import BUILD, net, sh, sluice_api as api, sluice_cli, wait_until, workdir  # noqa: F401 (fixtures)

NS_C, NS_S = "slt-rs-c", "slt-rs-s"
CLIENT, SERVER, PUBLIC = "10.79.1.2", "10.79.2.2", "10.79.2.1"
GW = "10.79.1.1"
MAC_C, MAC_S = "02:00:00:79:01:02", "02:00:00:79:02:02"
# sluiced is back (NFs attached) about 0.2-0.3 s after a SIGKILL (BENCHMARKS.md, restart): 5 s of the run
# after the kill is room for a restart many times slower than that, and for traffic after it
IPERF_SECS = 8
KILL_AT = 3.0  # seconds into the iperf3 run


def state(socket_dir):
    with open(socket_dir / "state.json") as f:
        return json.load(f)


def nf_view(socket_dir):
    return {n["name"]: n for n in api(socket_dir, "nfs")["nfs"]}


@pytest.fixture
def two_ns(net):
    net.add_ns(NS_C)
    net.add_ns(NS_S)
    net.add_veth("slt-rs-ch", "slt-rs-cp", peer_ns=NS_C, peer_addr=f"{CLIENT}/24", mac=MAC_C)
    net.add_veth("slt-rs-sh", "slt-rs-sp", peer_ns=NS_S, peer_addr=f"{SERVER}/24", mac=MAC_S)
    sh("ip", "route", "add", "default", "via", GW, ns=NS_C)
    sh("ip", "neigh", "replace", GW, "lladdr", MAC_S, "dev", "slt-rs-cp", "nud", "permanent", ns=NS_C)
    sh("ip", "neigh", "replace", PUBLIC, "lladdr", MAC_C, "dev", "slt-rs-sp", "nud", "permanent", ns=NS_S)
    return net


def config(workdir, socket_dir, pipes):
    (workdir / "fw.rules").write_text("default drop\n"
                                      "allow in client proto icmp name ping\n"
                                      "allow in client proto tcp dport 5201 name iperf3\n")
    (workdir / "nat.conf").write_text(f"snat from 10.79.1.0/24 to {PUBLIC}\n")
    text = f"""\
sluiced:
  socket_dir: {socket_dir}
  pool_mbufs: 8192
  pipes: {'true' if pipes else 'false'}
ports:
  - {{name: client, vdev: "net_af_packet0,iface=slt-rs-ch", chain: c2s}}
  - {{name: server, vdev: "net_af_packet1,iface=slt-rs-sh", chain: s2c}}
chains:
  - {{name: c2s, nfs: [firewall, nat], exit: server}}
  - {{name: s2c, nfs: [nat, firewall], exit: client}}
nfs:
  - {{name: firewall, program: firewall, wakeup: adaptive, args: [--config, {workdir / 'fw.rules'}]}}
  - {{name: nat, program: nat, wakeup: adaptive,
      args: [--inside, client, --outside, server, --next, --config, {workdir / 'nat.conf'}]}}
"""
    path = workdir / "restart.yaml"
    path.write_text(text)
    return path


def all_attached(socket_dir, names):
    try:
        return set(names) <= set(nf_view(socket_dir))
    except (AssertionError, ValueError):
        return False


@pytest.mark.parametrize("pipes", [False, True], ids=["rings", "pipes"])
def test_sigkill_of_sluiced_keeps_tcp_connection_nat_and_conntrack(two_ns, workdir, pipes):
    socket_dir = workdir / "s"
    cfg = config(workdir, socket_dir, pipes)
    net = two_ns
    r = sluice_cli(socket_dir, "up", cfg, "-d", "--build-dir", BUILD, check=False)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        names = ["firewall.0", "nat.0"]
        st0 = state(socket_dir)
        nf_pids = {n["name"]: n["pid"] for n in st0["nfs"]}
        old_sluiced = st0["sluiced"]["pid"]
        # a change made at runtime, which the restarted sluiced must keep
        sluice_cli(socket_dir, "rule", "add", "--priority", "7", "proto=udp", "dst_port=9", "--drop")
        rules_before = [{k: v for k, v in x.items() if k not in ("id", "hits")} for x in api(socket_dir, "rules")["rules"]]

        iperf_srv = net.popen(["iperf3", "-s", "-1", "-B", SERVER], ns=NS_S, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        wait_until(lambda: sh("ss", "-ltnH", "sport = :5201", ns=NS_S, check=False).stdout.strip(), 10,
                   "iperf3 server listening")
        ping = net.popen(["ping", "-i", "0.2", "-c", str(int((IPERF_SECS + 2) / 0.2)), "-W", "1", "-D", SERVER],
                         ns=NS_C, stdout=subprocess.PIPE, text=True)
        t_start = time.time()
        client = net.popen(["iperf3", "-c", SERVER, "-t", IPERF_SECS, "-i", "1", "-J", "-b", "20M"], ns=NS_C,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the connection is up and through both NFs before the kill
        wait_until(lambda: nf_view(socket_dir)["nat.0"]["counters"].get("snat_new", 0) >= 2, 10,
                   "NAT mappings for ping and iperf3")
        time.sleep(max(0.0, t_start + KILL_AT - time.time()))
        before = nf_view(socket_dir)
        t_kill = time.time()
        os.kill(old_sluiced, signal.SIGKILL)

        def restarted():
            sd = state(socket_dir)["sluiced"]
            return sd["pid"] != old_sluiced and sd.get("restarts") == 1 and all_attached(socket_dir, names)
        wait_until(restarted, 20, "a new sluiced with both NFs attached again")
        t_back = time.time()

        out, err = client.communicate(timeout=IPERF_SECS + 30)
        ping_out, _ = ping.communicate(timeout=30)
        iperf_srv.wait(10)
        assert client.returncode == 0, f"iperf3 failed (status {client.returncode}): {err}\n{out[-2000:]}"
        res = json.loads(out)
        assert "error" not in res, res["error"]
        # one TCP data connection, and it carried bytes in the seconds after the restart
        assert len(res["start"]["connected"]) == 1, res["start"]["connected"]
        after_restart = [iv["sum"]["bytes"] for iv in res["intervals"]
                         if t_start + iv["sum"]["start"] > t_back + 0.5]
        assert after_restart and sum(after_restart) > 0, (t_back - t_start, [iv["sum"] for iv in res["intervals"]])
        assert res["end"]["sum_received"]["bytes"] > 0

        # ping resumed: replies stamped after the restart
        stamps = [float(ln.split("]")[0][1:]) for ln in ping_out.splitlines()
                  if ln.startswith("[") and "bytes from" in ln]
        assert any(t > t_back for t in stamps), ping_out[-1500:]
        assert any(t < t_kill for t in stamps), ping_out[-1500:]

        after = nf_view(socket_dir)
        st1 = state(socket_dir)
        # the same NF processes, attached to the new sluiced, with their state and counters
        assert {n["name"]: n["pid"] for n in st1["nfs"]} == nf_pids
        assert {n: after[n]["pid"] for n in names} == nf_pids
        assert all(n["restarts"] == 0 for n in st1["nfs"]), st1["nfs"]
        nat0, nat1 = before["nat.0"]["counters"], after["nat.0"]["counters"]
        fw0, fw1 = before["firewall.0"]["counters"], after["firewall.0"]["counters"]
        assert nat1["snat_new"] == nat0["snat_new"], (nat0, nat1)          # no new mapping for the flows
        assert nat1.get("no_mapping", 0) == nat0.get("no_mapping", 0), (nat0, nat1)
        assert fw1["default"] == fw0["default"], (fw0, fw1)                # no conntrack miss
        assert fw1["established"] > fw0["established"], (fw0, fw1)         # replies went on through conntrack
        assert nat1["translated_out"] > nat0["translated_out"]
        for n in names:
            assert after[n]["counters"]["sdk.reattaches"] == 1, after[n]["counters"]
        log = (socket_dir / "logs" / "nat.0.log").read_text()
        assert "sluiced went away (I/O error)" in log and "attached again to sluiced" in log, log[-2000:]
        sup_log = (socket_dir / "logs" / "supervisor.log").read_text()
        assert f"sluiced (pid {old_sluiced}) killed by SIGKILL" in sup_log
        assert "sluiced restarted" in sup_log

        # the runtime change came back; the pool is whole
        rules_after = [{k: v for k, v in x.items() if k not in ("id", "hits")} for x in api(socket_dir, "rules")["rules"]]
        assert rules_after == rules_before
        assert api(socket_dir, "pool_audit")["whole"]

        # a planned restart of the same deployment: nothing held is lost, the same NFs attach again
        r = sluice_cli(socket_dir, "restart")
        assert "NF(s) attached again" in r.stdout, r.stdout
        st2 = state(socket_dir)
        assert st2["sluiced"]["restarts"] == 2 and {n["name"]: n["pid"] for n in st2["nfs"]} == nf_pids
        wait_until(lambda: all_attached(socket_dir, names), 10, "NFs attached after sluice restart")
        log = (socket_dir / "logs" / "nat.0.log").read_text()
        assert "sluiced is restarting; 0 packets in flight lost" in log, log[-2000:]
        out = sh("ping", "-c", "3", "-i", "0.2", "-W", "2", SERVER, ns=NS_C, check=False).stdout
        assert " 0% packet loss" in out or " 3 received" in out or " 2 received" in out, out
        assert api(socket_dir, "pool_audit")["whole"]
    finally:
        sluice_cli(socket_dir, "down", check=False)
    # under the ASan/UBSan build: no report from the sluiceds (old and new) or the re-attaching NFs
    for log in (socket_dir / "logs").glob("*.log"):
        reports = [ln for ln in log.read_text(errors="replace").splitlines()
                   if "Sanitizer" in ln or "runtime error:" in ln]
        assert not reports, f"{log.name}:\n" + "\n".join(reports[:20])
