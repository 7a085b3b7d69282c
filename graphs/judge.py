"""The judge's graphs: the pairwise judge and the post judge (role `judge`, `nodes.judge`).

```
pairwise judge:  START → prepare_pair ─┬─ Send(order ab) → judge_order ─┬→ decide_pair → END
                                       └─ Send(order ba) → judge_order ─┘
judge_order (a subgraph per order):  START → judge_pair_order ⟲ (an unusable answer,
                                     attempts left) → END
post judge:      START → prepare_post → judge_post ⟲ (an unusable answer, attempts left) → END
```

`prepare_*` validate the input (`agentkit.judge_state`) and build the rubric
(`agentkit.rubric`). Each order of a pair is a worker with a loop, so it is a subgraph
of its own state, fanned out with `Send`; only its verdict and its usage cross back.
The loops are bounded in LLM calls: the judging nodes write `attempts`, and the
routers here read it against the input's `max_attempts` (at most
`MAX_JUDGE_ATTEMPTS`): a pair costs at most 2 × max_attempts calls, a post
max_attempts.

Both are ordinary graphs: the run engine can serve them as runs (traced, costed:
every node's LLM usage is added to the state's `usage` by role, `providers.usage`),
and code can call them directly::

    result = await build_pairwise_judge().ainvoke(
        {"brief": {"request": "…"}, "post_a": post_a, "post_b": post_b}, context=ctx
    )

See docs/evaluate-internals.md.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send

from agentkit.context import AtelierContext
from agentkit.judge_state import (
    MAX_JUDGE_ATTEMPTS,
    ORDERS,
    OrderOutput,
    OrderState,
    PairwiseJudgeInput,
    PairwiseJudgeOutput,
    PairwiseState,
    PostJudgeInput,
    PostJudgeOutput,
    PostJudgeState,
)
from agentkit.services import ensure_services
from nodes.judge import decide_pair, judge_pair_order, judge_post, prepare_pair, prepare_post
from providers.usage import metering

Node = Callable[..., Awaitable[dict[str, Any]]]

#: The supersteps of the longest judge run, plus the one LangGraph counts to see that
#: nothing is left: a post judged `MAX_JUDGE_ATTEMPTS` times after its preparation (the
#: pairwise judge's three steps and each order's attempts stay under it).
JUDGE_RECURSION_LIMIT = 1 + MAX_JUDGE_ATTEMPTS + 1


def metered(node: Node) -> Node:
    """Wrap a judge node so its update adds the LLM usage of its calls to `usage`.

    A run given no services gets the default ones first (`ensure_services`), so the
    graphs run from a notebook as the pipeline does. `functools.wraps` keeps the
    node's signature, which LangGraph reads to pass the runtime.
    """

    @functools.wraps(node)
    async def run(state: Any, **kwargs: Any) -> dict[str, Any]:
        await ensure_services()
        with metering() as ledger:
            update = await node(state, **kwargs)
        usage = ledger.as_dict()
        return {**update, "usage": usage} if usage else update

    return run


def fan_out_orders(state: PairwiseState) -> list[Send]:
    """Send the pair to one order's judge per order: post a first (`ab`), post b first (`ba`)."""
    texts = {"a": state["post_a_text"], "b": state["post_b_text"]}
    return [
        Send(
            "judge_order",
            {
                "order": order,
                "brief": state["brief"],
                "rubric": state["rubric"],
                "post_1": texts[order[0]],
                "post_2": texts[order[1]],
                "max_attempts": state["max_attempts"],
            },
        )
        for order in ORDERS
    ]


def route_order_judge(state: OrderState) -> Literal["judge_pair_order", "__end__"]:
    """Ask again while the order has no verdict and attempts are left; else end."""
    if state.get("verdicts") or int(state.get("attempts") or 0) >= int(
        state.get("max_attempts") or 1
    ):
        return "__end__"
    return "judge_pair_order"


def route_post_judge(state: PostJudgeState) -> Literal["judge_post", "__end__"]:
    """Ask again while the post has no judgement and attempts are left; else end."""
    if state.get("status") or int(state.get("attempts") or 0) >= int(
        state.get("max_attempts") or 1
    ):
        return "__end__"
    return "judge_post"


def build_order_judge(
    *, context_schema: type[Any] = AtelierContext
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build one order's judge: ask until there is a usable answer or no attempt is left."""
    builder = StateGraph(OrderState, context_schema=context_schema, output_schema=OrderOutput)
    builder.add_node("judge_pair_order", metered(judge_pair_order))
    builder.add_edge(START, "judge_pair_order")
    builder.add_conditional_edges("judge_pair_order", route_order_judge, ["judge_pair_order", END])
    return builder.compile(name="judge_order")


def _checkpointer(value: Any) -> BaseCheckpointSaver[Any] | None:
    # A mapping is a run's config (LangGraph's server calls a one-argument factory so).
    return None if isinstance(value, Mapping) else value


def build_pairwise_judge(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build and compile the pairwise judge (`PairwiseJudgeInput` → `PairwiseJudgeOutput`).

    Args:
        checkpointer: Where checkpoints go. A run resumed after a crash keeps what
            was done: an order with its verdict is not asked again, and an order
            stopped between attempts resumes after its last one.
        context_schema: What a run's `context` is (`AtelierContext`: the services).

    Returns:
        The compiled graph, named "pairwise_judge".
    """
    builder = StateGraph(
        PairwiseState,
        context_schema=context_schema,
        input_schema=PairwiseJudgeInput,
        output_schema=PairwiseJudgeOutput,
    )
    builder.add_node("prepare_pair", metered(prepare_pair))
    builder.add_node("judge_order", build_order_judge(context_schema=context_schema))
    builder.add_node("decide_pair", decide_pair)
    builder.add_edge(START, "prepare_pair")
    builder.add_conditional_edges("prepare_pair", fan_out_orders, ["judge_order"])
    builder.add_edge("judge_order", "decide_pair")
    builder.add_edge("decide_pair", END)
    graph = builder.compile(checkpointer=_checkpointer(checkpointer), name="pairwise_judge")
    return graph.with_config(recursion_limit=JUDGE_RECURSION_LIMIT)


def build_post_judge(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    *,
    context_schema: type[Any] = AtelierContext,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build and compile the post judge (`PostJudgeInput` → `PostJudgeOutput`).

    Args:
        checkpointer: Where checkpoints go.
        context_schema: What a run's `context` is (`AtelierContext`: the services).

    Returns:
        The compiled graph, named "post_judge".
    """
    builder = StateGraph(
        PostJudgeState,
        context_schema=context_schema,
        input_schema=PostJudgeInput,
        output_schema=PostJudgeOutput,
    )
    builder.add_node("prepare_post", metered(prepare_post))
    builder.add_node("judge_post", metered(judge_post))
    builder.add_edge(START, "prepare_post")
    builder.add_edge("prepare_post", "judge_post")
    builder.add_conditional_edges("judge_post", route_post_judge, ["judge_post", END])
    graph = builder.compile(checkpointer=_checkpointer(checkpointer), name="post_judge")
    return graph.with_config(recursion_limit=JUDGE_RECURSION_LIMIT)
