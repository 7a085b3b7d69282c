// Atelier console: schedules (crons) and a run's webhook deliveries.
//
// Loaded after console.js, whose helpers it uses (I18N, t, $, api, state, lang,
// formatTime). The compose form's "schedule this request" makes a cron of what the
// form holds — a new request, or a reopened post's own (console.js fills the form
// in) — with POST /runs/crons: each tick starts a run of the atelier pipeline on a
// new thread, which then shows in "My posts". The schedules list pauses and resumes
// a cron (PATCH enabled) and deletes it. Under a run, its webhook deliveries: each
// attempt with its outcome, HTTP status, latency and error
// (GET /threads/{t}/runs/{r}/webhooks), read again while one is pending.
// console.js dispatches `atelier:settled` (a run's view is complete),
// `atelier:reset` (another run is shown) and `atelier:rerender` (a language switch).
"use strict";

Object.assign(I18N.zh, {
  "schedule.title": "定时发布", "schedule.hint": "按计划自动运行上面的需求（每次新建一篇作品）。",
  "schedule.cron": "计划（五段：分 时 日 月 周）", "schedule.timezone": "时区",
  "schedule.webhook": "完成后通知的网址（可选）", "schedule.enabled": "立即启用", "schedule.create": "创建定时",
  "schedule.created": "已创建定时。", "schedule.need_request": "请先填写需求。",
  "schedules.title": "定时任务", "schedules.empty": "还没有定时任务。", "schedules.next": "下次：{d}",
  "schedules.on": "启用中", "schedules.paused": "已暂停", "schedules.ended": "已结束",
  "schedules.pause": "暂停", "schedules.resume": "恢复", "schedules.delete": "删除", "schedules.confirm": "删除这个定时任务？",
  "deliveries.title": "回调通知", "deliveries.attempts": "尝试 {n} 次",
  "deliveries.pending": "待发送", "deliveries.success": "已送达", "deliveries.failed": "失败", "deliveries.cancelled": "已取消",
  "deliveries.attempt": "第 {n} 次", "deliveries.latency": "{ms} 毫秒", "deliveries.no_status": "无响应",
  "deliveries.next": "下次尝试：{d}",
  "delivery_outcome.success": "成功", "delivery_outcome.http_error": "接收方报错", "delivery_outcome.network_error": "网络错误",
  "delivery_outcome.refused": "按规则拒绝",
});
Object.assign(I18N.en, {
  "schedule.title": "Schedule", "schedule.hint": "Run the request above on a schedule (a new post each time).",
  "schedule.cron": "Schedule (five cron fields: minute hour day month weekday)", "schedule.timezone": "Time zone",
  "schedule.webhook": "Notify this URL when done (optional)", "schedule.enabled": "Enabled now", "schedule.create": "Create schedule",
  "schedule.created": "Schedule created.", "schedule.need_request": "Write a request first.",
  "schedules.title": "Schedules", "schedules.empty": "No schedules yet.", "schedules.next": "Next: {d}",
  "schedules.on": "On", "schedules.paused": "Paused", "schedules.ended": "Ended",
  "schedules.pause": "Pause", "schedules.resume": "Resume", "schedules.delete": "Delete", "schedules.confirm": "Delete this schedule?",
  "deliveries.title": "Webhook deliveries", "deliveries.attempts": "{n} attempt(s)",
  "deliveries.pending": "Pending", "deliveries.success": "Delivered", "deliveries.failed": "Failed", "deliveries.cancelled": "Cancelled",
  "deliveries.attempt": "#{n}", "deliveries.latency": "{ms} ms", "deliveries.no_status": "no answer",
  "deliveries.next": "Next attempt: {d}",
  "delivery_outcome.success": "Success", "delivery_outcome.http_error": "Receiver error", "delivery_outcome.network_error": "Network error",
  "delivery_outcome.refused": "Refused by rule",
});

// Milliseconds between two reads of a run's deliveries while one is pending.
const DELIVERY_POLL_MS = 1000;

// ---------------------------------------------------------------- schedules

let schedules = [];

function scheduleInput() {
  return {
    request: $("request").value.trim(),
    platform: $("platform").value,
    image_provider: $("image_provider").value,
    image_count: Number($("image_count").value),
    auto_confirm: true,  // nobody is there to answer a clarifying question
  };
}

async function createSchedule() {
  const error = $("schedule-error");
  const note = $("schedule-note");
  error.hidden = true;
  note.hidden = true;
  const input = scheduleInput();
  if (!input.request) { error.textContent = t("schedule.need_request"); error.hidden = false; return; }
  const body = {
    assistant_id: pickAssistant(),  // the picked brand preset, or the built-in
    input,
    schedule: $("schedule-cron").value.trim(),
    timezone: $("schedule-timezone").value.trim() || undefined,
    enabled: $("schedule-enabled").checked,
    metadata: { title: input.request.slice(0, 80) },
  };
  const webhook = $("schedule-webhook").value.trim();
  if (webhook) body.webhook = webhook;
  $("schedule-create").disabled = true;
  try {
    await api("POST", "/runs/crons", body);
    note.textContent = t("schedule.created");
    note.hidden = false;
    await loadSchedules();
  } catch (err) {
    error.textContent = err.message;  // the 422 names the field and the rule
    error.hidden = false;
  } finally {
    $("schedule-create").disabled = false;
  }
}

async function loadSchedules() {
  try {
    schedules = await api("POST", "/runs/crons/search", { limit: 100, sort_by: "created_at", sort_order: "desc" });
  } catch {
    return;  // the list is a convenience; crons work without it
  }
  renderSchedules();
}

function renderSchedules() {
  const list = $("schedules-list");
  list.replaceChildren();
  for (const cron of schedules) {
    const li = document.createElement("li");
    li.dataset.cron = cron.cron_id;
    const phase = !cron.next_run_date ? "ended" : cron.enabled ? "on" : "paused";
    li.dataset.state = phase;
    const request = document.createElement("span");
    request.className = "title";
    request.dataset.user = "";
    request.textContent = ((cron.payload || {}).input || {}).request || cron.assistant_id;
    const when = document.createElement("code");
    when.dataset.user = "";  // the cron expression and time zone, as written
    when.textContent = `${cron.schedule}${cron.timezone ? ` · ${cron.timezone}` : ""}`;
    const meta = document.createElement("span");
    meta.className = "muted small";
    meta.textContent = [
      t(`schedules.${phase}`),
      cron.enabled && cron.next_run_date ? t("schedules.next", { d: formatTime(cron.next_run_date, true) }) : "",
    ].filter(Boolean).join(" · ");
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "link toggle";
    toggle.textContent = t(cron.enabled ? "schedules.pause" : "schedules.resume");
    toggle.hidden = phase === "ended";
    toggle.addEventListener("click", () => setEnabled(cron.cron_id, !cron.enabled).catch((err) => showError(err.message)));
    const del = document.createElement("button");
    del.type = "button";
    del.className = "link delete";
    del.textContent = t("schedules.delete");
    del.addEventListener("click", () => deleteSchedule(cron.cron_id).catch((err) => showError(err.message)));
    li.append(request, when, meta, toggle, del);
    list.append(li);
  }
  $("schedules-empty").hidden = schedules.length > 0;
}

async function setEnabled(cronId, enabled) {
  await api("PATCH", `/runs/crons/${cronId}`, { enabled });
  await loadSchedules();
}

async function deleteSchedule(cronId) {
  if (!confirm(t("schedules.confirm"))) return;
  await api("DELETE", `/runs/crons/${cronId}`);
  await loadSchedules();
}

// ---------------------------------------------------------------- deliveries

let deliveries = [];
let deliveriesOf = null;   // "thread/run" the list belongs to
let deliveryTimer = null;

function clearDeliveries() {
  clearTimeout(deliveryTimer);
  deliveries = [];
  deliveriesOf = null;
  renderDeliveries();
}

async function loadDeliveries() {
  clearTimeout(deliveryTimer);
  if (!state.threadId || !state.runId) return;
  const of = `${state.threadId}/${state.runId}`;
  let found;
  try {
    found = await api("GET", `/threads/${state.threadId}/runs/${state.runId}/webhooks`);
  } catch {
    return;  // deliveries are a convenience; the run view works without them
  }
  if (of !== `${state.threadId}/${state.runId}`) return;  // another run is shown now
  deliveries = found;
  deliveriesOf = of;
  renderDeliveries();
  if (deliveries.some((d) => d.status === "pending")) deliveryTimer = setTimeout(loadDeliveries, DELIVERY_POLL_MS);
}

function renderDeliveries() {
  const box = $("deliveries-list");
  box.replaceChildren();
  for (const delivery of deliveries) {
    const item = document.createElement("li");
    item.dataset.status = delivery.status;
    const head = document.createElement("div");
    const url = document.createElement("code");
    url.dataset.user = "";
    url.textContent = delivery.url;
    const status = document.createElement("span");
    status.className = `badge ${delivery.status}`;
    status.textContent = t(`deliveries.${delivery.status}`);
    const count = document.createElement("span");
    count.className = "muted small";
    count.textContent = t("deliveries.attempts", { n: delivery.attempts });
    head.append(status, " ", url, " ", count);
    if (delivery.status === "pending" && delivery.next_attempt_at) {
      const next = document.createElement("span");
      next.className = "muted small";
      next.textContent = ` · ${t("deliveries.next", { d: formatTime(delivery.next_attempt_at) })}`;
      head.append(next);
    }
    const attempts = document.createElement("ol");
    attempts.className = "attempts";
    for (const attempt of delivery.history || []) {
      const li = document.createElement("li");
      li.dataset.outcome = attempt.outcome;
      const what = document.createElement("span");
      what.textContent = [
        t("deliveries.attempt", { n: attempt.attempt }),
        formatTime(attempt.started_at),
        named("delivery_outcome", attempt.outcome),
      ].join(" · ") + " · ";
      const code = document.createElement("code");
      code.className = "status-code";
      if (attempt.status_code == null) code.textContent = t("deliveries.no_status");
      else { code.dataset.user = ""; code.textContent = `HTTP ${attempt.status_code}`; }  // protocol, not a label
      const latency = document.createElement("span");
      latency.className = "latency";
      latency.textContent = ` · ${t("deliveries.latency", { ms: Math.round(attempt.latency_ms) })}`;
      li.append(what, code, latency);
      if (attempt.error) {
        const error = document.createElement("span");
        error.className = "error small";
        error.dataset.user = "";  // the server's words about the receiver, not a label
        error.textContent = ` ${attempt.error}`;
        li.append(error);
      }
      attempts.append(li);
    }
    item.append(head, attempts);
    box.append(item);
  }
  $("deliveries").hidden = deliveries.length === 0;
}

// ---------------------------------------------------------------- wiring

translatePage();  // console.js translated the page before these labels were known
$("schedule-timezone").value ||= Intl.DateTimeFormat().resolvedOptions().timeZone || "";
$("schedule-create").addEventListener("click", () => createSchedule());
document.addEventListener("atelier:settled", () => { loadDeliveries(); loadSchedules(); });
document.addEventListener("atelier:reset", clearDeliveries);
document.addEventListener("atelier:rerender", () => { renderSchedules(); renderDeliveries(); });
loadSchedules();
