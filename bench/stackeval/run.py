#!/usr/bin/env python3
"""stackeval: build and run the userspace TCP/IP stack evaluation (lwIP vs smoltcp).

Builds bench/stackeval/lwip/lwip_bench.c (gcc, pkg-config lwip: Debian's liblwip-dev 2.1.3) and
the cargo project bench/stackeval/smoltcp (smoltcp 0.14, Cargo.lock pinned; target dir
build/stackeval/target), runs every case REPS times with the stacks interleaved (lwIP, smoltcp,
lwIP, ...: same session, same noise), and writes bench/results/stackeval-<UTC stamp>.json.

    python3 bench/stackeval/run.py            # full run (~4.5 min)
    python3 bench/stackeval/run.py --quick    # smoke run: 0.5 s bulk, 1 rep, 1000 connections (~40 s)

See bench/stackeval/README.md for what is measured and how.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build", "stackeval")
LWIP_BIN = os.path.join(BUILD, "lwip_bench")
CARGO_TARGET = os.path.join(BUILD, "target")
SMOL_BIN = os.path.join(CARGO_TARGET, "release", "smoltcp-bench")


def sh(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def ensure_lwip():
    if subprocess.run(["pkg-config", "--exists", "lwip"]).returncode == 0:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit("pkg-config lwip not found: install Debian's liblwip-dev (apt-get install -y liblwip-dev)")
    print("liblwip-dev missing: installing it", flush=True)
    sh(["apt-get", "install", "-y", "-q", "liblwip-dev"], stdout=subprocess.DEVNULL)


def build():
    os.makedirs(BUILD, exist_ok=True)
    ensure_lwip()
    cflags = out(["pkg-config", "--cflags", "lwip"]).split()
    libs = out(["pkg-config", "--libs", "lwip"]).split()
    sh(["gcc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", *cflags,
        os.path.join(HERE, "lwip", "lwip_bench.c"), "-o", LWIP_BIN, *libs, "-ldl"])
    if not shutil.which("cargo"):
        sys.exit("cargo not found (rustup's cargo 1.95 was used here)")
    env = dict(os.environ, CARGO_TARGET_DIR=CARGO_TARGET)
    sh(["cargo", "build", "--release", "--locked", "--quiet",
        "--manifest-path", os.path.join(HERE, "smoltcp", "Cargo.toml")], env=env)


def run_case(cmd, timeout):
    print("  $", " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        return {"error": f"exit {p.returncode}", "stderr": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary_of(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="0.5 s bulk runs, 1 rep, 1000 connections only")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.seconds = 1, 0.5
    if not a.no_build:
        build()

    sec = str(a.seconds)
    # (case name, stack, command, metric) -- run in this order, REPS times over (interleaved)
    bulk = []
    for fam in ("4", "6"):
        bulk += [
            (f"bulk-v{fam}/lwip", [LWIP_BIN, "--mode", "bulk", "--family", fam, "--seconds", sec]),
            (f"bulk-v{fam}/smoltcp-64k", [SMOL_BIN, "--mode", "bulk", "--family", fam, "--seconds", sec]),
        ]
    for fam in ("4", "6"):
        bulk += [
            (f"bulk-v{fam}/lwip-1instance", [LWIP_BIN, "--mode", "bulk", "--family", fam, "--seconds", sec, "--instances", "1"]),
            (f"bulk-v{fam}/smoltcp-256k", [SMOL_BIN, "--mode", "bulk", "--family", fam, "--seconds", sec, "--buf", "262144"]),
        ]
    # what checksum offload would be worth (smoltcp can be told per device; Debian's lwIP cannot)
    bulk.append(("bulk-v4/smoltcp-64k-csum-offload",
                 [SMOL_BIN, "--mode", "bulk", "--family", "4", "--seconds", sec, "--csum-offload"]))
    ns = ["1000"] if a.quick else ["1000", "10000"]
    conns = []
    for n in ns:
        conns += [
            (f"conns-{n}-v4/lwip", [LWIP_BIN, "--mode", "conns", "--family", "4", "--conns", n]),
            (f"conns-{n}-v4/smoltcp-prearmed", [SMOL_BIN, "--mode", "conns", "--family", "4", "--conns", n]),
        ]
    conns += [
        ("conns-1000-v4/smoltcp-backlog128", [SMOL_BIN, "--mode", "conns", "--family", "4", "--conns", "1000", "--backlog", "128"]),
        ("conns-1000-v6/lwip", [LWIP_BIN, "--mode", "conns", "--family", "6", "--conns", "1000"]),
        ("conns-1000-v6/smoltcp-prearmed", [SMOL_BIN, "--mode", "conns", "--family", "6", "--conns", "1000"]),
    ]
    if not a.quick:
        conns.append(("conns-1000-v4/smoltcp-prearmed-64k",
                      [SMOL_BIN, "--mode", "conns", "--family", "4", "--conns", "1000", "--buf", "65536"]))

    started = datetime.datetime.now(datetime.timezone.utc)
    runs = []
    for rep in range(a.reps):
        print(f"== rep {rep + 1}/{a.reps}", flush=True)
        for name, cmd in bulk + conns:
            r = run_case(cmd, timeout=300)
            r["case"], r["rep"] = name, rep
            runs.append(r)
            if "gbps" in r:
                print(f"     {name}: {r['gbps']:.2f} Gbit/s", flush=True)
            elif "seconds" in r:
                print(f"     {name}: {r['seconds'] * 1e3:.1f} ms, {r.get('completed')}/{r.get('conns')} done", flush=True)

    summary = {}
    for name, _ in bulk + conns:
        rs = [r for r in runs if r.get("case") == name and "error" not in r]
        if not rs:
            summary[name] = {"error": "no successful run"}
            continue
        s = {}
        if name.startswith("bulk"):
            s["gbps"] = summary_of([r["gbps"] for r in rs])
        else:
            s["seconds"] = summary_of([r["seconds"] for r in rs])
            s["finished_all"] = all(r["finished"] for r in rs)
            for k in ("rss_bytes_per_conn", "settled_rss_bytes_per_conn", "heap_bytes_per_conn",
                      "settled_heap_bytes_per_conn", "settled_heap_bytes_per_conn_client",
                      "settled_heap_bytes_per_conn_server", "heap_bytes_per_listener",
                      "rss_bytes_per_listener", "refused_and_retried", "poll_seconds"):
                if k in rs[0]:
                    s[k] = summary_of([r[k] for r in rs])
        link = rs[0]["link"]
        s["handshake"] = {"syn": link["syn"], "synack": link["synack"],
                          "wscale_negotiated": link["wscale_negotiated"],
                          "sack_negotiated": link["sack_negotiated"],
                          "max_window_bytes_from_receiver": link["from_B"]["max_window_bytes"]}
        s["neighbours"] = {k: link["from_A"][k] + link["from_B"][k]
                           for k in ("arp_req", "arp_rep", "nd_ns", "nd_na")}
        summary[name] = s

    doc = {
        "suite": "stackeval",
        "started_utc": started.isoformat(),
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "config": {
            "quick": a.quick, "reps": a.reps, "bulk_seconds": a.seconds, "link_mtu": 1500,
            "order": "every rep runs all cases in the listed order, stacks interleaved",
            "host": {"nproc": os.cpu_count(), "kernel": platform.release(),
                     "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")},
            "versions": {
                "liblwip-dev": out(["dpkg-query", "-W", "-f=${Version}", "liblwip-dev"]),
                "smoltcp": "0.14.0 (Cargo.lock)",
                "rustc": out(["rustc", "--version"]), "gcc": out(["gcc", "-dumpfullversion"]),
            },
        },
        "summary": summary,
        "runs": runs,
    }
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "stackeval-" + started.strftime("%Y%m%dT%H%M%SZ") + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    print("\ncase                                   median       min       max")
    for name, s in summary.items():
        if "gbps" in s:
            g = s["gbps"]
            print(f"{name:36s} {g['median']:7.2f} Gb/s {g['min']:6.2f}  {g['max']:6.2f}")
        elif "seconds" in s:
            t = s["seconds"]
            extra = ""
            if "settled_heap_bytes_per_conn" in s:
                extra = f"  heap/conn {s['settled_heap_bytes_per_conn']['median']:.0f} B"
            elif "settled_heap_bytes_per_conn_client" in s:
                extra = (f"  heap/conn {s['settled_heap_bytes_per_conn_client']['median'] + s['settled_heap_bytes_per_conn_server']['median']:.0f} B")
            extra += f"  rss/conn {s['rss_bytes_per_conn']['median']:.0f} B"
            print(f"{name:36s} {t['median'] * 1e3:7.1f} ms   {t['min'] * 1e3:6.1f}  {t['max'] * 1e3:6.1f}{extra}")
        else:
            print(f"{name:36s} {s}")
    print(f"\nwrote {os.path.relpath(path, ROOT)}")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
