// graywire status page: polls the service's JSON API and redraws. No dependencies, no build.
// Every piece of data reaches the DOM through textContent or a DOM property, never as HTML.
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  const REFRESH_S = Math.max(2, Number(params.get("refresh")) || 10);
  const HEALTH = ["ok", "warning", "critical"];
  const EVIDENCE_SHOWN = 8;
  let flags = { stale: 1, down: 2, degraded: 4, no_data: 8 };
  let capabilities = null;
  let gridShape = null;
  let selectedKey = null;
  let query = "";
  let timer = null;

  // -- small helpers ------------------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "data") Object.assign(node.dataset, v);
      else node[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function replace(id, ...children) {
    const target = document.getElementById(id);
    target.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  }

  // With auth.read_open false the API wants a reader token: asked for once, kept for this
  // tab only (sessionStorage), sent as a bearer token.
  const TOKEN_KEY = "graywire.reader-token";
  class Unauthorized extends Error {}

  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const r = await fetch(path, { headers, cache: "no-store" });
    if (r.status === 401) {
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      throw new Unauthorized(token ? "that token was refused" : "this service needs a reader token");
    }
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).detail || ""; } catch (e) { /* not JSON */ }
      throw new Error(`${path}: HTTP ${r.status}${detail ? " " + detail : ""}`);
    }
    return r.json();
  }

  function fmtBps(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (v >= 1e12) return `${+(v / 1e12).toFixed(2)} Tb/s`;
    if (v >= 1e9) return `${+(v / 1e9).toFixed(1)} Gb/s`;
    if (v >= 1e6) return `${+(v / 1e6).toFixed(1)} Mb/s`;
    return `${v} b/s`;
  }

  function fmtTime(iso) {
    if (!iso) return "–";
    const d = new Date(iso);
    return isNaN(d) ? String(iso) : d.toLocaleString();
  }

  function ago(iso) {
    if (!iso) return "never";
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (!isFinite(s)) return String(iso);
    if (s < 60) return `${Math.max(0, s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    return `${(s / 3600).toFixed(1)} h ago`;
  }

  function fmtValue(key, v) {
    if (typeof v === "number" && /_bps$/.test(key)) return fmtBps(v);
    if (v === null) return "null";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toPrecision(4);
    return String(v);
  }

  // Evidence as "path = value" lines: readable without knowing each detector's shape.
  function flatten(obj, prefix, out, depth) {
    if (out.length >= 40) return out;
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

  function evidenceList(evidence) {
    const items = flatten(evidence || {}, "", [], 0).map(([k, v]) => el("li", { text: `${k} = ${v}` }));
    const shown = el("ul", { class: "evidence" }, ...items.slice(0, EVIDENCE_SHOWN));
    if (items.length <= EVIDENCE_SHOWN) return shown;
    return el("div", {}, shown, el("details", {},
      el("summary", { text: `${items.length - EVIDENCE_SHOWN} more` }),
      el("ul", { class: "evidence" }, ...items.slice(EVIDENCE_SHOWN))));
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

  // -- sections -----------------------------------------------------------------------------
  function renderSummary(grid, incidents, drainState) {
    const h = grid.health;
    const tiles = [
      ["ports", grid.ports, ""],
      ["ok", h.ok, ""],
      ["warning", h.warning, h.warning ? "warning" : ""],
      ["critical", h.critical, h.critical ? "critical" : ""],
      ["degraded", grid.degraded, grid.degraded ? "critical" : ""],
      ["down", grid.down, grid.down ? "warning" : ""],
      ["stale", grid.stale, grid.stale ? "warning" : ""],
      ["open incidents", incidents.length, incidents.length ? "warning" : ""],
    ];
    if (drainState) {
      const cb = drainState.circuit_breaker || {};
      tiles.push(["circuit breaker", cb.tripped ? "TRIPPED" : "closed", cb.tripped ? "critical" : ""]);
    }
    replace("summary", ...tiles.map(([k, v, cls]) =>
      el("div", { class: `tile ${cls}` }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k }))));
  }

  function cellTitle(cell) {
    const [key, peer, health, f] = cell;
    const words = [HEALTH[health] || "unknown"];
    if (f & flags.degraded) words.push("below expected speed/width");
    if (f & flags.down) words.push("down");
    if (f & flags.stale) words.push("stale");
    if (f & flags.no_data) words.push("no data yet");
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

  // Rows with trouble first (worst health, then down/degraded/stale), the rest in fabric order,
  // so a problem on a large fabric is on screen without scrolling.
  function troubleFirst(rows) {
    const alarm = flags.down | flags.degraded | flags.stale;
    const rank = (row) => {
      let worst = 0, flagged = 0;
      for (const c of row.cells) { if (c[2] > worst) worst = c[2]; if (c[3] & alarm) flagged = 1; }
      return worst * 2 + flagged;
    };
    return rows.map((row, i) => [rank(row), i, row]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map((x) => x[2]);
  }

  function matches(cell) {
    return cell[0].toLowerCase().includes(query) || (cell[1] || "").toLowerCase().includes(query);
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
    grid.rows = troubleFirst(grid.rows);
    const host = document.getElementById("grid");
    const total = grid.rows.reduce((n, r) => n + r.cells.length, 0);
    host.classList.toggle("dense", total > 4000);
    const shape = grid.rows.map((r) => `${r.node}:${r.cells.length}`).join("|");
    if (shape === gridShape) {
      // Same fabric: update the existing cells in place (cheap for tens of thousands).
      const rows = host.children;
      grid.rows.forEach((row, i) => {
        const cells = rows[i].lastChild.children;
        row.cells.forEach((cell, j) => {
          const node = cells[j];
          const cls = cellClass(cell);
          if (node.className !== cls) node.className = cls;
          node.title = cellTitle(cell);
        });
      });
      return;
    }
    const frag = document.createDocumentFragment();
    for (const row of grid.rows) {
      const cells = el("div", { class: "cells" });
      for (const cell of row.cells) {
        cells.append(el("span", {
          class: cellClass(cell),
          title: cellTitle(cell),
          data: { port: cell[0], peer: cell[1] || "" },
        }));
      }
      frag.append(el("div", { class: "row", data: { node: row.node } },
        el("div", { class: "name", text: row.node, title: `${row.node} (${row.role})` }), cells));
    }
    if (grid.rows.length === 0) frag.append(el("p", { class: "empty", text: "The fabric model has no ports." }));
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
      box.replaceChildren(...ports.map((p) => el("div", {},
        el("h3", { text: `${p.key} · ${p.health}` }),
        el("dl", {},
          ...[["node", `${p.node} (${p.role})`], ["switch", p.switch], ["peer", p.peer], ["rail", p.rail],
              ["speed", `${fmtBps(p.speed_bps)} (expected ${fmtBps(p.expected_speed_bps)})`],
              ["width", `${p.width ?? "–"}x (expected ${p.expected_width ?? "–"}x)`],
              ["state", `${p.state}${p.stale ? ", stale" : ""}`], ["last update", fmtTime(p.last_update)],
              ["incidents", p.incident_ids.length ? p.incident_ids.map((i) => `#${i}`).join(" ") : "none"]]
            .flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v ?? "–" })])))));
    } catch (e) {
      box.replaceChildren(el("p", { class: "unavailable", text: `Could not load ${key}: ${e.message}` }));
    }
  }

  function renderIncidents(items) {
    document.getElementById("incident-count").textContent = `(${items.length})`;
    if (!items.length) {
      replace("incidents", el("p", { class: "empty", text: "No open incidents." }));
      return;
    }
    const rows = items.map((i) => el("tr", { data: { incident: i.id, port: i.port || "" } },
      el("td", { class: "mono", text: `#${i.id}` }),
      el("td", {}, el("span", { class: `sev ${i.severity}`, text: i.severity })),
      el("td", { class: "mono", text: i.kind }),
      el("td", { class: "mono", text: i.link || i.port || i.node || i.entity }),
      el("td", {}, el("div", { text: i.summary }), evidenceList(i.evidence)),
      el("td", { text: ago(i.opened_at), title: fmtTime(i.opened_at) })));
    replace("incidents", table(["id", "severity", "kind", "where", "summary and evidence", "opened"], rows));
  }

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
        el("td", { text: ago(d.since), title: fmtTime(d.since) }),
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
      el("td", { text: ago(t.last_success), title: fmtTime(t.last_success) }),
      el("td", { text: t.consecutive_failures }),
      el("td", { text: t.stale_port_count }),
      el("td", { class: "mono", text: t.error || "" })));
    replace("sources", items.length
      ? table(["target", "last scrape", "last success", "failures in a row", "stale ports", "error"], rows)
      : el("p", { class: "empty", text: "No sources configured." }));
  }

  // -- refresh loop -------------------------------------------------------------------------
  async function loadDrains() {
    if (!capabilities || !capabilities.drain) return { error: "Drain API unavailable on this service." };
    try {
      const [drains, state] = await Promise.all([getJSON("api/v1/drain"), getJSON("api/v1/drain/state")]);
      return { drains, state };
    } catch (e) {
      return { error: `Drain API unavailable: ${e.message}` };
    }
  }

  async function refresh() {
    const status = document.getElementById("freshness");
    try {
      if (!capabilities) capabilities = await getJSON("api/v1/capabilities");
      const [grid, incidents, nodes, sources, drain] = await Promise.all([
        getJSON("api/v1/fabric/grid"),
        getJSON("api/v1/incidents?status=open&limit=200"),
        getJSON("api/v1/nodes"),
        getJSON("api/v1/sources"),
        loadDrains(),
      ]);
      renderSummary(grid, incidents.items, drain.state);
      renderGrid(grid);
      if (query) applyFind();
      renderIncidents(incidents.items);
      renderDrains(drain.drains || [], drain.state || {}, drain.error);
      renderNodes(nodes);
      renderSources(sources);
      status.className = "freshness";
      status.textContent = `updated ${new Date().toLocaleTimeString()} · last poll ${ago(grid.last_poll)}` +
        ` · ${grid.polls} polls · refreshes every ${REFRESH_S} s`;
      document.body.dataset.loaded = "true";
    } catch (e) {
      status.className = "freshness error";
      status.textContent = `refresh failed at ${new Date().toLocaleTimeString()}: ${e.message}`;
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
    findTimer = setTimeout(() => { query = ev.target.value.trim().toLowerCase(); applyFind(); }, 150);
  });
  document.getElementById("grid").addEventListener("click", (ev) => {
    const cell = ev.target.closest(".cell");
    if (cell && cell.dataset.port) showPort(cell.dataset.port);
  });
  refresh();
})();
