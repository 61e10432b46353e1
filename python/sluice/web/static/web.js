// The web view's page: polls /api/state and /api/trace every second and draws the deployment as SVG.
// Plain JavaScript, no library, nothing loaded from elsewhere (docs/observability.md "Web view").
//
// Every drawn thing carries data-* attributes with the exact numbers behind its labels (data-chain,
// data-service, data-nf, data-port, data-edge; data-rx-pps, data-tx-pps, data-pps, data-drops-ps,
// data-cpu-pct), and #view the window the rates are over: tests read them from the DOM.
"use strict";

const POLL_MS = 1000;
const SVGNS = "http://www.w3.org/2000/svg";
const PORT_W = 160, PORT_H = 74, BOX_W = 260, GAP = 130, LINE = 17, BOX_HEAD = 40;
const LEFT = 16, TOP = 12, ROW_GAP = 26, ROW_LABEL = 20, DOMAIN_PAD = 12;
const DOMAIN_FILL = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#e0f2f1"];
const GROUP_COLOR = ["#7c3aed", "#0891b2", "#ca8a04", "#db2777", "#059669", "#9333ea"];

let liveRenders = 0;   // views drawn with rates (the first sample has none)
let lastGood = null;   // time of the last view sluiced answered for

// ---- formatting

function fmtCount(v) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return v.toFixed(0);
}
const fmtPps = (v) => fmtCount(v) + " pps";
const fmtDrops = (v) => "drops " + fmtCount(v) + "/s";
const fmtCpu = (v) => (v === null || v === undefined) ? "cpu –" : "cpu " + v.toFixed(0) + "%";
const attrNum = (v) => (v === null || v === undefined) ? "" : String(Math.round(v * 1000) / 1000);
const clock = (t) => new Date(t * 1000).toTimeString().slice(0, 8);

function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? d + "d" : "") + (d || h ? h + "h" : "") + m + "m" + String(s % 60).padStart(2, "0") + "s";
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

// ---- SVG helpers

function svg(tag, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function titled(parent, full) {  // a tooltip with the whole text of something clipped
  svg("title", {}, parent, full);
}

function rateAttrs(o, keys) {
  const out = {};
  for (const [attr, key] of keys) out[attr] = attrNum(o[key]);
  return out;
}

// ---- nodes

function drawPort(g, p, role, x, y) {
  const n = svg("g", Object.assign({class: "port", "data-port": p.name, "data-role": role},
                rateAttrs(p, [["data-rx-pps", "rx_pps"], ["data-tx-pps", "tx_pps"], ["data-drops-ps", "drops_ps"]])), g);
  svg("rect", {x, y, width: PORT_W, height: PORT_H, rx: 6}, n);
  titled(n, `port ${p.name}: ${p.vdev || ""}`);
  svg("text", {x: x + 8, y: y + 17, class: "title"}, n, clip(p.name, 15));
  svg("text", {x: x + PORT_W - 8, y: y + 17, class: "small", "text-anchor": "end"}, n,
      p.link_up === false ? "link down" : "port");
  svg("text", {x: x + 8, y: y + 35, class: "rx"}, n, "rx " + fmtPps(p.rx_pps));
  svg("text", {x: x + 8, y: y + 51, class: "tx"}, n, "tx " + fmtPps(p.tx_pps));
  svg("text", {x: x + 8, y: y + 67, class: "drops small" + (p.drops_ps > 0 ? " nonzero" : "")}, n,
      fmtDrops(p.drops_ps));
  return {x, y, w: PORT_W, h: PORT_H};
}

function drawPseudo(g, label, kind, x, y) {  // "rules" (a chain no port feeds) or "drop" (no exit)
  const h = 34;
  const n = svg("g", {class: "pseudo", "data-pseudo": kind}, g);
  svg("rect", {x, y, width: PORT_W, height: h, rx: 6}, n);
  svg("text", {x: x + 8, y: y + 21, class: "small"}, n, label);
  return {x, y, w: PORT_W, h};
}

function boxHeight(svc) {
  return BOX_HEAD + Math.max(1, svc.replicas.length) * LINE + 6;
}

function drawService(g, svc, chain, x, y, view) {
  const n = svg("g", {class: "service" + (svc.saturated ? " saturated" : ""), "data-service": svc.name,
                      "data-chain": chain, "data-domain": svc.domain || "",
                      "data-rx-pps": attrNum(svc.rx_pps), "data-drops-ps": attrNum(svc.drops_ps)}, g);
  const h = boxHeight(svc);
  svg("rect", {x, y, width: BOX_W, height: h, rx: 5, class: "box"}, n);
  titled(n, `service ${svc.name}: policy ${svc.policy}, domain ${svc.domain || "?"}` +
            (svc.saturated ? ", saturated (every replica overloaded)" : ""));
  svg("text", {x: x + 8, y: y + 17, class: "title"}, n, clip(svc.name, 22));
  svg("text", {x: x + BOX_W - 8, y: y + 17, class: "small", "text-anchor": "end"}, n,
      `${svc.replicas.length} replica${svc.replicas.length === 1 ? "" : "s"}` + (svc.saturated ? " · saturated" : ""));
  svg("text", {x: x + 8, y: y + 32, class: "small"}, n, `policy ${svc.policy || "?"}`);
  if (!svc.replicas.length) {
    svg("text", {x: x + 8, y: y + BOX_HEAD + 12, class: "small drops nonzero"}, n, "no replica attached");
  }
  svc.replicas.forEach((name, i) => {
    const nf = view.nfByName[name] || {name};
    const ly = y + BOX_HEAD + 12 + i * LINE;
    const r = svg("g", Object.assign({class: "replica", "data-nf": name, "data-group": nf.group || ""},
                  rateAttrs(nf, [["data-rx-pps", "rx_pps"], ["data-tx-pps", "tx_pps"], ["data-drops-ps", "drops_ps"],
                                 ["data-cpu-pct", "cpu_pct"]])), n);
    titled(r, `${name} (pid ${nf.pid}, ${nf.wakeup}${nf.group ? ", in group process " + nf.group : ""}): ` +
              `rx ${fmtPps(nf.rx_pps)}, tx ${fmtPps(nf.tx_pps)}, ${fmtDrops(nf.drops_ps)}, ${fmtCpu(nf.cpu_pct)}` +
              (nf.group ? " (the group's process)" : ""));
    let nx = x + 8;
    if (nf.group) {
      svg("rect", {x: nx, y: ly - 9, width: 4, height: 11, fill: GROUP_COLOR[view.groupIndex[nf.group] % 6]}, r);
      nx += 8;
    }
    svg("text", {x: nx, y: ly, class: "nf-name"}, r, clip(name, 14) + (nf.group ? " [" + clip(nf.group, 8) + "]" : ""));
    svg("text", {x: x + BOX_W - 62, y: ly, "text-anchor": "end", class: "nf-rate"}, r, fmtPps(nf.rx_pps));
    svg("text", {x: x + BOX_W - 8, y: ly, "text-anchor": "end", class: "small nf-cpu"}, r, fmtCpu(nf.cpu_pct));
  });
  return {x, y, w: BOX_W, h};
}

function drawEdge(g, id, edge, from, to, labelled) {
  const flowing = edge.pps > 0;
  const e = svg("g", {class: "edge" + (flowing ? " flowing" : ""), "data-edge": id, "data-from": edge.from.join(","),
                      "data-to": edge.to, "data-pps": attrNum(edge.pps), "data-drops-ps": attrNum(edge.drops_ps)}, g);
  const x1 = from.x + from.w, y1 = from.y + from.h / 2, x2 = to.x - 2, y2 = to.y + to.h / 2;
  const mx = (x1 + x2) / 2;
  const width = flowing ? Math.min(1.5 + Math.log10(edge.pps + 1) * 0.6, 6) : 1.5;
  svg("path", {d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "stroke-width": width.toFixed(2),
               "marker-end": flowing ? "url(#arrow-flowing)" : "url(#arrow)"}, e);
  if (labelled) {
    const lx = to.x - GAP / 2, ly = y2;
    if (edge.pps !== null || edge.to !== "drop") {
      svg("text", {x: lx, y: ly - 7, "text-anchor": "middle", class: "edge-rate"}, e, fmtPps(edge.pps));
      svg("text", {x: lx, y: ly + 15, "text-anchor": "middle",
                   class: "edge-drops" + (edge.drops_ps > 0 ? " nonzero" : "")}, e, fmtDrops(edge.drops_ps));
    }
  }
}

function drawDomains(g, row, rowY, rowH, view) {
  // consecutive services of one trust domain other than `default` (which holds the ports) share a region
  const hops = row.hops;
  let i = 0;
  while (i < hops.length) {
    const dom = (view.svcByName[hops[i]] || {}).domain;
    let j = i;
    while (j + 1 < hops.length && (view.svcByName[hops[j + 1]] || {}).domain === dom) j++;
    if (dom && dom !== "default") {
      const x = hopX(i) - DOMAIN_PAD, w = (j - i + 1) * BOX_W + (j - i) * GAP + 2 * DOMAIN_PAD;
      const d = svg("g", {class: "domain", "data-domain": dom}, g);
      svg("rect", {x, y: rowY - 4, width: w, height: rowH + 8, rx: 10,
                   fill: DOMAIN_FILL[view.domainIndex[dom] % DOMAIN_FILL.length]}, d);
      svg("text", {x: x + 8, y: rowY + 9}, d, "domain " + dom);
    }
    i = j + 1;
  }
}

const hopX = (i) => LEFT + PORT_W + GAP + i * (BOX_W + GAP);

// ---- the whole graph

function index(list, key) {
  const out = {};
  for (const x of list || []) out[x[key]] = x;
  return out;
}

function draw(s) {
  const view = {
    nfByName: index(s.nfs, "name"), svcByName: index(s.services, "name"), portByName: index(s.ports, "name"),
    domainIndex: {}, groupIndex: {},
  };
  (s.domains || []).forEach((d, i) => { view.domainIndex[d.name] = i; });
  (s.groups || []).forEach((g, i) => { view.groupIndex[g.name] = i; });

  const rows = s.chains.map((c) => ({chain: c, hops: c.hops}));
  // what no chain draws: services steered to by rules only, ports no chain enters or leaves by
  const used = new Set();
  for (const c of s.chains) {
    c.entry_ports.forEach((p) => used.add(p));
    if (c.exit) used.add(c.exit);
  }
  const loosePorts = s.ports.filter((p) => !used.has(p.name));
  if (s.unchained.length || loosePorts.length) rows.push({chain: null, hops: s.unchained, ports: loosePorts});

  const maxHops = Math.max(1, ...rows.map((r) => r.hops.length));
  const rightX = hopX(maxHops);
  const root = document.getElementById("graph");
  const fresh = svg("svg", {id: "graph"});
  const defs = svg("defs", {}, fresh);
  for (const [id, cls] of [["arrow", "arrow"], ["arrow-flowing", "arrow flowing"]]) {
    const m = svg("marker", {id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
                             orient: "auto-start-reverse", markerUnits: "userSpaceOnUse"}, defs);
    svg("path", {d: "M0,0 L10,5 L0,10 z", class: cls}, m);
  }

  let y = TOP;
  rows.forEach((row) => {
    const c = row.chain;
    const entries = c ? c.entry_ports.map((p) => view.portByName[p]).filter(Boolean) : (row.ports || []);
    const entriesH = Math.max(1, entries.length) * (PORT_H + 10) - 10;
    const boxesH = Math.max(0, ...row.hops.map((h) => boxHeight(view.svcByName[h] || {replicas: []})));
    const rowH = Math.max(entriesH, boxesH, PORT_H) + 2 * DOMAIN_PAD;
    const g = svg("g", c ? {class: "chain", "data-chain": c.name} : {class: "outside", "data-outside": "1"}, fresh);
    svg("text", {x: LEFT, y: y + 13, class: "row-label"}, g,
        c ? `chain ${c.name}` : "outside any chain (steered by rules, idle, or TX only)");
    const top = y + ROW_LABEL;
    const mid = top + rowH / 2;
    drawDomains(g, row, top, rowH, view);

    // left: the ports that feed this chain (or "rules")
    const sources = [];
    if (entries.length) {
      let py = mid - entriesH / 2;
      for (const p of entries) {
        sources.push(drawPort(g, p, c ? "entry" : "other", LEFT, py));
        py += PORT_H + 10;
      }
    } else if (c) {
      sources.push(drawPseudo(g, "steered here by rules", "rules", LEFT, mid - 17));
    }
    // middle: a box per service, replicas inside
    const boxes = row.hops.map((h, i) => {
      const svc = view.svcByName[h] || {name: h, replicas: [], policy: "?"};
      return drawService(g, svc, c ? c.name : "", hopX(i), mid - boxHeight(svc) / 2, view);
    });
    if (c) {
      // right: the exit port (or packets drop as no_path)
      const exitPort = c.exit && view.portByName[c.exit];
      const sink = exitPort ? drawPort(g, exitPort, "exit", rightX, mid - PORT_H / 2)
                            : drawPseudo(g, "no exit: dropped (no_path)", "drop", rightX, mid - 17);
      const nodes = boxes.concat([sink]);
      c.edges.forEach((edge, i) => {
        const froms = i === 0 ? sources : [boxes[i - 1]];
        froms.forEach((from, k) => drawEdge(g, `${c.name}:${i}`, edge, from, nodes[i], k === 0));
      });
    }
    y = top + rowH + ROW_GAP;
  });
  fresh.setAttribute("width", rightX + PORT_W + LEFT);
  fresh.setAttribute("height", y);
  root.replaceWith(fresh);
  document.getElementById("graph-wrap").hidden = false;

  drawLegend(s, view);
  document.getElementById("sluiced").textContent =
    `sluiced ${s.sluiced.version || "?"} · pid ${s.sluiced.pid} · up ${duration(s.sluiced.uptime_s)}` +
    (s.sluiced.workers ? ` · ${s.sluiced.workers} worker${s.sluiced.workers === 1 ? "" : "s"}` : "");
}

function drawLegend(s, view) {
  const box = document.getElementById("legend");
  box.textContent = "";
  const row = (parent, cls) => {
    const d = document.createElement("div");
    d.className = "legend-row" + (cls ? " " + cls : "");
    parent.appendChild(d);
    return d;
  };
  const swatch = (parent, cls) => {
    const sp = document.createElement("span");
    sp.className = "swatch " + cls;
    parent.appendChild(sp);
  };
  const h = document.createElement("h2");
  h.textContent = "Trust domains, groups, drops";
  box.appendChild(h);
  for (const d of s.domains) {
    const r = row(box);
    r.dataset.domainLegend = d.name;
    swatch(r, d.name === "default" ? "" : "d" + (view.domainIndex[d.name] % 6));
    r.append(`domain ${d.name}: ${d.mbufs} buffers of ${d.buffer_size} B, ${d.free} free, ${d.lent} lent; ` +
             `${d.nfs} NF${d.nfs === 1 ? "" : "s"}` + (d.name === "default" ? " (and the ports)" : ""));
  }
  for (const c of s.copies) {
    row(box, "muted").append(`copies ${c.from} → ${c.to}: ${fmtPps(c.pps)}`);
  }
  for (const g of s.groups) {
    const r = row(box);
    r.dataset.groupLegend = g.name;
    swatch(r, "g" + (view.groupIndex[g.name] % 6));
    r.append(`group process ${g.name} (pid ${g.pid}): ${g.members.join(", ")} — CPU figures are the process's`);
  }
  const drops = Object.entries(s.drops).filter(([, v]) => v > 0);
  const r = row(box);
  r.dataset.dropsLegend = "1";
  if (drops.length) {
    r.className += " drop-nonzero";
    r.append("drops/s by reason: " + drops.map(([k, v]) => `${k} ${fmtCount(v)}`).join(", "));
  } else {
    r.append(s.window ? "no drops in the last second" : "drops: waiting for a second sample");
  }
}

// ---- status, errors, polling

function setStatus(text, state) {
  const st = document.getElementById("status");
  st.textContent = text;
  st.dataset.state = state;
}

function showError(text) {
  const e = document.getElementById("error");
  e.textContent = text + " — retrying every second" +
    (lastGood ? `; the graph shows the last answer, from ${clock(lastGood)}` : "");
  e.hidden = false;
  const g = document.getElementById("graph");
  if (g) g.classList.add("stale");
  setStatus("not updated since " + (lastGood ? clock(lastGood) : "start"), "error");
}

function markView(s) {
  const v = document.getElementById("view");
  v.dataset.updated = s.updated;
  v.dataset.windowSeconds = s.window ? s.window.seconds : "";
  v.dataset.windowFromSent = s.window ? s.window.from.sent : "";
  v.dataset.windowFromAnswered = s.window ? s.window.from.answered : "";
  v.dataset.windowToSent = s.window ? s.window.to.sent : "";
  v.dataset.windowToAnswered = s.window ? s.window.to.answered : "";
  if (s.window) liveRenders++;
  v.dataset.renders = liveRenders;
  if (liveRenders >= 2) v.dataset.ready = "1";  // live data drawn twice: a test may read the page now
}

async function pollState() {
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    if (!r.ok) throw new Error(`it answered HTTP ${r.status}`);
    const s = await r.json();
    if (s.ok) {
      draw(s);
      lastGood = s.updated;
      markView(s);
      document.getElementById("error").hidden = true;
      setStatus("updated " + clock(s.updated), "ok");
    } else {
      lastGood = s.last_ok || lastGood;
      showError("sluiced is not answering: " + s.error);
    }
  } catch (e) {
    showError(`sluice web is not answering (${e.message}); is it still running?`);
  }
}

function add(parent, tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  parent.appendChild(e);
  return e;
}

function renderTrace(t) {
  const body = document.getElementById("trace-body");
  body.textContent = "";
  body.dataset.trace = t.trace ? "1" : "0";
  if (t.trace && Array.isArray(t.trace.packets)) {
    // sluiced's trace (`sluice trace`): each marked packet and the steps it took, timed from its arrival
    const tr = t.trace;
    add(body, "p", `filter ${tr.filter ? JSON.stringify(tr.filter) : "(every packet)"}: ` +
                   `${tr.marked} of ${tr.want} packets traced`);
    tr.packets.forEach((p, i) => {
      const d = add(body, "div", undefined, "trace-packet");
      d.dataset.tracePacket = i;
      add(d, "strong", `packet ${i + 1}: ${p.len} B` + (p.done ? "" : " (still in flight when the trace stopped)"));
      const ol = add(d, "ol");
      for (const s of p.steps || []) {
        add(ol, "li", `+${(s.t_ns / 1000).toFixed(1)} µs  ${s.step}: ${s.text}`);
      }
    });
    const raw = add(body, "details");
    add(raw, "summary", "as JSON");
    add(raw, "pre", JSON.stringify(tr, null, 2));
  } else if (t.trace) {
    add(body, "pre", JSON.stringify(t.trace, null, 2));
  } else {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = t.error ? "no trace: " + t.error : "no trace taken yet (run `sluice trace`)";
    body.appendChild(p);
  }
}

async function pollTrace() {
  try {
    const r = await fetch("/api/trace", {cache: "no-store"});
    if (r.ok) renderTrace(await r.json());
  } catch (e) {
    // the state poll reports an unreachable server
  }
}

async function loop() {
  await pollState();
  await pollTrace();
  setTimeout(loop, POLL_MS);
}

loop();
