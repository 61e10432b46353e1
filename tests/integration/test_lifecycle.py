"""sluiced stops cleanly: on SIGTERM/SIGINT and on a shutdown request, NFs are told, sockets are removed."""

import signal
import socket
import struct

import pytest

from harness import Sluice, base_config, sluice, wait_until, workdir  # noqa: F401


def cfg():
    return base_config(
        ports=[{"name": "src", "vdev": "net_null0,size=64,copy=0", "chain": "c"},
               {"name": "sink", "vdev": "net_null1"}],
        chains=[{"name": "c", "nfs": ["f"], "exit": "sink"}], nfs=["f"])


def check_clean_exit(s, rc):
    assert rc == 0, f"sluiced exit status {rc} (negative = killed by that signal):\n{s.log()[-2000:]}"
    assert "sluiced: stopped" in s.log()
    assert "not back in the pool" not in s.log()
    assert not s.nf_sock.exists() and not s.ctl_sock.exists(), "socket files left behind"
    # the NF was told (DISCONNECT SHUTDOWN) and exits 0 by itself
    assert s.nfs["f"].wait(10) == 0, s.nf_log("f")
    assert "shutdown" in s.nf_log("f")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(sluice, sig):  # noqa: F811
    sluice.start(cfg())
    sluice.start_nf("fwd", "f")
    wait_until(lambda: sluice.port("sink")["tx_pkts"] > 0, 10, "traffic")
    sluice._ctl.close()
    sluice._ctl = None
    sluice.proc.send_signal(sig)
    check_clean_exit(sluice, sluice.proc.wait(20))


def test_shutdown_request_stops_cleanly(sluice):  # noqa: F811
    sluice.start(cfg())
    sluice.start_nf("fwd", "f")
    wait_until(lambda: sluice.port("sink")["tx_pkts"] > 0, 10, "traffic")
    check_clean_exit(sluice, sluice.stop())


def test_shutdown_request_from_client_that_does_not_read(sluice):  # noqa: F811
    sluice.start(cfg())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sluice.ctl_sock))
    s.sendall(b'{"cmd":"shutdown"}\n')
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    try:
        rc = sluice.proc.wait(5)
    except Exception:
        raise AssertionError("sluiced ignored the shutdown request") from None
    assert rc == 0
