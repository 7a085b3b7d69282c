"""The executor team end to end on scripted fake models: paths, corrections, caps, limits."""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from PIL import Image

from core.agents import AGENT_TABLE, AGENTS
from graphs.team import AGENT_NODES, build_team, team_recursion_limit
from knowledge.notes import KnowledgeNote
from knowledge.repository import InMemoryNoteRepository
from providers.images import GeneratedImage, ImageProviderError, ImageRequest, LocalCardProvider
from tests.graphs.team_runs import run_team
from tests.support.fake_models import (
    HAPPY_TAGS,
    FakeModels,
    Reply,
    Responder,
    decision,
    fake_context,
    garbage,
    happy_supervisor,
    happy_team,
    tool_call,
)

ROOT = Path(__file__).resolve().parents[2]
NORMAL_ROUTES = [f"route:{agent}" for agent in AGENTS]
TOOL_NODES = ("supervisor_tools", "research_evidence_tools", "image_tools")
#: Where the tool-loop agents' nodes are drawn (`get_graph(xray=True)`): in their subgraphs.
TOOL_LOOPS = {
    name: f"{agent}:{name}"
    for agent, tools in (
        ("research_evidence_agent", "research_evidence_tools"),
        ("image_agent", "image_tools"),
    )
    for name in (agent, tools)
}


def then_happy(*first: AIMessage) -> Callable[[list[BaseMessage]], Reply]:
    """Return a supervisor that answers `first` in order, then follows the normal path."""
    queue = list(first)

    def respond(messages: list[BaseMessage]) -> Reply:
        return queue.pop(0) if queue else happy_supervisor(messages)

    return respond


def _open_png(path: str) -> tuple[tuple[int, int], str, str | None]:
    with Image.open(path) as image:
        image.load()
        return image.size, image.mode, image.format


# --- (a) the normal path ----------------------------------------------------------


async def test_normal_path_writes_a_post_with_real_images(tmp_path: Path) -> None:
    models = FakeModels(happy_team(3))
    ctx = fake_context(models, tmp_path)
    await ctx.notes.add(
        KnowledgeNote.create("conclusion", "学生党平价护肤：先选氨基酸洁面", tags=["平价护肤"])
    )

    run = await run_team(models, tmp_path, ctx=ctx, image_count=3)

    assert run.routes == NORMAL_ROUTES
    content = run.state["generated_content"]
    assert content["title"] and "防晒" in content["body"]
    assert content["tags"] == list(HAPPY_TAGS)
    images = run.state["images"]
    assert [i["slot"] for i in images] == [1, 2, 3]
    assert run.state["generated_image_asset_ids"] == [i["asset_id"] for i in images]
    for image in images:
        assert _open_png(image["path"]) == ((1080, 1440), "RGB", "PNG")
        assert image["url"] == f"/assets/{image['asset_id']}"
    created = run.of_type("asset.created")
    assert sorted(e["slot"] for e in created) == [1, 2, 3]
    assert run.state["review_feedback"]["approved"] is True
    assert run.state["team_step"] == 8

    # The research agent searched the vault once, through the tool loop.
    first, second = models.calls_for("research_evidence_agent")
    assert first.forced_tool == "search_knowledge"
    results = [m for m in second.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and "氨基酸洁面" in str(results[0].content)


async def test_agents_get_their_sections_not_the_history(tmp_path: Path) -> None:
    models = FakeModels(happy_team(2))
    await run_team(models, tmp_path, image_count=2)

    loops = {"research_evidence_agent", "image_agent"}
    for call in models.calls:
        if call.role not in loops:
            assert len(call.messages) == 2, call.role  # system rules + one context message
    brief = models.calls_for("brief_compiler_agent")[0].prompt
    assert "平价护肤的关键是温和清洁" not in brief  # the evidence is not its business
    writer = models.calls_for("writer_agent")[0].prompt
    assert "平价护肤的关键是温和清洁" in writer  # but the writer's
    assert "<<<用户请求>>>" in writer and "<<<end 用户请求>>>" in writer
    # The supervisor's prompt stays small however far the run gets.
    sizes = [c.prompt_chars for c in models.calls_for("supervisor")]
    assert max(sizes) < 3 * min(sizes)


async def test_prompts_show_retry_context_notes_and_guidance(tmp_path: Path) -> None:
    blocker = "禁止使用绝对化用语（最、第一、顶级）"
    models = FakeModels(happy_team(1))
    await run_team(
        models,
        tmp_path,
        image_count=1,
        knowledge_notes=[{"id": "n1", "type": "blocker", "content": blocker}],
        retry_context={
            "review_verdict": "needs_improvement",
            "review_feedback": "缺少价格信息",
            "review_reason": "信息密度不足",
            "verified_items": ["title_length"],
            "previous_attempt_summary": "上一版只写了步骤",
        },
        constraints={"title_min": 5, "title_max": 20, "tag_min": 2, "tag_max": 5},
    )
    for role in ("supervisor", "writer_agent"):
        prompt = models.calls_for(role)[0].prompt
        assert blocker in prompt and "缺少价格信息" in prompt and "上一版只写了步骤" in prompt
    writer = models.calls_for("writer_agent")[0].prompt
    assert "标题长度：5–20 个字符" in writer and "标签数量：2–5 个" in writer
    assert "请完成 writer_agent 的工作。" in writer  # the supervisor's guidance
    assert "重点关注" in writer
    brief = models.calls_for("brief_compiler_agent")[0]
    assert blocker in brief.prompt
    # Blocker notes are carried into the brief by code, whatever the model wrote.
    writer_prompt_brief = models.calls_for("writer_agent")[0].prompt
    assert writer_prompt_brief.count(blocker) >= 2  # in the notes and in the brief


async def test_writer_tokens_stream_and_nothing_else_does(tmp_path: Path) -> None:
    models = FakeModels(happy_team(1))
    run = await run_team(models, tmp_path, image_count=1, stream_tokens=True)
    assert run.tokens, "no tokens streamed"
    assert {node for node, _ in run.tokens} == {"writer_agent"}
    streamed = "".join(token for _, token in run.tokens)
    assert streamed.startswith("# ") and run.state["generated_content"]["title"] in streamed


def _prose_unless_forced(models: FakeModels, responder: Responder) -> Responder:
    """Answer like a small local model: prose whenever no tool is forced."""

    def respond(messages: list[BaseMessage]) -> Reply:
        if models.calls[-1].forced_tool is None:
            return "好的，我来想一想怎么做。"
        return responder(messages) if callable(responder) else responder  # type: ignore[return-value]

    return respond


async def test_a_model_that_never_chooses_tools_is_asked_once_then_forced(tmp_path: Path) -> None:
    models = FakeModels()
    for role, responder in happy_team(2).items():
        shy = role in ("supervisor", "research_evidence_agent", "image_agent")
        models.script(role, _prose_unless_forced(models, responder) if shy else responder)
    run = await run_team(models, tmp_path, image_count=2)

    assert run.routes == NORMAL_ROUTES  # prose to an optional offer is no invalid decision
    assert sorted(run.state["no_optional_tools"]) == [
        "image_agent",
        "research_evidence_agent",
        "supervisor",
    ]
    # One prose answer per role, then straight to the forced call (or, for images, none).
    supervisor = models.calls_for("supervisor")
    assert len(supervisor) == 9 and [c.forced_tool for c in supervisor[:2]] == [
        None,
        "SupervisorDecision",
    ]
    assert all(c.forced_tool == "SupervisorDecision" for c in supervisor[2:])
    research = [c.forced_tool for c in models.calls_for("research_evidence_agent")]
    assert research == ["search_knowledge", None, "EvidencePack"]
    assert models.count("image_agent") == 1
    assert len(run.state["images"]) == 2 and run.state["generated_content"]["body"]


# --- (b) precondition corrections and quality fallbacks ---------------------------


@pytest.mark.parametrize(
    ("first", "fallback"),
    [
        ([decision("writer_agent")], ("writer_agent", "brief_compiler_agent")),
        (
            [decision("brief_compiler_agent"), decision("review_agent")],
            ("review_agent", "writer_agent"),
        ),
        ([decision("image_agent")], ("image_agent", "image_planner_agent")),
    ],
    ids=["writer-without-brief", "review-without-body", "image-without-plans"],
)
async def test_precondition_corrections(
    tmp_path: Path, first: list[AIMessage], fallback: tuple[str, str]
) -> None:
    models = FakeModels({**happy_team(2), "supervisor": then_happy(*first)})
    run = await run_team(models, tmp_path, image_count=2)

    assert run.fallbacks[0] == (*fallback, "precondition")
    event = run.of_type("agent.fallback")[0]
    assert event["detail"]
    # The corrected agent ran right after the correction, and the post still got made.
    log = run.state["team_log"]
    corrected = next(e for e in log if e["reason"] == "precondition")
    assert corrected["requested"] == fallback[0] and corrected["routed"] == fallback[1]
    assert run.state["generated_content"]["body"]
    assert len(run.state["images"]) == 2
    assert run.state["review_feedback"]["approved"] is True


def _revised(responder: Responder) -> Callable[[list[BaseMessage]], Reply]:
    """Wrap a responder so each call's output differs (a re-run agent revises its work)."""
    count = 0

    def mark(value: Any) -> Any:
        if isinstance(value, str):
            return f"{value}（第{count}版）"
        if isinstance(value, list):
            return [mark(v) for v in value]
        if isinstance(value, dict):
            return {k: v if k in ("type", "slot") else mark(v) for k, v in value.items()}
        return value

    def respond(messages: list[BaseMessage]) -> Reply:
        nonlocal count
        count += 1
        reply = responder(messages) if callable(responder) else responder
        if isinstance(reply, str):
            body, tags = reply.rsplit("\n\n", 1)
            return f"{body}\n\n修订第{count}版。\n\n{tags}"
        assert isinstance(reply, AIMessage)
        calls = [{**c, "args": mark(copy.deepcopy(c["args"]))} for c in reply.tool_calls]
        return AIMessage(content=reply.content, tool_calls=calls)

    return respond


def _review(low: str | None) -> AIMessage:
    dims = dict.fromkeys(
        ("infoDensity", "textImageAlignment", "styleConsistency", "readability", "platformFit"),
        0.85,
    )
    if low:
        dims[low] = 0.3
    return tool_call(
        "ReviewResult",
        approved=low is None,
        score=0.5 if low else 0.9,
        issues=[f"{low} 太低"] if low else [],
        suggestions=[],
        dimensions=dims,
    )


@pytest.mark.parametrize(
    ("dimension", "agent"),
    [
        ("infoDensity", "research_evidence_agent"),
        ("textImageAlignment", "layout_planner_agent"),
        ("styleConsistency", "reference_intelligence_agent"),
        ("readability", "image_planner_agent"),
        ("platformFit", "writer_agent"),
    ],
)
async def test_quality_fallbacks(tmp_path: Path, dimension: str, agent: str) -> None:
    team = happy_team(2)
    models = FakeModels(
        {**team, agent: _revised(team[agent]), "review_agent": [_review(dimension), _review(None)]}
    )
    run = await run_team(models, tmp_path, image_count=2)

    assert ("END", agent, "quality") in run.fallbacks
    at = run.routes.index(f"fallback:END>{agent}(quality)")
    assert run.routes[:at] == [*NORMAL_ROUTES, "route:END"]
    # The fix ran, the stale review was redone on the new draft, and it passed.
    assert run.routed(agent) == 2
    assert models.count("review_agent") == 2
    assert run.state["review_feedback"]["approved"] is True
    assert run.state["quality_scores"][dimension] == 0.85
    assert len(run.state["images"]) == 2


# --- (c) tool caps -----------------------------------------------------------------


class CountingNotes(InMemoryNoteRepository):
    """A vault that counts searches."""

    searches = 0

    async def search(
        self, query: str, limit: int = 6, only_approved: bool = False, **scope: Any
    ) -> Any:
        self.searches += 1
        return await super().search(query, limit, only_approved, **scope)


async def test_research_tool_loop_stops_after_three_rounds(tmp_path: Path) -> None:
    always_search = tool_call("search_knowledge", query="平价护肤")
    models = FakeModels({**happy_team(1), "research_evidence_agent": always_search})
    notes = CountingNotes()
    ctx = fake_context(models, tmp_path, notes=notes)
    run = await run_team(models, tmp_path, ctx=ctx, image_count=1)

    turns = run.routed("research_evidence_agent")
    assert turns >= 1
    assert notes.searches == 3 * turns  # never a fourth round
    calls = models.calls_for("research_evidence_agent")
    assert len(calls) == 4 * turns  # three searching turns, then the forced pack
    assert [c.forced_tool for c in calls[3::4]] == ["EvidencePack"] * turns
    assert "evidence_pack" not in run.state or run.state["evidence_pack"] is None
    assert any(f == ("research_evidence_agent", f[1], "cap") for f in run.fallbacks)
    assert run.state["generated_content"]["body"]  # the rest of the team went on


class FailingProvider:
    """An image provider that always fails."""

    name = "local"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        self.calls += 1
        raise ImageProviderError("images API unavailable (503)")


async def test_image_tool_loop_stops_below_ten_rounds(tmp_path: Path) -> None:
    models = FakeModels(happy_team(1))
    provider = FailingProvider()
    ctx = fake_context(models, tmp_path, image_providers={"local": provider})
    run = await run_team(models, tmp_path, ctx=ctx, image_count=1)

    turns = run.routed("image_agent")
    assert turns >= 1
    assert provider.calls == 9 * turns  # nine rounds per turn, one plan each
    assert run.state["images"] == [] and run.state.get("images_complete") is False
    assert any("image_agent" in e for e in run.state["agent_errors"])


async def test_the_same_agent_without_progress_is_capped(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(1), "supervisor": decision("layout_planner_agent")})
    run = await run_team(models, tmp_path, image_count=1)

    # The layout ran, then twice more without changing anything; the third repeat is
    # corrected to the first missing stage.
    assert run.routes[:4] == ["route:layout_planner_agent"] * 4
    assert run.fallbacks[0] == ("layout_planner_agent", "brief_compiler_agent", "cap")
    assert not run.state.get("given_up")  # it delivered: still there for a quality fix
    assert run.state["team_step"] <= 24


async def test_an_agent_that_never_delivers_is_given_up_and_the_team_moves_on(
    tmp_path: Path,
) -> None:
    # A model that cannot fill the evidence pack, and a supervisor that insists on it.
    models = FakeModels(
        {
            **happy_team(1),
            "research_evidence_agent": garbage(),
            "supervisor": decision("research_evidence_agent"),
        }
    )
    limits = {"max_team_steps": 12}  # fast mode's budget
    run = await run_team(models, tmp_path, image_count=1, limits=limits)

    # Two turns without progress, the third choice is capped and research given up on ...
    assert run.routed("research_evidence_agent") == 2
    assert run.state["given_up"] == ["research_evidence_agent"]
    # ... and every later insistence is corrected at once to the next missing stage,
    # so the post is still written, drawn and reviewed within the step budget.
    later = [to for frm, to, reason in run.fallbacks[1:] if reason == "cap"]
    assert "research_evidence_agent" not in later
    assert run.state["generated_content"]["body"]
    assert run.state["images"] and run.state["review_feedback"] is not None
    assert run.state["team_step"] <= 12


# --- (d) a supervisor that never answers properly ---------------------------------


@pytest.mark.parametrize("answer", [garbage(), decision("poet_agent")], ids=["garbage", "unknown"])
async def test_invalid_supervisor_still_ends_within_the_step_cap(
    tmp_path: Path, answer: AIMessage
) -> None:
    models = FakeModels({**happy_team(1), "supervisor": answer})
    run = await run_team(
        models, tmp_path, image_count=1, config={"recursion_limit": team_recursion_limit()}
    )
    assert run.state["team_step"] <= 24
    assert all(reason == "invalid_decision" for _, _, reason in run.fallbacks)
    # Two re-asks, then routing walks the missing stages itself.
    assert [to for _, to, _ in run.fallbacks[:3]] == ["supervisor", "supervisor", AGENTS[0]]
    assert run.state["generated_content"]["body"]


@pytest.mark.parametrize(
    "answer", [garbage(), decision("END")], ids=["garbage", "end-without-body"]
)
async def test_step_cap_ends_a_stuck_team_without_recursion_error(
    tmp_path: Path, answer: AIMessage
) -> None:
    models = FakeModels({**happy_team(1), "supervisor": answer})
    limits = {"max_team_steps": 5}
    run = await run_team(
        models,
        tmp_path,
        image_count=1,
        limits=limits,
        config={"recursion_limit": team_recursion_limit(limits)},
    )
    assert run.state["team_step"] == 5
    assert run.fallbacks[-1][1:] == ("__end__", "cap")


def test_recursion_limit_formula() -> None:
    # The entry, the decisions, the one-superstep agent steps between them, finish_team,
    # and LangGraph's last tick; a tool loop's rounds are its subgraph's own supersteps.
    assert team_recursion_limit() == 1 + 24 * 5 + 23 * 1 + 1 + 1
    # A short team run still leaves the image loop (nine rounds) its supersteps.
    assert team_recursion_limit({"max_team_steps": 5, "max_supervisor_tool_rounds": 0}) == (
        1 + 2 * 9 + 1
    )
    assert (build_team().config or {}).get("recursion_limit") == team_recursion_limit()


# --- (f) the graph as Studio sees it ----------------------------------------------


def test_langgraph_json_loads_the_team_and_every_agent_is_a_node() -> None:
    spec = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))["graphs"]["team"]
    module_name, variable = spec.split(":")
    graph = getattr(importlib.import_module(module_name), variable)

    assert graph.name == "team"
    drawing = graph.get_graph(xray=True)
    mermaid = drawing.draw_mermaid()
    # The tool-loop agents are subgraphs: their nodes are drawn inside them.
    for node in (*AGENTS, "supervisor", *TOOL_NODES):
        drawn = TOOL_LOOPS.get(node, node)
        assert drawn in drawing.nodes, drawn
        escaped = drawn.replace(":", "\\3a")
        assert f"\t{escaped}(" in mermaid or f"\t{escaped}[" in mermaid, node
    assert "supervisor -.-> writer_agent" in mermaid
    assert "image_agent\\3aimage_tools --> image_agent\\3aimage_agent" in mermaid
    assert "finish_team --> __end__" in mermaid


def test_the_team_names_every_agents_node_in_the_agent_tables_order() -> None:
    assert tuple(AGENT_NODES) == AGENTS == tuple(AGENT_TABLE)
    for name, node in AGENT_NODES.items():
        assert (node.__module__, node.__name__) == (f"nodes.{name}", name)


def test_input_and_output_schemas_are_the_team_contract() -> None:
    graph = build_team()
    inputs = set(graph.get_input_jsonschema()["properties"])
    outputs = set(graph.get_output_jsonschema()["properties"])
    assert {"request", "constraints", "retry_context", "knowledge_notes", "limits"} <= inputs
    assert "generated_content" not in inputs
    assert {"generated_content", "images", "generated_image_asset_ids", "team_log"} <= outputs
    assert not {"supervisor_messages", "image_messages", "team_step"} & outputs


# --- (g) images are drawn concurrently --------------------------------------------


class SlowProvider:
    """Render real cards, but only after a pause, recording when each started and ended."""

    name = "local"

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.inner = LocalCardProvider()
        self.spans: list[tuple[float, float]] = []

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        start = time.monotonic()
        await asyncio.sleep(self.pause)
        image = await self.inner.generate(req)
        self.spans.append((start, time.monotonic()))
        return image


async def test_images_are_generated_concurrently(tmp_path: Path) -> None:
    models = FakeModels(happy_team(4))
    provider = SlowProvider(pause=0.3)
    ctx = fake_context(models, tmp_path, image_providers={"local": provider})
    run = await run_team(models, tmp_path, ctx=ctx, image_count=4)

    assert len(provider.spans) == 4 and len(run.state["images"]) == 4
    last_start = max(start for start, _ in provider.spans)
    first_end = min(end for _, end in provider.spans)
    assert last_start < first_end  # every image started before any finished
