"""Tests for the critic's deterministic checks (agentkit.checks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from agentkit.checks import (
    CheckResult,
    Constraints,
    answer_checks_as_results,
    check_constraints,
    check_prose,
    code_share,
    count_chars,
    normalize_tags,
)
from nodes.checks import check_answer  # the public name (PRODUCT.md §6)

CASES_FILE = Path(__file__).resolve().parents[2].parent / "shared" / "cases" / "answer_checks.json"
ANSWER_CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text(encoding="utf-8"))["cases"]

LONG_BODY = "秋季护肤分三步：清洁、保湿、防晒。" * 3


def _by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


# --- check_answer: the shared acceptance cases --------------------------------


def test_acceptance_cases_are_loaded() -> None:
    assert len(ANSWER_CASES) >= 8


@pytest.mark.parametrize("case", ANSWER_CASES, ids=lambda c: c["text"][:24])
def test_answer_acceptance_case(case: dict[str, Any]) -> None:
    kwargs = {k: case[k] for k in ("retry_count", "max_retries") if k in case}
    result = check_answer(case["text"], **kwargs)
    expect = case["expect"]
    assert result["valid"] is expect["valid"]
    if "reasons" in expect:
        assert result["reasons"] == expect["reasons"]
    if "forced" in expect:
        assert result["forced"] is expect["forced"]


# --- check_answer: rules beyond the cases -------------------------------------


def test_reasons_are_reported_in_canonical_order() -> None:
    result = check_answer("抱歉 Error: 失败（待续）")
    assert result["reasons"] == ["too_short", "refusal", "error_marker", "incomplete"]
    assert result["valid"] is False


def test_force_approval_still_reports_reasons() -> None:
    result = check_answer("OK", retry_count=2, max_retries=2)
    assert result == {"valid": True, "reasons": ["too_short"], "forced": True}


def test_below_retry_limit_is_not_forced() -> None:
    assert check_answer("OK", retry_count=1, max_retries=2)["forced"] is False


def test_answer_length_counts_characters_not_whitespace() -> None:
    # 19 letters padded with spaces is still too short; 20 is enough.
    assert check_answer(" ".join("abcdefghijklmnopqrs"))["reasons"] == ["too_short"]
    assert check_answer("abcdefghijklmnopqrst")["reasons"] == []


def test_refusal_inside_long_helpful_answer_is_not_flagged() -> None:
    text = (
        "抱歉让你久等了！秋季护肤完整方案如下：早上用温和的氨基酸洁面，接着拍爽肤水，"
        "再涂一层含神经酰胺的保湿精华，最后一定要涂 SPF30 以上的防晒。晚上卸妆后"
        "用同款洁面，精华之后叠一层面霜锁水；每周敷一到两次补水面膜，不能过度去角质。"
    )
    assert check_answer(text) == {"valid": True, "reasons": [], "forced": False}


@pytest.mark.parametrize(
    "text",
    [
        "I can't help with that, but thanks for asking me anyway.",
        "As an AI, I don't have personal opinions about skincare brands.",
        "I'm unable to browse the internet right now, please try later.",
        "对不起，这个问题我没办法给出具体的建议，请咨询专业医生。",
        "作为AI助手，我没有个人喜好，但可以给你一些通用的护肤建议哦。",
    ],
)
def test_short_refusals_are_flagged(text: str) -> None:
    assert check_answer(text)["reasons"] == ["refusal"]


@pytest.mark.parametrize(
    "text",
    [
        "[错误] 图片生成服务暂时不可用，请稍后重试一下。",
        "调用工具时出现 错误：连接超时，已经重试了三次仍然不行。",
        "Traceback (most recent call last):\n  File 'x.py', line 1, in <module>",
        "The request FAILED: upstream returned status 503 for images.",
        "Exception: KeyError while rendering the layout template body.",
    ],
)
def test_error_markers_are_flagged(text: str) -> None:
    assert "error_marker" in check_answer(text)["reasons"]


@pytest.mark.parametrize(
    "text",
    [
        "今天先分享清洁和保湿两个步骤，防晒的部分放在下一篇。未完待续",
        "第一部分：清洁。先用温和的洁面产品打圈按摩一分钟（未完）后面还有。",
        "Step one is cleansing, step two is moisturising. To be continued...",
        "Here is the first half of the guide on autumn skincare basics. TBC",
        "第一步清洁，第二步保湿，第三步防晒，第四步……",
        "Morning routine: cleanse, tone, moisturise, and then...",
        # English markers anywhere a cut-off answer puts them (issue 10).
        "To be continued: the second half covers toners, serums and sunscreen.",
        "Cleanse, tone and moisturise every morning and evening, to be continued…",
        "Step one is cleansing with a gentle foam every night. (continued)",
        "Step one is cleansing with a gentle foam.\n(Continued)\nStep two follows.",
        "Step one is cleansing; the evening routine is continued in part 2.",
        "Here is the morning routine for students. Part 2 coming soon!",
        "That is the cleansing part done. Stay tuned for the next part of the guide.",
        "Here is the first half of the guide on autumn skincare. To be cont'd",
    ],
)
def test_incomplete_markers_are_flagged(text: str) -> None:
    assert check_answer(text)["reasons"] == ["incomplete"]


@pytest.mark.parametrize(
    "text",
    [
        "等等……其实很简单：先清洁，再保湿，最后防晒就可以了。",
        "Well... the short answer is: cleanse, moisturise, and wear sunscreen.",
        "我们一起期待续集吧，这部剧的剧情真的太好看了，强烈推荐。",
        "很多人的皮肤未完全吸收精华就上面霜，这样容易搓泥，要等一分钟。",
        "We continued the routine for a month and the redness faded; the habit continued.",
        "Continued use of a gentle cleanser keeps the skin barrier calm over time.",
    ],
)
def test_ordinary_text_is_not_flagged_incomplete(text: str) -> None:
    assert check_answer(text) == {"valid": True, "reasons": [], "forced": False}


def test_answer_checks_as_results_reports_measurements() -> None:
    text = "抱歉，我无法回答这个问题。"
    results = _by_name(answer_checks_as_results(check_answer(text), text))
    assert list(results) == ["answer_length", "refusal", "error_marker", "incomplete"]
    assert results["answer_length"].passed is False
    assert results["answer_length"].measured == 13
    assert results["refusal"].passed is False
    assert results["refusal"].measured == ["抱歉", "无法"]
    assert results["error_marker"].passed is True
    assert results["incomplete"].passed is True


def test_answer_checks_as_results_marks_forced_failures() -> None:
    results = _by_name(answer_checks_as_results(check_answer("OK", retry_count=5)))
    assert results["answer_length"].passed is False
    assert "force-approved" in results["answer_length"].detail
    assert results["answer_length"].measured is None


# --- count_chars ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("秋季护肤", 4),
        ("你好，世界！", 6),  # CJK punctuation counts 1 each
        ("Hello, world!", 12),  # ASCII punctuation counts, the space does not
        ("a b\tc\nd\u3000e\u00a0f", 6),  # no whitespace counts, ideographic/NBSP included
        ("等等……", 4),
        ("👨\u200d👩\u200d👧\u200d👦", 1),  # ZWJ family
        ("👍🏽", 1),  # skin tone modifier
        ("🇨🇳", 1),  # regional-indicator flag
        ("❤\ufe0f", 1),  # emoji with variation selector
        ("e\u0301", 1),  # combining accent
        ("a\u200bb\ufeff", 2),  # zero-width space and BOM not counted
        ("\ufe0f", 0),  # a stray variation selector is not counted
        ("**重点**", 6),  # Markdown counted as written
    ],
)
def test_count_chars_rule(text: str, expected: int) -> None:
    assert count_chars(text) == expected


# --- check_constraints -----------------------------------------------------------


@pytest.mark.parametrize(("length", "passed"), [(14, False), (15, True), (30, True), (31, False)])
def test_title_length_bounds_are_inclusive(length: int, passed: bool) -> None:
    content = {"title": "题" * length, "body": LONG_BODY, "tags": []}
    [result] = check_constraints(content, {"title_min": 15, "title_max": 30})
    assert result.name == "title_length"
    assert result.passed is passed
    assert result.measured == length
    assert result.expected == "15–30"


def test_title_length_ignores_spaces_and_counts_emoji_once() -> None:
    content = {"title": "秋冬 护肤 清单 🇨🇳 👨\u200d👩\u200d👧"}  # 6 CJK + 2 emoji
    [result] = check_constraints(content, Constraints(title_max=8))
    assert result.measured == 8
    assert result.passed is True
    assert result.expected == "≤ 8"


def test_body_length_range() -> None:
    body = "一" * 120
    results = _by_name(check_constraints({"body": body}, {"body_min": 100, "body_max": 110}))
    assert results["body_length"].passed is False
    assert results["body_length"].measured == 120
    assert "120" in results["body_length"].detail
    [ok] = check_constraints({"body": body}, {"body_min": 100})
    assert ok.passed is True
    assert ok.expected == "≥ 100"


def test_missing_body_measures_zero() -> None:
    [result] = check_constraints({"title": "x"}, {"body_min": 1})
    assert result.measured == 0
    assert result.passed is False


def test_tag_count_dedupes_hash_marks_and_case() -> None:
    tags = ["#平价护肤", "平价护肤", "#SkinCare", "skincare#", " ", "#秋冬"]
    assert normalize_tags(tags) == ["平价护肤", "SkinCare", "秋冬"]
    [result] = check_constraints({"tags": tags}, {"tag_min": 4, "tag_max": 8})
    assert result.name == "tag_count"
    assert result.measured == 3
    assert result.passed is False
    [ok] = check_constraints({"tags": tags}, {"tag_min": 3, "tag_max": 3})
    assert ok.passed is True
    assert ok.expected == "3"


def test_tags_given_as_one_string_are_split() -> None:
    assert normalize_tags("#平价护肤 #秋冬,学生党") == ["平价护肤", "秋冬", "学生党"]


def test_must_avoid_reports_terms_found() -> None:
    content = {"title": "全网最便宜的面霜", "body": "效果 NO.1，绝对有效", "tags": ["#医美级"]}
    [result] = check_constraints(content, {"must_avoid": ["最便宜", "no.1", "医美", "祛斑"]})
    assert result.name == "must_avoid"
    assert result.passed is False
    assert result.measured == ["最便宜", "no.1", "医美"]


def test_must_avoid_passes_when_absent() -> None:
    [result] = check_constraints({"title": "温和面霜", "body": LONG_BODY}, {"must_avoid": ["最"]})
    assert result.passed is True
    assert result.measured == []


def test_must_include_reports_missing_terms() -> None:
    [result] = check_constraints({"body": LONG_BODY}, {"must_include": ["防晒", "SPF"]})
    assert result.passed is False
    assert result.measured == ["SPF"]


def test_unset_constraints_emit_no_checks() -> None:
    assert check_constraints({"title": "t", "body": "b"}, {}) == []
    assert check_constraints({"title": "t"}, {"unknown_key": 3}) == []


def test_inverted_range_is_rejected() -> None:
    with pytest.raises(ValidationError):
        Constraints(title_min=30, title_max=15)


def _png(path: Path) -> Path:
    Image.new("RGB", (8, 8), (200, 100, 50)).save(path, format="PNG")
    return path


def test_image_files_pass_for_real_png(tmp_path: Path) -> None:
    paths: list[Path | str] = [_png(tmp_path / "cover.png"), str(_png(tmp_path / "p1.png"))]
    results = _by_name(check_constraints({}, {"image_min": 1, "image_max": 3}, image_paths=paths))
    assert results["image_count"].passed is True
    assert results["image_count"].measured == 2
    assert results["image_files"].passed is True
    assert results["image_files"].measured == []


def test_image_files_fail_for_missing_and_non_image(tmp_path: Path) -> None:
    good = _png(tmp_path / "ok.png")
    text = tmp_path / "fake.png"
    text.write_text("not an image", encoding="utf-8")
    missing = tmp_path / "missing.png"
    [result] = check_constraints({}, {}, image_paths=[good, text, missing, tmp_path])
    assert result.name == "image_files"
    assert result.passed is False
    assert result.measured == [str(text), str(missing), str(tmp_path)]
    assert "missing" in result.detail
    assert "not an image" in result.detail


def test_image_count_against_planned_total(tmp_path: Path) -> None:
    paths = [_png(tmp_path / "a.png")]
    results = _by_name(check_constraints({}, {}, image_paths=paths, expected_images=3))
    assert results["image_count"].passed is False
    assert results["image_count"].measured == 1
    assert results["image_files"].passed is True


def test_image_count_without_paths_counts_zero() -> None:
    [result] = check_constraints({}, {"image_min": 1})
    assert result.name == "image_count"
    assert result.measured == 0
    assert result.passed is False


# --- prose checks (issue 10: a post must be prose for people) --------------------------

PROSE = {"title": "学生党平价护肤", "body": LONG_BODY, "tags": ["护肤"]}


def test_a_clean_post_passes_the_prose_checks() -> None:
    results = _by_name(check_prose(PROSE, card_texts=["学生党平价护肤", "讲清成分"]))
    assert list(results) == ["data_markup", "code_share", "tags_present"]
    assert all(r.passed for r in results.values())
    assert results["code_share"].measured == 0


@pytest.mark.parametrize(
    ("where", "post", "cards"),
    [
        ("title", {**PROSE, "title": "<<<用户请求>>>"}, []),
        ("body", {**PROSE, "body": LONG_BODY + "\n<<<end 帖子>>>"}, []),
        ("tags", {**PROSE, "tags": ["护肤", "<<<标签>>>"]}, []),
        ("card", PROSE, ["<<<用户请求>>>", "讲清成分"]),
        ("stray half", {**PROSE, "body": LONG_BODY + " >>>"}, []),
        ("defused", {**PROSE, "body": LONG_BODY + " ‹‹‹用户请求›››"}, []),
    ],
)
def test_prompt_markup_anywhere_fails(where: str, post: dict[str, Any], cards: list[str]) -> None:
    result = _by_name(check_prose(post, card_texts=cards))["data_markup"]
    assert result.passed is False, where
    assert result.measured


def test_the_markup_check_knows_every_delimiter_the_prompts_write() -> None:
    from prompts.common import data_block

    block = data_block("用户请求", "写一篇笔记 <<<x>>>")
    found = _by_name(check_prose({**PROSE, "body": block}))["data_markup"].measured
    assert "<<<用户请求>>>" in found and "<<<end 用户请求>>>" in found


CODE = """def check_and_edit(title, body):
    if len(title) > 20:
        title = title[:20]
    return {"title": title, "body": body}

print(check_and_edit("学生党护肤", "正文"))"""


@pytest.mark.parametrize(
    "body",
    [
        CODE,
        f"```python\n{CODE}\n```",
        json.dumps({"title": "学生党护肤", "body": "正文", "tags": ["护肤"]}, ensure_ascii=False),
        '{\n  "审核意见": {\n    "approved": true,\n    "score": 0.9\n  }\n}',
        f"说明：\n```json\n{json.dumps({'a': [1, 2, 3], 'b': {'c': 'd'}}, indent=2)}\n```",
    ],
)
def test_a_body_that_is_mostly_code_or_json_fails(body: str) -> None:
    result = _by_name(check_prose({**PROSE, "body": body}))["code_share"]
    assert result.passed is False
    assert isinstance(result.measured, int) and result.measured > 50


def test_prose_with_a_little_code_or_english_passes() -> None:
    body = (
        "选氨基酸洁面，早晚各一次，洗完不紧绷才是对的。\n"
        "If your skin is dry: use a richer cream at night.\n"
        "For oily skin (T-zone), a gel moisturiser is enough.\n"
        "成分表里看到 `niacinamide` 就是烟酰胺。\n"
        "价格(约50元)很友好，学生党也能长期坚持。"
    )
    assert code_share(body) == 0.0
    assert _by_name(check_prose({**PROSE, "body": body}))["code_share"].passed


def test_an_empty_tag_list_fails_only_where_the_platform_expects_tags() -> None:
    untagged = {**PROSE, "tags": []}
    assert _by_name(check_prose(untagged))["tags_present"].passed is False
    assert _by_name(check_prose(untagged, platform="weibo"))["tags_present"].passed is False
    assert "tags_present" not in _by_name(check_prose(untagged, platform="wechat"))
