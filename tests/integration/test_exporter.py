"""The Prometheus exporter (python/sluice/exporter/, `sluice metrics`, the config's `metrics:`;
docs/observability.md "Metrics").

Judged by outside oracles: `promtool check metrics` on the exposition, a real Prometheus server that
scrapes the exporter every second and answers queries, and `sluice stats --json` taken when the traffic
has stopped, which every series must equal. A coverage check fails when `stats` grows a counter that
no metric carries."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from harness import (BUILD, base_config, kill_procs_of, sluice, sluice_cli, udp_frames, wait_until,  # noqa: F401
                     workdir, write_pcap)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from sluice import config as sconfig  # noqa: E402
from sluice.config import ConfigError  # noqa: E402
from sluice.exporter import render  # noqa: E402
from sluice.exporter.expo import Exposition  # noqa: E402

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
N = 300


# ---- the exposition format, offline

def parse(text):
    """{(name, frozenset(labels.items())): value} of an exposition (samples only)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") for k, v in labels.items()}
        key = (m.group(1), frozenset(labels.items()))
        assert key not in out, f"duplicate series {key}"
        out[key] = float(m.group(4))
    return out


def test_exposition_escapes_labels_and_refuses_bad_names():
    ex = Exposition()
    ex.counter("sluice_x_total", "help with \\ and\nnewline", 3, port='a"b\\c\nd')
    ex.gauge("sluice_y", "a gauge", 1.5)
    text = ex.text()
    assert 'sluice_x_total{port="a\\"b\\\\c\\nd"} 3' in text
    assert "# HELP sluice_x_total help with \\\\ and\\nnewline" in text
    assert parse(text)[("sluice_x_total", frozenset({("port", 'a"b\\c\nd')}))] == 3
    with pytest.raises(ValueError, match="must end in _total"):
        ex.counter("sluice_x", "no suffix", 1)
    with pytest.raises(ValueError, match="not a valid Prometheus name"):
        ex.gauge("sluice-x", "dash", 1)
    with pytest.raises(ValueError, match="label name"):
        ex.gauge("sluice_z", "bad label", 1, **{"__x": "y"})
    with pytest.raises(ValueError, match="declared as counter and as gauge"):
        ex.gauge("sluice_x_total", "type clash", 1)


def test_sluiced_not_answering_is_sluice_up_0_and_nothing_else(tmp_path):
    assert parse(render(None, None)) == {("sluice_up", frozenset()): 0}
    r = subprocess.run([sys.executable, "-m", "sluice", "metrics", "--socket-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python")))
    assert r.returncode == 1 and "sluice_up 0" in r.stdout
    assert f"sluiced did not answer at {tmp_path}/ctl.sock" in r.stderr


@pytest.mark.parametrize("value,field,fragment", [
    ({"listen": "nowhere"}, "metrics.listen", "expected HOST:PORT"),
    ({"listen": "127.0.0.1:70000"}, "metrics.listen", "port must be 1..65535"),
    ({"port": 1}, "metrics.port", "unknown key"),
    ("yes", "metrics", "must be true, false or a mapping"),
])
def test_config_errors_name_the_field(value, field, fragment):
    data = {"ports": [{"name": "p", "vdev": "net_null0"}], "metrics": value}
    with pytest.raises(ConfigError) as e:
        sconfig.normalize(data, check_programs=False)
    assert e.value.path == field and fragment in str(e.value)


def test_config_metrics_defaults_to_loopback_and_stays_out_of_sluiceds_json():
    data = {"ports": [{"name": "p", "vdev": "net_null0"}], "metrics": None}
    cfg = sconfig.normalize(data, check_programs=False)
    assert cfg["metrics"] == {"listen": "127.0.0.1:9464"}
    assert "metrics" not in json.loads(sconfig.to_sluiced_json(cfg))
    assert "metrics" not in sconfig.normalize(dict(data, metrics=False), check_programs=False)


# ---- against a live sluiced: every counter of `stats`, each as its own series

# numeric leaves of `stats` that are identities or settings, not measurements (labels carry them)
NOT_METRICS = {"ports[].id", "ports[].max_frame", "ports[].rx_desc", "ports[].tx_desc", "ports[].worker",
               "ports[].queues[].queue", "ports[].queues[].worker", "ports[].tx_queues[].queue",
               "ports[].tx_queues[].worker", "nfs[].id", "nfs[].service_id", "nfs[].pid", "nfs[].uid",
               "nfs[].worker", "services[].id", "chains[].id", "domains[].id", "ports[].options.rx_desc",
               "ports[].options.tx_desc", "ports[].options.mtu"}


def leaves(obj, path=""):
    """(path with [] for list items, value, the item names on the way) of every number in obj."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        yield path, obj, ()
    elif isinstance(obj, dict):
        for k, v in obj.items():
            for p, x, names in leaves(v, f"{path}.{k}" if path else k):
                yield p, x, names
    elif isinstance(obj, list):
        for item in obj:
            name = item.get("name") if isinstance(item, dict) else None
            for p, x, names in leaves(item, path + "[]"):
                yield p, x, ((name,) if name is not None else ()) + names


def series(m, name, **labels):
    hits = [v for (n, ls), v in m.items() if n == name and all((k, str(v2)) in ls for k, v2 in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} series"
    return hits[0]


def expected(stats):
    """Every metric the exporter must show for `stats`, by the stats path it comes from:
    {stats path: [(metric, labels, value)]}."""
    exp = {}

    def put(path, metric, value, **labels):
        exp.setdefault(path, []).append((metric, labels, value))
    simple_port = {"rx_pkts": "rx_packets", "rx_bytes": "rx_bytes", "tx_pkts": "tx_packets", "tx_bytes": "tx_bytes",
                   "rx_csum_bad": "rx_checksum_bad", "rx_copied": "rx_copied", "tx_copied": "tx_copied",
                   "malformed": "rx_malformed"}
    dev = {"ipackets": "device_rx_packets", "imissed": "device_rx_missed", "ierrors": "device_rx_errors",
           "oerrors": "device_tx_errors"}
    for p in stats["ports"]:
        port = p["name"]
        for k, m in simple_port.items():
            if k in p:
                put(f"ports[].{k}", f"sluice_port_{m}_total", p[k], port=port)
        put("ports[].mtu", "sluice_port_mtu_bytes", p["mtu"], port=port)
        for r, v in p["drops"].items():
            put(f"ports[].drops.{r}", "sluice_port_drops_total", v, port=port, reason=r)
        for k, v in p["device"].items():
            put(f"ports[].device.{k}", f"sluice_port_{dev[k]}_total", v, port=port)
        for q in p["queues"]:
            put("ports[].queues[].rx_pkts", "sluice_port_rx_queue_packets_total", q["rx_pkts"], port=port,
                queue=q["queue"])
            put("ports[].queues[].rx_bytes", "sluice_port_rx_queue_bytes_total", q["rx_bytes"], port=port,
                queue=q["queue"])
            if "device_ipackets" in q:
                put("ports[].queues[].device_ipackets", "sluice_port_rx_queue_device_packets_total",
                    q["device_ipackets"], port=port, queue=q["queue"])
        for q in p["tx_queues"]:
            put("ports[].tx_queues[].tx_pkts", "sluice_port_tx_queue_packets_total", q["tx_pkts"], port=port,
                queue=q["queue"])
            put("ports[].tx_queues[].tx_bytes", "sluice_port_tx_queue_bytes_total", q["tx_bytes"], port=port,
                queue=q["queue"])
        for k, v in (p.get("xstats") or {}).items():
            put(f"ports[].xstats.{k}", "sluice_port_xstat", v, port=port, xstat=k)
        if (p.get("link") or {}).get("speed_mbps") is not None:
            put("ports[].link.speed_mbps", "sluice_port_link_speed_mbps", p["link"]["speed_mbps"], port=port)
    nf_simple = {"rx_pkts": "rx_packets_total", "rx_bytes": "rx_bytes_total", "tx_pkts": "tx_packets_total",
                 "tx_bytes": "tx_bytes_total", "kicks": "kicks_total", "lent": "lent_buffers",
                 "queued": "queued_descriptors", "batch": "batch_packets"}
    for n in stats["nfs"]:
        nf = n["name"]
        for k, m in nf_simple.items():
            put(f"nfs[].{k}", f"sluice_nf_{m}", n[k], nf=nf)
        put("nfs[].timeout_us", "sluice_nf_timeout_seconds", n["timeout_us"] / 1e6, nf=nf)
        for r, v in n["drops"].items():
            put(f"nfs[].drops.{r}", "sluice_nf_drops_total", v, nf=nf, reason=r)
        if "supply" in n:
            put("nfs[].supply.held", "sluice_nf_supply_buffers", n["supply"]["held"], nf=nf)
            put("nfs[].supply.given", "sluice_nf_supply_given_total", n["supply"]["given"], nf=nf)
        cum = 0
        for k, v in sorted(((k, v) for k, v in n["counters"].items() if k.startswith("sdk.handler_le_")),
                           key=lambda kv: float("inf") if kv[0].endswith("inf") else int(kv[0].rsplit("_", 1)[1])):
            cum += v
            le = k.rsplit("_", 1)[1]
            put(f"nfs[].counters.{k}", "sluice_nf_handler_seconds_bucket", cum, nf=nf,
                le="+Inf" if le == "inf" else repr(int(le) / 1e9))
        if "sdk.handler_ns_sum" in n["counters"]:
            put("nfs[].counters.sdk.handler_ns_sum", "sluice_nf_handler_seconds_sum",
                n["counters"]["sdk.handler_ns_sum"] / 1e9, nf=nf)
            put("nfs[].counters.sdk.handler_ns_sum", "sluice_nf_handler_seconds_count", cum, nf=nf)
        for k, v in n["counters"].items():
            if not k.startswith("sdk.handler_"):
                put(f"nfs[].counters.{k}", "sluice_nf_stat", v, nf=nf, stat=k)
    for s in stats["services"]:
        for r, v in s["drops"].items():
            put(f"services[].drops.{r}", "sluice_service_drops_total", v, service=s["name"], reason=r)
    for r, v in stats["drops"].items():
        put(f"drops.{r}", "sluice_drops_total", v, reason=r)
    viol = {"invalid_desc": ("sluice_violations_invalid_descriptors_total", "reason"),
            "ring": ("sluice_violations_ring_faults_total", "kind"),
            "attach": ("sluice_violations_attach_refused_total", "reason"),
            "quota": ("sluice_violations_quota_drops_total", "scope")}
    for k, (m, lab) in viol.items():
        for r, v in stats["violations"][k].items():
            put(f"violations.{k}.{r}", m, v, **{lab: r})
    for k, m in {"mbufs": "buffers", "free": "free_buffers", "lent": "lent_buffers"}.items():
        put(f"pool.{k}", f"sluice_pool_{m}", stats["pool"][k])
    for d in stats["domains"]:
        for k, m in {"mbufs": "buffers", "free": "free_buffers", "lent": "lent_buffers", "region_bytes": "region_bytes",
                     "buffer_size": "buffer_bytes", "nfs": "nfs"}.items():
            put(f"domains[].{k}", f"sluice_domain_{m}", d[k], domain=d["name"])
    for c in stats["copies"]:
        for k in ("packets", "bytes", "no_buffer", "too_long", "timed"):
            put(f"copies[].{k}", f"sluice_copies_{k}_total", c[k], src=c["from"], dst=c["to"])
        put("copies[].timed_ns", "sluice_copies_timed_seconds_total", c["timed_ns"] / 1e9, src=c["from"], dst=c["to"])
    pipes = {"open": "sluice_pipes_open", "opened": "sluice_pipes_opened_total", "closed": "sluice_pipes_closed_total",
             "packets": "sluice_pipes_packets_total", "fused": "sluice_pipes_fused_packets_total",
             "close_timeouts": "sluice_pipes_close_timeouts_total"}
    for k, m in pipes.items():
        put(f"pipes.{k}", m, stats["pipes"][k])
    f = stats["flows"]
    put("flows.entries", "sluice_flows_entries", f["entries"])
    put("flows.max", "sluice_flows_max_entries", f["max"])
    put("flows.idle_ms", "sluice_flows_idle_timeout_seconds", f["idle_ms"] / 1000)
    put("flows.pinned", "sluice_flows_pinned", f["pinned"])
    for k in ("hits", "misses", "rechecked", "moved", "expired", "full", "pins", "unpins", "pin_ignored"):
        put(f"flows.{k}", f"sluice_flows_{k}_total", f[k])
    for k in ("busy", "parked", "waiting"):
        put(f"active_set.{k}", "sluice_worker_active_set_nfs", stats["active_set"][k], set=k)
    put("active_set.doorbells", "sluice_worker_doorbells_total", stats["active_set"]["doorbells"])
    put("doorbell_epoll.polls", "sluice_worker_doorbell_polls_total", stats["doorbell_epoll"]["polls"])
    put("doorbell_epoll.events", "sluice_worker_doorbell_events_total", stats["doorbell_epoll"]["events"])
    put("supply_short", "sluice_supply_short_total", stats["supply_short"])
    for k in ("packets", "frames", "copies"):
        put(f"out_set.{k}", f"sluice_out_set_{k}_total", stats["out_set"][k])
    s = stats["nf_sched"]
    put("nf_sched.fifo_nfs", "sluice_nf_sched_fifo_nfs", s["fifo_nfs"])
    put("nf_sched.order_passes", "sluice_nf_sched_order_passes_total", s["order_passes"])
    put("nf_sched.requeued", "sluice_nf_sched_requeued_total", s["requeued"])
    put("nf_sched.threads_aside", "sluice_nf_sched_threads_aside", s["threads_aside"])
    return exp


def start_replay(sluice, workdir, n=N, pipes=False):
    """in.pcap (n UDP frames) -> a (fwd) -> b (count) -> out, the whole pcap through; returns once settled."""
    frames = udp_frames(n, "10.9.0.1", "10.9.0.2", b"x" * 100, lambda i: 1000 + i % 7, 53)
    write_pcap(workdir / "in.pcap", frames)
    cfg = base_config(ports=[{"name": "in", "vdev": f"net_pcap0,rx_pcap={workdir / 'in.pcap'}"},
                             {"name": "out", "vdev": f"net_pcap1,tx_pcap={workdir / 'out.pcap'}"}],
                      chains=[{"name": "c", "nfs": ["a", "b"], "exit": "out"}], nfs=["a", "b"], ring_size=2048)
    sluice.start(cfg)
    sluice.start_nf("fwd", "a")
    sluice.start_nf("count", "b")
    sluice.ok("port_chain_set", port="in", chain="c")
    wait_until(lambda: sluice.port("out")["tx_pkts"] >= n and sluice.stats()["pool"]["lent"] == 0, 30,
               f"{n} frames through")
    return sum(map(len, frames))


def settled_stats(sluice):
    """stats, once two looks 0.3 s apart agree on every traffic counter."""
    def look():
        a = sluice.stats()
        time.sleep(0.3)
        b = sluice.stats()
        key = lambda s: [(p["name"], p["rx_pkts"], p["tx_pkts"]) for p in s["ports"]] + \
            [(n["name"], n["rx_pkts"], n["tx_pkts"], n["counters"]) for n in s["nfs"]]  # noqa: E731
        return b if key(a) == key(b) else None
    return wait_until(look, 10, "the counters to settle")


def metrics_text(sluice):
    r = subprocess.run([sys.executable, "-m", "sluice", "metrics", "--socket-dir", str(sluice.sock_dir)],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python")))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_stats_counter_is_a_series_with_its_value(sluice, workdir):  # noqa: F811
    total = start_replay(sluice, workdir)
    st = settled_stats(sluice)
    m = parse(metrics_text(sluice))
    # the traffic itself, to the packet and byte
    assert series(m, "sluice_port_rx_packets_total", port="in") == N
    assert series(m, "sluice_port_tx_bytes_total", port="out") == total
    assert series(m, "sluice_nf_rx_packets_total", nf="a", service="a") == N
    assert series(m, "sluice_nf_tx_packets_total", nf="b", service="b") == N
    assert series(m, "sluice_up") == 1
    assert series(m, "sluice_nf_info", nf="b", service="b", wakeup="poll") == 1
    assert series(m, "sluice_chain_info", chain="c", nfs="a,b", exit="out") == 1
    assert all(v == 1 for (n, _), v in m.items() if n == "sluice_exporter_collector_up")
    # each NF's process CPU time: the NFs are alive and polling, so it is there and not negative
    assert series(m, "sluice_nf_process_cpu_seconds_total", nf="a") >= 0
    # every number in stats is a series of its own with the same value, or an identity on purpose
    exp = expected(st)
    uncovered = sorted({p for p, _, _ in leaves(st)} - set(exp) - NOT_METRICS - {"ok"})
    assert not uncovered, f"stats counters no metric carries: {uncovered}"
    for path, rows in exp.items():
        for metric, labels, value in rows:
            got = series(m, metric, **labels)
            assert got == pytest.approx(value), f"{path}: {metric}{labels} = {got}, stats says {value}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prom_query(base, q):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_the_exporter_and_agrees_with_stats(sluice, workdir):  # noqa: F811
    assert os.access(PROMETHEUS, os.X_OK) and os.access(PROMTOOL, os.X_OK), \
        "prometheus/promtool missing: make deps installs Debian's prometheus"
    start_replay(sluice, workdir)
    # promtool judges the exposition itself
    text = metrics_text(sluice)
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    eport, pport = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))
    exporter = subprocess.Popen([sys.executable, "-m", "sluice", "metrics", "--socket-dir", str(sluice.sock_dir),
                                 "--listen", f"127.0.0.1:{eport}"], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(workdir / "exporter.log", "wb"), start_new_session=True)
    (workdir / "prom.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "sluice", "static_configs": [{"targets": [f"127.0.0.1:{eport}"]}]}]}))
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={workdir / 'prom.yml'}",
                             f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{pport}"],
                            stdout=subprocess.DEVNULL, stderr=open(workdir / "prometheus.log", "wb"),
                            start_new_session=True)
    base = f"http://127.0.0.1:{pport}"
    try:
        st = settled_stats(sluice)
        # two scrapes after the counters settled: the latest sample is the settled value
        t0 = time.time()

        def scraped():
            r = prom_query(base, "timestamp(sluice_up)")
            return r and float(r[0]["value"][1]) > t0 + 1 and r
        wait_until(scraped, 60, "Prometheus to scrape the exporter after the traffic", interval=0.5)
        up = prom_query(base, 'up{job="sluice"}')
        assert up and up[0]["value"][1] == "1", up
        ports = {r["metric"]["port"]: int(r["value"][1]) for r in prom_query(base, "sluice_port_rx_packets_total")}
        assert ports == {p["name"]: p["rx_pkts"] for p in st["ports"]}
        tx = {r["metric"]["port"]: int(r["value"][1]) for r in prom_query(base, "sluice_port_tx_bytes_total")}
        assert tx == {p["name"]: p["tx_bytes"] for p in st["ports"]}
        nfs = {r["metric"]["nf"]: int(r["value"][1]) for r in prom_query(base, "sluice_nf_tx_packets_total")}
        assert nfs == {n["name"]: n["tx_pkts"] for n in st["nfs"]}
        drops = {r["metric"]["reason"]: int(r["value"][1]) for r in prom_query(base, "sluice_drops_total")}
        assert drops == st["drops"]
        # the count NF's own counters, as labels of one metric
        own = {r["metric"]["stat"]: int(r["value"][1]) for r in prom_query(base, 'sluice_nf_stat{nf="b"}')}
        b_counters = next(n for n in st["nfs"] if n["name"] == "b")["counters"]
        assert own == {k: v for k, v in b_counters.items() if not k.startswith("sdk.handler_")}
        # the SDK's handler-time histogram, as Prometheus sees it: every batch in one bucket
        count = prom_query(base, 'sluice_nf_handler_seconds_count{nf="b"}')
        assert int(count[0]["value"][1]) == sum(v for k, v in b_counters.items() if k.startswith("sdk.handler_le_"))
        assert prom_query(base, 'histogram_quantile(0.5, sluice_nf_handler_seconds_bucket{nf="b"})')
        # and a rate over the run: Prometheus's own arithmetic on our counters
        assert prom_query(base, "sum(sluice_nf_rx_packets_total)")[0]["value"][1] == str(2 * N)
    finally:
        for p in (prom, exporter):
            p.send_signal(signal.SIGTERM)
        for p in (prom, exporter):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def test_sluice_up_serves_metrics_restarts_the_exporter_and_down_stops_it(workdir):  # noqa: F811
    sd = workdir / "s"
    port = free_port()
    cfg = {"sluiced": {"socket_dir": str(sd), "pool_mbufs": 4096, "huge_pages": "auto", "lcores": "0,1"},
           "ports": [{"name": "src", "vdev": "net_null0,size=64,copy=0", "chain": "c"},
                     {"name": "dst", "vdev": "net_null1"}],
           "chains": [{"name": "c", "nfs": ["f"], "exit": "dst"}],
           "nfs": [{"name": "f", "program": "fwd", "wakeup": "block"}],
           "metrics": {"listen": f"127.0.0.1:{port}"}}
    path = workdir / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = sluice_cli(sd, "up", path, "-d", "--build-dir", BUILD, "--attach-timeout", 30, check=False)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        url = f"http://127.0.0.1:{port}/metrics"

        def scrape():
            with urllib.request.urlopen(url, timeout=5) as resp:
                assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                return parse(resp.read().decode())
        m = scrape()
        assert series(m, "sluice_up") == 1 and series(m, "sluice_nf_info", nf="f.0") == 1
        first = series(m, "sluice_port_rx_packets_total", port="src")
        wait_until(lambda: series(scrape(), "sluice_port_rx_packets_total", port="src") > first, 10,
                   "the counters to move between scrapes")
        st = sluice_cli(sd, "status").stdout
        assert f"metrics: http://127.0.0.1:{port}/metrics" in st, st
        pid = int(re.search(r"exporter pid (\d+), running", st).group(1))
        os.kill(pid, signal.SIGKILL)  # the supervisor starts it again, like an NF with restart: always

        def restarted():
            s = sluice_cli(sd, "status").stdout
            m2 = re.search(r"exporter pid (\d+), running", s)
            if not m2 or int(m2.group(1)) == pid:
                return None
            try:
                return series(scrape(), "sluice_up") == 1
            except OSError:
                return None
        wait_until(restarted, 30, "the exporter restarted and serving", interval=0.3)
    finally:
        sluice_cli(sd, "down", check=False)
        left = kill_procs_of(sd)
        assert not left, f"processes left running after `sluice down`: {left}"
    with pytest.raises(OSError):  # nothing listens any more
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_the_socket_services_programs_are_series_of_their_own():
    # the shape of sluice-stackd's `stats` (commands/run.py format_stack_stats reads the same fields)
    stack = {"apps_total": 2, "sockets": 3, "apps": [
        {"name": "redis-server", "pids": [41], "stack": "kernel", "rate_bps": 0, "sockets": 2, "tx_bytes": 900,
         "rx_bytes": 1200, "throttled": 0, "conns_kernel": 5, "conns_shm": 1, "calls": 77},
        {"name": "curl", "pids": [42, 43], "stack": "kernel", "rate_bps": 8000000, "sockets": 1, "tx_bytes": 10,
         "rx_bytes": 20, "throttled": 4, "conns_kernel": 1, "conns_shm": 0, "calls": 9}]}
    stats = {"ports": [], "nfs": [], "_stack": stack}
    m = parse(render(stats, {"version": "x"}))
    assert series(m, "sluice_stack_programs") == 2 and series(m, "sluice_stack_sockets") == 3
    assert series(m, "sluice_stack_program_rx_bytes_total", program="redis-server", pids="41") == 1200
    assert series(m, "sluice_stack_program_connections_total", program="redis-server", module="shm") == 1
    assert series(m, "sluice_stack_program_calls_total", program="curl", pids="42,43") == 9
    assert series(m, "sluice_stack_program_rate_limit_bits_per_second", program="curl") == 8000000
    assert not [k for k in m if k[0] == "sluice_stack_program_rate_limit_bits_per_second"
                and ("program", "redis-server") in k[1]]  # no limit: no series
    assert series(m, "sluice_exporter_collector_up", collector="sockets") == 1
    # without a socket service: no sluice_stack_* at all
    assert not [k for k in parse(render({"ports": [], "nfs": []}, {})) if k[0].startswith("sluice_stack")]
