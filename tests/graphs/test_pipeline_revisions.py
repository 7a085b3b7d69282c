"""Revising a finished post through the real pipeline: an edit, one card drawn again.

Both go through LangGraph's own entry points, as the HTTP API does: a state update as
a node (`aupdate_state`) and a run that continues, or a run with a `Command`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from graphs.pipeline import build_pipeline
from tests.graphs.pipeline_runs import (
    REQUEST,
    context_for,
    judge_reply,
    models_for,
    run_pipeline,
)

EDITED = {"title": "我改过的标题", "body": "我重写的正文，把成分讲清楚。" * 5, "tags": ["护肤"]}


async def _exhausted_thread(tmp_path: Path) -> tuple[Any, Any, dict[str, Any], Any]:
    """Run to exhaustion with the second attempt the best (0.85); then the judge says 0.6."""
    scores = [0.7, 0.85, 0.8, 0.75, 0.6, 0.6, 0.6]
    models = models_for([judge_reply("needs_improvement", s) for s in scores], images=2)
    titles = iter(f"平价护肤第{n}版" for n in range(1, 5))
    models.script("writer_agent", lambda _m: f"# {next(titles)}\n\n{'成分讲清楚。' * 10}\n\n#护肤")
    ctx = context_for(models, tmp_path, critic_pass_threshold=0.9)
    graph = build_pipeline(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "revisions"}}
    run = await run_pipeline(models, tmp_path, ctx=ctx, graph=graph, config=config, image_count=2)
    assert run.result["outcome"] == "exhausted"
    assert run.result["post"]["title"] == "平价护肤第2版"  # the best attempt, not the last
    return graph, config, run.result, ctx


async def test_after_an_edit_on_an_exhausted_thread_the_edit_is_published(tmp_path: Path) -> None:
    graph, config, before, ctx = await _exhausted_thread(tmp_path)
    # Finalize put the published (second) attempt back as the draft: an edit starts there.
    values = (await graph.aget_state(config)).values
    assert values["generated_content"]["title"] == "平价护肤第2版"
    assert [i["asset_id"] for i in values["images"]] == [i["asset_id"] for i in before["images"]]

    await graph.aupdate_state(config, {"generated_content": EDITED}, as_node="executor")
    async for _ in graph.astream(None, config, context=ctx):  # no input: continue at the critic
        pass
    after = (await graph.aget_state(config)).values["result"]
    assert after["post"]["title"] == "我改过的标题"  # not attempt 2, which scored 0.85
    assert after["revision"] == "edit" and after["quality"]["score"] == 0.6
    assert after["images"] == before["images"]  # the cards the person saw
    assert [a["source"] for a in after["attempts"]][-1] == "edit"
    assert humans(await graph.aget_state(config)) == [REQUEST]  # the edit asked nothing new


async def test_a_card_of_the_published_attempt_is_drawn_again_alone(tmp_path: Path) -> None:
    graph, config, before, ctx = await _exhausted_thread(tmp_path)
    cover, card = before["images"]

    events: list[dict[str, Any]] = []
    command = Command(goto="redraw_card", update={"redraw": {"slot": 2}})
    async for chunk in graph.astream(command, config, context=ctx, stream_mode="custom"):
        events.append(chunk)
    after = (await graph.aget_state(config)).values
    result = after["result"]
    assert result["post"] == before["post"]  # the published attempt's post, untouched
    new_cover, new_card = result["images"]
    assert new_cover == cover and new_card["asset_id"] != card["asset_id"]
    assert result["revision"] == "card" and after["redraw"] is None
    stages = [e["stage"] for e in events if e["type"] == "stage.started"]
    assert stages == ["redraw_card", "critic", "finalize"]
    assert [e["slot"] for e in events if e["type"] == "asset.created"] == [2]
    assert humans(await graph.aget_state(config)) == [REQUEST]  # nor did the redraw


def humans(snapshot: Any) -> list[str]:
    """Return the text of each human message of a thread's conversation."""
    return [str(m.content) for m in snapshot.values["messages"] if m.type == "human"]
