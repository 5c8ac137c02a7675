// Quartermaster dashboard: the cohort tree, one ClusterQueue's pending and admitted
// workloads, recent events. Live by Server-Sent Events (/events); lists render only the
// rows in view (VList) and the pending list is fetched a window at a time.
"use strict";
const ROW = 24;
const state = { summary: null, selected: null, collapsed: new Set(), filter: "" };

class VList {
  // A virtualised list: `count` rows, `render(i)` -> element (or null while loading).
  constructor(el, render) {
    this.el = el; this.render = render; this.count = 0;
    this.spacer = document.createElement("div"); el.appendChild(this.spacer);
    el.addEventListener("scroll", () => this.draw());
  }
  setCount(n) { this.count = n; this.spacer.style.height = (n * ROW) + "px"; this.draw(); }
  visible() {
    const first = Math.max(0, Math.floor(this.el.scrollTop / ROW) - 5);
    const last = Math.min(this.count, Math.ceil((this.el.scrollTop + this.el.clientHeight) / ROW) + 5);
    return [first, last];
  }
  draw() {
    const [first, last] = this.visible();
    for (const old of Array.from(this.el.querySelectorAll(".row"))) old.remove();
    for (let i = first; i < last; i++) {
      const row = this.render(i);
      if (!row) continue;
      row.classList.add("row"); row.style.top = (i * ROW) + "px"; row.dataset.index = i;
      this.el.appendChild(row);
    }
  }
}

function span(text, cls) { const s = document.createElement("span"); s.textContent = text; if (cls) s.className = cls; return s; }

function bars(quantities) {
  const d = document.createElement("span"); d.className = "bars";
  for (const q of quantities) {
    const b = document.createElement("span"); b.className = "bar";
    const pct = q.quota > 0 ? Math.min(100, 100 * q.used / q.quota) : (q.used > 0 ? 100 : 0);
    const fill = document.createElement("i"); fill.style.width = pct + "%";
    if (q.used > q.quota) fill.className = "over";
    const label = document.createElement("b");
    label.textContent = `${q.flavor}/${q.resource} ${q.usedText}/${q.quotaText}` + (q.borrowed !== "0" ? ` (+${q.borrowed})` : "");
    b.title = label.textContent + (q.borrowingLimit ? ` borrowingLimit ${q.borrowingLimit}` : "") + (q.lendingLimit ? ` lendingLimit ${q.lendingLimit}` : "");
    b.append(fill, label); d.appendChild(b);
  }
  return d;
}

// -- the tree --------------------------------------------------------------------------
let treeRows = [];
const tree = new VList(document.getElementById("tree"), (i) => {
  const n = treeRows[i]; if (!n) return null;
  const r = document.createElement("div");
  r.className = n.kind === "Cohort" ? "cohort" : "cq";
  if (n.name === state.selected && n.kind !== "Cohort") r.classList.add("selected");
  const marker = n.kind === "Cohort" ? (state.collapsed.has(n.name) ? "▸ " : "▾ ") : "";
  const name = span("\u00a0".repeat(n.depth * 3) + marker + n.name + (n.stopPolicy && n.stopPolicy !== "None" ? ` [${n.stopPolicy}]` : ""));
  name.title = n.kind + " " + n.name + (n.inactive ? ": " + n.inactive : "");
  r.append(name, bars(n.quantities), span(n.pending), span(n.admitted), span(n.weightedShare),
           span(n.credit === undefined ? "" : n.credit));
  r.dataset.name = n.name; r.dataset.kind = n.kind;
  r.addEventListener("click", () => {
    if (n.kind === "Cohort") { state.collapsed.has(n.name) ? state.collapsed.delete(n.name) : state.collapsed.add(n.name); layoutTree(); }
    else select(n.name);
  });
  return r;
});

function layoutTree() {
  const nodes = state.summary ? state.summary.nodes : [];
  const rows = []; const hiddenBelow = [];
  for (const n of nodes) {
    while (hiddenBelow.length && n.depth <= hiddenBelow[hiddenBelow.length - 1]) hiddenBelow.pop();
    if (hiddenBelow.length) continue;
    if (!state.filter || n.kind === "Cohort" || n.name.includes(state.filter)) rows.push(n);
    if (n.kind === "Cohort" && state.collapsed.has(n.name)) hiddenBelow.push(n.depth);
  }
  treeRows = rows; tree.setCount(rows.length);
}

// -- one ClusterQueue ------------------------------------------------------------------
const pendingCache = new Map(); let pendingTotal = 0; let pendingVersion = 0;
const pending = new VList(document.getElementById("pending"), (i) => {
  const p = pendingCache.get(i);
  if (!p) { fetchPending(i); return null; }
  const r = document.createElement("div"); r.className = "pending-row" + (p.parked ? " parked" : "");
  r.dataset.workload = p.workload;
  r.append(span(p.positionInClusterQueue), span(p.positionInLocalQueue), span(p.workload), span(p.localQueue),
           span(p.priority), span(p.reason, "reason"), span(p.message));
  r.title = p.message;
  return r;
});
const inflight = new Set();
async function fetchPending(i) {
  const start = Math.floor(i / 100) * 100;
  if (inflight.has(start) || !state.selected) return;
  inflight.add(start); const version = pendingVersion;
  try {
    const resp = await fetch(`/api/pending?cq=${encodeURIComponent(state.selected)}&offset=${start}&limit=100`);
    if (!resp.ok) return;
    const page = await resp.json();
    if (version !== pendingVersion) return;
    page.items.forEach((p, k) => pendingCache.set(start + k, p));
    if (page.total !== pendingTotal) { pendingTotal = page.total; pending.setCount(page.total); }
    else pending.draw();
    document.getElementById("pending-count").textContent = `(${page.total})`;
  } finally { inflight.delete(start); }
}
function refreshPending() {
  pendingVersion++; pendingCache.clear(); inflight.clear();
  const [first] = pending.visible(); fetchPending(first);
}

let admittedItems = [];
const admittedList = new VList(document.getElementById("admitted"), (i) => {
  const a = admittedItems[i]; if (!a) return null;
  const r = document.createElement("div");
  r.append(span(a.workload), span(a.priority), span(a.usage + (a.evicting ? " (evicting)" : "")));
  return r;
});
async function refreshAdmitted() {
  if (!state.selected) return;
  const resp = await fetch(`/api/admitted?cq=${encodeURIComponent(state.selected)}&limit=500`);
  if (!resp.ok) return;
  const page = await resp.json(); admittedItems = page.items; admittedList.setCount(page.items.length);
  document.getElementById("admitted-count").textContent = `(${page.total})`;
}

function showSelected() {
  const n = state.summary && state.summary.nodes.find((x) => x.name === state.selected && x.kind === "ClusterQueue");
  document.getElementById("detail-title").textContent = n ? `ClusterQueue ${n.name}` + (n.parent ? ` (cohort ${n.parent})` : "") : "Select a ClusterQueue";
  const q = document.getElementById("detail-quotas"); q.textContent = "";
  if (!n) return;
  for (const x of n.quantities) {
    q.appendChild(span(`${x.flavor}/${x.resource}: ${x.usedText} of ${x.quotaText} nominal, borrowed ${x.borrowed}` +
      (x.borrowingLimit ? `, borrowingLimit ${x.borrowingLimit}` : "") + (x.lendingLimit ? `, lendingLimit ${x.lendingLimit}` : ""), "quota"));
  }
  q.appendChild(span(`weighted share ${n.weightedShare}` + (n.credit === undefined ? "" : `, credit ${n.credit}`), "quota"));
}
function select(name) { state.selected = name; pendingTotal = -1; showSelected(); refreshPending(); refreshAdmitted(); tree.draw(); }

// -- live updates ----------------------------------------------------------------------
// A full `summary` event replaces the state; a `delta` carries the totals, the recent
// events and only the tree rows that changed (same tree shape). The selected
// ClusterQueue's lists are re-fetched when its row changed, else at most every 5 s.
let nodeIndex = new Map(); let lastListRefresh = 0;
const nodeKey = (n) => n.kind + "/" + n.name;
function applyDelta(delta) {
  if (!state.summary) return;
  const { changed, ...totals } = delta;
  let selectedChanged = false;
  for (const row of changed) {
    const i = nodeIndex.get(nodeKey(row));
    if (i === undefined) continue;
    state.summary.nodes[i] = row;
    if (row.kind === "ClusterQueue" && row.name === state.selected) selectedChanged = true;
  }
  apply({ ...totals, nodes: state.summary.nodes }, selectedChanged || Date.now() - lastListRefresh > 5000);
}
function apply(summary, refreshLists = true) {
  state.summary = summary;
  nodeIndex = new Map(summary.nodes.map((n, i) => [nodeKey(n), i]));
  document.getElementById("totals").textContent =
    `${summary.clusterQueues} ClusterQueues · ${summary.cohorts} Cohorts · ${summary.pending} pending · ${summary.admitted} admitted` +
    (summary.unroutable ? ` · ${summary.unroutable} without a queue` : "");
  layoutTree();
  if (!state.selected) { const first = summary.nodes.find((n) => n.kind === "ClusterQueue"); if (first) select(first.name); }
  else { showSelected(); if (refreshLists) { refreshPending(); refreshAdmitted(); } }
  if (refreshLists) lastListRefresh = Date.now();
  const recent = document.getElementById("recent"); recent.textContent = "";
  for (const e of summary.recent) {
    const line = document.createElement("div"); line.className = "ev-" + e.kind;
    line.textContent = `${e.time} ${e.kind.padEnd(9)} ${e.workload} ${e.clusterQueue}${e.reason ? " " + e.reason : ""}${e.message ? ": " + e.message : ""}`;
    recent.appendChild(line);
  }
  document.body.dataset.version = String((Number(document.body.dataset.version) || 0) + 1);
}

document.getElementById("filter").addEventListener("input", (ev) => { state.filter = ev.target.value; layoutTree(); });
const source = new EventSource("/events");
source.addEventListener("summary", (ev) => apply(JSON.parse(ev.data)));
source.addEventListener("delta", (ev) => applyDelta(JSON.parse(ev.data)));
source.onopen = () => document.getElementById("live").className = "live on";
source.onerror = () => document.getElementById("live").className = "live off";
