// Atelier console: the keys page, for admins (docs/keys.md).
//
// Loaded after console.js, whose helpers it uses (I18N, t, $, api, lang, formatTime).
// GET /keys/me says who the console's key is: the panel shows only to an admin of a
// keyed service (open mode has no managed keys). It lists the keys (GET /keys), makes
// one (POST /keys) and shows its secret and webhook secret this once, changes a key's
// role at once (PATCH role) and its name, expiry and quotas with the form (PATCH), gives
// it a new webhook secret (shown once) and revokes it (DELETE, after a confirmation).
// console.js dispatches `atelier:rerender` on a language switch.
"use strict";

Object.assign(I18N.zh, {
  "keys.title": "密钥管理", "keys.hint": "为同事和客户发放密钥：每把密钥有自己的作品、预设和定时任务。",
  "keys.empty": "还没有发放密钥。", "keys.new": "新建密钥", "keys.name": "名称", "keys.role": "角色",
  "keys.expires": "到期时间（可选）", "keys.quotas": "配额（留空 = 默认；0 = 禁止）",
  "keys.create": "创建", "keys.save": "保存", "keys.cancel": "取消", "keys.edit": "修改",
  "keys.rotate": "更换回调签名密钥", "keys.revoke": "吊销", "keys.confirm": "吊销这把密钥？它的定时任务会暂停，待发送的回调会取消。",
  "keys.secret": "密钥（只显示这一次，请立即保存）：", "keys.webhook_secret": "回调签名密钥（只显示这一次）：",
  "keys.done": "我已保存", "keys.created": "已创建密钥。", "keys.saved": "已保存。", "keys.revoked_note": "已吊销：暂停定时任务 {c} 个，取消回调 {d} 个。",
  "keys.editing": "修改：", "keys.prefix": "前缀", "keys.never": "永不过期", "keys.until": "到期：{d}", "keys.used": "最近使用：{d}", "keys.unused": "尚未使用",
  "keys.need_name": "请填写名称。",
  "key_role.admin": "管理员", "key_role.member": "成员", "key_role.read-only": "只读",
  "key_state.active": "有效", "key_state.revoked": "已吊销", "key_state.expired": "已过期",
  "quota.runs_at_once": "同时运行数", "quota.runs_per_minute": "每分钟运行数", "quota.crons": "定时任务数",
  "quota.assistants": "预设数", "quota.store_bytes": "存储字节数", "quota.monthly_spend": "每月花费上限",
});
Object.assign(I18N.en, {
  "keys.title": "Keys", "keys.hint": "Give colleagues and clients keys: each key has its own posts, presets and schedules.",
  "keys.empty": "No keys yet.", "keys.new": "New key", "keys.name": "Name", "keys.role": "Role",
  "keys.expires": "Expires (optional)", "keys.quotas": "Quotas (empty = default; 0 = none allowed)",
  "keys.create": "Create", "keys.save": "Save", "keys.cancel": "Cancel", "keys.edit": "Edit",
  "keys.rotate": "New webhook secret", "keys.revoke": "Revoke", "keys.confirm": "Revoke this key? Its schedules pause and its pending webhook deliveries are cancelled.",
  "keys.secret": "The key (shown this once, save it now):", "keys.webhook_secret": "Its webhook signing secret (shown this once):",
  "keys.done": "I saved it", "keys.created": "Key created.", "keys.saved": "Saved.", "keys.revoked_note": "Revoked: {c} schedule(s) paused, {d} delivery(ies) cancelled.",
  "keys.editing": "Editing: ", "keys.prefix": "Prefix", "keys.never": "Never expires", "keys.until": "Expires {d}", "keys.used": "Last used {d}", "keys.unused": "Never used",
  "keys.need_name": "Give it a name.",
  "key_role.admin": "Admin", "key_role.member": "Member", "key_role.read-only": "Read-only",
  "key_state.active": "Active", "key_state.revoked": "Revoked", "key_state.expired": "Expired",
  "quota.runs_at_once": "Runs at once", "quota.runs_per_minute": "Runs per minute", "quota.crons": "Schedules",
  "quota.assistants": "Presets", "quota.store_bytes": "Store bytes", "quota.monthly_spend": "Monthly spend cap",
});

const KEY_ROLES = ["admin", "member", "read-only"];
const QUOTA_NAMES = ["runs_at_once", "runs_per_minute", "crons", "assistants", "store_bytes", "monthly_spend"];

let keys = [];
let editingKey = null;  // the key the form changes; null: the form makes a new one
let keysNote = null;    // [label, values] of the note shown, drawn again on a language switch

// ---------------------------------------------------------------- the panel

async function loadMe() {
  let me;
  try {
    me = await api("GET", "/keys/me");
  } catch {
    return;  // an older server, or no key yet: no keys page
  }
  const admin = me.role === "admin" && me.auth === "api_key";
  $("keys").hidden = !admin;
  if (admin) await loadKeys();
}

async function loadKeys() {
  try {
    keys = (await api("GET", "/keys?limit=200")).items;
  } catch (err) {
    showKeysError(err.message);
    return;
  }
  renderKeys();
}

function showKeysError(message) {
  $("keys-error").textContent = message;
  $("keys-error").hidden = !message;
}

function showKeysNote(label, values = {}) {
  keysNote = label ? [label, values] : null;
  $("keys-note").textContent = label ? t(label, values) : "";
  $("keys-note").hidden = !label;
}

function renderKeys() {
  const list = $("keys-list");
  list.replaceChildren();
  for (const key of keys) {
    const li = document.createElement("li");
    li.dataset.key = key.key_id;
    li.dataset.state = key.state;
    const name = document.createElement("span");
    name.className = "title";
    name.dataset.user = "";
    name.textContent = key.name;
    const prefix = document.createElement("code");
    prefix.dataset.user = "";  // the secret's first characters, as issued
    prefix.textContent = `${key.prefix}…`;
    prefix.title = key.key_id;
    const state = document.createElement("span");
    state.className = `badge ${key.state}`;
    state.textContent = t(`key_state.${key.state}`);
    const role = document.createElement("select");
    role.className = "role";
    role.setAttribute("aria-label", t("keys.role"));
    for (const value of KEY_ROLES) {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = t(`key_role.${value}`);
      role.append(option);
    }
    role.value = key.role;
    role.disabled = key.state === "revoked";
    role.addEventListener("change", () => changeKey(key.key_id, { role: role.value }).catch((err) => showKeysError(err.message)));
    const meta = document.createElement("span");
    meta.className = "muted small";
    meta.textContent = [
      key.expires_at ? t("keys.until", { d: formatTime(key.expires_at, true) }) : t("keys.never"),
      key.last_used_at ? t("keys.used", { d: formatTime(key.last_used_at, true) }) : t("keys.unused"),
      ...Object.entries(key.quotas).map(([quota, value]) => `${t(`quota.${quota}`)} ${value ?? "∞"}`),
    ].join(" · ");
    li.append(name, state, prefix, role, meta);
    if (key.state !== "revoked") {
      for (const [cls, label, action] of [
        ["edit", "keys.edit", () => editKey(key)],
        ["rotate", "keys.rotate", () => rotateSecret(key.key_id)],
        ["revoke", "keys.revoke", () => revokeKey(key.key_id)],
      ]) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = `link ${cls}`;
        button.textContent = t(label);
        button.addEventListener("click", () => Promise.resolve(action()).catch((err) => showKeysError(err.message)));
        li.append(button);
      }
    }
    list.append(li);
  }
  $("keys-empty").hidden = keys.length > 0;
}

function renderQuotaFields() {
  const box = $("key-quotas");
  const values = Object.fromEntries([...box.querySelectorAll("input")].map((el) => [el.name, el.value]));
  box.replaceChildren();
  for (const quota of QUOTA_NAMES) {
    const label = document.createElement("label");
    const span = document.createElement("span");
    span.textContent = t(`quota.${quota}`);
    const input = document.createElement("input");
    input.type = "number";
    input.min = "0";
    input.step = quota === "monthly_spend" ? "0.01" : "1";
    input.name = quota;
    input.value = values[quota] ?? "";
    label.append(span, input);
    box.append(label);
  }
}

// ---------------------------------------------------------------- the form

function formBody() {
  const body = { name: $("key-name").value.trim(), role: $("key-role").value };
  const expires = $("key-expires").value;
  body.expires_at = expires ? new Date(expires).toISOString() : null;
  const quotas = {};
  for (const input of $("key-quotas").querySelectorAll("input")) {
    if (input.value.trim() !== "") quotas[input.name] = Number(input.value);
  }
  body.quotas = quotas;
  return body;
}

function resetForm() {
  editingKey = null;
  $("key-form").reset();
  $("key-role").value = "member";
  for (const input of $("key-quotas").querySelectorAll("input")) input.value = "";
  $("key-form-title").textContent = t("keys.new");
  $("key-form-name").textContent = "";
  $("key-submit").textContent = t("keys.create");
  $("key-form-cancel").hidden = true;
}

function editKey(key) {
  editingKey = key.key_id;
  $("key-name").value = key.name;
  $("key-role").value = key.role;
  $("key-expires").value = key.expires_at ? localInput(key.expires_at) : "";
  for (const input of $("key-quotas").querySelectorAll("input")) {
    const value = key.quotas[input.name];
    input.value = value === undefined || value === null ? "" : String(value);
  }
  $("key-form-title").textContent = t("keys.editing");
  $("key-form-name").textContent = key.name;
  $("key-submit").textContent = t("keys.save");
  $("key-form-cancel").hidden = false;
  $("key-name").focus();
}

// An ISO time as a datetime-local input's value (local time, to the minute).
function localInput(iso) {
  const at = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

async function submitKey() {
  showKeysError("");
  showKeysNote(null);
  const body = formBody();
  if (!body.name) { showKeysError(t("keys.need_name")); return; }
  $("key-submit").disabled = true;
  try {
    if (editingKey) {
      await changeKey(editingKey, body);
      showKeysNote("keys.saved");
    } else {
      const made = await api("POST", "/keys", body);
      showSecrets(made.key, made.webhook_secret);
      showKeysNote("keys.created");
      await loadKeys();
    }
    resetForm();
  } catch (err) {
    showKeysError(err.message);  // the 422 names the field and the rule
  } finally {
    $("key-submit").disabled = false;
  }
}

async function changeKey(keyId, changes) {
  await api("PATCH", `/keys/${keyId}`, changes);
  await loadKeys();
}

async function rotateSecret(keyId) {
  const rotated = await api("POST", `/keys/${keyId}/webhook-secret`);
  showSecrets(null, rotated.webhook_secret);
}

async function revokeKey(keyId) {
  if (!confirm(t("keys.confirm"))) return;
  const revoked = await api("DELETE", `/keys/${keyId}`);
  showKeysNote("keys.revoked_note", { c: revoked.crons_paused, d: revoked.deliveries_cancelled });
  if (editingKey === keyId) resetForm();
  await loadKeys();
}

// The secrets of a key just made (or a new webhook secret): shown once, then forgotten.
function showSecrets(secret, webhookSecret) {
  $("key-secret-row").hidden = !secret;
  $("key-secret-value").textContent = secret || "";
  $("key-webhook-secret-value").textContent = webhookSecret || "";
  $("key-secrets").hidden = false;
}

function hideSecrets() {
  $("key-secret-value").textContent = "";
  $("key-webhook-secret-value").textContent = "";
  $("key-secrets").hidden = true;
}

function rerenderKeys() {
  renderQuotaFields();
  if (keysNote) showKeysNote(...keysNote);
  if (!editingKey) {
    $("key-form-title").textContent = t("keys.new");
    $("key-submit").textContent = t("keys.create");
  } else {
    $("key-form-title").textContent = t("keys.editing");
    $("key-submit").textContent = t("keys.save");
  }
  renderKeys();
}

// ---------------------------------------------------------------- wiring

translatePage();  // console.js translated the page before these labels were known
renderQuotaFields();
rerenderKeys();
$("key-form").addEventListener("submit", (event) => { event.preventDefault(); submitKey(); });
$("key-form-cancel").addEventListener("click", resetForm);
$("key-secrets-done").addEventListener("click", hideSecrets);
document.addEventListener("atelier:rerender", rerenderKeys);
loadMe();
