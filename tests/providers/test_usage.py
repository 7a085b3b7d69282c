"""LLM usage per role: counted from the server's answers, never invented (providers/usage.py).

The models are the real ones the factory builds (`ChatOpenAI` with the usage callback),
talking to the scripted OpenAI-compatible server on loopback, which reports usage the
way OpenAI does — or, when told, reports none, as some servers do.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, TypedDict

import openai
import pytest
from langgraph.graph import END, START, StateGraph

from core.settings import Settings
from providers.llm import OpenAIModelFactory
from providers.usage import add_usage, metering, usage_totals
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer, usage_of

MODELS = {"writer_agent": "m-writer", "critic": "m-critic", "supervisor": "m-supervisor"}


def _reply(req: ChatRequest) -> Reply:
    return Reply.text(f"{req.model} 的回答：" + "内容" * 20)


def _factory(server: ScriptedOpenAIServer, tmp_path: Path) -> OpenAIModelFactory:
    settings = Settings(
        data_dir=tmp_path / "data",
        llm_base_url=server.base_url,
        llm_models=MODELS,
        llm_max_retries=0,
    )
    return OpenAIModelFactory(settings)


def _expected(requests: list[ChatRequest], respond: Any) -> dict[str, tuple[int, int, int]]:
    """(calls, prompt, completion) per role, from what the server answered."""
    roles = {model: role for role, model in MODELS.items()}
    found: dict[str, tuple[int, int, int]] = {}
    for req in requests:
        usage = usage_of(req, respond(req))
        calls, prompt, completion = found.get(roles[req.model], (0, 0, 0))
        found[roles[req.model]] = (
            calls + 1,
            prompt + usage["prompt_tokens"],
            completion + usage["completion_tokens"],
        )
    return found


class State(TypedDict):
    text: str


async def test_usage_by_role_matches_what_the_server_reported(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(_reply) as server:
        models = _factory(server, tmp_path)

        # A team subgraph inside the metered block, with two calls of one node running
        # concurrently: the tasks LangGraph starts inherit the block's ledger.
        async def writer(state: State) -> State:
            reply = await models("writer_agent").ainvoke("写一篇笔记")  # streamed
            return {"text": str(reply.content)}

        async def critic(state: State) -> State:
            await asyncio.gather(
                models("critic").ainvoke(state["text"]), models("supervisor").ainvoke("下一步")
            )
            return state

        team = StateGraph(State)
        team.add_node("writer_agent", writer)
        team.add_node("critic", critic)
        team.add_edge(START, "writer_agent")
        team.add_edge("writer_agent", "critic")
        team.add_edge("critic", END)
        graph = team.compile()

        with metering() as ledger:
            await graph.ainvoke({"text": ""})
        await models("critic").ainvoke("outside any metered block: not recorded")
        await models.aclose()
        expected = _expected(server.requests[:-1], _reply)  # the last one was not metered

    usage = ledger.as_dict()
    assert set(usage) == {"writer_agent", "critic", "supervisor"}
    assert set(expected) == set(usage)
    for role, (calls, prompt, completion) in expected.items():
        got = usage[role]
        assert (got["calls"], got["metered"]) == (calls, calls), role
        assert (got["prompt_tokens"], got["completion_tokens"]) == (prompt, completion), role
        assert got["seconds"] > 0
    total = usage_totals(usage)
    assert total["calls"] == 3 and total["prompt_tokens"] == sum(
        u["prompt_tokens"] for u in usage.values()
    )


async def test_a_server_that_reports_no_usage_gives_calls_and_time_but_unknown_tokens(
    tmp_path: Path,
) -> None:
    def silent(req: ChatRequest) -> Reply:
        return dataclasses.replace(_reply(req), report_usage=False)

    with ScriptedOpenAIServer(silent) as server:
        models = _factory(server, tmp_path)
        with metering() as ledger:
            await models("writer_agent").ainvoke("写")  # streamed, no usage chunk
            await models("critic").ainvoke("评")
        await models.aclose()

    usage = ledger.as_dict()
    for role in ("writer_agent", "critic"):
        assert usage[role]["calls"] == 1 and usage[role]["metered"] == 0
        assert usage[role]["prompt_tokens"] is None and usage[role]["completion_tokens"] is None
        assert usage[role]["seconds"] > 0


async def test_a_failed_call_counts_with_its_time_and_unknown_tokens(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(lambda req: Reply.error(400, "bad request")) as server:
        models = _factory(server, tmp_path)
        with metering() as ledger, pytest.raises(openai.BadRequestError):
            await models("critic").ainvoke("评")
        await models.aclose()
    assert ledger.as_dict()["critic"]["calls"] == 1
    assert ledger.as_dict()["critic"]["prompt_tokens"] is None


def test_usage_adds_up_across_nodes_and_keeps_unknown_tokens_unknown() -> None:
    known = {
        "calls": 2,
        "metered": 2,
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "seconds": 1.0,
        "cost": None,
    }
    unknown = {
        "calls": 1,
        "metered": 0,
        "prompt_tokens": None,
        "completion_tokens": None,
        "seconds": 0.5,
        "cost": None,
    }
    assert add_usage({"critic": unknown}, {"critic": unknown})["critic"] == {
        **unknown,
        "calls": 2,
        "seconds": 1.0,
    }
    mixed = add_usage({"critic": known}, {"critic": unknown})["critic"]
    assert mixed == {**known, "calls": 3, "seconds": 1.5}  # a partial sum: metered 2 of 3
    assert add_usage(None, {"writer_agent": known}) == {"writer_agent": known}


def test_models_of_a_second_event_loop_reach_the_same_endpoint(tmp_path: Path) -> None:
    # Each factory's models have HTTP clients of their own. langchain-openai's default
    # clients are cached per base URL and bound to the first loop that used them: a
    # second loop (another server start, another test) on the same URL failed with
    # "Event loop is closed" when the pool closed the first loop's connection.
    async def ask(server: ScriptedOpenAIServer) -> str:
        models = _factory(server, tmp_path)
        try:
            reply = await models("writer_agent").ainvoke("写一段")
        finally:
            await models.aclose()
        return str(reply.content)

    with ScriptedOpenAIServer(_reply) as server:
        assert "m-writer" in asyncio.run(ask(server))
        assert "m-writer" in asyncio.run(ask(server))
