"""The pipeline graph, assistant `atelier` (PRODUCT.md §1.1).

```
START → planner → rag → executor → critic ─┬─ passed / exhausted / failed → finalize → END
          ↑        ↑                        ├─ retry (attempts left) → rag
          └────────┴─ replan (ignored blocker note, once) ┘
planner ── unknown intent / LLM failure ──→ finalize
planner ── question written ──→ planner (pauses on it: `interrupt()`)
rag ── the input adapts a post (`adapt_from`) ──→ adapter → critic   (instead of the executor)
```

An adaptation (`agentkit.adaptation`) runs the same loop with the writer's
`adapter` node in the executor's place: one writer call per attempt rewrites the
source post for the run's platform, reusing its images where the platform takes
them, and the critic checks it under that platform's rules.

Loop bounds live in state, not in `recursion_limit`: the critic writes
`attempt`, the run's start (`agentkit.run_start`) `max_attempts` (1 +
MAX_RETRY_COUNT), and the critic allows at most `max_replans` replans, so
every run reaches finalize. The longest legal run (a replan, then every retry)
executes 15 supersteps with the defaults, and LangGraph needs one more to see
that nothing is left to run: the smallest `recursion_limit` it needs is
`pipeline_recursion_limit()` = 16. The team runs as a subgraph under its own
bound (`nodes.executor`), so the pipeline's limit does not have to cover the
team's supersteps.

A finished post is revised the LangGraph way. An edit: a state update as the
`executor` (`POST /threads/{t}/state` with `as_node: "executor"` and the new
`generated_content`), then a run with no input continues at the critic. One card
again: a run with `command: {"goto": "redraw_card", "update": {"redraw": {"slot":
n}}}`, or a state update as `finalize` with `{"redraw": {"slot": n}}` and a run
with no input (`finalize → redraw_card` when `redraw` is set); `redraw_card →
critic` (`nodes.redraw_card`). Either way the critic checks the revised post and
finalize publishes it.

Every node is metered (`metered`): the LLM calls made while it runs — the team's
too — are added to the state's `usage` by role (`providers.usage`), which
finalize puts in the result.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentkit.context import AtelierContext
from agentkit.pipeline_routing import (
    route_after_finalize,
    route_after_planner,
    route_after_rag,
    route_from_critic,
)
from agentkit.run_start import starting_run
from agentkit.services import ensure_services
from agentkit.state import PipelineInput, PipelineOutput, PipelineState
from graphs.team import build_team, team_recursion_limit
from nodes.critic import critic
from nodes.executor import make_executor
from nodes.finalize import finalize
from nodes.planner import planner, question_pending
from nodes.rag import rag
from nodes.redraw_card import redraw_card
from nodes.writer_agent import adapt_post
from providers.usage import metering

Node = Callable[..., Awaitable[dict[str, Any]]]


def metered(node: Node, *, draft_source: str | None = None) -> Node:
    """Wrap a pipeline node so its update adds the LLM usage of its calls to `usage`.

    With `draft_source`, the update also says who made the draft the critic judges
    next (the executor: "team"; a person's edit writes none, see `nodes.critic`).
    `functools.wraps` keeps what LangGraph reads off the node: its signature (which
    of runtime / config to pass, forwarded here as keywords) and its closure (the
    executor's team, found there as a subgraph), so the wrapper is one level deep.
    A node interrupted (the planner's question) or failing adds nothing: its update
    is never written. A run given no services gets the default ones first
    (`agentkit.services.ensure_services`), whichever node it starts or resumes at.
    """

    @functools.wraps(node)
    async def run(state: Any, **kwargs: Any) -> dict[str, Any]:
        await ensure_services()
        with metering() as ledger:
            update = await node(state, **kwargs)
        usage = ledger.as_dict()
        if usage:
            update = {**update, "usage": usage}
        if draft_source is not None:
            update = {**update, "draft_source": draft_source}
        return update

    return run


def route_after_planner_step(state: PipelineState) -> Literal["planner", "rag", "finalize"]:
    """Come back to the planner to pause on the question it just wrote, else route on."""
    return "planner" if question_pending(state) else route_after_planner(state)


def pipeline_supersteps(max_retry_count: int = 3, max_replans: int = 1) -> int:
    """Return the supersteps (node runs) of the longest legal pipeline run.

    Every attempt is rag → executor (or adapter) → critic (3 supersteps) and there are at most
    1 + max_retry_count of them; the planner runs once plus once per replan (a
    replan uses up an attempt, it does not add one); finalize runs once.
    """
    return (1 + max_replans) + 3 * (1 + max_retry_count) + 1


def pipeline_recursion_limit(max_retry_count: int = 3, max_replans: int = 1) -> int:
    """Return the smallest `recursion_limit` the longest legal pipeline run needs.

    LangGraph counts one superstep more than the nodes run: the last tick that
    finds nothing left to do (16 with the defaults).
    """
    return pipeline_supersteps(max_retry_count, max_replans) + 1


#: The most retries a deployment can configure (`Settings.max_retry_count`'s bound;
#: tests/graphs/test_pipeline_graph.py keeps the two equal).
MAX_RETRY_COUNT_BOUND = 10


def build_pipeline(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build and compile the pipeline graph (the executor is `graphs.team.build_team()`).

    Args:
        checkpointer: Where checkpoints go; required for the planner's
            clarification interrupt to be resumed. A mapping (a run's config, as
            LangGraph's server passes a one-argument graph factory) is taken as
            "no checkpointer".
        context_schema: What a run's `context` is: `AtelierContext` (the
            services), or `agentkit.context.RunOptions` for LangGraph's own server
            (`graphs.served`), which sends the context as JSON.

    Returns:
        The compiled graph, named "atelier".
    """
    if isinstance(checkpointer, Mapping):
        checkpointer = None
    team = build_team(context_schema=context_schema)
    builder = StateGraph(
        PipelineState,
        context_schema=context_schema,
        input_schema=PipelineInput,
        output_schema=PipelineOutput,
    )
    # A new run's per-run state (counters, history, budget) is reset as it enters the
    # planner, its first node (agentkit.run_start).
    builder.add_node("planner", metered(starting_run(planner)))
    builder.add_node("rag", metered(rag))
    executor = make_executor(team, team_recursion_limit)
    builder.add_node("executor", metered(executor, draft_source="team"))
    builder.add_node("adapter", metered(adapt_post, draft_source="team"))
    builder.add_node("critic", metered(critic))
    builder.add_node("finalize", metered(finalize))
    builder.add_node("redraw_card", metered(redraw_card))

    builder.add_edge(START, "planner")
    builder.add_conditional_edges(
        "planner", route_after_planner_step, ["planner", "rag", "finalize"]
    )
    builder.add_conditional_edges("rag", route_after_rag, ["executor", "adapter"])
    builder.add_edge("executor", "critic")
    builder.add_edge("adapter", "critic")
    builder.add_edge("redraw_card", "critic")
    builder.add_conditional_edges("critic", route_from_critic, ["finalize", "rag", "planner"])
    builder.add_conditional_edges("finalize", route_after_finalize, ["redraw_card", END])
    graph = builder.compile(checkpointer=checkpointer, name="atelier")
    # Whichever server runs the graph (atelier serve, langgraph dev), its safety net
    # is the limit the longest configurable run needs: LangGraph's own default was 25
    # before 1.2 (too low from MAX_RETRY_COUNT 6) and is 10 007 since (a runaway loop
    # would run long). A run's own `recursion_limit` still overrides it.
    return graph.with_config(recursion_limit=pipeline_recursion_limit(MAX_RETRY_COUNT_BOUND))
