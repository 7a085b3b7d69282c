// Atelier console: the campaign page (docs/campaigns.md, docs/console.md).
//
// Loaded after console.js, whose helpers it uses (I18N, t, named, $, api, headers,
// readFrames, errorMessage, lang, translatePage). The page shows at #campaigns (one
// campaign at #campaigns/<id>) in place of the studio. It makes a campaign
// (POST /campaigns: assistant or brand preset, brief, posts, platforms from the
// atelier input schema, a window in a time zone, approval, publisher), lists the
// key's campaigns, and shows one: its calendar by month or week in the campaign's
// time zone, its plan to review before writing (edit an item's topic or slot, drop
// one, add one, plan again, start), the approval queue with each platform's post side
// by side (approve, reject with a reason, edit and recheck on the post's thread,
// redraw one card), and its publications. GET /campaigns/{id}/stream keeps it live.
// Everything is in a block: its names stay out of the other scripts' way.
// console.js dispatches `atelier:rerender` on a language switch.
"use strict";

{
Object.assign(I18N.zh, {
  "nav.campaigns": "营销日历", "campaigns.back": "返回创作",
  "campaigns.title": "营销活动：一份简报，一整个月的帖子",
  "campaigns.hint": "规划选题、排期到发布窗口、每个平台各写一版；你审核通过后，按时交给发布服务，每篇只发一次。",
  "campaigns.list": "我的活动", "campaigns.empty": "还没有活动。", "campaigns.untitled": "（未命名）",
  "campaigns.new": "新建活动", "campaigns.name": "名称（可选）", "campaigns.assistant": "写作助手",
  "campaigns.builtin": "内置助手（不用品牌）", "campaigns.brief": "简报",
  "campaigns.brief_placeholder": "秋季护肤新品：讲清楚成分、用法和真实体验，面向大学生",
  "campaigns.posts": "帖子数", "campaigns.platforms": "发布平台（每篇帖子都发到这些平台）",
  "campaigns.window": "发布窗口", "campaigns.start_at": "开始", "campaigns.end_at": "结束", "campaigns.timezone": "时区",
  "campaigns.days": "可发布的星期", "campaigns.times": "可发布的时间（可选，例如 09:00-12:00, 20:00）",
  "campaigns.gap": "同一平台两篇至少间隔（分钟）", "campaigns.approval": "审核",
  "approval.required": "每篇由人审核后发布", "approval.auto": "通过检查即自动发布",
  "campaigns.publisher": "发布到", "publisher.none": "不发布（只排期）", "publisher.webhook": "回调网址（签名）",
  "publisher.mcp": "外部发布服务的工具", "campaigns.publisher_url": "网址", "campaigns.tool": "工具名",
  "campaigns.arguments": "工具参数 ← 帖子字段", "campaigns.add_argument": "添加参数", "campaigns.remove": "移除",
  "campaigns.create": "创建并规划", "campaigns.need_brief": "请填写简报。", "campaigns.need_platform": "请至少选择一个平台。",
  "campaigns.need_window": "请填写发布窗口的开始和结束。", "campaigns.created": "已创建，正在规划选题…",
  "field.title": "标题", "field.body": "正文", "field.tags": "标签", "field.image_urls": "图片链接",
  "field.platform": "平台", "field.topic": "选题",
  "platform.zhihu": "知乎", "platform.x": "X", "platform.linkedin": "领英",
  "weekday.1": "周一", "weekday.2": "周二", "weekday.3": "周三", "weekday.4": "周四", "weekday.5": "周五",
  "weekday.6": "周六", "weekday.7": "周日",
  "campaign.window": "窗口：{a} – {b}", "campaign.gap": "同平台间隔 ≥ {n} 分钟", "campaign.posts": "{n} 篇",
  "campaign.approval": "审核：{a}", "campaign.publisher": "发布：{p}", "campaign.no_publisher": "不发布",
  "campaign.start": "开始写作", "campaign.replan": "重新规划", "campaign.delete": "删除活动",
  "campaign.confirm_delete": "删除这个活动和它的发布记录？已写的作品会保留。",
  "campaign.confirm_replan": "重新规划会换掉现在的全部选题，继续吗？",
  "campaign_status.planning": "规划中", "campaign_status.planned": "待确认计划", "campaign_status.running": "进行中",
  "campaign_status.completed": "已完成", "campaign_status.failed": "规划失败",
  "item_status.planned": "已计划", "item_status.writing": "写作中", "item_status.pending_review": "待审核",
  "item_status.approved": "已通过", "item_status.published": "已发布", "item_status.rejected": "已退回",
  "item_status.failed": "失败",
  "pub_status.scheduled": "已排期", "pub_status.sending": "发送中", "pub_status.retrying": "重试中",
  "pub_status.published": "已发布", "pub_status.failed": "失败", "pub_status.unknown": "结果未知",
  "calendar.title": "日历", "calendar.month": "月", "calendar.week": "周", "calendar.prev": "上一页", "calendar.next": "下一页",
  "calendar.zone": "按活动时区显示：",
  "plan.title": "计划", "plan.hint": "写作开始前可以改选题或时间、删掉或加一篇，也可以整体重新规划。",
  "plan.empty": "还没有选题。", "plan.edit": "修改", "plan.drop": "删除", "plan.save": "保存", "plan.cancel": "取消",
  "plan.topic": "选题", "plan.angle": "角度（可选）", "plan.slot": "发布时间（活动时区，可留空）",
  "plan.add": "加一篇", "plan.confirm_drop": "删除这个选题？", "plan.generation": "第 {n} 稿",
  "plan.reason": "退回原因：{r}",
  "queue.title": "待审核", "queue.empty": "没有待审核的帖子。",
  "queue.approve": "通过", "queue.reject": "退回重写", "queue.reason": "退回原因（写作时会读到）",
  "queue.need_reason": "请写退回原因。", "queue.edit": "编辑", "queue.save": "保存并重新检查", "queue.cancel": "取消",
  "queue.redraw": "重画这张", "queue.checking": "正在重新检查…", "queue.no_post": "还没有内容。",
  "queue.image": "图 {n}",
  "pubs.title": "发布记录", "pubs.empty": "还没有发布记录：通过审核的帖子会在排期时间发布。",
  "pubs.platform": "平台", "pubs.topic": "选题", "pubs.slot": "排期", "pubs.status": "状态", "pubs.attempts": "尝试次数",
  "pubs.published_at": "发布时间", "pubs.external_id": "平台编号", "pubs.error": "错误",
  "campaigns.live": "实时更新中", "campaigns.loading": "读取中…",
});
Object.assign(I18N.en, {
  "nav.campaigns": "Campaigns", "campaigns.back": "Back to the studio",
  "campaigns.title": "Campaigns: one brief, a month of posts",
  "campaigns.hint": "Plan topics, give each a slot in the publishing window, write a version for every platform; once you approve, each post goes to the publisher at its slot, once.",
  "campaigns.list": "My campaigns", "campaigns.empty": "No campaigns yet.", "campaigns.untitled": "(untitled)",
  "campaigns.new": "New campaign", "campaigns.name": "Name (optional)", "campaigns.assistant": "Writer",
  "campaigns.builtin": "Built-in assistant (no brand)", "campaigns.brief": "Brief",
  "campaigns.brief_placeholder": "Our autumn skincare line: ingredients, how to use it and honest experience, for students",
  "campaigns.posts": "Posts", "campaigns.platforms": "Platforms (every post goes to each)",
  "campaigns.window": "Publishing window", "campaigns.start_at": "Start", "campaigns.end_at": "End", "campaigns.timezone": "Time zone",
  "campaigns.days": "Weekdays posts may go out", "campaigns.times": "Times (optional, e.g. 09:00-12:00, 20:00)",
  "campaigns.gap": "Minutes between two posts on one platform, at least", "campaigns.approval": "Approval",
  "approval.required": "A person approves each post", "approval.auto": "Posts that pass their checks go out by themselves",
  "campaigns.publisher": "Publish to", "publisher.none": "Nowhere (schedule only)", "publisher.webhook": "Webhook (signed)",
  "publisher.mcp": "Tool of an MCP server", "campaigns.publisher_url": "URL", "campaigns.tool": "Tool",
  "campaigns.arguments": "Tool argument ← post field", "campaigns.add_argument": "Add argument", "campaigns.remove": "Remove",
  "campaigns.create": "Create and plan", "campaigns.need_brief": "Write a brief.", "campaigns.need_platform": "Pick at least one platform.",
  "campaigns.need_window": "Give the window's start and end.", "campaigns.created": "Created; planning the topics…",
  "field.title": "Title", "field.body": "Body", "field.tags": "Tags", "field.image_urls": "Image URLs",
  "field.platform": "Platform", "field.topic": "Topic",
  "platform.zhihu": "Zhihu", "platform.x": "X", "platform.linkedin": "LinkedIn",
  "weekday.1": "Mon", "weekday.2": "Tue", "weekday.3": "Wed", "weekday.4": "Thu", "weekday.5": "Fri",
  "weekday.6": "Sat", "weekday.7": "Sun",
  "campaign.window": "Window: {a} – {b}", "campaign.gap": "gap on a platform ≥ {n} min", "campaign.posts": "{n} posts",
  "campaign.approval": "Approval: {a}", "campaign.publisher": "Publisher: {p}", "campaign.no_publisher": "none",
  "campaign.start": "Start writing", "campaign.replan": "Plan again", "campaign.delete": "Delete campaign",
  "campaign.confirm_delete": "Delete this campaign and its publications? Its posts stay.",
  "campaign.confirm_replan": "A new plan replaces every topic now in it. Go on?",
  "campaign_status.planning": "Planning", "campaign_status.planned": "Plan to review", "campaign_status.running": "Running",
  "campaign_status.completed": "Completed", "campaign_status.failed": "Planning failed",
  "item_status.planned": "Planned", "item_status.writing": "Writing", "item_status.pending_review": "To review",
  "item_status.approved": "Approved", "item_status.published": "Published", "item_status.rejected": "Sent back",
  "item_status.failed": "Failed",
  "pub_status.scheduled": "Scheduled", "pub_status.sending": "Sending", "pub_status.retrying": "Retrying",
  "pub_status.published": "Published", "pub_status.failed": "Failed", "pub_status.unknown": "Outcome unknown",
  "calendar.title": "Calendar", "calendar.month": "Month", "calendar.week": "Week", "calendar.prev": "Previous", "calendar.next": "Next",
  "calendar.zone": "In the campaign's time zone: ",
  "plan.title": "Plan", "plan.hint": "Before writing starts, change a topic or slot, drop a post or add one, or ask for a new plan.",
  "plan.empty": "No topics yet.", "plan.edit": "Edit", "plan.drop": "Drop", "plan.save": "Save", "plan.cancel": "Cancel",
  "plan.topic": "Topic", "plan.angle": "Angle (optional)", "plan.slot": "Slot (campaign's time zone, optional)",
  "plan.add": "Add a post", "plan.confirm_drop": "Drop this topic?", "plan.generation": "draft {n}",
  "plan.reason": "Sent back: {r}",
  "queue.title": "To review", "queue.empty": "Nothing waits for review.",
  "queue.approve": "Approve", "queue.reject": "Send back", "queue.reason": "Why (the writer reads it)",
  "queue.need_reason": "Say why it goes back.", "queue.edit": "Edit", "queue.save": "Save and check again", "queue.cancel": "Cancel",
  "queue.redraw": "Redraw", "queue.checking": "Checking again…", "queue.no_post": "Nothing written yet.",
  "queue.image": "Image {n}",
  "pubs.title": "Publications", "pubs.empty": "No publications yet: approved posts go out at their slots.",
  "pubs.platform": "Platform", "pubs.topic": "Topic", "pubs.slot": "Slot", "pubs.status": "Status", "pubs.attempts": "Attempts",
  "pubs.published_at": "Published", "pubs.external_id": "Platform's id", "pubs.error": "Error",
  "campaigns.live": "Live", "campaigns.loading": "Loading…",
});

const ATELIER = "atelier";
const PLATFORMS = ["xiaohongshu", "weibo", "wechat", "douyin", "zhihu", "x", "linkedin"];
const POST_FIELDS = ["title", "body", "tags", "image_urls", "platform", "topic"];
// xiaohongshu-mcp's publish_content(title, content, images, tags): the mapping offered first.
const PUBLISH_CONTENT = [["title", "title"], ["content", "body"], ["images", "image_urls"], ["tags", "tags"]];
const STATUS_ORDER = ["planned", "writing", "pending_review", "approved", "published", "rejected", "failed"];
// Milliseconds before following a campaign again after its stream broke.
const RETRY_MS = 3000;
// How often, and how far apart, to look whether the campaign took a recheck's post in.
const TAKEN_IN_LOOKS = 20;
const TAKEN_IN_MS = 500;

const cp = {
  platforms: PLATFORMS,
  presets: [],
  list: [],
  id: null,           // the campaign shown
  campaign: null,
  items: [],
  pubs: [],
  view: "month",
  cursor: null,       // a day (UTC midnight of a local date) the calendar shows
  planEdit: {},       // item id → {topic, angle, slot}: the plan item forms open
  postEdit: {},       // thread id → {title, body, tags}: the post editors open
  reasons: {},        // item id → the rejection reason typed so far
  busy: {},           // thread id → true while its recheck or redraw runs
  args: PUBLISH_CONTENT.map(([a, f]) => [a, f]),
  controller: null,   // the campaign stream's
  shown: {},          // section → what it was last drawn from
  loaded: false,
};

// ---------------------------------------------------------------- DOM

// An element: attrs are attributes, plus text, i18n (a label key), user (data-user), on.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name === "i18n") { node.dataset.i18n = value; node.textContent = t(value); }
    else if (name === "placeholder18n") { node.dataset.i18nPlaceholder = value; node.placeholder = t(value); }
    else if (name === "user") node.dataset.user = "";
    else if (name === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
    else if (name === "hidden") node.hidden = true;
    else if (name === "value") node.value = value;
    else if (name === "checked") node.checked = true;
    else node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.flat().filter((c) => c != null && c !== false));
  return node;
}

function label(key, control) {
  return el("label", {}, el("span", { i18n: key }), control);
}

function platformName(id) { return named("platform", id); }

function showError(message) {
  const box = $("cp-error");
  box.textContent = message || "";
  box.hidden = !message;
}

function guard(fn) {
  return (...args) => {
    showError("");
    Promise.resolve(fn(...args)).catch((err) => showError(err.message));
  };
}

function build() {
  const page = $("campaigns");
  const weekdays = [1, 2, 3, 4, 5, 6, 7].map((d) =>
    el("label", { class: "check" }, el("input", { type: "checkbox", value: String(d), checked: true }),
      el("span", { i18n: `weekday.${d}` })));
  page.append(
    el("div", { class: "cp-head-bar" },
      el("h2", { i18n: "campaigns.title" }),
      el("a", { href: "#", class: "small", i18n: "campaigns.back" })),
    el("p", { class: "muted small", i18n: "campaigns.hint" }),
    el("div", { class: "cp-grid" },
      el("section", { class: "panel", id: "cp-side" },
        el("h3", { i18n: "campaigns.list" }),
        el("ul", { id: "cp-list", class: "cp-list" }),
        el("p", { id: "cp-list-empty", class: "muted small", i18n: "campaigns.empty", hidden: true }),
        el("details", { id: "cp-new", class: "cp-new" },
          el("summary", { i18n: "campaigns.new" }),
          el("form", { id: "cp-form", autocomplete: "off" },
            label("campaigns.brief", el("textarea", { id: "cp-brief", rows: "3", maxlength: "4000", placeholder18n: "campaigns.brief_placeholder" })),
            label("campaigns.assistant", el("select", { id: "cp-assistant" })),
            el("div", { class: "row" },
              label("campaigns.name", el("input", { id: "cp-name", maxlength: "200" })),
              el("label", { class: "narrow" }, el("span", { i18n: "campaigns.posts" }),
                el("input", { id: "cp-posts", type: "number", min: "1", max: "60", value: "6" }))),
            el("fieldset", { id: "cp-platforms", class: "cp-checks" }, el("legend", { i18n: "campaigns.platforms" })),
            el("fieldset", { class: "cp-window" },
              el("legend", { i18n: "campaigns.window" }),
              el("div", { class: "row" },
                label("campaigns.start_at", el("input", { id: "cp-start", type: "datetime-local" })),
                label("campaigns.end_at", el("input", { id: "cp-end", type: "datetime-local" }))),
              el("div", { class: "row" },
                label("campaigns.timezone", el("input", { id: "cp-timezone", maxlength: "64", spellcheck: "false" })),
                label("campaigns.gap", el("input", { id: "cp-gap", type: "number", min: "0", max: "10080", value: "240" }))),
              el("div", { id: "cp-days", class: "cp-checks" }, el("span", { class: "small muted", i18n: "campaigns.days" }), ...weekdays),
              label("campaigns.times", el("input", { id: "cp-times", maxlength: "600", spellcheck: "false" }))),
            label("campaigns.approval", el("select", { id: "cp-approval" },
              el("option", { value: "required", i18n: "approval.required" }),
              el("option", { value: "auto", i18n: "approval.auto" }))),
            label("campaigns.publisher", el("select", { id: "cp-publisher", on: { change: renderPublisherFields } },
              el("option", { value: "", i18n: "publisher.none" }),
              el("option", { value: "webhook", i18n: "publisher.webhook" }),
              el("option", { value: "mcp", i18n: "publisher.mcp" }))),
            el("div", { id: "cp-publisher-fields", hidden: true },
              label("campaigns.publisher_url", el("input", { id: "cp-publisher-url", type: "url", maxlength: "2048", spellcheck: "false" })),
              el("div", { id: "cp-mcp-fields" },
                label("campaigns.tool", el("input", { id: "cp-tool", maxlength: "128", spellcheck: "false", value: "publish_content" })),
                el("span", { class: "small muted", i18n: "campaigns.arguments" }),
                el("div", { id: "cp-args" }),
                el("button", { id: "cp-add-arg", type: "button", class: "link small", i18n: "campaigns.add_argument",
                  on: { click: () => { syncArgs(); cp.args.push(["", "title"]); renderArgs(); } } }))),
            el("div", { class: "row" },
              el("button", { id: "cp-create", type: "submit", class: "primary", i18n: "campaigns.create" })),
            el("p", { id: "cp-form-error", class: "error", role: "alert", user: true, hidden: true })))),
      el("section", { class: "panel", id: "cp-detail" },
        el("p", { id: "cp-error", class: "error", role: "alert", user: true, hidden: true }),
        el("p", { id: "cp-none", class: "muted", i18n: "campaigns.empty", hidden: true }),
        el("div", { id: "cp-view", hidden: true },
          el("div", { id: "cp-head", class: "cp-head" }),
          el("div", { id: "cp-actions", class: "row" },
            el("button", { id: "cp-start-writing", type: "button", class: "primary", i18n: "campaign.start", on: { click: guard(startWriting) } }),
            el("button", { id: "cp-replan", type: "button", i18n: "campaign.replan", on: { click: guard(planAgain) } }),
            el("button", { id: "cp-delete", type: "button", class: "danger", i18n: "campaign.delete", on: { click: guard(deleteCampaign) } }),
            el("span", { id: "cp-live", class: "muted small", i18n: "campaigns.live", hidden: true })),
          el("section", { id: "cp-calendar", class: "cp-calendar" },
            el("div", { class: "cp-cal-bar" },
              el("h3", { i18n: "calendar.title" }),
              el("div", { class: "cp-cal-nav" },
                el("button", { id: "cp-view-month", type: "button", class: "small", i18n: "calendar.month", on: { click: () => setView("month") } }),
                el("button", { id: "cp-view-week", type: "button", class: "small", i18n: "calendar.week", on: { click: () => setView("week") } }),
                el("button", { id: "cp-cal-prev", type: "button", class: "small", "data-i18n-title": "calendar.prev", title: t("calendar.prev"), text: "‹", on: { click: () => move(-1) } }),
                el("strong", { id: "cp-cal-label" }),
                el("button", { id: "cp-cal-next", type: "button", class: "small", "data-i18n-title": "calendar.next", title: t("calendar.next"), text: "›", on: { click: () => move(1) } }))),
            el("p", { class: "muted small" }, el("span", { i18n: "calendar.zone" }), el("code", { id: "cp-cal-zone", user: true })),
            el("div", { id: "cp-cal-grid", class: "cp-cal-grid" }),
            el("ul", { id: "cp-legend", class: "cp-legend" })),
          el("section", { id: "cp-plan" },
            el("h3", { i18n: "plan.title" }),
            el("p", { class: "muted small", i18n: "plan.hint" }),
            el("ol", { id: "cp-items", class: "cp-items" }),
            el("p", { id: "cp-items-empty", class: "muted small", i18n: "plan.empty", hidden: true }),
            el("form", { id: "cp-add-form", class: "row cp-add", autocomplete: "off" },
              label("plan.topic", el("input", { id: "cp-add-topic", maxlength: "120" })),
              label("plan.angle", el("input", { id: "cp-add-angle", maxlength: "200" })),
              label("plan.slot", el("input", { id: "cp-add-slot", type: "datetime-local" })),
              el("button", { id: "cp-add", type: "submit", i18n: "plan.add" }))),
          el("section", { id: "cp-queue" },
            el("h3", { i18n: "queue.title" }),
            el("div", { id: "cp-reviews" }),
            el("p", { id: "cp-queue-empty", class: "muted small", i18n: "queue.empty", hidden: true })),
          el("section", { id: "cp-pubs", class: "cp-pubs" },
            el("h3", { i18n: "pubs.title" }),
            el("div", { class: "cp-table" }, el("table", { id: "cp-pubs-table" })),
            el("p", { id: "cp-pubs-empty", class: "muted small", i18n: "pubs.empty", hidden: true })))),
    ),
  );
  for (const el_ of page.querySelectorAll("[data-i18n-title]")) el_.title = t(el_.dataset.i18nTitle);
  $("cp-form").addEventListener("submit", (event) => { event.preventDefault(); createCampaign(); });
  $("cp-add-form").addEventListener("submit", (event) => { event.preventDefault(); guard(addItem)(); });
  $("cp-timezone").value = Intl.DateTimeFormat().resolvedOptions().timeZone || "Asia/Shanghai";
  const start = new Date();
  start.setDate(start.getDate() + 1);
  start.setHours(0, 0, 0, 0);
  const end = new Date(start);
  end.setDate(end.getDate() + 7);
  $("cp-start").value = localValue(start);
  $("cp-end").value = localValue(end);
  renderPlatforms();
  renderArgs();
}

// "YYYY-MM-DDTHH:MM" of a Date in the browser's time zone (a datetime-local value).
function localValue(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

// ---------------------------------------------------------------- time in a zone

function zoneParts(iso, zone) {
  const parts = {};
  const format = new Intl.DateTimeFormat("en-US", {
    timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23",
  });
  for (const p of format.formatToParts(new Date(iso))) parts[p.type] = p.value;
  return parts;
}

// The local day of an instant in a zone, as "YYYY-MM-DD".
function dayOf(iso, zone) {
  const p = zoneParts(iso, zone);
  return `${p.year}-${p.month}-${p.day}`;
}

// A datetime-local value: the instant's local time in the zone.
function zoneValue(iso, zone) {
  const p = zoneParts(iso, zone);
  return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}`;
}

function zoneTime(iso, zone) {
  const p = zoneParts(iso, zone);
  return `${p.hour}:${p.minute}`;
}

function locale() { return lang === "zh" ? "zh-CN" : "en-GB"; }

// Date and time of an instant in the campaign's zone, in the chosen language.
function slotText(iso, zone) {
  if (!iso) return "";
  return new Intl.DateTimeFormat(locale(), {
    timeZone: zone, month: "2-digit", day: "2-digit", weekday: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23",
  }).format(new Date(iso));
}

// A time of the window as the campaign gave it: without an offset it is already local
// in the zone (so it is shown as it reads), with one it is an instant.
function given(text, zone) {
  return /(?:[zZ]|[+-]\d\d:?\d\d)$/.test(text) ? [text, zone] : [`${text}Z`, "UTC"];
}

function campaignZone() { return (cp.campaign && cp.campaign.window && cp.campaign.window.timezone) || "UTC"; }

// A calendar day: UTC midnight of "YYYY-MM-DD" (date arithmetic free of time zones).
function dayDate(key) { return new Date(`${key}T00:00:00Z`); }
function dayKey(date) { return date.toISOString().slice(0, 10); }
function addDays(date, n) { return new Date(date.getTime() + n * 86_400_000); }
function monday(date) { return addDays(date, -((date.getUTCDay() + 6) % 7)); }

// ---------------------------------------------------------------- the form

function renderPlatforms() {
  const box = $("cp-platforms");
  const checked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  if (!box.querySelector("input")) checked.add("xiaohongshu");
  box.replaceChildren(el("legend", { i18n: "campaigns.platforms" }), ...cp.platforms.map((id) =>
    el("label", { class: "check" },
      el("input", { type: "checkbox", value: id, checked: checked.has(id) }),
      el("span", { i18n: `platform.${id}` }))));
}

function renderPublisherFields() {
  const type = $("cp-publisher").value;
  $("cp-publisher-fields").hidden = !type;
  $("cp-mcp-fields").hidden = type !== "mcp";
}

// The mapping rows as typed so far, kept before the rows are drawn again.
function syncArgs() {
  cp.args = [...$("cp-args").querySelectorAll(".cp-arg")].map((row) =>
    [row.querySelector("input").value.trim(), row.querySelector("select").value]);
}

function renderArgs() {
  $("cp-args").replaceChildren(...cp.args.map(([arg, field], index) => {
    const select = el("select", { "aria-label": t("campaigns.arguments") },
      ...POST_FIELDS.map((f) => el("option", { value: f, i18n: `field.${f}` })));
    select.value = field;
    return el("div", { class: "cp-arg" },
      el("input", { value: arg, maxlength: "128", spellcheck: "false", "aria-label": t("campaigns.tool") }),
      el("span", { text: "←" }),
      select,
      el("button", { type: "button", class: "link small", i18n: "campaigns.remove",
        on: { click: () => { syncArgs(); cp.args.splice(index, 1); renderArgs(); } } }));
  }));
}

function formError(message) {
  $("cp-form-error").textContent = message || "";
  $("cp-form-error").hidden = !message;
}

async function createCampaign() {
  formError("");
  const brief = $("cp-brief").value.trim();
  const platforms = [...$("cp-platforms").querySelectorAll("input:checked")].map((i) => i.value);
  if (!brief) return formError(t("campaigns.need_brief"));
  if (!platforms.length) return formError(t("campaigns.need_platform"));
  if (!$("cp-start").value || !$("cp-end").value) return formError(t("campaigns.need_window"));
  const days = [...$("cp-days").querySelectorAll("input:checked")].map((i) => Number(i.value));
  const times = $("cp-times").value.split(/[\s,，]+/).filter(Boolean);
  const window_ = {
    start: `${$("cp-start").value}:00`,  // no offset: local time in the time zone below
    end: `${$("cp-end").value}:00`,
    timezone: $("cp-timezone").value.trim(),
    min_gap_minutes: Number($("cp-gap").value || 0),
  };
  if (days.length && days.length < 7) window_.days = days;
  if (times.length) window_.times = times;
  const body = {
    assistant_id: $("cp-assistant").value || ATELIER,
    brief,
    posts: Number($("cp-posts").value),
    platforms,
    window: window_,
    approval: $("cp-approval").value,
    publisher: null,
  };
  const name = $("cp-name").value.trim();
  if (name) body.name = name;
  const type = $("cp-publisher").value;
  if (type === "webhook") body.publisher = { type, url: $("cp-publisher-url").value.trim() };
  if (type === "mcp") {
    syncArgs();
    const args = Object.fromEntries(cp.args.filter(([a]) => a));
    body.publisher = { type, url: $("cp-publisher-url").value.trim(), tool: $("cp-tool").value.trim(), arguments: args };
  }
  $("cp-create").disabled = true;
  try {
    const created = await api("POST", "/campaigns", body);
    $("cp-new").open = false;
    await loadList();
    location.hash = `#campaigns/${created.campaign_id}`;
  } catch (err) {
    formError(err.message);  // the 422 names the field and the rule
  } finally {
    $("cp-create").disabled = false;
  }
}

// ---------------------------------------------------------------- the list

async function loadOptions() {
  try {
    const schemas = await api("GET", `/assistants/${ATELIER}/schemas`);
    const found = (((schemas.input_schema || {}).properties || {}).platform || {}).enum;
    if (Array.isArray(found) && found.length) cp.platforms = found;
  } catch {
    // the built-in list stands in for the server's
  }
  try {
    const found = await api("POST", "/assistants/search", { graph_id: ATELIER, limit: 1000, sort_by: "name", sort_order: "asc" });
    cp.presets = found.filter((a) => a.assistant_id !== ATELIER);
  } catch {
    cp.presets = [];  // a campaign can always be written by the built-in assistant
  }
  renderPlatforms();
  renderAssistants();
}

function renderAssistants() {
  const picker = $("cp-assistant");
  const chosen = picker.value;
  picker.replaceChildren(el("option", { value: ATELIER, i18n: "campaigns.builtin" }), ...cp.presets.map((p) =>
    el("option", { value: p.assistant_id, user: true, text: (p.context || {}).brand_name || p.name || p.assistant_id })));
  picker.value = [ATELIER, ...cp.presets.map((p) => p.assistant_id)].includes(chosen) ? chosen : ATELIER;
}

async function loadList() {
  cp.list = await api("POST", "/campaigns/search", { limit: 100 });
  renderList();
  $("cp-new").open ||= cp.list.length === 0;
}

function campaignTitle(c) { return c.name || c.brief || t("campaigns.untitled"); }

function renderList() {
  $("cp-list").replaceChildren(...cp.list.map((c) =>
    el("li", { "data-campaign": c.campaign_id, "data-status": c.status, class: c.campaign_id === cp.id ? "current" : null },
      el("a", { href: `#campaigns/${c.campaign_id}`, class: "title", user: true, text: campaignTitle(c) }),
      el("span", { class: "badge", "data-status": c.status, text: t(`campaign_status.${c.status}`) }),
      el("span", { class: "muted small", text: `${t("campaign.posts", { n: c.posts })} · ${c.platforms.map(platformName).join(" / ")}` }))));
  $("cp-list-empty").hidden = cp.list.length > 0;
}

// ---------------------------------------------------------------- one campaign

async function open(id) {
  const changed = cp.id !== id;
  if (changed) {
    cp.controller?.abort();
    cp.controller = null;
    Object.assign(cp, { id, campaign: null, items: [], pubs: [], cursor: null, planEdit: {}, postEdit: {}, reasons: {}, busy: {}, shown: {} });
  }
  $("cp-view").hidden = !id;
  $("cp-none").hidden = Boolean(id) || cp.list.length > 0;
  renderList();
  if (!id) return;
  await refresh();
  if (changed || !cp.controller) follow(id);
}

async function refresh() {
  const id = cp.id;
  const [campaign, items, pubs] = await Promise.all([
    api("GET", `/campaigns/${id}`), api("GET", `/campaigns/${id}/items`), api("GET", `/campaigns/${id}/publications`),
  ]);
  if (id !== cp.id) return;
  Object.assign(cp, { campaign, items, pubs });
  render();
}

// Follow the campaign's stream: each frame replaces its campaign, item or publication.
async function follow(id) {
  const controller = new AbortController();
  cp.controller = controller;
  let res;
  try {
    res = await fetch(`/campaigns/${id}/stream`, { headers: headers({ Accept: "text/event-stream" }), signal: controller.signal });
    if (!res.ok) throw new Error(await errorMessage(res));
    $("cp-live").hidden = false;
    for await (const frame of readFrames(res)) {
      if (controller.signal.aborted) return;
      if (frame.event === "end") break;
      onFrame(frame);
    }
  } catch (err) {
    if (controller.signal.aborted) return;
    showError(err.message);
    setTimeout(() => { if (cp.id === id && cp.controller === controller) follow(id); }, RETRY_MS);
    return;
  } finally {
    if (cp.controller === controller) $("cp-live").hidden = true;
  }
  if (cp.controller === controller) cp.controller = null;  // ended: a later open follows again
}

let drawTimer = null;

function onFrame(frame) {
  const data = frame.data || {};
  if (frame.event === "campaign" && data.campaign_id === cp.id) {
    const before = cp.campaign && cp.campaign.status;
    cp.campaign = data;
    if (before !== data.status) loadList().catch(() => {});
  } else if (frame.event === "item") {
    cp.items = upsert(cp.items, data, "item_id");
  } else if (frame.event === "publication") {
    cp.pubs = upsert(cp.pubs, data, "publication_id");
  } else {
    return;
  }
  drawTimer ??= setTimeout(() => { drawTimer = null; render(); }, 50);
}

function upsert(list, value, key) {
  const out = list.filter((x) => x[key] !== value[key]);
  out.push(value);
  return out.sort((a, b) => (a.slot < b.slot ? -1 : a.slot > b.slot ? 1 : 0));
}

// Draw each section whose data changed (a form being typed in keeps its focus otherwise).
function render() {
  if (!cp.campaign) return;
  const sections = {
    head: [renderHead, [cp.campaign]],
    calendar: [renderCalendar, [cp.items, cp.view, cp.cursor, cp.campaign.window]],
    plan: [renderPlan, [cp.items, cp.campaign.status, Object.keys(cp.planEdit)]],
    queue: [renderQueue, [cp.items.filter((i) => i.status === "pending_review"), Object.keys(cp.postEdit), Object.keys(cp.busy)]],
    pubs: [renderPubs, [cp.pubs, cp.items.map((i) => [i.item_id, i.topic])]],
  };
  for (const [name, [draw, data]] of Object.entries(sections)) {
    const key = JSON.stringify([lang, data]);
    if (cp.shown[name] === key) continue;
    cp.shown[name] = key;
    draw();
  }
}

function redraw() {
  cp.shown = {};
  render();
}

function renderHead() {
  const c = cp.campaign;
  if (cp.list.some((x) => x.campaign_id === c.campaign_id && x.status !== c.status)) {
    cp.list = cp.list.map((x) => (x.campaign_id === c.campaign_id ? c : x));  // its status in the list too
    renderList();
  }
  const zone = campaignZone();
  const publisher = t("campaign.publisher", { p: c.publisher ? t(`publisher.${c.publisher.type}`) : t("campaign.no_publisher") });
  const where = c.publisher ? [c.publisher.tool, c.publisher.url].filter(Boolean).join(" @ ") : "";
  const counts = STATUS_ORDER.filter((s) => (c.items || {})[s]).map((s) => `${t(`item_status.${s}`)} ${c.items[s]}`).join(" · ");
  $("cp-head").replaceChildren(...[
    el("div", { class: "cp-title" },
      el("h2", { user: true, text: campaignTitle(c) }),
      el("span", { id: "cp-status", class: "badge", "data-status": c.status, text: t(`campaign_status.${c.status}`) })),
    c.name ? el("p", { class: "cp-brief", user: true, text: c.brief }) : null,
    el("p", { class: "muted small" },
      `${t("campaign.posts", { n: c.posts })} · ${c.platforms.map(platformName).join(" / ")} · `,
      t("campaign.window", { a: slotText(...given(c.window.start, zone)), b: slotText(...given(c.window.end, zone)) }), " ",
      el("code", { user: true, text: zone }),
      ` · ${t("campaign.gap", { n: c.window.min_gap_minutes || 0 })}`),
    el("p", { class: "muted small" },
      `${t("campaign.approval", { a: t(`approval.${c.approval}`) })} · ${publisher} `,
      where ? el("code", { user: true, text: where }) : null),
    counts ? el("p", { class: "small", id: "cp-counts", text: counts }) : null,
    c.message ? el("p", { class: c.status === "failed" ? "error small" : "muted small", user: true, text: c.message }) : null,
  ].filter(Boolean));
  $("cp-start-writing").hidden = c.status !== "planned";
  $("cp-replan").hidden = !["planned", "failed"].includes(c.status);
  $("cp-add-form").hidden = !["planned", "running"].includes(c.status);
}

// ---------------------------------------------------------------- the calendar

// Week view opens on the week of the month's first post; month view on the week's month.
function setView(view) {
  if (view === cp.view || !cp.cursor) { cp.view = view; render(); return; }
  cp.view = view;
  if (view === "week") {
    const zone = campaignZone();
    const month = [cp.cursor.getUTCFullYear(), cp.cursor.getUTCMonth()];
    const first = cp.items.map((i) => dayDate(dayOf(i.slot, zone)))
      .find((d) => d.getUTCFullYear() === month[0] && d.getUTCMonth() === month[1]);
    cp.cursor = monday(first || cp.cursor);
  } else {
    cp.cursor = addDays(cp.cursor, 3);
  }
  render();
}

function move(step) {
  const c = cp.cursor;
  if (cp.view === "week") cp.cursor = addDays(c, 7 * step);
  else cp.cursor = new Date(Date.UTC(c.getUTCFullYear(), c.getUTCMonth() + step, 1));
  render();
}

function renderCalendar() {
  const zone = campaignZone();
  $("cp-cal-zone").textContent = zone;
  if (!cp.cursor) {
    const first = cp.items[0] ? [cp.items[0].slot, zone] : given(cp.campaign.window.start, zone);
    cp.cursor = dayDate(dayOf(...first));
    if (cp.view === "week") cp.cursor = monday(cp.cursor);
  }
  $("cp-view-month").setAttribute("aria-pressed", String(cp.view === "month"));
  $("cp-view-week").setAttribute("aria-pressed", String(cp.view === "week"));
  const byDay = new Map();
  for (const item of cp.items) {
    const key = dayOf(item.slot, zone);
    if (!byDay.has(key)) byDay.set(key, []);
    byDay.get(key).push(item);
  }
  let days;
  const grid = $("cp-cal-grid");
  grid.className = `cp-cal-grid ${cp.view}`;
  if (cp.view === "month") {
    const first = new Date(Date.UTC(cp.cursor.getUTCFullYear(), cp.cursor.getUTCMonth(), 1));
    const last = new Date(Date.UTC(cp.cursor.getUTCFullYear(), cp.cursor.getUTCMonth() + 1, 0));
    days = [];
    for (let d = monday(first); d <= last || days.length % 7; d = addDays(d, 1)) days.push(d);
    $("cp-cal-label").textContent = new Intl.DateTimeFormat(locale(), { year: "numeric", month: "long", timeZone: "UTC" }).format(first);
  } else {
    const start = monday(cp.cursor);
    days = [0, 1, 2, 3, 4, 5, 6].map((n) => addDays(start, n));
    const short = new Intl.DateTimeFormat(locale(), { month: "short", day: "numeric", timeZone: "UTC" });
    $("cp-cal-label").textContent = `${short.format(days[0])} – ${short.format(days[6])}`;
  }
  const inMonth = (d) => cp.view !== "month" || d.getUTCMonth() === cp.cursor.getUTCMonth();
  const heads = [1, 2, 3, 4, 5, 6, 7].map((n) => el("div", { class: "cp-cal-head", i18n: `weekday.${n}` }));
  const dayLabel = new Intl.DateTimeFormat(locale(), cp.view === "month"
    ? { day: "numeric", timeZone: "UTC" } : { month: "short", day: "numeric", weekday: "short", timeZone: "UTC" });
  grid.replaceChildren(...heads, ...days.map((d) => {
    const key = dayKey(d);
    const items = byDay.get(key) || [];
    return el("div", { class: `cp-day${inMonth(d) ? "" : " other"}`, "data-day": key },
      el("span", { class: "cp-day-label", text: dayLabel.format(d) }),
      ...items.map((item) => el("button", {
        type: "button", class: "cp-chip", "data-item": item.item_id, "data-status": item.status,
        title: `${item.topic} · ${t(`item_status.${item.status}`)}`,
        on: { click: () => focusItem(item.item_id) },
      }, el("span", { class: "time", text: zoneTime(item.slot, zone) }), " ",
      el("span", { class: "topic", user: true, text: item.topic }))));
  }));
  $("cp-legend").replaceChildren(...STATUS_ORDER.map((s) =>
    el("li", {}, el("span", { class: "cp-swatch", "data-status": s }), el("span", { text: t(`item_status.${s}`) }))));
}

function focusItem(itemId) {
  const target = document.querySelector(`#cp-reviews [data-item="${itemId}"]`) || document.querySelector(`#cp-items [data-item="${itemId}"]`);
  if (!target) return;
  target.scrollIntoView({ block: "center", behavior: "smooth" });
  target.classList.add("flash");
  setTimeout(() => target.classList.remove("flash"), 1500);
}

// ---------------------------------------------------------------- the plan

function renderPlan() {
  const zone = campaignZone();
  $("cp-items").replaceChildren(...cp.items.map((item) => {
    const editing = cp.planEdit[item.item_id];
    const editable = item.status === "planned" && ["planned", "running", "failed"].includes(cp.campaign.status);
    const posts = item.posts.map((p) =>
      el("span", { class: "cp-post-state", "data-platform": p.platform, "data-status": p.status },
        `${platformName(p.platform)} · ${t(`item_status.${p.status}`)}`));
    const li = el("li", { "data-item": item.item_id, "data-status": item.status },
      el("div", { class: "cp-item-head" },
        el("span", { class: "cp-when", text: slotText(item.slot, zone) }),
        el("span", { class: "badge", "data-status": item.status, text: t(`item_status.${item.status}`) }),
        item.generation > 1 ? el("span", { class: "muted small", text: t("plan.generation", { n: item.generation }) }) : null),
      el("div", { class: "cp-topic", user: true, text: item.topic }),
      item.angle ? el("div", { class: "muted small", user: true, text: item.angle }) : null,
      item.reason ? el("div", { class: "small cp-reason" }, el("span", { text: t("plan.reason", { r: "" }) }), el("span", { user: true, text: item.reason })) : null,
      el("div", { class: "cp-post-states" }, ...posts),
      ...item.posts.filter((p) => p.error).map((p) =>
        el("div", { class: "error small" }, `${platformName(p.platform)}: `, el("span", { user: true, text: p.error }))));
    if (editable && !editing) {
      li.append(el("div", { class: "row cp-item-actions" },
        el("button", { type: "button", class: "link edit", i18n: "plan.edit",
          on: { click: () => { cp.planEdit = { ...cp.planEdit, [item.item_id]: { topic: item.topic, angle: item.angle, slot: zoneValue(item.slot, zone) } }; render(); } } }),
        el("button", { type: "button", class: "link danger drop", i18n: "plan.drop", on: { click: guard(() => dropItem(item.item_id)) } })));
    }
    if (editable && editing) li.append(planEditor(item, editing));
    return li;
  }));
  $("cp-items-empty").hidden = cp.items.length > 0;
}

function planEditor(item, editing) {
  const keep = (name) => (event) => { editing[name] = event.target.value; };
  return el("form", { class: "card cp-plan-edit", autocomplete: "off", on: { submit: (event) => { event.preventDefault(); guard(() => saveItem(item))(); } } },
    label("plan.topic", el("input", { class: "plan-topic", maxlength: "120", value: editing.topic, on: { input: keep("topic") } })),
    label("plan.angle", el("input", { class: "plan-angle", maxlength: "200", value: editing.angle, on: { input: keep("angle") } })),
    label("plan.slot", el("input", { class: "plan-slot", type: "datetime-local", value: editing.slot, on: { input: keep("slot") } })),
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary save", i18n: "plan.save" }),
      el("button", { type: "button", class: "cancel", i18n: "plan.cancel", on: { click: () => closePlanEdit(item.item_id) } })));
}

function closePlanEdit(itemId) {
  const { [itemId]: _closed, ...rest } = cp.planEdit;
  cp.planEdit = rest;
  render();
}

async function saveItem(item) {
  const editing = cp.planEdit[item.item_id];
  const changes = {};
  if (editing.topic.trim() !== item.topic) changes.topic = editing.topic.trim();
  if (editing.angle.trim() !== item.angle) changes.angle = editing.angle.trim();
  if (editing.slot && editing.slot !== zoneValue(item.slot, campaignZone())) changes.slot = `${editing.slot}:00`;
  if (Object.keys(changes).length) await api("PATCH", `/campaigns/${cp.id}/items/${item.item_id}`, changes);
  closePlanEdit(item.item_id);
  await refresh();
}

async function dropItem(itemId) {
  if (!confirm(t("plan.confirm_drop"))) return;
  await api("DELETE", `/campaigns/${cp.id}/items/${itemId}`);
  await refresh();
}

async function addItem() {
  const topic = $("cp-add-topic").value.trim();
  if (!topic) { $("cp-add-topic").focus(); return; }
  const body = { topic, angle: $("cp-add-angle").value.trim() };
  if ($("cp-add-slot").value) body.slot = `${$("cp-add-slot").value}:00`;  // in the campaign's zone
  await api("POST", `/campaigns/${cp.id}/items`, body);
  $("cp-add-topic").value = "";
  $("cp-add-angle").value = "";
  $("cp-add-slot").value = "";
  await refresh();
}

async function startWriting() {
  await api("POST", `/campaigns/${cp.id}/start`);
  await refresh();
}

async function planAgain() {
  if (!confirm(t("campaign.confirm_replan"))) return;
  await api("POST", `/campaigns/${cp.id}/plan`);
  await refresh();
}

async function deleteCampaign() {
  if (!confirm(t("campaign.confirm_delete"))) return;
  await api("DELETE", `/campaigns/${cp.id}`);
  cp.controller?.abort();
  cp.id = null;
  await loadList();
  location.hash = "#campaigns";
}

// ---------------------------------------------------------------- the approval queue

function renderQueue() {
  const zone = campaignZone();
  const waiting = cp.items.filter((i) => i.status === "pending_review");
  $("cp-reviews").replaceChildren(...waiting.map((item) => {
    const reason = el("textarea", { class: "reason", rows: "2", maxlength: "1000", placeholder18n: "queue.reason",
      value: cp.reasons[item.item_id] || "", on: { input: (event) => { cp.reasons[item.item_id] = event.target.value; } } });
    const anyBusy = item.posts.some((p) => cp.busy[p.thread_id]);
    return el("article", { class: "card cp-review", "data-item": item.item_id },
      el("div", { class: "cp-item-head" },
        el("span", { class: "cp-when", text: slotText(item.slot, zone) }),
        el("strong", { class: "cp-topic", user: true, text: item.topic }),
        item.generation > 1 ? el("span", { class: "muted small", text: t("plan.generation", { n: item.generation }) }) : null),
      item.reason ? el("div", { class: "small cp-reason" }, el("span", { text: t("plan.reason", { r: "" }) }), el("span", { user: true, text: item.reason })) : null,
      el("div", { class: "cp-posts" }, ...item.posts.map((post) => postCard(item, post))),
      el("div", { class: "row cp-review-actions" },
        el("button", { type: "button", class: "primary approve", i18n: "queue.approve", disabled: anyBusy, on: { click: guard(() => approve(item.item_id)) } }),
        reason,
        el("button", { type: "button", class: "danger reject", i18n: "queue.reject", disabled: anyBusy, on: { click: guard(() => reject(item.item_id)) } })));
  }));
  $("cp-queue-empty").hidden = waiting.length > 0;
}

function postCard(item, post) {
  const content = post.post;
  const editing = cp.postEdit[post.thread_id];
  const busy = cp.busy[post.thread_id];
  const canChange = post.status === "pending_review" && post.thread_id && !busy;
  const card = el("section", { class: "cp-post", "data-platform": post.platform, "data-status": post.status },
    el("div", { class: "cp-post-head" },
      el("strong", { text: platformName(post.platform) }),
      el("span", { class: "badge", "data-status": post.status, text: t(`item_status.${post.status}`) }),
      busy ? el("span", { class: "muted small checking", text: t("queue.checking") }) : null));
  if (post.error) card.append(el("p", { class: "error small", user: true, text: post.error }));
  if (!content) {
    card.append(el("p", { class: "muted small", text: t("queue.no_post") }));
    return card;
  }
  if (editing && canChange) {
    card.append(postEditor(post, editing));
    return card;
  }
  card.append(...[
    content.title ? el("h4", { class: "cp-post-title", user: true, text: content.title }) : null,
    el("div", { class: "cp-post-body", user: true, text: content.body }),
    content.tags.length ? el("div", { class: "tags", user: true }, ...content.tags.map((tag) => el("span", { text: `#${tag}` }))) : null,
    content.image_urls.length ? el("div", { class: "cp-images" }, ...content.image_urls.map((url, index) =>
      el("figure", {},
        el("img", { src: url, alt: t("queue.image", { n: index + 1 }), loading: "lazy" }),
        canChange ? el("button", { type: "button", class: "link small redraw", "data-slot": String(index + 1), i18n: "queue.redraw",
          on: { click: guard(() => redrawCard(post, index + 1)) } }) : null))) : null,
    canChange ? el("div", { class: "row" },
      el("button", { type: "button", class: "link edit", i18n: "queue.edit",
        on: { click: () => { cp.postEdit = { ...cp.postEdit, [post.thread_id]: { title: content.title, body: content.body, tags: content.tags.join(" ") } }; render(); } } })) : null,
  ].filter(Boolean));
  return card;
}

function postEditor(post, editing) {
  const keep = (name) => (event) => { editing[name] = event.target.value; };
  return el("form", { class: "cp-post-edit", autocomplete: "off", on: { submit: (event) => { event.preventDefault(); guard(() => saveEdit(post))(); } } },
    label("edit.title", el("input", { class: "edit-title", maxlength: "200", value: editing.title, on: { input: keep("title") } })),
    label("edit.body", el("textarea", { class: "edit-body", rows: "8", value: editing.body, on: { input: keep("body") } })),
    label("edit.tags", el("input", { class: "edit-tags", value: editing.tags, on: { input: keep("tags") } })),
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary save", i18n: "queue.save" }),
      el("button", { type: "button", class: "cancel", i18n: "queue.cancel", on: { click: () => closePostEdit(post.thread_id) } })));
}

function closePostEdit(threadId) {
  const { [threadId]: _closed, ...rest } = cp.postEdit;
  cp.postEdit = rest;
  render();
}

// Run on the post's thread until it ends (the critic checks the change), then until the
// campaign took the run's post in (its driver reads finished runs once a second).
async function recheck(post, body) {
  cp.busy = { ...cp.busy, [post.thread_id]: true };
  render();
  try {
    await api("POST", `/threads/${post.thread_id}/runs/wait`, { assistant_id: cp.campaign.assistant_id, ...body });
    for (let look = 0; look < TAKEN_IN_LOOKS; look += 1) {
      await refresh();
      const now = cp.items.flatMap((i) => i.posts).find((p) => p.thread_id === post.thread_id);
      if (!now || now.run_id !== post.run_id) break;
      await new Promise((resolve) => setTimeout(resolve, TAKEN_IN_MS));
    }
  } finally {
    const { [post.thread_id]: _done, ...rest } = cp.busy;
    cp.busy = rest;
    render();
  }
}

// The edit becomes the post's draft (as the executor would have written it); a run
// with no input continues from there: the critic checks it, finalize publishes it.
async function saveEdit(post) {
  const editing = cp.postEdit[post.thread_id];
  const content = {
    title: editing.title.trim(),
    body: editing.body.trim(),
    tags: editing.tags.split(/[\s,，#]+/).filter(Boolean),
  };
  await api("POST", `/threads/${post.thread_id}/state`, { values: { generated_content: content }, as_node: "executor" });
  closePostEdit(post.thread_id);
  await recheck(post, { input: null });
}

// One card again: the redraw_card node with the card's slot; the critic checks the post.
async function redrawCard(post, slot) {
  await recheck(post, { command: { goto: "redraw_card", update: { redraw: { slot } } } });
}

async function approve(itemId) {
  await api("POST", `/campaigns/${cp.id}/items/${itemId}/approve`);
  await refresh();
}

async function reject(itemId) {
  const reason = (cp.reasons[itemId] || "").trim();
  if (!reason) { showError(t("queue.need_reason")); return; }
  await api("POST", `/campaigns/${cp.id}/items/${itemId}/reject`, { reason });
  delete cp.reasons[itemId];
  await refresh();
}

// ---------------------------------------------------------------- publications

function renderPubs() {
  const zone = campaignZone();
  const topics = new Map(cp.items.map((i) => [i.item_id, i.topic]));
  const columns = ["platform", "topic", "slot", "status", "attempts", "published_at", "external_id", "error"];
  const table = $("cp-pubs-table");
  table.replaceChildren(
    el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { i18n: `pubs.${c}` })))),
    el("tbody", {}, ...cp.pubs.map((p) => el("tr", { "data-publication": p.publication_id, "data-item": p.item_id, "data-status": p.status },
      el("td", { text: platformName(p.platform) }),
      el("td", { user: true, text: topics.get(p.item_id) || "" }),
      el("td", { text: slotText(p.slot, zone) }),
      el("td", {}, el("span", { class: "badge", "data-status": p.status, text: t(`pub_status.${p.status}`) })),
      el("td", { class: "attempts", text: String(p.attempts) }),
      el("td", { text: slotText(p.published_at, zone) }),
      el("td", { class: "external-id", user: true }, p.external_id ? el("code", { text: p.external_id }) : ""),
      el("td", { class: "error small", user: true, text: p.error || "" })))));
  table.hidden = cp.pubs.length === 0;
  $("cp-pubs-empty").hidden = cp.pubs.length > 0;
}

// ---------------------------------------------------------------- the page

// #campaigns and #campaigns/<id> show the page in place of the studio. It runs after
// the other pages' hashchange handlers (which show the studio on a hash not theirs).
function route() {
  const match = location.hash.match(/^#campaigns(?:\/([A-Za-z0-9_-]+))?$/);
  const shown = Boolean(match);
  const page = $("campaigns");
  const wasShown = !page.hidden;
  page.hidden = !shown;
  $("nav-campaigns").hidden = shown;
  if (shown) document.querySelector("main.layout").hidden = true;
  else if (wasShown && !document.querySelector("main:not(.layout):not([hidden])")) document.querySelector("main.layout").hidden = false;
  if (!shown) {
    cp.controller?.abort();
    cp.id = null;
    return;
  }
  const id = match[1] || null;
  const first = !cp.loaded;
  cp.loaded = true;
  (async () => {
    if (first) await Promise.all([loadOptions(), loadList()]);
    if (!id && cp.list.length) {
      location.hash = `#campaigns/${cp.list[0].campaign_id}`;  // the newest campaign
      return;
    }
    await open(id);
  })().catch((err) => showError(err.message));
}

build();
translatePage();  // console.js translated the page before these labels were known
// After the other pages' handlers, and after every script ran on the first load.
window.addEventListener("hashchange", () => setTimeout(route, 0));
document.addEventListener("atelier:rerender", () => {
  for (const node of $("campaigns").querySelectorAll("[data-i18n-title]")) node.title = t(node.dataset.i18nTitle);
  syncArgs();
  renderArgs();
  renderList();
  redraw();
});
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", route);
else route();
}
