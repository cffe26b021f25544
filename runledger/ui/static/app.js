// runledger live view: one shell, four pages drawn from /api/*, polled every few seconds.
// Read-only: nothing here sends anything but GET. Every string from the log is put in
// with textContent; the only HTML taken whole is the report's sections, which the
// server renders with every value escaped (queries/report_html.py).
"use strict";

const POLL_MS = 2000;
// -- small DOM helpers ---------------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const badge = (value) => h("span", {class: `badge ${String(value || "").toLowerCase()}`,
                                    text: value ?? "-"});
const link = (href, text) => href ? h("a", {href, text}) : document.createTextNode(text ?? "-");
const num = (v) => (v === null || v === undefined) ? "-" : Number(v).toLocaleString("en-US");
const pct = (v) => (v === null || v === undefined) ? "-" : `${(100 * v).toFixed(1)}%`;
function ago(s) {
  if (s === null || s === undefined) return "never";
  if (s < 1) return "just now";
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

function table(id, cols, rows, rowAttrs) {
  const head = h("tr", {}, cols.map((c) => h("th", {class: c.num ? "num" : null, text: c.title})));
  const body = rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {}, cols.map((c) => {
    const v = c.cell ? c.cell(r) : r[c.key];
    return h("td", {class: c.num ? "num" : null, "data-col": c.key},
             v instanceof Node ? v : (v === null || v === undefined ? "-" : String(v)));
  })));
  return h("div", {class: "scroll"}, h("table", {id}, h("thead", {}, head), h("tbody", {}, body)));
}

function section(id, title, ...kids) {
  return h("section", {id}, h("h2", {text: title}), ...kids);
}

// -- fetching and the page's health ---------------------------------------------------

async function getJSON(path) {
  const res = await fetch(path, {headers: {Accept: "application/json"}, cache: "no-store"});
  const doc = await res.json().catch(() => ({error: `${res.status} ${res.statusText}`}));
  if (!res.ok) throw Object.assign(new Error(doc.error || res.statusText), {status: res.status});
  return doc;
}

let lastAnswer = null;  // when the server last answered (ms), for the header

function showHealth(health, serverDown) {
  const banner = document.getElementById("banner");
  const age = document.getElementById("data-age");
  const lines = [];
  let worst = "ok";
  if (serverDown) {
    worst = "unreachable";
    lines.push(`The live view's server is not answering (${serverDown}); this page shows` +
               " what it last received and keeps trying.");
  } else if (health) {
    const s = health.status;
    if (s.state !== "ok") {
      worst = s.state === "unreachable" ? "unreachable" : (worst === "ok" ? "behind" : worst);
      lines.push(s.state === "starting" ? "Reading runledger.status for the first time…" :
        `Run summaries (runledger.status) last read ${ago(s.age_s)}` +
        (s.error ? `: ${s.error}` : "") + " — is the broker reachable?");
    }
    const p = health.projection;
    if (p.state === "unreachable") {
      if (worst === "ok") worst = "behind";
      lines.push(`No projection to read: ${p.error} Curves, timeline and ETTR appear once` +
                 " `runledger project` runs.");
    } else if (p.state === "behind") {
      if (worst === "ok") worst = "behind";
      lines.push(`The projection is behind: its newest snapshot is ${ago(p.age_s)}` +
                 ` (${p.short}). Curves, timeline and ETTR are as of then; the header is live.`);
    } else if (p.state === "stopped") {
      if (worst === "ok") worst = "behind";
      lines.push(`No projector is running: ${p.line}. Curves, timeline and ETTR do not` +
                 " move until `runledger project` runs again; the header is live.");
    }
  }
  banner.replaceChildren(...lines.map((l) => h("p", {text: l})));
  banner.hidden = lines.length === 0;
  banner.className = `banner ${worst}`;
  if (serverDown) {
    age.replaceChildren(h("span", {class: "live-dot"}), "not answering · last answer " +
                        ago(lastAnswer === null ? null : (Date.now() - lastAnswer) / 1000));
    age.parentElement.classList.add("stale");
  } else if (health) {
    lastAnswer = Date.now();
    const s = health.status;
    age.replaceChildren(h("span", {class: "live-dot"}),
                        `summaries ${ago(s.age_s)} · projection ` +
                        (health.projection.age_s === undefined ? "none" :
                         ago(health.projection.age_s)));
    age.parentElement.classList.toggle("stale", worst !== "ok");
  }
  document.body.dataset.health = worst;
}

// One loop per page: draw, wait POLL_MS after the answer, draw again.
function poll(draw) {
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    try {
      const health = await draw();
      showHealth(health, null);
    } catch (err) {
      if (err.status) showError(err.message);
      else showHealth(null, err.message || "no answer");
    }
    if (!stopped) setTimeout(tick, POLL_MS);
  };
  tick();
  return () => { stopped = true; };
}

function showError(message) {
  const app = document.getElementById("app");
  if (!app.querySelector("#page-error")) {
    app.replaceChildren(h("section", {id: "page-error", class: "why"},
                          h("h2", {text: "Not found"}), h("p", {text: message})));
  } else app.querySelector("#page-error p").textContent = message;
}

// -- the runs table ------------------------------------------------------------------

function runsPage() {
  const params = new URLSearchParams(location.search);
  const filter = h("input", {id: "filter", type: "search", placeholder: "filter: run id, name, owner",
                             value: params.get("q") || ""});
  const state = h("select", {id: "state-filter"}, h("option", {value: "", text: "every state"}));
  const counts = h("span", {class: "counts", id: "run-counts"});
  const holder = h("div", {id: "runs-holder"});
  document.getElementById("app").replaceChildren(
    h("h1", {class: "page", text: "Runs"}),
    h("div", {class: "toolbar"}, filter, state, counts), holder);
  let last = null;
  const redraw = () => {
    if (!last) return;
    const q = filter.value.trim().toLowerCase();
    const want = state.value;
    const keep = last.runs.filter((r) => (!want || r.state === want) &&
      (!q || [r.run_id, r.name, r.owner].some((v) => String(v).toLowerCase().includes(q))));
    const url = new URL(location.href);
    q ? url.searchParams.set("q", filter.value.trim()) : url.searchParams.delete("q");
    want ? url.searchParams.set("state", want) : url.searchParams.delete("state");
    history.replaceState(null, "", url);
    counts.textContent = `${keep.length} of ${last.runs.length} shown · ` +
      Object.entries(last.by_state).map(([k, v]) => `${v} ${k.toLowerCase()}`).join(", ") +
      (last.ended_left_out ? ` · ${last.ended_left_out} older ended runs not shown` : "");
    holder.replaceChildren(keep.length ? table("runs", [
      {key: "run_id", title: "run", cell: (r) => link(r.href, r.run_id)},
      {key: "name", title: "name"},
      {key: "state", title: "state", cell: (r) => badge(r.state)},
      {key: "generation", title: "gen", num: true},
      {key: "step", title: "step", num: true, cell: (r) => num(r.step)},
      {key: "tokens", title: "tokens", num: true, cell: (r) => num(r.tokens)},
      {key: "ettr", title: "ETTR so far", num: true, cell: (r) => pct(r.ettr)},
      {key: "checkpoint_step", title: "checkpoint", num: true, cell: (r) => num(r.checkpoint_step)},
      {key: "failures", title: "failures", num: true},
      {key: "alerts", title: "alerts", num: true},
      {key: "owner", title: "owner"},
      {key: "elapsed_s", title: "elapsed", num: true, cell: (r) => duration(r.elapsed_s)},
      {key: "submitted_at", title: "submitted",
       cell: (r) => h("span", {title: r.submitted_at, text: ago(r.submitted_age_s)})},
      {key: "updated_age_s", title: "changed", cell: (r) => ago(r.updated_age_s)},
    ], keep, (r) => ({"data-run": r.run_id, "data-state": r.state}))
      : h("p", {class: "empty", id: "no-runs", text: last.runs.length ?
          "no run matches the filter" : "no runs yet: `runledger submit SPEC.yaml` starts one"}));
  };
  filter.addEventListener("input", redraw);
  state.addEventListener("change", redraw);
  return poll(async () => {
    last = await getJSON("/api/runs");
    const known = new Set([...state.options].map((o) => o.value));
    for (const s of Object.keys(last.by_state)) {
      if (!known.has(s)) state.append(h("option", {value: s, text: s.toLowerCase()}));
    }
    if (params.get("state") && !state.value) state.value = params.get("state");
    redraw();
    return last.health;
  });
}

// -- one run -------------------------------------------------------------------------

function facts(pairs, id) {
  return h("dl", {class: "facts", id}, pairs.map(([k, v, attrs]) =>
    h("div", {}, h("dt", {text: k}), h("dd", attrs || {}, v instanceof Node ? v : String(v ?? "-")))));
}

function ettrBlock(e) {
  if (!e || !e.allocated_s) return h("p", {class: "empty", text: "no allocated time yet"});
  // The parts in queries/ettr.py's order and the report's colours, as the server sends them.
  const shown = e.order.filter((p) => e.parts[p] > 0);
  const bar = h("div", {class: "ettr-bar", id: "ettr-bar"}, shown.map((p) =>
    h("span", {style: `width:${100 * e.parts[p] / e.allocated_s}%;background:${e.colors[p]}`,
               title: `${p}: ${e.parts[p].toFixed(1)} s`})));
  const legend = h("div", {class: "legend"}, shown.map((p) =>
    h("span", {}, h("span", {class: "swatch", style: `background:${e.colors[p]}`}),
      `${p} ${e.parts[p].toFixed(1)} s`)));
  return h("div", {}, h("p", {}, `ETTR so far ${pct(e.ratio)} of ${e.allocated_s.toFixed(1)} s`),
           bar, legend);
}

function failureItem(f, current) {
  const recovered = f.action === "restart" || f.action === "requeue" || f.generation < current;
  return h("li", {class: `failure${recovered ? " recovered" : ""}`,
                  "data-generation": f.generation},
    h("p", {class: "what"}, h("span", {class: "badge failure-class", text: f.failure_class}), " ", h("code", {text: f.signature}),
      ` → ${f.action}, ${f.logical_id || "the run"}${f.node ? ` on node ${f.node}` : ""},` +
      ` generation ${f.generation}` + (f.attempt ? `, try ${f.attempt}` : "")),
    f.detail ? h("p", {text: f.detail}) : null,
    h("p", {}, f.log_href ? link(f.log_href, "worker output") : "no log was reported",
      f.log_path ? [" · ", h("code", {text: f.log_path})] : null),
    f.stderr_tail ? h("pre", {class: "tail error-text", text: f.stderr_tail})
                  : h("p", {class: "empty", text: "no output was reported"}));
}

function runPage(runId) {
  const top = h("div", {id: "live-top"});
  const charts = h("div", {id: "charts"});
  const rest = h("div", {id: "live"});
  const sections = h("div", {id: "projection-sections"},
                     h("p", {class: "empty", text: "reading the projection…"}));
  document.getElementById("app").replaceChildren(
    h("h1", {class: "page"}, "Run ", h("code", {id: "run-id", text: runId}),
      h("span", {id: "run-state-badge"})), top, charts, rest, sections);
  document.title = `runledger: ${runId}`;
  let stamp = null;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  return poll(async () => {
    const doc = await getJSON(base);
    drawRun(doc, top, rest);
    try {
      const sec = await getJSON(`${base}/sections${stamp ? `?since=${encodeURIComponent(stamp)}` : ""}`);
      if (!sec.unchanged) {
        stamp = sec.stamp;
        if (sec.html) {
          sections.innerHTML = sec.html;  // rendered and escaped by the server
          sections.prepend(h("p", {class: "lag", text: `from the ${sec.freshness}`}));
          // What a person watches while a run trains goes right under its status.
          charts.replaceChildren(...["curves", "timeline"].map((id) =>
            sections.querySelector(`#${id}`)).filter(Boolean));
        } else sections.replaceChildren(h("p", {class: "empty", text: sec.error}));
      }
    } catch (err) {
      if (!err.status) throw err;
      sections.replaceChildren(h("p", {class: "empty", id: "sections-missing", text: err.message}));
    }
    return doc.health;
  });
}

function duration(s) {
  if (s === null || s === undefined) return "-";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function drawRun(doc, top, live) {
  const r = doc.run;
  document.getElementById("run-state-badge").replaceChildren(badge(r.state));
  const ck = doc.checkpoint;
  const latest = doc.latest;
  const status = section("status", "Status", facts([
    ["state", badge(r.state), {id: "run-state", "data-state": r.state}],
    ["generation", r.generation, {id: "run-generation"}],
    ["step", num(r.step), {id: "run-step", "data-step": r.step,
                           title: `from ${r.step_source}`}],
    ["loss", latest && latest.loss !== null ? Number(latest.loss).toPrecision(4) : "-",
     {id: "run-loss", title: latest ? `step ${latest.step}, generation ${latest.generation}` : null}],
    ["step time", latest && latest.step_time_ms ? `${Math.round(latest.step_time_ms)} ms` : "-"],
    ["tokens / s", latest && latest.tokens_per_s ? num(Math.round(latest.tokens_per_s)) : "-"],
    ["tokens", num(r.tokens)],
    [r.terminal ? "took" : "running for", duration(r.elapsed_s), {id: "run-elapsed"}],
    ["ETTR so far", pct(r.ettr), {id: "run-ettr"}],
    ["checkpoint", ck ? `step ${num(ck.step)} (gen ${ck.generation})` : "none yet",
     {id: "run-checkpoint"}],
    ["data cursor", doc.cursor ? `epoch ${doc.cursor.epoch}, position ${num(doc.cursor.position)}`
                               : "-"],
    ["failures", r.failures], ["alerts", r.alerts], ["owner", r.owner], ["name", r.name],
    ["world size", r.world_size], ["submitted", r.submitted_at],
  ], "status-facts"),
  doc.queue_reason ? h("p", {}, `queued: ${doc.queue_reason}`) : null,
  doc.outcome_reason ? h("p", {id: "outcome-reason"}, `ended: ${doc.outcome_reason}`) : null,
  doc.cancel_requested ? h("p", {}, "a cancel was requested") : null);
  const members = section("members", `Members of generation ${r.generation}`,
    doc.members.length ? table("members-table", [
      {key: "rank", title: "rank", num: true}, {key: "logical_id", title: "member"},
      {key: "node", title: "node", cell: (m) => link(m.node_href, m.node)},
      {key: "slot", title: "slot", num: true}, {key: "domain", title: "domain"},
      {key: "log", title: "output", cell: (m) => link(m.log_href, "log")},
    ], doc.members, (m) => ({"data-member": m.logical_id}))
      : h("p", {class: "empty", text: r.terminal ? "the run has ended" : "no members yet"}));
  const failures = section("failures", "Failures",
    doc.failures.length ? h("ul", {class: "failures"},
                            doc.failures.map((f) => failureItem(f, r.generation)))
      : h("p", {class: "empty", text: "no failures"}));
  const alerts = section("live-alerts", "Alerts",
    doc.alerts.length ? table("live-alerts-table", [
      {key: "severity", title: "severity", cell: (a) => badge(a.severity)},
      {key: "alert", title: "alert"}, {key: "subject", title: "subject"},
      {key: "detail", title: "detail"}, {key: "open", title: "", cell: (a) => a.open ? "open" : "resolved"},
      {key: "runbook", title: "runbook", cell: (a) => link(a.runbook_href || null, a.runbook || "-")},
    ], doc.alerts) : h("p", {class: "empty", text: "no alerts"}));
  top.replaceChildren(status);
  live.replaceChildren(section("ettr-live", "Where the time went", ettrBlock(doc.ettr)),
                       members, failures, alerts);
}

// -- a worker's output ---------------------------------------------------------------

function logsPage(runId) {
  const params = new URLSearchParams(location.search);
  const head = h("p", {id: "log-head", class: "empty", text: "finding the log…"});
  const pre = h("pre", {id: "log"});
  const follow = h("input", {type: "checkbox", id: "follow", checked: true});
  document.getElementById("app").replaceChildren(
    h("h1", {class: "page"}, "Output of ", link(`/runs/${encodeURIComponent(runId)}`, runId)),
    h("div", {class: "toolbar"}, head, h("label", {}, follow, " follow the end")), pre);
  const q = new URLSearchParams({tail: "400"});
  for (const k of ["generation", "rank"]) if (params.get(k)) q.set(k, params.get(k));
  return poll(async () => {
    const doc = await getJSON(`/api/runs/${encodeURIComponent(runId)}/log?${q}`);
    if (doc.error && doc.text === undefined) {
      head.textContent = doc.error;
    } else {
      const how = doc.signal ? ` (killed by signal ${doc.signal})` :
        (doc.exit_code !== null && doc.exit_code !== undefined ? ` (exit ${doc.exit_code})` : "");
      head.textContent = `${doc.member}, node ${doc.node}, generation ${doc.generation}: ` +
        `${doc.state}${how} · ${doc.path}` +
        (doc.dropped_bytes ? ` · ${num(doc.dropped_bytes)} older bytes dropped by the cap` : "");
      const text = doc.text === "" ? (doc.state === "running" ? "(no output yet)" :
        "(no output: the worker wrote nothing before it ended)") : doc.text;
      if (text !== undefined && pre.textContent !== text) {
        pre.textContent = text;
        pre.classList.toggle("nothing", doc.text === "");
        if (follow.checked) pre.scrollTop = pre.scrollHeight;
      }
      pre.dataset.state = doc.state;
    }
    return (await getJSON("/api/health"));
  });
}

// -- nodes ---------------------------------------------------------------------------

function nodesPage() {
  const holder = h("div", {id: "nodes-holder"});
  document.getElementById("app").replaceChildren(h("h1", {class: "page", text: "Nodes"}), holder);
  return poll(async () => {
    const doc = await getJSON("/api/nodes");
    holder.replaceChildren(doc.nodes.length ? table("nodes", [
      {key: "node", title: "node"},
      {key: "state", title: "state", cell: (n) => badge(n.state)},
      {key: "slots", title: "slots", num: true}, {key: "busy_slots", title: "busy", num: true},
      {key: "domain", title: "domain"},
      {key: "heartbeat_age_s", title: "heartbeat", cell: (n) => ago(n.heartbeat_age_s)},
      {key: "failures", title: "failures", num: true},
      {key: "since", title: "since"},
      {key: "why", title: "why", cell: (n) => n.why || "-"},
      {key: "quarantine_expires", title: "quarantine ends",
       cell: (n) => n.quarantine_expires || (n.probation ? `probation since ${n.probation_since}` : "-")},
      {key: "runs", title: "runs on it", cell: (n) => n.runs.length ?
        h("span", {}, n.runs.map((r, i) => [i ? ", " : "", link(r.href, r.name || r.run_id)])) : "-"},
    ], doc.nodes, (n) => ({id: n.node, "data-node": n.node, "data-state": n.state}))
      : h("p", {class: "empty", text: "no agent has registered yet: `runledger agent --node NAME` starts one"}));
    if (location.hash && !holder.dataset.scrolled) {
      const row = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (row) { row.scrollIntoView(); row.classList.add("flagged"); holder.dataset.scrolled = "1"; }
    }
    return doc.health;
  });
}

// -- routing -------------------------------------------------------------------------

function route() {
  const path = location.pathname.replace(/\/+$/, "") || "/";
  let m;
  const here = (name) => document.querySelectorAll("[data-nav]").forEach(
    (a) => a.classList.toggle("here", a.dataset.nav === name));
  if (path === "/") { here("runs"); return runsPage(); }
  if (path === "/nodes") { here("nodes"); return nodesPage(); }
  if ((m = path.match(/^\/runs\/([^/]+)\/logs$/))) { here("runs"); return logsPage(decodeURIComponent(m[1])); }
  if ((m = path.match(/^\/runs\/([^/]+)$/))) { here("runs"); return runPage(decodeURIComponent(m[1])); }
  showError(`no page ${path}`);
  return () => {};
}

document.addEventListener("DOMContentLoaded", route);
