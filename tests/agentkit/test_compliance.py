"""Advertising-law words (agentkit.compliance): what is found, what is allowed, how it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agentkit.compliance import (
    check_compliance,
    find_violations,
    law_rules,
    load_rules,
    platform_word_rules,
    writer_rules,
)

ABSOLUTE = "广告法第九条 禁用绝对化用语"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        # absolute claims, with the word a person reads
        ("最好用的平价面霜", [f"「最好」 — {ABSOLUTE}"]),
        ("这是最划算的抗老方式", [f"「最划算」 — {ABSOLUTE}"]),
        ("最温和的洁面", [f"「最温和」 — {ABSOLUTE}"]),
        ("这款最！", [f"「最」 — {ABSOLUTE}"]),
        ("全网第一！销量第一", [f"「全网第一」 — {ABSOLUTE}", f"「销量第一」 — {ABSOLUTE}"]),
        ("我们拿了第一名", [f"「第一」 — {ABSOLUTE}"]),
        ("TOP1 好物，No.1 选择", [f"「TOP1」 — {ABSOLUTE}", f"「No.1」 — {ABSOLUTE}"]),
        ("ＴＯＰ１", [f"「TOP1」 — {ABSOLUTE}"]),  # full-width forms are folded
        ("学生党首选", [f"「首选」 — {ABSOLUTE}"]),
        ("最后一波福利", [f"「最后一波」 — {ABSOLUTE}"]),
        ("国家级实验室", ["「国家级」 — 广告法第九条 禁用“国家级”“世界级”等级别用语"]),
        ("100%有效", ["「100%」 — 广告法第四条、第二十八条 不得作虚假或引人误解的保证"]),
        ("根治痘痘", ["「根治」 — 广告法第十七条 非医疗广告不得涉及疾病治疗功能、使用医疗用语"]),
        ("稳赚不赔", ["「稳赚不赔」 — 广告法第二十五条 不得对投资收益作保证性承诺"]),
        # plain words, no claim
        ("最近换季，最后一步是防晒，最终效果看个人", []),
        ("第一步：温和清洁；第一次用要做皮试", []),
        ("第一，选对洁面；第二，认真防晒", []),
        ("每周最多两次，每次最少15分钟", []),
        ("最好先在耳后试用", []),
        ("唯一的缺点是有点贵", []),
        ("第一版草稿，第一时间更新", []),
        ("top10 清单", []),
        ("", []),
    ],
)
def test_what_is_found_and_what_is_allowed(text: str, found: list[str]) -> None:
    assert [str(v) for v in find_violations([text])] == found


def test_a_word_is_reported_once_and_the_texts_do_not_run_together() -> None:
    violations = find_violations(["最好", "最好的面霜，最好用"])
    assert [v.word for v in violations] == ["最好"]
    # "第" ending the title and "一" opening the body are not 第一.
    assert find_violations(["平价护肤第", "一名都不是"]) == []


def test_check_compliance_names_the_word_and_the_rule() -> None:
    post = {"title": "最好用的平价面霜", "body": "正文很朴素。", "tags": ["护肤"]}
    (row,) = check_compliance(post, "weibo")
    assert row.name == "ad_law" and not row.passed
    assert row.measured == ["最好"]
    assert row.detail == "「最好」 — 广告法第九条 禁用绝对化用语"
    clean = check_compliance({"title": "平价面霜怎么选", "body": "正文很朴素。"}, "weibo")
    assert [r.passed for r in clean] == [True] and clean[0].detail == ""


def test_tags_and_card_text_are_searched_too() -> None:
    (row,) = check_compliance({"title": "t", "body": "b", "tags": ["顶级面霜"]}, "zhihu")
    assert row.measured == ["顶级"]
    (row,) = check_compliance({"title": "t", "body": "b"}, "zhihu", card_texts=["全网第一"])
    assert row.measured == ["全网第一"]


def test_a_platforms_own_words_are_their_own_check() -> None:
    post = {"title": "平价面霜", "body": "想要链接的加我微信", "tags": []}
    rows = {r.name: r for r in check_compliance(post, "xiaohongshu")}
    assert rows["ad_law"].passed
    assert not rows["platform_terms"].passed and rows["platform_terms"].measured == ["微信"]
    assert rows["platform_terms"].detail.startswith("xiaohongshu: 「微信」 — 小红书")
    # The same words are no concern on a platform without that list.
    assert [r.name for r in check_compliance(post, "weibo")] == ["ad_law"]
    wechat = {r.name: r for r in check_compliance({"body": "转发朋友圈集赞领奖"}, "wechat")}
    assert wechat["platform_terms"].measured == ["转发朋友圈", "集赞"]


@pytest.mark.parametrize(
    "content",
    [
        {"title": None, "body": None, "tags": None},
        {"title": 7, "body": ["最好", "的"], "tags": "#顶级 #护肤"},
        {},
    ],
)
def test_junk_fields_are_read_as_text_not_raised(content: dict[str, Any]) -> None:
    rows = check_compliance(content, "xiaohongshu")
    assert [r.name for r in rows] == ["ad_law", "platform_terms"]


def test_the_lists_load_with_their_articles() -> None:
    ids = [rule.id for rule in law_rules()]
    assert ids == ["absolute", "grade", "authority", "guarantee", "medical", "investment"]
    assert all(rule.law.startswith("广告法第") for rule in law_rules())
    assert [r.id for r in platform_word_rules("xiaohongshu")] == ["diversion"]
    assert platform_word_rules("x") == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[rules]]\nid='a'\nlaw='l'\nlabel='x'\npatterns=['(']\n", "missing )"),
        ("[[rules]]\nid='a'\nlaw='l'\nlabel='x'\ncolour='red'\n", "colour"),
        ("title='none'\n", "no [[rules]]"),
        (
            "[[rules]]\nid='a'\nlaw='l'\nlabel='x'\n[[platform_rules]]\nid='b'\nlaw='l'\nlabel='y'\n",
            "names its platform",
        ),
    ],
)
def test_a_broken_word_list_fails_at_load(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "ad_law.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises((ValueError, ValidationError)) as error:
        load_rules(path)
    assert problem in str(error.value)


def test_the_writer_is_told_the_lists_compactly() -> None:
    text = writer_rules("xiaohongshu")
    assert "任何“最X”" in text and "排名的“第一”" in text and "100%" in text
    assert "最划算" not in text  # covered by 最X, not listed word by word
    assert "广告法第十七条" in text and "微信" in text
    assert "微信" not in writer_rules("weibo")
    assert "最近" in text  # allowed uses are named, so plain words are not avoided for nothing
    assert len(text) < 1000
