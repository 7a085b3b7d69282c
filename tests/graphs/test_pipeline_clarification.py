"""The planner's clarification question, through a real SQLite checkpointer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from graphs.pipeline import build_pipeline
from tests.graphs.pipeline_runs import judge_reply, models_for, run_pipeline

VAGUE = "写一篇笔记"
DETAILS = "写给新手妈妈的宝宝辅食攻略，重点讲月龄和食材"
CONTRACT_OPTIONS = [
    {"id": "defaults", "label": "按默认继续"},
    {"id": "details", "label": "补充细节"},
]


@pytest.fixture
async def saver(tmp_path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as cp:
        yield cp


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def ask(saver: AsyncSqliteSaver, tmp_path: Path, thread: str) -> tuple[Any, Any]:
    """Start a vague request; return the graph and the models after it paused."""
    models = models_for(judge_reply())
    graph = build_pipeline(saver)
    first = await run_pipeline(models, tmp_path, graph=graph, config=config(thread), request=VAGUE)
    assert first.state.get("result") is None
    (pause,) = first.interrupts
    assert pause.value == {
        "type": "clarification",
        "question": pause.value["question"],
        "options": CONTRACT_OPTIONS,
        "missing": ["audience", "goal", "scenario", "length"],  # image_count=1 is a constraint
        "clarity": 0.2,
        # The same question as a HITL request, which Agent Chat UI renders.
        "action_requests": [
            {
                "name": "clarify_request",
                "args": {"details": ""},
                "description": pause.value["question"],
            }
        ],
        "review_configs": [
            {"action_name": "clarify_request", "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }
    assert "目标读者" in pause.value["question"]
    # The conversation shows the question while the run waits.
    assert first.state["messages"][-1].content == pause.value["question"]
    snapshot = await graph.aget_state(config(thread))
    assert snapshot.next == ("planner",)
    assert snapshot.interrupts[0].value == pause.value
    assert models.count() == 0  # the question comes before any LLM call
    return graph, models


@pytest.mark.parametrize("answer", ["defaults", {"action": "defaults"}])
async def test_a_vague_request_asks_and_resumes_with_defaults(
    saver: AsyncSqliteSaver, tmp_path: Path, answer: Any
) -> None:
    graph, models = await ask(saver, tmp_path, "t-defaults")
    resumed = await run_pipeline(
        models, tmp_path, graph=graph, config=config("t-defaults"), payload=Command(resume=answer)
    )
    assert resumed.result["outcome"] == "completed"
    assert resumed.state["clarification"] == {"choice": "defaults", "details": ""}
    assert models.count("planner") == 1  # paid once, although the node ran twice
    assert "按默认继续" in models.calls_for("planner")[0].prompt
    stages = [e["stage"] for e in resumed.of_type("stage.started")]
    assert stages[0] == "planner" and stages[-1] == "finalize"


@pytest.mark.parametrize("answer", [{"action": "details", "details": DETAILS}, DETAILS])
async def test_a_vague_request_resumes_with_added_details(
    saver: AsyncSqliteSaver, tmp_path: Path, answer: Any
) -> None:
    graph, models = await ask(saver, tmp_path, "t-details")
    resumed = await run_pipeline(
        models, tmp_path, graph=graph, config=config("t-details"), payload=Command(resume=answer)
    )
    assert resumed.result["outcome"] == "completed"
    assert resumed.state["clarification"] == {"choice": "details", "details": DETAILS}
    assert models.count("planner") == 1
    # The details reach the planner and the team as part of the request.
    assert DETAILS in models.calls_for("planner")[0].prompt
    assert DETAILS in models.calls_for("writer_agent")[0].prompt
    # Never asked twice on the same thread.
    snapshot = await graph.aget_state(config("t-details"))
    assert snapshot.next == () and not snapshot.interrupts


@pytest.mark.parametrize(
    "pipeline_input",
    [
        {"request": "写一篇笔记，直接生成"},
        {"request": "写一篇笔记，不用问我"},
        {"request": "写一篇笔记", "auto_confirm": True},
    ],
    ids=["直接生成", "不用问", "auto_confirm"],
)
async def test_just_do_it_does_not_interrupt(
    saver: AsyncSqliteSaver, tmp_path: Path, pipeline_input: dict[str, Any]
) -> None:
    models = models_for(judge_reply())
    run = await run_pipeline(
        models,
        tmp_path,
        graph=build_pipeline(saver),
        config=config("t-direct"),
        **pipeline_input,
    )
    assert not run.interrupts
    assert run.result["outcome"] == "completed"
    assert run.state["clarity"]["score"] < 0.4  # vague, and still no question


async def test_a_new_run_on_the_same_thread_starts_over(
    saver: AsyncSqliteSaver, tmp_path: Path
) -> None:
    critic = [judge_reply("needs_improvement", 0.5), judge_reply("passed", 0.9), judge_reply()]
    models = models_for(critic)
    graph = build_pipeline(saver)
    first = await run_pipeline(
        models, tmp_path, graph=graph, config=config("t-again"), auto_confirm=True
    )
    assert first.result["quality"]["attempts"] == 2

    # A second, vague request on the thread: asked again, counted from attempt 1 again.
    second = await run_pipeline(
        models, tmp_path, graph=graph, config=config("t-again"), request=VAGUE, auto_confirm=False
    )
    assert len(second.interrupts) == 1
    resumed = await run_pipeline(
        models, tmp_path, graph=graph, config=config("t-again"), payload=Command(resume="defaults")
    )
    assert [e["attempt"] for e in resumed.of_type("attempt.started")] == [1]
    assert resumed.result["outcome"] == "completed"
    assert resumed.result["quality"]["attempts"] == 1
    assert [a["attempt"] for a in resumed.result["attempts"]] == [1]
