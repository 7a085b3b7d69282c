// Atelier console: the evaluation page (datasets, experiments) and a preset's online
// evaluation (docs/evaluate.md, docs/console.md).
//
// Loaded last, after console.js (I18N, t, named, $, api, headers, readFrames, lang,
// formatTime, translatePage) and brands.js (whose presets list asks for a
// preset's online evaluation with the `atelier:preset-evaluation` event). The page
// shows at #evaluate in place of the studio. It makes a dataset from briefs typed in
// or from posts of the library (POST /datasets, …/examples, …/examples/from-threads),
// starts an experiment over arms picked from the built-in assistant and this key's
// presets at a version (POST /experiments), follows it (GET /experiments/{id}/stream)
// with its progress per arm, and reads its comparison and posts side by side
// (GET /experiments/{id}); "use this version" makes the winning preset version the
// latest (POST /assistants/{id}/latest). Everything is in a block: its names stay out
// of the other scripts' way. console.js dispatches `atelier:rerender` on a language switch.
"use strict";

{
Object.assign(I18N.zh, {
  "nav.evaluation": "评测", "nav.studio": "返回创作",
  "eval.title": "评测：数据集与实验", "eval.hint": "用同一批需求比较两个或更多配置（内置助手、品牌预设的某个版本），由评审模型两两盲评，顺序互换各评一次。",
  "eval.datasets": "数据集", "eval.datasets_empty": "还没有数据集。", "eval.new_dataset": "新建数据集",
  "eval.dataset_name": "名称", "eval.briefs": "需求（每行一条）", "eval.briefs_placeholder": "写一篇小红书笔记：平价护肤，学生党友好\n写一篇小红书笔记：早八通勤的护肤步骤",
  "eval.fast": "快速模式", "eval.must_include": "每篇都必须提到（每行一个，可选）",
  "eval.create_briefs": "用这些需求创建", "eval.from_posts": "或者从我的作品中选择", "eval.posts_empty": "还没有可选的作品。",
  "eval.create_posts": "用选中的作品创建", "eval.need_name": "请填写数据集名称。", "eval.need_briefs": "请至少写一条需求。",
  "eval.need_posts": "请至少选择一篇作品。", "eval.dataset_created": "已创建数据集，共 {n} 条。",
  "eval.examples_count": "{n} 条", "eval.examples_of": "样例：", "eval.examples_empty": "这个数据集还没有样例。",
  "eval.show": "查看", "eval.delete": "删除", "eval.close": "关闭",
  "eval.confirm_dataset": "删除这个数据集及其全部样例？已有的实验不受影响。",
  "eval.expect": "要求：{e}", "eval.expect.must_include": "必含 {v}", "eval.expect.must_avoid": "避免 {v}",
  "eval.expect.title_max": "标题至多 {v} 字", "eval.expect.body_max": "正文至多 {v} 字",
  "eval.expect.reference_post": "有参考帖子", "eval.expect.judge_notes": "有评审备注",
  "eval.experiments": "实验", "eval.new_experiment": "新建实验", "eval.dataset": "数据集", "eval.pick_dataset": "选择数据集",
  "eval.experiment_name": "名称（可选）", "eval.arms": "参与比较的配置", "eval.arm": "配置 {n}",
  "eval.built_in": "内置助手（不用品牌）", "eval.latest": "最新版（第 {n} 版）", "eval.arm_name": "显示名（可选）",
  "eval.add_arm": "添加配置", "eval.remove_arm": "移除", "eval.repetitions": "每条重复次数", "eval.concurrency": "同时运行数",
  "eval.start": "开始实验", "eval.need_dataset": "请选择数据集。", "eval.need_arms": "至少需要两个配置。",
  "eval.experiment_list": "我的实验", "eval.experiments_empty": "还没有实验。", "eval.open": "打开",
  "eval.status.pending": "排队中", "eval.status.running": "运行中", "eval.status.success": "完成", "eval.status.error": "出错",
  "eval.status.cancelled": "已取消",
  "eval.cancel": "取消实验", "eval.confirm_experiment": "删除这个实验？它的运行会保留。",
  "eval.progress": "进度", "eval.progress_runs": "{d} / {n} 篇", "eval.progress_pairs": "评审 {d} / {n} 对",
  "eval.judge": "评审", "eval.comparison": "比较结果",
  "eval.col.arm": "配置", "eval.col.record": "胜 / 平 / 负", "eval.col.win_rate": "胜率（95% 区间）",
  "eval.col.pass_rate": "检查通过率", "eval.col.critic": "平均评审分", "eval.col.cost": "每篇费用", "eval.col.seconds": "每篇耗时",
  "eval.seconds": "{s} 秒", "eval.unknown": "—", "eval.winner": "领先",
  "eval.significant": "胜率区间在 50% 以上：差别可信。", "eval.not_significant": "胜率区间包含 50%：差别还不能确定，可以增加样例或重复次数。",
  "eval.use_version": "使用此版本", "eval.used": "{name} 之后的创作使用第 {n} 版。",
  "eval.side_by_side": "逐条对比", "eval.example": "样例 {n}", "eval.repetition": "第 {n} 次",
  "eval.passed": "检查通过", "eval.failed": "检查未通过", "eval.no_post": "没有写出帖子",
  "eval.critic": "评审分 {s}", "eval.pair": "{a} 对 {b}", "eval.pair_winner": "胜者：{w}", "eval.tie": "平局",
  "eval.agreed": "两次顺序结论一致", "eval.disagreed": "两次顺序结论不一致，记为平局", "eval.pair_pending": "等待评审",
  "eval.order.ab": "{a} 在前", "eval.order.ba": "{b} 在前", "eval.answer.tie": "不相上下", "eval.answer.pick": "选了 {arm}",
  "eval.unavailable": "评审没有给出可用的回答", "eval.order_line": "{o}：{a}",
  "eval.error": "实验出错：{m}", "eval.stream_lost": "进度连接中断，已重新读取。",
  "brands.evaluation": "在线评测",
  "online.title": "在线评测：", "online.hint": "评审模型按抽样比例给这个预设的已完成作品打分，并与大家的点赞、点踩对照（最近 30 天）。",
  "online.rate": "抽样比例（%）", "online.save": "保存", "online.refresh": "刷新", "online.saved": "已保存：抽样 {p}%。",
  "online.judged": "评审过的作品", "online.mean": "评审平均分", "online.pass": "评审通过率",
  "online.thumbs": "点赞占比", "online.rated": "{n} 篇有人评价", "online.agreement": "评审与人的一致率",
  "online.agreement_n": "{n} 篇两者都有", "online.pending": "待评审", "online.none": "—",
});
Object.assign(I18N.en, {
  "nav.evaluation": "Evaluate", "nav.studio": "Back to the studio",
  "eval.title": "Evaluate: datasets and experiments", "eval.hint": "Run the same briefs through two or more configurations (the built-in assistant, a brand preset at a version); a judge model compares each pair blind, in both orders.",
  "eval.datasets": "Datasets", "eval.datasets_empty": "No datasets yet.", "eval.new_dataset": "New dataset",
  "eval.dataset_name": "Name", "eval.briefs": "Briefs (one a line)", "eval.briefs_placeholder": "A Xiaohongshu note on budget skincare for students\nA morning skincare routine for commuters",
  "eval.fast": "Fast mode", "eval.must_include": "Every post must mention (one a line, optional)",
  "eval.create_briefs": "Create from these briefs", "eval.from_posts": "Or pick posts of yours", "eval.posts_empty": "No posts to pick yet.",
  "eval.create_posts": "Create from the picked posts", "eval.need_name": "Give the dataset a name.", "eval.need_briefs": "Write at least one brief.",
  "eval.need_posts": "Pick at least one post.", "eval.dataset_created": "Dataset created with {n} example(s).",
  "eval.examples_count": "{n} example(s)", "eval.examples_of": "Examples of ", "eval.examples_empty": "This dataset has no examples yet.",
  "eval.show": "Show", "eval.delete": "Delete", "eval.close": "Close",
  "eval.confirm_dataset": "Delete this dataset and its examples? Experiments already made keep theirs.",
  "eval.expect": "Expected: {e}", "eval.expect.must_include": "must mention {v}", "eval.expect.must_avoid": "must avoid {v}",
  "eval.expect.title_max": "title at most {v}", "eval.expect.body_max": "body at most {v}",
  "eval.expect.reference_post": "a reference post", "eval.expect.judge_notes": "notes for the judge",
  "eval.experiments": "Experiments", "eval.new_experiment": "New experiment", "eval.dataset": "Dataset", "eval.pick_dataset": "Pick a dataset",
  "eval.experiment_name": "Name (optional)", "eval.arms": "Configurations to compare", "eval.arm": "Arm {n}",
  "eval.built_in": "Built-in assistant (no brand)", "eval.latest": "Latest (version {n})", "eval.arm_name": "Label (optional)",
  "eval.add_arm": "Add an arm", "eval.remove_arm": "Remove", "eval.repetitions": "Runs per brief", "eval.concurrency": "Runs at once",
  "eval.start": "Start the experiment", "eval.need_dataset": "Pick a dataset.", "eval.need_arms": "Two arms at least.",
  "eval.experiment_list": "My experiments", "eval.experiments_empty": "No experiments yet.", "eval.open": "Open",
  "eval.status.pending": "Queued", "eval.status.running": "Running", "eval.status.success": "Done", "eval.status.error": "Failed",
  "eval.status.cancelled": "Cancelled",
  "eval.cancel": "Cancel the experiment", "eval.confirm_experiment": "Delete this experiment? Its runs stay.",
  "eval.progress": "Progress", "eval.progress_runs": "{d} of {n} posts", "eval.progress_pairs": "{d} of {n} pairs judged",
  "eval.judge": "Judge", "eval.comparison": "Comparison",
  "eval.col.arm": "Arm", "eval.col.record": "Won / tied / lost", "eval.col.win_rate": "Win rate (95% interval)",
  "eval.col.pass_rate": "Checks passed", "eval.col.critic": "Mean review score", "eval.col.cost": "Cost per post", "eval.col.seconds": "Time per post",
  "eval.seconds": "{s} s", "eval.unknown": "—", "eval.winner": "Ahead",
  "eval.significant": "The win rate's interval lies above 50%: the difference holds.", "eval.not_significant": "The win rate's interval includes 50%: not settled yet; add briefs or runs.",
  "eval.use_version": "Use this version", "eval.used": "New posts of {name} use version {n}.",
  "eval.side_by_side": "Side by side", "eval.example": "Example {n}", "eval.repetition": "run {n}",
  "eval.passed": "Checks passed", "eval.failed": "Checks failed", "eval.no_post": "No post written",
  "eval.critic": "Review score {s}", "eval.pair": "{a} against {b}", "eval.pair_winner": "Winner: {w}", "eval.tie": "Tie",
  "eval.agreed": "Both orders agreed", "eval.disagreed": "The orders disagreed: a tie", "eval.pair_pending": "Waiting for the judge",
  "eval.order.ab": "{a} shown first", "eval.order.ba": "{b} shown first", "eval.answer.tie": "neither", "eval.answer.pick": "picked {arm}",
  "eval.unavailable": "The judge gave no usable answer", "eval.order_line": "{o}: {a}",
  "eval.error": "The experiment failed: {m}", "eval.stream_lost": "The progress stream broke; read again.",
  "brands.evaluation": "Online evaluation",
  "online.title": "Online evaluation of ", "online.hint": "The judge scores a sample of this preset's finished posts and is checked against people's thumbs up and down (last 30 days).",
  "online.rate": "Sample rate (%)", "online.save": "Save", "online.refresh": "Refresh", "online.saved": "Saved: {p}% sampled.",
  "online.judged": "Posts judged", "online.mean": "Judge's mean score", "online.pass": "Judge's pass rate",
  "online.thumbs": "Thumbs-up share", "online.rated": "{n} rated by people", "online.agreement": "Judge and people agree",
  "online.agreement_n": "on {n} with both", "online.pending": "Waiting for the judge", "online.none": "—",
});

const ATELIER = "atelier";          // the built-in assistant: an arm with no brand
const STATUSES_OPEN = ["pending", "running"];
const MAX_RECONNECTS = 5;           // a broken progress stream is followed again this often
const REFRESH_MS = 1500;            // results are read again at most this often while running

const ev = {
  datasets: [],
  presets: [],
  versions: new Map(),     // preset id → its versions, newest first
  experiments: [],
  posts: [],               // the library's threads a dataset can be made from
  examplesOf: null,        // {dataset, examples} shown
  arms: [],                // the form's arms: {assistant_id, version, name}
  experiment: null,        // the experiment shown (GET /experiments/{id})
  follow: null,            // {id, controller, last, arms: {name: {done,total}}, pairs: {done,total}}
  note: null,              // [key, vars] of the page's note, drawn again in another language
  online: null,            // {preset, report} of the online evaluation shown
  onlineNote: null,
  refreshTimer: null,
};

// ---------------------------------------------------------------- DOM helpers

// An element with properties (text, i18n, user, class, attributes) and children.
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "i18n") node.dataset.i18n = value;
    else if (key === "user") node.dataset.user = "";
    else if (key === "class") node.className = value;
    else if (key.includes("-") || key === "role") node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children.filter((c) => c != null));
  return node;
}

function button(label, cls, onClick, props = {}) {
  const b = el("button", { type: "button", class: cls, text: t(label), ...props });
  b.addEventListener("click", () => Promise.resolve().then(onClick).catch((err) => showError(err.message)));
  return b;
}

function field(label, control) {
  return el("label", {}, el("span", { i18n: label, text: t(label) }), control);
}

const pct = (x) => (x == null ? t("eval.unknown") : `${Math.round(x * 100)}%`);
const num = (x, digits = 2) => (x == null ? t("eval.unknown") : Number(x).toFixed(digits));
const interval = (low, high) => (low == null || high == null ? "" : ` [${pct(low)}–${pct(high)}]`);
const enc = encodeURIComponent;

function showError(message) {
  ev.note = null;
  $("eval-note").hidden = true;
  $("eval-error").textContent = message;  // a 422 names the field and the rule
  $("eval-error").hidden = !message;
}

function showNote(key, vars = {}) {
  ev.note = key ? [key, vars] : null;
  $("eval-error").hidden = true;
  $("eval-note").textContent = key ? t(key, vars) : "";
  $("eval-note").hidden = !key;
}

// ---------------------------------------------------------------- the page's frame

function buildPage() {
  const platform = $("platform").cloneNode(true);  // the compose form's platforms, translated
  platform.id = "eval-platform";
  platform.removeAttribute("name");
  const page = $("evaluation");
  page.append(
    el("div", { class: "eval-head" },
      el("h2", { i18n: "eval.title" }),
      el("a", { href: "#", class: "small", i18n: "nav.studio" })),
    el("p", { class: "muted small", i18n: "eval.hint" }),
    el("p", { id: "eval-error", class: "error", role: "alert", user: true, hidden: true }),
    el("p", { id: "eval-note", class: "muted small", role: "status", hidden: true }),
    el("div", { class: "eval-grid" },
      el("section", { class: "panel", id: "eval-datasets" },
        el("h2", { i18n: "eval.datasets" }),
        el("ul", { id: "eval-dataset-list", class: "eval-list" }),
        el("p", { id: "eval-datasets-empty", class: "muted small", i18n: "eval.datasets_empty", hidden: true }),
        el("div", { id: "eval-examples", class: "card", hidden: true },
          el("h3", {}, el("span", { i18n: "eval.examples_of" }), el("span", { id: "eval-examples-name", user: true })),
          el("ol", { id: "eval-example-list", class: "eval-examples" }),
          el("p", { id: "eval-examples-empty", class: "muted small", i18n: "eval.examples_empty", hidden: true }),
          el("button", { type: "button", id: "eval-examples-close", class: "link", i18n: "eval.close" })),
        el("form", { id: "eval-dataset-form", class: "card", autocomplete: "off" },
          el("h3", { i18n: "eval.new_dataset" }),
          field("eval.dataset_name", el("input", { id: "eval-dataset-name", maxLength: 200 })),
          field("eval.briefs", el("textarea", { id: "eval-briefs", rows: 4, "data-i18n-placeholder": "eval.briefs_placeholder" })),
          el("div", { class: "row" },
            field("compose.platform", platform),
            el("label", { class: "check" }, el("input", { id: "eval-fast", type: "checkbox", defaultChecked: true }), el("span", { i18n: "eval.fast" }))),
          field("eval.must_include", el("textarea", { id: "eval-must-include", rows: 2 })),
          el("div", { class: "row" }, el("button", { id: "eval-create-briefs", type: "submit", class: "primary", i18n: "eval.create_briefs" })),
          el("h3", { i18n: "eval.from_posts" }),
          el("ul", { id: "eval-posts", class: "eval-list eval-posts" }),
          el("p", { id: "eval-posts-empty", class: "muted small", i18n: "eval.posts_empty", hidden: true }),
          el("div", { class: "row" }, el("button", { id: "eval-create-posts", type: "button", i18n: "eval.create_posts" })))),
      el("section", { class: "panel", id: "eval-experiments" },
        el("h2", { i18n: "eval.experiments" }),
        el("form", { id: "eval-experiment-form", class: "card", autocomplete: "off" },
          el("h3", { i18n: "eval.new_experiment" }),
          field("eval.dataset", el("select", { id: "eval-exp-dataset" })),
          field("eval.experiment_name", el("input", { id: "eval-exp-name", maxLength: 200 })),
          el("p", { class: "muted small", i18n: "eval.arms" }),
          el("div", { id: "eval-arms", class: "eval-arms" }),
          el("button", { id: "eval-add-arm", type: "button", class: "link", i18n: "eval.add_arm" }),
          el("div", { class: "row" },
            field("eval.repetitions", el("input", { id: "eval-repetitions", type: "number", min: 1, max: 10, value: 1 })),
            field("eval.concurrency", el("input", { id: "eval-concurrency", type: "number", min: 1, max: 16, value: 4 }))),
          el("div", { class: "row" }, el("button", { id: "eval-start", type: "submit", class: "primary", i18n: "eval.start" }))),
        el("h3", { i18n: "eval.experiment_list" }),
        el("ul", { id: "eval-experiment-list", class: "eval-list" }),
        el("p", { id: "eval-experiments-empty", class: "muted small", i18n: "eval.experiments_empty", hidden: true }))),
    el("section", { class: "panel", id: "eval-experiment", hidden: true },
      el("div", { class: "live-head" },
        el("h2", { id: "eval-exp-title", user: true }),
        el("span", { id: "eval-exp-status", class: "badge" })),
      el("p", { id: "eval-exp-meta", class: "muted small", user: true }),
      el("p", { id: "eval-exp-error", class: "error", user: true, hidden: true }),
      el("div", { class: "row" },
        el("button", { id: "eval-exp-cancel", type: "button", class: "danger", i18n: "eval.cancel" }),
        el("button", { id: "eval-exp-delete", type: "button", i18n: "eval.delete" }),
        el("button", { id: "eval-exp-close", type: "button", class: "link", i18n: "eval.close" })),
      el("h3", { i18n: "eval.progress" }),
      el("div", { id: "eval-progress", class: "eval-progress" }),
      el("h3", { i18n: "eval.comparison" }),
      el("div", { class: "eval-table" }, el("table", { id: "eval-summary" })),
      el("p", { id: "eval-verdict", class: "small" }),
      el("h3", { i18n: "eval.side_by_side" }),
      el("div", { id: "eval-results" })),
  );
  $("brands").append(
    el("div", { id: "online-evaluation", class: "card online-evaluation", hidden: true },
      el("h3", {}, el("span", { i18n: "online.title" }), el("span", { id: "online-name", user: true })),
      el("p", { class: "muted small", i18n: "online.hint" }),
      el("div", { class: "row" },
        field("online.rate", el("input", { id: "online-rate", type: "number", min: 0, max: 100, step: 1 })),
        el("button", { id: "online-save", type: "button", class: "primary", i18n: "online.save" }),
        el("button", { id: "online-refresh", type: "button", i18n: "online.refresh" })),
      el("p", { id: "online-note", class: "muted small", role: "status", hidden: true }),
      el("dl", { id: "online-report", class: "online-report" }),
      el("button", { id: "online-close", type: "button", class: "link", i18n: "eval.close" })),
  );
}

// The page shows at #evaluate, in place of the studio (whose state stays as it was).
function route() {
  const shown = location.hash === "#evaluate";
  $("evaluation").hidden = !shown;
  document.querySelector("main.layout").hidden = shown;
  $("nav-evaluation").hidden = shown;
  if (shown) loadPage().catch((err) => showError(err.message));
}

async function loadPage() {
  await Promise.all([loadDatasets(), loadPresets(), loadExperiments(), loadPosts()]);
  if (!ev.arms.length) ev.arms = [{ assistant_id: ATELIER }, { assistant_id: ATELIER }];
  renderArms();
}

// ---------------------------------------------------------------- datasets

async function loadDatasets() {
  ev.datasets = await api("POST", "/datasets/search", { limit: 200 });
  renderDatasets();
}

function renderDatasets() {
  const list = $("eval-dataset-list");
  list.replaceChildren();
  for (const dataset of ev.datasets) {
    list.append(el("li", { "data-dataset": dataset.dataset_id },
      el("span", { class: "title", user: true, text: dataset.name }),
      el("span", { class: "muted small", text: `${t("eval.examples_count", { n: dataset.example_count })} · ${formatTime(dataset.created_at, true)}` }),
      button("eval.show", "link show", () => showExamples(dataset)),
      button("eval.delete", "link delete", () => deleteDataset(dataset))));
  }
  $("eval-datasets-empty").hidden = ev.datasets.length > 0;
  const select = $("eval-exp-dataset");
  const chosen = select.value;
  select.replaceChildren(
    el("option", { value: "", text: t("eval.pick_dataset") }),
    ...ev.datasets.map((d) => el("option", { value: d.dataset_id, user: true, text: `${d.name} (${d.example_count})` })));
  select.value = ev.datasets.some((d) => d.dataset_id === chosen) ? chosen : (ev.datasets[0] || {}).dataset_id || "";
}

async function showExamples(dataset) {
  const examples = await api("GET", `/datasets/${enc(dataset.dataset_id)}/examples?limit=1000`);
  ev.examplesOf = { dataset, examples };
  renderExamples();
}

function expectationText(expectations) {
  const parts = Object.entries(expectations || {}).filter(([, v]) => v != null && v !== "" && !(Array.isArray(v) && !v.length))
    .map(([k, v]) => (`eval.expect.${k}` in I18N[lang] ? t(`eval.expect.${k}`, { v: Array.isArray(v) ? v.join("、") : v }) : k));
  return parts.length ? t("eval.expect", { e: parts.join(" · ") }) : "";
}

function renderExamples() {
  const box = $("eval-examples");
  box.hidden = !ev.examplesOf;
  if (!ev.examplesOf) return;
  $("eval-examples-name").textContent = ev.examplesOf.dataset.name;
  const list = $("eval-example-list");
  list.replaceChildren();
  for (const example of ev.examplesOf.examples) {
    const platform = example.input.platform ? named("platform", example.input.platform) : "";
    list.append(el("li", { "data-example": example.example_id },
      el("span", { class: "brief", user: true, text: example.input.request || JSON.stringify(example.input) }),
      el("span", { class: "muted small", text: [platform, expectationText(example.expectations)].filter(Boolean).join(" · ") }),
      button("eval.delete", "link delete", () => deleteExample(example))));
  }
  $("eval-examples-empty").hidden = ev.examplesOf.examples.length > 0;
}

async function deleteExample(example) {
  const { dataset } = ev.examplesOf;
  await api("DELETE", `/datasets/${enc(dataset.dataset_id)}/examples/${enc(example.example_id)}`);
  await loadDatasets();
  await showExamples(ev.datasets.find((d) => d.dataset_id === dataset.dataset_id) || dataset);
}

async function deleteDataset(dataset) {
  if (!confirm(t("eval.confirm_dataset"))) return;
  await api("DELETE", `/datasets/${enc(dataset.dataset_id)}`);
  if (ev.examplesOf && ev.examplesOf.dataset.dataset_id === dataset.dataset_id) ev.examplesOf = null;
  renderExamples();
  await loadDatasets();
}

const lines = (id) => $(id).value.split("\n").map((s) => s.trim()).filter(Boolean);

// A new dataset, then its examples; a refused example leaves no empty dataset behind.
async function createDataset(add) {
  const name = $("eval-dataset-name").value.trim();
  if (!name) { showError(t("eval.need_name")); return; }
  const dataset = await api("POST", "/datasets", { name });
  let added;
  try {
    added = await add(dataset.dataset_id);
  } catch (err) {
    await api("DELETE", `/datasets/${enc(dataset.dataset_id)}`).catch(() => {});
    throw err;
  }
  $("eval-dataset-form").reset();
  for (const box of $("eval-posts").querySelectorAll("input")) box.checked = false;
  showNote("eval.dataset_created", { n: added.length });
  await loadDatasets();
  $("eval-exp-dataset").value = dataset.dataset_id;
  await showExamples(ev.datasets.find((d) => d.dataset_id === dataset.dataset_id) || dataset);
}

async function createFromBriefs() {
  const briefs = lines("eval-briefs");
  if (!$("eval-dataset-name").value.trim()) { showError(t("eval.need_name")); return; }
  if (!briefs.length) { showError(t("eval.need_briefs")); return; }
  const mustInclude = lines("eval-must-include");
  const examples = briefs.map((request) => ({
    input: { request, platform: $("eval-platform").value, auto_confirm: true, ...($("eval-fast").checked ? { fast_mode: true } : {}) },
    ...(mustInclude.length ? { expectations: { must_include: mustInclude } } : {}),
  }));
  await createDataset((id) => api("POST", `/datasets/${enc(id)}/examples`, { examples }));
}

async function createFromPosts() {
  const ids = [...$("eval-posts").querySelectorAll("input:checked")].map((box) => box.value);
  if (!$("eval-dataset-name").value.trim()) { showError(t("eval.need_name")); return; }
  if (!ids.length) { showError(t("eval.need_posts")); return; }
  await createDataset((id) => api("POST", `/datasets/${enc(id)}/examples/from-threads`, { thread_ids: ids }));
}

// The library's posts (not an experiment's runs, nor a judge's): a dataset's briefs.
async function loadPosts() {
  const threads = await api("POST", "/threads/search", { limit: 100, sort_by: "updated_at", sort_order: "desc" });
  ev.posts = threads.filter((th) => (th.values || {}).request && !(th.metadata || {}).experiment_id);
  const list = $("eval-posts");
  const checked = new Set([...list.querySelectorAll("input:checked")].map((box) => box.value));
  list.replaceChildren();
  for (const thread of ev.posts) {
    const title = (((thread.values.result || {}).post) || {}).title;
    list.append(el("li", {},
      el("label", { class: "check" },
        el("input", { type: "checkbox", value: thread.thread_id, checked: checked.has(thread.thread_id) }),
        el("span", { user: true, text: title || thread.values.request }),
        title ? el("span", { class: "muted small", user: true, text: thread.values.request }) : null)));
  }
  $("eval-posts-empty").hidden = ev.posts.length > 0;
}

// ---------------------------------------------------------------- arms

async function loadPresets() {
  const found = await api("POST", "/assistants/search", { graph_id: ATELIER, limit: 1000, sort_by: "name", sort_order: "asc" });
  ev.presets = found.filter((a) => a.assistant_id !== ATELIER);
  ev.versions.clear();
}

function presetLabel(preset) {
  return (preset.context || {}).brand_name || preset.name || preset.assistant_id;
}

async function versionsOf(assistantId) {
  if (!ev.versions.has(assistantId)) {
    ev.versions.set(assistantId, await api("POST", `/assistants/${enc(assistantId)}/versions`, { limit: 1000 }));
  }
  return ev.versions.get(assistantId);
}

function renderArms() {
  const box = $("eval-arms");
  box.replaceChildren();
  ev.arms.forEach((arm, index) => {
    const assistant = el("select", { class: "arm-assistant", "aria-label": t("eval.arm", { n: index + 1 }) },
      el("option", { value: ATELIER, text: t("eval.built_in") }),
      ...ev.presets.map((p) => el("option", { value: p.assistant_id, user: true, text: presetLabel(p) })));
    if (!ev.presets.some((p) => p.assistant_id === arm.assistant_id)) arm.assistant_id = ATELIER;
    assistant.value = arm.assistant_id;
    assistant.addEventListener("change", () => {
      arm.assistant_id = assistant.value;
      arm.version = null;
      renderArms();
    });
    const version = el("select", { class: "arm-version", "aria-label": t("eval.arm", { n: index + 1 }), hidden: arm.assistant_id === ATELIER });
    const preset = ev.presets.find((p) => p.assistant_id === arm.assistant_id);
    if (preset) {
      version.append(el("option", { value: "", text: t("eval.latest", { n: preset.version }) }));
      versionsOf(preset.assistant_id).then((versions) => {
        for (const v of versions) version.append(el("option", { value: String(v.version), text: t("brands.version", { n: v.version }) }));
        version.value = arm.version ? String(arm.version) : "";
      }).catch((err) => showError(err.message));
    }
    version.addEventListener("change", () => { arm.version = version.value ? Number(version.value) : null; });
    const name = el("input", { class: "arm-name", maxLength: 64, value: arm.name || "", placeholder: t("eval.arm_name"), "aria-label": t("eval.arm_name") });
    name.addEventListener("input", () => { arm.name = name.value; });
    const row = el("div", { class: "eval-arm", "data-arm": String(index) },
      el("span", { class: "muted small", text: t("eval.arm", { n: index + 1 }) }), assistant, version, name);
    if (ev.arms.length > 2) row.append(button("eval.remove_arm", "link remove", () => { ev.arms.splice(index, 1); renderArms(); }));
    box.append(row);
  });
  $("eval-add-arm").hidden = ev.arms.length >= 8;
}

async function startExperiment() {
  const datasetId = $("eval-exp-dataset").value;
  if (!datasetId) { showError(t("eval.need_dataset")); return; }
  if (ev.arms.length < 2) { showError(t("eval.need_arms")); return; }
  const body = {
    dataset_id: datasetId,
    arms: ev.arms.map((arm) => ({
      assistant_id: arm.assistant_id,
      ...(arm.version ? { version: arm.version } : {}),
      ...((arm.name || "").trim() ? { name: arm.name.trim() } : {}),
    })),
    repetitions: Number($("eval-repetitions").value || 1),
    max_concurrency: Number($("eval-concurrency").value || 4),
  };
  const name = $("eval-exp-name").value.trim();
  if (name) body.name = name;
  $("eval-start").disabled = true;
  try {
    const experiment = await api("POST", "/experiments", body);
    showNote(null);
    $("eval-exp-name").value = "";
    await loadExperiments();
    await openExperiment(experiment.experiment_id);
  } finally {
    $("eval-start").disabled = false;
  }
}

// ---------------------------------------------------------------- experiments

async function loadExperiments() {
  ev.experiments = await api("POST", "/experiments/search", { limit: 50 });
  renderExperiments();
}

function experimentTitle(experiment) {
  return experiment.name || experiment.arms.map((a) => a.name).join(" · ");
}

function renderExperiments() {
  const list = $("eval-experiment-list");
  list.replaceChildren();
  for (const experiment of ev.experiments) {
    const dataset = ev.datasets.find((d) => d.dataset_id === experiment.dataset_id);
    list.append(el("li", { "data-experiment": experiment.experiment_id, "data-status": experiment.status },
      el("span", { class: "title", user: true, text: experimentTitle(experiment) }),
      el("span", { class: `badge ${experiment.status}`, text: t(`eval.status.${experiment.status}`) }),
      el("span", { class: "muted small", user: true, text: [dataset ? dataset.name : "", formatTime(experiment.created_at, true)].filter(Boolean).join(" · ") }),
      button("eval.open", "link open", () => openExperiment(experiment.experiment_id))));
  }
  $("eval-experiments-empty").hidden = ev.experiments.length > 0;
}

async function openExperiment(experimentId) {
  stopFollowing();
  ev.experiment = await api("GET", `/experiments/${enc(experimentId)}?limit=100`);
  renderExperiment();
  $("eval-experiment").hidden = false;
  $("eval-experiment").scrollIntoView({ block: "start" });
  if (STATUSES_OPEN.includes(ev.experiment.status)) follow(experimentId);
}

function closeExperiment() {
  stopFollowing();
  ev.experiment = null;
  $("eval-experiment").hidden = true;
}

async function reloadExperiment() {
  if (!ev.experiment) return;
  ev.experiment = await api("GET", `/experiments/${enc(ev.experiment.experiment_id)}?limit=100`);
  renderExperiment();
}

// Read the experiment again soon: a burst of frames makes one request.
function refreshSoon() {
  ev.refreshTimer ??= setTimeout(() => {
    ev.refreshTimer = null;
    reloadExperiment().catch((err) => showError(err.message));
  }, REFRESH_MS);
}

// ---------------------------------------------------------------- following one

function stopFollowing() {
  if (ev.follow) ev.follow.controller.abort();
  ev.follow = null;
  clearTimeout(ev.refreshTimer);
  ev.refreshTimer = null;
}

// Follow GET /experiments/{id}/stream from its first frame: the progress per arm is
// counted from the frames; a broken stream is joined again after its last frame.
async function follow(experimentId) {
  const followed = { id: experimentId, controller: new AbortController(), last: 0, arms: {}, pairs: { done: 0, total: 0 }, ended: false };
  ev.follow = followed;
  for (let attempt = 0; attempt <= MAX_RECONNECTS && !followed.ended; attempt += 1) {
    if (attempt) await new Promise((resolve) => setTimeout(resolve, 1000 * attempt));
    if (ev.follow !== followed) return;
    try {
      const res = await fetch(`/experiments/${enc(experimentId)}/stream`, {
        headers: headers({ Accept: "text/event-stream", ...(followed.last ? { "Last-Event-ID": String(followed.last) } : {}) }),
        signal: followed.controller.signal,
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      for await (const frame of readFrames(res)) {
        if (ev.follow !== followed) return;
        if (frame.id) followed.last = Number(frame.id);
        onFrame(followed, frame);
      }
    } catch (err) {
      if (followed.controller.signal.aborted) return;
    }
  }
  if (ev.follow !== followed) return;
  if (!followed.ended) showError(t("eval.stream_lost"));
  ev.follow = null;
  await reloadExperiment();
  await loadExperiments();
}

function onFrame(followed, frame) {
  const data = frame.data || {};
  switch (frame.event) {
    case "metadata": {
      const per = Math.round((data.runs_total || 0) / Math.max(1, (data.arms || []).length));
      followed.arms = Object.fromEntries((data.arms || []).map((name) => [name, { done: 0, total: per }]));
      followed.pairs = { done: 0, total: data.pairs_total || 0 };
      break;
    }
    case "status":
      if (ev.experiment) ev.experiment.status = data.status;
      renderStatus();
      break;
    case "run":
      if (data.status !== "running" && followed.arms[data.arm]) followed.arms[data.arm].done += 1;
      if (data.status !== "running") refreshSoon();
      break;
    case "judgement":
      followed.pairs.done += 1;
      refreshSoon();
      break;
    case "end":
      followed.ended = true;
      if (ev.experiment) ev.experiment.status = data.status;
      break;
    default:
      break;
  }
  renderProgress();
}

// ---------------------------------------------------------------- reading one

function renderStatus() {
  const e = ev.experiment;
  const badge = $("eval-exp-status");
  badge.className = `badge ${e.status}`;
  badge.textContent = t(`eval.status.${e.status}`);
  badge.dataset.status = e.status;
  $("eval-exp-cancel").hidden = !STATUSES_OPEN.includes(e.status);
}

function renderExperiment() {
  const e = ev.experiment;
  if (!e) return;
  $("eval-exp-title").textContent = experimentTitle(e);
  const dataset = ev.datasets.find((d) => d.dataset_id === e.dataset_id);
  $("eval-exp-meta").textContent = [dataset ? dataset.name : e.dataset_id, formatTime(e.created_at, true)].join(" · ");
  $("eval-exp-error").hidden = !e.error;
  $("eval-exp-error").textContent = e.error ? t("eval.error", { m: e.error }) : "";
  renderStatus();
  renderProgress();
  renderSummary();
  renderResults();
}

// Per arm: posts written of those planned; the judge: pairs judged. From the stream's
// frames while it is followed, else from the experiment as read.
function renderProgress() {
  const e = ev.experiment;
  if (!e) return;
  let arms;
  let pairs;
  if (ev.follow && ev.follow.id === e.experiment_id && Object.keys(ev.follow.arms).length) {
    arms = Object.entries(ev.follow.arms).map(([name, p]) => [name, p.done, p.total]);
    pairs = [ev.follow.pairs.done, ev.follow.pairs.total];
  } else {
    const per = e.progress.examples * e.repetitions;
    const ended = Object.fromEntries(e.summary.arms.map((a) => [a.name, a.runs]));
    arms = e.arms.map((a) => [a.name, ended[a.name] || 0, per]);
    pairs = [e.progress.pairs_done, e.progress.pairs_total];
  }
  const box = $("eval-progress");
  box.replaceChildren();
  const row = (label, done, total, text, user) => el("div", { class: "eval-bar", "data-done": String(done), "data-total": String(total) },
    el("span", { class: "name", user, text: label }),
    el("progress", { max: Math.max(total, 1), value: done }),
    el("span", { class: "muted small", text }));
  for (const [name, done, total] of arms) {
    box.append(row(name, done, total, t("eval.progress_runs", { d: done, n: total }), true));
  }
  box.append(row(t("eval.judge"), pairs[0], pairs[1], t("eval.progress_pairs", { d: pairs[0], n: pairs[1] }), false));
}

// The arm ahead: the highest win rate, when one arm alone has it.
function leader(arms) {
  const rated = arms.filter((a) => a.win_rate != null);
  if (rated.length < 2) return null;
  const best = Math.max(...rated.map((a) => a.win_rate));
  const top = rated.filter((a) => a.win_rate === best);
  return top.length === 1 && best > 0.5 ? top[0] : null;
}

function renderSummary() {
  const e = ev.experiment;
  const arms = e.summary.arms;
  const ahead = e.status === "success" ? leader(arms) : null;
  const table = $("eval-summary");
  const head = el("tr", {}, ...["arm", "record", "win_rate", "pass_rate", "critic", "cost", "seconds"].map((c) => el("th", { text: t(`eval.col.${c}`) })), el("th"));
  const labelled = (cls, text, column) => el("td", { class: cls, text, "data-label": t(`eval.col.${column}`) });
  const rows = arms.map((arm) => {
    const name = el("td", { class: "arm" }, el("span", { user: true, text: arm.name }));
    if (arm === ahead) name.append(" ", el("span", { class: "badge success", text: t("eval.winner") }));
    const action = el("td");
    if (arm === ahead && arm.version != null && arm.assistant_id !== ATELIER) {
      action.append(button("eval.use_version", "use", () => useVersion(arm)));
    }
    return el("tr", { "data-arm": arm.name, class: arm === ahead ? "winner" : null },
      name,
      labelled("record", `${arm.wins} / ${arm.ties} / ${arm.losses}`, "record"),
      labelled("win-rate", `${pct(arm.win_rate)}${interval(arm.win_rate_low, arm.win_rate_high)}`, "win_rate"),
      labelled("pass-rate", pct(arm.pass_rate), "pass_rate"),
      labelled("critic", num(arm.critic_score), "critic"),
      labelled("cost", num(arm.cost_per_post, 4), "cost"),
      labelled("seconds", arm.seconds_per_post == null ? t("eval.unknown") : t("eval.seconds", { s: num(arm.seconds_per_post, 1) }), "seconds"),
      action);
  });
  table.replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
  const verdict = $("eval-verdict");
  verdict.textContent = ahead ? t(ahead.win_rate_low > 0.5 ? "eval.significant" : "eval.not_significant") : "";
}

async function useVersion(arm) {
  await api("POST", `/assistants/${enc(arm.assistant_id)}/latest`, { version: arm.version });
  const preset = ev.presets.find((p) => p.assistant_id === arm.assistant_id);
  showNote("eval.used", { name: preset ? presetLabel(preset) : arm.assistant_id, n: arm.version });
  await loadPresets();
  renderArms();
  document.dispatchEvent(new Event("atelier:presets-changed"));
}

function renderResults() {
  const e = ev.experiment;
  const box = $("eval-results");
  box.replaceChildren();
  for (const result of e.results) {
    const card = el("div", { class: "card eval-example", "data-example": String(result.example_index) },
      el("h4", { text: t("eval.example", { n: result.example_index + 1 }) }),
      el("p", { class: "brief", user: true, text: result.input.request || "" }));
    const expected = expectationText(result.expectations);
    if (expected) card.append(el("p", { class: "muted small", text: expected }));
    const posts = el("div", { class: "eval-posts-grid" });
    for (const post of result.posts) posts.append(renderPost(post, e.repetitions));
    card.append(posts);
    for (const pair of result.pairs) card.append(renderPair(pair, e.repetitions));
    box.append(card);
  }
}

function renderPost(post, repetitions) {
  const head = el("div", { class: "eval-post-head" }, el("strong", { user: true, text: post.arm }));
  if (repetitions > 1) head.append(el("span", { class: "muted small", text: t("eval.repetition", { n: post.repetition + 1 }) }));
  const box = el("article", { class: "eval-post", "data-arm": post.arm, "data-passed": String(Boolean(post.passed)) }, head);
  if (post.status === "running" || post.status === "pending") {
    head.append(el("span", { class: "badge running", text: t(`eval.status.${post.status}`) }));
    return box;
  }
  if (!post.post) {
    head.append(el("span", { class: "badge error", text: t("eval.no_post") }));
    if (post.error) box.append(el("p", { class: "error small", user: true, text: post.error }));
    return box;
  }
  head.append(el("span", { class: `badge ${post.passed ? "success" : "error"}`, text: t(post.passed ? "eval.passed" : "eval.failed") }));
  const facts = [];
  if (post.critic_score != null) facts.push(t("eval.critic", { s: num(post.critic_score) }));
  if (post.seconds != null) facts.push(t("eval.seconds", { s: num(post.seconds, 1) }));
  if (post.cost != null) facts.push(num(post.cost, 4));
  box.append(el("div", { class: "muted small", text: facts.join(" · ") }));
  if ((post.failing || []).length) {
    box.append(el("ul", { class: "v-checks" }, ...post.failing.map((name) => el("li", { class: "bad", text: `✗ ${named("check", `${name}.name`)}` }))));
  }
  box.append(
    el("h5", { user: true, text: post.post.title || "" }),
    el("div", { class: "eval-post-body", user: true }, ...(post.post.blocks || []).map(postBlock)));
  if ((post.post.tags || []).length) box.append(el("div", { class: "muted small", user: true, text: post.post.tags.map((tag) => `#${tag}`).join(" ") }));
  return box;
}

// A block of a post (heading, list item, paragraph) as the studio's post shows it.
function postBlock(block) {
  if (block.type === "heading") return el("strong", { class: "heading", text: block.text });
  if (block.type === "list_item") return el("p", { class: "list-item", text: `• ${block.text}` });
  return el("p", { text: block.text });
}

function renderPair(pair, repetitions) {
  const [a, b] = pair.arms;
  const title = t("eval.pair", { a, b }) + (repetitions > 1 ? ` · ${t("eval.repetition", { n: pair.repetition + 1 })}` : "");
  const box = el("div", { class: "eval-pair", "data-winner": pair.winner || "" }, el("strong", { class: "small", text: title }));
  if (pair.winner == null) {
    box.append(" ", el("span", { class: "muted small", text: t("eval.pair_pending") }));
    return box;
  }
  const winner = pair.winner === "tie" ? t("eval.tie") : t("eval.pair_winner", { w: pair.winner });
  const agreement = pair.unavailable ? t("eval.unavailable") : t(pair.agreed ? "eval.agreed" : "eval.disagreed");
  box.append(el("div", { class: "small" }, el("span", { class: "winner", text: winner }), el("span", { class: "muted", text: ` · ${agreement}` })));
  const orders = el("ul", { class: "eval-orders" });
  for (const order of pair.orders || []) {
    const picked = order.preferred === "a" ? a : order.preferred === "b" ? b : null;
    const answer = order.answer == null ? t("eval.unavailable") : picked ? t("eval.answer.pick", { arm: picked }) : t("eval.answer.tie");
    orders.append(el("li", { class: "small" },
      el("span", { class: "muted", text: t("eval.order_line", { o: t(`eval.order.${order.order}`, { a, b }), a: answer }) }),
      el("span", { class: "reasons", user: true, text: order.reasons ? ` — ${order.reasons}` : "" })));
  }
  if (pair.note) orders.append(el("li", { class: "small muted", user: true, text: pair.note }));
  box.append(orders);
  return box;
}

async function cancelExperiment() {
  if (!ev.experiment) return;
  ev.experiment = { ...ev.experiment, ...(await api("POST", `/experiments/${enc(ev.experiment.experiment_id)}/cancel`)) };
  renderStatus();
}

async function deleteExperiment() {
  if (!ev.experiment || !confirm(t("eval.confirm_experiment"))) return;
  const id = ev.experiment.experiment_id;
  closeExperiment();
  await api("DELETE", `/experiments/${enc(id)}`);
  await loadExperiments();
}

// ---------------------------------------------------------------- online evaluation

async function openOnline(preset) {
  ev.online = { preset, report: null };
  ev.onlineNote = null;
  $("online-rate").value = "";
  await loadOnline();
  $("online-rate").value = String(Math.round(ev.online.report.sample_rate * 100));
  $("online-evaluation").hidden = false;
  $("online-evaluation").scrollIntoView({ block: "nearest" });
}

async function loadOnline() {
  if (!ev.online) return;
  ev.online.report = await api("GET", `/assistants/${enc(ev.online.preset.assistant_id)}/evaluation`);
  renderOnline();
}

async function saveOnline() {
  const percent = Number($("online-rate").value);
  const saved = await api("PUT", `/assistants/${enc(ev.online.preset.assistant_id)}/evaluation`, { sample_rate: percent / 100 });
  ev.onlineNote = ["online.saved", { p: Math.round(saved.sample_rate * 100) }];
  await loadOnline();
}

function renderOnline() {
  const box = $("online-evaluation");
  if (!ev.online || !ev.online.report) { box.hidden = true; return; }
  $("online-name").textContent = presetLabel(ev.online.preset);
  $("online-note").hidden = !ev.onlineNote;
  $("online-note").textContent = ev.onlineNote ? t(...ev.onlineNote) : "";
  const r = ev.online.report;
  const rows = [
    ["judged", String(r.judge.judged)],
    ["mean", num(r.judge.mean_score)],
    ["pass", `${pct(r.judge.pass_rate)}${interval(r.judge.pass_rate_low, r.judge.pass_rate_high)}`],
    ["thumbs", `${pct(r.people.thumbs_up_share)} · ${t("online.rated", { n: r.people.rated })}`],
    ["agreement", `${pct(r.agreement.rate)}${interval(r.agreement.low, r.agreement.high)} · ${t("online.agreement_n", { n: r.agreement.n })}`],
    ["pending", String(r.pending)],
  ];
  $("online-report").replaceChildren(...rows.flatMap(([key, value]) => [
    el("dt", { text: t(`online.${key}`) }), el("dd", { "data-metric": key, text: value })]));
}

function closeOnline() {
  ev.online = null;
  $("online-evaluation").hidden = true;
}

function onlineError(err) {
  $("brand-error").textContent = err.message;
  $("brand-error").hidden = false;
}

// ---------------------------------------------------------------- wiring

function rerenderPage() {
  if (ev.note) showNote(...ev.note);
  renderDatasets();
  renderExamples();
  renderArms();
  renderExperiments();
  if (ev.experiment) renderExperiment();
  if (ev.online) renderOnline();
}

buildPage();
translatePage();  // console.js translated the page before these labels were known
$("eval-dataset-form").addEventListener("submit", (event) => {
  event.preventDefault();
  createFromBriefs().catch((err) => showError(err.message));
});
$("eval-create-posts").addEventListener("click", () => createFromPosts().catch((err) => showError(err.message)));
$("eval-examples-close").addEventListener("click", () => { ev.examplesOf = null; renderExamples(); });
$("eval-add-arm").addEventListener("click", () => { ev.arms.push({ assistant_id: ATELIER }); renderArms(); });
$("eval-experiment-form").addEventListener("submit", (event) => {
  event.preventDefault();
  startExperiment().catch((err) => showError(err.message));
});
$("eval-exp-cancel").addEventListener("click", () => cancelExperiment().catch((err) => showError(err.message)));
$("eval-exp-delete").addEventListener("click", () => deleteExperiment().catch((err) => showError(err.message)));
$("eval-exp-close").addEventListener("click", closeExperiment);
$("online-save").addEventListener("click", () => saveOnline().catch(onlineError));
$("online-refresh").addEventListener("click", () => loadOnline().catch(onlineError));
$("online-close").addEventListener("click", closeOnline);
document.addEventListener("atelier:preset-evaluation", (event) => openOnline(event.detail).catch(onlineError));
document.addEventListener("atelier:rerender", rerenderPage);
window.addEventListener("hashchange", route);
route();
}
