// Atelier console: brand presets — the compose form's brand picker and the brands panel.
//
// Loaded after console.js, whose helpers it uses (I18N, t, $, api, state, lang,
// formatTime, showError, translatePage, pickAssistant). A brand preset is an `atelier`
// assistant the caller created (POST /assistants) whose `context` holds the brand's
// voice, audience, terms, lengths and examples (agentkit/brand.py BrandPreset).
//
// The picker lists the caller's presets (POST /assistants/search, graph "atelier",
// the built-in `atelier` left out: it is the "no brand" choice); a new post runs the
// picked preset's assistant id. Picking one fills the form's platform and images
// from the preset, because the run's own input overrides the preset field by field
// and the form always sends them; what the form shows is what the run uses.
//
// The panel's form is built from the context schema the server publishes
// (GET /assistants/atelier/schemas), so each field shows its bounds and a field added
// to the preset appears without a console change. The console asks for a brand name
// (the picker's label, also the assistant's `name`). Saving an edit is a PATCH: a new
// version, which becomes the one runs use; the version history lists every version
// (POST /assistants/{id}/versions) and "use this version" makes an older one the
// latest again (POST /assistants/{id}/latest). Term lists are one term a line;
// example posts are separated by a line of "---".
//
// A preset with a knowledge namespace has notes: the vault notes of that namespace
// (GET /knowledge/notes?namespace=…), added with POST /knowledge/notes (approved: a
// person writes them on purpose) and removed by archiving them, the vault's delete.
"use strict";

Object.assign(I18N.zh, {
  "brands.picker": "品牌", "brands.none": "不使用品牌预设",
  "brands.title": "品牌预设", "brands.hint": "保存一个品牌的语气、受众、必用词和禁用词，创作时在上面选用。",
  "brands.empty": "还没有品牌预设。", "brands.new": "新建品牌", "brands.create_title": "新建品牌预设",
  "brands.edit_title": "编辑品牌预设：", "brands.save": "保存", "brands.cancel": "取消", "brands.close": "关闭",
  "brands.edit": "编辑", "brands.versions": "版本历史", "brands.notes": "笔记", "brands.delete": "删除",
  "brands.confirm": "删除这个品牌预设及其全部版本？用它写过的作品会保留。",
  "brands.created": "已创建品牌预设。", "brands.saved": "已保存为第 {n} 版，之后的创作使用这一版。",
  "brands.version": "第 {n} 版", "brands.current": "使用中", "brands.use_version": "使用此版本",
  "brands.used": "之后的创作使用第 {n} 版。", "brands.versions_of": "版本历史：",
  "brands.need_name": "请填写品牌名。", "brands.schema_failed": "读不到品牌预设的字段：{m}",
  "brands.hint.chars": "最多 {max} 字", "brands.hint.range": "{min}–{max}",
  "brands.hint.terms": "每行一个，最多 {max} 个", "brands.hint.posts": "用单独一行 --- 分隔，最多 {max} 篇",
  "brands.hint.pattern": "小写字母、数字和 - _ .", "brands.unset": "（不设置）",
  "brands.notes_of": "笔记：", "brands.notes_hint": "这个品牌的创作会参考这些笔记（命名空间 {ns}）。",
  "brands.notes_empty": "这个命名空间还没有笔记。", "brands.note_content": "新笔记", "brands.note_type": "类型",
  "brands.note_add": "添加笔记", "brands.note_archive": "删除", "brands.note_confirm": "删除这条笔记？（归档，不再被检索）",
  "note_type.blocker": "硬性规则", "note_type.next_action": "待办", "note_type.conclusion": "结论",
  "note_type.progress": "进展", "note_type.reference": "参考资料",
  "brand.field.brand_name": "品牌名", "brand.field.voice": "语气和风格", "brand.field.audience": "受众",
  "brand.field.platform": "平台", "brand.field.image_provider": "配图", "brand.field.image_count": "图片数",
  "brand.field.must_include": "必须使用的词", "brand.field.must_avoid": "禁止使用的词",
  "brand.field.title_min": "标题最少字数", "brand.field.title_max": "标题最多字数",
  "brand.field.body_min": "正文最少字数", "brand.field.body_max": "正文最多字数",
  "brand.field.example_posts": "示例帖子", "brand.field.critic_pass_threshold": "评审通过分数（0–1）",
  "brand.field.knowledge_namespace": "笔记命名空间",
});
Object.assign(I18N.en, {
  "brands.picker": "Brand", "brands.none": "No brand preset",
  "brands.title": "Brand presets", "brands.hint": "Save a brand's voice, audience, terms to use and to avoid once, then pick it above.",
  "brands.empty": "No brand presets yet.", "brands.new": "New brand", "brands.create_title": "New brand preset",
  "brands.edit_title": "Edit brand preset: ", "brands.save": "Save", "brands.cancel": "Cancel", "brands.close": "Close",
  "brands.edit": "Edit", "brands.versions": "Versions", "brands.notes": "Notes", "brands.delete": "Delete",
  "brands.confirm": "Delete this brand preset and all its versions? Posts written with it stay.",
  "brands.created": "Brand preset created.", "brands.saved": "Saved as version {n}; new posts use it.",
  "brands.version": "Version {n}", "brands.current": "In use", "brands.use_version": "Use this version",
  "brands.used": "New posts use version {n}.", "brands.versions_of": "Versions of ",
  "brands.need_name": "Give the brand a name.", "brands.schema_failed": "Could not read the preset's fields: {m}",
  "brands.hint.chars": "up to {max} characters", "brands.hint.range": "{min}–{max}",
  "brands.hint.terms": "one a line, up to {max}", "brands.hint.posts": "separated by a line of ---, up to {max}",
  "brands.hint.pattern": "lower-case letters, digits and - _ .", "brands.unset": "(not set)",
  "brands.notes_of": "Notes of ", "brands.notes_hint": "This brand's posts draw on these notes (namespace {ns}).",
  "brands.notes_empty": "No notes in this namespace yet.", "brands.note_content": "New note", "brands.note_type": "Type",
  "brands.note_add": "Add note", "brands.note_archive": "Delete", "brands.note_confirm": "Delete this note? (It is archived and no longer retrieved.)",
  "note_type.blocker": "Hard rule", "note_type.next_action": "To do", "note_type.conclusion": "Conclusion",
  "note_type.progress": "Progress", "note_type.reference": "Reference",
  "brand.field.brand_name": "Brand name", "brand.field.voice": "Voice and tone", "brand.field.audience": "Audience",
  "brand.field.platform": "Platform", "brand.field.image_provider": "Images", "brand.field.image_count": "Image count",
  "brand.field.must_include": "Terms to use", "brand.field.must_avoid": "Terms to avoid",
  "brand.field.title_min": "Title: fewest characters", "brand.field.title_max": "Title: most characters",
  "brand.field.body_min": "Body: fewest characters", "brand.field.body_max": "Body: most characters",
  "brand.field.example_posts": "Example posts", "brand.field.critic_pass_threshold": "Review pass score (0–1)",
  "brand.field.knowledge_namespace": "Notes namespace",
});

// The built-in assistant of the graph: the picker's "no brand" choice, never listed.
const BUILT_IN = "atelier";
// Term-like list items (at most this many characters) go one a line; longer ones
// (example posts) are separated by a line of POST_SEPARATOR.
const SHORT_ITEM_CHARS = 200;
const POST_SEPARATOR = "---";
// Fields whose choices the compose form already offers (with its translated labels).
const FORM_CHOICES = ["platform", "image_provider"];
// The kinds of vault note (knowledge/notes.py NoteType), in the order offered.
const NOTE_TYPES = ["blocker", "reference", "conclusion", "next_action", "progress"];

let presets = [];             // the caller's atelier assistants, each at its latest version
let presetFields = [];        // [name, JSON schema of the field] of the context schema
let editing = null;           // the preset the form edits (null: a new one)
let versionsOf = null;        // {preset, versions} shown in the version history
let notesOf = null;           // {preset, namespace, notes} shown in the notes
let shownNote = null;         // [key, vars] of the panel's last note, drawn again in another language

// ---------------------------------------------------------------- picker

pickAssistant = () => $("brand").value || BUILT_IN;

function renderPicker() {
  const picker = $("brand");
  const chosen = picker.value;
  const none = document.createElement("option");
  none.value = "";
  none.textContent = t("brands.none");
  const options = presets.map((preset) => {
    const option = document.createElement("option");
    option.value = preset.assistant_id;
    option.dataset.user = "";
    option.textContent = presetName(preset);
    return option;
  });
  picker.replaceChildren(none, ...options);
  picker.value = presets.some((p) => p.assistant_id === chosen) ? chosen : "";
}

function presetName(preset) {
  return (preset.context || {}).brand_name || preset.name || preset.assistant_id;
}

// The form's platform and images become the picked preset's, where it sets them.
function onPick() {
  const preset = presets.find((p) => p.assistant_id === $("brand").value);
  const context = (preset && preset.context) || {};
  for (const id of ["platform", "image_provider", "image_count"]) {
    const field = $(id);
    const value = context[id];
    if (value == null) continue;
    if (field.tagName === "SELECT" && ![...field.options].some((o) => o.value === String(value))) continue;
    field.value = String(value);
  }
}

// A post shown again (reopened, or after its run) shows the brand it was written for.
function pickShownPost() {
  if (!state.assistantId) return;
  const known = presets.some((p) => p.assistant_id === state.assistantId);
  $("brand").value = known ? state.assistantId : "";
}

// ---------------------------------------------------------------- presets

async function loadPresets() {
  try {
    const found = await api("POST", "/assistants/search", {
      graph_id: BUILT_IN, limit: 1000, sort_by: "name", sort_order: "asc",
    });
    presets = found.filter((a) => a.assistant_id !== BUILT_IN);
  } catch {
    return;  // presets are a convenience; a post can always be written without one
  }
  renderPicker();
  renderPresets();
}

function renderPresets() {
  const list = $("brands-list");
  list.replaceChildren();
  for (const preset of presets) {
    const li = document.createElement("li");
    li.dataset.assistant = preset.assistant_id;
    const name = document.createElement("span");
    name.className = "title";
    name.dataset.user = "";
    name.textContent = presetName(preset);
    const meta = document.createElement("span");
    meta.className = "muted small";
    meta.textContent = `${t("brands.version", { n: preset.version })} · ${formatTime(preset.updated_at, true)}`;
    const voice = document.createElement("span");
    voice.className = "voice small";
    voice.dataset.user = "";
    voice.textContent = (preset.context || {}).voice || "";
    li.append(name, meta, voice);
    const actions = [["edit", () => openForm(preset)], ["versions", () => loadVersions(preset)]];
    if ((preset.context || {}).knowledge_namespace) actions.push(["notes", () => loadNotes(preset)]);
    // evaluation.js shows the preset's online evaluation
    actions.push(["evaluation", async () => document.dispatchEvent(new CustomEvent("atelier:preset-evaluation", { detail: preset }))]);
    actions.push(["delete", () => deletePreset(preset)]);
    for (const [action, handler] of actions) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = `link ${action}`;
      button.dataset.action = action;
      button.textContent = t(`brands.${action}`);
      button.setAttribute("aria-label", `${t(`brands.${action}`)}: ${presetName(preset)}`);
      button.addEventListener("click", () => handler().catch((err) => brandError(err.message)));
      li.append(button);
    }
    list.append(li);
  }
  $("brands-empty").hidden = presets.length > 0;
}

async function deletePreset(preset) {
  if (!confirm(t("brands.confirm"))) return;
  await api("DELETE", `/assistants/${encodeURIComponent(preset.assistant_id)}`);
  if (editing && editing.assistant_id === preset.assistant_id) closeForm();
  if (versionsOf && versionsOf.preset.assistant_id === preset.assistant_id) closeVersions();
  if (notesOf && notesOf.preset.assistant_id === preset.assistant_id) closeNotes();
  await loadPresets();
}

function brandError(message) {
  shownNote = null;
  $("brand-note").hidden = true;
  $("brand-error").textContent = message;  // a 422 names the field and the rule
  $("brand-error").hidden = false;
}

function brandNote(key, vars = {}) {
  shownNote = [key, vars];
  $("brand-error").hidden = true;
  renderNote();
}

function renderNote() {
  $("brand-note").hidden = !shownNote;
  if (shownNote) $("brand-note").textContent = t(...shownNote);
}

// ---------------------------------------------------------------- the form

async function loadSchema() {
  if (presetFields.length) return;
  const schemas = await api("GET", `/assistants/${BUILT_IN}/schemas`);
  presetFields = Object.entries((schemas.context_schema || {}).properties || {});
  buildFields();
}

function fieldKind(name, schema) {
  if (FORM_CHOICES.includes(name)) return "choice";
  if (schema.type === "array") return (schema.items || {}).maxLength > SHORT_ITEM_CHARS ? "posts" : "terms";
  if (schema.type === "integer" || schema.type === "number") return "number";
  if (schema.enum) return "choice";
  return schema.maxLength > SHORT_ITEM_CHARS ? "long" : "text";
}

// One labelled control per field of the context schema, with its bounds.
function buildFields() {
  const box = $("brand-fields");
  box.replaceChildren();
  for (const [name, schema] of presetFields) {
    const id = `brand-field-${name}`;
    const wrap = document.createElement("div");
    wrap.className = "brand-field";
    wrap.dataset.field = name;
    const label = document.createElement("label");
    label.htmlFor = id;
    // A field this console has no label for (a newer server's) shows its schema title.
    if (`brand.field.${name}` in I18N.zh) label.dataset.i18n = `brand.field.${name}`;
    else { label.dataset.user = ""; label.textContent = schema.title || name; }
    const hint = document.createElement("span");
    hint.className = "hint muted small";
    hint.id = `${id}-hint`;
    const control = fieldControl(name, schema);
    control.id = id;
    control.name = name;
    control.setAttribute("aria-describedby", hint.id);
    wrap.append(label, control, hint);
    box.append(wrap);
  }
  $("brand-field-brand_name").required = true;
  translateFields();
}

function fieldControl(name, schema) {
  const kind = fieldKind(name, schema);
  if (kind === "choice") {
    const select = document.createElement("select");
    const unset = document.createElement("option");
    unset.value = "";
    unset.dataset.i18n = "brands.unset";
    select.append(unset);
    const source = $(name);  // the compose form's select of the same field, if any
    const choices = source ? [...source.options].map((o) => [o.value, o.dataset.i18n]) : schema.enum.map((v) => [v, null]);
    for (const [value, key] of choices) {
      const option = document.createElement("option");
      option.value = value;
      if (key) option.dataset.i18n = key;
      else { option.dataset.user = ""; option.textContent = value; }
      select.append(option);
    }
    return select;
  }
  if (kind === "number") {
    const input = document.createElement("input");
    input.type = "number";
    input.inputMode = schema.type === "integer" ? "numeric" : "decimal";
    input.step = schema.type === "integer" ? "1" : "any";
    if (schema.minimum != null) input.min = String(schema.minimum);
    if (schema.maximum != null) input.max = String(schema.maximum);
    return input;
  }
  if (kind === "text") {
    const input = document.createElement("input");
    if (schema.maxLength) input.maxLength = schema.maxLength;
    const pattern = schema.pattern && htmlPattern(schema.pattern);
    if (pattern) input.pattern = pattern;
    input.spellcheck = !schema.pattern;
    return input;
  }
  const area = document.createElement("textarea");
  area.rows = kind === "posts" ? 6 : 3;
  if (kind === "long" && schema.maxLength) area.maxLength = schema.maxLength;
  return area;
}

// A JSON schema pattern as an input's `pattern` (matched whole, with the `v` flag,
// where a class's literal "-" needs escaping), or null when that mode cannot read
// it: the server checks the value anyway.
function htmlPattern(pattern) {
  const whole = pattern.replace(/^\^/, "").replace(/\$$/, "").replace(/(?<!\\)-\]/g, "\\-]");
  try {
    new RegExp(whole, "v");
    return whole;
  } catch {
    return null;
  }
}

// Field labels come from I18N (data-i18n); the bounds are written in the chosen language.
function translateFields() {
  for (const [name, schema] of presetFields) {
    const hint = $(`brand-field-${name}-hint`);
    if (!hint) continue;
    const kind = fieldKind(name, schema);
    let text = "";
    if (kind === "terms") text = t("brands.hint.terms", { max: schema.maxItems ?? "" });
    else if (kind === "posts") text = t("brands.hint.posts", { max: schema.maxItems ?? "" });
    else if (kind === "number" && schema.minimum != null && schema.maximum != null) {
      text = t("brands.hint.range", { min: schema.minimum, max: schema.maximum });
    } else if ((kind === "text" || kind === "long") && schema.pattern) text = t("brands.hint.pattern");
    else if ((kind === "text" || kind === "long") && schema.maxLength) text = t("brands.hint.chars", { max: schema.maxLength });
    hint.textContent = text;
    hint.hidden = !text;
  }
  translatePage();  // the data-i18n labels built after console.js translated the page
}

function writeField(name, schema, value) {
  const control = $(`brand-field-${name}`);
  const kind = fieldKind(name, schema);
  if (value == null) control.value = "";
  else if (kind === "choice") {
    // A value the console offers no choice for (set through the API) is kept as it is.
    if (![...control.options].some((o) => o.value === String(value))) {
      const option = document.createElement("option");
      option.value = option.textContent = String(value);
      option.dataset.user = "";
      control.append(option);
    }
    control.value = String(value);
  } else if (kind === "terms") control.value = value.join("\n");
  else if (kind === "posts") control.value = value.join(`\n${POST_SEPARATOR}\n`);
  else control.value = String(value);
}

function readField(name, schema) {
  const raw = $(`brand-field-${name}`).value;
  const kind = fieldKind(name, schema);
  if (kind === "terms") {
    const terms = raw.split("\n").map((s) => s.trim()).filter(Boolean);
    return terms.length ? terms : undefined;
  }
  if (kind === "posts") {
    const posts = raw.split(new RegExp(`^\\s*${POST_SEPARATOR}\\s*$`, "m")).map((s) => s.trim()).filter(Boolean);
    return posts.length ? posts : undefined;
  }
  if (!raw.trim()) return undefined;
  return kind === "number" ? Number(raw) : raw.trim();
}

async function openForm(preset) {
  try {
    await loadSchema();
  } catch (err) {
    brandError(t("brands.schema_failed", { m: err.message }));
    return;
  }
  editing = preset;
  const context = (preset && preset.context) || {};
  for (const [name, schema] of presetFields) writeField(name, schema, context[name]);
  $("brand-form-title").dataset.i18n = preset ? "brands.edit_title" : "brands.create_title";
  $("brand-form-name").textContent = preset ? presetName(preset) : "";
  translatePage();
  $("brand-form").hidden = false;
  $("brand-error").hidden = true;
  $("brand-field-brand_name").focus();
}

function closeForm() {
  editing = null;
  $("brand-form").hidden = true;
}

// Save the form: a new preset (version 1), or a new version of the one edited.
async function savePreset() {
  const context = {};
  for (const [name, schema] of presetFields) {
    const value = readField(name, schema);
    if (value !== undefined) context[name] = value;
  }
  if (!context.brand_name) { brandError(t("brands.need_name")); return; }
  const body = { context, name: context.brand_name };
  $("brand-save").disabled = true;
  try {
    if (editing) {
      const saved = await api("PATCH", `/assistants/${encodeURIComponent(editing.assistant_id)}`, body);
      closeForm();
      brandNote("brands.saved", { n: saved.version });
      await loadPresets();
      if (versionsOf && versionsOf.preset.assistant_id === saved.assistant_id) await loadVersions(saved);
    } else {
      const created = await api("POST", "/assistants", { graph_id: BUILT_IN, ...body });
      closeForm();
      brandNote("brands.created");
      await loadPresets();
      $("brand").value = created.assistant_id;  // a new brand is the one to write with
      onPick();
    }
  } catch (err) {
    brandError(err.message);
  } finally {
    $("brand-save").disabled = false;
  }
}

// ---------------------------------------------------------------- versions

async function loadVersions(preset) {
  const id = encodeURIComponent(preset.assistant_id);
  const [latest, versions] = await Promise.all([
    api("GET", `/assistants/${id}`),
    api("POST", `/assistants/${id}/versions`, { limit: 1000 }),
  ]);
  versionsOf = { preset: latest, versions };
  renderVersions();
}

function closeVersions() {
  versionsOf = null;
  renderVersions();
}

function renderVersions() {
  const box = $("brand-versions");
  box.hidden = !versionsOf;
  if (!versionsOf) return;
  $("brand-versions-name").textContent = presetName(versionsOf.preset);
  const list = $("brand-versions-list");
  list.replaceChildren();
  for (const version of versionsOf.versions) {
    const li = document.createElement("li");
    li.dataset.version = String(version.version);
    const head = document.createElement("span");
    head.className = "small";
    head.textContent = `${t("brands.version", { n: version.version })} · ${formatTime(version.created_at, true)}`;
    const voice = document.createElement("span");
    voice.className = "voice small";
    voice.dataset.user = "";
    voice.textContent = [presetName(version), (version.context || {}).voice].filter(Boolean).join(" · ");
    li.append(head, voice);
    if (version.version === versionsOf.preset.version) {
      const current = document.createElement("span");
      current.className = "badge success";
      current.textContent = t("brands.current");
      li.dataset.current = "";
      li.append(current);
    } else {
      const use = document.createElement("button");
      use.type = "button";
      use.className = "link use";
      use.textContent = t("brands.use_version");
      use.addEventListener("click", () => useVersion(version.version).catch((err) => brandError(err.message)));
      li.append(use);
    }
    list.append(li);
  }
}

async function useVersion(version) {
  const id = versionsOf.preset.assistant_id;
  await api("POST", `/assistants/${encodeURIComponent(id)}/latest`, { version });
  brandNote("brands.used", { n: version });
  await loadPresets();
  await loadVersions({ assistant_id: id });
}

// ---------------------------------------------------------------- notes

async function loadNotes(preset) {
  const namespace = (preset.context || {}).knowledge_namespace;
  const page = await api("GET", `/knowledge/notes?namespace=${encodeURIComponent(namespace)}&limit=200`);
  notesOf = { preset, namespace, notes: page.items.filter((n) => n.status !== "archived") };
  renderNotes();
}

function closeNotes() {
  notesOf = null;
  renderNotes();
}

function renderNotes() {
  const box = $("brand-notes");
  box.hidden = !notesOf;
  if (!notesOf) return;
  $("brand-notes-name").textContent = presetName(notesOf.preset);
  $("brand-notes-hint").textContent = t("brands.notes_hint", { ns: notesOf.namespace });
  const type = $("brand-note-type");
  const chosen = type.value || NOTE_TYPES[0];
  type.replaceChildren(...NOTE_TYPES.map((id) => {
    const option = document.createElement("option");
    option.value = id;
    option.textContent = t(`note_type.${id}`);
    return option;
  }));
  type.value = chosen;
  const list = $("brand-notes-list");
  list.replaceChildren();
  for (const note of notesOf.notes) {
    const li = document.createElement("li");
    li.dataset.note = note.id;
    const kind = document.createElement("span");
    kind.className = "badge";
    kind.textContent = named("note_type", note.type);
    const content = document.createElement("span");
    content.className = "content";
    content.dataset.user = "";
    content.textContent = note.content;
    const archive = document.createElement("button");
    archive.type = "button";
    archive.className = "link delete";
    archive.textContent = t("brands.note_archive");
    archive.addEventListener("click", () => archiveNote(note).catch((err) => brandError(err.message)));
    li.append(kind, content, archive);
    list.append(li);
  }
  $("brand-notes-empty").hidden = notesOf.notes.length > 0;
}

async function addNote() {
  const content = $("brand-note-content").value.trim();
  if (!content || !notesOf) { $("brand-note-content").focus(); return; }
  await api("POST", "/knowledge/notes", {
    type: $("brand-note-type").value, content, status: "approved", namespace: notesOf.namespace,
  });
  $("brand-note-content").value = "";
  await loadNotes(notesOf.preset);
}

async function archiveNote(note) {
  if (!confirm(t("brands.note_confirm"))) return;
  await api("POST", `/knowledge/notes/${encodeURIComponent(note.id)}/archive`, { expected_version: note.version });
  await loadNotes(notesOf.preset);
}

// ---------------------------------------------------------------- wiring

translatePage();  // console.js translated the page before these labels were known
renderPicker();
$("brand").addEventListener("change", onPick);
$("brand-new").addEventListener("click", () => openForm(null));
$("brand-form").addEventListener("submit", (event) => { event.preventDefault(); savePreset(); });
$("brand-form-cancel").addEventListener("click", closeForm);
$("brand-versions-close").addEventListener("click", closeVersions);
$("brand-notes-close").addEventListener("click", closeNotes);
$("brand-note-add").addEventListener("click", () => addNote().catch((err) => brandError(err.message)));
document.addEventListener("atelier:settled", pickShownPost);
document.addEventListener("atelier:presets-changed", () => loadPresets());  // evaluation.js made a version the latest
document.addEventListener("atelier:rerender", () => {
  renderPicker();
  renderPresets();
  translateFields();
  renderVersions();
  renderNotes();
  renderNote();
});
loadPresets().then(pickShownPost);  // a reloaded page may show a brand's post
