// Atelier console: a single page over the public HTTP API, no build step.
//
// It starts runs with POST /threads/{t}/runs/stream, renders every frame of the
// stream (pipeline stages, supervisor routes and fallbacks, the writer's
// tokens, critic verdicts, images, the final post), and keeps the frames it has
// rendered in sessionStorage. Reloading the page with ?thread=…&run=… in the URL
// re-renders those frames and rejoins the run with Last-Event-ID, so nothing is
// missed and nothing is shown twice (frames are keyed by run and id).
"use strict";

const STREAM_MODES = ["custom", "messages-tuple", "updates"];
const STAGE_ORDER = ["planner", "rag", "executor", "critic", "finalize"];
const $ = (id) => document.getElementById(id);

const state = {
  key: localStorage.getItem("atelier.key") || "",
  threadId: null,
  runId: null,
  seen: new Set(),          // "run:id" of frames already rendered
  frames: [],               // [runId, id, event, data] rendered this page, persisted
  controller: null,         // AbortController of the open stream
  draftIds: new Map(),      // writer message id → <div>
  stageCounts: {},
};

// ---------------------------------------------------------------- HTTP helpers

function headers(extra = {}) {
  const h = { ...extra };
  if (state.key) h["Authorization"] = `Bearer ${state.key}`;
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await fetch(path, init);
  if (res.status === 401) { askForKey(); throw new Error("需要 API Key"); }
  if (!res.ok) throw new Error(await errorMessage(res));
  return res.status === 204 ? null : res.json();
}

async function errorMessage(res) {
  try {
    const body = await res.json();
    const detail = body.detail ?? body.message ?? body.error;
    if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
    return typeof detail === "string" ? detail : JSON.stringify(detail);
  } catch {
    return `HTTP ${res.status}`;
  }
}

function askForKey() {
  $("key-button").hidden = false;
  const key = prompt("此服务需要 API Key：", state.key);
  if (key !== null) { state.key = key.trim(); localStorage.setItem("atelier.key", state.key); }
}

// Parse a text/event-stream body into {id, event, data} frames.
async function* readFrames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = { id: null, event: "message", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer[nl] === "\r" ? 2 : 1));
      if (line === "") {
        if (frame.data.length) {
          yield { id: frame.id, event: frame.event, data: parseData(frame.data.join("\n")) };
        }
        frame = { id: null, event: "message", data: [] };
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "id") frame.id = val;
        else if (field === "event") frame.event = val;
        else if (field === "data") frame.data.push(val);
      }
    }
  }
}

function parseData(text) {
  try { return JSON.parse(text); } catch { return text; }
}

// ---------------------------------------------------------------- run lifecycle

function runBody(extra) {
  return {
    assistant_id: "atelier",
    stream_mode: STREAM_MODES,
    stream_subgraphs: true,
    stream_resumable: true,
    on_disconnect: "continue",
    ...extra,
  };
}

async function startRun(input) {
  resetView();
  const thread = await api("POST", "/threads", {});
  state.threadId = thread.thread_id;
  state.runId = null;
  await openStream("POST", `/threads/${state.threadId}/runs/stream`, runBody({ input }));
}

async function resume(value) {
  $("clarify").hidden = true;
  state.runId = null;
  await openStream("POST", `/threads/${state.threadId}/runs/stream`, runBody({ command: { resume: value } }));
}

async function rejoin(threadId, runId) {
  state.threadId = threadId;
  state.runId = runId;
  restoreFrames();
  if (state.frames.some((f) => f[0] === runId && f[2] === "end")) {
    // This page already saw the run end: nothing more will come, just read its outcome.
    await settle();
    return;
  }
  const last = lastFrameId(runId);
  await openStream("GET", `/threads/${threadId}/runs/${runId}/stream`, undefined, last);
}

async function openStream(method, path, body, lastEventId) {
  state.controller?.abort();
  const controller = new AbortController();
  state.controller = controller;
  setStatus("running");
  $("cancel").disabled = false;
  const extra = { Accept: "text/event-stream" };
  if (body) extra["Content-Type"] = "application/json";
  if (lastEventId != null) extra["Last-Event-ID"] = String(lastEventId);
  let res;
  try {
    res = await fetch(path, { method, headers: headers(extra), body: body && JSON.stringify(body), signal: controller.signal });
  } catch (err) {
    if (controller.signal.aborted) return;
    showError(`连接失败：${err.message}`);
    return;
  }
  if (res.status === 401) { askForKey(); setStatus("idle"); return; }
  if (!res.ok) { showError(await errorMessage(res)); setStatus("error"); $("cancel").disabled = true; return; }
  const location = res.headers.get("Content-Location") || "";
  const match = location.match(/\/threads\/([^/]+)\/runs\/([^/?]+)/);
  if (match) setRun(match[1], match[2]);
  try {
    for await (const frame of readFrames(res)) handleFrame(state.runId, frame, true);
  } catch (err) {
    if (controller.signal.aborted) return;
    showError(`连接中断：${err.message}`);
  }
  if (state.controller === controller) await settle();
}

// After a stream ends: read the run's status and the thread's final result.
async function settle() {
  $("cancel").disabled = true;
  if (!state.threadId || !state.runId) return;
  try {
    const run = await api("GET", `/threads/${state.threadId}/runs/${state.runId}`);
    setStatus(run.status);
    const threadState = await api("GET", `/threads/${state.threadId}/state`);
    const values = threadState.values || {};
    // The thread's result is this run's only when it finished (an older run replayed
    // from the history, e.g. the one that asked a question, did not write it).
    if (values.result && run.status === "success") renderResult(values.result);
    const pending = (threadState.interrupts || []).concat(
      (threadState.tasks || []).flatMap((t) => t.interrupts || []));
    if (run.status === "interrupted" && pending.length) showInterrupt(pending[0]);
  } catch (err) {
    showError(err.message);
  }
  loadHistory();
}

function setRun(threadId, runId) {
  state.threadId = threadId;
  state.runId = runId;
  const url = new URL(location.href);
  url.searchParams.set("thread", threadId);
  url.searchParams.set("run", runId);
  history.replaceState(null, "", url);
}

async function cancelRun() {
  if (!state.threadId || !state.runId) return;
  $("cancel").disabled = true;
  try {
    await api("POST", `/threads/${state.threadId}/runs/${state.runId}/cancel?action=interrupt&wait=true`);
  } catch (err) {
    showError(err.message);
  }
}

// ---------------------------------------------------------------- frames

function handleFrame(runId, frame, live) {
  if (frame.event === "metadata" && frame.data && frame.data.run_id) {
    setRun(frame.data.thread_id || state.threadId, frame.data.run_id);
    runId = frame.data.run_id;
  }
  const key = `${runId}:${frame.id}`;
  if (frame.id != null && state.seen.has(key)) return;   // replayed or duplicated: already shown
  if (frame.id != null) state.seen.add(key);
  if (live) persistFrame(runId, frame);
  const [kind] = frame.event.split("|");
  const data = frame.data;
  switch (kind) {
    case "metadata": break;
    case "custom": onPipelineEvent(data); break;
    case "messages": onMessage(data); break;
    case "updates":
    case "values": break;  // a question is shown by settle(), and only while it is still open
    case "error": showError(`运行出错：${data.message || data.error || "未知错误"}`); setStatus("error"); break;
    case "gap": showError("部分事件已过期，已重新读取最新状态。"); break;
    case "end": break;
    default: break;
  }
}

function onPipelineEvent(ev) {
  if (!ev || typeof ev !== "object") return;
  switch (ev.type) {
    case "stage.started": markStage(ev.stage, "active", ev.attempt); break;
    case "stage.completed": markStage(ev.stage, "done", ev.attempt, ev.duration_ms); break;
    case "attempt.started":
      $("attempt").textContent = `第 ${ev.attempt} / ${ev.max_attempts} 次尝试`;
      break;
    case "attempt.completed":
      $("attempt").textContent = `第 ${ev.attempt} / ${ev.max_attempts} 次尝试：${verdictLabel(ev.verdict)}`;
      break;
    case "knowledge.injected":
      logRoute(`知识库：注入笔记 ${ev.notes.length} 条`, "", ev.notes.map((n) => `${n.type}:${n.id}`).join(", "));
      break;
    case "supervisor.route":
      logRoute(`→ ${ev.next_agent}`, `#${ev.step}`, ev.guidance);
      break;
    case "agent.fallback":
      logRoute(`↪ ${ev.from} → ${ev.to}`, reasonLabel(ev.reason), ev.detail, "fallback");
      break;
    case "knowledge.deviation":
      logRoute(`! 忽略了笔记 ${ev.ignored_notes.join(", ")}`, ev.severity, ev.reason, "fallback");
      break;
    case "critic.verdict": renderVerdict(ev); break;
    case "asset.created": addImage(ev); break;
    default: break;
  }
}

function onMessage(data) {
  if (!Array.isArray(data)) return;
  const [chunk, meta] = data;
  if (!chunk || typeof chunk.content !== "string") return;
  const node = (meta && meta.langgraph_node) || "";
  if (node && node !== "writer_agent") return;
  const id = chunk.id || "draft";
  let el = state.draftIds.get(id);
  if (!el) {
    el = document.createElement("div");
    el.className = "draft-part";
    const head = document.createElement("div");
    head.className = "muted small";
    head.textContent = `— 第 ${state.draftIds.size + 1} 稿 —`;
    $("draft").append(head, el);
    state.draftIds.set(id, el);
  }
  el.textContent += chunk.content;
  $("draft").scrollTop = $("draft").scrollHeight;
}

// ---------------------------------------------------------------- rendering

function resetView() {
  saveFrames();  // the runs shown so far keep their frames for a later rejoin
  state.seen.clear();
  state.frames = [];
  state.draftIds.clear();
  state.stageCounts = {};
  for (const id of ["routes", "draft", "verdicts", "gallery", "post", "quality"]) $(id).replaceChildren();
  for (const li of $("stages").children) { li.className = ""; li.querySelector(".count")?.remove(); }
  $("attempt").textContent = "";
  $("result").hidden = true;
  $("clarify").hidden = true;
  $("form-error").hidden = true;
}

const STATUS_LABELS = { idle: "空闲", pending: "排队中", running: "运行中", success: "完成", error: "出错", timeout: "超时", interrupted: "已中断" };

function setStatus(status) {
  const badge = $("run-status");
  badge.textContent = STATUS_LABELS[status] || status;
  badge.className = `badge ${status}`;
}

function showError(message) {
  const el = $("form-error");
  el.textContent = message;
  el.hidden = false;
}

function markStage(stage, how, attempt, durationMs) {
  const li = $("stages").querySelector(`[data-stage="${stage}"]`);
  if (!li) return;
  if (how === "active") {
    for (const other of $("stages").children) other.classList.remove("active");
    li.classList.remove("done");
    li.classList.add("active");
    state.stageCounts[stage] = (state.stageCounts[stage] || 0) + 1;
    let count = li.querySelector(".count");
    if (!count) { count = document.createElement("span"); count.className = "count"; li.append(count); }
    count.textContent = state.stageCounts[stage] > 1 ? `×${state.stageCounts[stage]}` : "";
  } else {
    li.classList.remove("active");
    li.classList.add("done");
    if (durationMs != null) li.title = `${(durationMs / 1000).toFixed(1)} s（第 ${attempt} 次）`;
  }
}

function logRoute(text, tag, detail, cls) {
  const li = document.createElement("li");
  if (cls) li.className = cls;
  const step = document.createElement("span");
  step.className = "step";
  step.textContent = tag || "";
  li.append(step, document.createTextNode(text));
  if (detail) {
    const d = document.createElement("div");
    d.className = "muted small";
    d.textContent = detail;
    li.append(d);
  }
  $("routes").append(li);
  $("routes").scrollTop = $("routes").scrollHeight;
}

function reasonLabel(reason) {
  return { precondition: "前置条件", quality: "质量", cap: "上限", invalid_decision: "无效决定" }[reason] || reason;
}

function verdictLabel(verdict) {
  return { passed: "通过", needs_improvement: "需改进", failed: "未通过", not_judged: "未评审/not judged" }[verdict] || verdict;
}

// A score only a judge gave; without one the verdict reads "not judged", never a number.
function scoreText(score) {
  return score != null ? Number(score).toFixed(2) : "未评审/not judged";
}

function renderVerdict(ev) {
  const node = $("verdict-template").content.firstElementChild.cloneNode(true);
  node.classList.add(ev.passed ? "passed" : "failed");
  node.querySelector(".v-title").textContent =
    `第 ${ev.attempt} / ${ev.max_attempts} 次 · ${verdictLabel(ev.verdict)}${ev.judge === "unavailable" ? "（评审模型不可用）" : ""} → ${ev.next}`;
  node.querySelector(".v-score").textContent = `${scoreText(ev.score)} / 阈值 ${ev.threshold}`;
  node.querySelector(".v-feedback").textContent = [ev.feedback, ...(ev.suggestions || [])].filter(Boolean).join("\n");
  const list = node.querySelector(".v-checks");
  for (const check of ev.checks || []) {
    const li = document.createElement("li");
    li.className = check.passed ? "ok" : "bad";
    const measured = check.measured != null ? ` 实测 ${JSON.stringify(check.measured)}` : "";
    const expected = check.expected ? ` 要求 ${check.expected}` : "";
    li.textContent = `${check.passed ? "✓" : "✗"} ${check.name}${measured}${expected}${check.detail ? ` — ${check.detail}` : ""}`;
    list.append(li);
  }
  $("verdicts").append(node);
}

async function imageUrl(url) {
  if (!state.key) return url;
  const res = await fetch(url, { headers: headers() });
  return res.ok ? URL.createObjectURL(await res.blob()) : url;
}

async function addImage(ev, into = $("gallery")) {
  if (into.querySelector(`[data-asset="${ev.asset_id}"]`)) return;
  const fig = document.createElement("figure");
  fig.dataset.asset = ev.asset_id;
  const img = document.createElement("img");
  img.alt = ev.alt || `图 ${ev.slot}`;
  img.loading = "lazy";
  const cap = document.createElement("figcaption");
  cap.textContent = `#${ev.slot}${ev.alt ? ` ${ev.alt}` : ""}`;
  fig.append(img, cap);
  into.append(fig);
  img.src = await imageUrl(ev.url);
}

function renderResult(result) {
  $("result").hidden = false;
  const outcomes = { completed: "已完成", exhausted: "重试用尽，采用最佳一稿", needs_clarification: "需要澄清", failed: "失败" };
  $("outcome").textContent = result.message || outcomes[result.outcome] || result.outcome;
  const post = $("post");
  post.replaceChildren();
  const p = result.post || {};
  if (p.title) { const h = document.createElement("h1"); h.textContent = p.title; post.append(h); }
  for (const block of p.blocks || []) post.append(renderBlock(block));
  if ((p.tags || []).length) {
    const tags = document.createElement("div");
    tags.className = "tags";
    for (const t of p.tags) { const s = document.createElement("span"); s.textContent = `#${t}`; tags.append(s); }
    post.append(tags);
  }
  if ((result.images || []).length) {
    const gallery = document.createElement("div");
    gallery.className = "gallery";
    post.append(gallery);
    for (const image of result.images) addImage(image, gallery);
  }
  renderQuality(result.quality || {});
}

// A post block of the result payload: {type: heading | text | list_item, text}.
function renderBlock(block) {
  const text = typeof block === "string" ? block : (block.text ?? block.content ?? "");
  const type = typeof block === "string" ? "text" : block.type;
  const el = document.createElement(type === "heading" ? "h4" : "p");
  if (type === "list_item") el.className = "list-item";
  el.textContent = text;
  return el;
}

function renderQuality(q) {
  const box = $("quality");
  box.replaceChildren();
  const head = document.createElement("strong");
  // not_judged says so in its label; a failing verdict without a judge shows no number either.
  const unjudged = q.judge === "unavailable" ? "（未评审/not judged）" : "";
  const score = q.verdict === "not_judged" ? "" : q.score != null ? ` ${scoreText(q.score)}` : unjudged;
  head.textContent = `质量：${verdictLabel(q.verdict || "")}${score}` +
    `${q.exhausted ? "（重试已用尽）" : ""} · 尝试 ${q.attempts ?? "-"} 次`;
  box.append(head);
  const dims = document.createElement("div");
  dims.className = "dims";
  for (const [name, value] of Object.entries(q.dimensions || {})) {
    const d = document.createElement("div");
    d.textContent = `${name}: ${Number(value).toFixed(2)}`;
    dims.append(d);
  }
  box.append(dims);
}

function showInterrupt(interrupt) {
  const value = interrupt.value || interrupt;
  $("clarify").hidden = false;
  $("clarify-question").textContent = value.question || "请补充信息";
  const options = $("clarify-options");
  options.replaceChildren();
  for (const option of value.options || [{ id: "defaults", label: "按默认继续" }, { id: "details", label: "补充细节" }]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = option.label || option.id;
    b.dataset.option = option.id;
    b.addEventListener("click", () => {
      const details = $("clarify-details").value.trim();
      if (option.id === "details") {
        if (!details) { $("clarify-details").focus(); return; }
        resume({ action: "details", details });
      } else {
        resume("defaults");
      }
    });
    options.append(b);
  }
}

// ---------------------------------------------------------------- persistence

function storageKey(runId) { return `atelier.frames.${runId}`; }

// Frames are written out at most every 300 ms (a token stream brings many a second)
// and when the page goes away, so a reload finds every frame it rendered.
const unsaved = new Set();   // run ids with frames not yet in sessionStorage
let saveTimer = null;

function persistFrame(runId, frame) {
  state.frames.push([runId, frame.id, frame.event, frame.data]);
  unsaved.add(runId);
  saveTimer ??= setTimeout(saveFrames, 300);
}

function saveFrames() {
  clearTimeout(saveTimer);
  saveTimer = null;
  for (const runId of unsaved) {
    try {
      sessionStorage.setItem(storageKey(runId), JSON.stringify(state.frames.filter((f) => f[0] === runId)));
    } catch {
      // Storage full: a reload will replay the run from its first frame instead.
      sessionStorage.removeItem(storageKey(runId));
    }
  }
  unsaved.clear();
}

function restoreFrames() {
  const stored = JSON.parse(sessionStorage.getItem(storageKey(state.runId)) || "[]");
  for (const [runId, id, event, data] of stored) {
    state.frames.push([runId, id, event, data]);
    handleFrame(runId, { id, event, data }, false);
  }
}

function lastFrameId(runId) {
  const ids = state.frames.filter((f) => f[0] === runId && f[1] != null).map((f) => Number(f[1]));
  return ids.length ? Math.max(...ids) : 0;
}

async function loadHistory() {
  if (!state.threadId) return;
  try {
    const runs = await api("GET", `/threads/${state.threadId}/runs`);
    const list = $("history-list");
    list.replaceChildren();
    for (const run of runs) {
      const li = document.createElement("li");
      const label = document.createElement("span");
      label.textContent = `${new Date(run.created_at).toLocaleTimeString()} · ${STATUS_LABELS[run.status] || run.status}`;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "link";
      open.textContent = "回放";
      open.addEventListener("click", () => replay(run.run_id));
      li.append(label, open);
      list.append(li);
    }
    $("history").hidden = runs.length === 0;
  } catch {
    // History is a convenience; the live view already shows the run.
  }
}

async function replay(runId) {
  resetView();
  sessionStorage.removeItem(storageKey(runId));
  state.runId = runId;
  setRun(state.threadId, runId);
  await openStream("GET", `/threads/${state.threadId}/runs/${runId}/stream`, undefined, 0);
}

// ---------------------------------------------------------------- wiring

async function loadInfo() {
  try {
    const info = await api("GET", "/info");
    const models = info.models || {};
    const names = [...new Set(Object.values(models))];
    $("models").textContent = names.length ? `模型：${names.join(" / ")}` : "";
    $("models").title = Object.entries(models).map(([role, m]) => `${role}: ${m}`).join("\n");
    const list = $("roles-list");
    list.replaceChildren();
    for (const [role, model] of Object.entries(models)) {
      const dt = document.createElement("dt");
      dt.textContent = role;
      const dd = document.createElement("dd");
      dd.textContent = model;
      list.append(dt, dd);
    }
    $("roles").hidden = names.length === 0;
    if (info.auth && info.auth !== "open") $("key-button").hidden = false;
  } catch {
    // /info is optional for the console to work.
  }
}

$("run-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = {
    request: $("request").value.trim(),
    platform: $("platform").value,
    image_provider: $("image_provider").value,
    image_count: Number($("image_count").value),
    auto_confirm: $("auto_confirm").checked,
  };
  $("start").disabled = true;
  try {
    await startRun(input);
  } catch (err) {
    showError(err.message);
    setStatus("idle");
  } finally {
    $("start").disabled = false;
  }
});
$("cancel").addEventListener("click", cancelRun);
window.addEventListener("pagehide", saveFrames);
$("key-button").addEventListener("click", askForKey);

loadInfo();
{
  const params = new URLSearchParams(location.search);
  const thread = params.get("thread");
  const run = params.get("run");
  if (thread && run) {
    rejoin(thread, run).then(loadHistory);
  }
}
