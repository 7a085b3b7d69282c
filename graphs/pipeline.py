"""The pipeline graph, assistant `atelier` (PRODUCT.md §1.1).

```
START → planner → rag → executor → critic ─┬─ passed / exhausted / failed → finalize → END
          ↑        ↑                        ├─ retry (attempts left) → rag
          └────────┴─ replan (ignored blocker note, once) ┘
planner ── unknown intent / LLM failure ──→ finalize
```

Loop bounds live in state, not in `recursion_limit`: the critic writes
`attempt`, the run's start (`graphs.run_start`) `max_attempts` (1 +
MAX_RETRY_COUNT), and the critic allows at most `max_replans` replans, so
every run reaches finalize. The longest legal run (a replan, then every retry)
executes 15 supersteps with the defaults, and LangGraph needs one more to see
that nothing is left to run: the smallest `recursion_limit` it needs is
`pipeline_recursion_limit()` = 16. The team runs as a subgraph under its own
bound (`nodes.executor`), so the pipeline's limit does not have to cover the
team's supersteps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from graphs.context import AtelierContext
from graphs.pipeline_routing import route_after_planner, route_from_critic
from graphs.run_start import starting_run
from graphs.state import PipelineInput, PipelineOutput, PipelineState
from graphs.team import build_team, team_recursion_limit
from nodes.critic import critic
from nodes.executor import make_executor
from nodes.finalize import finalize
from nodes.planner import planner
from nodes.rag import rag


def pipeline_supersteps(max_retry_count: int = 3, max_replans: int = 1) -> int:
    """Return the supersteps (node runs) of the longest legal pipeline run.

    Every attempt is rag → executor → critic (3 supersteps) and there are at most
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
            services), or `graphs.context.RunOptions` for LangGraph's own server
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
    # planner, its first node (graphs.run_start).
    builder.add_node("planner", starting_run(planner))
    builder.add_node("rag", rag)
    builder.add_node("executor", make_executor(team, team_recursion_limit))
    builder.add_node("critic", critic)
    builder.add_node("finalize", finalize)

    builder.add_edge(START, "planner")
    builder.add_conditional_edges("planner", route_after_planner, ["rag", "finalize"])
    builder.add_edge("rag", "executor")
    builder.add_edge("executor", "critic")
    builder.add_conditional_edges("critic", route_from_critic, ["finalize", "rag", "planner"])
    builder.add_edge("finalize", END)
    graph = builder.compile(checkpointer=checkpointer, name="atelier")
    # Whichever server runs the graph (atelier serve, langgraph dev), its safety net
    # is the limit the longest configurable run needs: LangGraph's own default was 25
    # before 1.2 (too low from MAX_RETRY_COUNT 6) and is 10 007 since (a runaway loop
    # would run long). A run's own `recursion_limit` still overrides it.
    return graph.with_config(recursion_limit=pipeline_recursion_limit(MAX_RETRY_COUNT_BOUND))
