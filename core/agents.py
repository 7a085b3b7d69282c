"""The executor team's agents, declared once (PRODUCT.md §1.2).

Everything else that names the agents is derived from this module:

- `AgentName` (the one `Literal` of their names) and `AGENTS` (its tuple, by
  `typing.get_args`, so the two cannot drift apart);
- `core.settings.LLM_ROLES` (every agent asks an LLM under its own name);
- `agentkit.routing.SupervisorTarget`, preconditions and stage checks;
- `graphs.team`'s wiring: an agent whose turn is one node (`simple`) is wired
  from here; its node is the function named like the agent in `nodes/<name>.py`,
  imported by name into `graphs.team.AGENT_NODES` (a test ties that list to this one);
- `nodes.supervisor`'s stage table and `prompts.supervisor`'s roster and
  dependency rules, rendered from `AGENT_TABLE`;
- `app.names`, the names people read in the console and the CLI (`Agent.names`).

It lives in `core` (which imports nothing of graphs, nodes or app) because the
settings need the role names and must not import the graphs.

Adding an agent starts here: docs/architecture.md, "Agents", lists the files it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

#: The agents, in the order a post is normally made. The order is also the
#: fallback order: "the first stage whose output is missing" walks it.
AgentName = Literal[
    "brief_compiler_agent",
    "research_evidence_agent",
    "reference_intelligence_agent",
    "layout_planner_agent",
    "image_planner_agent",
    "writer_agent",
    "image_agent",
    "review_agent",
]

#: `AgentName`'s values as a tuple, in its order.
AGENTS: tuple[AgentName, ...] = get_args(AgentName)


class Names(NamedTuple):
    """What a person reads for an id, in each language the console and the CLI speak."""

    zh: str
    en: str


@dataclass(frozen=True)
class Agent:
    """One agent of the team: what it produces, what it needs, how the supervisor sees it."""

    name: AgentName
    names: Names  # its name for people (the console, the CLI: `app.names`)
    duty: str  # the line of the supervisor prompt's roster (prompts.supervisor)
    output: str  # the state field it produces, shown in the supervisor's stage table
    output_label: str  # that artefact's name in the supervisor prompt's dependency rules
    done_when: str  # the state field (dotted path) whose presence marks its stage done
    needs: AgentName | None = None  # the agent whose output it needs first (precondition)
    simple: bool = True  # its turn is one node that hands straight back to the supervisor


#: The agents, in `AGENTS` order. LLM role = node name = agent name.
AGENT_TABLE: dict[AgentName, Agent] = {
    agent.name: agent
    for agent in (
        Agent(
            name="brief_compiler_agent",
            names=Names("简报整理", "Brief compiler"),
            duty="整理创作简报（主题、受众、目标、约束、关键词）",
            output="creative_brief",
            output_label="创作简报",
            done_when="creative_brief",
        ),
        Agent(
            name="research_evidence_agent",
            names=Names("资料研究", "Researcher"),
            duty="检索知识库，整理事实证据和正文要点",
            output="evidence_pack",
            output_label="事实证据",
            done_when="evidence_pack",
            simple=False,  # a knowledge-search tool loop
        ),
        Agent(
            name="reference_intelligence_agent",
            names=Names("参考分析", "Reference analyst"),
            duty="分析参考图与参考文本的风格、配色、版式",
            output="reference_analyses",
            output_label="风格分析",
            done_when="reference_analyses",
        ),
        Agent(
            name="layout_planner_agent",
            names=Names("版式规划", "Layout planner"),
            duty="规划图文版式（封面、文字段、配图）",
            output="layout_spec",
            output_label="版式",
            done_when="layout_spec",
        ),
        Agent(
            name="image_planner_agent",
            names=Names("配图规划", "Image planner"),
            duty="为每张图写出图片计划",
            output="image_plans",
            output_label="图片计划",
            done_when="image_plans",
        ),
        Agent(
            name="writer_agent",
            names=Names("写作", "Writer"),
            duty="撰写标题、正文、标签",
            output="generated_content",
            output_label="正文",
            done_when="generated_content.body",
            needs="brief_compiler_agent",
        ),
        Agent(
            name="image_agent",
            names=Names("配图", "Illustrator"),
            duty="按图片计划生成图片",
            output="generated_image_asset_ids",
            output_label="图片",
            done_when="images_complete",
            needs="image_planner_agent",
            simple=False,  # a generate_image tool loop
        ),
        Agent(
            name="review_agent",
            names=Names("审稿", "Reviewer"),
            duty="审核内容并按五个维度打分",
            output="review_feedback",
            output_label="审核意见",
            # Counts only for the draft it judged (agentkit.routing.stage_done).
            done_when="review_feedback",
            needs="writer_agent",
            simple=False,  # may end the team itself
        ),
    )
}

if tuple(AGENT_TABLE) != AGENTS:  # pragma: no cover - a declaration error, caught at import
    raise RuntimeError("AGENT_TABLE must list every AgentName once, in AgentName's order")
