"""Finalize: the §2.5 result payload for every outcome, and its UI components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from nodes.finalize import (
    DRIFTED_LATER,
    DRIFTED_NOTE,
    STALLED_MESSAGE,
    build_result,
    finalize,
    post_blocks,
    published_artefacts,
)
from tests.support.fake_models import FakeModels, fake_context

POST = {
    "title": "学生党平价护肤",
    "body": "开头一句。\n\n## 第一步\n- 洁面\n- 保湿\n结尾。",
    "tags": ["护肤"],
}
IMAGE = {"asset_id": "a" * 32, "url": "/assets/" + "a" * 32, "slot": 1, "alt": "封面", "path": "/x"}
KEYS = {"outcome", "message", "post", "images", "quality", "attempts", "revision", "usage", "ui"}


def attempt(
    number: int, score: float, *, passed: bool = False, failing: int = 0, source: str = "team"
) -> dict[str, Any]:
    return {
        "source": source,
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
        {
            "attempt": 1,
            "verdict": "needs_improvement",
            "score": 0.5,
            "feedback": "反馈1",
            "source": "team",
        },
        {"attempt": 2, "verdict": "passed", "score": 0.9, "feedback": "反馈2", "source": "team"},
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


def test_a_stalled_team_says_why_it_stopped_with_or_without_a_post() -> None:
    stalled = "3 steps in a row added nothing; the team stops here"
    # No draft at all: failed, and the message says the team stopped, not a bare error.
    judged = {**attempt(1, 0.0), "post": None, "judge": "skipped", "score": None}
    state = {
        "intent": {"action": "create_post"},
        "attempts": [judged],
        "verdict": {"passed": False, "verdict": "failed", "source": "team"},
        "stalled": stalled,
    }
    result = build_result(state, 0.7)
    assert result["outcome"] == "failed" and result["message"].startswith(STALLED_MESSAGE)
    assert result["post"] == {"title": "", "blocks": [], "tags": []}
    # A draft the judge did not pass: exhausted with that draft, never passed.
    state = {**state, "attempts": [attempt(1, 0.5)], "verdict": {"passed": False}}
    result = build_result(state, 0.7)
    assert result["outcome"] == "exhausted" and result["quality"]["exhausted"] is True
    assert result["message"].startswith(STALLED_MESSAGE) and "0.50" in result["message"]
    # A person's edit after it is judged on its own: the stall is not its story.
    edit = {**attempt(2, 0.5, source="edit")}
    state = {**state, "attempts": [attempt(1, 0.5), edit], "verdict": {"source": "edit"}}
    assert STALLED_MESSAGE not in build_result(state, 0.7)["message"]


def test_a_run_whose_supervisor_drifted_says_so_after_its_verdict() -> None:
    drifted = "brief_compiler_agent chosen repeatedly without progress"
    attempts = [attempt(n, 0.5) for n in range(1, 5)]
    state = {
        "intent": {"action": "create_post"},
        "attempts": attempts,
        "verdict": {"passed": False, "source": "team"},
        "drifted": drifted,
    }
    result = build_result(state, 0.7)
    # The verdict is the judge's, and comes first; the note says who routed the team.
    assert result["outcome"] == "exhausted" and result["message"].startswith("尝试了 4 次")
    assert result["message"].endswith(DRIFTED_NOTE.format(later=DRIFTED_LATER))
    # One attempt that the judge passed: no word on later attempts.
    passed = attempt(1, 0.9, passed=True)
    one = {**state, "attempts": [passed], "verdict": {"passed": True}}
    message = build_result(one, 0.7)["message"]
    assert message.startswith("已完成") and message.endswith(DRIFTED_NOTE.format(later=""))
    # A stalled run already says why; a healthy one and a person's edit have no note.
    assert "调度模型的决定" not in build_result({**state, "stalled": "x"}, 0.7)["message"]
    assert "调度模型的决定" not in build_result({**state, "drifted": None}, 0.7)["message"]
    edit = {**state, "attempts": [*attempts, attempt(5, 0.5, source="edit")]}
    assert (
        "调度模型的决定"
        not in build_result({**edit, "verdict": {"source": "edit"}}, 0.7)["message"]
    )


async def test_the_node_writes_result_and_stage_events(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    ctx = fake_context(FakeModels(), tmp_path)
    update = await finalize(
        {"intent": {"action": "unknown"}, "attempt": 0},
        Runtime(context=ctx, stream_writer=events.append),
        {},
    )
    assert update["result"]["outcome"] == "needs_clarification"
    assert [e["type"] for e in events] == ["stage.started", "stage.completed"]


def test_after_an_edit_on_an_exhausted_thread_finalize_publishes_the_edit_not_an_older_best() -> (
    None
):
    """Regression: an edit judged below an older attempt's score lost to that attempt.

    The thread had run out of attempts; the person edited the published post and the
    critic judged the edit (attempt 4) lower than attempt 2. Finalize published
    attempt 2 again, so the edit seemed to vanish.
    """
    edited = {**attempt(4, 0.6, source="edit"), "post": {**POST, "title": "我改过的标题"}}
    state = {
        "intent": {"action": "create_post"},
        "attempts": [attempt(1, 0.5), attempt(2, 0.85), attempt(3, 0.7), edited],
        "verdict": {"passed": False, "source": "edit"},
        "generated_content": edited["post"],
    }
    result = build_result(state, 0.9)
    assert result["post"]["title"] == "我改过的标题"
    assert result["revision"] == "edit"
    assert result["outcome"] == "exhausted" and result["quality"]["score"] == 0.6
    assert "修改后的版本" in result["message"] and "第 4 次" in result["message"]
    assert [a["source"] for a in result["attempts"]] == ["team", "team", "team", "edit"]
    assert published_artefacts(state) == {}  # the edit is already the state's draft


def test_a_redrawn_card_is_published_even_below_an_older_best() -> None:
    redrawn = attempt(3, 0.5, source="card")
    state = {
        "intent": {"action": "create_post"},
        "attempts": [attempt(1, 0.8), attempt(2, 0.6), redrawn],
        "verdict": {"passed": False, "source": "card"},
    }
    result = build_result(state, 0.9)
    assert result["post"]["title"] == "学生党平价护肤3" and result["revision"] == "card"


def test_an_earlier_best_attempt_goes_back_into_the_state_for_the_next_edit() -> None:
    best = {**attempt(1, 0.85), "image_plans": [{"slot": 1, "type": "cover", "desc": "封面"}]}
    state = {
        "intent": {"action": "create_post"},
        "attempts": [best, attempt(2, 0.5)],
        "verdict": {"passed": False},
    }
    assert build_result(state, 0.9)["post"]["title"] == "学生党平价护肤1"
    update = published_artefacts(state)
    assert update["generated_content"]["title"] == "学生党平价护肤1"
    assert update["images"] == [IMAGE] and update["generated_image_asset_ids"] == [
        IMAGE["asset_id"]
    ]
    assert update["image_plans"] == best["image_plans"]


def test_usage_by_role_with_unknown_tokens_left_null() -> None:
    usage = {
        "critic": {
            "calls": 2,
            "metered": 0,
            "prompt_tokens": None,
            "completion_tokens": None,
            "seconds": 1.5,
        },
        "writer_agent": {
            "calls": 1,
            "metered": 1,
            "prompt_tokens": 100,
            "completion_tokens": 40,
            "seconds": 2.0,
        },
    }
    result = build_result({"intent": {"action": "create_post"}, "usage": usage}, 0.7)
    assert result["usage"]["roles"] == usage
    assert result["usage"]["total"] == {
        "calls": 3,
        "metered": 1,
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "seconds": 3.5,
        "cost": None,  # no price table
    }
    assert build_result({}, 0.7)["usage"] == {
        "roles": {},
        "total": {
            "calls": 0,
            "metered": 0,
            "prompt_tokens": None,
            "completion_tokens": None,
            "seconds": 0.0,
            "cost": None,
        },
    }
