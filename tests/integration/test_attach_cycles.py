"""200 NF attach/detach cycles under traffic leak no fds, no mbufs and no NF slots."""

import signal
import time

from harness import base_config, sluice, wait_until, workdir  # noqa: F401

CYCLES = 200
PARALLEL = 4  # NFs attaching/detaching at the same time


def test_attach_detach_cycles_under_traffic(sluice):  # noqa: F811
    cfg = base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0", "chain": "c"},
               {"name": "sink", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": ["w"], "exit": "sink"}],
        nfs=["w"], max_nfs=16)
    sluice.start(cfg)
    time.sleep(0.2)
    mbufs = sluice.ok("status")["mbufs"]  # opens the harness's control connection first
    fds_before = sluice.fd_count()

    t0 = time.monotonic()
    done = 0
    delivered_during = 0
    sink_tx = lambda: sluice.port("sink")["tx_pkts"]  # noqa: E731
    while done < CYCLES:
        batch = [f"w{(done + k) % PARALLEL}" for k in range(min(PARALLEL, CYCLES - done))]
        for name in batch:
            sluice.start_nf("fwd", name, service="w", wakeup="block", batch=32, timeout_us=100, wait=False)
        sluice.wait_attached(*batch, timeout=10)
        before = sink_tx()
        for name in batch:
            sluice.nfs[name].send_signal(signal.SIGTERM)
        for name in batch:
            rc = sluice.nfs[name].wait(10)
            # -SIGTERM: the signal came between attach and sl_nf_run (libsluice installs its
            # handler there); sluiced must cope with that as well
            assert rc in (0, -signal.SIGTERM), f"{name} exited {rc}: {sluice.nf_log(name)[-500:]}"
        sluice.wait_gone(*batch, timeout=10)
        delivered_during += sink_tx() - before
        done += len(batch)
        assert time.monotonic() - t0 < 60, f"only {done} cycles in 60 s"
    assert delivered_during > 0, "no packet went through the attached NFs"

    st = sluice.ok("status")
    assert st["nf_count"] == 0
    assert sluice.ok("nfs")["nfs"] == []
    assert sluice.service("w")["instances"] == []
    sluice.ok("port_chain_set", port="src", chain=None)
    pool = wait_until(lambda: (lambda p: p if p["free"] == mbufs and p["lent"] == 0 else None)(
        sluice.stats()["pool"]), 5, "all mbufs back in the pool")
    assert pool["mbufs"] == mbufs
    # same fds as before the cycles (the control connection the harness keeps is one of each set)
    wait_until(lambda: sluice.fd_count() == fds_before, 3,
               f"sluiced fd count back to {fds_before} (now {sluice.fd_count()})")
    assert sluice.ok("status")["ok"] is True
    assert "refused" not in sluice.log()
    assert sluice.stop() == 0
