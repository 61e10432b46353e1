"""The web view (python/sluice/web/, `sluice web`; docs/observability.md "Web view").

Judged by a real browser: Debian's headless Chromium loads the page while gen traffic runs through two
chains, in a network namespace that has nothing but loopback (so the page provably needs nothing from
elsewhere), driven over the DevTools protocol on a pipe. The test reads the rendered DOM, parses it with
html.parser and checks that every chain, service, NF and port `stats` knows is drawn, with its trust domain
and group, and that every rate shown is what sluiced's counters say.

How the rates are judged, without a timing-based tolerance: the page carries the two wall-clock windows in
which `sluice web` read the `stats` it computed them from (`data-window-*`), and the test reads `stats`
itself every few milliseconds meanwhile. Counters only grow, so a test sample answered before a window
opened bounds the counter from below and one asked after it closed bounds it from above; the count the page
shows (rate x seconds) must lie between those bounds -- a bracket one test-sampling gap wide on either
side, a few percent of a second's traffic. It saves the screenshot docs/observability.md shows
(SLUICE_WEB_SCREENSHOT=docs/img/web-view.png to refresh it; by default into the test's temp dir).

Also: the page and /api/state while sluiced is not running (an error, and the server keeps serving), the
command line's --help and its errors, and build_view's rates offline."""

import base64
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from harness import BUILD, kill_procs_of, net, sluice_cli, wait_until, workdir  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
from sluice import config as sconfig  # noqa: E402
from sluice.client import Client  # noqa: E402
from sluice.config import ConfigError  # noqa: E402
from sluice.web.state import build_view  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ENV = dict(os.environ, PYTHONPATH=str(REPO / "python"))
WEB_PORT = 9465  # the default: the browser's namespace has a loopback of its own, so it is free there


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the rendered page, parsed

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.texts = tag, attrs, parent, [], []

    def text(self):
        return "".join(self.texts) + "".join(c.text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def classes(self):
        return set((self.attrs.get("class") or "").split())

    def find(self, cls):
        return [n for n in self.walk() if cls in n.classes()]


class Dom(HTMLParser):
    """The DOM Chromium serialized (outerHTML) as a tree of Nodes; SVG elements come with end tags."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {}, None)
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        n = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.texts.append(data)

    def all(self, attr, value=None):
        return [n for n in self.root.walk() if attr in n.attrs and (value is None or n.attrs[attr] == value)]

    def one(self, attr, value=None):
        found = self.all(attr, value)
        assert len(found) == 1, f"expected one element with {attr}={value!r}, found {len(found)}"
        return found[0]


def num(node, attr):
    v = node.attrs.get(attr, "")
    assert v != "", f"<{node.tag} {node.attrs}> has no {attr}"
    return float(v)


LABEL = re.compile(r"(-?[0-9.]+)([kMG]?)")


def check_label(text, value, what):
    """A label as the page formats it ('3.93M pps', '15.7k', '812') shows `value` to its precision."""
    m = LABEL.search(text)
    assert m, f"{what}: no number in the label {text!r}"
    digits, unit = m.groups()
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[unit]
    decimals = len(digits.partition(".")[2])
    half_step = 0.5 * 10 ** -decimals * scale
    assert abs(float(digits) * scale - value) <= half_step + 1e-6, f"{what}: label {text!r} but data says {value}"


# ---- the browser, over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in, fd 4 out)

class Browser:
    def __init__(self, argv, log_path):
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()

        def pipes_as_3_and_4():
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)
        self.proc = subprocess.Popen(argv, pass_fds=(3, 4), preexec_fn=pipes_as_3_and_4, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"), start_new_session=True)
        os.close(cmd_r)
        os.close(res_w)
        self.log_path = log_path
        self._id = 0
        self._answers = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        page = wait_until(lambda: next((t for t in self.call("Target.getTargets")["targetInfos"]
                                        if t["type"] == "page"), None), 30, "chromium to open the page", interval=0.1)
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                self._answers.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self._answers.put(json.loads(msg))

    def call(self, method, page=False, timeout=30, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if page:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = self._answers.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"chromium did not answer {method} within {timeout} s") from None
            assert m is not None, f"chromium exited: {Path(self.log_path).read_text()[-2000:]}"
            if m.get("id") == self._id:  # anything else is an event
                assert "error" not in m, f"{method}: {m['error']}"
                return m["result"]

    def js(self, expression, await_promise=False):
        r = self.call("Runtime.evaluate", page=True, expression=expression, returnByValue=True,
                      awaitPromise=await_promise)
        assert "exceptionDetails" not in r, f"{expression}: {r['exceptionDetails']}"
        return r["result"].get("value")

    def screenshot(self):
        return base64.b64decode(self.call("Page.captureScreenshot", page=True, format="png")["data"])

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
            self.proc.wait(10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        os.close(self._cmd_w)


def chromium_argv(profile, url):
    assert os.access(CHROMIUM, os.X_OK), "chromium missing: make deps installs Debian's chromium"
    # root needs --no-sandbox; the rest keeps it from phoning home (nothing but loopback to reach anyway)
    return [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
            f"--user-data-dir={profile}", "--window-size=1400,900", "--hide-scrollbars", "--remote-debugging-pipe",
            url]


# ---- stats, sampled densely while the page runs

class StatsSampler:
    """Reads `stats` back to back (a short pause between) in a thread: [(sent, answered, stats)], wall clock."""

    def __init__(self, ctl):
        self.client = Client(ctl, timeout=10)
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error = None

    def _run(self):
        try:
            while not self._stop.is_set():
                sent = time.time()
                st = self.client.call("stats")
                self.samples.append((sent, time.time(), st))
                self._stop.wait(0.02)
        except Exception as e:  # noqa: BLE001 (reported by stop())
            self.error = e

    def start(self):
        self._thread.start()
        return self

    def stop(self, check=True):
        self._stop.set()
        self._thread.join(15)
        self.client.close()
        if check:
            assert self.error is None, f"sampling stats failed: {self.error!r}"

    def wait_past(self, t):
        """Until a sample was asked for after wall-clock time t (the upper bounds of everything before t)."""
        wait_until(lambda: self.error or (self.samples and self.samples[-1][0] >= t), 15, "a stats sample after t")

    def bounds(self, counter, sent, answered):
        """(lowest, highest) value `counter(stats)` can have had while a request sent at `sent` was answered
        at `answered`: from the last sample answered before, and the first asked after."""
        before = [counter(st) for s, a, st in self.samples if a <= sent]
        after = [counter(st) for s, a, st in self.samples if s >= answered]
        assert before and after, "the test's samples do not enclose the page's window"
        return max(before), min(after)


def nf_drops(n):
    return sum((n.get("drops") or {}).values())


def counters(st):
    """{(kind, name): {field: counter function}} for everything the page shows a rate of."""
    out = {}
    for p in st["ports"]:
        name = p["name"]

        def port(field, name=name):
            return lambda s: next(q for q in s["ports"] if q["name"] == name)[field]
        out[("port", name)] = {"data-rx-pps": port("rx_pkts"), "data-tx-pps": port("tx_pkts"),
                               "data-drops-ps": lambda s, name=name: sum(
                                   next(q for q in s["ports"] if q["name"] == name)["drops"].values())}
    for n in st["nfs"]:
        name = n["name"]

        def nf(field, name=name):
            return lambda s: next(q for q in s["nfs"] if q["name"] == name)[field]
        out[("nf", name)] = {"data-rx-pps": nf("rx_pkts"), "data-tx-pps": nf("tx_pkts"),
                             "data-drops-ps": lambda s, name=name: nf_drops(
                                 next(q for q in s["nfs"] if q["name"] == name))}
    for c in st["chains"]:
        for i, svc in enumerate(c["nfs"]):
            out[("edge", f"{c['name']}:{i}")] = {
                # the edge into a service: what its replicas received, and lost on the way in
                "data-pps": lambda s, svc=svc: sum(n["rx_pkts"] for n in s["nfs"] if n["service"] == svc),
                "data-drops-ps": lambda s, svc=svc: sum(nf_drops(n) for n in s["nfs"] if n["service"] == svc) +
                sum(next(v for v in s["services"] if v["name"] == svc)["drops"].values())}
        if c["exit"]:
            out[("edge", f"{c['name']}:{len(c['nfs'])}")] = {
                "data-pps": lambda s, p=c["exit"]: next(q for q in s["ports"] if q["name"] == p)["tx_pkts"],
                "data-drops-ps": lambda s, p=c["exit"]: next(q for q in s["ports"] if q["name"] == p)["drops"]["tx_full"]}
    return out


# ---- the deployment: two chains fed by gen, a group, a trust domain, replicas

CONFIG = {
    "domains": [{"name": "blue", "pool_mbufs": 2048}],
    "ports": [{"name": "src1", "vdev": "net_null0,size=64,copy=0", "chain": "c1"},
              {"name": "dst1", "vdev": "net_null1"},
              {"name": "src2", "vdev": "net_null2,size=64,copy=0", "chain": "c2"},
              {"name": "dst2", "vdev": "net_null3"}],
    "chains": [{"name": "c1", "nfs": ["gen1", "fwd"], "exit": "dst1"},
               {"name": "c2", "nfs": ["gen2", "count"], "exit": "dst2"}],
    # gen paces what the net_null supply hands it; block mode keeps the NFs off a CPU while they wait
    "nfs": [{"name": "gen1", "program": "gen", "wakeup": "block", "args": ["--rate-pps", "20000"], "group": "edge"},
            {"name": "fwd", "program": "fwd", "wakeup": "block", "group": "edge"},
            {"name": "gen2", "program": "gen", "wakeup": "block", "args": ["--rate-pps", "10000"]},
            {"name": "count", "program": "count", "wakeup": "block", "instances": 2, "domain": "blue"}]}


def wait_serving(log_path, proc, timeout=15):
    def serving():
        assert proc.poll() is None, f"sluice web exited: {Path(log_path).read_text()}"
        m = re.search(r"serving (http://\S+/)", Path(log_path).read_text())
        return m and m.group(1)
    return wait_until(serving, timeout, "sluice web to listen")


def stop_web(proc):
    """Ctrl-C, as a user stops it: exits 0."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        return None


def test_chromium_draws_every_chain_and_nf_with_the_rates_stats_gives(workdir, net):  # noqa: F811
    sd = workdir / "s"
    supervised = f"127.0.0.1:{free_port()}"  # `web:`: sluice up runs a second one, on the host's loopback
    cfg = dict(CONFIG, sluiced={"socket_dir": str(sd), "pool_mbufs": 8192, "huge_pages": "auto", "lcores": "0,1"},
               web={"listen": supervised})
    path = workdir / "sluice.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = sluice_cli(sd, "up", path, "-d", "--build-dir", BUILD, "--attach-timeout", 30, check=False)
    sampler = web = browser = rc = None
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        ctl = str(sd / "ctl.sock")
        with Client(ctl) as c:
            first = {p["name"]: p["tx_pkts"] for p in c.stats()["ports"]}
            wait_until(lambda: all(p["tx_pkts"] > first[p["name"]] for p in c.stats()["ports"]
                                   if p["name"].startswith("dst")), 15, "traffic out of both chains")
        status = sluice_cli(sd, "status").stdout
        assert re.search(rf"web view: http://{supervised}/ \(pid \d+, running\)", status), status
        code, _, body = get(f"http://{supervised}/api/state")
        with Client(ctl) as c:
            assert code == 200 and json.loads(body)["sluiced"]["pid"] == c.status()["pid"], body
        # a trace at src2 (chain c2; net_null supplies more than gen2 uses: the packet may be dropped at gen2's
        # full ring, by gen2, or go on through count): the page shows the latest trace
        tr = sluice_cli(sd, "trace", "--port", "src2", "-c", "1", "--json")
        traced = json.loads(tr.stdout)["trace"]
        assert traced["marked"] == 1 and traced["packets"][0]["done"], tr.stdout + tr.stderr
        sampler = StatsSampler(ctl).start()
        ns = net.add_ns("slt-web")
        web_log = workdir / "web.log"
        web = net.popen([sys.executable, "-m", "sluice", "web", "--socket-dir", sd], ns=ns, env=ENV,
                        stdout=subprocess.DEVNULL, stderr=open(web_log, "wb"))
        url = wait_serving(web_log, web)
        assert url == f"http://127.0.0.1:{WEB_PORT}/"
        browser = Browser(["ip", "netns", "exec", ns] + chromium_argv(workdir / "chromium", url),
                          workdir / "chromium.log")
        # the page marks itself ready once it drew live rates twice
        wait_until(lambda: browser.js("document.getElementById('view')?.dataset.ready") == "1", 30,
                   "the page to draw live data", interval=0.2)
        html = browser.js("document.documentElement.outerHTML")
        shot = browser.screenshot()
        sampler.wait_past(time.time())
        sampler.stop()
        st = sampler.samples[-1][2]
        out = Path(os.environ.get("SLUICE_WEB_SCREENSHOT") or workdir / "web-view.png")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(shot)
        assert shot.startswith(b"\x89PNG")

        dom = Dom(html)
        # every chain, service, NF and port of stats is drawn
        assert {n.attrs["data-chain"] for n in dom.root.find("chain")} == {c["name"] for c in st["chains"]}
        assert {n.attrs["data-service"] for n in dom.root.find("service")} == {s["name"] for s in st["services"]}
        assert {n.attrs["data-nf"] for n in dom.root.find("replica")} == {n["name"] for n in st["nfs"]} == \
            {"gen1.0", "fwd.0", "gen2.0", "count.0", "count.1"}
        assert {n.attrs["data-port"] for n in dom.root.find("port")} == {p["name"] for p in st["ports"]}
        rows = {n.attrs["data-chain"]: n for n in dom.root.find("chain")}
        for c in st["chains"]:
            row = rows[c["name"]]
            assert [n.attrs["data-service"] for n in row.find("service")] == c["nfs"]
            roles = {n.attrs["data-port"]: n.attrs["data-role"] for n in row.find("port")}
            assert roles == {p["name"]: "entry" for p in st["ports"] if p["chain"] == c["name"]} | {c["exit"]: "exit"}
        # the trust domain as a region around count, the group on its members
        blue = [n for n in dom.root.find("domain")]
        assert [n.attrs["data-domain"] for n in blue] == ["blue"]
        assert [n.attrs["data-service"] for n in blue[0].parent.find("service") if n.attrs["data-domain"] == "blue"] \
            == ["count"]
        groups = {n.attrs["data-nf"]: n.attrs["data-group"] for n in dom.root.find("replica")}
        assert groups == {"gen1.0": "edge.0", "fwd.0": "edge.0", "gen2.0": "", "count.0": "", "count.1": ""}
        assert dom.all("data-group-legend", "edge.0")

        # CPU per NF: every NF has one; a group's members show their one process's
        cpu = {n.attrs["data-nf"]: num(n, "data-cpu-pct") for n in dom.root.find("replica")}
        assert all(0 <= v <= 100 * os.cpu_count() for v in cpu.values()), cpu
        assert cpu["gen1.0"] == cpu["fwd.0"]

        # every rate shown is a counter's growth between the two stats answers the page names
        view = dom.one("id", "view")
        seconds = num(view, "data-window-seconds")
        w_from = (num(view, "data-window-from-sent"), num(view, "data-window-from-answered"))
        w_to = (num(view, "data-window-to-sent"), num(view, "data-window-to-answered"))
        assert w_from[1] < w_to[0]
        # the reads happened within those windows, so they were this far apart (1 ms for the clocks: the server
        # times with the monotonic clock, the windows are wall-clock)
        shortest, longest = w_to[0] - w_from[1], w_to[1] - w_from[0]
        assert shortest - 0.001 <= seconds <= longest + 0.001, (seconds, w_from, w_to)
        shown = []
        for n in dom.root.find("port"):
            shown.append((("port", n.attrs["data-port"]), n))
        for n in dom.root.find("replica"):
            shown.append((("nf", n.attrs["data-nf"]), n))
        for n in dom.root.find("edge"):
            shown.append((("edge", n.attrs["data-edge"]), n))
        expected = counters(st)
        assert {k for k, _ in shown} == set(expected), "an edge, port or NF drawn that stats does not explain"
        checked = 0
        for key, node in shown:
            for attr, counter in expected[key].items():
                rate = num(node, attr)
                lo0, hi0 = sampler.bounds(counter, *w_from)
                lo1, hi1 = sampler.bounds(counter, *w_to)
                # at least the least growth over the longest time, at most the most over the shortest (and
                # 0.001 for the page's rounding)
                slowest, fastest = (lo1 - hi0) / (longest + 0.001), (hi1 - lo0) / (shortest - 0.001)
                assert slowest - 0.001 <= rate <= fastest + 0.001, \
                    (f"{key} {attr}: the page shows {rate:.1f}/s, the counters say {slowest:.1f}..{fastest:.1f}/s "
                     f"between its two stats answers")
                checked += 1
        assert checked >= 30
        # traffic flows on both chains' edges, and the labels say what the data attributes do
        for node in dom.root.find("edge"):
            assert num(node, "data-pps") > 0, node.attrs
            check_label(node.find("edge-rate")[0].text(), num(node, "data-pps"), node.attrs["data-edge"])
            check_label(node.find("edge-drops")[0].text(), num(node, "data-drops-ps"), node.attrs["data-edge"])
        for node in dom.root.find("port"):
            check_label(node.find("rx")[0].text(), num(node, "data-rx-pps"), node.attrs["data-port"])
            check_label(node.find("tx")[0].text(), num(node, "data-tx-pps"), node.attrs["data-port"])
        for node in dom.root.find("replica"):
            check_label(node.find("nf-rate")[0].text(), num(node, "data-rx-pps"), node.attrs["data-nf"])
        assert re.fullmatch(r"updated \d\d:\d\d:\d\d", dom.one("id", "status").text())
        # the latest trace, step by step, as `sluice trace` printed it
        body = dom.one("id", "trace-body")
        assert body.attrs["data-trace"] == "1"
        steps = [f"{st_['step']}: {st_['text']}" for st_ in traced["packets"][0]["steps"]]
        assert steps[0] == "rx: port src2 queue 0" and steps[-1].startswith(("drop: ", "tx: port dst2")), steps
        for x in steps:
            assert x in body.text(), (x, body.text())

        # sluiced stops: the page says so and keeps asking; the server answers with the error
        sluice_cli(sd, "down")
        err = wait_until(lambda: browser.js("(e => e.hidden ? null : e.textContent)(document.getElementById('error'))"),
                         15, "the page to show that sluiced is gone", interval=0.2)
        assert "sluiced is not answering" in err and "retrying" in err, err
        # (first "closed the control connection", then, asking again, "not running")
        state = wait_until(lambda: (lambda s: "not running" in s["error"] and s)(
            browser.js("fetch('/api/state').then(r => r.json())", await_promise=True)), 10,
            "the server to find sluiced gone", interval=0.3)
        assert state["ok"] is False and state["last_ok"] < state["updated"], state
        assert web.poll() is None
    finally:
        if browser:
            browser.close()
        if sampler:
            sampler.stop(check=False)
        if web:
            rc = stop_web(web)
        sluice_cli(sd, "down", check=False)
        left = kill_procs_of(sd)
        assert not left, f"processes left running after `sluice down`: {left}"
    assert rc == 0, f"sluice web exited {rc} on Ctrl-C: {web_log.read_text()}"
    with pytest.raises(OSError):  # `sluice down` stopped the supervised one
        urllib.request.urlopen(f"http://{supervised}/", timeout=2)


def get(url, host=None):
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_without_sluiced_the_server_answers_with_the_error(tmp_path):
    port = free_port()
    log = tmp_path / "web.log"
    web = subprocess.Popen([sys.executable, "-m", "sluice", "web", "--socket-dir", str(tmp_path), "--listen",
                            f"127.0.0.1:{port}"], env=ENV, stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
                           start_new_session=True)
    try:
        base = wait_serving(log, web)
        assert base == f"http://127.0.0.1:{port}/"
        for _ in range(2):  # and again: it keeps serving
            code, headers, body = get(base + "api/state")
            state = json.loads(body)
            assert code == 200 and headers["Content-Type"] == "application/json"
            assert state["ok"] is False and state["error"] == \
                f"sluiced is not running (no socket at {tmp_path / 'ctl.sock'})", state
        code, _, body = get(base + "api/trace")
        assert code == 200 and json.loads(body) == {
            "trace": None, "error": f"sluiced is not running (no socket at {tmp_path / 'ctl.sock'})"}
        # the page: same-origin files only (it works offline)
        code, headers, page = get(base)
        assert code == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        refs = re.findall(rb'(?:src|href)="([^"]*)"', page)
        assert refs and all(r.startswith(b"/") and not r.startswith(b"//") for r in refs), refs
        for name in (b"/web.js", b"/web.css"):
            assert name in refs
            code, _, body = get(base + name.decode()[1:])
            assert code == 200 and body
            # the SVG namespace is a name, never fetched; nothing else may point away
            assert not re.findall(rb"https?://(?!www\.w3\.org/2000/svg)", body), name
        assert get(base + "nosuch")[0] == 404
        # a name that is not loopback in Host: a page elsewhere rebinding its name to 127.0.0.1 gets nothing
        code, _, body = get(base + "api/state", host=f"sluice.example.com:{port}")
        assert code == 403 and b"loopback" in body
        assert get(base + "api/state", host=f"localhost:{port}")[0] == 200
        assert web.poll() is None
    finally:
        rc = stop_web(web)
    assert rc == 0, log.read_text()


@pytest.mark.parametrize("value,field,fragment", [
    ({"listen": "nowhere"}, "web.listen", "expected HOST:PORT, e.g. 127.0.0.1:9465"),
    ({"listen": "127.0.0.1:9464"}, "web.listen", "is metrics.listen too"),
    ({"port": 1}, "web.port", "unknown key"),
    ("yes", "web", "must be true, false or a mapping"),
])
def test_config_errors_name_the_field(value, field, fragment):
    data = {"ports": [{"name": "p", "vdev": "net_null0"}], "metrics": True, "web": value}
    with pytest.raises(ConfigError) as e:
        sconfig.normalize(data, check_programs=False)
    assert e.value.path == field and fragment in str(e.value)


def test_config_web_defaults_to_loopback_and_stays_out_of_sluiceds_json():
    data = {"ports": [{"name": "p", "vdev": "net_null0"}], "web": None}
    cfg = sconfig.normalize(data, check_programs=False)
    assert cfg["web"] == {"listen": "127.0.0.1:9465"}
    assert "web" not in json.loads(sconfig.to_sluiced_json(cfg))
    assert "web" not in sconfig.normalize(dict(data, web=False), check_programs=False)


def test_help_and_listen_errors(run_sluice):
    r = run_sluice("web", "--help")
    assert r.returncode == 0 and "127.0.0.1:9465" in r.stdout and "Ctrl-C" in r.stdout
    assert "web" in run_sluice("--help").stdout
    r = run_sluice("web", "--listen", "9465")
    assert r.returncode == 2 and r.stderr.strip() == \
        "sluice: --listen '9465': expected HOST:PORT, e.g. 127.0.0.1:9465", r.stderr
    r = run_sluice("web", "--listen", "127.0.0.1:70000")
    assert r.returncode == 2 and "port must be 1..65535" in r.stderr, r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        r = run_sluice("web", "--listen", addr, timeout=30)
    assert r.returncode == 1 and f"--listen {addr}: cannot serve there: Address already in use" in r.stderr, r.stderr


def sample(t, stats, cpu=None, pid=1, groups=None):
    return {"sent": t - 0.001, "answered": t, "mono": t, "stats": stats, "status": {"pid": pid, "worker_lcores": [1]},
            "cpu": cpu or {}, "groups": groups or {}}


def test_build_view_rates_edges_and_what_no_chain_draws():
    def stats(rx, nf_rx, fwd_rx, ring_full, nf_gone):
        return {
            "ports": [{"name": "in", "chain": "c", "rx_pkts": rx, "tx_pkts": 0, "rx_bytes": 64 * rx, "tx_bytes": 0,
                       "drops": {"tx_full": 0, "no_path": 0}},
                      {"name": "out", "chain": None, "rx_pkts": 0, "tx_pkts": fwd_rx, "rx_bytes": 0,
                       "tx_bytes": 64 * fwd_rx, "drops": {"tx_full": 3, "no_path": 0}},
                      {"name": "mirror", "chain": None, "rx_pkts": 0, "tx_pkts": 0, "rx_bytes": 0, "tx_bytes": 0,
                       "drops": {}}],
            "nfs": [{"name": "a.0", "service": "a", "pid": 10, "rx_pkts": nf_rx, "tx_pkts": nf_rx,
                     "drops": {"ring_full": ring_full}, "domain": "default"},
                    {"name": "a.1", "service": "a", "pid": 11, "rx_pkts": nf_rx, "tx_pkts": nf_rx,
                     "drops": {"ring_full": 0}, "domain": "default"},
                    {"name": "f.0", "service": "f", "pid": 10, "rx_pkts": fwd_rx, "tx_pkts": fwd_rx, "drops": {},
                     "domain": "blue"},
                    {"name": "idle.0", "service": "idle", "pid": 12, "rx_pkts": 0, "tx_pkts": 0, "drops": {}}],
            "services": [{"name": "a", "policy": "flow", "instances": ["a.0", "a.1"], "drops": {"nf_gone": nf_gone}},
                         {"name": "f", "policy": "flow", "instances": ["f.0"], "drops": {}},
                         {"name": "idle", "policy": "flow", "instances": ["idle.0"], "drops": {}}],
            "chains": [{"name": "c", "nfs": ["a", "f"], "exit": "out"}, {"name": "r", "nfs": ["f"], "exit": None}],
            "domains": [{"name": "default"}, {"name": "blue"}], "copies": [], "drops": {"ring_full": ring_full}}

    prev = sample(100.0, stats(1000, 400, 300, 5, 2), cpu={10: 1.0, 11: 2.0, 12: 0.0}, groups={"a.0": "g.0", "f.0": "g.0"})
    # a.1 restarted under its name: its counter went back; its CPU is a new process's, not comparable
    cur = sample(102.0, stats(3000, 1400, 1300, 25, 2), cpu={10: 1.5, 11: 0.1, 12: 0.0},
                 groups={"a.0": "g.0", "f.0": "g.0"})
    cur["stats"]["nfs"][1].update(pid=13, rx_pkts=100, tx_pkts=100)
    v = build_view(prev, cur)
    assert v["window"] == {"from": {"sent": 99.999, "answered": 100.0}, "to": {"sent": 101.999, "answered": 102.0},
                           "seconds": 2.0}
    ports = {p["name"]: p for p in v["ports"]}
    assert ports["in"]["rx_pps"] == 1000 and ports["in"]["rx_mbps"] == 1000 * 64 * 8 / 1e6
    nfs = {n["name"]: n for n in v["nfs"]}
    assert nfs["a.0"]["rx_pps"] == 500 and nfs["a.0"]["drops_ps"] == 10 and nfs["a.0"]["cpu_pct"] == 25
    assert nfs["a.1"]["rx_pps"] == 50 and nfs["a.1"]["cpu_pct"] is None  # counted 100 since its restart
    assert nfs["a.0"]["group"] == "g.0" and nfs["a.1"]["group"] is None
    c, r = v["chains"]
    assert c["entry_ports"] == ["in"] and [e["pps"] for e in c["edges"]] == [550, 500, 500]
    assert [e["drops_ps"] for e in c["edges"]] == [10, 0, 0]
    assert c["edges"][0]["from"] == ["port:in"] and c["edges"][2]["to"] == "port:out"
    assert r["entry_ports"] == [] and r["edges"][0]["from"] == ["rules"] and r["edges"][-1]["to"] == "drop"
    assert v["unchained"] == ["idle"]
    svcs = {s["name"]: s for s in v["services"]}
    assert svcs["f"]["domain"] == "blue" and svcs["a"]["replicas"] == ["a.0", "a.1"]
    assert v["groups"] == [{"name": "g.0", "members": ["a.0", "f.0"], "pid": 10}]
    assert v["drops"] == {"ring_full": 10}
    # one sample: everything drawn, no rate yet
    first = build_view(None, prev)
    assert first["window"] is None and all(p["rx_pps"] is None for p in first["ports"])
    assert first["chains"][0]["edges"][0]["pps"] is None
