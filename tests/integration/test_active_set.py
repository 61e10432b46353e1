"""The worker's active set (datapath.c "Active set", docs/architecture.md): idle NFs cost nothing.

- Many attached but idle block-mode NFs: the worker's busy/parked lists stay empty, and the idle NFs
  use no CPU at all (their CPU tick counters do not move).
- Adaptive coalescing (datapath.c flush_nf): packets for a sleeper that was given nothing for its
  timeout are kicked at once (low load: they would only wait out the deadline alone); while packets
  keep coming (a delivery within the timeout of the previous one) they wait for the batch or the
  deadline.
- A sleeper holding packets below its batch threshold is parked (not visited every loop) and
  kicked at its deadline; an NF woken by a signal publishes its returns and rings its doorbell,
  so a parked NF's packets are never stuck until the deadline.
"""

import os
import signal
import time

from harness import base_config, sluice, udp_frames, wait_until, workdir, write_pcap  # noqa: F401


def frames(n, dport=7):
    return udp_frames(n, "10.5.0.1", "10.5.0.2", b"z" * 30, sport=lambda i: 1000 + i, dport=dport)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_idle_nfs_are_not_visited_and_use_no_cpu(sluice, workdir):  # noqa: F811
    n_idle = 60
    inp = workdir / "in.pcap"
    write_pcap(inp, frames(2000))
    names = [f"idle{i}" for i in range(n_idle)]
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "out", "vdev": "net_null0"}],
                      chains=[{"name": "c", "nfs": ["f"], "exit": "out"}], nfs=["f"] + names, max_nfs=128)
    sluice.start(cfg)
    for nm in names:
        sluice.start_nf("fwd", nm, wakeup="block", wait=False)
    sluice.wait_attached(*names, timeout=60)
    sluice.start_nf("fwd", "f", wakeup="block", batch=8, timeout_us=500)

    def settled():  # an NF may still be finishing its start-up just after it attached
        a = {nm: cpu_ticks(sluice.nfs[nm].pid) for nm in names}
        time.sleep(0.5)
        b = {nm: cpu_ticks(sluice.nfs[nm].pid) for nm in names}
        return a == b and b
    before = wait_until(settled, 30, "the idle NFs' CPU counters to stop moving")
    sluice.ok("port_chain_set", port="in", chain="c")
    # the pcap arrives at once: what f's 1024-slot ring cannot take drops as ring_full
    def done():
        st = sluice.stats()
        return (sluice.port("out", st)["tx_pkts"] + st["drops"]["ring_full"] == 2000
                and st["pool"]["lent"] == 0 and st)
    st = wait_until(done, 30, "2000 packets out or counted")
    assert sluice.port("out", st)["tx_pkts"] >= 1024
    assert st["active_set"]["busy"] == 0 and st["active_set"]["parked"] == 0, st["active_set"]
    assert all(sluice.nf(nm, st)["rx_pkts"] == 0 for nm in names)
    after = {nm: cpu_ticks(sluice.nfs[nm].pid) for nm in names}
    moved = {nm: after[nm] - before[nm] for nm in names if after[nm] != before[nm]}
    assert not moved, f"idle NFs used CPU while traffic flowed past them: {moved}"


def two_bursts_config(workdir, nf):
    """Ports in1 and in2 each replay 5 frames into chain c = [nf] (switched on one after the other)."""
    ports = []
    for k in (1, 2):
        write_pcap(workdir / f"in{k}.pcap", frames(5))
        ports.append({"name": f"in{k}", "vdev": f"net_pcap{k - 1},rx_pcap={workdir / f'in{k}.pcap'}"})
    return base_config(ports=[*ports, {"name": "out", "vdev": "net_null0"}],
                       chains=[{"name": "c", "nfs": [nf], "exit": "out"}], nfs=[nf])


def test_lone_packets_are_kicked_at_once(sluice, workdir):  # noqa: F811
    """Low load: batch 32, deadline 10 s (the longest allowed). 5 packets reach the sleeping NF after
    it got nothing for longer than its timeout: one kick at once, not a wait for the batch or the
    deadline -- they are out long before the 10 s could have passed."""
    inp = workdir / "in.pcap"
    write_pcap(inp, frames(5))
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={inp}"},
                             {"name": "out", "vdev": "net_null0"}],
                      chains=[{"name": "c", "nfs": ["f"], "exit": "out"}], nfs=["f"])
    sluice.start(cfg)
    sluice.start_nf("fwd", "f", wakeup="block", batch=32, timeout_us=10_000_000)
    sluice.ok("port_chain_set", port="in", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 5, 5, "5 packets out, kicked at once (deadline: 10 s)")
    st = sluice.stats()
    assert sluice.nf("f", st)["kicks"] == 1
    assert st["active_set"]["parked"] == 0 and st["active_set"]["waiting"] == 0, st["active_set"]
    assert st["pool"]["lent"] == 0


def test_parked_sleeper_is_kicked_at_its_deadline(sluice, workdir):  # noqa: F811
    """Under load: the first 5 packets are kicked at once; 5 more within the timeout (3 s) of them
    are coalesced: batch 32 not reached, the NF sleeps holding them (parked, waiting), the deadline
    kick wakes it, everything comes out, and the NF leaves the active set."""
    sluice.start(two_bursts_config(workdir, "f"))
    sluice.start_nf("fwd", "f", wakeup="block", batch=32, timeout_us=3_000_000)
    sluice.ok("port_chain_set", port="in1", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 5, 2, "the first 5 packets out, kicked at once")
    sluice.ok("port_chain_set", port="in2", chain="c")
    st = wait_until(lambda: (lambda st: st["active_set"]["parked"] == 1 and st)(sluice.stats()), 2,
                    "the NF parked with 5 more packets, coalesced")
    assert sluice.nf("f", st)["kicks"] == 1 and sluice.port("out", st)["tx_pkts"] == 5
    assert st["active_set"]["waiting"] == 1, st["active_set"]
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 10, 20, "10 packets out after the deadline kick")
    st = sluice.stats()
    assert sluice.nf("f", st)["kicks"] == 2
    assert st["active_set"] == {"busy": 0, "parked": 0, "waiting": 0, "doorbells": st["active_set"]["doorbells"]}
    assert st["pool"]["lent"] == 0


def test_parked_nf_woken_by_a_signal_rings_its_doorbell(sluice, workdir):  # noqa: F811
    """Deadline 10 s (the longest allowed): 5 packets (kicked at once), then 5 more, coalesced; the
    count NF, parked holding them, is woken by SIGUSR1 and processes them at once; sluiced learns of
    the returns through the doorbell, not the deadline."""
    dump = workdir / "count.json"
    sluice.start(two_bursts_config(workdir, "k"))
    sluice.start_nf("count", "k", wakeup="block", batch=32, timeout_us=10_000_000, extra=["--dump", dump])
    sluice.ok("port_chain_set", port="in1", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 5, 8, "the first 5 packets out, kicked at once")
    sluice.ok("port_chain_set", port="in2", chain="c")
    wait_until(lambda: sluice.stats()["active_set"]["parked"] == 1, 8, "the NF parked with 5 more packets")
    st = sluice.stats()
    assert sluice.nf("k", st)["kicks"] == 1 and sluice.port("out", st)["tx_pkts"] == 5
    os.kill(sluice.nfs["k"].pid, signal.SIGUSR1)
    wait_until(lambda: sluice.port("out")["tx_pkts"] == 10, 20, "10 packets out")
    st = sluice.stats()
    assert st["active_set"]["doorbells"] >= 1, st["active_set"]
    assert sluice.nf("k", st)["kicks"] == 1, "came out by the deadline kick, not the doorbell"
    assert st["active_set"]["busy"] == 0 and st["active_set"]["parked"] == 0
