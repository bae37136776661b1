// The fedclust coordinator dashboard: plain DOM code over the JSON API, same origin only.
// Every data request carries the analyst token (kept in sessionStorage) as a bearer token;
// every value from the API is placed with textContent, never parsed as HTML.
"use strict";

const API = "../api/v1";
const TOKEN_KEY = "fedclust.analystToken";
const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";

let timer = null;
let generation = 0;  // a render loop stops once route() has started another

function $(id) { return document.getElementById(id); }

function token() { return sessionStorage.getItem(TOKEN_KEY); }

class AuthError extends Error {}

async function api(path) {
  const response = await fetch(API + path, {
    headers: { Authorization: "Bearer " + token(), Accept: "application/json" },
    cache: "no-store",
  });
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    throw new AuthError("the coordinator refused the token: sign in again");
  }
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      if (typeof body.detail === "string") { detail = body.detail; }
    } catch (ignored) { /* keep the status text */ }
    throw new Error(response.status + " " + detail);
  }
  return response.json();
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "—" : String(text);
  if (className) { td.className = className; }
  row.appendChild(td);
  return td;
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

// -- views -------------------------------------------------------------------------------
const VIEWS = ["login-view", "jobs-view", "job-view", "participants-view"];

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
    const link = document.createElement("a");
    link.href = "#job/" + encodeURIComponent(job.id);
    link.textContent = job.id;
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

function drawCenters(result) {
  const table = $("centers");
  const head = table.tHead, body = table.tBodies[0];
  clear(head); clear(body);
  $("centers-k").textContent = String(result.k_selected);
  const entry = result.sweep.find((e) => e.k === result.k_selected);
  const centers = entry ? entry.centers : [];
  const width = Math.max(0, ...centers.map((c) => (c ? c.length : 0)));
  const names = Array.isArray(result.feature_names) && result.feature_names.length === width
    ? result.feature_names
    : Array.from({ length: width }, (_, j) => "feature " + (j + 1));
  const headRow = head.insertRow();
  for (const name of ["Cluster", ...names, "Contributors"]) {
    const th = document.createElement("th");
    th.textContent = name;
    headRow.appendChild(th);
  }
  centers.forEach((center, j) => {
    const row = body.insertRow();
    cell(row, j + 1);
    if (center) {
      for (const value of center) { cell(row, number(value, 4), "num"); }
    } else {
      const td = cell(row, "withheld (too few contributors)");
      td.colSpan = width;
    }
    cell(row, entry.center_contributors ? entry.center_contributors[j] : null, "num");
  });
}

function notes(list, items) {
  clear(list);
  for (const text of items || []) {
    const li = document.createElement("li");
    li.textContent = text;
    list.appendChild(li);
  }
}

// One field of a disclosure: name, its shapes (the first and last of many) and protection.
function fieldText(field) {
  const shapes = field.shapes === null ? [] : field.shapes.map((s) => "(" + s.join("×") + ")");
  const shown = shapes.length > 3
    ? shapes[0] + " … " + shapes[shapes.length - 1] + ", " + shapes.length + " shapes"
    : shapes.length ? shapes.join(", ") : "scalar";
  return field.name + " " + shown + " [" + field.protection + "]";
}

function drawLedger(ledger) {
  const body = $("ledger").tBodies[0];
  clear(body);
  for (const d of ledger.disclosures) {
    const row = body.insertRow();
    cell(row, d.participant);
    cell(row, d.task_kind);
    cell(row, d.reply_kind);
    cell(row, d.fields.map(fieldText).join("\n"), "fields");
    cell(row, d.messages, "num");
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
    ["K range", spec.k_range ? spec.k_range.join("…") : null],
    ["Protection", spec.protection], ["Progress", progressText(job)],
    ["Updated", when(job.updated_at)],
  ];
  for (const [name, value] of rows) {
    const dt = document.createElement("dt"); dt.textContent = name; dl.appendChild(dt);
    const dd = document.createElement("dd");
    dd.textContent = value === null || value === undefined || value === "" ? "—" : String(value);
    if (name === "State") { dd.className = "state state-" + value; }
    dl.appendChild(dd);
  }
}

async function renderJob(id) {
  const path = "/jobs/" + encodeURIComponent(id);
  const job = await api(path);
  $("job-id").textContent = job.id;
  summary(job);
  drawLedger(await api(path + "/disclosures"));
  const finished = job.state === "succeeded";
  $("result").hidden = !finished;
  if (finished) {
    const result = await api(path + "/result");
    drawCurve(result);
    drawCenters(result);
    notes($("result-notes"), result.notes);
  }
  return job.state === "pending" || job.state === "running";
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
  } else {
    view = "jobs-view"; render = renderJobs;
  }
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
      again = true;
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
  window.addEventListener("hashchange", route);
  route();
});
