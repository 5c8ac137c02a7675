// Quartermaster dashboard: the cohort tree, one ClusterQueue's pending and admitted
// workloads, recent events. Live by Server-Sent Events (/events); lists render only the
// rows in view (VList) and the pending list is fetched a window at a time.
"use strict";
const ROW = 26; // a row's height until it has been measured
const state = { summary: null, selected: null, collapsed: new Set(), filter: "" };

class VList {
  // A virtualised list of `count` rows of varying height: `render(i)` -> element (or
  // null while loading). Rows are placed at measured offsets (estimated until drawn),
  // so rows that wrap their text take the room they need and never overlap.
  constructor(el, render) {
    this.el = el; this.render = render; this.count = 0; this.heights = [];
    this.offsets = [0];
    this.spacer = document.createElement("div"); el.appendChild(this.spacer);
    el.addEventListener("scroll", () => this.draw());
    new ResizeObserver(() => this.draw()).observe(el);
  }
  setCount(n) { this.count = n; this.heights = []; this.layout(); this.draw(); }
  layout() {
    const offsets = new Array(this.count + 1); offsets[0] = 0;
    for (let i = 0; i < this.count; i++) offsets[i + 1] = offsets[i] + (this.heights[i] || ROW);
    this.offsets = offsets; this.spacer.style.height = offsets[this.count] + "px";
  }
  indexAt(y) { // the row at offset y (binary search)
    let lo = 0, hi = this.count;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (this.offsets[mid + 1] <= y) lo = mid + 1; else hi = mid; }
    return lo;
  }
  visible() {
    const first = Math.max(0, this.indexAt(this.el.scrollTop) - 5);
    const last = Math.min(this.count, this.indexAt(this.el.scrollTop + this.el.clientHeight) + 6);
    return [first, last];
  }
  draw() {
    // Measured heights move the rows below them, and may bring rows into view: place
    // again until nothing moves (a couple of passes; heights do not depend on offsets).
    for (let pass = 0; pass < 4; pass++) if (!this.place()) break;
  }
  place() {
    const [first, last] = this.visible();
    for (const old of Array.from(this.el.querySelectorAll(":scope > .row"))) old.remove();
    const drawn = [];
    for (let i = first; i < last; i++) {
      const row = this.render(i);
      if (!row) continue;
      row.classList.add("row"); row.style.top = this.offsets[i] + "px"; row.dataset.index = i;
      this.el.appendChild(row); drawn.push([i, row]);
    }
    let changed = false; // measure what was drawn
    for (const [i, row] of drawn) {
      const h = row.offsetHeight;
      if (h && h !== this.heights[i]) { this.heights[i] = h; changed = true; }
    }
    if (changed) this.layout();
    return changed;
  }
}

function span(text, cls) { const s = document.createElement("span"); s.textContent = text; if (cls) s.className = cls; return s; }

// A resource as a chip label: the part after the vendor prefix ("nvidia.com/gpu" ->
// "gpu"); the full name is in the chip's tooltip and in the ClusterQueue's detail.
const shortName = (resource) => resource.slice(resource.lastIndexOf("/") + 1);

function chip(q) {
  const c = document.createElement("span");
  c.className = "chip" + (q.accelerator ? " accel" : "");
  c.dataset.quantity = `${q.flavor}/${q.resource}`;
  const pct = q.quota > 0 ? Math.min(100, 100 * q.used / q.quota) : (q.used > 0 ? 100 : 0);
  const fill = document.createElement("i"); fill.style.width = pct + "%";
  if (q.used > q.quota) fill.className = "over";
  const label = document.createElement("b");
  label.textContent = `${shortName(q.resource)} ${q.usedText} / ${q.quotaText}` + (q.borrowed !== "0" ? ` +${q.borrowed}` : "");
  c.title = `${q.flavor} ${q.resource}: ${q.usedText} in use of ${q.quotaText} nominal` +
    (q.borrowed !== "0" ? `, ${q.borrowed} borrowed` : "") +
    (q.borrowingLimit ? `, borrowingLimit ${q.borrowingLimit}` : "") + (q.lendingLimit ? `, lendingLimit ${q.lendingLimit}` : "");
  c.append(fill, label);
  return c;
}

function usage(quantities) {
  // one line per flavor (in the order the server gives: a ClusterQueue's flavors in
  // the order they are tried, accelerators first), its resources as chips that wrap
  const d = document.createElement("div"); d.className = "usage";
  const lines = new Map();
  for (const q of quantities) {
    let line = lines.get(q.flavor);
    if (!line) {
      line = document.createElement("div"); line.className = "flavor-line";
      const chips = document.createElement("span"); chips.className = "chips";
      line.append(span(q.flavor, "flavor"), chips); lines.set(q.flavor, line); d.appendChild(line);
    }
    line.lastChild.appendChild(chip(q));
  }
  return d;
}

// Column widths from the content: the longest text of a column, in characters.
function widest(texts, floor, cap) {
  let w = floor;
  for (const t of texts) w = Math.max(w, String(t).length);
  return Math.min(w, cap) + 1 + "ch";
}

const priorityText = (p) => p.priorityClass ? `${p.priorityClass} (${p.priority})` : String(p.priority);

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
  r.append(name, usage(n.quantities), span(n.pending, "num"), span(n.admitted, "num"),
           span(n.weightedShare, "num"), span(n.credit === undefined ? "" : n.credit, "num"));
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
  treeRows = rows;
  const pane = document.getElementById("tree-pane");
  pane.style.setProperty("--name-w", widest(nodes.map((n) => "\u00a0".repeat(n.depth * 3 + 2) + n.name +
    (n.stopPolicy && n.stopPolicy !== "None" ? ` [${n.stopPolicy}]` : "")), 8, 60));
  pane.style.setProperty("--flavor-w", widest(nodes.flatMap((n) => n.quantities.map((q) => q.flavor)), 4, 40));
  tree.setCount(rows.length);
}

// -- one ClusterQueue ------------------------------------------------------------------
const pendingCache = new Map(); let pendingTotal = 0; let pendingVersion = 0;
const pending = new VList(document.getElementById("pending"), (i) => {
  const p = pendingCache.get(i);
  if (!p) { fetchPending(i); return null; }
  const r = document.createElement("div"); r.className = "pending-row" + (p.parked ? " parked" : "");
  r.dataset.workload = p.workload;
  r.append(span(p.positionInClusterQueue, "num"), span(p.positionInLocalQueue, "num"), span(p.workload),
           span(p.localQueue), span(priorityText(p)), span(p.reason, "reason"), span(p.message, "message"));
  r.title = `${p.workload}: ${p.reason}${p.message ? ": " + p.message : ""}`;
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
    sizePendingColumns();
    if (page.total !== pendingTotal) { pendingTotal = page.total; pending.setCount(page.total); }
    else pending.draw();
    document.getElementById("pending-count").textContent = `(${page.total})`;
  } finally { inflight.delete(start); }
}
function sizePendingColumns() {
  const items = Array.from(pendingCache.values());
  const pane = document.getElementById("detail-pane");
  pane.style.setProperty("--w-workload", widest(items.map((p) => p.workload), 8, 48));
  pane.style.setProperty("--w-lq", widest(items.map((p) => p.localQueue), 10, 32));
  pane.style.setProperty("--w-prio", widest(items.map(priorityText), 4, 32));
  pane.style.setProperty("--w-reason", widest(items.map((p) => p.reason), 6, 32));
}
function refreshPending() {
  pendingVersion++; pendingCache.clear(); inflight.clear();
  const [first] = pending.visible(); fetchPending(first);
}

let admittedItems = [];
const admittedList = new VList(document.getElementById("admitted"), (i) => {
  const a = admittedItems[i]; if (!a) return null;
  const r = document.createElement("div");
  const waiting = (a.waitingFor || []).map((c) => `${c.name}: ${c.state}${c.message ? " (" + c.message + ")" : ""}`);
  const note = a.evicting ? " (evicting)" : waiting.length ? ` (quota reserved, waiting for AdmissionChecks ${waiting.join(", ")})` : "";
  const sick = (a.unhealthyNodes || []).length ? ` · unhealthy nodes: ${a.unhealthyNodes.join(", ")}` : "";
  r.append(span(a.workload), span(priorityText(a)), span(a.usage + note + sick, "message"));
  return r;
});
async function refreshAdmitted() {
  if (!state.selected) return;
  const resp = await fetch(`/api/admitted?cq=${encodeURIComponent(state.selected)}&limit=500`);
  if (!resp.ok) return;
  const page = await resp.json(); admittedItems = page.items;
  const pane = document.getElementById("detail-pane");
  pane.style.setProperty("--w-admitted", widest(page.items.map((a) => a.workload), 8, 48));
  pane.style.setProperty("--w-admitted-prio", widest(page.items.map(priorityText), 4, 32));
  admittedList.setCount(page.items.length);
  document.getElementById("admitted-count").textContent = `(${page.total})`;
}

function showSelected() {
  const n = state.summary && state.summary.nodes.find((x) => x.name === state.selected && x.kind === "ClusterQueue");
  document.getElementById("detail-title").textContent = n ? `ClusterQueue ${n.name}` + (n.parent ? ` (cohort ${n.parent})` : "") : "Select a ClusterQueue";
  const q = document.getElementById("detail-quotas"); q.textContent = "";
  if (!n) return;
  // every quantity in full, one line each: the expanded form of the tree's chips
  const table = document.createElement("table"); table.className = "quotas";
  const head = table.insertRow();
  for (const h of ["flavor", "resource", "in use", "nominal", "borrowed", "borrowingLimit", "lendingLimit"]) {
    const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
  }
  let previous = null;
  for (const x of n.quantities) {
    const row = table.insertRow();
    if (x.flavor !== previous) row.className = "first";
    for (const v of [x.flavor === previous ? "" : x.flavor, x.resource, x.usedText, x.quotaText, x.borrowed,
                     x.borrowingLimit || "", x.lendingLimit || ""]) row.insertCell().textContent = v;
    previous = x.flavor;
  }
  q.appendChild(span(`weighted share ${n.weightedShare}` + (n.credit === undefined ? "" : `, credit ${n.credit}`), "quota"));
  q.appendChild(table);
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
// text widths change when a web font arrives: measure the rows again
document.fonts.addEventListener("loadingdone", () => { for (const list of [tree, pending, admittedList]) list.setCount(list.count); });
const source = new EventSource("/events");
source.addEventListener("summary", (ev) => apply(JSON.parse(ev.data)));
source.addEventListener("delta", (ev) => applyDelta(JSON.parse(ev.data)));
source.onopen = () => document.getElementById("live").className = "live on";
source.onerror = () => document.getElementById("live").className = "live off";
