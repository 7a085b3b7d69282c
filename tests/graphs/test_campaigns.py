"""Atelier's campaign hooks (graphs/campaigns.py): what runs are asked, how results are read.

The planner's and the writer's results are written by models: every field the hooks
read from them is read with junk in it too, and junk never becomes a topic or a post.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agentkit.campaign_plan import CampaignPlanRequest
from agentkit.state import AtelierInput
from engine import CampaignItem, CampaignRecord, InvalidFields, build_assistants
from engine.campaigns import ItemPost
from graphs.assistants import ASSISTANTS
from graphs.campaigns import AtelierCampaigns, plain_body
from providers.asset_links import AssetLinks

ASSET = "5483e2ab52c8d053e77fb8b1b6a0573a"
HOOKS = AtelierCampaigns(AssetLinks(b"s" * 32))


@pytest.fixture(scope="module")
def assistants() -> Any:
    return build_assistants(ASSISTANTS, InMemorySaver())


def campaign(**fields: Any) -> CampaignRecord:
    values: dict[str, Any] = {
        "campaign_id": "c1",
        "owner": "alice",
        "assistant_id": "atelier",
        "brief": "秋季护肤新品：讲清楚成分",
        "posts": 2,
        "platforms": ["xiaohongshu", "weibo"],
        "window": {},
        "approval": "required",
        "publisher": None,
        "status": "running",
        "created_at": "",
        "updated_at": "",
        "base_url": "https://studio.example.com/",
        **fields,
    }
    return CampaignRecord(**values)


def item(**fields: Any) -> CampaignItem:
    values: dict[str, Any] = {
        "item_id": "i1",
        "topic": "平价洁面怎么选",
        "angle": "氨基酸成分解析",
        "key_points": ["看成分表", "别信广告"],
        "slot": "",
        "posts": [ItemPost("xiaohongshu"), ItemPost("weibo")],
        **fields,
    }
    return CampaignItem(**values)


def test_only_the_atelier_graph_writes_and_only_known_platforms(assistants: Any) -> None:
    HOOKS.check_campaign(assistants["atelier"], ["xiaohongshu", "weibo"])
    with pytest.raises(InvalidFields) as wrong:
        HOOKS.check_campaign(assistants["team"], ["weibo"])
    assert wrong.value.errors[0]["loc"] == ("assistant_id",)
    with pytest.raises(InvalidFields) as unknown:
        HOOKS.check_campaign(assistants["atelier"], ["weibo", "myspace"])
    assert unknown.value.errors[0]["loc"] == ("platforms", "1")
    with pytest.raises(InvalidFields, match="must not repeat"):
        HOOKS.check_campaign(assistants["atelier"], ["weibo", "weibo"])


def test_the_planners_input_is_a_valid_plan_request(assistants: Any) -> None:
    planned = HOOKS.plan_input(
        campaign(), count=6, avoid=["旧选题", " "], writer=assistants["atelier"]
    )
    assert planned == {
        "brief": "秋季护肤新品：讲清楚成分",
        "posts": 6,
        "platforms": ["xiaohongshu", "weibo"],
        "avoid": ["旧选题"],
    }
    CampaignPlanRequest.model_validate(planned)


@pytest.mark.parametrize(
    "result",
    [
        None,
        {},
        {"result": None},
        {"result": {"items": "six topics"}},
        {"result": "junk"},
        "junk",
        {"result": {"items": [None, 3, "topic", {"topic": ""}, {"angle": "no topic"}]}},
    ],
)
def test_a_planner_result_with_junk_gives_no_topic(result: Any) -> None:
    outcome = HOOKS.read_plan(result)
    assert outcome.items == [] and not outcome.complete and outcome.message


def test_a_planner_result_gives_its_topics_as_text() -> None:
    outcome = HOOKS.read_plan(
        {
            "result": {
                "outcome": "completed",
                "message": "已规划 1 个",
                "items": [{"topic": "平价洁面", "angle": 5, "key_points": [1, "b"]}],
            }
        }
    )
    assert outcome.complete and outcome.items == [
        {"topic": "平价洁面", "angle": "5", "key_points": ["1", "b"], "first_platform": ""}
    ]


def test_a_post_is_written_from_its_topic_with_a_rejections_reason() -> None:
    first = HOOKS.write_input(campaign(), item(reason="标题太平淡"), "xiaohongshu", None)
    assert first["platform"] == "xiaohongshu" and first["auto_confirm"] is True
    for part in ("秋季护肤新品", "本篇选题：平价洁面怎么选", "氨基酸成分解析", "看成分表"):
        assert part in first["request"]
    assert "修改意见：标题太平淡" in first["request"]
    AtelierInput.model_validate(first)
    long = HOOKS.write_input(campaign(brief="长" * 4000), item(), "weibo", None)
    assert len(long["request"]) <= 4000 and "本篇选题" in long["request"]
    AtelierInput.model_validate(long)


def test_an_adaptation_carries_the_first_post_with_junk_left_out() -> None:
    source = {
        "title": "标" * 300,
        "markdown": "## 小标题\n正文",
        "tags": ["护肤", "", 7],
        "images": [ASSET, "../etc/passwd", None],
    }
    adapted = HOOKS.write_input(campaign(), item(), "weibo", source)
    assert adapted["adapt_from"] == {
        "platform": "xiaohongshu",
        "title": "标" * 200,
        "body": "## 小标题\n正文",
        "tags": ["护肤", "7"],
        "images": [ASSET],
    }
    AtelierInput.model_validate(adapted)


def run_values(outcome: str = "completed", **result: Any) -> dict[str, Any]:
    return {
        "generated_content": {"title": "标题", "body": "## 一\n正文", "tags": ["护肤"]},
        "result": {
            "outcome": outcome,
            "message": "消息",
            "post": {
                "title": "标题",
                "blocks": [
                    {"type": "heading", "text": "一"},
                    {"type": "text", "text": "正文"},
                    {"type": "list_item", "text": "要点"},
                ],
                "tags": ["护肤"],
            },
            "images": [{"asset_id": ASSET, "url": f"/assets/{ASSET}"}, {"asset_id": "junk"}],
            "quality": {"verdict": "passed", "checks": [{"name": "ad_law", "passed": True}]},
            **result,
        },
    }


def test_a_completed_run_is_a_post_that_passed() -> None:
    outcome = HOOKS.read_post(run_values(), "xiaohongshu")
    assert outcome.passed and outcome.reason is None and outcome.post is not None
    assert outcome.post["body"] == "一\n\n正文\n\n- 要点"
    assert outcome.post["markdown"] == "## 一\n正文" and outcome.post["images"] == [ASSET]
    shown = HOOKS.publish_fields(campaign(), item(), "xiaohongshu", outcome.post)
    (url,) = shown["image_urls"]
    assert url.startswith(f"https://studio.example.com/assets/{ASSET}?sig=")
    assert shown["topic"] == "平价洁面怎么选" and shown["platform"] == "xiaohongshu"


def test_an_exhausted_run_fails_naming_its_checks() -> None:
    failing = {
        "name": "ad_law",
        "passed": False,
        "detail": "「最好」 — 广告法第九条 禁用绝对化用语",
    }
    outcome = HOOKS.read_post(run_values("exhausted", quality={"checks": [failing]}), "xiaohongshu")
    assert not outcome.passed
    assert outcome.reason == "ad_law: 「最好」 — 广告法第九条 禁用绝对化用语"


@pytest.mark.parametrize(
    "values",
    [
        None,
        {},
        {"result": {"outcome": "failed", "message": "模型不可用"}},
        {"result": {"outcome": "completed", "post": {"title": "", "blocks": "junk"}}},
        {"result": {"post": {"blocks": [None, 3]}, "quality": {"checks": [None, "x"]}}},
        {"result": {"post": "junk", "quality": "junk", "images": "junk"}},
        {"result": "junk", "generated_content": 3},
    ],
)
def test_a_run_without_a_post_is_no_post(values: Any) -> None:
    outcome = HOOKS.read_post(values, "weibo")
    assert outcome.post is None and not outcome.passed and outcome.reason


def test_plain_text_keeps_the_words_without_markdown() -> None:
    assert plain_body([{"type": "heading", "text": " 一 "}, {"type": "text", "text": ""}]) == "一"


def test_a_topic_nearly_repeating_another_is_named() -> None:
    assert (
        HOOKS.topic_conflict("学生党平价护肤指南", ["学生党平价护肤攻略"]) == "学生党平价护肤攻略"
    )
    assert HOOKS.topic_conflict("平价面霜 成分解析", ["平价面霜 一周实测"]) is None
