// graywire status page: polls the service's JSON API and redraws. No dependencies, no build.
// Every piece of data reaches the DOM through textContent or a DOM property, never as HTML.
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  const REFRESH_S = Math.max(2, Number(params.get("refresh")) || 10);
  const HEALTH = ["ok", "warning", "critical"];
  const SEVERITY_RANK = { critical: 3, warning: 2, info: 1 };
  const GROUPS_SHOWN = 8; // incident groups before "show more"
  const DETAILS_FETCHED = 12; // incidents whose findings (for the sparkline) are fetched
  const SILENCE_FOR = ["1h", "4h", "12h", "1d", "7d"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  let flags = { stale: 1, down: 2, degraded: 4, no_data: 8 };
  let capabilities = null;
  let pageInfo = { grafana_port_url: null, switch_rails: {} };
  let lastGrid = null;
  let gridShape = null;
  let showAllRows = params.get("grid") === "all";
  let showAllIncidents = false;
  let selectedKey = null;
  let query = "";
  let timer = null;
  let lastView = null; // what the incidents were drawn from, to redraw after an action
  const opened = new Set(); // <details> a person opened: kept open across refreshes
  const details = new Map(); // incident id -> {stamp, findings}, for the sparklines
  let silencing = null; // incident id whose silence form is open: its list is not redrawn

  // -- small helpers ------------------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "data") Object.assign(node.dataset, v);
      else if (k.startsWith("aria-")) node.setAttribute(k, String(v));
      else node[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  function replace(id, ...children) {
    const target = document.getElementById(id);
    target.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  }

  // A <details> that stays open across redraws once a person opened it.
  function foldable(key, summary, ...body) {
    const d = el("details", { open: opened.has(key), data: { fold: key } }, el("summary", { text: summary }), ...body);
    d.addEventListener("toggle", () => { if (d.open) opened.add(key); else opened.delete(key); });
    return d;
  }

  // Tokens live in this tab only (sessionStorage): a reader token when auth.read_open is false,
  // an operator token for acknowledge and silence, each asked for once and sent as a bearer.
  const TOKEN_KEY = "graywire.reader-token";
  const OPERATOR_KEY = "graywire.operator-token";
  class Unauthorized extends Error {}

  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    const reader = sessionStorage.getItem(TOKEN_KEY);
    const token = reader || sessionStorage.getItem(OPERATOR_KEY); // an operator may read too
    if (token) headers.Authorization = `Bearer ${token}`;
    const r = await fetch(path, { headers, cache: "no-store" });
    if (r.status === 401) {
      if (token) sessionStorage.removeItem(reader ? TOKEN_KEY : OPERATOR_KEY);
      throw new Unauthorized(token ? "that token was refused" : "this service needs a reader token");
    }
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}${await detailOf(r)}`);
    return r.json();
  }

  async function detailOf(r) {
    try {
      const d = (await r.json()).detail;
      return d ? " " + (typeof d === "string" ? d : JSON.stringify(d)) : "";
    } catch (e) {
      return ""; // not JSON
    }
  }

  // -- formatting ---------------------------------------------------------------------------
  const finite = (v) => typeof v === "number" && isFinite(v);

  function fmtBps(v) {
    if (!finite(v)) return "–";
    if (v >= 1e12) return `${+(v / 1e12).toFixed(2)} Tb/s`;
    if (v >= 1e9) return `${+(v / 1e9).toFixed(1)} Gb/s`;
    if (v >= 1e6) return `${+(v / 1e6).toFixed(1)} Mb/s`;
    return `${v} b/s`;
  }

  function fmtNum(v) {
    if (!finite(v)) return v === null || v === undefined ? "–" : String(v);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return String(+v.toPrecision(3));
  }

  const fmtSci = (v) => (finite(v) ? v.toExponential(1) : "–");
  const fmtPct = (v) => (finite(v) ? `${+(v * 100).toFixed(Math.abs(v) < 0.1 ? 1 : 0)}%` : "–");
  const fmtSigned = (v) => (finite(v) ? `${v >= 0 ? "+" : ""}${fmtPct(v)}` : "–");

  function fmtSeconds(v) {
    if (!finite(v)) return "–";
    const a = Math.abs(v);
    if (a >= 120) return `${+(v / 60).toFixed(1)} min`;
    if (a >= 1) return `${+v.toPrecision(3)} s`;
    if (a >= 1e-3) return `${+(v * 1e3).toPrecision(3)} ms`;
    return `${+(v * 1e6).toPrecision(3)} µs`;
  }

  function fmtSpan(seconds) {
    if (!finite(seconds)) return "–";
    if (seconds % 3600 === 0 && seconds >= 3600) return `${seconds / 3600} h`;
    if (seconds % 60 === 0 && seconds >= 60) return `${seconds / 60} min`;
    return `${seconds} s`;
  }

  // Absolute times name their zone: UTC, as the API and the logs. The title gives local time.
  function fmtTime(iso) {
    if (!iso) return "–";
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    return `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
  }

  function localTime(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    return `${d.toLocaleString()} (${zone})`;
  }

  function ago(iso) {
    if (!iso) return "never";
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (!isFinite(s)) return String(iso);
    if (s < 60) return `${Math.max(0, s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400 * 2) return `${(s / 3600).toFixed(1)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  // "2026-12-01 17:04:12 UTC (5 min ago)"
  function when(iso, cls) {
    if (!iso) return el("span", { class: cls, text: "–" });
    return el("span", { class: cls || "when", title: localTime(iso), data: { time: iso } },
      fmtTime(iso), el("span", { class: "ago", text: ` (${ago(iso)})` }));
  }

  function fmtValue(key, v) {
    if (typeof v === "number" && /_bps$/.test(key)) return fmtBps(v);
    if (v === null) return "null";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(4);
    return String(v);
  }

  // Every value of the evidence as "path = value", for whoever wants the raw numbers.
  function flatten(obj, prefix, out, depth) {
    if (out.length >= 80) return out;
    if (obj !== null && typeof obj === "object" && depth < 4) {
      const entries = Array.isArray(obj) ? obj.map((v, i) => [String(i), v]) : Object.entries(obj);
      if (entries.length === 0) out.push([prefix, Array.isArray(obj) ? "[]" : "{}"]);
      for (const [k, v] of entries) flatten(v, prefix ? `${prefix}.${k}` : k, out, depth + 1);
    } else if (obj !== null && typeof obj === "object") {
      out.push([prefix, JSON.stringify(obj)]);
    } else {
      out.push([prefix, fmtValue(prefix, obj)]);
    }
    return out;
  }

  function portPath(key) {
    return "api/v1/ports/" + key.split("/").map(encodeURIComponent).join("/");
  }

  function safeHref(url) {
    if (typeof url !== "string") return null;
    return /^(https?:\/\/|\/(?!\/))/i.test(url) ? url : null;
  }

  function table(headers, rows) {
    return el("table", {},
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows));
  }

  const list = (v) => (Array.isArray(v) ? v : v === null || v === undefined ? [] : [v]);
  function fewOf(items, n) {
    const xs = list(items).map(String);
    return xs.length > n ? `${xs.slice(0, n).join(", ")} and ${xs.length - n} more` : xs.join(", ");
  }

  // -- evidence for people ------------------------------------------------------------------
  // What detectors put in their findings' evidence, as labelled lines: expected vs actual, the
  // peers' baseline, since when. Keys no rule knows stay in "all evidence".
  function reading(r) {
    if (!r || typeof r !== "object") return "no reading this poll";
    const parts = [];
    if ("speed_bps" in r) parts.push(r.speed_bps === null ? "speed unknown" : fmtBps(r.speed_bps));
    if ("width" in r) parts.push(r.width === null ? "width unknown" : `${r.width}x`);
    const rest = Object.entries(r).filter(([k]) => k !== "speed_bps" && k !== "width");
    for (const [k, v] of rest) parts.push(`${k.replace(/_/g, " ")} ${typeof v === "object" ? JSON.stringify(v) : fmtValue(k, v)}`);
    return parts.join(", ");
  }

  function plain(v) {
    if (Array.isArray(v)) return fewOf(v.map(plain), 6);
    if (v && typeof v === "object") return reading(v);
    return fmtValue("", v);
  }

  function expectedActual(ev, add) {
    const exp = ev.expected;
    const act = ev.actual;
    if (exp !== undefined) {
      const from = ev.expected_from ? ` (from ${ev.expected_from === "peers" ? "peer consensus" : ev.expected_from})` : "";
      if (exp && typeof exp === "object" && "a_port" in exp) add("Expected", `cable ${exp.a_port} ↔ ${exp.b_port}`, ["expected"]);
      else add("Expected", plain(exp) + from, ["expected", "expected_from"]);
    }
    if (act !== undefined) {
      if (act && typeof act === "object" && !Array.isArray(act) && !("speed_bps" in act || "width" in act)) {
        // Per port, as the link detector reads both ends.
        const ends = Object.entries(act).map(([port, r]) => `${port}: ${reading(r)}`);
        add("Actual", ends.join(" · "), ["actual"]);
      } else {
        add("Actual", plain(act), ["actual"]);
      }
    }
  }

  function vsPeers(label, value, fmt, peer, peerLabel, extra) {
    let s = fmt(value);
    if (finite(peer)) s += ` vs ${peerLabel || "peers' median"} ${fmt(peer)}`;
    if (extra) s += ` ${extra}`;
    return s;
  }

  function describe(ev) {
    const lines = [];
    const used = new Set();
    const add = (label, value, keys) => {
      if (value === null || value === undefined || value === "") return;
      lines.push([label, value]);
      for (const k of keys || []) used.add(k);
    };
    const has = (k) => ev[k] !== undefined && ev[k] !== null;
    const ratio = has("ratio_to_peers") ? `(${fmtNum(ev.ratio_to_peers)}× peers)` : "";

    expectedActual(ev, add);
    if (has("duration_seconds")) {
      const slow = has("slowdown_vs_peers") ? `(${fmtSigned(ev.slowdown_vs_peers)})` : "";
      add("Channel time", vsPeers("", ev.duration_seconds, fmtSeconds, ev.peer_median_seconds, "peers' median", slow),
        ["duration_seconds", "peer_median_seconds", "slowdown_vs_peers"]);
    }
    if (has("pre_fec_ber")) {
      let s = fmtSci(ev.pre_fec_ber);
      if (finite(ev.pre_fec_ber_baseline)) s += ` vs its baseline ${fmtSci(ev.pre_fec_ber_baseline)}`;
      if (finite(ev.peer_median_pre_fec_ber)) s += `, peers' median ${fmtSci(ev.peer_median_pre_fec_ber)}`;
      if (ev.pre_fec_from) s += ` (${ev.pre_fec_from})`;
      add("Pre-FEC BER", s, ["pre_fec_ber", "pre_fec_ber_baseline", "peer_median_pre_fec_ber", "pre_fec_from"]);
    }
    if (has("symbol_ber") && finite(ev.symbol_ber)) add("Symbol BER", fmtSci(ev.symbol_ber), ["symbol_ber"]);
    if (ev.thresholds && ev.thresholds.pre_fec) {
      const t = ev.thresholds.pre_fec;
      add("Levels", `pre-FEC warning ${fmtSci(t.warning)}, error ${fmtSci(t.error)}` +
        (ev.thresholds.source ? ` (${ev.thresholds.source})` : ""), ["thresholds"]);
    }
    if (finite(ev.uncorrectable_blocks_in_window) && ev.uncorrectable_blocks_in_window > 0) {
      add("Uncorrectable FEC blocks", `${fmtNum(ev.uncorrectable_blocks_in_window)} in ${fmtSpan(ev.window_seconds)}`,
        ["uncorrectable_blocks_in_window"]);
    }
    if (has("tx_pause_share")) {
      add("Time paused", `${fmtPct(ev.tx_pause_share)} on priority ${ev.priority ?? "?"}` +
        (finite(ev.threshold) ? ` (a storm from ${fmtPct(ev.threshold)})` : ""), ["tx_pause_share", "priority", "threshold"]);
    }
    if (has("marked_fraction")) {
      add("ECN-marked packets", vsPeers("", ev.marked_fraction, fmtPct, ev.peer_median_fraction, "peers' median", ratio) +
        (finite(ev.marks_per_second) ? `, ${fmtNum(ev.marks_per_second)} marks/s` : ""),
        ["marked_fraction", "peer_median_fraction", "ratio_to_peers", "marks_per_second"]);
    }
    if (has("xmit_wait_ticks_per_second")) {
      const fmtTicks = (v) => `${fmtNum(v)} ticks/s`;
      add("Credit wait", vsPeers("", ev.xmit_wait_ticks_per_second, fmtTicks, ev.peer_median_ticks_per_second, "peers' median", ratio) +
        (finite(ev.wait_share) ? `, ${fmtPct(ev.wait_share)} of the time` : ""),
        ["xmit_wait_ticks_per_second", "peer_median_ticks_per_second", "ratio_to_peers", "wait_share"]);
    }
    for (const side of ["sender_send_wait", "receiver_recv_wait"]) {
      const k = `${side}_seconds_per_gib`;
      if (has(k)) {
        add(side === "sender_send_wait" ? "Send wait" : "Receive wait",
          vsPeers("", ev[k], (v) => `${fmtSeconds(v)}/GiB`, ev[`peers_median_${k}`], "other hops' median"),
          [k, `peers_median_${k}`]);
      }
    }
    if (has("before_median_seconds") && has("after_median_seconds")) {
      add("Step time", `${fmtSeconds(ev.before_median_seconds)} before, ${fmtSeconds(ev.after_median_seconds)} now` +
        (finite(ev.shift) ? ` (${fmtSigned(ev.shift)})` : ""), ["before_median_seconds", "after_median_seconds", "shift"]);
    }
    if (has("late_seconds")) add("Arrives late by", fmtSeconds(ev.late_seconds), ["late_seconds"]);
    if (has("windowed_slowdown") && !used.has("slowdown_vs_peers")) {
      add("Slower than peers", `${fmtSigned(ev.windowed_slowdown)} over the last ${ev.window_polls ?? "few"} polls`,
        ["windowed_slowdown"]);
    }
    if (has("outages_in_window")) {
      const times = list(ev.outage_times);
      add("Outages", `${ev.outages_in_window} in ${fmtSpan(ev.window_seconds)}` +
        (times.length ? `, the last at ${fmtTime(times[times.length - 1])}` : ""), ["outages_in_window", "outage_times"]);
    }
    if (has("isolation_score")) {
      add("Outlier score", `${fmtNum(ev.isolation_score)} (threshold ${fmtNum(ev.threshold)})` +
        (ev.drivers ? `, driven by ${plain(ev.drivers)}` : ""), ["isolation_score", "threshold", "drivers"]);
    }
    if (has("robust_z") || has("robust_z_median")) {
      add("Score vs peers", `robust z ${fmtNum(ev.robust_z ?? ev.robust_z_median)}`, ["robust_z", "robust_z_median"]);
    }
    if (ev.counters && typeof ev.counters === "object" && !Array.isArray(ev.counters)) {
      add("Saturated counters", Object.entries(ev.counters).map(([k, v]) => `${k} ${plain(v)}`).join(", "), ["counters"]);
    }
    if (has("actual_leaf")) {
      add("Cabled to", `${ev.actual_leaf}${ev.actual_leaf_rail !== null && ev.actual_leaf_rail !== undefined ? ` (rail ${ev.actual_leaf_rail})` : ""}` +
        (ev.expected_leaf ? `, expected ${ev.expected_leaf}` : ""), ["actual_leaf", "actual_leaf_rail", "expected_leaf"]);
    }
    for (const [k, label] of [["since", "Since"], ["change_time", "Changed at"]]) {
      if (has(k)) add(label, when(ev[k]), [k]);
    }
    for (const [k, label] of [["peer_port", "Other end"], ["paused_peer", "Paused peer"],
      ["waiting_port", "Waiting port"], ["port_measured", "Measured on"], ["leaf", "Leaf"]]) {
      if (has(k)) add(label, String(ev[k]), [k]);
    }
    if (ev.stored_late) add("Stored late", `held since ${fmtTime(ev.stored_late.unstored_since)} (database unavailable)`, ["stored_late"]);
    return lines;
  }

  // Who is hurt: the job (NCCL evidence), the hosts (evidence, the incident's node, the node
  // verdicts that cite it), and what the drain policy does about them.
  function affected(inc, ctx) {
    const ev = inc.evidence || {};
    const names = new Set(list(ev.hosts).map(String));
    if (ev.host) names.add(String(ev.host));
    if (inc.node) names.add(inc.node);
    for (const v of ctx.verdicts.get(inc.id) || []) names.add(v.node);
    const isSwitch = (n) => ["leaf", "spine", "core"].includes(ctx.roles.get(n));
    const hosts = new Set([...names].filter((n) => !isSwitch(n)));
    const switches = [...names].filter(isSwitch);
    const parts = [];
    if (ev.job) {
      const where = [];
      if (ev.rank !== undefined) where.push(`rank ${ev.rank}`);
      else if (ev.ranks) where.push(`ranks ${fewOf(ev.ranks, 8)}`);
      if (ev.channel !== undefined && ev.channel !== null) where.push(`channel ${ev.channel}`);
      else if (ev.channels && ev.pattern === "column") where.push(`channels ${fewOf(ev.channels, 8)}`);
      // The job's badge opens its line in the Jobs section (its findings by phase).
      parts.push(el("span", { class: "mono" },
        el("a", { class: "job-link", href: "#jobs-panel", data: { job: String(ev.job) }, title: "this job's findings by phase", text: `job ${ev.job}` }),
        where.length ? ` (${where.join(", ")})` : ""));
    } else if (ev.communicator) {
      parts.push(el("span", { class: "mono", text: `communicator ${ev.communicator}` }));
    }
    const hostList = [...hosts];
    if (hostList.length) {
      const shown = hostList.slice(0, 6).map((h) => {
        const d = ctx.drains.get(h);
        return el("span", { class: "host mono", data: { host: h } }, h,
          d ? el("span", { class: `chip ${d.action}`, text: d.shadow ? `${d.action}, shadow` : d.action }) : null);
      });
      const more = hostList.length > 6 ? ` and ${hostList.length - 6} more` : "";
      parts.push(el("span", {}, hostList.length === 1 ? "host " : "hosts ", ...joinNodes(shown, ", "), more));
    }
    if (switches.length) {
      parts.push(el("span", {}, switches.length === 1 ? "switch " : "switches ", el("span", { class: "mono", text: fewOf(switches, 4) })));
    }
    if (!parts.length) return null;
    return el("span", { class: "affects" }, ...joinNodes(parts, " · "));
  }

  function joinNodes(nodes, sep) {
    const out = [];
    nodes.forEach((n, i) => { if (i) out.push(sep); out.push(n); });
    return out;
  }

  // The detector's score over the incident's findings, as a step line from the first finding
  // to now (findings mark changes: firing at a score, cleared at 0, and the level holds between).
  function sparkline(inc) {
    const d = details.get(inc.id);
    if (!d) return el("span", { class: "spark pending", text: "" });
    const pts = d.findings.slice().reverse()
      .map((f) => [new Date(f.time).getTime(), f.status === "cleared" ? 0 : Number(f.score) || 0])
      .filter(([t]) => isFinite(t));
    if (!pts.length) return el("span", { class: "spark", text: "no findings stored" });
    const now = Date.now();
    const t0 = pts[0][0];
    const t1 = Math.max(now, pts[pts.length - 1][0] + 1);
    const vmax = Math.max(...pts.map((p) => p[1]), 1e-300);
    const vmin = Math.min(0, ...pts.map((p) => p[1]));
    const W = 180, H = 30, P = 2;
    const x = (t) => P + ((t - t0) / (t1 - t0)) * (W - 2 * P);
    const y = (v) => H - P - ((v - vmin) / (vmax - vmin || 1)) * (H - 2 * P);
    const line = [];
    pts.forEach(([t, v], i) => {
      if (i) line.push(`${x(t).toFixed(1)},${y(pts[i - 1][1]).toFixed(1)}`);
      line.push(`${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    });
    const last = pts[pts.length - 1];
    line.push(`${x(t1).toFixed(1)},${y(last[1]).toFixed(1)}`);
    const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `score ${fmtNum(last[1])}, ${pts.length} findings` });
    chart.append(svg("polyline", { points: line.join(" "), fill: "none", class: "spark-line" }));
    for (const [t, v] of pts) chart.append(svg("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2, class: v ? "spark-dot" : "spark-dot cleared" }));
    const title = svg("title");
    title.textContent = pts.map(([t, v]) => `${fmtTime(new Date(t).toISOString())}: ${fmtNum(v)}`).join("\n");
    chart.append(title);
    return el("span", { class: "spark" }, chart,
      el("span", { class: "spark-caption", text: `detector score ${fmtNum(last[1])} · ${pts.length} finding${pts.length === 1 ? "" : "s"}` }));
  }

  function grafanaHref(inc) {
    const base = safeHref(pageInfo.grafana_port_url);
    if (!base || !(inc.port || inc.node)) return null;
    const node = inc.node || inc.port.split("/")[0];
    const q = new URLSearchParams({ "var-node": node });
    if (inc.port) q.set("var-port", inc.port);
    return `${base}${base.includes("?") ? "&" : "?"}${q}`;
  }

  // -- incidents: cause first, effects folded under it --------------------------------------
  // An incident's cause is its caused_by, or the incident whose effects name it; a chain folds
  // into its root, a cycle folds nothing. Groups sort by their worst severity, then by age
  // (oldest first), so a critical is never below a warning whatever their ages.
  function groupIncidents(items) {
    const byId = new Map(items.map((i) => [i.id, i]));
    const parent = new Map();
    for (const i of items) {
      if (i.caused_by !== null && i.caused_by !== undefined && i.caused_by !== i.id && byId.has(i.caused_by)) parent.set(i.id, i.caused_by);
    }
    for (const i of items) {
      for (const e of list(i.effects)) if (e !== i.id && byId.has(e) && !parent.has(e)) parent.set(e, i.id);
    }
    const rootOf = (id) => {
      const seen = new Set([id]);
      let r = id;
      while (parent.has(r)) {
        r = parent.get(r);
        if (seen.has(r)) return id;
        seen.add(r);
      }
      return r;
    };
    const groups = new Map();
    for (const i of items) {
      const r = rootOf(i.id);
      if (!groups.has(r)) groups.set(r, { cause: byId.get(r), effects: [] });
      if (r !== i.id) groups.get(r).effects.push(i);
    }
    const rank = (i) => SEVERITY_RANK[i.severity] || 0;
    const age = (i) => new Date(i.opened_at).getTime() || 0;
    const order = (a, b) => rank(b) - rank(a) || age(a) - age(b) || a.id - b.id;
    const out = [...groups.values()];
    for (const g of out) {
      g.effects.sort(order);
      g.worst = Math.max(rank(g.cause), ...g.effects.map(rank));
      g.open = [g.cause, ...g.effects].some((i) => i.status === "open");
    }
    return out.sort((a, b) => b.worst - a.worst || order(a.cause, b.cause));
  }

  function incidentCard(inc, ctx, effectOf) {
    const ev = inc.evidence || {};
    const where = inc.link || inc.port || inc.node || inc.entity;
    const silence = ctx.silences.get(`${inc.kind}\u0000${inc.entity}`);
    const href = grafanaHref(inc);
    const actions = el("span", { class: "actions" },
      href ? el("a", { class: "grafana", href, target: "_blank", rel: "noopener noreferrer", text: "Grafana", title: "This port on Grafana's Port detail dashboard" }) : null,
      inc.status === "open" ? el("button", { type: "button", class: "act", text: "Acknowledge", data: { act: "ack", id: inc.id } }) : null,
      el("button", { type: "button", class: "act", text: silence ? "Silence longer" : "Silence", data: { act: "silence", id: inc.id } }));
    const head = el("div", { class: "inc-head" },
      el("span", { class: `sev ${inc.severity}`, text: inc.severity }),
      el("span", { class: "kind mono", text: inc.kind }),
      el("span", { class: "where mono", text: where.replace("<->", " ↔ "), title: inc.entity }),
      inc.status === "acknowledged" ? el("span", { class: "badge", text: "acknowledged" }) : null,
      silence ? el("span", { class: "badge silenced", text: `silenced until ${fmtTime(silence.expires_at)}`, title: `${silence.created_by}: ${silence.reason}` }) : null,
      effectOf === undefined && inc.caused_by && !ctx.byId.has(inc.caused_by) ? el("span", { class: "badge", text: `caused by #${inc.caused_by}` }) : null,
      el("span", { class: "inc-id mono", text: `#${inc.id}`, title: `${inc.detector}; fired ${inc.finding_count} time${inc.finding_count === 1 ? "" : "s"}` }),
      actions);
    const facts = [
      ["Opened", when(inc.opened_at)],
      ...(inc.reopen_count ? [["Reopened", `${inc.reopen_count} time${inc.reopen_count === 1 ? "" : "s"}`]] : []),
      ["Affects", affected(inc, ctx)],
      ...describe(ev),
    ].filter(([, v]) => v !== null && v !== undefined);
    const dl = el("dl", { class: "facts" },
      ...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
    const raw = flatten(ev, "", [], 0);
    const card = el("article", { class: `incident sev-${inc.severity}${inc.status === "acknowledged" ? " acked" : ""}`, data: { incident: inc.id, port: inc.port || "" } },
      head,
      el("div", { class: "inc-summary", text: inc.summary }),
      el("div", { class: "inc-body" }, dl,
        el("div", { class: "inc-side" }, el("div", { class: "spark-slot", data: { spark: inc.id } }, sparkline(inc)),
          el("div", { class: "seen", title: fmtTime(inc.last_seen_at) }, `${inc.detector} · ${inc.status === "resolved" ? "last finding" : "still open · last finding"} ${ago(inc.last_seen_at)}`))),
      raw.length ? foldable(`raw:${inc.id}`, `all evidence (${raw.length} values)`,
        el("ul", { class: "evidence" }, ...raw.map(([k, v]) => el("li", { text: `${k} = ${v}` })))) : null,
      silencing === inc.id ? silenceForm(inc) : null);
    return card;
  }

  function groupCard(g, ctx) {
    const card = incidentCard(g.cause, ctx);
    card.classList.add("group");
    if (g.effects.length) {
      card.dataset.effects = String(g.effects.length);
      const worst = g.effects.reduce((w, e) => Math.max(w, SEVERITY_RANK[e.severity] || 0), 0);
      const label = `${g.effects.length} effect${g.effects.length === 1 ? "" : "s"} of this cause` +
        (worst > (SEVERITY_RANK[g.cause.severity] || 0) ? " (worse than the cause)" : "");
      card.append(foldable(`effects:${g.cause.id}`, label,
        el("div", { class: "effects" }, ...g.effects.map((e) => incidentCard(e, ctx, g.cause.id)))));
    }
    return card;
  }

  function context(open, acked, nodes, drains, silences, grid) {
    const all = [...open, ...acked];
    const verdicts = new Map();
    for (const v of (nodes && nodes.items) || []) {
      for (const id of v.incident_ids || []) {
        if (!verdicts.has(id)) verdicts.set(id, []);
        verdicts.get(id).push(v);
      }
    }
    const roles = new Map((grid ? grid.rows : []).map((r) => [r.node, r.role]));
    for (const v of (nodes && nodes.items) || []) roles.set(v.node, v.role);
    return {
      byId: new Map(all.map((i) => [i.id, i])),
      verdicts,
      roles,
      drains: new Map((drains || []).map((d) => [d.node, d])),
      silences: new Map((silences || []).map((s) => [`${s.kind}\u0000${s.entity}`, s])),
    };
  }

  function renderIncidents(view) {
    lastView = view;
    if (silencing === null) drawIncidents(view); // else a person is typing a reason: wait
  }

  function drawIncidents(view) {
    const { open, acked, truncated } = view;
    const ctx = context(open, acked, view.nodes, view.drains, view.silences, view.grid);
    const groups = groupIncidents([...open, ...acked]);
    const live = groups.filter((g) => g.open);
    const done = groups.filter((g) => !g.open);
    document.getElementById("incident-count").textContent =
      `(${open.length}${truncated ? "+" : ""} open${acked.length ? `, ${acked.length} acknowledged` : ""})`;
    if (!groups.length) {
      replace("incidents", el("p", { class: "empty", text: "No open incidents." }));
      return;
    }
    const shown = showAllIncidents ? live : live.slice(0, GROUPS_SHOWN);
    const out = shown.map((g) => groupCard(g, ctx));
    if (!live.length) out.push(el("p", { class: "empty", text: "No open incidents; the acknowledged ones are below." }));
    if (live.length > shown.length || (showAllIncidents && live.length > GROUPS_SHOWN)) {
      const hidden = live.slice(shown.length);
      out.push(el("button", { type: "button", class: "more", id: "incidents-more",
        text: showAllIncidents ? "show fewer" : `show ${hidden.length} more` }));
    }
    if (done.length) {
      out.push(foldable("acked", `${done.length} acknowledged`, el("div", {}, ...done.map((g) => groupCard(g, ctx)))));
    }
    replace("incidents", ...out);
    fetchDetails([...shown, ...done].map((g) => g.cause).slice(0, DETAILS_FETCHED));
  }

  // The findings behind the sparklines: fetched again only when the incident changed.
  async function fetchDetails(incidents) {
    await Promise.all(incidents.map(async (inc) => {
      const stamp = `${inc.last_seen_at}|${inc.finding_count}|${inc.reopen_count}|${inc.status}`;
      const have = details.get(inc.id);
      if (!have || have.stamp !== stamp) {
        try {
          const d = await getJSON(`api/v1/incidents/${inc.id}`);
          details.set(inc.id, { stamp, findings: d.findings || [] });
        } catch (e) {
          return; // the sparkline stays empty; the next refresh tries again
        }
      }
      for (const slot of document.querySelectorAll(`[data-spark="${inc.id}"]`)) slot.replaceChildren(sparkline(inc));
    }));
  }

  // -- jobs ---------------------------------------------------------------------------------
  // A job's line (worst severity, counts by phase) from /api/v1/jobs; opened, its findings by
  // phase of its life from /api/v1/jobs/{job}, fetched again at each refresh while it is open.
  const PHASES = ["start_up", "data_path", "steady_state", "fault_path", "fabric"];
  const PHASE_NAME = { start_up: "start-up", data_path: "data path", steady_state: "steady state", fault_path: "fault path", fabric: "fabric" };
  const jobDetails = new Map(); // job -> its detail answer, for the jobs a person opened

  function jobIncident(inc) {
    const where = inc.link || inc.port || inc.node || inc.entity;
    return el("article", { class: `job-incident sev-${inc.severity}`, data: { incident: inc.id } },
      el("div", { class: "inc-head" },
        el("span", { class: `sev ${inc.severity}`, text: inc.severity }),
        el("span", { class: "kind mono", text: inc.kind }),
        el("span", { class: "where mono", text: where.replace("<->", " ↔ "), title: inc.entity }),
        inc.status === "acknowledged" ? el("span", { class: "badge", text: "acknowledged" }) : null,
        inc.caused_by ? el("a", { class: "badge goto", href: "#incidents-panel", data: { goto: inc.caused_by }, text: `caused by #${inc.caused_by}`, title: inc.cause_reason || "" }) : null,
        list(inc.effects).length ? el("span", { class: "badge", text: `cause of ${fewOf(inc.effects.map((e) => `#${e}`), 4)}` }) : null,
        el("a", { class: "inc-id mono goto", href: "#incidents-panel", data: { goto: inc.id }, text: `#${inc.id}` })),
      el("div", { class: "inc-summary", text: inc.summary }),
      el("div", { class: "seen" }, "opened ", when(inc.opened_at), ` · last finding ${ago(inc.last_seen_at)}`));
  }

  function jobPhase(phase, label, items, none) {
    return el("section", { class: "phase", data: { phase } },
      el("h3", {}, label, el("span", { class: "count", text: ` (${items.length})` })),
      items.length ? el("div", {}, ...items.map(jobIncident)) : el("p", { class: "empty", text: none }));
  }

  function jobBody(d) {
    if (!d) return el("div", { class: "job-body" }, el("p", { class: "hint", text: "loading…" }));
    return el("div", { class: "job-body" },
      ...d.phases.map((p) => jobPhase(p.phase, p.label, p.incidents, "nothing found")),
      jobPhase("fabric", "fabric under the job", d.fabric, "no link or port incident on its hosts"),
      el("p", { class: "hint", text: `hosts named by its findings: ${fewOf(d.hosts, 16) || "none"}` }));
  }

  function renderJobs(body) {
    const count = document.getElementById("job-count");
    if (!body) {
      count.textContent = "";
      replace("jobs", el("p", { class: "empty", text: "The jobs view is unavailable on this service." }));
      return;
    }
    count.textContent = `(${body.count})`;
    if (!body.items.length) {
      replace("jobs", el("p", { class: "empty", text: "No job has active findings." }));
      return;
    }
    replace("jobs", ...body.items.map((j) => {
      const key = `job:${j.job}`;
      const d = el("details", { class: `job sev-${j.worst_severity}`, open: opened.has(key), data: { fold: key, job: j.job } },
        el("summary", {},
          el("span", { class: `sev ${j.worst_severity}`, text: j.worst_severity }), " ",
          el("span", { class: "job-name mono", text: j.job }), " ",
          ...PHASES.filter((p) => j.counts[p]).map((p) => el("span", { class: "badge", data: { phase: p }, text: `${PHASE_NAME[p]} ${j.counts[p]}` })),
          el("span", { class: "hint", text: ` · ${j.hosts.length} host${j.hosts.length === 1 ? "" : "s"}` })),
        jobBody(jobDetails.get(j.job)));
      d.addEventListener("toggle", () => {
        if (!d.open) opened.delete(key);
        else if (!opened.has(key)) { opened.add(key); loadJob(j.job); }
      });
      return d;
    }));
    for (const j of body.items) if (opened.has(`job:${j.job}`)) loadJob(j.job);
  }

  async function loadJob(job) {
    try {
      jobDetails.set(job, await getJSON(`api/v1/jobs/${encodeURIComponent(job)}`));
    } catch (e) {
      jobDetails.delete(job); // gone since the list was read: the next refresh drops its line
      return;
    }
    for (const d of document.querySelectorAll("#jobs details.job")) {
      if (d.dataset.job === job) d.querySelector(".job-body").replaceWith(jobBody(jobDetails.get(job)));
    }
  }

  function openJob(job) {
    const d = [...document.querySelectorAll("#jobs details.job")].find((n) => n.dataset.job === job);
    if (!d) return;
    d.open = true; // its toggle fetches the phases
    d.scrollIntoView({ block: "start" });
  }

  function showIncident(id) {
    const card = document.querySelector(`#incidents article.incident[data-incident="${Number(id)}"]`);
    if (!card) return;
    for (let p = card.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    card.scrollIntoView({ block: "start" });
  }

  document.addEventListener("click", (ev) => {
    const jobLink = ev.target.closest("a.job-link");
    const goto = ev.target.closest("a.goto");
    if (jobLink) { ev.preventDefault(); openJob(jobLink.dataset.job); }
    else if (goto) { ev.preventDefault(); showIncident(goto.dataset.goto); }
  });

  // -- acknowledge and silence --------------------------------------------------------------
  let pendingAction = null;

  function notice(text, bad) {
    const n = document.getElementById("notice");
    n.textContent = text;
    n.className = bad ? "notice bad" : "notice";
  }

  function askOperator(why, action) {
    pendingAction = action;
    const form = document.getElementById("operator");
    document.getElementById("operator-why").textContent = why;
    form.classList.remove("hidden");
    document.getElementById("operator-token").focus();
  }

  function renderOperator() {
    const has = !!sessionStorage.getItem(OPERATOR_KEY);
    document.getElementById("operator-state").textContent = has ? "operator token set for this tab" : "";
    document.getElementById("operator-forget").classList.toggle("hidden", !has);
  }

  async function act(path, body, done, retry) {
    const token = sessionStorage.getItem(OPERATOR_KEY);
    if (!token) {
      askOperator("Acknowledge and silence need an operator token", retry);
      return;
    }
    let r;
    try {
      r = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
        cache: "no-store",
      });
    } catch (e) {
      notice(`${done} failed: ${e.message}`, true);
      return;
    }
    if (r.status === 401 || r.status === 403) {
      sessionStorage.removeItem(OPERATOR_KEY);
      renderOperator();
      askOperator(r.status === 401 ? "That operator token was refused" : `That token may not do this:${await detailOf(r)}`, retry);
      return;
    }
    if (!r.ok) {
      notice(`${done} failed: HTTP ${r.status}${await detailOf(r)}`, true);
      return;
    }
    notice(`${done} at ${fmtTime(new Date().toISOString())}`);
    renderOperator();
    refresh();
  }

  function acknowledge(id) {
    act(`api/v1/incidents/${id}/ack`, { comment: "from the status page" }, `Incident #${id} acknowledged`, () => acknowledge(id));
  }

  function silenceForm(inc) {
    const duration = el("select", { name: "duration", "aria-label": "Silence for" },
      ...SILENCE_FOR.map((d) => el("option", { value: d, text: d, selected: d === "4h" })));
    const reason = el("input", { name: "reason", type: "text", required: true, maxLength: 2000, placeholder: "why (for the audit log)", "aria-label": "Reason" });
    const form = el("form", { class: "silence-form", data: { silence: inc.id } },
      `Silence ${inc.kind} on ${inc.entity} (no drain comes from it) for `, duration, " ",
      reason, " ", el("button", { type: "submit", text: "Silence" }), " ",
      el("button", { type: "button", class: "cancel", text: "Cancel" }));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const why = reason.value.trim();
      if (!why) { reason.focus(); return; }
      const body = { duration: duration.value, reason: why };
      const send = () => act(`api/v1/incidents/${inc.id}/silence`, body, `Incident #${inc.id} silenced for ${body.duration}`, send);
      silencing = null;
      send();
    });
    form.querySelector(".cancel").addEventListener("click", () => { silencing = null; drawIncidents(lastView); });
    setTimeout(() => reason.focus(), 0);
    return form;
  }

  document.getElementById("incidents").addEventListener("click", (ev) => {
    const b = ev.target.closest("button");
    if (!b) return;
    if (b.id === "incidents-more") {
      showAllIncidents = !showAllIncidents;
      drawIncidents(lastView);
      return;
    }
    const id = Number(b.dataset.id);
    if (b.dataset.act === "ack") acknowledge(id);
    if (b.dataset.act === "silence") {
      silencing = id; // the list holds still while its form is open
      drawIncidents(lastView);
    }
  });

  document.getElementById("operator").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = document.getElementById("operator-token").value.trim();
    if (!value) return;
    sessionStorage.setItem(OPERATOR_KEY, value);
    document.getElementById("operator-token").value = "";
    document.getElementById("operator").classList.add("hidden");
    renderOperator();
    const next = pendingAction;
    pendingAction = null;
    if (next) next();
  });
  document.getElementById("operator-cancel").addEventListener("click", () => {
    pendingAction = null;
    document.getElementById("operator").classList.add("hidden");
  });
  document.getElementById("operator-forget").addEventListener("click", () => {
    sessionStorage.removeItem(OPERATOR_KEY);
    renderOperator();
    notice("Operator token forgotten");
  });

  // -- summary ------------------------------------------------------------------------------
  function renderSummary(grid, open, drainState, sources) {
    const h = grid.health;
    const crit = open.filter((i) => i.severity === "critical").length;
    const tiles = [
      ["critical incidents", crit, crit ? "critical" : ""],
      ["open incidents", open.length, open.length ? "warning" : ""],
      ["ports", grid.ports, ""],
      ["ok", h.ok, ""],
      ["no data", h.no_data || 0, h.no_data ? "warning" : ""],
      ["warning", h.warning, h.warning ? "warning" : ""],
      ["critical", h.critical, h.critical ? "critical" : ""],
      ["degraded", grid.degraded, grid.degraded ? "critical" : ""],
      ["down", grid.down, grid.down ? "warning" : ""],
      ["stale", grid.stale, grid.stale ? "warning" : ""],
    ];
    const targets = (sources && sources.items) || [];
    const failing = targets.filter((t) => t.ok === false).length;
    tiles.push(["sources failing", `${failing} of ${targets.length}`, failing ? "warning" : ""]);
    if (drainState) {
      const cb = drainState.circuit_breaker || {};
      tiles.push(["circuit breaker", cb.tripped ? "TRIPPED" : "closed", cb.tripped ? "critical" : ""]);
    }
    replace("summary", ...tiles.map(([k, v, cls]) =>
      el("div", { class: `tile ${cls}` }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k }))));
  }

  // -- the grid: rows grouped by rail, problem rows only unless asked -----------------------
  function cellTitle(cell) {
    const [key, peer, health, f] = cell;
    const words = [health === 0 && f & flags.no_data ? "no data" : HEALTH[health] || "unknown"];
    if (f & flags.degraded) words.push("below expected speed/width");
    if (f & flags.down) words.push("down");
    if (f & flags.stale) words.push("stale");
    if (f & flags.no_data) words.push("no data: no source reported it lately");
    return `${key}${peer ? " ↔ " + peer : ""}\n${words.join(", ")}`;
  }

  function cellClass(cell) {
    const [, , health, f] = cell;
    let c = `cell h${health}`;
    if (f & flags.no_data && health === 0) c += " nodata";
    if (f & flags.down) c += " down";
    if (f & flags.stale) c += " stale";
    if (cell[0] === selectedKey) c += " selected";
    if (query && matches(cell)) c += " match";
    return c;
  }

  function rowRank(row) {
    const alarm = flags.down | flags.degraded | flags.stale;
    let worst = 0, flagged = 0;
    for (const c of row.cells) { if (c[2] > worst) worst = c[2]; if (c[3] & alarm) flagged = 1; }
    return worst * 2 + flagged;
  }

  function matches(cell) {
    return cell[0].toLowerCase().includes(query) || (cell[1] || "").toLowerCase().includes(query);
  }

  // Leaves by rail, then spines, core and the rest; trouble first inside a group.
  function gridGroups(rows) {
    const rails = pageInfo.switch_rails || {};
    const groups = new Map();
    rows.forEach((row, i) => {
      const rail = rails[row.node];
      const key = rail !== undefined ? `0:${String(rail).padStart(4, "0")}` : `${{ leaf: 1, spine: 2, core: 3 }[row.role] || 4}:${row.role}`;
      const label = rail !== undefined ? `rail ${rail}` : `${row.role === "spine" ? "spines" : row.role === "leaf" ? "leaves" : row.role}`;
      if (!groups.has(key)) groups.set(key, { key, label, rows: [] });
      groups.get(key).rows.push({ row, i, rank: rowRank(row) });
    });
    const out = [...groups.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    for (const g of out) g.rows.sort((a, b) => b.rank - a.rank || a.i - b.i);
    return out;
  }

  function applyFind() {
    const host = document.getElementById("grid");
    host.classList.toggle("filtering", query !== "");
    let n = 0;
    for (const node of host.querySelectorAll(".cell")) {
      const hit = query !== "" && matches([node.dataset.port, node.dataset.peer]);
      node.classList.toggle("match", hit);
      if (hit) n += 1;
    }
    document.getElementById("find-count").textContent = query ? `${n} cell${n === 1 ? "" : "s"}` : "";
  }

  function renderGrid(grid) {
    flags = grid.flags || flags;
    lastGrid = grid;
    const host = document.getElementById("grid");
    const groups = gridGroups(grid.rows);
    const total = grid.rows.length;
    let problems = 0;
    const visible = [];
    for (const g of groups) {
      const rows = g.rows.filter((r) => {
        if (r.rank > 0) problems += 1;
        return showAllRows || r.rank > 0 || (query && r.row.cells.some(matches));
      });
      if (rows.length) visible.push({ ...g, rows, all: g.rows.length, bad: g.rows.filter((r) => r.rank > 0).length });
    }
    document.getElementById("grid-all-label").textContent = `all ${total} switches (${problems} with a problem)`;
    const cells = visible.reduce((n, g) => n + g.rows.reduce((m, r) => m + r.row.cells.length, 0), 0);
    host.classList.toggle("dense", cells > 4000);
    const shape = visible.map((g) => `${g.key}=` + g.rows.map((r) => `${r.row.node}:${r.row.cells.length}`).join(",")).join("|");
    if (shape === gridShape) {
      // Same rows: update the existing cells in place (cheap for tens of thousands).
      const lines = new Map([...host.querySelectorAll(".row")].map((n) => [n.dataset.node, n.lastChild]));
      for (const g of visible) {
        for (const r of g.rows) {
          const line = lines.get(r.row.node);
          if (!line) continue;
          r.row.cells.forEach((cell, j) => {
            const node = line.children[j];
            const cls = cellClass(cell);
            if (node.className !== cls) node.className = cls;
            node.title = cellTitle(cell);
          });
        }
      }
      return;
    }
    const frag = document.createDocumentFragment();
    for (const g of visible) {
      const section = el("div", { class: "group", data: { group: g.label } },
        el("div", { class: "group-head", text: `${g.label} · ${g.bad} of ${g.all} switch${g.all === 1 ? "" : "es"} with a problem` }));
      for (const { row } of g.rows) {
        const line = el("div", { class: "cells" });
        for (const cell of row.cells) {
          line.append(el("span", { class: cellClass(cell), title: cellTitle(cell), data: { port: cell[0], peer: cell[1] || "" } }));
        }
        section.append(el("div", { class: "row", data: { node: row.node } },
          el("div", { class: "name", text: row.node, title: `${row.node} (${row.role})` }), line));
      }
      frag.append(section);
    }
    if (total === 0) frag.append(el("p", { class: "empty", text: "The fabric model has no ports." }));
    else if (!visible.length) {
      frag.append(el("p", { class: "empty", text: `No switch has a port in trouble: ${total} switches, ${grid.ports} ports. Tick “all switches” to see them.` }));
    }
    host.replaceChildren(frag);
    gridShape = shape;
  }

  async function showPort(key) {
    selectedKey = key;
    for (const c of document.querySelectorAll("#grid .cell.selected")) c.classList.remove("selected");
    for (const c of document.querySelectorAll("#grid .cell")) if (c.dataset.port === key) c.classList.add("selected");
    const box = document.getElementById("port-detail");
    box.classList.remove("hidden");
    try {
      const ports = [await getJSON(portPath(key))];
      if (ports[0].peer) ports.push(await getJSON(portPath(ports[0].peer)));
      box.replaceChildren(...ports.map((p) => {
        const href = grafanaHref({ node: p.node, port: p.key });
        return el("div", {},
          el("h3", {}, `${p.key} · ${p.health}`, href ? el("a", { class: "grafana", href, target: "_blank", rel: "noopener noreferrer", text: "Grafana" }) : null),
          el("dl", {},
            ...[["node", `${p.node} (${p.role})`], ["switch", p.switch], ["peer", p.peer], ["rail", p.rail],
                ["speed", `${fmtBps(p.speed_bps)} (expected ${fmtBps(p.expected_speed_bps)})`],
                ["width", `${p.width ?? "–"}x (expected ${p.expected_width ?? "–"}x)`],
                ["state", `${p.state}${p.stale ? ", stale" : ""}`], ["last update", fmtTime(p.last_update)],
                ["incidents", p.incident_ids.length ? p.incident_ids.map((i) => `#${i}`).join(" ") : "none"]]
              .flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v ?? "–" })])));
      }));
    } catch (e) {
      box.replaceChildren(el("p", { class: "unavailable", text: `Could not load ${key}: ${e.message}` }));
    }
  }

  // -- drains, nodes, sources ---------------------------------------------------------------
  function renderDrains(drains, state, error) {
    const mode = document.getElementById("drain-mode");
    const banner = document.getElementById("breaker");
    if (error) {
      mode.classList.add("hidden");
      banner.classList.add("hidden");
      replace("drains", el("p", { class: "unavailable", text: error }));
      return;
    }
    mode.classList.remove("hidden");
    mode.className = state.shadow ? "badge shadow" : "badge";
    mode.textContent = state.shadow ? "shadow mode" : "enforcing";
    const cb = state.circuit_breaker || {};
    if (cb.tripped) {
      banner.className = "banner tripped";
      banner.textContent = `Drain circuit breaker tripped${cb.since ? " since " + fmtTime(cb.since) : ""}: ${cb.message || ""}`;
    } else {
      banner.className = "banner hidden";
      banner.textContent = "";
    }
    const breaker = el("p", { class: "hint", text:
      `Circuit breaker ${cb.tripped ? "TRIPPED" : "closed"}: ${cb.recent_drains ?? "?"} of at most ${cb.cap ?? "?"} ` +
      `drains in ${cb.window_seconds ?? "?"} s (max fraction ${cb.max_fraction ?? "?"}).` });
    if (!drains.length) {
      replace("drains", breaker, el("p", { class: "empty", text: "Nothing to drain or watch." }));
      return;
    }
    const rows = drains.map((d) => {
      const href = safeHref(d.evidence_url);
      return el("tr", { data: { node: d.node } },
        el("td", { class: "mono", text: d.node }),
        el("td", {}, el("span", { class: `sev ${d.action === "drain" ? "critical" : "warning"}`, text: d.action }),
          d.shadow ? el("span", { class: "badge shadow", text: "shadow" }) : null),
        el("td", { text: d.reason }),
        el("td", {}, when(d.since)),
        el("td", { class: "mono" }, href
          ? el("a", { href, text: (d.incident_ids || []).map((i) => `#${i}`).join(" ") || "evidence" })
          : (d.incident_ids || []).map((i) => `#${i}`).join(" ")));
    });
    replace("drains", breaker, table(["node", "action", "reason", "since", "incidents"], rows));
  }

  function renderNodes(body) {
    const items = body.items || [];
    if (!items.length) {
      replace("nodes", el("p", { class: "empty", text: "Every node is healthy." }));
      return;
    }
    const rows = items.map((v) => el("tr", { data: { node: v.node } },
      el("td", { class: "mono", text: v.node }),
      el("td", { text: `${v.side}${v.blamed_switch ? " (" + v.blamed_switch + ")" : ""}` }),
      el("td", {}, el("span", { class: `sev ${v.severity}`, text: v.severity })),
      el("td", {}, ...v.reasons.slice(0, 4).map((r) => el("div", { text: r })))));
    replace("nodes", table(["node", "side", "severity", "why"], rows));
  }

  function renderSources(body) {
    const items = body.items || [];
    const rows = items.map((t) => el("tr", {},
      el("td", { class: "mono", text: `${t.source} ${t.target}` }),
      el("td", {}, el("span", {
        class: t.ok === null ? "" : t.ok ? "ok-yes" : "ok-no",
        text: t.ok === null ? "not scraped yet" : t.ok ? "ok" : "failing" })),
      el("td", {}, when(t.last_success)),
      el("td", { text: t.consecutive_failures }),
      el("td", { text: t.stale_port_count }),
      el("td", { class: t.unmatched_rows ? "ok-no" : "",
                 title: (t.unmatched_examples || []).join(", "),
                 text: t.unmatched_rows ? `${t.unmatched_rows} (e.g. ${(t.unmatched_examples || []).slice(0, 2).join(", ")})` : "0" }),
      el("td", { class: "mono", text: t.error || t.note || "" })));
    replace("sources", items.length
      ? table(["target", "last scrape", "last success", "failures in a row", "stale ports",
               "rows matching no port", "error or note"], rows)
      : el("p", { class: "empty", text: "No sources configured." }));
  }

  // -- refresh loop -------------------------------------------------------------------------
  const INCIDENT_PAGE = 500;

  async function loadDrains() {
    if (!capabilities || !capabilities.drain) return { error: "Drain API unavailable on this service." };
    try {
      const [drains, state] = await Promise.all([getJSON("api/v1/drain"), getJSON("api/v1/drain/state")]);
      return { drains, state };
    } catch (e) {
      return { error: `Drain API unavailable: ${e.message}` };
    }
  }

  async function optional(path, fallback) {
    try {
      return await getJSON(path);
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
      return fallback;
    }
  }

  async function refresh() {
    const status = document.getElementById("freshness");
    try {
      if (!capabilities) {
        [capabilities, pageInfo] = await Promise.all([
          getJSON("api/v1/capabilities"),
          optional("api/v1/status-page", { grafana_port_url: null, switch_rails: {} }),
        ]);
        gridShape = null;
      }
      const [grid, open, acked, nodes, sources, drain, silences, jobs] = await Promise.all([
        getJSON("api/v1/fabric/grid"),
        getJSON(`api/v1/incidents?status=open&limit=${INCIDENT_PAGE}`),
        getJSON(`api/v1/incidents?status=acknowledged&limit=${INCIDENT_PAGE}`),
        getJSON("api/v1/nodes"),
        getJSON("api/v1/sources"),
        loadDrains(),
        optional("api/v1/silences", []),
        capabilities.jobs ? optional("api/v1/jobs", null) : null,
      ]);
      renderSummary(grid, open.items, drain.state, sources);
      renderIncidents({
        open: open.items, acked: acked.items, truncated: open.items.length >= INCIDENT_PAGE,
        nodes, drains: drain.drains || [], silences, grid,
      });
      renderJobs(jobs);
      renderGrid(grid);
      if (query) applyFind();
      renderDrains(drain.drains || [], drain.state || {}, drain.error);
      renderNodes(nodes);
      renderSources(sources);
      renderOperator();
      status.className = "freshness";
      status.textContent = `updated ${fmtTime(new Date().toISOString())} · last poll ${ago(grid.last_poll)}` +
        ` · ${grid.polls} polls · refreshes every ${REFRESH_S} s`;
      document.body.dataset.loaded = "true";
    } catch (e) {
      status.className = "freshness error";
      status.textContent = `refresh failed at ${fmtTime(new Date().toISOString())}: ${e.message}`;
      if (e instanceof Unauthorized) showLogin(e.message);
    } finally {
      clearTimeout(timer);
      // Waiting for a token: no retry loop of 401s until one is given.
      if (document.getElementById("login").classList.contains("hidden")) {
        timer = setTimeout(refresh, REFRESH_S * 1000);
      }
    }
  }

  function showLogin(why) {
    const form = document.getElementById("login");
    document.getElementById("login-why").textContent = why;
    form.classList.remove("hidden");
    document.getElementById("login-token").focus();
  }
  document.getElementById("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = document.getElementById("login-token").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    document.getElementById("login-token").value = "";
    document.getElementById("login").classList.add("hidden");
    capabilities = null;
    refresh();
  });

  let findTimer = null;
  document.getElementById("find").addEventListener("input", (ev) => {
    clearTimeout(findTimer);
    findTimer = setTimeout(() => {
      query = ev.target.value.trim().toLowerCase();
      if (lastGrid) renderGrid(lastGrid); // a hit on a healthy switch brings its row
      applyFind();
    }, 150);
  });
  document.getElementById("grid-all").checked = showAllRows;
  document.getElementById("grid-all").addEventListener("change", (ev) => {
    showAllRows = ev.target.checked;
    if (lastGrid) renderGrid(lastGrid);
    if (query) applyFind();
  });
  document.getElementById("grid").addEventListener("click", (ev) => {
    const cell = ev.target.closest(".cell");
    if (cell && cell.dataset.port) showPort(cell.dataset.port);
  });
  renderOperator();
  refresh();
})();
