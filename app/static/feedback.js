// Atelier console: feedback on a finished post (POST/GET /runs/{run_id}/feedback).
//
// Under a finished post: thumbs up (score 1) or down (score 0) on the key "quality",
// with an optional comment, sent for the run that wrote the post; the entries the
// run already has are listed below. Loaded before console.js, which merges these
// labels into its I18N and calls renderFeedback(runId) when it shows a result; the
// HTTP helpers (api, t, $) are console.js's, used only once the page has loaded.
"use strict";

window.ATELIER_FEEDBACK_LABELS = {
  zh: {
    "feedback.title": "这篇怎么样？", "feedback.up": "👍 满意", "feedback.down": "👎 不满意",
    "feedback.comment": "补充意见（可选）", "feedback.thanks": "已记录，谢谢反馈。",
    "feedback.given": "已有反馈", "feedback.score.up": "👍", "feedback.score.down": "👎",
  },
  en: {
    "feedback.title": "How is this post?", "feedback.up": "👍 Good", "feedback.down": "👎 Not good",
    "feedback.comment": "Comment (optional)", "feedback.thanks": "Recorded, thank you.",
    "feedback.given": "Feedback so far", "feedback.score.up": "👍", "feedback.score.down": "👎",
  },
};

const FEEDBACK_KEY = "quality";
const FEEDBACK_MAX_COMMENT = 4000;  // engine/feedback.py MAX_COMMENT_CHARS

// Show the feedback form of `runId`'s post and the entries it has.
function renderFeedback(runId) {
  const box = $("feedback");
  box.replaceChildren();
  box.hidden = !runId;
  if (!runId) return;
  box.dataset.run = runId;
  const head = document.createElement("strong");
  head.textContent = t("feedback.title");
  const comment = document.createElement("textarea");
  comment.id = "feedback-comment";
  comment.rows = 2;
  comment.maxLength = FEEDBACK_MAX_COMMENT;
  comment.placeholder = t("feedback.comment");
  const row = document.createElement("div");
  row.className = "row";
  const note = document.createElement("span");
  note.id = "feedback-note";
  note.className = "muted small";
  for (const [id, score] of [["up", true], ["down", false]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.id = `feedback-${id}`;
    b.textContent = t(`feedback.${id}`);
    b.addEventListener("click", () => sendFeedback(runId, score, comment, note).catch((err) => showError(err.message)));
    row.append(b);
  }
  row.append(note);
  const list = document.createElement("ul");
  list.id = "feedback-list";
  box.append(head, comment, row, list);
  loadFeedback(runId);
}

async function sendFeedback(runId, score, comment, note) {
  const body = { key: FEEDBACK_KEY, score };
  if (comment.value.trim()) body.comment = comment.value.trim();
  await api("POST", `/runs/${encodeURIComponent(runId)}/feedback`, body);
  comment.value = "";
  note.textContent = t("feedback.thanks");
  await loadFeedback(runId);
}

async function loadFeedback(runId) {
  let entries;
  try {
    entries = await api("GET", `/runs/${encodeURIComponent(runId)}/feedback`);
  } catch {
    return;  // the form still works; the list is a convenience
  }
  const list = $("feedback-list");
  if (!list || $("feedback").dataset.run !== runId) return;  // another post is shown now
  list.replaceChildren();
  if (entries.length) {
    const given = document.createElement("li");
    given.className = "muted small";
    given.textContent = t("feedback.given");
    list.append(given);
  }
  for (const entry of entries) {
    const li = document.createElement("li");
    li.dataset.key = entry.key;
    li.dataset.score = String(entry.score);
    const mark = entry.key === FEEDBACK_KEY ? t(entry.score > 0 ? "feedback.score.up" : "feedback.score.down")
      : `${entry.key}: ${entry.score}`;
    const text = document.createElement("span");
    text.dataset.user = "";
    text.textContent = entry.comment || "";
    li.append(`${formatTime(entry.created_at, true)} · ${mark} `, text);
    list.append(li);
  }
}
