"""What several agents read of the post: request, platform, brief fields, best attempt, redraw.

(agentkit.post; the agents that read it are tested in tests/nodes.)
"""

from __future__ import annotations

from typing import Any

import pytest

from agentkit.post import (
    DEFAULT_PLATFORM,
    best_attempt,
    card_to_redraw,
    effective_request,
    post_platform,
)


def test_the_effective_request_adds_the_details_the_user_gave_when_asked() -> None:
    state = {
        "request": "写一篇笔记",
        "clarification": {"choice": "details", "details": "写给新手妈妈的辅食攻略，500字以内"},
    }
    assert effective_request(state) == "写一篇笔记\n\n补充说明：写给新手妈妈的辅食攻略，500字以内"
    defaults = {"request": " 写一篇笔记 ", "clarification": {"choice": "defaults", "details": ""}}
    assert effective_request(defaults) == "写一篇笔记"
    assert effective_request({}) == ""


@pytest.mark.parametrize(
    ("state", "platform"),
    [
        ({"intent": {"platform": "weibo"}, "platform": "douyin"}, "weibo"),
        ({"intent": {"platform": ""}, "platform": "douyin"}, "douyin"),
        ({"intent": None, "platform": "douyin"}, "douyin"),
        ({"intent": {"topic": "护肤"}}, DEFAULT_PLATFORM),
        ({}, "xiaohongshu"),
    ],
)
def test_the_post_platform_is_the_intents_else_the_inputs_else_the_default(
    state: dict[str, Any], platform: str
) -> None:
    assert post_platform(state) == platform


def test_best_attempt_prefers_fewer_failing_checks_then_score_then_earliest() -> None:
    post = {"title": "t", "body": "b", "tags": []}
    attempts = [
        {"attempt": 1, "score": 0.95, "failing_checks": 1, "post": post},
        {"attempt": 2, "score": 0.8, "failing_checks": 0, "post": post},
        {"attempt": 3, "score": 0.8, "failing_checks": 0, "post": post},
        {"attempt": 4, "score": 0.99, "failing_checks": 0, "post": None},
    ]
    assert best_attempt(attempts)["attempt"] == 2  # type: ignore[index]
    assert best_attempt([]) is None


def test_a_redraw_names_a_card_of_the_post_with_an_optional_prompt() -> None:
    request = card_to_redraw({"slot": 2, "prompt": "清晨的柔光"}, [{"slot": 1}, {"slot": 2}])
    assert (request.slot, request.prompt) == (2, "清晨的柔光")


@pytest.mark.parametrize(
    ("request_", "images", "message"),
    [
        ({"slot": 3}, [{"slot": 1}, {"slot": 2}], "slot 3 is not a card of this post; its cards"),
        ({"slot": 1}, [], "no post with cards"),
        ({"slot": 0}, [{"slot": 1}], "greater than or equal to 1"),
        ({"slot": 1, "colour": "red"}, [{"slot": 1}], "Extra inputs"),
        (None, [{"slot": 1}], "slot"),
    ],
)
def test_a_redraw_must_name_a_card_of_the_post(
    request_: Any, images: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        card_to_redraw(request_, images)
