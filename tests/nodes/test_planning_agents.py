"""The brief, research, layout and image planning agents, one node call at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agentkit.post import BRIEF_WRITTEN_FIELDS
from nodes.brief_compiler_agent import CreativeBrief, brief_compiler_agent
from nodes.image_planner_agent import image_planner_agent
from nodes.layout_planner_agent import layout_planner_agent
from nodes.research_evidence_agent import research_evidence_agent
from tests.support.fake_models import FakeModels, fake_context, garbage, tool_call

BLOCKER = {"id": "n1", "type": "blocker", "content": "禁止使用绝对化用语（最、第一、顶级）"}


async def _run(node: Any, role: str, reply: Any, tmp_path: Path, **state: Any) -> Any:
    models = FakeModels({role: reply})
    update = await node(
        {"request": "写一篇平价护肤笔记", **state}, Runtime(context=fake_context(models, tmp_path))
    )
    return update, models


def test_the_critic_reads_exactly_the_brief_fields_the_model_writes() -> None:
    assert tuple(CreativeBrief.model_fields) == BRIEF_WRITTEN_FIELDS


async def test_brief_carries_blocker_notes_and_constraint_terms(tmp_path: Path) -> None:
    reply = tool_call("CreativeBrief", topic="平价护肤", constraints=["不夸大"], keywords=["护肤"])
    update, models = await _run(
        brief_compiler_agent,
        "brief_compiler_agent",
        reply,
        tmp_path,
        knowledge_notes=[BLOCKER],
        constraints={"must_avoid": ["最"], "must_include": ["学生党"]},
        audience="大学生",
    )
    brief = update["creative_brief"]
    assert brief["constraints"] == ["不夸大"]  # what the model wrote
    assert brief["house_rules"] == [  # what code adds, kept apart for the deviation check
        BLOCKER["content"],
        "必须包含：学生党",
        "不能出现：最",
    ]
    assert brief["audience"] == "大学生"
    assert models.calls[0].forced_tool == "CreativeBrief"
    assert "绝对不能出现的词：最" in models.calls[0].prompt


async def test_brief_without_a_topic_is_an_error_not_a_crash(tmp_path: Path) -> None:
    update, _ = await _run(brief_compiler_agent, "brief_compiler_agent", garbage(), tmp_path)
    assert update == {"agent_errors": ["brief_compiler_agent: no CreativeBrief with a topic"]}


async def test_research_first_turn_is_a_forced_search(tmp_path: Path) -> None:
    search = tool_call("search_knowledge", query="平价护肤")
    update, models = await _run(
        research_evidence_agent, "research_evidence_agent", search, tmp_path
    )
    assert models.calls[0].forced_tool == "search_knowledge"
    assert update["research_tool_rounds"] == 1
    assert update["research_messages"][0]["data"]["tool_calls"][0]["name"] == "search_knowledge"


async def test_research_answering_in_prose_is_forced_to_the_pack(tmp_path: Path) -> None:
    pack = tool_call("EvidencePack", summary="要点", items=[{"fact": "防晒重要"}])
    update, models = await _run(
        research_evidence_agent,
        "research_evidence_agent",
        ["我觉得资料够了。", pack],
        tmp_path,
        research_tool_rounds=1,
    )
    assert [c.forced_tool for c in models.calls] == [None, "EvidencePack"]
    assert update["evidence_pack"]["items"] == [{"fact": "防晒重要", "source": "常识"}]
    assert update["research_messages"] is None and update["research_tool_rounds"] == 0


async def test_research_with_an_empty_pack_is_an_error(tmp_path: Path) -> None:
    update, _ = await _run(
        research_evidence_agent,
        "research_evidence_agent",
        tool_call("EvidencePack"),
        tmp_path,
        research_tool_rounds=3,
    )
    assert "evidence_pack" not in update
    assert update["agent_errors"][-1].startswith("research_evidence_agent: ")


async def test_layout_opens_with_a_cover_and_counts_the_requested_images(tmp_path: Path) -> None:
    reply = tool_call(
        "LayoutSpec", blocks=[{"type": "标题", "desc": "开头"}, {"type": "image"}], total_images=7
    )
    update, _ = await _run(
        layout_planner_agent, "layout_planner_agent", reply, tmp_path, image_count=2
    )
    layout = update["layout_spec"]
    assert layout["total_images"] == 2
    assert [b["type"] for b in layout["blocks"]] == ["cover", "text", "image"]


async def test_image_plans_are_completed_to_the_wanted_count(tmp_path: Path) -> None:
    reply = tool_call(
        "ImagePlans",
        plans=[
            {"slot": 3, "type": "content", "desc": "第二张", "prompt": "p2"},
            {"slot": 1, "type": "detail", "desc": "封面", "prompt": "p1"},
        ],
    )
    update, _ = await _run(
        image_planner_agent,
        "image_planner_agent",
        reply,
        tmp_path,
        image_count=4,
        layout_spec={"blocks": [{"type": "image", "desc": "版式里的配图"}], "total_images": 4},
        body_blocks=[{"heading": "防晒", "text": "每天涂"}],
        images=[{"slot": 1, "asset_id": "old"}],
    )
    plans = update["image_plans"]
    assert [(p["slot"], p["type"], p["desc"]) for p in plans] == [
        (1, "cover", "封面"),
        (2, "content", "第二张"),
        (3, "content", "版式里的配图"),
        (4, "content", "防晒"),
    ]
    assert update["images"] == [] and update["images_complete"] is False


async def test_image_plans_respect_the_constraints_image_range(tmp_path: Path) -> None:
    reply = tool_call("ImagePlans", plans=[{"desc": "封面", "prompt": "p"}])
    update, _ = await _run(
        image_planner_agent,
        "image_planner_agent",
        reply,
        tmp_path,
        image_count=6,
        constraints={"image_max": 2},
    )
    assert len(update["image_plans"]) == 2
    update, _ = await _run(
        image_planner_agent, "image_planner_agent", tool_call("ImagePlans", plans=[]), tmp_path
    )
    assert update["agent_errors"][-1].startswith("image_planner_agent: ")
