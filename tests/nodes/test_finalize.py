"""Finalize: the §2.5 result payload for every outcome, and its UI components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from nodes.finalize import build_result, finalize, post_blocks
from tests.support.fake_models import FakeModels, fake_context

POST = {
    "title": "学生党平价护肤",
    "body": "开头一句。\n\n## 第一步\n- 洁面\n- 保湿\n结尾。",
    "tags": ["护肤"],
}
IMAGE = {"asset_id": "a" * 32, "url": "/assets/" + "a" * 32, "slot": 1, "alt": "封面", "path": "/x"}
KEYS = {"outcome", "message", "post", "images", "quality", "attempts", "ui"}


def attempt(number: int, score: float, *, passed: bool = False, failing: int = 0) -> dict[str, Any]:
    return {
        "attempt": number,
        "verdict": "passed" if passed else "needs_improvement",
        "passed": passed,
        "score": score,
        "feedback": f"反馈{number}",
        "judge": "ok",
        "dimensions": {"readability": score},
        "checks": [{"name": "title_length", "passed": True, "measured": 7}],
        "failing_checks": failing,
        "post": {**POST, "title": f"{POST['title']}{number}"},
        "images": [IMAGE],
    }


def components(result: dict[str, Any]) -> list[str]:
    return [c["component"] for c in result["ui"]]


def test_post_blocks() -> None:
    assert post_blocks(POST["body"]) == [
        {"type": "text", "text": "开头一句。"},
        {"type": "heading", "text": "第一步"},
        {"type": "list_item", "text": "洁面"},
        {"type": "list_item", "text": "保湿"},
        {"type": "text", "text": "结尾。"},
    ]
    assert post_blocks("**重点**\n【小结】") == [
        {"type": "heading", "text": "重点"},
        {"type": "heading", "text": "小结"},
    ]


def test_completed_publishes_the_passing_attempt() -> None:
    state = {
        "intent": {"action": "create_post", "platform": "xiaohongshu"},
        "attempts": [attempt(1, 0.5), attempt(2, 0.9, passed=True)],
        "verdict": {"passed": True},
    }
    result = build_result(state, 0.7)
    assert set(result) == KEYS
    assert result["outcome"] == "completed"
    assert result["post"]["title"] == "学生党平价护肤2"
    assert result["images"] == [{k: IMAGE[k] for k in ("asset_id", "url", "slot", "alt")}]
    assert result["quality"]["exhausted"] is False and result["quality"]["attempts"] == 2
    assert result["quality"]["score"] == 0.9 and result["quality"]["verdict"] == "passed"
    assert result["attempts"] == [
        {"attempt": 1, "verdict": "needs_improvement", "score": 0.5, "feedback": "反馈1"},
        {"attempt": 2, "verdict": "passed", "score": 0.9, "feedback": "反馈2"},
    ]
    assert components(result) == ["PostCard", "ImageGallery", "QualityReport", "ActionPanel"]
    card = result["ui"][0]["props"]
    assert card["cover"] == result["images"][0] and card["platform"] == "xiaohongshu"
    actions = [a["id"] for a in result["ui"][-1]["props"]["actions"]]
    assert actions == ["copy", "regenerate"]


def test_exhausted_publishes_the_best_attempt() -> None:
    state = {
        "intent": {"action": "create_post"},
        "attempts": [
            attempt(1, 0.8),
            attempt(2, 0.85),
            attempt(3, 0.95, failing=1),
            attempt(4, 0.8),
        ],
        "verdict": {"passed": False},
    }
    result = build_result(state, 0.9)
    assert result["outcome"] == "exhausted"
    assert result["quality"]["exhausted"] is True
    assert result["post"]["title"] == "学生党平价护肤2"  # 3 scored higher but failed a check
    assert "4 次" in result["message"]
    assert components(result) == ["PostCard", "ImageGallery", "QualityReport", "ActionPanel"]


def test_needs_clarification_has_a_message_and_no_post() -> None:
    state = {"intent": {"action": "unknown", "message": "你想写什么主题？"}, "attempts": []}
    result = build_result(state, 0.7)
    assert result["outcome"] == "needs_clarification"
    assert result["message"] == "你想写什么主题？"
    assert result["post"] == {"title": "", "blocks": [], "tags": []}
    assert components(result) == ["ActionPanel"]
    # No message from the planner: a default one that says what to add.
    assert build_result({"intent": {"action": "unknown"}}, 0.7)["message"]


def test_failed_carries_the_planners_message() -> None:
    state = {"failure": {"stage": "planner", "message": "模型服务不可用。"}}
    result = build_result(state, 0.7)
    assert result["outcome"] == "failed" and result["message"] == "模型服务不可用。"
    assert result["quality"]["attempts"] == 0
    assert components(result) == ["ActionPanel"]


def test_a_team_failure_after_an_attempt_still_shows_the_best_post() -> None:
    state = {
        "intent": {"action": "create_post"},
        "attempts": [attempt(1, 0.6)],
        "failure": {"stage": "executor", "message": "团队出错。"},
    }
    result = build_result(state, 0.7)
    assert result["outcome"] == "failed"
    assert result["post"]["title"] == "学生党平价护肤1"
    assert "PostCard" in components(result)


async def test_the_node_writes_result_and_stage_events(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    ctx = fake_context(FakeModels(), tmp_path)
    update = await finalize(
        {"intent": {"action": "unknown"}, "attempt": 0},
        Runtime(context=ctx, stream_writer=events.append),
    )
    assert update["result"]["outcome"] == "needs_clarification"
    assert [e["type"] for e in events] == ["stage.started", "stage.completed"]
