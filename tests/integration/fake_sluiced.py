#!/usr/bin/env python3
"""A stand-in for sluiced and the built-in NFs, to test the `sluice` supervisor and
CLI without DPDK. Only stdlib.

Invoked as .../src/manager/sluiced it is a fake manager: `--config F --socket-dir D`,
serves docs/api.md's commands on D/ctl.sock (counters tick with time) and accepts
"NFs" on D/nf.sock (one JSON line {"name", "service", "pid", "wakeup"}; detached on EOF).
Invoked as .../sluice-nf-<x> it is a fake NF: attaches with its SLUICE_NF_* env and
waits for SIGTERM or the manager closing the socket.

Env knobs: FAKE_SLUICED_FAIL=msg (print msg, exit 1 at startup);
FAKE_NF_CRASH_ONCE=path (NF exits 3 at once if path does not exist, creating it);
FAKE_NF_IGNORE_TERM=1 (NF ignores SIGTERM).
"""

import json
import os
import signal
import socket
import sys
import threading
import time


def fake_nf():
    marker = os.environ.get("FAKE_NF_CRASH_ONCE")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        print("fake nf: crashing once", flush=True)
        sys.exit(3)
    if os.environ.get("FAKE_NF_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["SLUICE_NF_SOCKET"])
    hello = {"name": os.environ["SLUICE_NF_NAME"], "service": os.environ["SLUICE_NF_SERVICE"],
             "pid": os.getpid(), "wakeup": os.environ.get("SLUICE_NF_WAKEUP", "poll"),
             "batch": int(os.environ.get("SLUICE_NF_BATCH", "32")),
             "timeout_us": int(os.environ.get("SLUICE_NF_TIMEOUT_US", "100")), "argv": sys.argv[1:]}
    s.sendall((json.dumps(hello) + "\n").encode())
    print(f"fake nf {hello['name']} attached", flush=True)
    try:
        while s.recv(1024):
            pass
    except OSError:
        pass
    return 0


class Manager:
    def __init__(self, cfg, sdir):
        self.cfg = cfg
        self.sdir = sdir
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.nfs = {}  # name -> hello dict
        self.chains = {c["name"]: dict(c) for c in cfg["chains"]}
        self.ports = {p["name"]: dict(p) for p in cfg["ports"]}
        self.stop = threading.Event()

    def ticks(self):
        return int((time.monotonic() - self.t0) * 1000)

    def port_objs(self):
        t = self.ticks()
        return [{"id": i, "name": p["name"], "vdev": p["vdev"], "chain": p.get("chain"), "rx_pkts": t,
                 "rx_bytes": t * 100, "tx_pkts": t, "tx_bytes": t * 100,
                 "drops": {"tx_full": 0, "no_path": 0, "rx_invalid": 0}} for i, p in enumerate(self.ports.values())]

    def nf_objs(self):
        t = self.ticks()
        with self.lock:
            return [{"id": i, "name": n["name"], "service": n["service"], "service_id": 0, "pid": n["pid"], "uid": 0,
                     "wakeup": n["wakeup"], "batch": n["batch"], "timeout_us": n["timeout_us"], "rx_pkts": t,
                     "rx_bytes": t * 100, "tx_pkts": t, "tx_bytes": t * 100, "lent": 0, "kicks": 0,
                     "drops": {"ring_full": 0, "invalid_desc": 0}} for i, n in enumerate(self.nfs.values())]

    def chain_objs(self):
        return [{"id": i, "name": c["name"], "nfs": c["nfs"], "exit": c.get("exit")}
                for i, c in enumerate(self.chains.values())]

    def handle(self, req):
        cmd = req.get("cmd")
        if cmd == "status":
            return {"ok": True, "version": "0.0.0-fake", "pid": os.getpid(), "uptime_s": int(self.ticks() / 1000),
                    "huge_pages": False, "region_bytes": 1 << 27, "mbufs": 16384, "mbufs_free": 16000,
                    "mbufs_lent": 0, "nf_count": len(self.nfs), "port_count": len(self.ports),
                    "chain_count": len(self.chains), "worker_lcore": 1}
        if cmd == "ports":
            return {"ok": True, "ports": self.port_objs()}
        if cmd == "nfs":
            return {"ok": True, "nfs": self.nf_objs()}
        if cmd == "chains":
            return {"ok": True, "chains": self.chain_objs()}
        if cmd == "stats":
            nfs = self.nf_objs()
            svcs = {}
            for n in nfs:
                svcs.setdefault(n["service"], []).append(n["name"])
            return {"ok": True, "ports": self.port_objs(), "nfs": nfs, "chains": self.chain_objs(),
                    "services": [{"id": i, "name": k, "instances": v, "drops": {"nf_gone": 0}}
                                 for i, (k, v) in enumerate(svcs.items())],
                    "drops": {"ring_full": 0, "no_path": 0, "nf_gone": 0, "invalid_desc": 0, "tx_full": 0,
                              "rx_invalid": 0},
                    "pool": {"mbufs": 16384, "free": 16000, "lent": 0}}
        if cmd == "chain_set":
            if req.get("exit") is not None and req["exit"] not in self.ports:
                return {"ok": False, "error": f"chain_set: field 'exit': unknown port '{req['exit']}'"}
            self.chains[req["name"]] = {"name": req["name"], "nfs": req["nfs"], "exit": req.get("exit")}
            return {"ok": True, "chain": self.chain_objs()[list(self.chains).index(req["name"])]}
        if cmd == "port_chain_set":
            if req.get("port") not in self.ports:
                return {"ok": False, "error": f"port_chain_set: field 'port': unknown port '{req.get('port')}'"}
            self.ports[req["port"]]["chain"] = req.get("chain")
            return {"ok": True, "port": [p for p in self.port_objs() if p["name"] == req["port"]][0]}
        if cmd == "shutdown":
            self.stop.set()
            return {"ok": True}
        return {"ok": False, "error": f"unknown cmd {cmd!r}"}

    def serve_ctl(self, conn):
        f = conn.makefile("rwb")
        try:
            for line in f:
                try:
                    req = json.loads(line)
                    resp = self.handle(req) if isinstance(req, dict) else {"ok": False, "error": "not an object"}
                except ValueError:
                    resp = {"ok": False, "error": "not JSON"}
                f.write((json.dumps(resp) + "\n").encode())
                f.flush()
        except OSError:
            pass
        finally:
            conn.close()

    def serve_nf(self, conn):
        f = conn.makefile("rb")
        line = f.readline()
        try:
            hello = json.loads(line)
        except ValueError:
            conn.close()
            return
        with self.lock:
            self.nfs[hello["name"]] = hello
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        with self.lock:
            self.nfs.pop(hello["name"], None)

    def listen(self, path, fn):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(64)

        def loop():
            while True:
                c, _ = s.accept()
                threading.Thread(target=fn, args=(c,), daemon=True).start()
        threading.Thread(target=loop, daemon=True).start()


def fake_sluiced(argv):
    args = dict(zip(argv[0::2], argv[1::2]))
    if os.environ.get("FAKE_SLUICED_FAIL"):
        print(f"sluiced: {os.environ['FAKE_SLUICED_FAIL']}", file=sys.stderr, flush=True)
        return 1
    with open(args["--config"]) as f:
        cfg = json.load(f)
    sdir = args.get("--socket-dir", "/run/sluice")
    m = Manager(cfg, sdir)
    signal.signal(signal.SIGTERM, lambda *a: m.stop.set())
    m.listen(os.path.join(sdir, "nf.sock"), m.serve_nf)
    m.listen(os.path.join(sdir, "ctl.sock"), m.serve_ctl)
    print("sluiced: ready", file=sys.stderr, flush=True)
    m.stop.wait()
    time.sleep(0.1)  # let the shutdown answer go out
    for p in ("ctl.sock", "nf.sock"):
        try:
            os.unlink(os.path.join(sdir, p))
        except OSError:
            pass
    print("sluiced: bye", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    me = os.path.basename(sys.argv[0])
    sys.exit(fake_nf() if me.startswith("sluice-nf-") else fake_sluiced(sys.argv[1:]))
