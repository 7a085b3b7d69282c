"""Platform rules and advertising-law words through the whole pipeline, and adapting a post.

The pipeline runs with scripted fake models: the critic's code checks fail a post
that breaks its platform's rules or uses a forbidden word, naming the rule, and the
next attempt's writer is told why. A run whose input carries `adapt_from` rewrites
that post for its platform with the writer alone, reusing its images where the
platform takes them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from PIL import Image
from pydantic import ValidationError

from agentkit.pipeline_routing import route_after_rag
from agentkit.state import AtelierInput
from tests.graphs.pipeline_runs import (
    context_for,
    judge_reply,
    models_for,
    planner_reply,
    run_pipeline,
)
from tests.support.fake_models import HAPPY_BODY, HAPPY_TITLE, FakeModels

GOOD_POST = f"# 平价面霜怎么选\n\n{HAPPY_BODY}\n\n#平价护肤 #学生党"


def failed(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in verdict["checks"] if not c["passed"]}


# --- the acceptance case: 最 in a title ----------------------------------------------------


async def test_a_writer_that_puts_zui_in_a_title_fails_naming_the_word(tmp_path: Path) -> None:
    replies = iter([f"# 最好用的平价面霜\n\n{HAPPY_BODY}\n\n#平价护肤 #学生党", GOOD_POST])
    models = models_for(judge_reply("passed", 0.9))
    models.script("writer_agent", lambda _m: next(replies))
    run = await run_pipeline(models, tmp_path)

    first, second = run.of_type("critic.verdict")
    assert not first["passed"] and first["next"] == "rag"
    assert failed(first) == {
        "ad_law": {
            "name": "ad_law",
            "passed": False,
            "measured": ["最好"],
            "expected": "no word the advertising law forbids in ads",
            "detail": "「最好」 — 广告法第九条 禁用绝对化用语",
        }
    }
    assert second["passed"] and run.result["outcome"] == "completed"
    assert run.result["post"]["title"] == "平价面霜怎么选"
    # The retry's writer prompt carries the feedback with the word and the rule.
    writer = models.calls_for("writer_agent")
    assert "「最好」 — 广告法第九条" not in writer[0].prompt
    assert "ad_law: 「最好」 — 广告法第九条 禁用绝对化用语" in writer[1].prompt
    # Both were told the list up front.
    assert all("广告合规（由代码逐项核对" in call.prompt for call in writer)


async def test_a_post_over_its_platforms_limit_fails_naming_the_rule(tmp_path: Path) -> None:
    long_body = "预算有限也能把皮肤照顾好。" * 160  # 2,080 characters
    replies = iter([f"# 秋季护肤\n\n{long_body}\n\n#护肤", GOOD_POST])
    models = FakeModels(
        {
            **models_for(judge_reply("passed", 0.9))._scripts,  # the happy team and judge
            "planner": planner_reply(platform="weibo"),
        }
    )
    models.script("writer_agent", lambda _m: next(replies))
    run = await run_pipeline(models, tmp_path, platform="weibo")

    first = run.of_type("critic.verdict")[0]
    row = failed(first)["platform_text_length"]
    assert row["detail"] == "weibo: text (title, body and tags) 2,088 characters, at most 2,000"
    assert "weibo: text (title, body and tags) 2,088 characters" in (
        models.calls_for("writer_agent")[1].prompt
    )
    assert "微博平台规则（由代码逐项核对）" in models.calls_for("writer_agent")[0].prompt
    assert run.result["outcome"] == "completed"


# --- adapting a post ----------------------------------------------------------------------


def stored_images(ctx: Any, count: int) -> list[str]:
    ids = []
    for n in range(count):
        buffer = io.BytesIO()
        Image.new("RGB", (30 + n, 40), "white").save(buffer, format="PNG")
        ids.append(ctx.assets.put(buffer.getvalue()).asset_id)
    return ids


def source_post(images: list[str]) -> dict[str, Any]:
    return {
        "platform": "xiaohongshu",
        "title": HAPPY_TITLE,
        "body": HAPPY_BODY,
        "tags": ["平价护肤", "学生党"],
        "images": images,
    }


def adapter_models(platform: str, writer: Any) -> FakeModels:
    return FakeModels(
        {
            "planner": planner_reply(platform=platform),
            "critic": judge_reply("passed", 0.9),
            "writer_agent": writer,
        }
    )


WEIBO_POST = (
    "# 学生党平价护肤三步走\n\n"
    + "预算有限也能把皮肤照顾好：温和清洁、补水保湿、认真防晒。" * 3
    + "\n\n#平价护肤 #学生党"
)


async def test_a_post_is_adapted_for_weibo_by_the_writer_alone(tmp_path: Path) -> None:
    models = adapter_models("weibo", WEIBO_POST)
    ctx = context_for(models, tmp_path)
    images = stored_images(ctx, 3)
    run = await run_pipeline(
        models,
        tmp_path,
        ctx=ctx,
        request="改编成微博",
        platform="weibo",
        adapt_from=source_post(images),
        image_count=None,  # the source's images decide, not an image count
    )

    assert models.roles_called() == ["planner", "writer_agent", "critic"]  # no team
    stages = [e["stage"] for e in run.of_type("stage.started")]
    assert stages == ["planner", "rag", "adapter", "critic", "finalize"]
    assert run.result["outcome"] == "completed"
    assert run.result["post"]["title"] == "学生党平价护肤三步走"
    assert [i["asset_id"] for i in run.result["images"]] == images  # reused, in order
    # The writer saw the source post, the target's rules and the adaptation task.
    (call,) = models.calls_for("writer_agent")
    assert HAPPY_BODY.splitlines()[0] in call.prompt and "原平台：xiaohongshu" in call.prompt
    assert "微博平台规则" in call.prompt and "这一次你的工作是改编" in call.prompt
    # The critic checked it under weibo's rules, images included.
    (verdict,) = run.of_type("critic.verdict")
    names = {c["name"] for c in verdict["checks"]}
    assert {"platform_text_length", "platform_image_count", "ad_law", "image_files"} <= names
    assert "platform_title_length" not in names  # weibo has no title field


DOUYIN_SCRIPT = """# 三步平价护肤

## 镜头1
画面：护肤品平铺
口播：预算有限也能把皮肤照顾好。
字幕：三步平价护肤

## 镜头2
口播：先温和清洁，再补水保湿。
字幕：清洁和保湿

## 镜头3
口播：白天出门前认真防晒。
字幕：认真防晒

#平价护肤 #学生党"""


async def test_an_adaptation_that_breaks_the_targets_structure_is_written_again(
    tmp_path: Path,
) -> None:
    replies = iter([WEIBO_POST, DOUYIN_SCRIPT])
    models = adapter_models("douyin", lambda _m: next(replies))
    ctx = context_for(models, tmp_path)
    images = stored_images(ctx, 2)
    run = await run_pipeline(
        models,
        tmp_path,
        ctx=ctx,
        request="改成抖音口播脚本",
        platform="douyin",
        adapt_from=source_post(images),
        image_count=None,  # the source's images decide, not an image count
    )

    first, second = run.of_type("critic.verdict")
    assert failed(first)["platform_shots"]["detail"] == "douyin: 0 shots, at least 3"
    assert second["passed"] and run.result["outcome"] == "completed"
    retry = models.calls_for("writer_agent")[1].prompt
    assert "douyin: 0 shots, at least 3" in retry and "请根据上一次评审的意见重新改编" in retry
    assert run.result["images"] == []  # 抖音 takes no images: the source's stay behind
    assert [e["stage"] for e in run.of_type("stage.started")].count("adapter") == 2


async def test_an_adaptation_for_x_keeps_at_most_four_images(tmp_path: Path) -> None:
    thread = (
        "# Skincare on a budget\n\nCleanse gently.\n---\nMoisturise.\n---\nSunscreen daily."
        "\n\n#skincare"
    )
    models = adapter_models("x", thread)
    ctx = context_for(models, tmp_path)
    images = stored_images(ctx, 6)
    run = await run_pipeline(
        models,
        tmp_path,
        ctx=ctx,
        request="adapt for X",
        platform="x",
        adapt_from=source_post(images),
        image_count=None,  # the source's images decide, not an image count
    )
    assert [i["asset_id"] for i in run.result["images"]] == images[:4]
    (verdict,) = run.of_type("critic.verdict")
    thread_row = next(c for c in verdict["checks"] if c["name"] == "platform_thread")
    assert thread_row["passed"] and len(thread_row["measured"]) == 3


async def test_a_writer_failure_while_adapting_fails_the_run_without_internals(
    tmp_path: Path,
) -> None:
    def down(_messages: list[BaseMessage]) -> Any:
        raise ConnectionError("writer model down at 10.0.0.9")

    models = adapter_models("weibo", down)
    run = await run_pipeline(
        models,
        tmp_path,
        request="改编成微博",
        platform="weibo",
        adapt_from=source_post([]),
        image_count=None,  # the source's images decide, not an image count
    )
    assert run.result["outcome"] == "failed"
    assert "10.0.0.9" not in str(run.result) and "重试" in run.result["message"]
    assert models.count("critic") == 0  # nothing to judge


@pytest.mark.parametrize("reply", ["", "# 只有标题", "   "])
async def test_an_empty_adaptation_is_judged_and_written_again(tmp_path: Path, reply: str) -> None:
    replies = iter([reply, WEIBO_POST])
    models = adapter_models("weibo", lambda _m: next(replies))
    run = await run_pipeline(
        models,
        tmp_path,
        request="改编成微博",
        platform="weibo",
        adapt_from=source_post([]),
        image_count=None,  # the source's images decide, not an image count
    )
    first = run.of_type("critic.verdict")[0]
    assert "answer_length" in failed(first)
    assert run.result["outcome"] == "completed" and models.count("writer_agent") == 2


def test_only_a_run_with_a_post_to_adapt_goes_to_the_adapter() -> None:
    assert route_after_rag({}) == "executor"
    assert route_after_rag({"adapt_from": None}) == "executor"
    assert route_after_rag({"adapt_from": {"platform": "weibo"}}) == "executor"  # no body
    assert route_after_rag({"adapt_from": "junk"}) == "executor"
    assert route_after_rag({"adapt_from": {"platform": "weibo", "body": "正文"}}) == "adapter"


@pytest.mark.parametrize(
    ("source", "where"),
    [
        ({"platform": "bilibili", "body": "正文"}, ("adapt_from", "platform")),
        ({"platform": "weibo"}, ("adapt_from", "body")),
        ({"platform": "weibo", "body": ""}, ("adapt_from", "body")),
        (
            {"platform": "weibo", "body": "正文", "images": ["not-an-id"]},
            ("adapt_from", "images", 0),
        ),
        (
            {"platform": "weibo", "body": "正文", "images": ["0" * 32] * 10},
            ("adapt_from", "images"),
        ),
        ({"platform": "weibo", "body": "正文", "tags": [""]}, ("adapt_from", "tags", 0)),
        ({"platform": "weibo", "body": "正文", "colour": "red"}, ("adapt_from", "colour")),
        ("一段文字", ("adapt_from",)),
    ],
)
def test_a_bad_post_to_adapt_is_refused_naming_the_field(
    source: Any, where: tuple[Any, ...]
) -> None:
    with pytest.raises(ValidationError) as error:
        AtelierInput.model_validate({"request": "改编", "platform": "x", "adapt_from": source})
    assert error.value.errors()[0]["loc"][: len(where)] == where
    ok = {"platform": "weibo", "body": "正文", "images": ["0" * 32]}
    assert AtelierInput.model_validate({"request": "改编", "adapt_from": ok}).adapt_from == ok
