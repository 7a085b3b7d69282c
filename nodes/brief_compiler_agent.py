"""The brief compiler: turns the request into the creative brief every other agent works from."""

from __future__ import annotations

from typing import Annotated, Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.common import (
    agent_error,
    build_messages,
    clear_agent_error,
    clipped,
    parse_constraints,
    structured_call,
)
from agentkit.context import AtelierContext, context_of
from agentkit.state import TeamState
from prompts import brief_compiler as prompt

AGENT = "brief_compiler_agent"
SECTIONS = ("request", "intent", "constraints", "notes", "retry")


# The brief's fields the model writes: the critic's deviation check reads only these
# of the brief (`agentkit.post.BRIEF_WRITTEN_FIELDS`, which a test ties to them).
class CreativeBrief(BaseModel):
    """Return the creative brief of the post."""

    topic: Annotated[str, clipped(200)] = Field(
        min_length=1, max_length=200, description="Topic, one sentence."
    )
    audience: Annotated[str, clipped(200)] = Field(
        default="", max_length=200, description="Target audience."
    )
    goal: Annotated[str, clipped(300)] = Field(
        default="", max_length=300, description="What the post should achieve."
    )
    constraints: Annotated[list[str], clipped(12)] = Field(
        default_factory=list, max_length=12, description="Rules the post must follow."
    )
    keywords: Annotated[list[str], clipped(8)] = Field(
        default_factory=list, max_length=8, description="3–8 keywords."
    )


def house_rules(state: TeamState) -> list[str]:
    """Return the rules a brief must carry whatever the model wrote.

    Blocker notes from the vault and the planner's must-include / must-avoid
    terms are binding on the whole team, so they are copied into the brief by
    code rather than left to the model to remember.

    Design: they go in the brief's own `house_rules` field, apart from the
    `constraints` the model wrote (a rule the model already wrote is not repeated).
    Every agent that reads the brief sees them in its prompt, but the critic's
    deviation check, which asks whether the team *acted on* each injected note,
    reads only the brief's fields the model writes (`agentkit.post.BRIEF_WRITTEN_FIELDS`):
    a copy made by code would otherwise mark every blocker addressed whatever the
    agents did, and an ignored blocker could never send the run back to the planner
    (`nodes.critic.team_actions`).
    """
    rules = [
        str(note.get("content", "")).strip()
        for note in state.get("knowledge_notes") or []
        if note.get("type") == "blocker" and note.get("content")
    ]
    constraints = parse_constraints(state.get("constraints"))
    if constraints.must_include:
        rules.append("必须包含：" + "、".join(constraints.must_include))
    if constraints.must_avoid:
        rules.append("不能出现：" + "、".join(constraints.must_avoid))
    return rules


async def brief_compiler_agent(
    state: TeamState, runtime: Runtime[AtelierContext]
) -> dict[str, Any]:
    """Write `creative_brief` {topic, audience, goal, constraints, keywords, house_rules}."""
    ctx = context_of(runtime)
    messages = build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=prompt.TASK)
    brief = await structured_call(ctx.models(AGENT), CreativeBrief, messages)
    if brief is None or not brief.topic.strip():
        return agent_error(state, AGENT, "no CreativeBrief with a topic")
    data = brief.model_dump()
    data["audience"] = data["audience"] or state.get("audience") or ""
    written = [c.strip() for c in data["constraints"] if c.strip()]
    data["constraints"] = written
    data["house_rules"] = [r for r in house_rules(state) if r not in written]
    data["keywords"] = [k.strip() for k in data["keywords"] if k.strip()]
    return {"creative_brief": data, **clear_agent_error(state, AGENT)}
