"""Tests of the scripted fake chat models the graph tests run on."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import START, StateGraph
from pydantic import BaseModel
from typing_extensions import TypedDict

from tests.support.fake_models import (
    FakeModels,
    ScriptExhausted,
    decision,
    garbage,
    happy_supervisor,
    happy_team,
    tool_call,
)


class Verdict(BaseModel):
    """A structured-output schema used by the tests."""

    approved: bool
    notes: str = ""


def test_list_is_consumed_in_order_and_exhaustion_names_the_role() -> None:
    models = FakeModels({"critic": ["one", AIMessage(content="two")]})
    llm = models("critic")
    assert [llm.invoke("q").content, llm.invoke("q").content] == ["one", "two"]
    with pytest.raises(ScriptExhausted, match="'critic'"):
        llm.invoke("q")


def test_unscripted_role_fails_loudly() -> None:
    with pytest.raises(ScriptExhausted, match="'planner' is not scripted"):
        FakeModels({"critic": "x"})("planner").invoke("q")


def test_callable_sees_the_prompt_and_calls_are_recorded() -> None:
    models = FakeModels({"planner": lambda messages: f"{len(messages)} messages"})
    prompt = [SystemMessage("规则"), HumanMessage("请求文本")]
    assert models("planner").invoke(prompt).content == "2 messages"
    [call] = models.calls
    assert call.role == "planner"
    assert call.prompt_chars == len("规则") + len("请求文本")
    assert "请求文本" in call.prompt
    assert models.count("planner") == 1 and models.count() == 1


def test_structured_output_by_forced_tool_call() -> None:
    models = FakeModels({"critic": tool_call("Verdict", approved=True, notes="好")})
    runnable = models("critic").with_structured_output(
        Verdict, method="function_calling", include_raw=True
    )
    result: Any = runnable.invoke("q")
    assert result["parsed"] == Verdict(approved=True, notes="好")
    assert models.calls[-1].tools == ["Verdict"]
    assert models.calls[-1].forced_tool == "Verdict"


def test_garbage_does_not_parse() -> None:
    models = FakeModels({"critic": garbage()})
    result: Any = (
        models("critic")
        .with_structured_output(Verdict, method="function_calling", include_raw=True)
        .invoke("q")
    )
    assert result["parsed"] is None


def test_bind_tools_records_names_and_choice() -> None:
    models = FakeModels({"supervisor": decision("writer_agent")})
    reply = models("supervisor").bind_tools([Verdict], tool_choice="Verdict").invoke("q")
    assert reply.tool_calls[0]["name"] == "SupervisorDecision"
    assert reply.tool_calls[0]["id"]  # ids are filled in
    assert models.calls[-1].tools == ["Verdict"]
    assert models.calls[-1].forced_tool == "Verdict"


def test_roles_carry_the_real_factorys_stream_tags() -> None:
    models = FakeModels()
    assert "nostream" in (models("supervisor").tags or [])
    assert "nostream" not in (models("writer_agent").tags or [])


class _State(TypedDict):
    text: str


async def test_writer_tokens_stream_in_messages_mode() -> None:
    models = FakeModels(
        {"writer_agent": "一二三四五六七八九十", "critic": "不该出现"}, chunk_chars=3
    )

    async def write(state: _State) -> dict[str, str]:
        reply = await models("writer_agent").ainvoke([HumanMessage("写")])
        judged = await models("critic").ainvoke([HumanMessage("判")])
        return {"text": str(reply.content) + str(judged.content)}

    graph = StateGraph(_State).add_node("write", write).add_edge(START, "write").compile()
    stream: Any = graph.astream({"text": ""}, stream_mode="messages")
    tokens = [chunk.content async for chunk, _meta in stream if chunk.content]
    assert tokens == ["一二三", "四五六", "七八九", "十"]  # the nostream critic stays off
    assert models.calls_for("writer_agent")[0].streamed is True


async def test_streamed_tool_calls_are_reassembled() -> None:
    models = FakeModels({"image_agent": happy_team(2)["image_agent"]})
    chunks = [c async for c in models("image_agent").astream([HumanMessage("画")])]
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert [c["args"]["slot"] for c in total.tool_calls] == [1, 2]


def test_happy_supervisor_picks_the_first_missing_stage() -> None:
    status = (
        "✅ creative_brief（brief_compiler_agent）\n❌ evidence_pack（research_evidence_agent）"
    )
    reply = happy_supervisor([HumanMessage(status)])
    assert reply.tool_calls[0]["args"]["next_agent"] == "research_evidence_agent"
    done = happy_supervisor([HumanMessage("✅ creative_brief（brief_compiler_agent）")])
    assert done.tool_calls[0]["args"]["next_agent"] == "END"


def test_happy_research_searches_until_it_has_a_result() -> None:
    research = happy_team()["research_evidence_agent"]
    assert callable(research)
    first = research([HumanMessage("研究")])
    assert isinstance(first, AIMessage)
    assert first.tool_calls[0]["name"] == "search_knowledge"
    second = research([HumanMessage("研究"), first, ToolMessage("笔记", tool_call_id="c1")])
    assert isinstance(second, AIMessage)
    assert second.tool_calls[0]["name"] == "EvidencePack"
