"""Where a pipeline run starts: the per-run state reset and its budget (agentkit.run_start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import ExecutionInfo, Runtime

from agentkit.limits import DEFAULT_LIMITS, FAST_MODE_CAPS
from agentkit.run_start import new_run_state, starting_run, starts_new_run
from nodes.planner import planner
from tests.support.fake_models import FakeModels, fake_context, tool_call

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


def intent_reply() -> Any:
    return tool_call("PlannerIntent", action="create_post", topic="平价护肤", confidence=0.9)


def runtime(ctx: Any, events: list[dict[str, Any]], thread_id: str | None = None) -> Any:
    info = None
    if thread_id is not None:
        info = ExecutionInfo(checkpoint_id="c", checkpoint_ns="", task_id="t", thread_id=thread_id)
    return Runtime(context=ctx, stream_writer=events.append, execution_info=info)


async def test_a_new_run_enters_the_planner_with_its_counters_and_budget(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"planner": intent_reply()}), tmp_path)
    events: list[dict[str, Any]] = []
    node = starting_run(planner)
    update = await node({"request": REQUEST}, runtime(ctx, events, thread_id="thread-1"))

    assert update["session_id"] == "thread-1"
    assert update["max_attempts"] == 1 + ctx.max_retry_count
    assert update["attempt"] == 0 and update["replans"] == 0 and update["attempts"] == []
    assert update["team_limits"] == DEFAULT_LIMITS
    assert update["intent"]["action"] == "create_post"  # the planner's own update is kept
    assert [e["type"] for e in events] == ["stage.started", "stage.completed"]
    assert node.__name__ == "planner"


async def test_fast_mode_allows_one_attempt_and_a_smaller_team(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"planner": intent_reply()}), tmp_path)
    update = await starting_run(planner)({"request": REQUEST, "fast_mode": True}, runtime(ctx, []))
    assert update["max_attempts"] == 1
    assert update["team_limits"]["max_team_steps"] <= 12
    assert update["team_limits"]["max_research_tool_rounds"] <= 1
    assert update["team_limits"]["max_supervisor_tool_rounds"] == 0
    assert update["team_limits"]["max_same_agent_repeats"] == 1
    assert update["session_id"].startswith("run-")


def test_the_budget_is_the_deployments_limits_tightened_in_fast_mode(tmp_path: Path) -> None:
    ctx = fake_context(
        FakeModels({}), tmp_path, limits={"max_team_steps": 30, "quality_threshold": 0.8}
    )
    full = new_run_state(ctx, {}, "s")["team_limits"]
    assert full == {**DEFAULT_LIMITS, "max_team_steps": 30, "quality_threshold": 0.8}
    fast = new_run_state(ctx, {"fast_mode": True}, "s")["team_limits"]
    assert fast == {**full, **FAST_MODE_CAPS}


async def test_a_replan_or_a_resume_keeps_the_runs_counters(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"planner": intent_reply()}), tmp_path)
    state = {
        "request": REQUEST,
        "auto_confirm": True,
        "session_id": "s",
        "max_attempts": 4,
        "attempt": 1,
        "attempts": [{"attempt": 1}],
        "result": None,
    }
    assert not starts_new_run(state)
    update = await starting_run(planner)(state, runtime(ctx, []))
    assert "session_id" not in update and "attempts" not in update
    assert update["intent"]["action"] == "create_post"


async def test_the_next_run_on_a_thread_starts_over(tmp_path: Path) -> None:
    ctx = fake_context(FakeModels({"planner": intent_reply()}), tmp_path)
    finished = {
        "request": REQUEST,
        "auto_confirm": True,
        "session_id": "thread-1",
        "attempt": 2,
        "replans": 1,
        "attempts": [{"attempt": 1}, {"attempt": 2}],
        "verdict": {"passed": True},
        "result": {"outcome": "completed"},
    }
    assert starts_new_run(finished)
    update = await starting_run(planner)(finished, runtime(ctx, [], thread_id="thread-1"))
    assert update["attempt"] == 0 and update["replans"] == 0 and update["attempts"] == []
    assert update["verdict"] is None and update["result"] is None
