"""sluice-nf-lb (nfs/lb/main.c, docs/nfs/lb.md) with real HTTP clients and servers in namespaces.

  slt-lbc [slt-lbc1 10.80.0.1/16]                 -- slt-lbc0 = port "cli" -> chain c2s [lb] -> exit "srv"
  slt-lbs [slt-lbs1 10.80.1.11..14/16, backends]  -- slt-lbs0 = port "srv" -> chain s2c [lb] -> exit "cli"

The client reaches the VIP 10.80.0.100 through a static neighbour entry pointing at the backend
side's MAC (the LB rewrites IP and ports only, like IPVS NAT mode; Ethernet crosses unchanged); the
backends reach the client the same way. Each backend is an HTTP/1.1 server (keep-alive) that answers
every request with its own name and logs the client address it saw. web2 listens on 8080 (the LB
translates the port too).
"""

import http.client
import json
import signal
import subprocess
import sys

import pytest

import harness
from harness import base_config, net, sh, sluice, wait_until, workdir  # noqa: F401
from rawwire import Wire, in_netns

LB_BIN = harness.BUILD / "nfs" / "sluice-nf-lb"
harness.NF_BINS.setdefault("lb", LB_BIN)  # start_nf("lb", ...); harness.py untouched

CLI_NS, SRV_NS = "slt-lbc", "slt-lbs"
CLI_MAC, SRV_MAC = "02:80:00:00:01:01", "02:80:00:00:02:01"
CLIENT, VIP = "10.80.0.1", "10.80.0.100"
BACKENDS = {"web1": ("10.80.1.11", 80), "web2": ("10.80.1.12", 8080), "web3": ("10.80.1.13", 80),
            "web4": ("10.80.1.14", 80)}


SERVER = r'''
import http.server, json, socketserver, sys, threading
log = open(sys.argv[1], "a")
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive: one connection, many requests
    def do_GET(self):
        body = (self.server.name + "\n").encode()
        with lock:
            log.write(json.dumps({"backend": self.server.name, "peer": self.client_address[0],
                                  "port": self.client_address[1]}) + "\n"); log.flush()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
for spec in sys.argv[2:]:
    name, ip, port = spec.split(":")
    s = S((ip, int(port)), H); s.name = name
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''


def conf_text(states, names=("web1", "web2", "web3")):
    """The config file with backends `names`, those in `states` given that state."""
    out = "vip 10.80.0.100 tcp 80\n"
    for n in names:
        ip, port = BACKENDS[n]
        out += f"backend {n} {ip}" + (f":{port}" if port != 80 else "") + (f" {states[n]}" if n in states else "") + "\n"
    return out


def connect(timeout=10):
    """A keep-alive HTTP connection from the client namespace to the VIP (connected now)."""
    with in_netns(CLI_NS):
        c = http.client.HTTPConnection(VIP, 80, timeout=timeout)
        c.connect()
    return c


def get(conn):
    conn.request("GET", "/")
    r = conn.getresponse()
    assert r.status == 200
    return r.read().decode().strip()


def one_request(timeout=10):
    c = connect(timeout)
    try:
        return get(c)
    finally:
        c.close()


def counters(s):
    nf = s.nf("lb")
    assert nf is not None, f"lb NF not attached:\n{s.nf_log('lb')}"
    log = s.nf_log("lb")  # under the ASan/UBSan build a report fails the test
    assert "Sanitizer" not in log and "runtime error:" not in log, log[-3000:]
    return nf["counters"]


def setup(net, sluice, text=None, backends=("web1", "web2", "web3", "web4")):  # noqa: F811
    net.add_ns(CLI_NS)
    net.add_ns(SRV_NS)
    net.add_veth("slt-lbc0", "slt-lbc1", peer_ns=CLI_NS, mac=CLI_MAC, peer_addr=f"{CLIENT}/16")
    net.add_veth("slt-lbs0", "slt-lbs1", peer_ns=SRV_NS, mac=SRV_MAC)
    for name in backends:
        sh("ip", "addr", "add", f"{BACKENDS[name][0]}/16", "dev", "slt-lbs1", ns=SRV_NS)
    # the LB answers no ARP: each side's neighbour on the other side is a static entry
    sh("ip", "neigh", "replace", VIP, "lladdr", SRV_MAC, "dev", "slt-lbc1", "nud", "permanent", ns=CLI_NS)
    sh("ip", "neigh", "replace", CLIENT, "lladdr", CLI_MAC, "dev", "slt-lbs1", "nud", "permanent", ns=SRV_NS)
    log = sluice.dir / "seen.jsonl"
    log.write_text("")
    (sluice.dir / "server.py").write_text(SERVER)
    out = open(sluice.dir / "server.out", "w+")
    net.popen([sys.executable, sluice.dir / "server.py", log,
               *[f"{n}:{BACKENDS[n][0]}:{BACKENDS[n][1]}" for n in backends]],
              ns=SRV_NS, stdout=out, stderr=subprocess.STDOUT)
    wait_until(lambda: (out.seek(0) or "ready" in out.read()), 20, "backend servers ready")
    sluice.start(base_config(
        ports=[{"name": "cli", "vdev": "net_af_packet0,iface=slt-lbc0", "chain": "c2s"},
               {"name": "srv", "vdev": "net_af_packet1,iface=slt-lbs0", "chain": "s2c"}],
        chains=[{"name": "c2s", "nfs": ["lb"], "exit": "srv"},
                {"name": "s2c", "nfs": ["lb"], "exit": "cli"}],
        pool_mbufs=4096))
    conf = sluice.dir / "lb.conf"
    conf.write_text(text or "# three web servers behind one VIP\n" + conf_text({}))
    sluice.start_nf("lb", "lb", wakeup="block", batch=1, timeout_us=50, extra=["--config", conf],
                    timeout=20)
    return conf, log


def seen(log):
    return [json.loads(l) for l in log.read_text().splitlines() if l.strip()]


# ---------------------------------------------------------------- 1. balance, correct answers


def test_connections_spread_over_backends_and_answered_correctly(net, sluice):  # noqa: F811
    conf, log = setup(net, sluice)
    got = [one_request() for _ in range(60)]  # each a new connection, a new source port
    for _ in range(6):  # curl too
        cp = sh("curl", "-sS", "--max-time", "20", f"http://{VIP}/", ns=CLI_NS, check=False, timeout=30)
        assert cp.returncode == 0, cp.stderr
        got.append(cp.stdout.strip())
    assert set(got) <= {"web1", "web2", "web3"}, got
    per = {b: got.count(b) for b in ("web1", "web2", "web3")}
    assert all(n >= 5 for n in per.values()), per  # P(a backend < 5 of 66) is ~1e-7
    # each answer came from the server it names, and that server saw the real client
    # (NAT mode: the source is kept) on the client port of that connection
    entries = seen(log)
    assert len(entries) == len(got)
    assert {e["peer"] for e in entries} == {CLIENT}
    assert len({e["port"] for e in entries}) == len(got)
    c = counters(sluice)
    for b, n in per.items():
        assert c[f"be.{b}.conns"] == n, (b, n, c)  # exactly one table entry per connection
    assert c["new_conns"] == len(got) and c["malformed"] == 0 and c["no_backend"] == 0, c
    assert c["forwarded"] > 4 * len(got) and c["replies"] > 4 * len(got), c
    assert c["be.web1.pkts"] + c["be.web2.pkts"] + c["be.web3.pkts"] == c["forwarded"] + c["replies"], c
    assert sluice.stats()["drops"]["invalid_desc"] == 0


# ---------------------------------------------------------------- 2. affinity across reloads


def test_affinity_across_reload_disable_and_down(net, sluice):  # noqa: F811
    conf, log = setup(net, sluice)
    lb = sluice.nfs["lb"]
    keep = connect()
    other = None
    try:
        x = get(keep)
        assert x in ("web1", "web2", "web3")
        # reload: the long-lived connection's backend disabled, web4 added
        conf.write_text(conf_text({x: "disabled"}, ("web1", "web2", "web3", "web4")))
        lb.send_signal(signal.SIGHUP)
        for _ in range(5):  # the reload happens at the next batch: this request's
            assert get(keep) == x
        c = counters(sluice)
        assert c["reloads"] == 1 and c["reload_errors"] == 0, c
        assert f"{x}=disabled" in sluice.nf_log("lb") and "web4=up" in sluice.nf_log("lb")
        # new connections avoid the disabled backend, and the new one takes its share
        fresh = [one_request() for _ in range(40)]
        assert x not in fresh, fresh
        assert "web4" in fresh and len(set(fresh)) == 3, fresh
        assert get(keep) == x  # still there
        c = counters(sluice)
        assert c[f"be.{x}.live"] >= 1 and c["be.web4.conns"] == fresh.count("web4"), c

        # a broken file: the error names file, line and field; the configuration stays
        good = conf.read_text()
        conf.write_text(good + "backend web5 10.80.1.15 weight 0\n")
        lb.send_signal(signal.SIGHUP)
        assert get(keep) == x
        wait_until(lambda: counters(sluice)["reload_errors"] == 1, 15, "reload error counted")
        n_lines = len(good.splitlines()) + 1
        assert f"lb.conf:{n_lines}: weight: '0' is not 1..1000" in sluice.nf_log("lb")

        # `down`: the backend's connections are moved at their next packet; the new backend has
        # never heard of this TCP connection and resets it
        conf.write_text(conf_text({x: "down"}, ("web1", "web2", "web3", "web4")))
        lb.send_signal(signal.SIGHUP)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            get(keep)
        c = counters(sluice)
        assert c["reloads"] == 2 and c["rescheduled"] >= 1, c
        assert x not in [one_request() for _ in range(10)]

        # every backend disabled: new connections are dropped and counted; an open one continues
        other = connect()
        y = get(other)
        conf.write_text(conf_text({n: "disabled" for n in BACKENDS}, BACKENDS))
        lb.send_signal(signal.SIGHUP)
        assert get(other) == y
        with pytest.raises(OSError):
            one_request(timeout=2)
        c = counters(sluice)
        assert c["no_backend"] >= 1 and c["reloads"] == 3, c
        assert lb.poll() is None
    finally:
        keep.close()
        if other:
            other.close()


# ---------------------------------------------------------------- 3. malformed frames, errors


def test_malformed_frames_counted_and_lb_survives(net, sluice, workdir):  # noqa: F811
    from scapy.all import IP, TCP, UDP, Ether
    conf, log = setup(net, sluice)
    eth = bytes(Ether(src=CLI_MAC, dst=SRV_MAC, type=0x0800))
    syn = bytes(IP(src=CLIENT, dst=VIP) / TCP(sport=5555, dport=80, flags="S"))
    udp = bytes(IP(src=CLIENT, dst=VIP) / UDP(sport=5555, dport=80))
    frames = [
        eth + syn[:19],                                   # IPv4 header cut
        eth + bytes([0x44]) + syn[1:],                    # IHL 4
        eth + syn[:2] + b"\x00\xff" + syn[4:],            # total length beyond the frame
        eth + syn[:2] + b"\x00\x1e" + syn[4:30],          # TCP header cut (total length 30)
        eth + syn[:32] + bytes([0x40]) + syn[33:],        # TCP data offset 4
        eth + udp[:2] + b"\x00\x1a" + udp[4:26],          # UDP header cut (total 26)
        eth + syn[:22],                                   # 2 bytes of TCP: no ports
    ]
    w = Wire(CLI_NS, "slt-lbc1")
    try:
        for _ in range(3):
            for f in frames:
                w.send(f)
    finally:
        w.close()
    wait_until(lambda: counters(sluice)["malformed"] >= 3 * len(frames), 20, "malformed frames counted")
    c = counters(sluice)
    assert c["malformed"] == 3 * len(frames) and c["new_conns"] == 0, c
    assert sluice.nfs["lb"].poll() is None, "the LB died"
    assert one_request() in ("web1", "web2", "web3")  # still balancing

    # config errors name the file, the line and the field (--check needs no sluiced)
    bad = workdir / "bad.conf"
    for text, msg in (
            ("vip 10.80.0.100 tcp 80\nbackend a 10.0.0.1:99999\n", "bad.conf:2: backend port: '99999' is not 1..65535"),
            ("vip 10.80.0.100 tcpx 80\n", "bad.conf:1: vip protocol: 'tcpx' is not tcp or udp"),
            ("# c\nbackend a 10.0.0.1\n", "bad.conf:2: backend: comes before any vip line"),
            ("vip 10.80.0.100 tcp 80\nbackend a 10.0.0.1 heavy\n", "bad.conf:2: 'heavy': unknown field")):
        bad.write_text(text)
        cp = subprocess.run([str(LB_BIN), "--config", str(bad), "--check"], capture_output=True, text=True,
                            timeout=20)
        assert cp.returncode == 1 and msg in cp.stderr, (text, cp.stderr)
    cp = subprocess.run([str(LB_BIN), "--config", str(conf), "--check"], capture_output=True, text=True, timeout=20)
    assert cp.returncode == 0 and "1 services, 3 backends" in cp.stdout, cp.stdout + cp.stderr
    cp = subprocess.run([str(LB_BIN), "--table-size", "65536", "--config", str(conf)], capture_output=True,
                        text=True, timeout=20)
    assert cp.returncode == 2 and "not a prime" in cp.stderr, cp.stderr
