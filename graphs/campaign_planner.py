"""The campaign planner graph: a brief → as many distinct topics as posts (docs/platforms.md).

```
START → campaign_planner ─┬─ topics missing, rounds left → campaign_planner
                          └─ all there / no rounds left / model failed → finish → END
```

A graph of its own, built like the pipeline (a factory, `AtelierContext`, every
node metered into `usage`), so the run engine can run it as an ordinary run —
traced, costed, checkpointed. Its input is `agentkit.campaign_plan.CampaignPlanInput`
(validate a run's input with `CampaignPlanRequest`), its output `result`:
``{outcome: completed | failed, items: [{index, topic, angle, key_points,
first_platform}], message, rounds, max_rounds, rejected: [{round, topic, reason}]}``.

The loop is bounded in state, not by `recursion_limit`: the node counts `rounds`
and the router stops at `MAX_PLAN_ROUNDS`, so a plan costs at most that many LLM
calls (of the `campaign_planner` role); the compiled graph's recursion limit is the
longest legal run plus one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentkit.campaign_plan import (
    MAX_PLAN_ROUNDS,
    CampaignPlanInput,
    CampaignPlanOutput,
    CampaignPlanState,
)
from agentkit.context import AtelierContext
from graphs.pipeline import metered
from nodes.campaign_planner import campaign_planner, finish_plan


def route_campaign_plan(state: Mapping[str, Any]) -> Literal["campaign_planner", "finish"]:
    """Ask again while topics are missing and rounds are left; else finish."""
    if state.get("failure"):
        return "finish"
    if len(state.get("accepted") or []) >= int(state.get("posts") or 0):
        return "finish"
    if int(state.get("rounds") or 0) >= MAX_PLAN_ROUNDS:
        return "finish"
    return "campaign_planner"


def campaign_plan_recursion_limit() -> int:
    """Return the smallest `recursion_limit` the longest plan needs (every round, finish, +1)."""
    return MAX_PLAN_ROUNDS + 1 + 1


def build_campaign_planner(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build and compile the campaign planner graph, named "campaign_planner".

    Args:
        checkpointer: Where checkpoints go (a mapping — a server's config — counts
            as none, as for `graphs.pipeline.build_pipeline`).
        context_schema: What a run's `context` is.
    """
    if isinstance(checkpointer, Mapping):
        checkpointer = None
    builder = StateGraph(
        CampaignPlanState,
        context_schema=context_schema,
        input_schema=CampaignPlanInput,
        output_schema=CampaignPlanOutput,
    )
    builder.add_node("campaign_planner", metered(campaign_planner))
    builder.add_node("finish", metered(finish_plan))
    builder.add_edge(START, "campaign_planner")
    builder.add_conditional_edges(
        "campaign_planner", route_campaign_plan, ["campaign_planner", "finish"]
    )
    builder.add_edge("finish", END)
    graph = builder.compile(checkpointer=checkpointer, name="campaign_planner")
    return graph.with_config(recursion_limit=campaign_plan_recursion_limit())
