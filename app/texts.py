"""The command line's words, in both languages, beside `app.names` (the names of ids).

What `atelier run` asks and prints follows the request's language (`request_language`);
`say` fills in one of its phrases, `name_of` names a stage, agent, verdict, reason (by
`app.names`, as the console does) or outcome.
"""

from __future__ import annotations

from typing import Any

from app import names

# What `run` asks and prints follows the request's language: a request with Chinese in
# it gets Chinese (`request_language`), any other English. What models and people wrote
# (the post, the planner's question, feedback) is printed as written.
TEXT: dict[str, dict[str, str]] = {
    "en": {
        "status.stage": "{stage} (attempt {n})",
        "attempt": "── attempt {n}/{max} ──",
        "knowledge": "  knowledge: {n} note(s) injected",
        "step": "  → step {n}: ",
        "fallback": "  ↪ fallback {src} → {dst} ({reason}: {detail})",
        "ignored": "  ⚠ ignored notes {ids} ({severity}): {reason}",
        "critic": "  critic: ",
        "score": " score {score}/{threshold}",
        "judge.unavailable": " (judge unavailable)",
        "judge.skipped": " (nothing to judge)",
        "failed_checks": "  failed checks: {names}",
        "image": "  image {slot}: {url}",
        "not_judged": "not judged",
        "no_title": "(no title)",
        "images": "images",
        "col.slot": "slot",
        "col.file": "file",
        "col.alt": "alt",
        "summary": "outcome [bold]{outcome}[/]  verdict {verdict}  score {score}  "
        "attempts {attempts}",
        "exhausted": "  (retries exhausted)",
        "question": "question",
        "question.fallback": "The planner needs more details.",
        "not_interactive": "(not interactive: continuing with defaults)",
        "choose": "Choose an option's number, or type the details",
        "details": "Details",
        "finished": "finished in {s:.1f} s with {calls} LLM calls",
        "usage": "LLM usage by role",
        "col.role": "role",
        "col.calls": "calls",
        "col.prompt": "prompt tokens",
        "col.completion": "completion tokens",
        "col.seconds": "seconds",
        "total": "total",
        "unknown": "unknown",
        "cancelled": "cancelled",
        "failed": "run failed:",
        "invalid": "invalid input:",
        "ids": "run {run} · thread {thread} (should this process die: atelier run --resume {run})",
        "holder": "process {pid} ({what})",
        "in_use": "DATA_DIR {dir} is in use by {holder}: stop it, or run with another "
        "DATA_DIR (DATA_DIR=… atelier run …)",
    },
    "zh": {
        "status.stage": "{stage}（第 {n} 次尝试）",
        "attempt": "── 第 {n}/{max} 次尝试 ──",
        "knowledge": "  知识库：注入笔记 {n} 条",
        "step": "  → 第 {n} 步：",
        "fallback": "  ↪ 改派 {src} → {dst}（{reason}：{detail}）",
        "ignored": "  ⚠ 忽略了笔记 {ids}（{severity}）：{reason}",
        "critic": "  评审：",
        "score": " 得分 {score}/{threshold}",
        "judge.unavailable": "（评审模型不可用）",
        "judge.skipped": "（没有可评审的内容）",
        "failed_checks": "  未通过的检查：{names}",
        "image": "  图 {slot}：{url}",
        "not_judged": "未评审",
        "no_title": "（无标题）",
        "images": "配图",
        "col.slot": "序号",
        "col.file": "文件",
        "col.alt": "说明",
        "summary": "结果 [bold]{outcome}[/]  评审 {verdict}  得分 {score}  尝试 {attempts} 次",
        "exhausted": "  （重试已用尽）",
        "question": "需要确认",
        "question.fallback": "规划需要更多信息。",
        "not_interactive": "（非交互终端：按默认继续）",
        "choose": "输入选项编号，或直接输入补充细节",
        "details": "补充细节",
        "finished": "用时 {s:.1f} 秒，调用模型 {calls} 次",
        "usage": "各角色的模型用量",
        "col.role": "角色",
        "col.calls": "调用",
        "col.prompt": "输入词元",
        "col.completion": "输出词元",
        "col.seconds": "耗时（秒）",
        "total": "合计",
        "unknown": "未知",
        "cancelled": "已取消",
        "failed": "运行失败：",
        "invalid": "输入无效：",
        "ids": "运行 {run} · 会话 {thread}（进程意外退出后可用 atelier run --resume {run} 继续）",
        "holder": "进程 {pid}（{what}）",
        "in_use": "DATA_DIR {dir} 正被{holder}使用：请先停止它，或换一个 DATA_DIR 运行"
        "（DATA_DIR=… atelier run …）",
        "outcome.completed": "已完成",
        "outcome.exhausted": "未达标",
        "outcome.needs_clarification": "待补充",
        "outcome.failed": "失败",
    },
}


def request_language(request: str) -> str:
    """Return "zh" for a request with Chinese (CJK ideographs) in it, else "en"."""
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in request) else "en"


def say(lang: str, key: str, **values: Any) -> str:
    """Return the CLI's text `key` in `lang` (English when it has none), filled in."""
    text = TEXT.get(lang, TEXT["en"]).get(key, TEXT["en"].get(key, key))
    return text.format(**values) if values else text


def name_of(lang: str, kind: str, value: Any) -> str:
    """Return the name of an id (a stage, agent, verdict, outcome, …) in `lang`.

    Stages, agents, verdicts and reasons are named by `app.names` (the console shows
    the same names); outcomes by `TEXT`. The id itself when it has no name.
    """
    if kind in names.CATALOGUES:
        return names.name(lang, kind, value)
    return TEXT.get(lang, {}).get(f"{kind}.{value}", str(value))
