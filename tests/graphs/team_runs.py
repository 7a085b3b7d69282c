"""Run the team graph in tests and keep what a client would see: final state and events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode

from agentkit.context import AtelierContext
from graphs.team import build_team
from tests.support.fake_models import FakeModels, fake_context

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


@dataclass
class TeamRun:
    """One finished team run."""

    state: dict[str, Any]  # the last `values` chunk: the whole team state
    events: list[dict[str, Any]]  # `custom` mode events of the team and its subgraphs, in order
    ctx: AtelierContext
    tokens: list[tuple[str, str]] = field(default_factory=list)  # (node, token) in messages mode

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """Return the events of one type."""
        return [e for e in self.events if e["type"] == kind]

    @property
    def routes(self) -> list[str]:
        """Return the route events compactly: "route:agent" and "fallback:from>to(reason)"."""
        compact = []
        for event in self.events:
            if event["type"] == "supervisor.route":
                compact.append(f"route:{event['next_agent']}")
            elif event["type"] == "agent.fallback":
                compact.append(f"fallback:{event['from']}>{event['to']}({event['reason']})")
        return compact

    @property
    def fallbacks(self) -> list[tuple[str, str, str]]:
        """Return (from, to, reason) of every agent.fallback event."""
        return [(e["from"], e["to"], e["reason"]) for e in self.of_type("agent.fallback")]

    def routed(self, agent: str) -> int:
        """Return how many supervisor turns sent the run to `agent`."""
        return sum(1 for entry in self.state.get("team_log") or [] if entry["routed"] == agent)


async def run_team(
    models: FakeModels | Any,
    root: Path,
    *,
    ctx: AtelierContext | None = None,
    config: dict[str, Any] | None = None,
    stream_tokens: bool = False,
    **team_input: Any,
) -> TeamRun:
    """Run the team on `team_input` (request defaults to `REQUEST`, 3 images) and collect it all."""
    context = ctx or fake_context(models, root)
    payload = {"request": REQUEST, "image_count": 3, **team_input}
    modes: list[StreamMode] = ["custom", "values"]
    if stream_tokens:
        modes.append("messages")
    run = TeamRun(state={}, events=[], ctx=context)
    # With subgraphs: the tool loops' events (`asset.created`) come from theirs.
    stream: AsyncIterator[Any] = build_team().astream(
        payload,
        context=context,
        config=cast(RunnableConfig, config),
        stream_mode=modes,
        subgraphs=True,
    )
    async for namespace, mode, chunk in stream:
        if mode == "custom":
            run.events.append(chunk)
        elif mode == "values" and not namespace:
            run.state = chunk
        elif mode == "messages":
            message, meta = chunk
            if message.content:
                run.tokens.append((meta.get("langgraph_node", ""), str(message.content)))
    return run
