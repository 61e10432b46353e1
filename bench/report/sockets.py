"""The socket service section (bench/sockets.py, issue 18): unmodified programs over kernel loopback
TCP, under `sluice run --stack kernel` and `--stack shm`."""

from __future__ import annotations

from pathlib import Path

from .common import _headline_line, _link, headline, rows_of

SCENARIO = "sockets"
# (metric, label, unit, higher is better)
METRICS = (("redis_set_p1", "redis-benchmark SET, -P 1", "req/s", True),
           ("redis_get_p1", "redis-benchmark GET, -P 1", "req/s", True),
           ("redis_set_p16", "redis-benchmark SET, -P 16", "req/s", True),
           ("redis_get_p16", "redis-benchmark GET, -P 16", "req/s", True),
           ("nginx_rps", "nginx + wrk, 1 KiB file", "req/s", True),
           ("iperf3_gbps", "iperf3, one TCP stream", "Gbit/s", True),
           ("pingpong_p50_us", "64 B ping-pong, p50", "µs", False),
           ("pingpong_p99_us", "64 B ping-pong, p99", "µs", False),
           ("pingpong_1core_p50_us", "64 B ping-pong, p50, client and server on CPU 0", "µs", False),
           ("pingpong_1core_p99_us", "64 B ping-pong, p99, client and server on CPU 0", "µs", False),
           ("redis_cpu_us_per_req", "CPU per request (redis -P 1; server + client + stackd)", "µs", False),
           ("redis_p16_server_cpu_us", "redis-server CPU per request (-P 16)", "µs", False),
           ("redis_p16_server_user_us", "redis-server user CPU per request (-P 16)", "µs", False))
SYSTEMS = (("loopback", "kernel loopback"), ("kernel", "sluice run --stack kernel"), ("shm", "sluice run --stack shm"),
           ("shm-poll", "--stack shm, engine --poll-us 50"),
           ("shm-engine", "--stack shm, --poll-us 50, engine on the data path (--no-direct)"))
RATIOS = ("shm", "shm-poll", "shm-engine", "kernel")


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


def sockets_section(loaded: list[tuple[Path, dict]], out_dir: Path) -> list[str]:
    L = ["## The network stack as a service: sockets of unmodified programs (`bench/sockets.py`)", ""]
    h = headline(loaded, SCENARIO)
    if not h:
        return L + ["Not measured yet: `sudo .venv/bin/python bench/sockets.py`.", ""]
    p, d = h
    rows = rows_of(d["results"], SCENARIO)
    get = {(r["metric"], r["system"]): r for r in rows}
    prm = d.get("params", {})
    L += [_headline_line(p, d, out_dir), "",
          "**Method.** One sluice-stackd for the run; each test starts its server and client fresh, both plain "
          "(`loopback`) or both under the shim with the same stack module; systems alternate within each round; "
          f"median of {d.get('runs', '?')} rounds with min–max. redis-benchmark: 50 clients, "
          f"{prm.get('redis_requests', '?')} requests (× 16 with -P 16); wrk: 1 thread, 32 connections, "
          f"{prm.get('secs', '?')} s, nginx with 1 worker; iperf3: {prm.get('secs', '?')} s; ping-pong: "
          f"{prm.get('pingpong_rounds', '?')} round trips (`bench/pingpong.c`). `--poll-us 50`: a second "
          "sluice-stackd that polls for 50 µs after each activity before it sleeps, and whose programs' blocking "
          "receives poll their rings as long (docs/sockets.md \"Polling\"). shm and shm-poll connections are direct "
          "(docs/sockets.md \"Direct connections\": the two shims move the bytes); shm-engine is shm-poll from a "
          "third sluice-stackd with `--no-direct`, the engine copying ring to ring (the design before). CPU per request: utime + stime of "
          "redis-server, redis-benchmark and (under the shim) sluice-stackd over the -P 1 run, / requests. "
          "Timings are of a shared 2-vCPU VM: server, client and sluice-stackd share its two cores.", "",
          "| test | unit | " + " | ".join(lbl for _, lbl in SYSTEMS) + " | "
          + " | ".join(f"{r} vs loopback" for r in RATIOS) + " |",
          "|---|---|" + "---:|" * (len(SYSTEMS) + len(RATIOS))]
    for key, label, unit, higher in METRICS:
        cells = []
        for sysname, _ in SYSTEMS:
            r = get.get((key, sysname))
            cells.append(f"**{_num(r['median'])}** ({_num(r['min'])}–{_num(r['max'])})" if r else "–")
        ratios = []
        base = get.get((key, "loopback"))
        for sysname in RATIOS:
            r = get.get((key, sysname))
            if r and base and base["median"] and r["median"]:
                x = r["median"] / base["median"] if higher else base["median"] / r["median"]
                ratios.append(f"{x:.2f}x")
            else:
                ratios.append("–")
        L.append(f"| {label} | {unit} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    L += ["", "Ratios: throughput shm/loopback; latency and CPU loopback/system (above 1: the system is better)."]
    L += [""] + _verdict(get) + [""]
    fair = d.get("fairness")
    if fair:
        L += ["**Fairness** (NetKernel's figure 21): three iperf3 clients under `--stack kernel` with token buckets "
              "of 1 Gbit/s, 0.5 Gbit/s and none, each to its own plain iperf3 server, at the same time; Gbit/s per "
              "second:", "", "| app | " + " | ".join(str(i + 1) for i in range(max(len(v) for v in fair.values())))
              + " | mean |", "|---|" + "---:|" * (max(len(v) for v in fair.values()) + 1)]
        for label, series in fair.items():
            mean = sum(series) / len(series) if series else 0
            L.append(f"| --rate {label} | " + " | ".join(f"{x:.2f}" for x in series) + f" | **{mean:.2f}** |")
        png = p.with_name(p.name.replace(".json", "-fairness.png"))
        if png.exists():
            L += ["", f"![fairness]({_link(png, out_dir)})"]
        L.append("")
    L += ["**Beside the papers.** NetKernel (ATC '19) reports its shared-memory NSM at about 2x the TCP "
          "baseline between colocated VMs and a kernel NSM costing 5–9 % more CPU per request. SocksDirect "
          "(SIGCOMM '19) reports 7–20x the message throughput and 17–35x lower latency than Linux sockets "
          "within a host, with peer-to-peer shared-memory queues and no daemon on the data path. Sluice's direct "
          "connections are peer to peer too (one copy, no engine). Programs still wait in the kernel's epoll on "
          "their placeholders, which is what lets them run unmodified; but while an event loop is awake the shim "
          "reads its sockets' rings and senders leave the readable token out (docs/sockets.md \"epoll\"), "
          "level-triggered or edge-triggered (nginx), so a busy loop makes no system call per message; with a "
          "polling engine an idle loop polls its rings for as long before it sleeps.", ""]
    return L


def _verdict(get: dict) -> list[str]:
    out = ["**Targets** (issue 18):", ""]

    def ratio(metric, higher=True, system="shm"):
        a, b = get.get((metric, system)), get.get((metric, "loopback"))
        if not a or not b or not a["median"] or not b["median"]:
            return None
        return a["median"] / b["median"] if higher else b["median"] / a["median"]

    for metric, what in (("redis_set_p1", "redis SET -P 1"), ("redis_get_p1", "redis GET -P 1"),
                         ("redis_set_p16", "redis SET -P 16"), ("redis_get_p16", "redis GET -P 16"),
                         ("nginx_rps", "nginx + wrk"), ("iperf3_gbps", "iperf3")):
        xs = [(sysname, ratio(metric, system=sysname)) for sysname in ("shm", "shm-poll")]
        xs = [(n, x) for n, x in xs if x is not None]
        if xs:
            best = max(x for _, x in xs)
            out.append(f"- shm ≥ 2x loopback, {what}: " + ", ".join(f"{n} {x:.2f}x" for n, x in xs)
                       + f" — {'met' if best >= 2 else 'not met'}.")
    for metric, where in (("pingpong_p50_us", "placed by the scheduler"),
                          ("pingpong_1core_p50_us", "client and server on one core")):
        xs = [(n, ratio(metric, higher=False, system=n)) for n in ("shm", "shm-poll")]
        xs = [(n, x) for n, x in xs if x is not None]
        if xs:
            best = max(x for _, x in xs)
            out.append(f"- shm p50 latency ≥ 2x lower ({where}): " + ", ".join(f"{n} {x:.2f}x" for n, x in xs)
                       + f" — {'met' if best >= 2 else 'not met'}.")
    lb, cpu = get.get(("redis_set_p16", "loopback")), get.get(("redis_p16_server_user_us", "loopback"))
    if lb and cpu and cpu["median"]:
        bound = 1e6 / cpu["median"]
        out.append(f"- The bound of one redis-server thread at -P 16: its own user CPU per request under loopback is "
                   f"{cpu['median']:.3f} µs, so with no system calls at all it would serve at most {_num(bound)} "
                   f"req/s, {bound / lb['median']:.2f}x loopback's SET -P 16.")
    k, b = get.get(("redis_cpu_us_per_req", "kernel")), get.get(("redis_cpu_us_per_req", "loopback"))
    if k and b and b["median"]:
        over = k["median"] / b["median"] - 1
        out.append(f"- kernel module CPU per request ≤ +10 %: {over:+.0%} — {'met' if over <= 0.10 else 'not met'}.")
    return out
