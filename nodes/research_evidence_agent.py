"""The research agent: searches the knowledge vault, then writes the evidence pack.

One turn is a subgraph of the team (`graphs.team.research_loop`): the agent asks for
`search_knowledge` calls, the `research_evidence_tools` node runs them, and the agent
runs again with the results, at most `max_research_tool_rounds` times. The first
round is a forced search, so even a model that never chooses a tool on its own
consults the vault once; later rounds may search again or finish; once the rounds
are spent, or the model answered in prose, the answer is forced to be the
`EvidencePack`. A model that answers the optional offer in prose is not offered it
again in this run (`no_optional_tools`).

`research_tool_rounds` counts the rounds the agent asked for; the agent writes it and
`agentkit.routing.should_continue_research` reads it (`agentkit.state.ResearchState`).
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from agentkit.common import (
    agent_error,
    build_messages,
    clear_agent_error,
    clipped,
    from_transcript,
    ignores_optional_tools,
    mark_ignores_optional_tools,
    parse_tool_call,
    structured_call,
    to_transcript,
    tool_spec,
)
from agentkit.context import AtelierContext, context_of
from agentkit.limits import limits_of
from agentkit.state import ResearchState
from agentkit.tools import search_knowledge
from prompts import research as prompt

AGENT = "research_evidence_agent"
SECTIONS = ("request", "intent", "constraints", "notes", "retry", "brief", "review")


class EvidenceItem(BaseModel):
    """One fact and where it comes from."""

    fact: Annotated[str, clipped(300)] = Field(
        min_length=1, max_length=300, description="The fact."
    )
    source: Annotated[str, clipped(100)] = Field(
        default="常识", max_length=100, description="Note id, 用户请求 or 常识."
    )


class BodyBlock(BaseModel):
    """One section of the post's body: a heading and its key points."""

    heading: Annotated[str, clipped(60)] = Field(
        default="", max_length=60, description="Section heading."
    )
    text: Annotated[str, clipped(400)] = Field(
        min_length=1, max_length=400, description="1–3 sentences."
    )


class EvidencePack(BaseModel):
    """Return the facts the post rests on and the body's sections."""

    summary: Annotated[str, clipped(600)] = Field(
        default="", max_length=600, description="One-paragraph summary."
    )
    items: Annotated[list[EvidenceItem], clipped(12)] = Field(
        default_factory=list, max_length=12, description="Facts with sources."
    )
    body_blocks: Annotated[list[BodyBlock], clipped(8)] = Field(
        default_factory=list, max_length=8, description="Body sections in order."
    )

    def is_empty(self) -> bool:
        """Return whether the pack says nothing at all (an unusable answer)."""
        return not (self.summary.strip() or self.items or self.body_blocks)


def _done(state: ResearchState, pack: EvidencePack) -> dict[str, Any]:
    data = pack.model_dump()
    blocks = data.pop("body_blocks")
    return {
        "evidence_pack": data,
        "body_blocks": blocks,
        "research_messages": None,
        "research_tool_rounds": 0,
        **clear_agent_error(state, AGENT),
    }


async def research_evidence_agent(
    state: ResearchState, runtime: Runtime[AtelierContext]
) -> dict[str, Any]:
    """Search the vault (bounded tool loop), then write `evidence_pack` and `body_blocks`."""
    ctx = context_of(runtime)
    max_rounds = limits_of(state)["max_research_tool_rounds"]
    rounds = int(state.get("research_tool_rounds") or 0)
    loop = from_transcript(state.get("research_messages"))
    model = ctx.models(AGENT)
    shy: dict[str, Any] = {}

    # The first round is a forced search; later ones are an optional offer, skipped for
    # a model that answers such offers in prose.
    if rounds < max_rounds and (rounds == 0 or not ignores_optional_tools(state, AGENT)):
        first = rounds == 0
        task = prompt.SEARCH_TASK if first else prompt.TASK.format(rounds_left=max_rounds - rounds)
        messages = [*build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, task=task), *loop]
        if first:
            search = tool_spec(search_knowledge)
            bound = model.bind_tools([search], tool_choice=search_knowledge.name)
        else:
            bound = model.bind_tools([tool_spec(search_knowledge), tool_spec(EvidencePack)])
        reply = await bound.ainvoke(messages)
        calls = getattr(reply, "tool_calls", None) or []
        if not calls and not first:
            shy = mark_ignores_optional_tools(state, AGENT)
        pack = parse_tool_call(calls, EvidencePack)
        if pack is not None and not pack.is_empty():
            return _done(state, pack)
        searches = [c for c in calls if c.get("name") == search_knowledge.name]
        if searches:
            asked = AIMessage(content=reply.content or "", tool_calls=searches, id=reply.id)
            return {"research_messages": to_transcript([asked]), "research_tool_rounds": rounds + 1}

    # No more searching: the rounds are spent or the model answered in prose.
    messages = [*build_messages(prompt.SYSTEM, state, SECTIONS, AGENT, prompt.FINAL_TASK), *loop]
    pack = await structured_call(model, EvidencePack, messages)
    if pack is None or pack.is_empty():
        return {
            **agent_error(state, AGENT, "no EvidencePack with any content"),
            "research_messages": None,
            "research_tool_rounds": 0,
            **shy,
        }
    return {**_done(state, pack), **shy}
