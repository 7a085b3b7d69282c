"""The names people read for ids, in every language the console and the CLI speak.

Stages, agents and the other LLM roles, verdicts, fallback reasons and quality
dimensions appear on the stream as ids (`writer_agent`, `needs_improvement`,
`infoDensity`); the console and the CLI show them by name. Those names are declared
here once — an agent's in its `core.agents.AGENT_TABLE` entry — and read by both:
the CLI through `name`, the console as `/console/names.js` (`script`), which the page
loads before its own script. Sentences around the names (an outcome's explanation, a
check's fix-it text) stay with each interface, which words them for its space.

A test ties every catalogue to the ids it names (the pipeline's nodes, `LLM_ROLES`,
`VerdictLabel`, `FallbackReason`, `QUALITY_DIMENSIONS`), so a new id cannot go unnamed.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Literal

from core.agents import AGENT_TABLE, Names

Language = Literal["zh", "en"]
LANGUAGES: tuple[Language, ...] = ("zh", "en")

#: Pipeline nodes (the `stage` of stage events).
STAGES: dict[str, Names] = {
    "planner": Names("规划", "Plan"),
    "rag": Names("知识检索", "Knowledge"),
    "executor": Names("团队创作", "Team"),
    "adapter": Names("改编", "Adapt"),
    "critic": Names("评审", "Review"),
    "finalize": Names("定稿", "Finalize"),
    "redraw_card": Names("重画配图", "Redraw card"),
}

#: LLM roles (usage, models) and supervisor targets: the agents, then the other roles.
AGENTS: dict[str, Names] = {
    **{name: agent.names for name, agent in AGENT_TABLE.items()},
    "planner": Names("规划", "Planner"),
    "supervisor": Names("调度", "Supervisor"),
    "critic": Names("评审", "Critic"),
    "campaign_planner": Names("活动策划", "Campaign planner"),
    "judge": Names("评审模型", "Judge model"),
    "embedding": Names("向量检索", "Embeddings"),
    "FINISH": Names("完成", "Finish"),
    "__end__": Names("完成", "Finish"),
}

#: The critic's verdicts (`core.events.VerdictLabel`).
VERDICTS: dict[str, Names] = {
    "passed": Names("通过", "Passed"),
    "needs_improvement": Names("需改进", "Needs work"),
    "failed": Names("未通过", "Failed"),
    "not_judged": Names("未评审", "Not judged"),
}

#: Why routing corrected the supervisor (`core.events.FallbackReason`).
REASONS: dict[str, Names] = {
    "precondition": Names("前置条件", "precondition"),
    "quality": Names("质量", "quality"),
    "cap": Names("上限", "limit"),
    "invalid_decision": Names("无效决定", "invalid decision"),
}

#: The judge's and the reviewer's quality dimensions (`agentkit.state.QUALITY_DIMENSIONS`).
DIMENSIONS: dict[str, Names] = {
    "infoDensity": Names("信息密度", "Information density"),
    "textImageAlignment": Names("图文匹配", "Text–image match"),
    "styleConsistency": Names("风格一致", "Style consistency"),
    "readability": Names("可读性", "Readability"),
    "platformFit": Names("平台契合", "Platform fit"),
}

#: Each catalogue under the prefix its keys carry (`agent.writer_agent`).
CATALOGUES: dict[str, dict[str, Names]] = {
    "stage": STAGES,
    "agent": AGENTS,
    "verdict": VERDICTS,
    "reason": REASONS,
    "dim": DIMENSIONS,
}


def name(lang: str, kind: str, value: object) -> str:
    """Return the name of an id of a kind (`stage`, `agent`, …) in `lang`; the id when unnamed."""
    names = CATALOGUES.get(kind, {}).get(str(value))
    if names is None:
        return str(value)
    return names.en if lang == "en" else names.zh


@cache
def labels() -> dict[Language, dict[str, str]]:
    """Return every name as `{lang: {"<kind>.<id>": name}}`, the console's label keys."""
    return {
        lang: {
            f"{kind}.{key}": getattr(names, lang)
            for kind, catalogue in CATALOGUES.items()
            for key, names in catalogue.items()
        }
        for lang in LANGUAGES
    }


@cache
def script() -> str:
    """Return the console's `/console/names.js`: the labels as `window.ATELIER_NAMES`."""
    return f"window.ATELIER_NAMES = {json.dumps(labels(), ensure_ascii=False)};\n"
