"""A first page of history that cuts a fork carries both sides (engine/reads.py `history`)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from engine.reads import history, thread_config


class Turns(TypedDict, total=False):
    said: Annotated[list[str], operator.add]


def build() -> Any:
    """Three nodes a run: five checkpoints (input, start, a, b, c), as a short pipeline."""
    builder = StateGraph(Turns)
    for name in ("a", "b", "c"):
        builder.add_node(name, lambda _state, name=name: {"said": [name]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=InMemorySaver())


def ids(states: list[dict[str, Any]]) -> list[str]:
    return [s["checkpoint"]["checkpoint_id"] for s in states]


async def edited_thread() -> tuple[Any, str, str]:
    """Two turns, then the second edited: a fork at the second turn's first checkpoint."""
    graph, tid = build(), "t-1"
    await graph.ainvoke({"said": ["one"]}, thread_config(tid))
    await graph.ainvoke({"said": ["two"]}, thread_config(tid))
    turns = [s async for s in graph.aget_state_history(thread_config(tid))]
    second_input = next(
        s for s in turns if s.metadata["source"] == "input" and s.metadata["step"] > 0
    )
    fork_at = second_input.parent_config
    await graph.ainvoke({"said": ["two, edited"]}, fork_at)
    return graph, tid, fork_at["configurable"]["checkpoint_id"]


async def test_a_cut_fork_brings_its_other_side_along() -> None:
    graph, tid, fork = await edited_thread()

    page = await history(graph, tid, limit=5)

    assert ids(page) == sorted(ids(page), reverse=True)  # still newest first
    children = [s for s in page if (s["parent_checkpoint"] or {}).get("checkpoint_id") == fork]
    assert len(children) == 2  # the edit's line and the original's
    # The original's line is there to its newest state, the second turn's answer.
    answered = ["one", "a", "b", "c", "two", "a", "b", "c"]
    assert any(s["values"]["said"] == answered for s in page)
    newest = [s async for s in graph.aget_state_history(thread_config(tid), limit=5)]
    assert ids(page)[:5] == [s.config["configurable"]["checkpoint_id"] for s in newest]


async def test_later_and_filtered_pages_keep_the_limit() -> None:
    graph, tid, _ = await edited_thread()
    first = await history(graph, tid, limit=4)

    assert len(await history(graph, tid, limit=4, before=ids(first)[3])) == 4
    assert len(await history(graph, tid, limit=4, metadata={"source": "loop"})) == 4


async def test_a_thread_without_forks_answers_exactly_the_limit() -> None:
    graph, tid = build(), "t-2"
    for said in ("one", "two", "three"):
        await graph.ainvoke({"said": [said]}, thread_config(tid))

    assert len(await history(graph, tid, limit=4)) == 4
