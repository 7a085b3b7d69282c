"""Code checks of a finished post against the critic's rules and an example's expectations."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentkit.checks import count_chars
from agentkit.expectations import (
    Expectations,
    FinishedPost,
    check_post,
    run_constraints,
)
from nodes.finalize import post_blocks
from tests.support.fake_models import HAPPY_BODY, HAPPY_TAGS, HAPPY_TITLE

#: The happy writer's post as the pipeline's `result.post` gives it.
POST: dict[str, Any] = {
    "title": HAPPY_TITLE,
    "blocks": post_blocks(HAPPY_BODY),
    "tags": list(HAPPY_TAGS),
}
CRITIC_CHECKS = [
    "answer_length",
    "refusal",
    "error_marker",
    "incomplete",
    "data_markup",
    "code_share",
    "tags_present",
]


def by_name(result: Any) -> dict[str, Any]:
    return {check.name: check for check in result.checks}


def test_a_good_post_passes_the_critics_own_checks() -> None:
    result = check_post(POST)
    assert [c.name for c in result.checks] == CRITIC_CHECKS
    assert result.passed and result.failing == []


def test_the_expectations_are_checked_by_name_with_what_was_measured() -> None:
    expectations = {
        "must_include": ["氨基酸", "玻尿酸"],
        "must_avoid": ["防晒", "最便宜"],
        "title_max": 5,
        "body_max": 10_000,
    }
    result = check_post(POST, expectations)
    checks = by_name(result)
    assert not result.passed
    assert set(result.failing) == {
        "expectations.title_length",
        "expectations.must_include",
        "expectations.must_avoid",
    }
    assert checks["expectations.title_length"].measured == count_chars(HAPPY_TITLE)
    assert checks["expectations.title_length"].detail.startswith("measured")
    assert checks["expectations.must_include"].measured == ["玻尿酸"]
    assert checks["expectations.must_avoid"].measured == ["防晒"]
    assert checks["expectations.body_length"].passed


def test_expectations_only_add_the_checks_they_set() -> None:
    result = check_post(POST, Expectations(reference_post="范文", judge_notes="讲清成分"))
    assert [c.name for c in result.checks] == CRITIC_CHECKS  # neither is checked by code
    assert result.passed


def test_the_runs_constraints_and_the_expectations_stay_apart() -> None:
    result = check_post(
        POST,
        {"must_include": ["甘油"]},
        constraints={"must_include": ["学生党预算"], "image_min": 3, "tag_min": 1},
    )
    checks = by_name(result)
    assert not checks["must_include"].passed  # the run's
    assert checks["expectations.must_include"].passed  # the example's
    assert checks["tag_count"].passed
    assert "image_count" not in checks  # images are not part of the post
    assert result.failing == ["must_include"]


def test_a_refusal_is_no_post() -> None:
    result = check_post(
        {"title": "抱歉", "blocks": [{"type": "text", "text": "抱歉，我无法完成。"}]}
    )
    assert {"answer_length", "refusal", "tags_present"} <= set(result.failing)
    assert not result.passed


def test_tags_are_required_only_where_the_platform_uses_them() -> None:
    untagged = {**POST, "tags": []}
    assert "tags_present" in check_post(untagged).failing
    assert "tags_present" not in by_name(check_post(untagged, platform="linkedin"))


def test_a_body_wins_over_blocks_and_the_markdown_keeps_the_structure() -> None:
    post = FinishedPost.model_validate(POST)
    markdown = post.markdown()
    assert markdown.startswith(f"# {HAPPY_TITLE}\n\n")
    assert "## 第一步：温和清洁" in markdown
    assert markdown.endswith(" ".join(f"#{t}" for t in HAPPY_TAGS))
    written = FinishedPost(title="t", body="正文一\n正文二", blocks=[{"text": "x"}])  # type: ignore[list-item]
    assert written.body_text == "正文一\n正文二"
    # A block kind added later is read as text, and unknown keys of a result are ignored.
    later = FinishedPost.model_validate(
        {"title": "t", "blocks": [{"type": "shot", "text": "镜头一"}], "platform": "douyin"}
    )
    assert later.body_text == "镜头一"


def test_the_run_starts_with_its_inputs_constraints_filled_by_the_brand() -> None:
    brand = {"must_include": ["青禾"], "title_max": 20, "body_max": 800}
    rules = run_constraints({"request": "写", "constraints": {"title_max": 15}}, brand)
    assert rules.must_include == ["青禾"]
    assert rules.title_max == 15  # the input's own stays
    assert rules.body_max == 800
    assert run_constraints({"request": "写"}).must_include == []
    # The brand may come inside the input, as a run's input carries it.
    assert run_constraints({"request": "写", "brand": brand}).title_max == 20


@pytest.mark.parametrize(
    ("junk", "field"),
    [
        ({"must_include": ["  "]}, "must_include"),
        ({"must_include": "氨基酸"}, "must_include"),
        ({"must_avoid": ["x" * 51]}, "must_avoid"),
        ({"must_include": ["t"] * 51}, "must_include"),
        ({"title_max": -1}, "title_max"),
        ({"body_max": 100_001}, "body_max"),
        ({"body_max": "long"}, "body_max"),
        ({"reference_post": ""}, "reference_post"),
        ({"reference_post": "x" * 4001}, "reference_post"),
        ({"judge_notes": "x" * 2001}, "judge_notes"),
        ({"judge_note": "typo"}, "judge_note"),
    ],
)
def test_junk_expectations_are_refused_naming_the_field(junk: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        check_post(POST, junk)
    assert field in {str(loc) for error in caught.value.errors() for loc in error["loc"]}


@pytest.mark.parametrize(
    ("junk", "field"),
    [
        ({"title": "x" * 1001}, "title"),
        ({"blocks": "正文"}, "blocks"),
        ({"blocks": [{"type": "Heading!", "text": "x"}]}, "type"),
        ({"tags": ["x" * 101]}, "tags"),
        ({"tags": "平价护肤"}, "tags"),
        ({"body": 42}, "body"),
    ],
)
def test_a_malformed_post_is_refused_naming_the_field(junk: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        check_post({**POST, **junk})
    assert field in {str(loc) for error in caught.value.errors() for loc in error["loc"]}


def test_the_expectations_schema_documents_every_field() -> None:
    schema = Expectations.model_json_schema()
    for name, spec in schema["properties"].items():
        assert spec.get("description"), name
        assert spec.get("examples"), name
