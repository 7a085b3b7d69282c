"""The writer: Markdown parsed by code, tags repaired by code, tokens streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from nodes.writer_agent import parse_post, writer_agent
from tests.support.fake_models import FakeModels, fake_context


@pytest.mark.parametrize(
    ("text", "title", "body", "tags"),
    [
        ("# 标题\n\n正文第一段\n\n#标签1 #标签2", "标题", "正文第一段", ["标签1", "标签2"]),
        ("```markdown\n# 标题\n正文\n#a #b\n```", "标题", "正文", ["a", "b"]),
        ("标题：学生党护肤\n正文", "学生党护肤", "正文", []),
        ("第一行当标题\n正文", "第一行当标题", "正文", []),
        ("只有一行正文", "", "只有一行正文", []),
        ("# 标题\n## 小标题\n正文\n#a#b\n#c", "标题", "## 小标题\n正文", ["a", "b", "c"]),
        ("# 标题\n正文 #不是标签 在句中\n", "标题", "正文 #不是标签 在句中", []),
        ("# 标题 #\n正文\n\n#a #a #A", "标题", "正文", ["a"]),
        # A model that answers JSON instead of Markdown (issue 10).
        ('{"title": "标题", "body": "正文", "tags": ["a", "#b"]}', "标题", "正文", ["a", "b"]),
        (
            '```json\n{"title": "标题", "body": "正文", "tags": "#a #b"}\n```',
            "标题",
            "正文",
            ["a", "b"],
        ),
        ('好的：\n{"标题": "标题", "正文": ["第一段", "第二段"]}', "标题", "第一段\n\n第二段", []),
        ('# 标题\n正文提到 {"a": 1} 这样的写法', "标题", '正文提到 {"a": 1} 这样的写法', []),
    ],
)
def test_parse_post(text: str, title: str, body: str, tags: list[str]) -> None:
    post = parse_post(text)
    assert (post.title, post.body, post.tags) == (title, body, tags)


async def _write(tmp_path: Path, reply: str, **state: Any) -> tuple[dict[str, Any], FakeModels]:
    models = FakeModels({"writer_agent": reply})
    runtime = Runtime(context=fake_context(models, tmp_path))
    update = await writer_agent({"request": "写护肤笔记", **state}, runtime)  # type: ignore[typeddict-item]
    return update, models


async def test_missing_tags_come_from_the_brief_and_extra_tags_are_cut(tmp_path: Path) -> None:
    brief = {"topic": "护肤", "keywords": ["平价", "学生党", "成分"]}
    update, _ = await _write(tmp_path, "# 标题\n正文", creative_brief=brief)
    assert update["generated_content"]["tags"] == ["平价", "学生党", "成分"]
    update, _ = await _write(
        tmp_path, "# 标题\n正文\n#a #b #c #d", creative_brief=brief, constraints={"tag_max": 2}
    )
    assert update["generated_content"]["tags"] == ["a", "b"]


async def test_an_empty_reply_is_recorded_not_raised(tmp_path: Path) -> None:
    update, _ = await _write(tmp_path, "   ", creative_brief={"topic": "护肤"})
    assert "generated_content" not in update
    assert update["agent_errors"][-1].startswith("writer_agent: ")


async def test_a_revision_shows_the_draft_and_the_review(tmp_path: Path) -> None:
    _, models = await _write(
        tmp_path,
        "# 新标题\n新正文",
        creative_brief={"topic": "护肤"},
        generated_content={"title": "旧标题", "body": "旧正文", "tags": []},
        review_feedback={"approved": False, "issues": ["缺少价格"], "suggestions": []},
    )
    prompt = models.calls[0].prompt
    assert "旧正文" in prompt and "缺少价格" in prompt and "修改" in prompt


async def test_a_successful_write_clears_its_old_error(tmp_path: Path) -> None:
    update, _ = await _write(
        tmp_path,
        "# 标题\n正文",
        creative_brief={"topic": "护肤"},
        agent_errors=["writer_agent: the reply had no body", "layout_planner_agent: x"],
    )
    assert update["agent_errors"] == ["layout_planner_agent: x"]
