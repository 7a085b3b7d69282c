"""The platform table (agentkit.platforms) and its checks by code (agentkit.platform_checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentkit.brand import PRESET
from agentkit.checks import TAGGED_PLATFORMS, CheckResult
from agentkit.platform_checks import (
    check_platform,
    length_of,
    published_text,
    script_shots,
    thread_posts,
    x_length,
)
from agentkit.platforms import (
    PLATFORM_IDS,
    PLATFORMS,
    canonical_platform,
    hard_limits,
    load_platforms,
    platform_rules,
    writer_rules,
)
from agentkit.state import AtelierInput


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


# --- the table -----------------------------------------------------------------------


def test_the_table_has_the_seven_platforms_with_their_researched_limits() -> None:
    assert PLATFORM_IDS == ("xiaohongshu", "weibo", "wechat", "douyin", "zhihu", "x", "linkedin")
    xhs = PLATFORMS["xiaohongshu"]
    assert (xhs.title_max, xhs.body_max, xhs.images_min, xhs.images_max) == (20, 1000, 1, 9)
    assert PLATFORMS["weibo"].text_max == 2000 and PLATFORMS["weibo"].tag_text("护肤") == "#护肤#"
    assert PLATFORMS["wechat"].headings_min and PLATFORMS["wechat"].images_min == 1
    assert PLATFORMS["douyin"].shots_min and not PLATFORMS["douyin"].takes_images
    assert PLATFORMS["x"].thread_post_max == 280 and PLATFORMS["x"].counting == "x_weighted"
    assert PLATFORMS["linkedin"].text_max == 3000
    assert all(rules.sources for rules in PLATFORMS.values())
    assert {"xiaohongshu", "weibo", "douyin"} == TAGGED_PLATFORMS


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[platforms.a]\nname = 'A'\nname_en = 'A'\n", "sources"),
        (
            "[platforms.a]\nname='A'\nname_en='A'\nsources=['s']\nbody_min=9\nbody_max=3\n",
            "body_min",
        ),
        (
            "[platforms.a]\nname='A'\nname_en='A'\nsources=['s']\ntitle='none'\ntitle_max=3\n",
            "title",
        ),
        ("[platforms.a]\nname='A'\nname_en='A'\nsources=['s']\ncolour='red'\n", "colour"),
        ("[platforms.a]\nname='A'\nname_en='A'\nsources=['s']\ntag_format='#'\n", "{tag}"),
        ("title = 'no table'\n", "no [platforms"),
    ],
)
def test_a_broken_table_fails_at_load(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "platforms.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises((ValueError, ValidationError)) as error:
        load_platforms(path)
    assert problem in str(error.value)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("xiaohongshu", "xiaohongshu"),
        ("小红书", "xiaohongshu"),
        (" Weibo ", "weibo"),
        ("微信公众号", "wechat"),
        ("公众号", "wechat"),
        ("Twitter", "x"),
        ("X (Twitter)", "x"),
        ("领英", "linkedin"),
        ("bilibili", None),
        ("", None),
        (None, None),
        (42, None),
        (["weibo"], None),
    ],
)
def test_canonical_platform_reads_names_and_refuses_junk(name: Any, expected: str | None) -> None:
    assert canonical_platform(name) == expected


@pytest.mark.parametrize("platform", ["weibo", "linkedin", "x", "douyin"])
def test_the_input_accepts_every_platform_of_the_table(platform: str) -> None:
    assert AtelierInput.model_validate({"request": "写", "platform": platform}).platform == platform


@pytest.mark.parametrize("platform", ["bilibili", "XiaoHongShu", "", "小红书"])
def test_an_unknown_platform_is_refused_naming_the_field(platform: str) -> None:
    with pytest.raises(ValidationError) as error:
        AtelierInput.model_validate({"request": "写", "platform": platform})
    (problem,) = error.value.errors()
    assert problem["loc"] == ("platform",)
    with pytest.raises(ValidationError):
        PRESET.validate_python({"platform": platform})


def test_the_schema_lists_the_platform_ids() -> None:
    schema = AtelierInput.model_json_schema()["properties"]["platform"]
    assert schema["enum"] == list(PLATFORM_IDS) and schema["default"] == "xiaohongshu"


def test_hard_limits_are_the_constraints_counted_like_count_chars() -> None:
    assert hard_limits("xiaohongshu") == {"title_max": 20, "body_max": 1000}
    assert hard_limits("x") == {} and hard_limits("linkedin") == {}  # counted differently
    assert hard_limits("nowhere") == {}


def test_the_writer_is_told_its_platforms_rules_from_the_table() -> None:
    text = writer_rules("weibo")
    assert text.startswith("微博平台规则")
    assert "全文（标题行、正文和标签合计）最多 2000 个字符" in text
    assert "#话题#" in text
    assert "串推每条最多 280" in writer_rules("x") and "汉字和 emoji 算 2" in writer_rules("x")
    assert "至少 3 个镜头" in writer_rules("douyin") and "不配图" in writer_rules("douyin")
    assert "至少 2 个小标题" in writer_rules("wechat")
    assert writer_rules("nowhere") == ""


# --- counting ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "weight"),
    [
        ("hello world", 11),
        ("你好", 4),
        ("café", 4),
        ("cafe\u0301", 4),  # NFC first
        ("👍", 2),
        ("👨‍👩‍👧‍👦", 2),  # one ZWJ emoji sequence
        ("🇨🇳", 2),
        ("see https://example.com/a/very/long/path ok", 4 + 23 + 3),
        ("“quoted”", 8),  # U+201C/U+201D weigh 1
        ("a" * 280, 280),
        ("字" * 140, 280),
    ],
)
def test_x_counts_by_weight(text: str, weight: int) -> None:
    assert x_length(text) == weight


def test_lengths_follow_the_platforms_counting() -> None:
    assert length_of("a b\nc", "graphemes") == 3
    assert length_of("a b\nc", "graphemes_with_spaces") == 5
    assert length_of("a\u200bb", "graphemes_with_spaces") == 2  # zero-width space takes no place
    assert length_of("中文 ok", "x_weighted") == 7


# --- the checks ----------------------------------------------------------------------

TAGS = ["护肤", "学生党"]


def test_a_weibo_post_over_2000_characters_fails_naming_the_rule() -> None:
    post = {"title": "", "body": "字" * 1995, "tags": TAGS}
    row = by_name(check_platform(post, "weibo"))["platform_text_length"]
    assert not row.passed
    assert row.measured == 1995 + len("#护肤#") + len("#学生党#")
    assert row.detail == "weibo: text (title, body and tags) 2,004 characters, at most 2,000"
    assert published_text(post, PLATFORMS["weibo"]).endswith("#护肤# #学生党#")
    short = {"title": "标题", "body": "字" * 100, "tags": TAGS}
    assert by_name(check_platform(short, "weibo"))["platform_text_length"].passed


def test_a_xiaohongshu_note_checks_title_body_tags_and_images() -> None:
    post = {
        "title": "学生党必看的平价护肤成分全解析攻略大全",
        "body": "字" * 1001,
        "tags": TAGS * 6,
    }
    rows = by_name(check_platform(post, "xiaohongshu", image_count=0))
    assert rows["platform_title"].passed
    assert rows["platform_title_length"].passed and rows["platform_title_length"].measured == 19
    assert (
        rows["platform_body_length"].detail == "xiaohongshu: body 1,001 characters, at most 1,000"
    )
    assert rows["platform_tag_count"].passed  # 2 distinct tags
    assert rows["platform_image_count"].detail == "xiaohongshu: 0 images, at least 1"
    many = {**post, "tags": [f"t{i}" for i in range(11)]}
    assert by_name(check_platform(many, "xiaohongshu"))["platform_tag_count"].detail == (
        "xiaohongshu: 11 tags, at most 10"
    )
    untitled = by_name(check_platform({"body": "正文"}, "xiaohongshu"))["platform_title"]
    assert untitled.detail == "xiaohongshu: no title, and 小红书 posts need one"
    # No image count: a draft whose images are not drawn yet, no image check.
    assert "platform_image_count" not in by_name(check_platform(post, "xiaohongshu"))


def test_a_long_xiaohongshu_title_fails() -> None:
    row = by_name(check_platform({"title": "字" * 21, "body": "正文"}, "xiaohongshu"))
    assert row["platform_title_length"].detail == "xiaohongshu: title 21 characters, at most 20"


WECHAT_BODY = "引言。" + "内容" * 400 + "\n\n## 第一部分\n正文\n\n## 第二部分\n正文"


def test_a_wechat_article_needs_headings_length_and_a_cover() -> None:
    good = {"title": "秋冬护肤指南", "body": WECHAT_BODY}
    rows = by_name(check_platform(good, "wechat", image_count=1))
    assert all(r.passed for r in rows.values()), rows
    flat = {"title": "秋冬护肤指南", "body": "内容" * 400}
    rows = by_name(check_platform(flat, "wechat", image_count=0))
    assert rows["platform_headings"].detail == "wechat: 0 headings, at least 2"
    assert rows["platform_image_count"].detail == "wechat: 0 images, at least 1"
    short = by_name(check_platform({"title": "t", "body": "## a\n## b\n短"}, "wechat"))
    assert short["platform_body_length"].detail.startswith(
        "wechat: body 7 characters, at least 800"
    )


SCRIPT = """## 镜头1（0-3秒）
画面：护肤品平铺
口播：今天讲三个平价护肤步骤。
字幕：三步平价护肤

## 镜头2
- **口播：** 第一步，温和清洁。
- **字幕：** 温和清洁

【镜头3】
口播：最后，认真防晒。
字幕：认真防晒"""


def test_a_douyin_script_has_shots_with_spoken_lines_and_short_onscreen_text() -> None:
    shots = script_shots(SCRIPT)
    assert [s.heading for s in shots] == ["镜头1（0-3秒）", "镜头2", "镜头3"]
    assert shots[1].voice == ["第一步，温和清洁。"] and shots[1].onscreen == ["温和清洁"]
    post = {"title": "三步平价护肤", "body": SCRIPT, "tags": ["护肤"]}
    rows = by_name(check_platform(post, "douyin", image_count=0))
    assert rows["platform_shots"].passed, rows["platform_shots"]
    assert rows["platform_image_count"].passed
    broken = SCRIPT.replace("字幕：认真防晒", "字幕：" + "很长的屏幕文字" * 4).replace(
        "口播：今天讲三个平价护肤步骤。\n", ""
    )
    row = by_name(check_platform({**post, "body": broken}, "douyin"))["platform_shots"]
    assert not row.passed
    assert row.measured == [
        "shot 1 has no spoken line (口播)",
        "shot 3 on-screen text 28 characters, at most 20",
    ]
    assert row.detail.startswith("douyin: shot 1 has no spoken line")
    prose = by_name(check_platform({**post, "body": "一段没有分镜的文字"}, "douyin"))
    assert prose["platform_shots"].measured == ["0 shots, at least 3"]
    pictures = by_name(check_platform(post, "douyin", image_count=2))["platform_image_count"]
    assert pictures.detail == "douyin: 2 images, at most 0"


def test_an_x_thread_is_checked_post_by_post() -> None:
    post = {
        "title": "Three skincare steps",
        "body": "a" * 200 + "\n---\n" + "字" * 150,
        "tags": ["skin"],
    }
    posts = thread_posts(post, PLATFORMS["x"])
    assert posts[0].startswith("Three skincare steps\n\n") and posts[1].endswith("#skin")
    row = by_name(check_platform(post, "x"))["platform_thread"]
    assert not row.passed
    assert row.measured == [str(22 + 200), str(300 + 7)]
    assert row.detail == "x: post 2 of the thread weighs 307, at most 280"
    fine = {**post, "body": "a" * 200 + "\n---\n" + "字" * 100}
    assert by_name(check_platform(fine, "x"))["platform_thread"].passed
    long_thread = {"title": "", "body": "\n---\n".join(["post"] * 26)}
    assert (
        "26 posts in the thread, at most 25"
        in by_name(check_platform(long_thread, "x"))["platform_thread"].detail
    )


def test_linkedin_counts_spaces() -> None:
    body = "word " * 599 + "end"  # 2,998 characters with spaces, 2,398 without
    rows = by_name(check_platform({"title": "A title", "body": body}, "linkedin"))
    assert rows["platform_text_length"].measured == 7 + 2 + len(body)
    assert not rows["platform_text_length"].passed


@pytest.mark.parametrize("junk", [None, "", "bilibili", 7])
def test_an_unknown_platform_has_no_platform_checks(junk: Any) -> None:
    assert check_platform({"title": "t", "body": "b"}, junk) == []


@pytest.mark.parametrize(
    "content",
    [
        {"title": None, "body": None, "tags": None},
        {"title": 123, "body": ["not", "text"], "tags": "#a #b"},
        {},
    ],
)
def test_junk_fields_are_checked_not_raised(content: dict[str, Any]) -> None:
    for platform in PLATFORM_IDS:
        assert all(isinstance(r, CheckResult) for r in check_platform(content, platform))
    assert platform_rules("小红书") is PLATFORMS["xiaohongshu"]


# --- the docs page stays true ---------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "platforms.md"


def test_the_docs_table_has_a_row_per_platform_with_its_limits() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for platform, rules in PLATFORMS.items():
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{platform}` |")]
        assert rules.name in row
        for limit in (rules.title_max, rules.body_max, rules.text_max, rules.thread_post_max):
            if limit is not None:
                assert f"{limit:,}" in row, (platform, limit)


def test_the_docs_snippets_print_what_their_comments_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import re

    text = DOCS.read_text(encoding="utf-8")
    namespace: dict[str, Any] = {}
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        exec(compile(block, str(DOCS), "exec"), namespace)
        printed = capsys.readouterr().out.splitlines()
        expected = [m.group(1) for m in re.finditer(r"print\(.*\)  # (.+)$", block, re.M)]
        for line, comment in zip(printed, expected, strict=True):
            exact = comment.split(":")[0] if comment[:1].isdigit() else comment
            if exact.startswith(("one post", "True")):
                continue  # prose, not a value
            assert line == exact, (line, comment)
