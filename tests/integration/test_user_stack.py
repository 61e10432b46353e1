"""The user stack module (issue 39 part 2; docs/sockets.md "The user module"): unmodified programs under
`sluice run --stack user` get sluice-stackd's userspace TCP/IP stack (lwIP), whose frames are Sluice
packets: they cross the operator's NFs both ways and leave by a port.

  slt-us-c [slt-us-p 10.76.0.2/24, fd76::2/64] -- veth -- slt-us-h = port p0 (net_af_packet)
  p0 -> in  = [fw, mon, stack]              stack's frames -> out = [stack, fw, mon] -> p0
  stack: 10.76.0.1/24, fd76::1/64 (sluice-stackd, attached to sluiced as service `stack`)

The client in the namespace is the kernel's (curl, wrk, iperf3, redis-benchmark, ping); the server
is the program under the shim. What the monitor captured (pcapng, read by tshark) shows the exchange;
the firewall's counters show it passed both ways; a firewall rule that drops the port makes a
client's connect time out as behind nftables; SIGKILL of sluice-stackd fails the program's calls
with a clear errno, the supervisor starts it again, it attaches again, and the pool audit is whole.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness import BUILD, REPO, net, sh, sluice_api as api, sluice_cli, wait_until, workdir  # noqa: F401

NS = "slt-us-c"
HOST_IF, PEER_IF = "slt-us-h", "slt-us-p"
CLIENT4, CLIENT6 = "10.76.0.2", "fd76::2"
STACK4, STACK6 = "10.76.0.1", "fd76::1"
FW_RULES = """\
default drop
allow proto icmp name ping
allow proto icmpv6 name nd
allow proto tcp dport 8080 name web
allow proto tcp dport 5201 name iperf
allow proto tcp dport 6390 name redis
allow proto udp dport 5353 name udp
"""


def stack_status(socket_dir):
    try:
        return api_stack(socket_dir, "status")
    except OSError:
        return None


def stack_pid(socket_dir):
    with open(socket_dir / "state.json") as f:
        st = json.load(f)
    return next((n["pid"] for n in st["nfs"] if n.get("kind") == "stack"), None)


@pytest.fixture
def deployment(net, workdir):  # noqa: F811
    net.add_ns(NS)
    net.add_veth(HOST_IF, PEER_IF, peer_ns=NS, peer_addr=f"{CLIENT4}/24")
    sh("sysctl", "-qw", f"net.ipv6.conf.{PEER_IF}.disable_ipv6=0", ns=NS)
    sh("ip", "addr", "add", f"{CLIENT6}/64", "dev", PEER_IF, "nodad", ns=NS)
    socket_dir = workdir / "s"
    (workdir / "fw.rules").write_text(FW_RULES)
    cfg = workdir / "user.yaml"
    cfg.write_text(f"""\
sluiced: {{socket_dir: {socket_dir}, pool_mbufs: 8192}}
ports:
  - {{name: p0, vdev: "net_af_packet0,iface={HOST_IF}", chain: in}}
chains:
  - {{name: in, nfs: [fw, mon, stack]}}
  - {{name: out, nfs: [stack, fw, mon], exit: p0}}
nfs:
  - {{name: fw, program: firewall, wakeup: adaptive, args: [--config, {workdir / 'fw.rules'}]}}
  - {{name: mon, program: monitor, wakeup: adaptive, args: [--pcap, {workdir / 'mon.pcapng'}]}}
stack:
  user: {{addresses: [{STACK4}/24, "{STACK6}/64"], egress_chain: out}}
""")
    r = sluice_cli(socket_dir, "up", cfg, "-d", "--build-dir", BUILD, check=False, timeout=90)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        yield net, socket_dir, workdir
    finally:
        sluice_cli(socket_dir, "down", check=False, timeout=60)


def run_under(net, socket_dir, argv, log, rate=None):  # noqa: F811
    """A program under `sluice run --stack user` (the CLI of this checkout)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    return net.popen([sys.executable, "-m", "sluice", "run", "--socket-dir", socket_dir, "--stack", "user",
                      *(["--rate", rate] if rate else []), "--build-dir", BUILD, "--", *argv],
                     stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)


def api_stack(socket_dir, cmd):
    import socket as so
    with so.socket(so.AF_UNIX, so.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(socket_dir / "stack-ctl.sock"))
        s.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def nginx_conf(workdir):
    www = workdir / "www"
    www.mkdir()
    (www / "index.html").write_text("hello through the chain\n")
    (www / "big.bin").write_bytes(os.urandom(2_000_000))
    conf = workdir / "nginx.conf"
    conf.write_text(f"""\
daemon off;
master_process off;
worker_processes 1;
error_log {workdir}/nginx-error.log;
pid {workdir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/ngx-body; proxy_temp_path {workdir}/ngx-proxy;
  fastcgi_temp_path {workdir}/ngx-fcgi; uwsgi_temp_path {workdir}/ngx-uwsgi; scgi_temp_path {workdir}/ngx-scgi;
  server {{ listen 8080; listen [::]:8080 ipv6only=on; root {www}; }}
}}
""")
    return conf, www


def test_nginx_redis_iperf3_through_the_chain(deployment):
    net, socket_dir, wd = deployment  # noqa: F811
    st = stack_status(socket_dir)
    assert st and st["user"] and st["user"]["up"], st
    assert st["user"]["addresses"] == [f"{STACK4}/24", f"{STACK6}/64"]

    # ARP, ND and ICMP echo are the stack's own, through fw and mon both ways
    cp = sh("ping", "-c", "2", "-i", "0.2", "-W", "2", STACK4, ns=NS, check=False, timeout=20)
    assert " 2 received" in cp.stdout, cp.stdout + cp.stderr
    cp = sh("ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", STACK6, ns=NS, check=False, timeout=20)
    assert " 2 received" in cp.stdout, cp.stdout + cp.stderr

    conf, www = nginx_conf(wd)
    ngx = run_under(net, socket_dir, ["nginx", "-c", conf], wd / "nginx.log")
    wait_until(lambda: sh("curl", "-s", "-m", "1", f"http://{STACK4}:8080/", ns=NS, check=False).returncode == 0,
               15, "nginx answering on the user stack")
    assert sh("curl", "-sS", "-m", "5", f"http://{STACK4}:8080/", ns=NS).stdout == "hello through the chain\n"
    assert sh("curl", "-sS", "-m", "5", f"http://[{STACK6}]:8080/", ns=NS).stdout == "hello through the chain\n"
    out = wd / "big.out"
    sh("curl", "-sS", "-m", "30", "-o", out, f"http://{STACK4}:8080/big.bin", ns=NS)
    assert out.read_bytes() == (www / "big.bin").read_bytes()
    # the monitor's capture of the HTTP exchange so far: flushed (SIGUSR1), then copied, so that tshark
    # reads a few thousand frames rather than the gigabytes iperf3 sends through the monitor below
    mon_pid = next(n["pid"] for n in api(socket_dir, "nfs")["nfs"] if n["name"] == "mon.0")
    os.kill(mon_pid, signal.SIGUSR1)
    pcap = wd / "mon.pcapng"

    def flushed():
        a = pcap.stat().st_size if pcap.exists() else 0
        time.sleep(0.3)
        return a > 0 and pcap.stat().st_size == a
    wait_until(flushed, 10, "the monitor's pcapng flushed")
    shutil.copyfile(pcap, wd / "mon-http.pcapng")
    if shutil.which("wrk"):
        cp = sh("wrk", "-t1", "-c8", "-d1s", f"http://{STACK4}:8080/", ns=NS, timeout=30)
        assert "Requests/sec" in cp.stdout and "Non-2xx" not in cp.stdout and "Socket errors" not in cp.stdout, \
            cp.stdout

    # redis-server on the user stack, redis-benchmark from the namespace
    redis = run_under(net, socket_dir, ["redis-server", "--port", "6390", "--bind", "0.0.0.0 ::", "--save", "",
                                        "--appendonly", "no", "--protected-mode", "no"], wd / "redis.log")
    wait_until(lambda: sh("redis-cli", "-h", STACK4, "-p", "6390", "ping", ns=NS, check=False).stdout.strip()
               == "PONG", 15, "redis answering on the user stack")
    cp = sh("redis-benchmark", "-h", STACK4, "-p", "6390", "-n", "2000", "-c", "8", "-q", "-t", "set,get",
            ns=NS, timeout=60)
    assert "SET:" in cp.stdout and "GET:" in cp.stdout, cp.stdout + cp.stderr
    assert sh("redis-cli", "-h", STACK6, "-p", "6390", "set", "k", "v6", ns=NS).stdout.strip() == "OK"
    assert sh("redis-cli", "-h", STACK4, "-p", "6390", "get", "k", ns=NS).stdout.strip() == "v6"
    redis.terminate()

    # iperf3 both ways over IPv4 and IPv6: the server under the shim, the client in the namespace
    for host, reverse in ((STACK4, False), (STACK6, True)):
        srv = run_under(net, socket_dir, ["iperf3", "-s", "-1", "-p", "5201", "--forceflush"], wd / "iperf3-s.log")
        wait_until(lambda: "Server listening on 5201" in (wd / "iperf3-s.log").read_text(errors="replace"),
                   10, "iperf3 listening")
        cp = sh("iperf3", "-c", host, "-p", "5201", "-t", "1", "-J", *(["-R"] if reverse else []), ns=NS,
                check=False, timeout=40)
        res = json.loads(cp.stdout)
        assert "error" not in res, res.get("error")
        assert res["end"]["sum_received"]["bytes"] > 1_000_000, res["end"]
        srv.wait(20)

    # the exchange went through the chain: firewall rules hit, the stack's counters moved
    nfs = {n["name"]: n for n in api(socket_dir, "nfs")["nfs"]}
    fw = nfs["fw.0"]["counters"]
    assert fw.get("rule.web", 0) >= 3 and fw.get("rule.iperf", 0) >= 2 and fw.get("rule.redis", 0) >= 1, fw
    assert fw.get("established", 0) > 1000, fw  # the stack's replies and data, by conntrack
    stack = nfs["stack.0"]
    assert stack["supply"]["want"] == 256 and stack["supply"]["given"] > 1000, stack["supply"]
    assert stack["supply"]["held"] <= stack["supply"]["want"]
    u = stack_status(socket_dir)["user"]
    assert u["rx_frames"] > 1000 and u["tx_frames"] > 1000, u
    apps = api_stack(socket_dir, "stats")["apps"]
    assert any(a["stack"] == "user" and a["conns_user"] >= 1 for a in apps), apps

    # what the monitor captured shows both directions of the HTTP exchange
    ngx.terminate()
    ngx.wait(10)
    if shutil.which("tshark"):
        cp = sh("tshark", "-r", wd / "mon-http.pcapng", "-Y", "http.request or http.response", "-T", "fields",
                "-e", "ip.src", "-e", "ipv6.src", "-e", "http.request.method", "-e", "http.response.code",
                timeout=60)
        lines = [ln.split("\t") for ln in cp.stdout.splitlines()]
        assert any(f[0] == CLIENT4 and f[2] == "GET" for f in lines), cp.stdout[:2000]
        assert any(f[0] == STACK4 and f[3] == "200" for f in lines), cp.stdout[:2000]
        assert any(f[1] == STACK6 and f[3] == "200" for f in lines), cp.stdout[:2000]


def test_firewall_drop_times_out_and_sigkill_of_the_stack(deployment):
    net, socket_dir, wd = deployment  # noqa: F811
    conf, www = nginx_conf(wd)
    # a program with a token bucket (--rate): the engine holds its sends to the rate, per program
    ngx = run_under(net, socket_dir, ["nginx", "-c", conf], wd / "nginx.log", rate="40M")
    wait_until(lambda: sh("curl", "-s", "-m", "1", f"http://{STACK4}:8080/", ns=NS, check=False).returncode == 0,
               15, "nginx answering on the user stack")
    out = wd / "big.out"
    sh("curl", "-sS", "-m", "30", "-o", out, f"http://{STACK4}:8080/big.bin", ns=NS)
    assert out.read_bytes() == (www / "big.bin").read_bytes()
    app = next(a for a in api_stack(socket_dir, "stats")["apps"] if a["name"].startswith("nginx"))
    assert app["stack"] == "user" and app["rate_bps"] == 40_000_000 and app["throttled"] > 0, app
    assert app["tx_bytes"] >= 2_000_000 and app["conns_user"] >= 2, app
    socks = [x for x in api_stack(socket_dir, "sockets")["sockets"] if x["app"] == app["id"]]
    assert socks and all(x["module"] == "user" for x in socks), socks

    # a rule that drops the port: the client's SYNs die in the firewall, its connect times out (not refused)
    (wd / "fw.rules").write_text(FW_RULES.replace("allow proto tcp dport 8080", "drop proto tcp dport 8080"))
    fw_pid = next(n["pid"] for n in api(socket_dir, "nfs")["nfs"] if n["name"] == "fw.0")
    os.kill(fw_pid, signal.SIGHUP)
    wait_until(lambda: "reloads" in (c := next(n for n in api(socket_dir, "nfs")["nfs"]
                                               if n["name"] == "fw.0")["counters"]) and c["reloads"] >= 1,
               10, "the firewall reloaded its rules")
    t0 = time.monotonic()
    cp = sh("curl", "-sS", "--connect-timeout", "2", f"http://{STACK4}:8080/", ns=NS, check=False, timeout=20)
    assert cp.returncode == 28, (cp.returncode, cp.stderr)  # timed out, as behind nftables' drop
    assert time.monotonic() - t0 >= 1.9
    (wd / "fw.rules").write_text(FW_RULES)
    os.kill(fw_pid, signal.SIGHUP)
    wait_until(lambda: sh("curl", "-s", "-m", "1", f"http://{STACK4}:8080/", ns=NS, check=False).returncode == 0,
               10, "nginx reachable again after the rule went")

    # A program blocked in recv() on a connection of the user stack; then SIGKILL of sluice-stackd
    srv = net.popen(["python3", "-c", "import socket,time\n"
                     "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                     f"s.bind(('{CLIENT4}', 5201)); s.listen(1); c,_=s.accept(); time.sleep(60)"], ns=NS)
    wait_until(lambda: "5201" in sh("ss", "-ltnH", ns=NS).stdout, 10, "a server in the namespace")
    blocked = run_under(net, socket_dir, ["python3", "-c",
                                          "import socket,errno,sys\n"
                                          f"s=socket.create_connection(('{CLIENT4}', 5201), timeout=10)\n"
                                          "s.settimeout(None); print('connected', flush=True)\n"
                                          "try:\n  s.recv(10)\n  print('recv returned')\n"
                                          "except OSError as e:\n  print('errno', errno.errorcode[e.errno])\n"],
                        wd / "blocked.log")
    wait_until(lambda: "connected" in (wd / "blocked.log").read_text(), 15, "the program connected")
    old = stack_pid(socket_dir)
    os.kill(old, signal.SIGKILL)
    blocked.wait(15)
    assert "errno ECONNRESET" in (wd / "blocked.log").read_text(), (wd / "blocked.log").read_text()
    srv.kill()
    # the supervisor starts it again; it attaches to sluiced as stack.0 again and serves new programs
    wait_until(lambda: stack_pid(socket_dir) not in (None, old) and (stack_status(socket_dir) or {}).get("user"),
               30, "a new sluice-stackd with its user module")
    wait_until(lambda: any(n["name"] == "stack.0" for n in api(socket_dir, "nfs")["nfs"]), 10, "stack.0 attached")
    ngx.kill()
    ngx.wait(10)
    ngx = run_under(net, socket_dir, ["nginx", "-c", conf], wd / "nginx2.log")
    wait_until(lambda: sh("curl", "-s", "-m", "1", f"http://{STACK4}:8080/", ns=NS, check=False).returncode == 0,
               15, "nginx on the restarted user stack")
    # the killed stack's buffers came back: nothing held twice, nothing lost
    audit = api(socket_dir, "pool_audit")
    assert audit["whole"], audit


def test_run_user_without_the_module_says_so(workdir):  # noqa: F811
    """--stack user against a socket service with no stack.user: a clear error, before the program runs."""
    socket_dir = workdir / "s"
    socket_dir.mkdir()
    stackd = subprocess.Popen([str(BUILD / "src" / "stack" / "sluice-stackd"), "--socket-dir", str(socket_dir)],
                              stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (socket_dir / "stack-ctl.sock").exists(), 10, "sluice-stackd")
        r = sluice_cli(socket_dir, "run", "--socket-dir", socket_dir, "--stack", "user", "--build-dir", BUILD,
                       "--", "true", check=False)
        assert r.returncode == 125, r.stdout + r.stderr
        assert "runs no user stack module" in r.stderr and "stack.user" in r.stderr, r.stderr
    finally:
        stackd.terminate()
        stackd.wait(10)


# ---------------------------------------------------------------- config (stack.user): errors name the field

def _user_cfg(**user):
    u = {"addresses": ["10.0.0.1/24", "fd00::1/64"], "egress_chain": "out"}
    u.update(user)
    u = {k: v for k, v in u.items() if v is not None}
    return {"ports": [{"name": "p0", "vdev": "net_null0", "chain": "in"}],
            "chains": [{"name": "in", "nfs": ["fw", "stack"]}, {"name": "out", "nfs": ["stack", "fw"], "exit": "p0"}],
            "nfs": [{"name": "fw", "program": "fwd"}],
            "stack": {"user": u}}


USER_CONFIG_ERRORS = [
    ("no_addresses", _user_cfg(addresses=None), "stack.user.addresses", "required"),
    ("bad_address", _user_cfg(addresses=["10.0.0.300/24"]), "stack.user.addresses[0]", "not an IPv4 or IPv6"),
    ("two_ipv4", _user_cfg(addresses=["10.0.0.1/24", "10.0.1.1/24"]), "stack.user.addresses[1]", "second IPv4"),
    ("loopback", _user_cfg(addresses=["127.0.0.2/8"]), "stack.user.addresses[0]", "loopback"),
    ("gateway_off_prefix", _user_cfg(gateway="10.9.9.9"), "stack.user.gateway", "not on the IPv4 prefix"),
    ("mtu_too_big", _user_cfg(mtu=9000), "stack.user.mtu", "does not fit sluiced's buffers"),
    ("bad_mac", _user_cfg(mac="01:00:5e:00:00:01"), "stack.user.mac", "multicast"),
    ("unknown_egress", _user_cfg(egress_chain="nosuch"), "stack.user.egress_chain", "unknown chain"),
    ("egress_not_from_stack", _user_cfg(egress_chain="in"), "stack.user.egress_chain", "must start with"),
    ("unknown_key", _user_cfg(bogus=1), "stack.user.bogus", "unknown"),
]


@pytest.mark.parametrize("case,cfg,field,words", USER_CONFIG_ERRORS, ids=[c[0] for c in USER_CONFIG_ERRORS])
def test_user_config_errors_name_the_field(case, cfg, field, words):
    from sluice import config as sc
    with pytest.raises(sc.ConfigError) as e:
        sc.normalize(cfg, check_programs=False)
    assert str(e.value).startswith(field + ":") and words in str(e.value), str(e.value)


def test_user_config_chains():
    from sluice import config as sc
    cfg = _user_cfg()
    cfg["chains"][0]["exit"] = "p0"  # an ingress chain goes nowhere after the stack
    with pytest.raises(sc.ConfigError, match=r"^chains\[0\]\.exit: the stack's service 'stack' takes in"):
        sc.normalize(cfg, check_programs=False)
    cfg = _user_cfg()
    cfg["ports"][0]["chain"] = None
    cfg["chains"] = [cfg["chains"][1]]  # nothing brings traffic to the stack
    with pytest.raises(sc.ConfigError, match=r"^stack\.user\.service: no chain brings traffic to 'stack'"):
        sc.normalize(cfg, check_programs=False)
    cfg = _user_cfg(service="fw")
    with pytest.raises(sc.ConfigError, match=r"^stack\.user\.service: 'fw' is nfs\[0\]'s name too"):
        sc.normalize(cfg, check_programs=False)
    ok = sc.normalize(_user_cfg(), check_programs=False)
    assert ok["stack"]["user"]["addresses"] == ["10.0.0.1/24", "fd00::1/64"]
    out = json.loads(sc.to_sluiced_json(ok, tokens=sc.new_tokens(ok)))
    entry = next(n for n in out["nfs"] if n["name"] == "stack")  # sluiced knows the service, with a token
    assert len(entry["token"]) == 32 and "stack" not in out
