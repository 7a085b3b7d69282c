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


// ---------------------------------------------------------------- language
//
// Every label the console writes comes from I18N; elements of the page carry
// data-i18n (text), data-i18n-placeholder or data-i18n-title keys. What users or
// models wrote (the request, the post, the judge's feedback, the question) is
// marked data-user and never translated. The choice is kept in localStorage.

const I18N = {
  zh: {
    "app.subtitle": "内容工作室", "key.button": "API Key", "key.prompt": "此服务需要 API Key：", "key.needed": "需要 API Key",
    "compose.title": "新建创作", "compose.request": "需求", "compose.placeholder": "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚",
    "compose.platform": "平台", "compose.images": "配图", "compose.count": "图片数", "compose.auto": "直接生成（跳过澄清问题）",
    "compose.start": "开始创作", "compose.cancel": "取消",
    "platform.xiaohongshu": "小红书", "platform.douyin": "抖音", "platform.weibo": "微博", "platform.wechat": "公众号",
    "provider.local": "本地卡片", "provider.openai": "OpenAI 图片",
    "roles.title": "各角色使用的模型", "history.title": "本帖的运行", "history.replay": "回放",
    "library.title": "我的作品", "library.search": "搜索标题或需求", "library.empty": "还没有作品。", "library.delete": "删除",
    "library.confirm": "删除这篇作品及其全部运行？", "library.untitled": "（无标题）",
    "library.completed": "已完成", "library.exhausted": "未达标", "library.needs_clarification": "待补充", "library.failed": "失败",
    "live.title": "运行", "live.routes": "团队调度", "live.draft": "写作中", "live.verdicts": "评审", "live.images": "图片",
    "clarify.title": "需要确认", "clarify.placeholder": "补充细节，例如：受众、目标、字数", "clarify.fallback": "请补充信息",
    "clarify.defaults": "按默认继续", "clarify.details": "补充细节",
    "result.title": "成稿", "edit.title": "标题", "edit.body": "正文", "edit.tags": "标签（空格分隔）",
    "edit.save": "保存并重新评审", "edit.cancel": "取消", "lightbox.close": "关闭",
    "status.idle": "空闲", "status.pending": "排队中", "status.running": "运行中", "status.success": "完成", "status.error": "出错",
    "status.timeout": "超时", "status.interrupted": "已中断", "status.waiting": "等待回答",
    "attempt": "第 {n} / {max} 次尝试", "attempt.short": "第 {n} / {max} 次",
    "verdict.unjudged_note": "评审模型不可用，只做了代码检查", "verdict.threshold": "阈值 {t}", "verdict.no_score": "无评分",
    "knowledge.injected": "知识库：注入笔记 {n} 条", "knowledge.deviation": "! 忽略了笔记 {ids}",
    "error.run": "运行出错：{m}", "error.unknown": "未知错误", "error.gap": "部分事件已过期，已重新读取最新状态。",
    "error.connect": "连接失败：{m}", "error.stream": "连接中断：{m}",
    "draft.part": "— 第 {n} 稿 —", "image.alt": "图 {n}",
    "outcome.completed": "已完成：评审通过。", "outcome.completed_unjudged": "已完成：代码检查通过，未经评审模型评审。", "outcome.exhausted": "重试用尽，下面是最好的一版，请确认后使用。",
    "outcome.needs_clarification": "需要补充需求后重试。", "outcome.failed": "生成失败，请重试。",
    "quality.head": "质量：{v}", "quality.exhausted": "（重试已用尽）", "quality.attempts": "尝试 {n} 次", "quality.history": "评审记录",
    "action.copy": "复制全文", "action.regenerate": "重新生成", "action.accept": "就用这一版", "action.retry": "再试一次",
    "action.edit_request": "修改需求", "action.export": "导出（Markdown + 图片）", "action.edit": "编辑",
    "action.copied": "已复制到剪贴板", "action.accepted": "已采用这一版", "card.download": "下载", "card.enlarge": "放大",
    "card.redraw": "重画这张",
    "outcome.revised": "你的修改未达到评审标准，已按你的版本发布；请按评审意见再改，或确认后使用。",
    "usage.title": "用量", "usage.role": "角色", "usage.calls": "调用", "usage.prompt": "输入词元", "usage.completion": "输出词元",
    "usage.seconds": "耗时（秒）", "usage.cost": "费用", "usage.total": "合计", "usage.unknown": "未知", "usage.partial": "（{n} 次调用未报告用量）",
    "usage.none": "这篇作品还没有记录到模型调用。", "agent.unknown": "其他", "agent.other": "其他",
    "models": "模型：{m}",
    "check.pass": "✓ {name}",
    "check.answer_length": "正文太短（{m} 字），请写得更完整", "check.answer_length.name": "篇幅",
    "check.refusal": "内容里有拒绝式的说法，请直接给出内容", "check.refusal.name": "无拒答",
    "check.error_marker": "内容里有报错字样，请删掉", "check.error_marker.name": "无报错字样",
    "check.incomplete": "内容没有写完（有“未完待续”一类字样），请写完整", "check.incomplete.name": "完整",
    "check.title_length": "标题 {m} 字，要求 {e}：请调整标题长度", "check.title_length.name": "标题长度",
    "check.body_length": "正文 {m} 字，要求 {e}：请调整正文长度", "check.body_length.name": "正文长度",
    "check.tag_count": "标签 {m} 个，要求 {e}：请调整标签数量", "check.tag_count.name": "标签数量",
    "check.must_include": "缺少必须提到的内容：{m}", "check.must_include.name": "必含内容",
    "check.must_avoid": "出现了应避免的内容：{m}，请删掉", "check.must_avoid.name": "禁用内容",
    "check.image_files": "有图片无法打开，请重新生成配图", "check.image_files.name": "图片文件",
    "check.image_count": "图片 {m} 张，要求 {e}：请调整图片数量", "check.image_count.name": "图片数量",
    "check.data_markup": "内容里混进了提示词标记（{m}），请删掉", "check.data_markup.name": "无提示词标记",
    "check.code_share": "正文 {m}% 是代码或 JSON，请写成给人读的文字", "check.code_share.name": "正文是文字",
    "check.tags_present": "没有标签，这个平台的笔记需要标签", "check.tags_present.name": "有标签",
    "check.knowledge_deviation": "没有遵守知识库里的规则，请按规则修改", "check.knowledge_deviation.name": "遵守知识库",
    "check.ad_law": "用了广告法禁用的词：{m}，请换成具体、可核实的说法", "check.ad_law.name": "广告合规",
    "check.platform_terms": "用了平台禁止的词：{m}，请删掉", "check.platform_terms.name": "平台禁用词",
    "check.platform_title": "缺少标题，这个平台的帖子需要标题", "check.platform_title.name": "有标题",
    "check.platform_title_length": "标题 {m} 字，平台要求 {e}", "check.platform_title_length.name": "标题（平台规则）",
    "check.platform_body_length": "正文 {m} 字，平台要求 {e}", "check.platform_body_length.name": "正文（平台规则）",
    "check.platform_text_length": "全文 {m} 字，平台要求 {e}", "check.platform_text_length.name": "全文（平台规则）",
    "check.platform_tag_count": "标签 {m} 个，平台要求 {e}", "check.platform_tag_count.name": "标签（平台规则）",
    "check.platform_image_count": "图片 {m} 张，平台要求 {e}", "check.platform_image_count.name": "图片（平台规则）",
    "check.platform_headings": "小标题 {m} 个，平台要求 {e}", "check.platform_headings.name": "小标题",
    "check.platform_shots": "脚本分镜不合要求：{m}", "check.platform_shots.name": "分镜",
    "check.platform_thread": "串推各条长度 {m}，平台要求 {e}", "check.platform_thread.name": "串推",
    "check.other": "检查“{name}”未通过",
  },
  en: {
    "app.subtitle": "Content studio", "key.button": "API key", "key.prompt": "This service needs an API key:", "key.needed": "An API key is needed",
    "compose.title": "New post", "compose.request": "Request", "compose.placeholder": "A Xiaohongshu note on budget skincare for students, with the key ingredients explained",
    "compose.platform": "Platform", "compose.images": "Images", "compose.count": "Image count", "compose.auto": "Generate directly (skip clarifying questions)",
    "compose.start": "Create", "compose.cancel": "Cancel",
    "platform.xiaohongshu": "Xiaohongshu", "platform.douyin": "Douyin", "platform.weibo": "Weibo", "platform.wechat": "WeChat article",
    "provider.local": "Local cards", "provider.openai": "OpenAI images",
    "roles.title": "Model of each role", "history.title": "Runs of this post", "history.replay": "Replay",
    "library.title": "My posts", "library.search": "Search titles or requests", "library.empty": "No posts yet.", "library.delete": "Delete",
    "library.confirm": "Delete this post and all its runs?", "library.untitled": "(untitled)",
    "library.completed": "Done", "library.exhausted": "Below the bar", "library.needs_clarification": "Needs details", "library.failed": "Failed",
    "live.title": "Run", "live.routes": "Team routing", "live.draft": "Writing", "live.verdicts": "Review", "live.images": "Images",
    "clarify.title": "A question for you", "clarify.placeholder": "More details, e.g. audience, goal, length", "clarify.fallback": "Please add some details",
    "clarify.defaults": "Go on with defaults", "clarify.details": "Add details",
    "result.title": "Post", "edit.title": "Title", "edit.body": "Body", "edit.tags": "Tags (space-separated)",
    "edit.save": "Save and review again", "edit.cancel": "Cancel", "lightbox.close": "Close",
    "status.idle": "Idle", "status.pending": "Queued", "status.running": "Running", "status.success": "Done", "status.error": "Error",
    "status.timeout": "Timed out", "status.interrupted": "Stopped", "status.waiting": "Waiting for your answer",
    "attempt": "Attempt {n} of {max}", "attempt.short": "Attempt {n} of {max}",
    "verdict.unjudged_note": "The judge model was unavailable; only the code checks ran", "verdict.threshold": "threshold {t}", "verdict.no_score": "no score",
    "knowledge.injected": "Knowledge: {n} notes added", "knowledge.deviation": "! Notes ignored: {ids}",
    "error.run": "The run failed: {m}", "error.unknown": "unknown error", "error.gap": "Some events expired; the latest state was read again.",
    "error.connect": "Could not connect: {m}", "error.stream": "Connection lost: {m}",
    "draft.part": "— Draft {n} —", "image.alt": "Image {n}",
    "outcome.completed": "Done: the post passed review.", "outcome.completed_unjudged": "Done: the code checks passed; the judge model did not review it.", "outcome.exhausted": "Out of retries; here is the best version, check it before use.",
    "outcome.needs_clarification": "Add to the request and try again.", "outcome.failed": "Generation failed; please try again.",
    "quality.head": "Quality: {v}", "quality.exhausted": " (retries used up)", "quality.attempts": "attempts: {n}", "quality.history": "Review history",
    "action.copy": "Copy post", "action.regenerate": "Regenerate", "action.accept": "Use this version", "action.retry": "Try again",
    "action.edit_request": "Edit the request", "action.export": "Export (Markdown + images)", "action.edit": "Edit",
    "action.copied": "Copied to the clipboard", "action.accepted": "This version is accepted", "card.download": "Download", "card.enlarge": "Enlarge",
    "card.redraw": "Redraw",
    "outcome.revised": "Your revision did not reach the review bar; it is published as you made it. Revise it as the review says, or check it before use.",
    "usage.title": "Usage", "usage.role": "Role", "usage.calls": "Calls", "usage.prompt": "Prompt tokens", "usage.completion": "Completion tokens",
    "usage.seconds": "Time (s)", "usage.cost": "Cost", "usage.total": "Total", "usage.unknown": "unknown", "usage.partial": " ({n} calls reported no usage)",
    "usage.none": "No model calls recorded for this post yet.", "agent.unknown": "Other", "agent.other": "Other",
    "models": "Models: {m}",
    "check.pass": "✓ {name}",
    "check.answer_length": "The text is too short ({m} characters); write it out more fully", "check.answer_length.name": "Length",
    "check.refusal": "The text reads like a refusal; give the content directly", "check.refusal.name": "No refusal",
    "check.error_marker": "The text contains error markers; remove them", "check.error_marker.name": "No error markers",
    "check.incomplete": "The text is unfinished (a “to be continued” marker); finish it", "check.incomplete.name": "Complete",
    "check.title_length": "The title has {m} characters, {e} wanted: adjust its length", "check.title_length.name": "Title length",
    "check.body_length": "The body has {m} characters, {e} wanted: adjust its length", "check.body_length.name": "Body length",
    "check.tag_count": "{m} tags, {e} wanted: adjust the number of tags", "check.tag_count.name": "Tag count",
    "check.must_include": "Missing what the post must mention: {m}", "check.must_include.name": "Must include",
    "check.must_avoid": "Contains what the post must avoid: {m}; remove it", "check.must_avoid.name": "Must avoid",
    "check.image_files": "An image cannot be opened; regenerate the images", "check.image_files.name": "Image files",
    "check.image_count": "{m} images, {e} wanted: adjust the number of images", "check.image_count.name": "Image count",
    "check.data_markup": "The text contains prompt markup ({m}); remove it", "check.data_markup.name": "No prompt markup",
    "check.code_share": "{m}% of the body is code or JSON; write prose for people", "check.code_share.name": "Body is prose",
    "check.tags_present": "No tags, and posts on this platform carry tags", "check.tags_present.name": "Has tags",
    "check.knowledge_deviation": "A rule from the knowledge vault was not followed; follow it", "check.knowledge_deviation.name": "Follows the vault",
    "check.ad_law": "Uses words the advertising law forbids: {m}; say something concrete instead", "check.ad_law.name": "Ad-law words",
    "check.platform_terms": "Uses words the platform forbids: {m}; remove them", "check.platform_terms.name": "Platform's words",
    "check.platform_title": "No title, and posts on this platform need one", "check.platform_title.name": "Has a title",
    "check.platform_title_length": "The title has {m} characters; the platform allows {e}", "check.platform_title_length.name": "Title (platform)",
    "check.platform_body_length": "The body has {m} characters; the platform allows {e}", "check.platform_body_length.name": "Body (platform)",
    "check.platform_text_length": "The text has {m} characters; the platform allows {e}", "check.platform_text_length.name": "Text (platform)",
    "check.platform_tag_count": "{m} tags; the platform allows {e}", "check.platform_tag_count.name": "Tags (platform)",
    "check.platform_image_count": "{m} images; the platform allows {e}", "check.platform_image_count.name": "Images (platform)",
    "check.platform_headings": "{m} headings; the platform wants {e}", "check.platform_headings.name": "Headings",
    "check.platform_shots": "The script's shots fall short: {m}", "check.platform_shots.name": "Shots",
    "check.platform_thread": "The thread's posts weigh {m}; the platform allows {e}", "check.platform_thread.name": "Thread",
    "check.other": "Check “{name}” failed",
  },
};

// The names of ids (stages, agents, verdicts, reasons, dimensions) come from the
// server, declared once for the console and the CLI (app/names.py, /console/names.js).
for (const [code, names] of Object.entries(window.ATELIER_NAMES || {})) Object.assign(I18N[code] || {}, names);
// The labels of the console's other scripts (feedback.js).
for (const [code, labels] of Object.entries(window.ATELIER_FEEDBACK_LABELS || {})) Object.assign(I18N[code] || {}, labels);

let lang = localStorage.getItem("atelier.lang") ||
  ((navigator.language || "zh").toLowerCase().startsWith("zh") ? "zh" : "en");
if (!I18N[lang]) lang = "zh";

// The label `key` in the chosen language, with {name} placeholders filled in.
function t(key, vars = {}) {
  const text = I18N[lang][key] ?? I18N.zh[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(vars[name] ?? ""));
}

// A name the console shows for an id: an agent, a role, a dimension (the id when unknown).
function named(prefix, id) {
  const key = `${prefix}.${id}`;
  return key in I18N[lang] ? t(key) : id;
}

function translatePage() {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  document.title = `Atelier · ${t("app.subtitle")}`;
  for (const el of document.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of document.querySelectorAll("[data-i18n-placeholder]")) el.placeholder = t(el.dataset.i18nPlaceholder);
  $("lang").value = lang;
}

// 24-hour local date and time in the chosen language.
function formatTime(iso, withDate = false) {
  const options = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  if (withDate) Object.assign(options, { year: "numeric", month: "2-digit", day: "2-digit" });
  return new Intl.DateTimeFormat(lang === "zh" ? "zh-CN" : "en-GB", options).format(new Date(iso));
}

const state = {
  key: localStorage.getItem("atelier.key") || "",
  threadId: null,
  runId: null,
  seen: new Set(),          // "run:id" of frames already rendered
  frames: [],               // [runId, id, event, data] rendered this page, persisted
  controller: null,         // AbortController of the open stream
  draftIds: new Map(),      // writer message id → {el, text}
  stageCounts: {},
  status: "idle",
  assistantId: null,        // the assistant the shown post runs (a brand preset's, or atelier)
  result: null,             // the thread's result shown under the run, if any
  pending: null,            // the open question of the thread, if any
  input: null,              // the request and settings of the thread's post
  unjudged: new Set(),      // attempts whose critic.verdict came without the judge
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
  if (res.status === 401) { askForKey(); throw new Error(t("key.needed")); }
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
  const key = prompt(t("key.prompt"), state.key);
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

// The assistant a new post runs: brands.js makes it the picked brand preset's.
let pickAssistant = () => "atelier";

function runBody(extra) {
  return {
    assistant_id: state.assistantId || "atelier",
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
  state.input = input;
  state.assistantId = pickAssistant();
  await openStream("POST", `/threads/${state.threadId}/runs/stream`, runBody({ input }));
}

async function resume(value) {
  $("clarify").hidden = true;
  state.pending = null;
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
    showError(t("error.connect", { m: err.message }));
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
    showError(t("error.stream", { m: err.message }));
  }
  if (state.controller === controller) await settle();
}

// After a stream ends: read the run's status and the thread's final result.
async function settle() {
  $("cancel").disabled = true;
  if (!state.threadId || !state.runId) return;
  try {
    const run = await api("GET", `/threads/${state.threadId}/runs/${state.runId}`);
    state.assistantId = run.assistant_id;  // its resume, edit and redraw run the same one
    const threadState = await api("GET", `/threads/${state.threadId}/state`);
    const values = threadState.values || {};
    showInput(values, run);
    const pending = (threadState.interrupts || []).concat(
      (threadState.tasks || []).flatMap((t) => t.interrupts || []));
    const waiting = run.status === "interrupted" && pending.length > 0;
    setStatus(waiting ? "waiting" : run.status);
    // The thread's result is this run's only when it finished (an older run replayed
    // from the history, e.g. the one that asked a question, did not write it).
    if (values.result && run.status === "success") renderResult(values.result);
    if (waiting) showInterrupt(pending[0]);
  } catch (err) {
    showError(err.message);
  }
  loadHistory();
  loadLibrary();
  document.dispatchEvent(new Event("atelier:settled"));  // schedules.js: the run's deliveries
}

// A reopened post shows its own request and settings (the thread's input values).
function showInput(values, run) {
  const input = { ...((run && run.kwargs && run.kwargs.input) || {}), ...values };
  if (!input.request) return;
  state.input = {
    request: input.request,
    platform: input.platform || "xiaohongshu",
    image_provider: input.image_provider || "local",
    image_count: Number(input.image_count || 3),
    auto_confirm: Boolean(input.auto_confirm),
  };
  $("request").value = state.input.request;
  $("platform").value = state.input.platform;
  $("image_provider").value = state.input.image_provider;
  $("image_count").value = String(state.input.image_count);
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
    if (live !== null) setRun(frame.data.thread_id || state.threadId, frame.data.run_id);
    runId = frame.data.run_id;
  }
  const key = `${runId}:${frame.id}`;
  if (live !== null) {  // null: re-rendering frames already shown (a language switch)
    if (frame.id != null && state.seen.has(key)) return;   // replayed or duplicated: already shown
    if (frame.id != null) state.seen.add(key);
    if (live) persistFrame(runId, frame);
  }
  const [kind] = frame.event.split("|");
  const data = frame.data;
  switch (kind) {
    case "custom": onPipelineEvent(data); break;
    case "messages": onMessage(data); break;
    case "error":
      showError(t("error.run", { m: data.message || data.error || t("error.unknown") }));
      if (live !== null) setStatus("error");
      break;
    case "gap": showError(t("error.gap")); break;
    default: break;  // metadata, updates, values, end: a question is shown by settle()
  }
}

function onPipelineEvent(ev) {
  if (!ev || typeof ev !== "object") return;
  switch (ev.type) {
    case "stage.started": markStage(ev.stage, "active", ev.attempt); break;
    case "stage.completed": markStage(ev.stage, "done", ev.attempt, ev.duration_ms); break;
    case "attempt.started":
      $("attempt").textContent = t("attempt", { n: ev.attempt, max: ev.max_attempts });
      break;
    case "attempt.completed": {
      // The event has no judge field: its critic.verdict said whether the judge ran.
      const label = state.unjudged.has(ev.attempt) ? t("verdict.not_judged") : verdictLabel(ev);
      $("attempt").textContent = `${t("attempt", { n: ev.attempt, max: ev.max_attempts })}: ${label}`;
      break;
    }
      break;
    case "knowledge.injected":
      logRoute(t("knowledge.injected", { n: ev.notes.length }), "", ev.notes.map((n) => `${n.type}:${n.id}`).join(", "));
      break;
    case "supervisor.route": {
      const route = routeLine(ev);  // steps.js: agents started together, planned steps
      logRoute(route.text, route.tag, ev.guidance, route.together ? "together" : "", ev.next_agent);
      break;
    }
    case "agent.fallback":
      // The reason names why in the user's language; the router's own words stay a tooltip.
      logRoute(`↪ ${named("agent", ev.from)} → ${named("agent", ev.to)}`, named("reason", ev.reason), "", "fallback");
      $("routes").lastElementChild.title = ev.detail || "";
      break;
    case "knowledge.deviation":
      logRoute(t("knowledge.deviation", { ids: ev.ignored_notes.join(", ") }), ev.severity, ev.reason, "fallback");
      break;
    case "critic.verdict": renderVerdict(ev); break;
    case "asset.created": addImage(ev); break;
    default: break;
  }
}

function onMessage(data) {
  if (!Array.isArray(data)) return;
  const [chunk] = data;
  if (!chunk || typeof chunk.content !== "string") return;
  // The server streams the writing roles' tokens only (providers/llm.py, streams_to_users).
  const id = chunk.id || "draft";
  let part = state.draftIds.get(id);
  if (!part) {
    const el = document.createElement("div");
    el.className = "draft-part";
    el.dataset.user = "";
    const head = document.createElement("div");
    head.className = "muted small";
    head.textContent = t("draft.part", { n: state.draftIds.size + 1 });
    $("draft").append(head, el);
    part = { el, text: "" };
    state.draftIds.set(id, part);
  }
  part.text += chunk.content;
  part.el.replaceChildren(...markdown(part.text));
  $("draft").scrollTop = $("draft").scrollHeight;
}

// ---------------------------------------------------------------- safe Markdown
//
// A small subset, built as DOM nodes (never innerHTML): `#` headings, `-`/`1.`
// list items, paragraphs, **bold**. Text the model wrote stays text.

function inline(text) {
  const nodes = [];
  const parts = text.split(/\*\*(.+?)\*\*/g);
  parts.forEach((part, i) => {
    if (!part) return;
    if (i % 2) { const b = document.createElement("strong"); b.textContent = part; nodes.push(b); }
    else nodes.push(document.createTextNode(part));
  });
  return nodes;
}

function markdown(text) {
  const nodes = [];
  let list = null;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    const heading = line.match(/^#{1,6}\s+(.*)$/);
    const item = line.match(/^(?:[-*•·]|\d+[.、)）])\s+(.*)$/);
    if (item) {
      if (!list) { list = document.createElement("ul"); nodes.push(list); }
      const li = document.createElement("li");
      li.append(...inline(item[1]));
      list.append(li);
      continue;
    }
    list = null;
    if (!line) continue;
    const el = document.createElement(heading ? "h4" : "p");
    el.append(...inline(heading ? heading[1] : line));
    nodes.push(el);
  }
  return nodes;
}

// ---------------------------------------------------------------- rendering

function clearView() {
  state.draftIds.clear();
  state.unjudged.clear();
  state.stageCounts = {};
  for (const id of ["routes", "draft", "verdicts", "gallery", "post", "quality", "usage", "actions"]) $(id).replaceChildren();
  for (const li of $("stages").children) { li.className = ""; li.querySelector(".count")?.remove(); li.removeAttribute("title"); }
  $("stages").querySelector('[data-stage="redraw_card"]').hidden = true;
  $("attempt").textContent = "";
  $("result").hidden = true;
  $("editor").hidden = true;
  $("clarify").hidden = true;
  $("form-error").hidden = true;
}

function resetView() {
  saveFrames();  // the runs shown so far keep their frames for a later rejoin
  state.seen.clear();
  state.frames = [];
  state.result = null;
  state.pending = null;
  clearView();
  document.dispatchEvent(new Event("atelier:reset"));
}

// After a language switch: draw what is shown again from the frames and result.
function rerender() {
  translatePage();
  clearView();
  for (const [runId, id, event, data] of state.frames) {
    if (runId === state.runId) handleFrame(runId, { id, event, data }, null);
  }
  if (state.result) renderResult(state.result);
  if (state.pending) showInterrupt(state.pending);
  setStatus(state.status);
  renderHistory();
  renderLibrary();
  renderInfo();
  document.dispatchEvent(new Event("atelier:rerender"));
}

function setStatus(status) {
  state.status = status;
  const badge = $("run-status");
  badge.textContent = t(`status.${status}`) === `status.${status}` ? status : t(`status.${status}`);
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
  li.hidden = false;  // redraw_card shows only in a run that redraws a card
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
    if (durationMs != null) li.title = `${(durationMs / 1000).toFixed(1)} s · ${t("attempt.short", { n: attempt, max: attempt })}`;
  }
}

function logRoute(text, tag, detail, cls, agentId) {
  const li = document.createElement("li");
  if (cls) li.className = cls;
  if (agentId) li.dataset.agent = agentId;
  const step = document.createElement("span");
  step.className = "step";
  step.textContent = tag || "";
  li.append(step, document.createTextNode(text));
  if (detail) {
    const d = document.createElement("div");
    d.className = "muted small";
    d.dataset.user = "";  // the supervisor's own words
    d.textContent = detail;
    li.append(d);
  }
  $("routes").append(li);
  $("routes").scrollTop = $("routes").scrollHeight;
}

// A verdict decided without the judge (no score) is "not judged", whatever it says.
function unjudged(v) {
  return v.verdict === "not_judged" || v.judge === "unavailable" || ("score" in v && v.score == null);
}

function verdictLabel(v) {
  if (unjudged(v)) return t("verdict.not_judged");
  return named("verdict", v.verdict || "");
}

function scoreText(v) {
  if (unjudged(v)) return t("verdict.no_score");
  return `${Number(v.score).toFixed(2)}${v.threshold != null ? ` / ${t("verdict.threshold", { t: v.threshold })}` : ""}`;
}

// One check as a sentence in the chosen language: what passed, or what to fix.
function checkText(check) {
  const name = `check.${check.name}`;
  const label = `${name}.name` in I18N[lang] ? t(`${name}.name`) : check.name;
  if (check.passed) return t("check.pass", { name: label });
  const measured = Array.isArray(check.measured) ? check.measured.join(", ") : (check.measured ?? "");
  const expected = String(check.expected || "").replace(/^(contains|absent): /, "");
  if (name in I18N[lang]) return `✗ ${t(name, { m: measured, e: expected })}`;
  return `✗ ${t("check.other", { name: check.name })}`;
}

function renderChecks(list, checks) {
  for (const check of checks || []) {
    const li = document.createElement("li");
    li.className = check.passed ? "ok" : "bad";
    li.dataset.check = check.name;
    li.textContent = checkText(check);
    list.append(li);
  }
}

function renderVerdict(ev) {
  const node = $("verdict-template").content.firstElementChild.cloneNode(true);
  if (unjudged(ev)) state.unjudged.add(ev.attempt);
  node.classList.add(unjudged(ev) ? "unjudged" : ev.passed ? "passed" : "failed");
  node.dataset.attempt = ev.attempt;
  node.querySelector(".v-title").textContent =
    `${t("attempt.short", { n: ev.attempt, max: ev.max_attempts })} · ${verdictLabel(ev)}`;
  node.querySelector(".v-score").textContent = scoreText(ev);
  const notes = unjudged(ev) ? [t("verdict.unjudged_note")] : [];
  const feedback = node.querySelector(".v-feedback");
  feedback.textContent = [ev.feedback, ...(ev.suggestions || [])].filter(Boolean).join("\n");
  if (notes.length) {
    const note = document.createElement("p");
    note.className = "muted small";
    note.textContent = notes[0];
    feedback.before(note);
  }
  renderChecks(node.querySelector(".v-checks"), ev.checks);
  $("verdicts").append(node);
}

async function imageUrl(url) {
  if (!state.key) return url;
  const res = await fetch(url, { headers: headers() });
  return res.ok ? URL.createObjectURL(await res.blob()) : url;
}

// An image card: the picture (click to enlarge), its slot, download and enlarge.
async function addImage(ev, into = $("gallery")) {
  if (into.querySelector(`[data-asset="${ev.asset_id}"]`)) return;
  const fig = document.createElement("figure");
  fig.dataset.asset = ev.asset_id;
  const img = document.createElement("img");
  img.alt = ev.alt || t("image.alt", { n: ev.slot });
  img.title = ev.alt || "";
  img.loading = "lazy";
  const cap = document.createElement("figcaption");
  const slot = document.createElement("span");
  slot.textContent = `#${ev.slot}`;
  const download = document.createElement("a");
  download.className = "download";
  download.textContent = t("card.download");
  download.download = `card-${ev.slot}.png`;
  const enlarge = document.createElement("button");
  enlarge.type = "button";
  enlarge.className = "link enlarge";
  enlarge.textContent = t("card.enlarge");
  const open = () => { $("lightbox-img").src = img.src; $("lightbox-img").alt = img.alt; $("lightbox").showModal(); };
  enlarge.addEventListener("click", open);
  img.addEventListener("click", open);
  cap.append(slot, download, enlarge);
  if (into !== $("gallery") && ev.slot != null) {
    // A card of the finished post: draw this one again (the others stay as they are).
    const redraw = document.createElement("button");
    redraw.type = "button";
    redraw.className = "link redraw";
    redraw.dataset.slot = ev.slot;
    redraw.textContent = t("card.redraw");
    redraw.addEventListener("click", () => redrawCard(ev.slot).catch((err) => showError(err.message)));
    cap.append(redraw);
  }
  fig.append(img, cap);
  // Cards are drawn concurrently and arrive in any order: keep them in slot order.
  fig.dataset.slot = ev.slot ?? "";
  const later = ev.slot == null ? null
    : [...into.children].find((other) => other.dataset.slot !== "" && Number(other.dataset.slot) > ev.slot);
  into.insertBefore(fig, later ?? null);
  const src = await imageUrl(ev.url);
  img.src = src;
  download.href = src;
}

function renderResult(result) {
  state.result = result;
  $("result").hidden = false;
  $("editor").hidden = true;
  const outcomeKey = result.outcome === "completed" && unjudged(result.quality || {}) ? "outcome.completed_unjudged"
    : result.outcome === "exhausted" && result.revision ? "outcome.revised" : `outcome.${result.outcome}`;
  $("outcome").textContent = t(outcomeKey) === outcomeKey ? result.outcome : t(outcomeKey);
  $("outcome").title = result.message || "";
  const post = $("post");
  post.replaceChildren();
  post.hidden = false;
  const p = result.post || {};
  if (p.title) { const h = document.createElement("h1"); h.dataset.user = ""; h.textContent = p.title; post.append(h); }
  for (const block of p.blocks || []) post.append(renderBlock(block));
  if ((p.tags || []).length) {
    const tags = document.createElement("div");
    tags.className = "tags";
    tags.dataset.user = "";
    for (const tag of p.tags) { const s = document.createElement("span"); s.textContent = `#${tag}`; tags.append(s); }
    post.append(tags);
  }
  if ((result.images || []).length) {
    const gallery = document.createElement("div");
    gallery.className = "gallery";
    post.append(gallery);
    for (const image of result.images) addImage(image, gallery);
  }
  renderActions(result);
  renderQuality(result.quality || {}, result.attempts || []);
  renderUsage(result.usage);
  renderFeedback(state.runId);  // feedback.js
}

// LLM calls, tokens and time by role (result.usage): tokens a server did not report
// are "unknown", never a guess; a sum over only some of a role's calls says so.
function renderUsage(usage) {
  const box = $("usage");
  box.replaceChildren();
  box.hidden = !usage;
  if (!usage) return;
  const head = document.createElement("strong");
  head.textContent = t("usage.title");
  box.append(head);
  const roles = Object.entries(usage.roles || {});
  if (!roles.length) {
    const none = document.createElement("div");
    none.className = "muted small";
    none.textContent = t("usage.none");
    box.append(none);
    return;
  }
  const table = document.createElement("table");
  const row = (cells, tag = "td") => {
    const tr = document.createElement("tr");
    for (const text of cells) { const c = document.createElement(tag); c.textContent = text; tr.append(c); }
    return tr;
  };
  const tokens = (u, key) => (u[key] == null ? t("usage.unknown") : String(u[key]));
  const seconds = (u) => Number(u.seconds || 0).toFixed(1);
  // Cost (LLM_PRICES): unknown when a call's tokens or its model's price are unknown.
  const cost = (u) => (u.cost == null ? t("usage.unknown") : `${Number(u.cost.total).toFixed(4)} ${u.cost.currency}`);
  table.append(row([t("usage.role"), t("usage.calls"), t("usage.prompt"), t("usage.completion"), t("usage.seconds"), t("usage.cost")], "th"));
  for (const [role, u] of roles) {
    const tr = row([named("agent", role), String(u.calls), tokens(u, "prompt_tokens"), tokens(u, "completion_tokens"), seconds(u), cost(u)]);
    tr.dataset.role = role;
    table.append(tr);
  }
  const total = usage.total || {};
  const totalRow = row([t("usage.total"), String(total.calls ?? 0), tokens(total, "prompt_tokens"), tokens(total, "completion_tokens"), seconds(total), cost(total)]);
  totalRow.className = "total";
  table.append(totalRow);
  box.append(table);
  const unmetered = (total.calls || 0) - (total.metered || 0);
  if (unmetered > 0 && total.metered > 0) {
    const note = document.createElement("div");
    note.className = "muted small";
    note.textContent = t("usage.partial", { n: unmetered });
    box.append(note);
  }
}

// A post block of the result payload: {type: heading | text | list_item, text}.
function renderBlock(block) {
  const text = typeof block === "string" ? block : (block.text ?? block.content ?? "");
  const type = typeof block === "string" ? "text" : block.type;
  const el = document.createElement(type === "heading" ? "h4" : "p");
  el.dataset.user = "";
  if (type === "list_item") el.className = "list-item";
  el.append(...inline(text));
  return el;
}

// The post as plain text (blocks back to lines), as the editor and export show it.
function postBody(post) {
  return (post.blocks || []).map((b) => (b.type === "heading" ? `## ${b.text}` : b.type === "list_item" ? `- ${b.text}` : b.text)).join("\n");
}

// The post ready to paste into 小红书: title, body (no Markdown marks), tags.
function postText(post) {
  const body = (post.blocks || []).map((b) => (b.type === "list_item" ? `• ${b.text}` : b.text)).join("\n");
  const tags = (post.tags || []).map((tag) => `#${tag}`).join(" ");
  return [post.title || "", body, tags].filter(Boolean).join("\n\n");
}

// The server's ActionPanel (by action id, in the chosen language), then export and edit.
function renderActions(result) {
  const box = $("actions");
  box.replaceChildren();
  const panel = (result.ui || []).find((c) => c.component === "ActionPanel");
  const ids = (panel ? panel.props.actions : []).map((a) => a.id);
  const hasPost = Boolean((result.post || {}).title || ((result.post || {}).blocks || []).length);
  if (hasPost) ids.push("export", "edit");
  for (const id of ids) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.action = id;
    b.textContent = named("action", id);
    b.addEventListener("click", () => runAction(id, b).catch((err) => showError(err.message)));
    box.append(b);
  }
  const note = document.createElement("span");
  note.id = "action-note";
  note.className = "muted small";
  box.append(note);
}

async function runAction(id, button) {
  const result = state.result || {};
  switch (id) {
    case "copy":
      await navigator.clipboard.writeText(postText(result.post || {}));
      $("action-note").textContent = t("action.copied");
      break;
    case "regenerate":
    case "retry":
      if (state.input) await startRun(state.input);
      break;
    case "accept":
      $("action-note").textContent = t("action.accepted");
      button.disabled = true;
      break;
    case "edit_request":
      $("request").focus();
      $("request").scrollIntoView({ block: "center" });
      break;
    case "export": await exportPost(); break;
    case "edit": openEditor(result.post || {}); break;
    default: break;
  }
}

async function exportPost() {
  const res = await fetch(`/threads/${state.threadId}/export.zip`, { headers: headers() });
  if (!res.ok) throw new Error(await errorMessage(res));
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = `atelier-${state.threadId.slice(0, 8)}.zip`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function openEditor(post) {
  $("edit-title").value = post.title || "";
  $("edit-body").value = postBody(post);
  $("edit-tags").value = (post.tags || []).join(" ");
  $("editor").hidden = false;
  $("post").hidden = true;
  $("edit-title").focus();
}

// The edit becomes the team's draft (as the executor would have written it), and a
// run with no input continues from there: the critic checks it, finalize publishes.
async function saveEdit() {
  const content = {
    title: $("edit-title").value.trim(),
    body: $("edit-body").value.trim(),
    tags: $("edit-tags").value.split(/[\s,，#]+/).filter(Boolean),
  };
  await api("POST", `/threads/${state.threadId}/state`, { values: { generated_content: content }, as_node: "executor" });
  const threadId = state.threadId;
  const input = state.input;
  resetView();
  state.threadId = threadId;
  state.input = input;
  state.runId = null;
  await openStream("POST", `/threads/${threadId}/runs/stream`, runBody({ input: null }));
}

// One card again: a run whose command jumps to the redraw_card node with the slot in
// the state update; the critic checks the post with its new card, finalize publishes.
async function redrawCard(slot) {
  const threadId = state.threadId;
  const input = state.input;
  resetView();
  state.threadId = threadId;
  state.input = input;
  state.runId = null;
  const command = { goto: "redraw_card", update: { redraw: { slot } } };
  await openStream("POST", `/threads/${threadId}/runs/stream`, runBody({ command }));
}

function renderQuality(q, history) {
  const box = $("quality");
  box.replaceChildren();
  const head = document.createElement("strong");
  const score = unjudged(q) ? "" : ` ${Number(q.score).toFixed(2)}`;
  head.textContent = `${t("quality.head", { v: verdictLabel(q) })}${score}` +
    `${q.exhausted ? t("quality.exhausted") : ""} · ${t("quality.attempts", { n: q.attempts ?? "-" })}`;
  box.append(head);
  if (unjudged(q)) {
    const note = document.createElement("div");
    note.className = "muted small";
    note.textContent = t("verdict.unjudged_note");
    box.append(note);
  }
  const dims = document.createElement("div");
  dims.className = "dims";
  for (const [name, value] of Object.entries(q.dimensions || {})) {
    const d = document.createElement("div");
    d.dataset.dimension = name;
    d.textContent = `${named("dim", name)}: ${Number(value).toFixed(2)}`;
    dims.append(d);
  }
  box.append(dims);
  const failed = (q.checks || []).filter((c) => !c.passed);
  if (failed.length) {
    const list = document.createElement("ul");
    list.className = "v-checks";
    renderChecks(list, failed);
    box.append(list);
  }
  if (history.length > 1) {
    const h = document.createElement("div");
    h.className = "muted small";
    h.textContent = t("quality.history");
    const list = document.createElement("ol");
    list.className = "attempts";
    for (const a of history) {
      const li = document.createElement("li");
      const seenUnjudged = state.unjudged.has(a.attempt);
      li.textContent = `${t("attempt.short", { n: a.attempt, max: history.length })} · ` +
        (seenUnjudged ? `${t("verdict.not_judged")} · ${t("verdict.no_score")}` : `${verdictLabel(a)} · ${scoreText(a)}`);
      list.append(li);
    }
    box.append(h, list);
  }
}

function showInterrupt(interrupt) {
  state.pending = interrupt;
  const value = interrupt.value || interrupt;
  $("clarify").hidden = false;
  $("clarify-question").textContent = value.question || t("clarify.fallback");
  const options = $("clarify-options");
  options.replaceChildren();
  for (const option of value.options || [{ id: "defaults" }, { id: "details" }]) {
    const b = document.createElement("button");
    b.type = "button";
    // Known options get the console's words; others keep the server's label.
    b.textContent = `clarify.${option.id}` in I18N[lang] ? t(`clarify.${option.id}`) : (option.label || option.id);
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

let historyRuns = [];

async function loadHistory() {
  if (!state.threadId) return;
  try {
    historyRuns = await api("GET", `/threads/${state.threadId}/runs`);
  } catch {
    return;  // history is a convenience; the live view already shows the run
  }
  renderHistory();
}

function renderHistory() {
  const runs = historyRuns;
  {
    const list = $("history-list");
    list.replaceChildren();
    for (const run of runs) {
      const li = document.createElement("li");
      li.dataset.status = run.status;
      const label = document.createElement("span");
      label.textContent = `${formatTime(run.created_at)} · ${t(`status.${run.status}`)}`;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "link";
      open.textContent = t("history.replay");
      open.addEventListener("click", () => replay(run.run_id));
      li.append(label, open);
      list.append(li);
    }
    $("history").hidden = runs.length === 0;
  }
}

async function replay(runId, threadId = state.threadId) {
  resetView();
  sessionStorage.removeItem(storageKey(runId));
  state.threadId = threadId;
  state.runId = runId;
  setRun(threadId, runId);
  await openStream("GET", `/threads/${threadId}/runs/${runId}/stream`, undefined, 0);
}

// ---------------------------------------------------------------- library

let libraryThreads = [];

async function loadLibrary() {
  try {
    libraryThreads = await api("POST", "/threads/search", { limit: 100, sort_by: "updated_at", sort_order: "desc" });
  } catch {
    return;  // the library is a convenience; the run view works without it
  }
  renderLibrary();
}

function renderLibrary() {
  const query = $("library-search").value.trim().toLowerCase();
  const list = $("library-list");
  list.replaceChildren();
  let shown = 0;
  for (const thread of libraryThreads) {
    const values = thread.values || {};
    const result = values.result || {};
    const title = (result.post || {}).title || "";
    const request = values.request || "";
    if (!title && !request) continue;  // a thread with no post yet
    if (query && !`${title} ${request}`.toLowerCase().includes(query)) continue;
    shown += 1;
    const li = document.createElement("li");
    li.dataset.thread = thread.thread_id;
    if (thread.thread_id === state.threadId) li.className = "current";
    const cover = (result.images || [])[0];
    const thumb = document.createElement("img");
    thumb.className = "thumb";
    thumb.alt = "";
    if (cover) imageUrl(cover.url).then((src) => { thumb.src = src; });
    else thumb.hidden = true;
    const text = document.createElement("button");
    text.type = "button";
    text.className = "open";
    const name = document.createElement("span");
    name.className = "title";
    name.dataset.user = "";
    name.textContent = title || request || t("library.untitled");
    const meta = document.createElement("span");
    meta.className = "muted small";
    const outcome = result.outcome ? named("library", result.outcome) : t(`status.${thread.status === "interrupted" ? "waiting" : thread.status === "busy" ? "running" : "idle"}`);
    meta.textContent = `${formatTime(thread.updated_at, true)} · ${outcome}`;
    text.append(name, meta);
    text.addEventListener("click", () => openThread(thread.thread_id).catch((err) => showError(err.message)));
    const del = document.createElement("button");
    del.type = "button";
    del.className = "link delete";
    del.textContent = t("library.delete");
    del.addEventListener("click", () => deleteThread(thread.thread_id).catch((err) => showError(err.message)));
    li.append(thumb, text, del);
    list.append(li);
  }
  $("library-empty").hidden = shown > 0;
}

// Open a post of the library: replay its latest run and show its result.
async function openThread(threadId) {
  const runs = await api("GET", `/threads/${threadId}/runs`);
  if (!runs.length) return;
  const latest = runs.reduce((a, b) => (a.created_at >= b.created_at ? a : b));
  await replay(latest.run_id, threadId);
}

async function deleteThread(threadId) {
  if (!confirm(t("library.confirm"))) return;
  await api("DELETE", `/threads/${threadId}`);
  if (threadId === state.threadId) {
    resetView();
    state.threadId = state.runId = null;
    history.replaceState(null, "", location.pathname);
    setStatus("idle");
    $("history").hidden = true;
    historyRuns = [];
  }
  await loadLibrary();
}

// ---------------------------------------------------------------- wiring

let info = {};

async function loadInfo() {
  try {
    info = await api("GET", "/info");
  } catch {
    return;  // /info is optional for the console to work
  }
  renderInfo();
}

function renderInfo() {
  {
    const models = info.models || {};
    const names = [...new Set(Object.values(models))];
    $("models").textContent = names.length ? t("models", { m: names.join(" / ") }) : "";
    $("models").title = Object.entries(models).map(([role, m]) => `${named("agent", role)}: ${m}`).join("\n");
    const list = $("roles-list");
    list.replaceChildren();
    for (const [role, model] of Object.entries(models)) {
      const dt = document.createElement("dt");
      dt.textContent = named("agent", role);
      dt.title = role;
      const dd = document.createElement("dd");
      dd.dataset.user = "";
      dd.textContent = model;
      list.append(dt, dd);
    }
    $("roles").hidden = names.length === 0;
    if (info.auth && info.auth !== "open") $("key-button").hidden = false;
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
$("editor").addEventListener("submit", (event) => {
  event.preventDefault();
  saveEdit().catch((err) => showError(err.message));
});
$("edit-cancel").addEventListener("click", () => { $("editor").hidden = true; $("post").hidden = false; });
$("cancel").addEventListener("click", cancelRun);
$("library-search").addEventListener("input", renderLibrary);
$("lang").addEventListener("change", () => {
  lang = $("lang").value;
  localStorage.setItem("atelier.lang", lang);
  rerender();
});
window.addEventListener("pagehide", saveFrames);
$("key-button").addEventListener("click", askForKey);

translatePage();
setStatus("idle");
loadInfo();
loadLibrary();
{
  const params = new URLSearchParams(location.search);
  const thread = params.get("thread");
  const run = params.get("run");
  if (thread && run) {
    rejoin(thread, run).then(loadHistory);
  }
}
