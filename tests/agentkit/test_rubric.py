"""The judge's rubric is built by code: the brand, the constraints, the example, the rules."""

from __future__ import annotations

from agentkit.checks import Constraints
from agentkit.expectations import Expectations
from agentkit.rubric import build_rubric, current_platform_rules
from prompts import judge as prompt


def test_a_bare_rubric_is_the_brief_the_platform_and_quality() -> None:
    rubric = build_rubric()
    assert rubric.platform == "xiaohongshu"
    assert rubric.criteria == [
        prompt.RUBRIC_FULFIL,
        prompt.RUBRIC_PLATFORM.format(platform="xiaohongshu"),
        prompt.RUBRIC_QUALITY,
    ]
    assert rubric.platform_rules == current_platform_rules("xiaohongshu")
    assert rubric.reference_post is None


def test_the_brand_the_constraints_and_the_example_join_in_a_fixed_order() -> None:
    brand = {
        "brand_name": "青禾护肤",
        "voice": "亲切",
        "audience": "大学生",
        "platform": "weibo",
        "must_include": ["青禾", "成分"],
        "must_avoid": ["最便宜"],
        "title_min": 8,
        "title_max": 30,
        "body_max": 900,
    }
    rubric = build_rubric(
        brand=brand,
        constraints=Constraints(must_include=["成分", "学生"], title_max=25, tag_min=1, tag_max=5),
        expectations=Expectations(
            must_include=["氨基酸"],
            must_avoid=["第一"],
            title_max=20,
            reference_post="范文",
            judge_notes="讲清楚作用",
        ),
    )
    assert rubric.platform == "weibo"  # the brand's, with no platform given
    assert rubric.criteria == [
        prompt.RUBRIC_FULFIL,
        "品牌：以「青禾护肤」的身份写作。",
        "语气：符合品牌的语气和风格——亲切",
        "读者：写给大学生，用他们的语言，回答他们关心的问题。",
        "必须出现的词：青禾、成分、学生、氨基酸",  # distinct, first spelling kept
        "绝对不能出现的词：最便宜、第一",
        "标题长度：8–20 个字符",  # the tightest cap of brand, constraints and example
        "正文长度：最多 900 个字符",
        "标签数量：1–5 个",
        "平台：符合weibo的平台规则（见“平台规则”）。",
        prompt.RUBRIC_REFERENCE,
        "评审备注：讲清楚作用",
        prompt.RUBRIC_QUALITY,
    ]
    assert rubric.reference_post == "范文"


def test_the_briefs_platform_and_audience_win_over_the_brands() -> None:
    rubric = build_rubric(
        platform="linkedin", audience="HR 经理", brand={"platform": "weibo", "audience": "学生"}
    )
    assert rubric.platform == "linkedin"
    assert "读者：写给HR 经理，用他们的语言，回答他们关心的问题。" in rubric.criteria
    assert rubric.platform_rules["tags_required"] is False


def test_the_platforms_rules_are_data_passed_through_as_they_are() -> None:
    table_row = {"id": "x", "post_max_chars": 280, "thread": True, "source": "developer docs"}
    rubric = build_rubric(platform="x", platform_rules=table_row)
    assert rubric.platform_rules == table_row
    assert rubric.platform_rules is not table_row  # a copy: the table stays untouched


def test_todays_rules_come_from_the_checks() -> None:
    assert current_platform_rules("weibo")["tags_required"] is True
    assert current_platform_rules("linkedin")["tags_required"] is False
    assert current_platform_rules("weibo")["code_or_json_share_max"] == 0.5


def test_mappings_are_validated_like_the_models() -> None:
    rubric = build_rubric(expectations={"must_include": ["甘油"]}, constraints={"body_min": 50})
    assert "必须出现的词：甘油" in rubric.criteria
    assert "正文长度：至少 50 个字符" in rubric.criteria
