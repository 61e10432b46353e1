"""Live capture (`sluice capture`, src/manager/capture.c, docs/observability.md "Capture").

Judged by tshark reading the pcapng files: every packet that crossed a point is there, byte for byte
and in order, with the point as its interface; a filter selects exactly what it says; a reader that
stops loses its own copies and nothing else."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import (base_config, read_pcap, sluice, udp_frames, wait_until, workdir,  # noqa: F401
                     write_pcap)

PY_ENV = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))


def frames_of(n, payload_len=lambda i: 20 + i % 200):
    return [f for i in range(n) for f in udp_frames(1, "10.9.0.1", "10.9.0.2", b"x" * payload_len(i),
                                                    lambda _, i=i: 1000 + i % 7, 53, ip_id=lambda _, i=i: i)]


def deploy(sluice, workdir, frames, pipes=False):  # noqa: F811
    """in.pcap -> a (fwd) -> b (count) -> out; the port is joined to the chain by go()."""
    write_pcap(workdir / "in.pcap", frames)
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={workdir / 'in.pcap'}"},
                             {"name": "out", "vdev": f"net_pcap1,tx_pcap={workdir / 'out.pcap'}"}],
                      chains=[{"name": "c", "nfs": ["a", "b"], "exit": "out"}], nfs=["a", "b"], ring_size=2048,
                      **({"pipes": True} if pipes else {}))
    sluice.start(cfg)
    sluice.start_nf("fwd", "a")
    sluice.start_nf("count", "b")
    return cfg


def go(sluice, n):  # noqa: F811
    sluice.ok("port_chain_set", port="in", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= n and sluice.stats()["pool"]["lent"] == 0, 30,
               f"{n} frames through")


READERS = []  # every `sluice capture` a test starts: killed after it, whatever happened


@pytest.fixture(autouse=True)
def no_reader_left():
    yield
    while READERS:
        p = READERS.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


def start_capture(sluice, out, *args):  # noqa: F811
    before = {c["id"] for c in sluice.request("captures")["captures"]}
    p = subprocess.Popen([sys.executable, "-m", "sluice", "capture", "--socket-dir", str(sluice.sock_dir), "-w",
                          str(out), *args], env=PY_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    READERS.append(p)

    def started():
        if p.poll() is not None:
            raise AssertionError(f"sluice capture exited {p.returncode}: {p.stderr.read()}")
        new = [c for c in sluice.request("captures")["captures"] if c["id"] not in before]
        return new[0] if new else None
    return p, wait_until(started, 10, "the capture to start")


def end_capture(p):
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    return err


def tshark(path, *fields):
    r = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-E", "separator=|", *sum((["-e", f] for f in fields), [])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line.split("|") for line in r.stdout.splitlines()]


def tshark_frames(path, tmp, display_filter=None):
    """The packets' bytes, in file order (tshark rewrites the pcapng as pcap for the harness's reader)."""
    flat = tmp / (Path(path).stem + ".pcap")
    argv = ["tshark", "-r", str(path), "-F", "pcap", "-w", str(flat)]
    if display_filter:
        argv[3:3] = ["-Y", display_filter]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return read_pcap(flat)


def test_port_and_nf_hop_captures_hold_exactly_what_crossed_and_a_filter_selects(sluice, workdir):  # noqa: F811
    n = 400
    frames = frames_of(n)
    deploy(sluice, workdir, frames)
    caps = [start_capture(sluice, workdir / "port.pcapng", "--port", "in", "--port", "out"),
            start_capture(sluice, workdir / "hop.pcapng", "--nf", "b", "--hop", "in"),
            start_capture(sluice, workdir / "out.pcapng", "--nf", "a", "--hop", "out"),
            start_capture(sluice, workdir / "filtered.pcapng", "--nf", "b", "--hop", "in", "-f",
                          "udp src port 1003 and len > 100")]
    assert [len(c["points"]) for _, c in caps] == [4, 1, 1, 1]
    go(sluice, n)
    wait_until(lambda: all(c["packets"] >= want for c, want in
                           zip(sluice.request("captures")["captures"], (2 * n, n, n, 1))), 10, "the copies")
    st = sluice.stats()
    for p, _ in caps:
        end_capture(p)
    assert sluice.request("captures")["captures"] == []
    assert not list((sluice.sock_dir).glob("capture-*.ring")), "a ring file outlived its capture"
    total = sum(map(len, frames))
    # the port: rx of `in` and tx of `out`, each its own interface, every frame byte for byte, in order
    rows = tshark(workdir / "port.pcapng", "frame.interface_name", "frame.len", "frame.packet_flags_direction")
    by_if = {}
    for name, length, direction in rows:
        by_if.setdefault(name, []).append((int(length), direction))
    assert sorted(by_if) == ["in:rx", "out:tx"]
    assert len(by_if["in:rx"]) == st["ports"][0]["rx_pkts"] == n
    assert sum(x for x, _ in by_if["in:rx"]) == total == st["ports"][0]["rx_bytes"]
    assert {d for _, d in by_if["in:rx"]} == {"0x00000001"} and {d for _, d in by_if["out:tx"]} == {"0x00000002"}
    assert sum(x for x, _ in by_if["out:tx"]) == st["ports"][1]["tx_bytes"]
    assert tshark_frames(workdir / "port.pcapng", workdir, 'frame.interface_name == "in:rx"') == frames
    assert tshark_frames(workdir / "port.pcapng", workdir, 'frame.interface_name == "out:tx"') == read_pcap(workdir / "out.pcap")
    # b's way in: what b was given, as stats counts it
    b = sluice.nf("b", st)
    hop = tshark_frames(workdir / "hop.pcapng", workdir)
    assert len(hop) == b["rx_pkts"] == n and sum(map(len, hop)) == b["rx_bytes"]
    assert hop == frames  # fwd passes them unchanged
    # a's way out: each with fwd's action as its comment
    rows = tshark(workdir / "out.pcapng", "frame.comment", "frame.interface_name")
    assert len(rows) == sluice.nf("a", st)["tx_pkts"] == n and {tuple(r) for r in rows} == {("next", "a:out")}
    # the filter: exactly the frames it names
    want = [f for i, f in enumerate(frames) if 1000 + i % 7 == 1003 and len(f) > 100]
    assert 0 < len(want) < n
    assert tshark_frames(workdir / "filtered.pcapng", workdir) == want
    sluice.wait_pool_whole()


def test_a_stopped_reader_loses_its_copies_and_nothing_else(sluice, workdir):  # noqa: F811
    n = 1500  # < the NFs' rings (2048): a slow NF under load drops nothing either
    frames = frames_of(n, lambda i: 1000)
    deploy(sluice, workdir, frames)
    p, cap = start_capture(sluice, workdir / "stalled.pcapng", "--port", "in", "--hop", "in", "--buffer", "64")
    try:
        p.send_signal(signal.SIGSTOP)
        go(sluice, n)  # the whole pcap through, the reader asleep
        st = sluice.stats()
        assert sluice.port("out", st)["tx_pkts"] == n and st["drops"]["ring_full"] == 0
        c = sluice.request("captures")["captures"][0]
        assert c["lost"] > 0 and c["packets"] + c["lost"] == n, c
        assert c["packets"] * 1000 < 64 * 1024  # what fits the ring, and no more
    finally:
        p.send_signal(signal.SIGCONT)
    err = end_capture(p)
    assert f"lost {c['lost']}" in err, err
    assert len(tshark(workdir / "stalled.pcapng", "frame.len")) == c["packets"]
    assert read_pcap(workdir / "out.pcap") == frames
    sluice.wait_pool_whole()


def test_a_captured_hop_closes_its_pipe_and_the_pipe_reopens_after(sluice, workdir):  # noqa: F811
    n = 300
    frames = frames_of(n)
    deploy(sluice, workdir, frames, pipes=True)
    wait_until(lambda: sluice.stats()["pipes"]["open"] == 1, 10, "the pipe a -> b to open")
    opened = sluice.stats()["pipes"]["opened"]
    p, _ = start_capture(sluice, workdir / "piped.pcapng", "--nf", "b", "--hop", "in")
    assert sluice.stats()["pipes"]["open"] == 0  # closed before the capture answered
    go(sluice, n)
    end_capture(p)
    assert tshark_frames(workdir / "piped.pcapng", workdir) == frames
    wait_until(lambda: sluice.stats()["pipes"]["opened"] > opened and sluice.stats()["pipes"]["open"] == 1, 10,
               "the pipe to reopen")
    assert read_pcap(workdir / "out.pcap") == frames


def run_cli(sluice, *args):  # noqa: F811
    return subprocess.run([sys.executable, "-m", "sluice", "capture", "--socket-dir", str(sluice.sock_dir), *args],
                          env=PY_ENV, capture_output=True, text=True, timeout=30)


ERRORS = [
    (["--port", "nope", "-w", "x"], 1, "points[0].port: no port named 'nope'"),
    (["--nf", "zz", "-w", "x"], 1, "points[0].nf: no attached NF or service with NFs named 'zz'"),
    (["--port", "in", "-f", "udp port", "-w", "x"], 1, "filter 'udp port': can't parse filter expression: syntax error"),
    (["--port", "in", "--buffer", "1", "-w", "x"], 1, "field 'buffer_kib': an integer 64..1048576"),
    (["--port", "in", "-w", "/nonexistent/x"], 2, "-w /nonexistent/x: No such file or directory"),
    (["-w", "x"], 2, "name a capture point"),
    (["--port", "in"], 2, "-w FILE is required"),
]


def test_errors_name_the_problem_and_leave_nothing(sluice, workdir):  # noqa: F811
    deploy(sluice, workdir, frames_of(1))
    for args, code, fragment in ERRORS:
        r = run_cli(sluice, *[str(workdir / a) if a == "x" else a for a in args])
        assert r.returncode == code and fragment in r.stderr, (args, r.stderr)
        assert sluice.request("captures")["captures"] == []
        assert not (workdir / "x").exists()  # no empty file for a capture that never started


def test_a_killed_reader_ends_its_capture(sluice, workdir):  # noqa: F811
    cfg = deploy(sluice, workdir, frames_of(50))
    p, cap = start_capture(sluice, workdir / "k.pcapng", "--port", "in")
    ring = Path(cap and next(sluice.sock_dir.glob("capture-*.ring")))
    p.kill()
    p.wait()
    wait_until(lambda: sluice.request("captures")["captures"] == [], 10, "the capture to end with its reader")
    assert not ring.exists()
    go(sluice, 50)  # traffic as before, no tap left behind
    r = run_cli(sluice, "--list", "--json")
    assert r.returncode == 0 and '"captures": []' in r.stdout
    # and the other way round: sluiced gone, the reader ends, and says why
    p, _ = start_capture(sluice, workdir / "k2.pcapng", "--port", "out")
    sluice.proc.kill()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 1 and "(sluiced closed the control connection)" in err, err
    # the killed sluiced's ring file is swept by the next one
    assert len(list(sluice.sock_dir.glob("capture-*.ring"))) == 1
    sluice.proc.wait()
    sluice.start(cfg)
    assert not list(sluice.sock_dir.glob("capture-*.ring"))
    assert "removed 1 ring file(s) a killed sluiced left" in sluice.log()


def test_a_drain_cut_short_reads_no_record_twice(tmp_path):
    """An exception part-way through a drain (a signal, a closed pipe) leaves the records emitted before
    it read: the next drain -- `sluice capture` drains once more after capture_stop -- goes on after
    them. (It used to start the ring over, so a capture ended by Ctrl-C under load wrote up to a
    ring's worth of packets twice.) No sluiced: a ring file made by hand."""
    import mmap
    import struct

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from sluice.capture.ring import HDR, HDR_SIZE, MAGIC, REC, VERSION, CaptureRing

    size, n = 4096, 10
    path = tmp_path / "hand.ring"
    path.write_bytes(b"\0" * (HDR_SIZE + size))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        HDR.pack_into(mm, 0, MAGIC, VERSION, 1, size, 64, 1, 0)
        for i in range(n):  # record i: 8 packet bytes, ts_ns = i
            REC.pack_into(mm, HDR_SIZE + 32 * i, 32, 8, i, 8, 0, 0, 0)
        struct.pack_into("<5Q", mm, 64, 32 * n, n, 8 * n, 0, 0)  # head, packets, bytes, lost, lost_bytes
    ring = CaptureRing(str(path))
    got = []

    def emit_then_stop(ts, *_):
        if len(got) == 4:
            raise KeyboardInterrupt  # as a signal would, before the fifth is written
        got.append(ts)
    try:
        ring.drain(emit_then_stop)
    except KeyboardInterrupt:
        pass
    ring.drain(lambda ts, *_: got.append(ts))
    ring.close()
    assert got == list(range(n))
