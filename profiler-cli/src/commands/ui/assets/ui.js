// profctl ui: the page. It asks profctl (same origin, GET only) for the timeline and for
// views of a selected range, and draws them itself: the timeline as SVG, flame graphs as
// positioned elements (each frame one element with its name in data-name), the top table,
// the sandwich. No code or data comes from anywhere else.
"use strict";

const state = {
  mode: "daemon",     // or "files"
  span: 3600,         // seconds the timeline shows
  sliceSeconds: 0,    // the daemon's slice length, once known
  timeline: null,     // the last timeline answer
  selection: null,    // {since, until} or {file}
  base: null,         // the diff's other range {since, until} or {file}
  picking: false,     // the next drag picks the diff's other range
  filter: {},         // pid, descendants, comm, uid, cgroup, function
  focus: null,        // function the flame graph is focused on
  zoom: null,         // frame zoomed into
  flame: null,        // the last flame answer
  topBy: "self",
  topRows: [],
  dragStart: null,    // performance.now() at the end of the drag that asked for the flame graph
  refreshTimer: null,
  timelineAsked: 0,   // counters to drop the answers of superseded requests
  flameAsked: 0,
};

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#d9480f", "#1c7ed6", "#2b8a3e", "#ae3ec9", "#f08c00", "#0c8599", "#e64980", "#5c940d", "#6741d9", "#868e96"];

// ---------------------------------------------------------------- requests

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "" && v !== false) q.set(k, v === true ? "1" : String(v));
  }
  return q.toString();
}

async function api(name, params) {
  const answer = await fetch(`/api/${name}?${query(params)}`, { credentials: "same-origin" });
  const body = await answer.json().catch(() => ({ error: `${answer.status} ${answer.statusText}` }));
  if (!answer.ok) throw new Error(body.error || `${answer.status}`);
  return body;
}

function showError(err) {
  $("error").textContent = err ? String(err.message || err) : "";
}

// What selects stacks: the range (or file), the filter and the measure.
function selectionParams(sel) {
  const p = {};
  if (sel.file !== undefined) p.file = sel.file;
  else { p.since = sel.since.toFixed(3); p.until = sel.until.toFixed(3); }
  const f = state.filter;
  if (state.mode === "daemon") {
    Object.assign(p, { pid: f.pid, descendants: f.descendants && f.pid ? 1 : null, comm: f.comm, uid: f.uid, cgroup: f.cgroup });
    const m = $("measure").value;
    if (m !== "cpu") p.measure = m;
  }
  p.function = f.function;
  return p;
}

// ---------------------------------------------------------------- time

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
}

function duration(s) {
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 5400) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${(s / 3600).toFixed(1)} h`;
}

function rangeText(r) {
  if (r.file !== undefined) return state.files[r.file].name;
  const day = new Date(r.since * 1000).toLocaleDateString();
  return `${day} ${clock(r.since)} – ${clock(r.until)} (${duration(r.until - r.since)})`;
}

// ---------------------------------------------------------------- timeline

// The timeline of the last `span` seconds. A refresh of the live timer whose answer comes
// after "live" was unticked is dropped, so that the timeline stays still under the pointer.
async function loadTimeline(fromTimer) {
  if (state.mode !== "daemon") return;
  const until = Date.now() / 1000;
  const since = until - state.span;
  const p = selectionParams({ since, until });
  p.by = $("by").value;
  p.top = 12;
  if (state.sliceSeconds > 0) p.bucket = Math.max(Math.ceil(state.sliceSeconds), Math.ceil(state.span / 300));
  const id = ++state.timelineAsked;
  try {
    const answer = await api("timeline", p);
    if (id !== state.timelineAsked || (fromTimer && !$("live").checked)) return;
    state.sliceSeconds = answer.slice_seconds || state.sliceSeconds;
    state.timeline = answer;
    drawTimeline();
    $("status").textContent = `updated ${clock(until)}`;
  } catch (err) {
    showError(err);
  }
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  if (state.mode !== "daemon" || !$("live").checked) return;
  const bucket = state.timeline ? state.timeline.timeline.bucket_seconds : 2;
  const every = Math.max(2, Math.min(bucket, 30)) * 1000;
  state.refreshTimer = setTimeout(async () => {
    if (!state.dragging && document.visibilityState !== "hidden") await loadTimeline(true);
    scheduleRefresh();
  }, every);
}

function groupsOf(buckets) {
  const totals = new Map();
  for (const b of buckets) for (const [g, c] of Object.entries(b.cpu)) totals.set(g, (totals.get(g) || 0) + c);
  return [...totals.entries()].sort((a, b) => (a[0] === "other") - (b[0] === "other") || b[1] - a[1]).map((e) => e[0]);
}

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function drawTimeline() {
  const svg = $("timeline");
  const { timeline, since, until } = state.timeline;
  const width = svg.clientWidth || 1000, height = svg.clientHeight || 180;
  const left = 34, bottom = 16, plotW = width - left - 4, plotH = height - bottom - 4;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.dataset.since = since;
  svg.dataset.until = until;
  svg.dataset.left = left;
  svg.dataset.plotWidth = plotW;
  svg.replaceChildren();
  const buckets = timeline.buckets || [];
  const groups = groupsOf(buckets);
  const peak = Math.max(0.05, ...buckets.map((b) => Object.values(b.cpu).reduce((s, c) => s + c, 0)));
  const x = (t) => left + ((t - since) / (until - since)) * plotW;
  const y = (c) => 4 + plotH - (c / peak) * plotH;
  for (let i = 0; i <= 4; i++) {
    const c = (peak * i) / 4;
    svgEl("line", { x1: left, x2: left + plotW, y1: y(c), y2: y(c), class: "grid" }, svg);
    svgEl("text", { x: 2, y: y(c) + 3, class: "axis" }, svg).textContent = c.toFixed(c < 1 ? 2 : 1);
  }
  const ticks = 6;
  for (let i = 0; i <= ticks; i++) {
    const t = since + ((until - since) * i) / ticks;
    svgEl("text", { x: Math.min(x(t), width - 48), y: height - 3, class: "axis" }, svg).textContent = clock(t);
  }
  const bw = timeline.bucket_seconds;
  for (const b of buckets) {
    let acc = 0;
    const x0 = x(Math.max(b.start, since)), x1 = x(Math.min(b.start + bw, until));
    groups.forEach((g, i) => {
      const c = b.cpu[g] || 0;
      if (c <= 0) return;
      const rect = svgEl("rect", { x: x0, width: Math.max(0.5, x1 - x0), y: y(acc + c), height: y(acc) - y(acc + c), fill: COLOURS[i % COLOURS.length] }, svg);
      rect.dataset.group = g;
      rect.dataset.start = b.start;
      rect.dataset.cores = c.toFixed(3);
      acc += c;
    });
  }
  const legend = $("legend");
  legend.replaceChildren();
  groups.forEach((g, i) => {
    const item = document.createElement("span");
    item.className = "group";
    item.dataset.group = g;
    const key = document.createElement("span");
    key.className = "key";
    key.style.background = COLOURS[i % COLOURS.length];
    item.append(key, g);
    legend.appendChild(item);
  });
  const unit = $("measure").value === "cpu" ? "cores" : "threads";
  svg.setAttribute("aria-label", `${unit} over time, by ${$("by").value}; peak ${peak.toFixed(2)}`);
  drawMarks();
}

// The selected range and the diff's other range on the timeline.
function drawMarks() {
  const svg = $("timeline");
  svg.querySelectorAll(".selection, .base").forEach((e) => e.remove());
  for (const [r, cls] of [[state.selection, "selection"], [state.base, "base"]]) {
    if (!r || r.since === undefined || !state.timeline) continue;
    const { since, until } = state.timeline;
    const left = +svg.dataset.left, w = +svg.dataset.plotWidth;
    const a = left + Math.max(0, (r.since - since) / (until - since)) * w;
    const b = left + Math.min(1, (r.until - since) / (until - since)) * w;
    if (b <= a) continue;
    svgEl("rect", { x: a, width: b - a, y: 2, height: (svg.clientHeight || 180) - 18, class: cls }, svg);
  }
}

function timeAt(svg, clientX) {
  const box = svg.getBoundingClientRect();
  const left = +svg.dataset.left, w = +svg.dataset.plotWidth;
  const frac = Math.min(1, Math.max(0, (clientX - box.left - left) / w));
  return +svg.dataset.since + frac * (+svg.dataset.until - +svg.dataset.since);
}

function setupDrag() {
  const svg = $("timeline");
  let from = null, band = null;
  svg.addEventListener("mousedown", (e) => {
    if (!state.timeline) return;
    e.preventDefault();
    from = timeAt(svg, e.clientX);
    state.dragging = true;
    band = svgEl("rect", { x: e.clientX - svg.getBoundingClientRect().left, width: 0, y: 2, height: (svg.clientHeight || 180) - 18, class: state.picking ? "base" : "selection" }, svg);
  });
  window.addEventListener("mousemove", (e) => {
    if (from === null) return;
    const box = svg.getBoundingClientRect();
    const start = box.left + +svg.dataset.left + ((from - +svg.dataset.since) / (+svg.dataset.until - +svg.dataset.since)) * +svg.dataset.plotWidth;
    band.setAttribute("x", Math.min(start, e.clientX) - box.left);
    band.setAttribute("width", Math.abs(e.clientX - start));
  });
  window.addEventListener("mouseup", (e) => {
    if (from === null) return;
    const to = timeAt(svg, e.clientX);
    state.dragging = false;
    band.remove();
    const range = { since: Math.min(from, to), until: Math.max(from, to) };
    from = null;
    if (range.until - range.since < 0.5) return; // a click, not a drag
    if (state.picking) {
      state.picking = false;
      $("compare").textContent = "compare with another range…";
      setBase(range);
    } else {
      state.dragStart = performance.now();
      select(range);
    }
  });
}

// ---------------------------------------------------------------- selection and views

function select(range) {
  state.selection = range;
  state.zoom = null;
  state.focus = null;
  $("sandwich").hidden = true;
  $("range-bar").hidden = false;
  $("views").hidden = false;
  $("range-text").textContent = rangeText(range);
  if (range.since !== undefined) Object.assign($("range-bar").dataset, { since: range.since.toFixed(3), until: range.until.toFixed(3) });
  if (range.since !== undefined) $("pprof").href = `/api/pprof?${query(selectionParams(range))}`;
  drawMarks();
  loadViews();
}

function setBase(range) {
  state.base = range;
  $("diff-text").textContent = range ? `against ${rangeText(range)}` : "";
  const bar = $("range-bar").dataset;
  if (range && range.since !== undefined) Object.assign(bar, { baseSince: range.since.toFixed(3), baseUntil: range.until.toFixed(3) });
  else { delete bar.baseSince; delete bar.baseUntil; }
  $("no-diff").hidden = !range;
  $("diff-legend").hidden = !range;
  drawMarks();
  if (state.selection) loadFlame();
}

function minwidth() {
  const w = $("flame").clientWidth || 1200;
  return Math.min(5, Math.max(0.001, 50 / w)); // half a pixel, in percent of the width
}

async function loadViews() {
  showError(null);
  // The flame graph first: profctl asks the daemon one request at a time, and the flame
  // graph's is the bounded one, the table's every stack.
  await loadFlame();
  await loadTop();
  if (state.sandwich) openSandwich(state.sandwich);
  if ($("search").value) runSearch();
}

async function loadFlame() {
  const sel = state.selection;
  if (!sel) return;
  const id = ++state.flameAsked;
  const p = selectionParams(sel);
  p.minwidth = minwidth().toFixed(4);
  let answer;
  try {
    if (state.base) {
      Object.assign(p, state.base.file !== undefined ? { base_file: state.base.file } : { base_since: state.base.since.toFixed(3), base_until: state.base.until.toFixed(3) });
      const [flame, about] = await Promise.all([api("diff", p), api("flame", Object.assign({}, p, { base_since: null, base_until: null, base_file: null }))]);
      answer = { flame, about: about.about, diff: true };
    } else {
      if (state.focus) p.focus = state.focus;
      answer = await api("flame", p);
    }
  } catch (err) {
    showError(err);
    return;
  }
  if (id !== state.flameAsked) return;
  state.flame = answer;
  $("command").value = answer.about.command;
  drawFlame();
  const note = $("focus-note");
  note.textContent = state.focus ? `focused on ${state.focus} (its callees, from every call): ` : "";
  if (state.focus) {
    const back = document.createElement("button");
    back.type = "button";
    back.textContent = "whole graph";
    back.addEventListener("click", () => { state.focus = null; loadFlame(); });
    note.appendChild(back);
  }
  if (state.dragStart !== null) {
    const start = state.dragStart;
    state.dragStart = null;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      document.body.dataset.flameMs = (performance.now() - start).toFixed(0);
    }));
  }
}

async function loadTop() {
  if (!state.selection) return;
  try {
    const p = selectionParams(state.selection);
    p.by = state.topBy === "total" ? "total" : "self";
    p.limit = 300;
    const answer = await api("top", p);
    state.topRows = answer.rows;
    state.topTotal = answer.total;
    drawTop();
  } catch (err) {
    showError(err);
  }
}

function percent(n, total) {
  return total > 0 ? `${((100 * n) / total).toFixed(2)}%` : "–";
}

function drawTop() {
  const body = $("top").tBodies[0];
  body.replaceChildren();
  const rows = state.topRows.slice();
  if (state.topBy === "name") rows.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  document.querySelectorAll("#top th").forEach((th) => th.classList.toggle("sorted", th.dataset.by === state.topBy));
  for (const [name, own, total] of rows) {
    const tr = body.insertRow();
    tr.dataset.name = name;
    const a = tr.insertCell(); a.className = "num"; a.textContent = percent(own, state.topTotal); a.title = `${own}`;
    const b = tr.insertCell(); b.className = "num"; b.textContent = percent(total, state.topTotal); b.title = `${total}`;
    const c = tr.insertCell(); c.className = "fn"; c.textContent = name; c.title = "focus the flame graph on it";
    c.addEventListener("click", () => { state.focus = name; state.zoom = null; loadFlame(); });
    const d = tr.insertCell();
    const s = document.createElement("button");
    s.type = "button"; s.className = "open-sandwich"; s.textContent = "sandwich";
    s.addEventListener("click", () => openSandwich(name));
    d.appendChild(s);
  }
}

// ---------------------------------------------------------------- flame graphs

function prepare(answer) {
  const names = answer.names;
  const walk = (node, parent, depth) => {
    node.parent = parent;
    node.depth = depth;
    node.name = node.n === -1 ? "all" : node.n === -2 ? `[${node.k} frames under the minimum width]` : names[node.n];
    let deepest = depth;
    for (const c of node.c || []) deepest = Math.max(deepest, walk(c, node, depth + 1));
    return deepest;
  };
  answer.depth = walk(answer.tree, null, 0);
  return answer;
}

function hue(name) {
  let h = 0;
  for (let i = 0; i < name.length && i < 24; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return h;
}

function warm(name) {
  const h = hue(name);
  return `rgb(${205 + (h % 50)}, ${(h >> 8) % 180 + 40}, ${(h >> 16) % 55})`;
}

// Draw `answer` (a prepared tree) into `box`, growing up (flame) or down (icicle); zoomed into
// `zoom` if given. Options: diff colours, click and hover handlers.
function drawTree(box, answer, opts) {
  const ROW = 16;
  const total = answer.tree.v;
  const width = box.clientWidth || 1200;
  const zoom = opts.zoom || answer.tree;
  const up = box.classList.contains("up");
  const frames = [];
  const place = (node, x, w, depth) => {
    frames.push({ node, x, w, depth });
    let cx = x;
    for (const c of node.c || []) {
      const cw = (c.v / node.v) * w;
      if (cw * width >= 0.5) place(c, cx, cw, depth + 1);
      cx += cw;
    }
  };
  // The zoomed frame's ancestors, full width, then the zoomed frame's tree.
  const chain = [];
  if (!opts.noAncestors) for (let n = zoom.parent; n; n = n.parent) chain.unshift(n);
  chain.forEach((n, i) => frames.push({ node: n, x: 0, w: 1, depth: i, ancestor: true }));
  if (zoom.v > 0) place(zoom, 0, 1, chain.length);
  const maxDepth = frames.reduce((m, f) => Math.max(m, f.depth), 0);
  box.replaceChildren();
  box.style.height = `${(maxDepth + 1) * ROW}px`;
  const diff = opts.diff ? { total: answer.total, base: answer.base_total } : null;
  let maxDelta = 0;
  if (diff) for (const f of frames) maxDelta = Math.max(maxDelta, Math.abs(delta(f.node, diff)));
  const fragment = document.createDocumentFragment();
  for (const f of frames) {
    const el = document.createElement("div");
    el.className = "fr";
    el.style.left = `${(f.x * 100).toFixed(4)}%`;
    el.style.width = `${(f.w * 100).toFixed(4)}%`;
    el.style[up ? "bottom" : "top"] = `${f.depth * ROW}px`;
    el.textContent = f.node.name;
    el.dataset.name = f.node.name;
    el.dataset.value = f.node.v;
    el.dataset.share = ((100 * f.node.v) / Math.max(1, total)).toFixed(2);
    if (f.node.n === -1) el.classList.add("root");
    else if (f.node.n === -2) el.classList.add("merged");
    if (f.ancestor) el.classList.add("ancestor");
    if (diff) {
      const d = delta(f.node, diff);
      const s = maxDelta > 0 ? Math.min(1, Math.abs(d) / maxDelta) : 0;
      const fade = Math.round(255 * (1 - 0.85 * s));
      el.style.background = d > 0 ? `rgb(255, ${fade}, ${fade})` : d < 0 ? `rgb(${fade}, ${fade}, 255)` : "rgb(235, 235, 235)";
      // A change of at least a tenth of a point of the total is marked.
      if (d > 0.001) el.classList.add("grown");
      else if (d < -0.001) el.classList.add("shrunk");
      el.dataset.before = ((100 * f.node.b) / Math.max(1, diff.base)).toFixed(2);
    } else if (f.node.n >= 0) {
      el.style.background = warm(f.node.name);
    }
    el.__node = f.node;
    fragment.appendChild(el);
  }
  box.appendChild(fragment);
  if (opts.onClick) box.onclick = (e) => { const el = e.target.closest(".fr"); if (el) opts.onClick(el.__node, e); };
  box.oncontextmenu = (e) => {
    const el = e.target.closest(".fr");
    if (!el || el.__node.n < 0) return;
    e.preventDefault();
    openSandwich(el.__node.name);
  };
  box.onmousemove = (e) => tooltip(e, e.target.closest(".fr"), answer, diff);
  box.onmouseleave = () => { $("tooltip").hidden = true; };
  highlight();
}

// The change of a frame's share of its side's total, from the base to this range (a fraction).
function delta(node, diff) {
  const after = diff.total > 0 ? node.v / diff.total : 0;
  const before = diff.base > 0 ? (node.b || 0) / diff.base : 0;
  return after - before;
}

function tooltip(e, el, answer, diff) {
  const tip = $("tooltip");
  if (!el) { tip.hidden = true; return; }
  const node = el.__node;
  const unit = state.flame && state.flame.about ? state.flame.about.unit : "samples";
  let text = `${node.name}\n${node.v} ${unit}, ${percent(node.v, answer.tree.v)}`;
  if (diff) text += `\nbefore ${el.dataset.before}% → now ${el.dataset.share}% of each range's total`;
  text += "\nclick: zoom · right click: sandwich";
  tip.textContent = text;
  tip.style.whiteSpace = "pre-wrap";
  tip.style.left = `${Math.min(e.clientX + 12, window.innerWidth - 380)}px`;
  tip.style.top = `${e.clientY + 14}px`;
  tip.hidden = false;
}

function drawFlame() {
  const answer = state.flame;
  if (!answer) return;
  const tree = prepare(answer.flame);
  let zoom = null;
  if (state.zoom) {
    // The same frame in the new tree, by its path of names.
    zoom = tree.tree;
    for (const name of state.zoom) {
      zoom = (zoom.c || []).find((c) => c.name === name);
      if (!zoom) break;
    }
  }
  drawTree($("flame"), tree, {
    zoom,
    diff: answer.diff,
    onClick: (node) => {
      const path = [];
      for (let n = node; n && n.parent; n = n.parent) path.unshift(n.name);
      state.zoom = node.parent ? path : null;
      drawFlame();
    },
  });
  $("reset").disabled = !state.zoom;
  const f = answer.flame;
  const unit = answer.about.unit;
  let note = `${f.total} ${unit}`;
  if (answer.about.slices) note += ` in ${answer.about.slices} slices, ${answer.about.event} at ${answer.about.frequency} Hz${answer.about.kernel ? "" : ", user space only"}`;
  if (f.merged_frames > 0) note += `; ${f.merged_frames} frames narrower than ${f.min_value} ${unit} (${percent(f.min_value, f.total)} of the width) are merged into grey frames`;
  if (answer.about.cut > 0) note += `; ${answer.about.cut} stacks cut at 512 frames`;
  $("merged-note").textContent = note;
  const root = $("flame");
  root.dataset.total = f.total;
  root.dataset.ready = String(++state.drawn);
}
state.drawn = 0;

// ---------------------------------------------------------------- search

let searchTimer = null;
function highlight() {
  const q = $("search").value;
  document.querySelectorAll(".flame .fr").forEach((el) => el.classList.toggle("match", !!q && el.__node.n >= 0 && el.dataset.name.includes(q)));
}

async function runSearch() {
  highlight();
  const q = $("search").value;
  const out = $("matched");
  if (!q || !state.selection) { out.textContent = ""; delete out.dataset.percent; return; }
  try {
    const p = selectionParams(state.selection);
    p.q = q;
    const answer = await api("search", p);
    if ($("search").value !== q) return;
    out.textContent = `matched: ${answer.percent.toFixed(2)}% (${answer.matched} of ${answer.total}, ${answer.functions} functions)`;
    out.dataset.percent = answer.percent.toFixed(2);
    out.dataset.query = q;
  } catch (err) {
    showError(err);
  }
}

// ---------------------------------------------------------------- sandwich

async function openSandwich(name) {
  if (!state.selection) return;
  state.sandwich = name;
  try {
    const p = selectionParams(state.selection);
    p.name = name;
    p.minwidth = minwidth().toFixed(4);
    const answer = await api("sandwich", p);
    const box = $("sandwich");
    box.hidden = false;
    $("sandwich-name").textContent = name;
    $("sandwich-figures").textContent = `self ${percent(answer.self, answer.samples)}, total ${percent(answer.total, answer.samples)}`;
    // Each tree's root frame is the function itself (the "all" above it says nothing).
    for (const [id, tree] of [["callers", prepare(answer.callers)], ["callees", prepare(answer.callees)]]) {
      drawTree($(id), tree, { zoom: (tree.tree.c || [])[0], noAncestors: true });
    }
    box.dataset.name = name;
    box.scrollIntoView({ block: "nearest" });
  } catch (err) {
    showError(err);
  }
}

// ---------------------------------------------------------------- controls

function readFilter() {
  const text = (id) => $(id).value.trim();
  state.filter = {
    pid: text("f-pid"), descendants: $("f-descendants").checked, comm: text("f-comm"),
    uid: text("f-uid"), cgroup: text("f-cgroup"), function: text("f-function"),
  };
}

function refreshAll() {
  loadTimeline(false);
  if (state.selection) loadViews();
}

function setupControls() {
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); readFilter(); refreshAll(); });
  $("clear").addEventListener("click", () => {
    for (const id of ["f-pid", "f-comm", "f-uid", "f-cgroup", "f-function"]) $(id).value = "";
    $("f-descendants").checked = false;
    readFilter();
    refreshAll();
  });
  $("span").addEventListener("change", () => { state.span = +$("span").value; loadTimeline(); });
  $("by").addEventListener("change", () => loadTimeline());
  $("measure").addEventListener("change", refreshAll);
  $("live").addEventListener("change", scheduleRefresh);
  $("search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 150); highlight(); });
  $("reset").addEventListener("click", () => { state.zoom = null; drawFlame(); });
  $("compare").addEventListener("click", () => {
    state.picking = !state.picking;
    $("compare").textContent = state.picking ? "drag over the timeline to pick it…" : "compare with another range…";
  });
  $("before").addEventListener("click", () => {
    const s = state.selection;
    if (s && s.since !== undefined) setBase({ since: 2 * s.since - s.until, until: s.since });
  });
  $("no-diff").addEventListener("click", () => { $("base-file").value = ""; setBase(null); });
  $("base-file").addEventListener("change", () => {
    const v = $("base-file").value;
    setBase(v === "" ? null : { file: +v });
  });
  $("file").addEventListener("change", () => select({ file: +$("file").value }));
  $("copy").addEventListener("click", () => {
    const text = $("command").value;
    if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
    $("command").select();
  });
  $("sandwich-close").addEventListener("click", () => { state.sandwich = null; $("sandwich").hidden = true; });
  document.querySelectorAll("#top th[data-by]").forEach((th) => th.addEventListener("click", () => {
    state.topBy = th.dataset.by;
    if (th.dataset.by === "name") drawTop();
    else loadTop();
  }));
  window.addEventListener("resize", () => { if (state.timeline) drawTimeline(); if (state.flame) drawFlame(); });
}

async function start() {
  setupControls();
  setupDrag();
  let info;
  try {
    info = await api("info", {});
  } catch (err) {
    showError(err);
    return;
  }
  state.mode = info.mode;
  state.files = info.files;
  document.body.classList.add(info.mode);
  if (info.mode === "files") {
    $("source").textContent = `${info.files.length} file(s)`;
    info.files.forEach((f, i) => {
      for (const list of [$("file"), $("base-file")]) {
        const o = document.createElement("option");
        o.value = i;
        o.textContent = `${f.name} (${f.kind}, ${f.samples} samples)`;
        list.appendChild(o);
      }
    });
    select({ file: 0 });
  } else {
    $("source").textContent = `profilerd at ${info.socket}`;
    state.span = info.span;
    const spans = $("span");
    if (![...spans.options].some((o) => +o.value === Math.round(info.span))) {
      const o = document.createElement("option");
      o.value = Math.round(info.span);
      o.textContent = duration(info.span);
      spans.appendChild(o);
    }
    spans.value = String(Math.round(info.span));
    await loadTimeline();
    scheduleRefresh();
  }
  document.body.dataset.started = "1";
}

start();
