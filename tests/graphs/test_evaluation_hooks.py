"""Atelier's evaluation hooks read what runs and judges left, junk included, without failing.

What a model filled (a post, a verdict, a score) may be anything: a missing or
malformed value is no post, a tie nobody decided, or no score — never an exception
and never a number nobody gave.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from graphs.evaluation import AtelierEvaluation
from tests.support.fake_models import HAPPY_TITLE

hooks = AtelierEvaluation()
POST = {
    "title": HAPPY_TITLE,
    "blocks": [
        {"type": "text", "text": "早晚用氨基酸洁面，白天认真防晒，保湿选含甘油的乳液。" * 3}
    ],
    "tags": ["平价护肤"],
}
USAGE = {
    "calls": 3,
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "cost": {"input": 0.1, "output": 0.2, "total": 0.3, "currency": "USD"},
}


def _values(**result: Any) -> dict[str, Any]:
    return {"result": {"outcome": "completed", "post": POST, "usage": {"total": USAGE}, **result}}


def test_a_post_is_checked_against_its_run_and_the_examples_expectations() -> None:
    run_input = {"request": "写一篇笔记", "brand": {"must_include": ["青禾"]}}
    scored = hooks.score_post(run_input, _values(quality={"score": 0.85}), {"title_max": 5})
    assert scored.post == POST and not scored.passed
    assert {"must_include", "expectations.title_length"} <= set(scored.failing)
    assert (scored.critic_score, scored.cost, scored.calls) == (0.85, 0.3, 3)
    assert (scored.prompt_tokens, scored.completion_tokens) == (100, 20)
    fine = hooks.score_post({"request": "写一篇笔记"}, _values(), {"must_include": ["氨基酸"]})
    assert fine.passed and fine.failing == [] and fine.critic_score is None


@pytest.mark.parametrize(
    "values",
    [
        None,
        {},
        {"result": None},
        {"result": "done"},
        {"result": {"post": {}}},
        {"result": {"post": {"title": " ", "blocks": []}}},
        {"result": {"post": None, "usage": {"total": {"cost": "free", "calls": "many"}}}},
        {"result": {"post": {"title": "x"}, "quality": {"score": "high"}, "usage": []}},
        {"result": {"post": POST, "quality": {"score": float("nan")}, "usage": {"total": {}}}},
    ],
)
def test_junk_left_by_a_run_is_no_post_or_no_score(values: Any) -> None:
    try:
        scored = hooks.score_post(None, values, None)
    except ValidationError:  # a post the judge could not read either: refused as such
        pytest.fail("a malformed post must be read as no post, not raise")
    if scored.post is None:
        assert not scored.passed and scored.failing == ["no_post"]
    assert scored.critic_score is None and scored.cost is None


def test_a_malformed_post_is_no_post() -> None:
    junk = {"result": {"post": {"title": 5, "blocks": "a block", "tags": 7}}}
    assert hooks.score_post({}, junk, None).post is None


@pytest.mark.parametrize(
    "values",
    [
        None,
        {},
        {"winner": "A"},
        {"winner": 1},
        {"winner": None, "orders": "x"},
        {"winner": "a", "orders": [None, {"order": "ab", "answer": "1"}], "usage": "?"},
    ],
)
def test_a_pairwise_verdict_of_junk_is_a_tie_or_read_as_given(values: Any) -> None:
    verdict = hooks.pair_outcome(values)
    if (values or {}).get("winner") == "a":
        assert verdict.winner == "a" and verdict.orders == [
            {"order": "ab", "answer": "1", "preferred": None, "reasons": None}
        ]
    else:
        assert verdict.winner == "tie" and verdict.unavailable
    assert verdict.cost is None


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"status": "unavailable", "score": None},
        {"status": "ok", "score": "0.9"},
        {"status": "ok", "score": float("inf"), "feedback": {"key": "judge"}},
        {"status": "ok", "score": None, "feedback": {"key": "judge"}},
    ],
)
def test_a_post_judgement_without_a_usable_score_records_nothing(values: Any) -> None:
    verdict = hooks.post_judgement(values)
    assert verdict.score is None and verdict.passed is None and verdict.feedback is None


def test_a_post_judgement_carries_its_feedback_entry() -> None:
    entry = {"key": "judge", "score": 0.8, "comment": "pass (threshold 0.7): 好"}
    verdict = hooks.post_judgement(
        {"status": "ok", "score": 0.8, "passed": True, "feedback": entry}
    )
    assert (verdict.score, verdict.passed, verdict.feedback) == (0.8, True, entry)


def test_inputs_for_the_judges_and_the_runs() -> None:
    brief = {"request": "写一篇笔记", "brand": {"brand_name": "青禾"}}
    pair = hooks.pair_input(brief, {"must_include": ["氨基酸"]}, POST, POST)
    assert pair["brief"] == brief and pair["brand"] == {"brand_name": "青禾"}
    assert set(pair) == {"brief", "brand", "expectations", "post_a", "post_b"}
    assert hooks.post_judge_input(brief, _values())["post"] == POST
    assert hooks.post_judge_input(brief, {"result": {"post": {}}}) is None
    assert hooks.post_judge_input({"messages": []}, _values()) is None
    assert hooks.run_input({"request": "x"}) == {"request": "x", "auto_confirm": True}
    assert hooks.run_input({"request": "x", "auto_confirm": False})["auto_confirm"] is False


def test_an_example_is_the_brief_of_a_past_runs_input() -> None:
    past = {
        "request": "写一篇笔记",
        "platform": "weibo",
        "brand": {"brand_name": "青禾"},
        "messages": [{"type": "human", "content": "写一篇笔记"}],
    }
    assert hooks.example_of(past) == {"request": "写一篇笔记", "platform": "weibo"}
    chat = {"messages": [{"type": "human", "content": "写一篇咖啡笔记"}]}
    assert hooks.example_of(chat) == {"request": "写一篇咖啡笔记"}
    assert hooks.example_of({"messages": []}) is None


def test_models_per_role_name_known_roles_and_plain_model_names() -> None:
    assert hooks.check_models({"writer_agent": "gpt-4o-mini"}) == {"writer_agent": "gpt-4o-mini"}
    with pytest.raises(ValueError, match="unknown LLM role"):
        hooks.check_models({"writer": "gpt-4o"})
    with pytest.raises(ValueError, match="model name"):
        hooks.check_models({"critic": "bad name; drop"})
    assert hooks.arm_config({}) == {}
    assert hooks.arm_config({"critic": "m"}) == {"configurable": {"models": {"critic": "m"}}}
    with pytest.raises(ValidationError):
        hooks.check_expectations({"must_include": "氨基酸"})
    assert hooks.check_expectations({"title_max": 20}) == {"title_max": 20}
