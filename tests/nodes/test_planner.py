"""The planner: clarity by code, resume values, constraint merging, the node itself.

The clarification interrupt itself runs through the whole pipeline with a SQLite
checkpointer in tests/graphs/test_pipeline_clarification.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.runtime import ExecutionInfo, Runtime
from pydantic import ValidationError

from agentkit.pipeline_routing import route_after_planner
from nodes.planner import (
    CLARITY_THRESHOLD,
    FAILED_MESSAGE,
    UNREADABLE_MESSAGE,
    assess_clarity,
    clarification_request,
    has_just_do_it_phrase,
    merge_constraints,
    parse_resume,
    planner,
    should_ask,
)
from tests.support.fake_models import FakeModels, fake_context, garbage, tool_call

CLEAR_REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


def intent_reply(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "action": "create_post",
        "topic": "学生党平价护肤",
        "audience": "大学生",
        "goal": "讲清楚成分",
        "style": "亲切",
        "platform": "xiaohongshu",
        "constraints": {"tag_min": 3, "tag_max": 6},
        "confidence": 0.9,
    }
    args.update(overrides)
    return tool_call("PlannerIntent", **args)


def runtime(ctx: Any, events: list[dict[str, Any]], thread_id: str | None = None) -> Any:
    info = None
    if thread_id is not None:
        info = ExecutionInfo(checkpoint_id="c", checkpoint_ns="", task_id="t", thread_id=thread_id)
    return Runtime(context=ctx, stream_writer=events.append, execution_info=info)


# --- clarity ------------------------------------------------------------------


def test_a_bare_request_scores_zero_on_every_dimension() -> None:
    clarity = assess_clarity({"request": "写一篇笔记"})
    assert clarity["score"] == 0.0
    assert clarity["missing"] == ["audience", "goal", "scenario", "constraints", "length"]


def test_a_specific_request_is_clear() -> None:
    clarity = assess_clarity({"request": CLEAR_REQUEST})
    assert clarity["dimensions"] == {
        "audience": 1,
        "goal": 1,
        "scenario": 1,
        "constraints": 0,
        "length": 1,
    }
    assert clarity["score"] == 0.8 >= CLARITY_THRESHOLD


def test_inputs_count_toward_clarity() -> None:
    bare = {"request": "写一篇笔记"}
    given = {**bare, "audience": "上班族", "constraints": {"body_max": 300}}
    assert assess_clarity(given)["dimensions"]["audience"] == 1
    assert assess_clarity(given)["dimensions"]["constraints"] == 1
    assert assess_clarity({**bare, "image_count": 3})["dimensions"]["constraints"] == 1


def test_clarification_details_count_toward_clarity() -> None:
    state = {
        "request": "写一篇笔记",
        "clarification": {"choice": "details", "details": "写给新手妈妈的辅食攻略，500字以内"},
    }
    assert assess_clarity(state)["score"] == 1.0


@pytest.mark.parametrize(
    "text",
    ["写一篇笔记，直接生成", "不用问我，写一篇笔记", "按默认来", "你自己发挥吧", "Just write it."],
)
def test_just_do_it_phrases(text: str) -> None:
    assert has_just_do_it_phrase(text)
    clarity = assess_clarity({"request": text})
    assert not should_ask({"request": text}, clarity)
    assert clarity["dimensions"]["scenario"] == 0  # the phrase itself is no subject


def test_should_ask_only_when_vague_unconfirmed_and_not_asked_yet() -> None:
    vague = {"request": "写一篇笔记"}
    clarity = assess_clarity(vague)
    assert should_ask(vague, clarity)
    assert not should_ask({**vague, "auto_confirm": True}, clarity)
    assert not should_ask({**vague, "clarification": {"choice": "defaults"}}, clarity)
    assert not should_ask({"request": CLEAR_REQUEST}, assess_clarity({"request": CLEAR_REQUEST}))


def test_interrupt_value_contract() -> None:
    value = clarification_request(assess_clarity({"request": "写一篇笔记"}))
    assert value["type"] == "clarification"
    assert isinstance(value["question"], str) and value["question"]
    assert value["options"] == [
        {"id": "defaults", "label": "按默认继续"},
        {"id": "details", "label": "补充细节"},
    ]
    assert value["missing"] == ["audience", "goal", "scenario", "constraints", "length"]
    assert value["clarity"] == 0.0


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("defaults", {"choice": "defaults", "details": ""}),
        ({"action": "defaults"}, {"choice": "defaults", "details": ""}),
        ({"action": "defaults", "details": "ignored"}, {"choice": "defaults", "details": ""}),
        ({"action": "details", "details": " 给新手 "}, {"choice": "details", "details": "给新手"}),
        ({"action": "details", "details": ""}, {"choice": "defaults", "details": ""}),
        ("写给上班族，300字", {"choice": "details", "details": "写给上班族，300字"}),
        ("", {"choice": "defaults", "details": ""}),
        (None, {"choice": "defaults", "details": ""}),
    ],
)
def test_parse_resume(answer: Any, expected: dict[str, str]) -> None:
    assert parse_resume(answer) == expected


# --- constraints --------------------------------------------------------------


def test_later_sources_win_and_term_lists_are_unions() -> None:
    merged = merge_constraints(
        {"title_max": 18, "tag_min": 3, "must_avoid": ["最"], "image_min": 2, "image_max": 4},
        {"title_min": 15, "title_max": 15, "must_avoid": ["第一", "最"]},
        image_count=3,
        platform="xiaohongshu",
    )
    assert merged == {
        "title_min": 15,
        "title_max": 15,
        "body_max": 1000,  # the platform's hard limit
        "tag_min": 3,
        "image_min": 3,
        "image_max": 3,
        "must_include": [],
        "must_avoid": ["最", "第一"],
    }


def test_an_inverted_range_keeps_the_users_side() -> None:
    merged = merge_constraints({"body_min": 800}, {"body_max": 300}, None, "other")
    assert merged["body_max"] == 300 and "body_min" not in merged
    # Neither side from the user: both dropped.
    merged = merge_constraints({"tag_min": 8, "tag_max": 2}, {}, None, "other")
    assert "tag_min" not in merged and "tag_max" not in merged


def test_invalid_user_constraints_are_rejected() -> None:
    with pytest.raises(ValidationError):
        merge_constraints({}, {"title_min": 30, "title_max": 10}, None, "xiaohongshu")


# --- the node -----------------------------------------------------------------


async def test_planner_writes_intent_and_merged_constraints(tmp_path: Path) -> None:
    models = FakeModels({"planner": [intent_reply()]})
    ctx = fake_context(models, tmp_path)
    events: list[dict[str, Any]] = []
    state = {"request": CLEAR_REQUEST, "image_count": 2, "constraints": {"title_max": 18}}
    update = await planner(state, runtime(ctx, events, thread_id="thread-1"))

    intent = update["intent"]
    assert intent["action"] == "create_post" and intent["topic"] == "学生党平价护肤"
    assert intent["constraints"]["title_max"] == 18
    assert intent["constraints"]["image_min"] == intent["constraints"]["image_max"] == 2
    assert intent["constraints"]["tag_min"] == 3
    assert update["failure"] is None
    assert route_after_planner({**state, **update}) == "rag"
    assert [e["type"] for e in events] == ["stage.started", "stage.completed"]
    assert events[1]["duration_ms"] >= 0 and events[1]["attempt"] == 0
    # One call, and the prompt carries the request as data.
    (call,) = models.calls_for("planner")
    assert CLEAR_REQUEST in call.prompt and call.forced_tool == "PlannerIntent"


async def test_unknown_intent_goes_to_finalize(tmp_path: Path) -> None:
    reply = intent_reply(action="unknown", message="你想写什么主题？")
    ctx = fake_context(FakeModels({"planner": reply}), tmp_path)
    state = {"request": "嗯嗯嗯嗯嗯", "auto_confirm": True}
    update = await planner(state, runtime(ctx, []))
    assert update["intent"]["action"] == "unknown"
    assert route_after_planner({**state, **update}) == "finalize"


async def test_llm_failure_becomes_an_actionable_failure(tmp_path: Path) -> None:
    def broken(_messages: list[BaseMessage]) -> Any:
        raise ConnectionError("upstream 10.0.0.7 refused; api_key=sk-secret")

    ctx = fake_context(FakeModels({"planner": broken}), tmp_path)
    state = {"request": CLEAR_REQUEST}
    update = await planner(state, runtime(ctx, []))
    assert update["failure"] == {"stage": "planner", "message": FAILED_MESSAGE}
    assert "sk-secret" not in str(update) and "10.0.0.7" not in str(update)
    assert route_after_planner({**state, **update}) == "finalize"


async def test_an_unreadable_reply_is_asked_once_more(tmp_path: Path) -> None:
    models = FakeModels({"planner": [garbage(), intent_reply()]})
    update = await planner({"request": CLEAR_REQUEST}, runtime(fake_context(models, tmp_path), []))
    assert update["intent"]["action"] == "create_post"
    assert models.count("planner") == 2

    models = FakeModels({"planner": [garbage(), garbage()]})
    update = await planner({"request": CLEAR_REQUEST}, runtime(fake_context(models, tmp_path), []))
    assert update["failure"]["message"] == UNREADABLE_MESSAGE


async def test_replan_puts_the_ignored_note_in_context_and_in_the_rules(tmp_path: Path) -> None:
    models = FakeModels({"planner": intent_reply(constraints={"must_avoid": ["最", "第一"]})})
    ctx = fake_context(models, tmp_path)
    note = {"id": "rule-1", "type": "blocker", "content": "禁止使用绝对化用语（最、第一、顶级）"}
    state = {
        "request": "写一篇笔记",  # vague, but a replan never asks
        "session_id": "s",
        "max_attempts": 4,
        "attempt": 1,
        "intent": {"action": "create_post", "topic": "护肤", "rules": []},
        "replan_notes": [note],
    }
    update = await planner(state, runtime(ctx, []))
    assert update["intent"]["rules"] == [note["content"]]
    assert update["intent"]["constraints"]["must_avoid"] == ["最", "第一"]
    assert update["replan_notes"] == []
    assert note["content"] in models.calls_for("planner")[0].prompt


def test_the_planners_constraints_are_the_checked_constraints_narrowed() -> None:
    from agentkit.checks import Constraints
    from nodes.planner import PlannedConstraints

    assert list(PlannedConstraints.model_fields) == list(Constraints.model_fields)
    # An inverted range from the model parses (merge_constraints drops it) ...
    assert PlannedConstraints.model_validate({"title_min": 10, "title_max": 5}).title_min == 10
    # ... and the model is held to what a post can have.
    with pytest.raises(ValidationError):
        PlannedConstraints.model_validate({"image_max": 10})


# --- the platform -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "guessed", "expected"),
    [
        (None, "抖音", "douyin"),  # the model's guess, read as a platform id
        (None, "Twitter", "x"),
        (None, "Mars Weekly", "xiaohongshu"),  # junk → the default
        (None, "", "xiaohongshu"),
        ("weibo", "抖音", "weibo"),  # the input wins
    ],
)
async def test_the_intents_platform_is_always_an_id_of_the_table(
    tmp_path: Path, given: str | None, guessed: str, expected: str
) -> None:
    models = FakeModels({"planner": [intent_reply(platform=guessed)]})
    state: dict[str, Any] = {"request": CLEAR_REQUEST, "auto_confirm": True}
    if given is not None:
        state["platform"] = given
    update = await planner(state, runtime(fake_context(models, tmp_path), []))  # type: ignore[arg-type]
    assert update["intent"]["platform"] == expected


async def test_a_run_that_adapts_a_post_asks_no_question(tmp_path: Path) -> None:
    models = FakeModels({"planner": [intent_reply(platform="weibo")]})
    source = {"platform": "xiaohongshu", "title": "原标题", "body": "原帖正文", "tags": []}
    state = {"request": "改一下", "platform": "weibo", "adapt_from": source}
    update = await planner(state, runtime(fake_context(models, tmp_path), []))  # type: ignore[arg-type]
    assert "question" not in update and update["intent"]["platform"] == "weibo"
    # The post to adapt is part of the request the planner reads.
    assert "原帖正文" in models.calls_for("planner")[0].prompt
