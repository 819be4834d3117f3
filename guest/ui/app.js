// settle's live view: an MCP client (Streamable HTTP, protocol 2026-07-28)
// of this tenant's own endpoint, drawn with plain DOM and inline SVG.
//
// What it reads: list_devices and get_device_state (devices, online or not),
// the settle://audit resource (every command as it ended), and tasks it
// started itself (set_temperature from the form). What keeps it live: one
// subscriptions/listen stream for the device state resources, the audit
// trail and the live tasks' ids. Device readings change without a command
// too (someone at the unit), and the plugin only notices when it reads the
// device, so they are also re-read every POLL_MS; if the stream fails, the
// page polls everything at that pace and says so.
"use strict";

const PROTOCOL = "2026-07-28";
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
const POLL_MS = 10000;
const AUDIT_LIMIT = 50;
const HISTORY_POINTS = 400;

// --- the token and the endpoint ------------------------------------------

// The view is opened once as .../ui?token=TOKEN. The token then lives in
// this tab's sessionStorage (and the runner's cookie), and leaves the
// address bar so it is not bookmarked or shared by accident.
const token = (() => {
  const params = new URLSearchParams(location.search);
  const given = params.get("token");
  if (given) {
    sessionStorage.setItem("settle_ui_token", given);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
  }
  return sessionStorage.getItem("settle_ui_token");
})();

// The page is at ROOT/ui (ROOT is "" or /t/NAME); MCP is at ROOT/mcp.
const endpoint = location.pathname.replace(/\/ui(\/.*)?$/, "") + "/mcp";

const meta = () => ({
  "io.modelcontextprotocol/protocolVersion": PROTOCOL,
  "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXTENSION]: {} } },
  "io.modelcontextprotocol/clientInfo": { name: "settle-ui", version: "1" },
});

let nextId = 1;

function headers(method, name) {
  const h = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL,
    "Mcp-Method": method,
  };
  if (name !== undefined) h["Mcp-Name"] = encodeHeader(name);
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

// Header values that are not plain ASCII travel base64-encoded.
function encodeHeader(value) {
  const plain = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(value) && !/^=\?base64\?/.test(value);
  if (plain) return value;
  const bytes = new TextEncoder().encode(value);
  let binary = "";
  bytes.forEach((b) => { binary += String.fromCharCode(b); });
  return "=?base64?" + btoa(binary) + "?=";
}

class McpError extends Error {
  constructor(message, code) { super(message); this.code = code; }
}

// One request; the answer is one JSON body or an SSE stream ending with it.
async function rpc(method, params, name) {
  const id = nextId++;
  const response = await fetch(endpoint, {
    method: "POST",
    headers: headers(method, name),
    body: JSON.stringify({ jsonrpc: "2.0", id, method, params: { ...params, _meta: meta() } }),
    credentials: "same-origin",
  });
  if (response.status === 401) {
    throw new McpError("The token was refused (401): open this view again as /ui?token=TOKEN.", 401);
  }
  const text = await response.text();
  let message = null;
  if ((response.headers.get("content-type") || "").includes("text/event-stream")) {
    for (const line of text.split("\n")) {
      if (!line.startsWith("data:")) continue;
      try {
        const m = JSON.parse(line.slice(5));
        if (m.id === id) message = m;
      } catch (_) { /* a comment or keep-alive */ }
    }
  } else {
    try { message = JSON.parse(text); } catch (_) { message = null; }
  }
  if (!message) throw new McpError(`${method}: HTTP ${response.status}: ${text.slice(0, 200)}`);
  if (message.error) throw new McpError(`${method}: ${message.error.message}`, message.error.code);
  return message.result;
}

async function callTool(name, args) {
  return rpc("tools/call", { name, arguments: args }, name);
}

async function readResource(uri) {
  const result = await rpc("resources/read", { uri }, uri);
  const content = (result.contents || [])[0];
  return content && content.text ? JSON.parse(content.text) : null;
}

// --- state -----------------------------------------------------------------

const devices = new Map();   // id -> { info, state, history: [{t, seen, room}] }
const liveTasks = new Map(); // taskId -> { deviceId, sentValue, task, startedAt }
let audit = [];              // records, newest first

const stateUri = (id) => `settle://devices/${id}/state`;
const AUDIT_URI = "settle://audit";

// --- small DOM helpers -----------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function showProblem(text) {
  const box = document.getElementById("problem");
  box.hidden = !text;
  box.textContent = text || "";
}

function setConnection(state, text) {
  const pill = document.getElementById("connection");
  pill.dataset.state = state;
  pill.textContent = text;
}

const time = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "");
const values = (obj) => (obj && Object.keys(obj).length
  ? Object.entries(obj).map(([k, v]) => `${k}=${v === null ? "?" : v}`).join(", ")
  : "—");

// What a verdict is called at a glance.
const VERDICTS = {
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
  input_required: "waiting for a person",
  working: "working",
  gated: "not sent (gate)",
  declined: "not sent (declined)",
};
function verdict(status) {
  return el("span", { class: "verdict", "data-status": status, text: VERDICTS[status] || status });
}

// --- devices and their charts ----------------------------------------------

async function loadDevices() {
  const result = await callTool("list_devices", {});
  const list = (result.structuredContent && result.structuredContent.devices) || [];
  for (const info of list) {
    if (!devices.has(info.id)) devices.set(info.id, { info, state: null, history: [] });
  }
  const select = document.getElementById("command-device");
  const chosen = select.value;
  select.replaceChildren(...list.map((d) => el("option", { value: d.id, text: d.name || d.id })));
  if (chosen) select.value = chosen;
  // Cards in the list's order, filled in as each reading arrives.
  for (const d of list) renderDevice(d.id);
  await Promise.all(list.map((d) => readDevice(d.id)));
}

async function readDevice(id) {
  const device = devices.get(id);
  if (!device) return;
  try {
    const result = await callTool("get_device_state", { device_id: id });
    if (result.isError) {
      device.state = { online: false, error: textOf(result) };
    } else {
      noteState(id, result.structuredContent);
    }
  } catch (e) {
    device.state = { online: false, error: e.message };
  }
  renderDevice(id);
}

// A reading, from the tool or a resource notification's re-read.
function noteState(id, state) {
  const device = devices.get(id);
  if (!device || !state) return;
  device.state = state;
  const s = state.state || {};
  const point = { t: Date.now(), seen: num(s.target_temperature), room: num(state.roomTemperature) };
  const last = device.history[device.history.length - 1];
  if (!last || last.seen !== point.seen || last.room !== point.room || point.t - last.t > POLL_MS / 2) {
    device.history.push(point);
    if (device.history.length > HISTORY_POINTS) device.history.shift();
  }
}

const num = (v) => (typeof v === "number" && isFinite(v) ? v : null);
const textOf = (result) => ((result.content || []).find((c) => c.type === "text") || {}).text || "";

function renderDevices() {
  const box = document.getElementById("devices");
  if (devices.size === 0) {
    box.replaceChildren(el("p", { class: "muted", text: "No devices." }));
    return;
  }
  for (const id of devices.keys()) renderDevice(id);
}

function renderDevice(id) {
  const box = document.getElementById("devices");
  const device = devices.get(id);
  let card = box.querySelector(`[data-device="${CSS.escape(id)}"]`);
  if (!card) {
    box.querySelectorAll("p.muted").forEach((p) => p.remove());
    card = el("article", { class: "device", "data-device": id });
    box.append(card);
  }
  const st = device.state || {};
  const online = st.online === true;
  const fields = el("dl");
  for (const [k, v] of Object.entries(st.state || {})) {
    fields.append(el("dt", { text: k.replace(/_/g, " ") }), el("dd", { "data-field": k, text: String(v) }));
  }
  if (num(st.roomTemperature) !== null) {
    fields.append(el("dt", { text: "room" }), el("dd", { "data-field": "roomTemperature", text: `${st.roomTemperature} °C` }));
  }
  card.replaceChildren(...[
    el("h3", {},
      el("span", {}, device.info.name || id, " ", el("span", { class: "id", text: id })),
      el("span", { class: "online", "data-online": String(online), text: device.state ? (online ? "online" : "offline") : "…" })),
    st.error ? el("p", { class: "muted", text: st.error }) : null,
    fields,
    chart(id),
    el("div", { class: "legend" },
      el("span", {}, el("i", { class: "l-sent" }), "setpoint sent"),
      el("span", {}, el("i", { class: "l-seen" }), "setpoint observed"),
      el("span", {}, el("i", { class: "l-room" }), "room")),
  ].filter((c) => c !== null));
}

// The setpoint sent (from the audit trail and live tasks) and the one the
// device showed (from its readings) over time, with the room temperature.
function chart(id) {
  const device = devices.get(id);
  const sent = [];
  for (const r of audit) {
    if (r.deviceId !== id || !r.sent || num(r.sent.target_temperature) === null) continue;
    sent.push({ t: r.sentAtMs || r.acceptedAtMs, v: r.sent.target_temperature, bad: r.outcome === "failed" });
  }
  for (const live of liveTasks.values()) {
    if (live.deviceId === id && num(live.sentValue) !== null && !audit.some((r) => r.id === live.taskId)) {
      sent.push({ t: live.startedAt, v: live.sentValue, bad: live.task.status === "failed" });
    }
  }
  sent.sort((a, b) => a.t - b.t);
  const seen = device.history.filter((p) => p.seen !== null).map((p) => ({ t: p.t, v: p.seen }));
  const room = device.history.filter((p) => p.room !== null).map((p) => ({ t: p.t, v: p.room }));
  for (const r of audit) {
    if (r.deviceId === id && r.observed && num(r.observed.target_temperature) !== null) {
      seen.push({ t: r.endedAtMs, v: r.observed.target_temperature });
    }
  }
  seen.sort((a, b) => a.t - b.t);
  const all = [...sent, ...seen, ...room];
  const W = 560, H = 200, L = 44, R = 10, T = 10, B = 26;
  const box = el("div", { class: "chart" });
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `setpoint sent and observed for ${id}` });
  box.append(root);
  if (all.length === 0) {
    const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "no readings yet";
    root.append(t);
    return box;
  }
  const now = Date.now();
  const t0 = Math.min(...all.map((p) => p.t)), t1 = Math.max(now, ...all.map((p) => p.t));
  let v0 = Math.min(...all.map((p) => p.v)), v1 = Math.max(...all.map((p) => p.v));
  if (v1 - v0 < 2) { v0 -= 1; v1 += 1; }
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - (v - v0) / (v1 - v0)) * (H - T - B);
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of [v0, (v0 + v1) / 2, v1]) {
    const label = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = v.toFixed(1);
    root.append(label);
  }
  for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svg("text", { x: x(t), y: H - 8, "text-anchor": anchor });
    label.textContent = time(t);
    root.append(label);
  }
  // Steps: a setpoint holds until the next one.
  const step = (points) => {
    let d = "";
    points.forEach((p, i) => {
      d += i === 0 ? `M${x(p.t)},${y(p.v)}` : `H${x(p.t)}V${y(p.v)}`;
    });
    if (points.length) d += `H${x(t1)}`;
    return d;
  };
  const line = (points) => points.map((p, i) => `${i ? "L" : "M"}${x(p.t)},${y(p.v)}`).join("");
  if (room.length) root.append(svg("path", { class: "room", d: line(room) }));
  if (seen.length) root.append(svg("path", { class: "seen", d: step(seen) }));
  if (sent.length) root.append(svg("path", { class: "sent", d: step(sent) }));
  for (const p of sent) root.append(svg("circle", { class: p.bad ? "dot-bad" : "dot-sent", cx: x(p.t), cy: y(p.v), r: 3.5 }));
  return box;
}

// --- tasks -------------------------------------------------------------------

function taskValues(task) {
  const report = task.result || task.error || task.progress
    || (task.error && task.error.data) || {};
  return { sent: report.sent, observed: report.observed };
}

// The tool view of a detailed task (tasks/get, notifications/tasks).
function toolView(detailed) {
  if (detailed.result && detailed.result.structuredContent) return detailed.result.structuredContent;
  if (detailed.error && detailed.error.data) return detailed.error.data;
  return detailed;
}

function noteTask(task) {
  const live = liveTasks.get(task.taskId);
  if (!live) return;
  const view = toolView(task);
  live.task = { ...view, status: task.status, statusMessage: task.statusMessage || view.statusMessage };
  renderTasks();
  renderDevice(live.deviceId);
  if (["completed", "failed", "cancelled"].includes(task.status)) {
    readDevice(live.deviceId);
    loadAudit();
  }
}

function renderTasks() {
  const body = document.querySelector("#live-tasks tbody");
  if (liveTasks.size === 0) return;
  const rows = [...liveTasks.values()].sort((a, b) => b.startedAt - a.startedAt).map((live) => {
    const task = live.task;
    const { sent, observed } = taskValues(task);
    return el("tr", { "data-task-id": live.taskId, "data-status": task.status },
      el("td", {}, verdict(task.status)),
      el("td", { text: live.deviceId }),
      el("td", { class: "values", text: values(sent) }),
      el("td", { class: "values", text: values(observed) }),
      el("td", { text: task.statusMessage || "" }),
      el("td", { text: time(live.startedAt) }));
  });
  body.replaceChildren(...rows);
}

async function loadAudit() {
  try {
    const data = await readResource(`${AUDIT_URI}?limit=${AUDIT_LIMIT}`);
    audit = (data && data.records) || [];
  } catch (e) {
    showProblem(`Could not read the audit trail: ${e.message}`);
    return;
  }
  renderAudit();
  renderDevices();
}

function renderAudit() {
  const body = document.querySelector("#audit tbody");
  if (audit.length === 0) {
    body.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 8, class: "muted", text: "No command has ended yet." })));
    return;
  }
  body.replaceChildren(...audit.map((r) => el("tr", { "data-audit-id": r.id, "data-status": r.outcome },
    el("td", {}, verdict(r.outcome)),
    el("td", { text: r.deviceId }),
    el("td", { text: r.tool }),
    el("td", { text: r.client && r.client.name ? `${r.client.name} ${r.client.version || ""}` : "—" }),
    el("td", { class: "values", text: r.sent ? values(r.sent) : "not sent" }),
    el("td", { class: "values", text: values(r.observed) }),
    el("td", { text: r.reason ? `${r.reason}: ${r.message}` : r.message || "" }),
    el("td", { text: time(r.endedAtMs) }))));
}

// --- the command form ---------------------------------------------------------

async function runCommand(event) {
  event.preventDefault();
  const deviceId = document.getElementById("command-device").value;
  const temperature = Number(document.getElementById("command-temperature").value);
  const confirm = document.getElementById("command-confirm").checked;
  const out = document.getElementById("command-result");
  const button = document.getElementById("command-send");
  button.disabled = true;
  out.textContent = "sending…";
  try {
    const args = { device_id: deviceId, temperature };
    if (confirm) args.confirm = true;
    const result = await callTool("set_temperature", args);
    const view = result.structuredContent;
    if (result.resultType !== "task" && view && view.taskId) {
      // The task ended while the runner waited for it: its tool view.
      liveTasks.set(view.taskId, {
        taskId: view.taskId, deviceId, sentValue: temperature, startedAt: Date.now(), task: view,
      });
      out.textContent = `task ${view.taskId.slice(0, 8)}… ${VERDICTS[view.status] || view.status}`;
      renderTasks();
      readDevice(deviceId);
      loadAudit();
    } else if (result.resultType === "task") {
      liveTasks.set(result.taskId, {
        taskId: result.taskId, deviceId, sentValue: temperature, startedAt: Date.now(),
        task: { status: result.status, statusMessage: result.statusMessage },
      });
      out.textContent = `task ${result.taskId.slice(0, 8)}… accepted`;
      renderTasks();
      renderDevice(deviceId);
      listen.restart();
      // Its state now, in case it ended before the stream opened.
      rpc("tasks/get", { taskId: result.taskId }, result.taskId).then(noteTask).catch(() => {});
    } else if (result.resultType === "input_required") {
      out.textContent = "The command needs a person's answer: tick confirm and send it again.";
    } else if (result.isError) {
      out.textContent = textOf(result);
      loadAudit();
    } else {
      out.textContent = "done";
      loadAudit();
    }
  } catch (e) {
    out.textContent = e.message;
  } finally {
    button.disabled = false;
  }
}

// --- live updates ---------------------------------------------------------------

// One subscriptions/listen stream: the devices' state resources, the audit
// trail, and the live tasks' ids. Reopened when a task is added.
const listen = {
  controller: null,
  retryMs: 1000,
  restart() {
    if (this.controller) this.controller.abort();
    this.controller = new AbortController();
    this.open(this.controller).catch(() => {});
  },
  async open(controller) {
    const id = nextId++;
    const taskIds = [...liveTasks.values()]
      .filter((l) => !["completed", "failed", "cancelled"].includes(l.task.status))
      .map((l) => l.taskId);
    const notifications = {
      resourceSubscriptions: [AUDIT_URI, ...[...devices.keys()].map(stateUri)],
    };
    if (taskIds.length) notifications.taskIds = taskIds;
    let response;
    try {
      response = await fetch(endpoint, {
        method: "POST",
        headers: headers("subscriptions/listen"),
        body: JSON.stringify({ jsonrpc: "2.0", id, method: "subscriptions/listen", params: { notifications, _meta: meta() } }),
        signal: controller.signal,
        credentials: "same-origin",
      });
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      setConnection("live", "live");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, end).trim();
          buffer = buffer.slice(end + 1);
          if (line.startsWith("data:")) {
            try { onNotification(JSON.parse(line.slice(5))); } catch (_) { /* not JSON */ }
          }
        }
      }
      throw new Error("the stream ended");
    } catch (e) {
      if (controller.signal.aborted) return;
      setConnection("polling", "polling (stream: " + e.message + ")");
      setTimeout(() => { if (this.controller === controller) this.restart(); }, this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 30000);
    }
  },
};

function onNotification(message) {
  listen.retryMs = 1000;
  if (message.method === "notifications/tasks") {
    // Counted where a test (and a curious person) can read it.
    document.body.dataset.taskNotifications = String(Number(document.body.dataset.taskNotifications || 0) + 1);
    noteTask(message.params);
  } else if (message.method === "notifications/resources/updated") {
    const uri = message.params && message.params.uri;
    if (!uri) return;
    if (uri.startsWith(AUDIT_URI)) loadAudit();
    const m = /^settle:\/\/devices\/(.+)\/state$/.exec(uri);
    if (m) readDevice(m[1]);
  }
}

// The fallback: device readings (which change without a command too), the
// audit trail, and live tasks, every POLL_MS.
async function poll() {
  await Promise.all([...devices.keys()].map(readDevice));
  await loadAudit();
  for (const live of liveTasks.values()) {
    if (["completed", "failed", "cancelled"].includes(live.task.status)) continue;
    rpc("tasks/get", { taskId: live.taskId }, live.taskId).then(noteTask).catch(() => {});
  }
}

async function start() {
  document.getElementById("command").addEventListener("submit", runCommand);
  try {
    await loadDevices();
    await loadAudit();
    renderDevices();
    document.body.dataset.ready = "true";
    listen.restart();
    setInterval(() => poll().catch(() => {}), POLL_MS);
  } catch (e) {
    setConnection("error", "error");
    showProblem(e.message);
    document.body.dataset.ready = "error";
  }
}

start();
