"""The review agent: the model's judgement, bounded by facts code checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from agentkit.routing import draft_digest, stage_done
from nodes.review_agent import ReviewResult, review_agent
from tests.support.fake_models import FakeModels, fake_context, garbage, tool_call

DIMS = dict.fromkeys(
    ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"), 0.8
)
DRAFT = {
    "request": "写护肤笔记",
    "creative_brief": {"topic": "护肤"},
    "generated_content": {"title": "学生党护肤", "body": "正文" * 30, "tags": ["护肤", "学生党"]},
}


async def _review(tmp_path: Path, reply: Any, **state: Any) -> tuple[dict[str, Any], FakeModels]:
    models = FakeModels({"review_agent": reply})
    runtime = Runtime(context=fake_context(models, tmp_path))
    update = await review_agent({**DRAFT, **state}, runtime)  # type: ignore[typeddict-item]
    return update, models


async def test_an_approving_review_of_a_sound_draft(tmp_path: Path) -> None:
    reply = tool_call("ReviewResult", approved=True, score=0.9, dimensions=DIMS)
    update, _ = await _review(tmp_path, reply)
    assert update["review_feedback"]["approved"] is True
    assert update["quality_scores"] == DIMS
    merged = {**DRAFT, **update}
    assert update["reviewed_digest"] == draft_digest(merged)
    assert stage_done("review_agent", merged)


async def test_a_low_dimension_overrides_the_models_approval(tmp_path: Path) -> None:
    reply = tool_call(
        "ReviewResult", approved=True, score=0.9, dimensions={**DIMS, "readability": 0.4}
    )
    update, _ = await _review(tmp_path, reply)
    assert update["review_feedback"]["approved"] is False


async def test_a_broken_constraint_is_an_issue_and_blocks_approval(tmp_path: Path) -> None:
    reply = tool_call("ReviewResult", approved=True, score=0.9, dimensions=DIMS)
    update, models = await _review(
        tmp_path, reply, constraints={"title_min": 10, "must_avoid": ["最"]}
    )
    feedback = update["review_feedback"]
    assert feedback["approved"] is False
    assert any(i.startswith("title_length: 实测 5") for i in feedback["issues"])
    assert "title_length" in models.calls[0].prompt  # the model saw the measurement


async def test_an_unparsable_review_is_recorded(tmp_path: Path) -> None:
    update, _ = await _review(tmp_path, garbage())
    assert "review_feedback" not in update
    assert update["agent_errors"] == ["review_agent: no ReviewResult"]


@pytest.mark.parametrize(
    ("raw", "score"), [(0.7, 0.7), (7, 0.7), (85, 0.85), ("90%", 0.9), (-1, 0)]
)
def test_scores_on_other_scales_are_read_as_0_to_1(raw: Any, score: float) -> None:
    result = ReviewResult.model_validate({"score": raw, "dimensions": {"platformFit": raw}})
    assert result.score == pytest.approx(score)
    assert result.dimensions.platformFit == pytest.approx(score)
