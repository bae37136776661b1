// The fedclust coordinator dashboard: plain DOM code over the JSON API, same origin only.
// Every API request carries the analyst token (kept in sessionStorage) as a bearer token;
// under mutual TLS the browser also presents its client certificate, as any client does.
// Every value from the API is placed with textContent, never parsed as HTML.
"use strict";

const API = "../api/v1";
const TOKEN_KEY = "fedclust.analystToken";
const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
const SCOPE_HELP = "this browser's credentials lack the analyst scope: submitting, " +
  "cancelling and reading jobs need an analyst's (or admin's) token and, under mutual TLS, " +
  "the client certificate issued to that analyst's name";

let timer = null;
let generation = 0;  // a render loop stops once route() has started another
let currentJob = null;  // the job the job view shows (its id and state)
let registry = [];  // GET /algorithms: the registered algorithms

function $(id) { return document.getElementById(id); }

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class AuthError extends Error {}
class ScopeError extends Error {}

// A FastAPI error body as one line: its detail text, or each validation error's field and
// message (422).
function detailText(body, fallback) {
  if (typeof body.detail === "string") { return body.detail; }
  if (Array.isArray(body.detail)) {
    return body.detail.map((item) => {
      const loc = Array.isArray(item.loc) ? item.loc.filter((p) => p !== "body").join(".") : "";
      return (loc ? loc + ": " : "") + item.msg;
    }).join("; ");
  }
  return fallback;
}

// The one request helper: GET (or POST with a JSON body) under the API prefix; the parsed
// JSON answer, or with {text: true} the body as text.
async function api(path, options) {
  const opts = options || {};
  const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
  const init = { method: opts.method || "GET", headers: headers, cache: "no-store" };
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(opts.body);
  }
  const response = await fetch(API + path, init);
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    throw new AuthError("the coordinator refused the token: sign in again");
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = detailText(await response.json(), detail); } catch (ignored) { /* text */ }
    if (response.status === 403) {
      throw new ScopeError("Not allowed: " + SCOPE_HELP + " (the coordinator said: " +
        detail + ").");
    }
    throw new Error(response.status + " " + detail);
  }
  return opts.text ? response.text() : response.json();
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) { node.textContent = String(text); }
  if (className) { node.className = className; }
  return node;
}

function cell(row, text, className) {
  const td = element("td", text === null || text === undefined ? "—" : text, className);
  row.appendChild(td);
  return td;
}

function headerRow(table, names) {
  clear(table.tHead);
  const row = table.tHead.insertRow();
  for (const name of names) { row.appendChild(element("th", name)); }
}

function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }

function when(iso) { return iso ? new Date(iso).toLocaleString() : "—"; }

function number(value, digits) {
  return typeof value === "number" ? value.toFixed(digits) : "—";
}

function progressText(job) {
  const p = job.progress;
  if (!p) { return job.error || ""; }
  const parts = [p.stage];
  if (p.k !== null && p.k !== undefined) { parts.push("K=" + p.k); }
  if (p.round !== null && p.round !== undefined) { parts.push("round " + p.round); }
  if (typeof p.shift === "number") { parts.push("shift " + p.shift.toExponential(2)); }
  if (p.waiting_for && p.waiting_for.length) {
    parts.push("waiting for " + p.waiting_for.join(", "));
  }
  return parts.join(" · ");
}

function stateCell(row, state) { cell(row, state, "state state-" + state); }

function live(state) { return state === "pending" || state === "running"; }

// -- views -------------------------------------------------------------------------------
const VIEWS = ["login-view", "jobs-view", "new-view", "job-view", "participants-view"];

function show(view) {
  for (const id of VIEWS) { $(id).hidden = id !== view; }
  $("nav").hidden = view === "login-view";
}

async function renderJobs() {
  const jobs = await api("/jobs");
  const body = $("jobs").tBodies[0];
  clear(body);
  for (const job of jobs.slice().reverse()) {
    const row = body.insertRow();
    const link = element("a", job.id);
    link.href = "#job/" + encodeURIComponent(job.id);
    cell(row, "").appendChild(link);
    cell(row, job.spec.algorithm);
    stateCell(row, job.state);
    cell(row, progressText(job));
    cell(row, when(job.created_at));
  }
  $("jobs-empty").hidden = jobs.length > 0;
  return true;
}

async function renderParticipants() {
  const participants = await api("/participants");
  const body = $("participants").tBodies[0];
  clear(body);
  for (const p of participants) {
    const row = body.insertRow();
    cell(row, p.id);
    cell(row, p.enrolled ? "yes" : "no");
    cell(row, p.n_features, "num");
    cell(row, (p.allowed_algorithms || []).join(", "));
    cell(row, when(p.enrolled_at));
    cell(row, when(p.last_contact));
  }
  return true;
}

// -- the job form ------------------------------------------------------------------------
function selectedAlgorithm() {
  return registry.find((a) => a.name === $("algorithm").value) || null;
}

// Show the fields the chosen algorithm takes; a member that has not enrolled, or whose
// policy does not allow the algorithm, cannot be chosen (the coordinator would refuse it).
function fitForm() {
  const algorithm = selectedAlgorithm();
  if (!algorithm) { return; }
  $("algorithm-title").textContent = algorithm.title;
  for (const node of document.querySelectorAll("#submit-form .sweep-only")) {
    node.hidden = algorithm.family !== "sweep";
  }
  for (const node of document.querySelectorAll("#submit-form .contributors-only")) {
    node.hidden = !algorithm.counts_contributors;
  }
  const protection = $("protection");
  for (const option of protection.options) {
    option.disabled = algorithm.plain_only && option.value !== "none";
  }
  if (algorithm.plain_only) { protection.value = "none"; }
  $("protection-hint").textContent = algorithm.plain_only
    ? algorithm.name + " sends each participant's local centers by design: protection 'none' only."
    : "";
  for (const box of document.querySelectorAll("#members input[type=checkbox]")) {
    const allowed = box.dataset.enrolled === "yes" &&
      box.dataset.algorithms.split(" ").includes(algorithm.name);
    box.disabled = !allowed;
    if (!allowed) { box.checked = false; }
    const reason = box.parentNode.querySelector(".reason");
    reason.textContent = box.dataset.enrolled !== "yes" ? " (not enrolled)"
      : allowed ? "" : " (its policy does not allow " + algorithm.name + ")";
  }
}

async function renderNew() {
  const [algorithms, participants] = await Promise.all([api("/algorithms"), api("/participants")]);
  registry = algorithms;
  const select = $("algorithm");
  const previous = select.value;
  clear(select);
  for (const a of algorithms) {
    const option = element("option", a.name);
    option.value = a.name;
    option.title = a.title;
    select.appendChild(option);
  }
  if (algorithms.some((a) => a.name === previous)) { select.value = previous; }
  const members = $("members");
  clear(members);
  for (const p of participants) {
    const label = element("label", null, "member");
    const box = element("input");
    box.type = "checkbox";
    box.name = "participants";
    box.value = p.id;
    box.dataset.enrolled = p.enrolled ? "yes" : "no";
    box.dataset.algorithms = (p.allowed_algorithms || []).join(" ");
    box.checked = p.enrolled;
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + p.id));
    label.appendChild(element("span", "", "reason hint"));
    members.appendChild(label);
  }
  if (!participants.length) { members.appendChild(element("p", "No members yet.", "hint")); }
  fitForm();
  return false;
}

// The JobCreate body the form describes (the coordinator checks it again).
function jobBody() {
  const algorithm = selectedAlgorithm();
  if (!algorithm) { throw new Error("choose an algorithm"); }
  const participants = Array.from(
    document.querySelectorAll("#members input[type=checkbox]:checked"), (box) => box.value);
  if (!participants.length) { throw new Error("participants: choose at least one"); }
  const body = { algorithm: algorithm.name, participants: participants,
    protection: $("protection").value };
  if (algorithm.family === "sweep") {
    const from = Number($("k-from").value), to = Number($("k-to").value);
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 2 || to < from) {
      throw new Error("K: give whole numbers 2 <= from <= to");
    }
    if (from === to) { body.k = from; } else { body.k_range = [from, to]; }
    if ($("standardise").checked) { body.standardise = true; }
  }
  if (algorithm.counts_contributors) {
    const minimum = Number($("min-contributors").value);
    if (!Number.isInteger(minimum) || minimum < 1) {
      throw new Error("min_center_contributors: give a whole number >= 1");
    }
    if (minimum !== 1) { body.min_center_contributors = minimum; }
  }
  const seed = $("seed").value.trim();
  if (seed !== "") {
    if (!/^[0-9]+$/.test(seed)) { throw new Error("seed: give a whole number >= 0"); }
    body.seed = Number(seed);
  }
  return body;
}

async function submitJob(event) {
  event.preventDefault();
  const box = $("submit-error");
  box.hidden = true;
  const button = $("submit-job");
  button.disabled = true;
  try {
    const job = await api("/jobs", { method: "POST", body: jobBody() });
    location.hash = "#job/" + encodeURIComponent(job.id);
  } catch (error) {
    if (error instanceof AuthError) { route(); showError(error.message); return; }
    box.textContent = error instanceof ScopeError ? error.message
      : "The job was not submitted: " + error.message;
    box.hidden = false;
  } finally {
    button.disabled = false;
  }
}

// -- a job: curve, centers, ledger, actions ----------------------------------------------
function svg(tag, attributes, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, String(value));
  }
  parent.appendChild(node);
  return node;
}

// The K curve: FedFuzzDB (lower is better) per K of the sweep, the chosen K marked.
function drawCurve(result) {
  const plot = $("k-curve");
  clear(plot);
  const points = result.sweep.filter((e) => Number.isFinite(e.fed_fuzzy_db));
  const W = 560, H = 300, left = 56, right = 16, top = 16, bottom = 40;
  plot.setAttribute("viewBox", "0 0 " + W + " " + H);
  if (!points.length) { $("k-caption").textContent = "No sweep in this result."; return; }
  const ks = points.map((e) => e.k), ys = points.map((e) => e.fed_fuzzy_db);
  const kMin = Math.min(...ks), kMax = Math.max(...ks);
  let yMin = Math.min(...ys), yMax = Math.max(...ys);
  if (yMax === yMin) { yMin -= 1; yMax += 1; }
  const x = (k) => left + (kMax === kMin ? 0.5 : (k - kMin) / (kMax - kMin)) * (W - left - right);
  const y = (v) => top + (1 - (v - yMin) / (yMax - yMin)) * (H - top - bottom);
  svg("line", { x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, class: "axis" }, plot);
  svg("line", { x1: left, y1: top, x2: left, y2: H - bottom, class: "axis" }, plot);
  for (const v of [yMin, (yMin + yMax) / 2, yMax]) {
    const label = svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, plot);
    label.textContent = v.toPrecision(3);
  }
  const d = points.map((e, i) => (i ? "L" : "M") + x(e.k).toFixed(1) + " " + y(e.fed_fuzzy_db).toFixed(1));
  svg("path", { d: d.join(" "), class: "curve", "data-points": points.length }, plot);
  for (const e of points) {
    const chosen = e.k === result.k_selected;
    const dot = svg("circle", {
      cx: x(e.k), cy: y(e.fed_fuzzy_db), r: chosen ? 6 : 3.5,
      class: chosen ? "point chosen" : "point", "data-k": e.k,
    }, plot);
    const tip = svg("title", {}, dot);
    tip.textContent = "K = " + e.k + ": FedFuzzDB " + e.fed_fuzzy_db.toPrecision(4);
    const tick = svg("text", {
      x: x(e.k), y: H - bottom + 16, "text-anchor": "middle",
      class: chosen ? "chosen-label" : "",
    }, plot);
    tick.textContent = String(e.k);
    if (chosen) {
      svg("line", {
        x1: x(e.k), y1: top, x2: x(e.k), y2: H - bottom, class: "chosen-line",
      }, plot);
    }
  }
  const axis = svg("text", { x: (left + W - right) / 2, y: H - 6, "text-anchor": "middle" }, plot);
  axis.textContent = "K";
  $("k-caption").textContent = "FedFuzzDB (lower is better) for K = " + kMin + "…" + kMax +
    "; chosen K = " + result.k_selected +
    (result.k_elbow !== null && result.k_elbow !== undefined ? ", elbow K = " + result.k_elbow : "");
}

const SINGLE_TEXT = "This center rests on one participant: it is that participant's own " +
  "local center, which everyone who reads this result learns.";

// The selected K's centers; a released center only one participant stands behind is marked
// at the center itself (row colour, badge, explanation).
function drawCenters(result) {
  const table = $("centers");
  const body = table.tBodies[0];
  clear(body);
  $("centers-k").textContent = String(result.k_selected);
  const entry = result.sweep.find((e) => e.k === result.k_selected);
  const centers = entry ? entry.centers : [];
  const contributors = entry && entry.center_contributors ? entry.center_contributors : null;
  const width = Math.max(0, ...centers.map((c) => (c ? c.length : 0)));
  const names = Array.isArray(result.feature_names) && result.feature_names.length === width
    ? result.feature_names
    : Array.from({ length: width }, (_, j) => "x" + j);
  headerRow(table, ["Cluster", ...names, "Participants behind it"]);
  let singles = 0;
  centers.forEach((center, j) => {
    const row = body.insertRow();
    cell(row, j + 1);
    if (center) {
      for (const value of center) { cell(row, number(value, 4), "num"); }
    } else {
      const td = cell(row, "withheld (too few participants behind it)", "withheld");
      td.colSpan = width;
    }
    const count = contributors ? contributors[j] : null;
    const td = cell(row, count, "num");
    if (center && count === 1) {
      singles += 1;
      row.classList.add("single");
      row.title = SINGLE_TEXT;
      const badge = element("span", "one participant", "badge single-badge");
      badge.title = SINGLE_TEXT;
      td.appendChild(document.createTextNode(" "));
      td.appendChild(badge);
    }
  });
  const warning = $("single-warning");
  warning.hidden = singles === 0;
  warning.textContent = singles === 0 ? "" : singles + " center(s) marked “one participant” " +
    "rest on a single participant's local center: each is that participant's own center, " +
    "revealed to whoever reads this result. A job with min_center_contributors of 2 or " +
    "more withholds such centers.";
}

function notes(list, items) {
  clear(list);
  for (const text of items || []) { list.appendChild(element("li", text)); }
}

// A disclosure's row label: its task kind, and the reply's kind where it differs
// (a declaration, an acknowledgement, a refusal).
function kindLabel(d) {
  return d.reply_kind === d.task_kind ? d.task_kind : d.task_kind + " → " + d.reply_kind;
}

function protections(d) {
  return Array.from(new Set(d.fields.map((f) => f.protection))).sort();
}

// One field of a disclosure: name, its shapes (the first and last of many) and protection.
function fieldText(field) {
  const shapes = field.shapes === null ? [] : field.shapes.map((s) => "(" + s.join("×") + ")");
  const shown = shapes.length > 3
    ? shapes[0] + " … " + shapes[shapes.length - 1] + ", " + shapes.length + " shapes"
    : shapes.length ? shapes.join(", ") : "scalar";
  return field.name + " " + shown;
}

function protectionTags(parent, names) {
  for (const name of names) {
    parent.appendChild(document.createTextNode(" "));
    parent.appendChild(element("span", name, "tag tag-" + name));
  }
}

// The ledger grouped: a table of message counts (kind of task × participant), then per
// participant a collapsible table of what each kind of message held.
function drawLedger(ledger) {
  const parties = [];
  const kinds = [];
  const byKey = new Map();
  for (const d of ledger.disclosures) {
    if (!parties.includes(d.participant)) { parties.push(d.participant); }
    const kind = kindLabel(d);
    if (!kinds.includes(kind)) { kinds.push(kind); }
    byKey.set(kind + "\u0000" + d.participant, d);
  }
  const table = $("ledger-summary");
  headerRow(table, ["Kind of task", ...parties]);
  const body = table.tBodies[0];
  clear(body);
  for (const kind of kinds) {
    const row = body.insertRow();
    row.dataset.kind = kind;
    row.appendChild(element("th", kind));
    for (const party of parties) {
      const d = byKey.get(kind + "\u0000" + party);
      const td = cell(row, d ? d.messages : null, "num");
      td.dataset.participant = party;
      if (d) { protectionTags(td, protections(d)); }
    }
  }
  table.hidden = kinds.length === 0;
  $("ledger-empty").hidden = kinds.length > 0;

  const box = $("ledger-parties");
  const open = new Set(Array.from(box.querySelectorAll("details[open]"), (n) => n.dataset.participant));
  clear(box);
  for (const party of parties) {
    const mine = ledger.disclosures.filter((d) => d.participant === party);
    const total = mine.reduce((sum, d) => sum + d.messages, 0);
    const details = element("details", null, "party");
    details.dataset.participant = party;
    details.open = open.has(party);
    const summary = element("summary");
    summary.appendChild(element("strong", party));
    summary.appendChild(document.createTextNode(
      ": " + total + " message(s) of " + mine.length + " kind(s);"));
    protectionTags(summary, Array.from(new Set(mine.flatMap(protections))).sort());
    details.appendChild(summary);
    const fields = element("table", null, "party-fields");
    fields.appendChild(element("thead"));
    fields.appendChild(element("tbody"));
    headerRow(fields, ["Kind of task", "Messages", "Fields (shapes)", "Protection"]);
    for (const d of mine) {
      const row = fields.tBodies[0].insertRow();
      cell(row, kindLabel(d));
      cell(row, d.messages, "num");
      cell(row, d.fields.length ? d.fields.map(fieldText).join("\n") : "(no fields)", "fields");
      cell(row, d.fields.map((f) => f.protection).join("\n"), "fields");
    }
    details.appendChild(fields);
    box.appendChild(details);
  }
  notes($("ledger-notes"), ledger.notes);
}

function summary(job) {
  const dl = $("job-summary");
  clear(dl);
  const spec = job.spec;
  const rows = [
    ["State", job.state], ["Algorithm", spec.algorithm],
    ["Participants", spec.participants.join(", ")],
    ["K", spec.k_range ? spec.k_range.join("…") : spec.k],
    ["Protection", spec.protection], ["Seed", spec.seed], ["Progress", progressText(job)],
    ["Updated", when(job.updated_at)],
  ];
  for (const [name, value] of rows) {
    dl.appendChild(element("dt", name));
    const dd = element("dd", value === null || value === undefined || value === "" ? "—" : value);
    if (name === "State") { dd.className = "state state-" + value; }
    dl.appendChild(dd);
  }
}

async function renderJob(id) {
  const path = "/jobs/" + encodeURIComponent(id);
  const job = await api(path);
  currentJob = job;
  $("job-id").textContent = job.id;
  summary(job);
  $("cancel-job").hidden = !live(job.state);
  drawLedger(await api(path + "/disclosures"));
  const finished = job.state === "succeeded";
  $("result").hidden = !finished;
  for (const button of document.querySelectorAll("#downloads .download")) {
    button.hidden = button.dataset.file !== "disclosures.json" && !finished;
  }
  if (finished) {
    const result = await api(path + "/result");
    const hasSweep = result.sweep.length > 0;
    for (const button of document.querySelectorAll("#downloads .download[data-file$='.csv']")) {
      button.hidden = !hasSweep;
    }
    drawCurve(result);
    drawCenters(result);
    notes($("result-notes"), result.notes);
  }
  return live(job.state);
}

async function cancelJob() {
  if (!currentJob) { return; }
  const button = $("cancel-job");
  button.disabled = true;
  try {
    await api("/jobs/" + encodeURIComponent(currentJob.id) + "/cancel", { method: "POST" });
    route();
  } catch (error) {
    if (error instanceof AuthError) { route(); }
    showError(error instanceof ScopeError ? error.message : "Not cancelled: " + error.message);
  } finally {
    button.disabled = false;
  }
}

// A download: the file fetched with the analyst's credentials, saved under its export name.
const DOWNLOADS = {
  "result.json": { path: "/result", type: "application/json", json: true },
  "sweep.csv": { path: "/result/sweep.csv", type: "text/csv" },
  "centers.csv": { path: "/result/centers.csv", type: "text/csv" },
  "disclosures.json": { path: "/disclosures", type: "application/json", json: true },
};

async function download(file) {
  if (!currentJob) { return; }
  const what = DOWNLOADS[file];
  try {
    const text = await api("/jobs/" + encodeURIComponent(currentJob.id) + what.path,
      { text: true });
    const content = what.json ? JSON.stringify(JSON.parse(text), null, 2) + "\n" : text;
    const url = URL.createObjectURL(new Blob([content], { type: what.type }));
    const link = element("a");
    link.href = url;
    link.download = currentJob.id + "-" + file;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (error) {
    if (error instanceof AuthError) { route(); }
    showError("Download failed: " + error.message);
  }
}

// -- routing -----------------------------------------------------------------------------
function route() {
  if (timer !== null) { clearTimeout(timer); timer = null; }
  ++generation;
  showError("");
  if (!token()) { show("login-view"); $("token").focus(); return; }
  const hash = decodeURIComponent(location.hash.slice(1));
  let view, render;
  if (hash.startsWith("job/")) {
    view = "job-view"; render = () => renderJob(hash.slice(4));
  } else if (hash === "participants") {
    view = "participants-view"; render = renderParticipants;
  } else if (hash === "new") {
    view = "new-view"; render = renderNew; $("submit-error").hidden = true;
  } else {
    view = "jobs-view"; render = renderJobs;
  }
  if (view !== "job-view") { currentJob = null; }
  show(view);
  const mine = generation;
  const tick = async () => {
    let again = false;
    try {
      again = await render();
      if (mine !== generation) { return; }
      showError("");
    } catch (error) {
      if (mine !== generation) { return; }
      if (error instanceof AuthError) { route(); showError(error.message); return; }
      showError(error.message);
      again = !(error instanceof ScopeError);
    }
    if (again && mine === generation) { timer = setTimeout(tick, POLL_MS); }
  };
  tick();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (!value) { return; }
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token").value = "";
    route();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    route();
  });
  $("algorithm").addEventListener("change", fitForm);
  $("submit-form").addEventListener("submit", submitJob);
  $("cancel-job").addEventListener("click", cancelJob);
  for (const button of document.querySelectorAll("#downloads .download")) {
    button.addEventListener("click", () => download(button.dataset.file));
  }
  window.addEventListener("hashchange", route);
  route();
});
