"""Tests of the scripted OpenAI-compatible server, driven through the real ChatOpenAI client."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.support.scripted_openai import (
    ChatRequest,
    Reply,
    ScriptedOpenAIServer,
    ScriptedResponder,
    delayed,
    scripted_openai_server,
    scripted_server,  # noqa: F401 - importing a fixture registers it for this module
)

LONG_TEXT = "The quick brown fox jumps over the lazy dog, twice over."


class Verdict(BaseModel):
    """A structured-output schema used by the tests."""

    approved: bool = Field(description="whether the draft passes")
    notes: str = Field(description="why")


@tool
def search(query: str) -> str:
    """Search the knowledge base."""
    return query


@tool
def draw(prompt: str, size: int = 512) -> str:
    """Draw an image."""
    return prompt


def _llm(srv: ScriptedOpenAIServer, **overrides: Any) -> ChatOpenAI:
    # Spelled out (not srv.chat_model) so the tests show the exact client configuration.
    params: dict[str, Any] = {"api_key": "test", "model": "scripted", "max_retries": 0}
    params["timeout"] = 10
    return ChatOpenAI(base_url=srv.base_url, **{**params, **overrides})


def _merge(chunks: Sequence[AIMessage]) -> AIMessageChunk:
    # AIMessageChunk "+" merges content, usage and tool-call deltas (by index).
    assert chunks and all(isinstance(c, AIMessageChunk) for c in chunks)
    total = cast(AIMessageChunk, chunks[0])
    for chunk in chunks[1:]:
        total = total + cast(AIMessageChunk, chunk)
    return total


def test_plain_invoke_returns_text() -> None:
    with ScriptedOpenAIServer(lambda req: Reply.text(f"echo: {req.last_user_text}")) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        msg = _llm(srv).invoke([SystemMessage("be brief"), HumanMessage("hello")])
    assert isinstance(msg, AIMessage)
    assert msg.content == "echo: hello"
    assert msg.usage_metadata is not None and msg.usage_metadata["input_tokens"] >= 1
    assert msg.response_metadata["finish_reason"] == "stop"


def test_stream_yields_several_chunks_that_concatenate() -> None:
    with ScriptedOpenAIServer(lambda _req: Reply.text(LONG_TEXT)) as srv:
        chunks: list[AIMessageChunk] = list(_llm(srv, stream_usage=True).stream("go"))
        req = srv.last_request
    texts = [str(c.content) for c in chunks if c.content]
    assert len(texts) > 3
    assert "".join(texts) == LONG_TEXT
    assert req.stream and req.include_usage
    total = _merge(chunks)
    assert total.usage_metadata is not None and total.usage_metadata["output_tokens"] > 0


def test_bind_tools_single_and_parallel_tool_calls() -> None:
    replies = iter(
        [
            Reply.tool_call("search", {"query": "fox"}, id="call_1"),
            Reply.tool_calls([("search", {"query": "a"}), ("draw", {"prompt": "b", "size": 64})]),
        ]
    )
    with ScriptedOpenAIServer(lambda _req: next(replies)) as srv:
        llm = _llm(srv).bind_tools([search, draw])
        one = llm.invoke("find the fox")
        two = llm.invoke("search and draw")
        assert srv.last_request.tools == ["search", "draw"]
        assert srv.last_request.forced_tool is None
        assert srv.last_request.tool_parameters("draw") is not None

    assert one.tool_calls == [
        {"name": "search", "args": {"query": "fox"}, "id": "call_1", "type": "tool_call"}
    ]
    assert one.response_metadata["finish_reason"] == "tool_calls"
    assert [(c["name"], c["args"]) for c in two.tool_calls] == [
        ("search", {"query": "a"}),
        ("draw", {"prompt": "b", "size": 64}),
    ]
    assert len({c["id"] for c in two.tool_calls}) == 2


def test_structured_output_forces_the_tool() -> None:
    responder = ScriptedResponder().on_forced_tool(
        "Verdict", Reply.tool_call("Verdict", {"approved": True, "notes": "fine"})
    )
    with ScriptedOpenAIServer(responder) as srv:
        llm = _llm(srv).with_structured_output(Verdict, method="function_calling")
        result = llm.invoke("review this")
        req = srv.last_request
    assert result == Verdict(approved=True, notes="fine")
    assert req.forced_tool == "Verdict"
    assert req.tool_choice == {"type": "function", "function": {"name": "Verdict"}}


async def test_astream_tool_call_deltas_accumulate() -> None:
    args = {"query": "a fairly long query so arguments split", "extra": [1, 2, 3]}
    with ScriptedOpenAIServer(lambda _req: Reply.tool_call("search", args, id="call_s")) as srv:
        llm = _llm(srv).bind_tools([search])
        chunks: list[AIMessage] = [c async for c in llm.astream("look it up")]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    arg_fragments = [
        tc["args"] for c in chunks for tc in cast(AIMessageChunk, c).tool_call_chunks if tc["args"]
    ]
    assert len(arg_fragments) > 2  # arguments really arrived in pieces
    total = _merge(chunks)
    assert total.tool_calls == [
        {"name": "search", "args": args, "id": "call_s", "type": "tool_call"}
    ]


async def test_astream_parallel_tool_calls_with_text() -> None:
    reply = Reply.tool_calls([("search", {"query": "x"}), ("draw", {"prompt": "y"})], content="ok")
    with ScriptedOpenAIServer(lambda _req: reply) as srv:
        chunks: list[AIMessage] = [
            c async for c in _llm(srv).bind_tools([search, draw]).astream("go")
        ]
    total = _merge(chunks)
    assert total.content == "ok"
    assert [(c["name"], c["args"]) for c in total.tool_calls] == [
        ("search", {"query": "x"}),
        ("draw", {"prompt": "y"}),
    ]


def test_error_reply_surfaces_as_exception() -> None:
    with ScriptedOpenAIServer(lambda _req: Reply.error(500, "boom")) as srv:
        with pytest.raises(openai.InternalServerError, match="boom"):
            _llm(srv).invoke("hi")
        with pytest.raises(openai.BadRequestError):
            srv.responder = lambda _req: Reply.error(400, "bad")
            _llm(srv).invoke("hi")


def test_error_no_retry_header_beats_client_retries() -> None:
    with ScriptedOpenAIServer(lambda _req: Reply.error(500, "nope", retry=False)) as srv:
        with pytest.raises(openai.InternalServerError):
            _llm(srv, max_retries=3).invoke("hi")
        assert srv.call_count == 1


def test_delay_triggers_client_timeout() -> None:
    srv = ScriptedOpenAIServer(lambda _req: Reply.delay(5, Reply.text("late")))
    with srv, pytest.raises(openai.APITimeoutError):
        _llm(srv, timeout=0.3).invoke("hi")
    # stop() returned promptly despite the still-sleeping handler (context exit above).


def test_delayed_answers_later_adding_to_a_replys_own_delay() -> None:
    def responder(req: ChatRequest) -> Reply:
        late = req.last_user_text == "late"
        return Reply.delay(0.3, Reply.text("slow")) if late else Reply.text("quick")

    with ScriptedOpenAIServer(delayed(responder, 0.2)) as srv:
        started = time.monotonic()
        assert _llm(srv).invoke("now").content == "quick"
        assert 0.2 <= time.monotonic() - started < 2
        started = time.monotonic()
        assert _llm(srv).invoke("late").content == "slow"
        assert 0.5 <= time.monotonic() - started < 3


async def test_async_ainvoke_with_async_responder() -> None:
    async def responder(req: ChatRequest) -> Reply:
        await asyncio.sleep(0.01)
        return Reply.text(f"async: {req.last_user_text}")

    with ScriptedOpenAIServer(responder) as srv:
        results = await asyncio.gather(*(_llm(srv).ainvoke(f"q{i}") for i in range(3)))
    assert sorted(m.content for m in results) == ["async: q0", "async: q1", "async: q2"]


def test_requests_are_recorded() -> None:
    with ScriptedOpenAIServer(lambda _req: "ok") as srv:
        llm = _llm(srv)
        llm.invoke([SystemMessage("You are the editor."), HumanMessage("first")])
        llm.bind_tools([search]).invoke("second")
        reqs = srv.requests
        assert srv.call_count == 2
    assert [r.index for r in reqs] == [0, 1]
    assert reqs[0].model == "scripted"
    assert reqs[0].system_text == "You are the editor."
    assert "first" in reqs[0].all_text
    assert reqs[0].tools == [] and reqs[1].tools == ["search"]
    assert reqs[1].last_user_text == "second"
    assert not reqs[0].stream


def test_tool_results_visible_to_responder() -> None:
    def responder(req: ChatRequest) -> Reply:
        if not req.tool_results:
            return Reply.tool_call("search", {"query": "q"}, id="call_r")
        return Reply.text(f"saw {req.tool_results[0]['content']}")

    with ScriptedOpenAIServer(responder) as srv:
        llm = _llm(srv).bind_tools([search])
        first = llm.invoke("go")
        tool_msg = search.invoke(first.tool_calls[0])
        final = llm.invoke([HumanMessage("go"), first, tool_msg])
    assert final.content == "saw q"


def test_scripted_responder_routing_queue_and_fallback() -> None:
    responder = (
        ScriptedResponder()
        .on_system("planner", [Reply.text("plan 1"), Reply.text("plan 2")])
        .on_tool("search", lambda req: Reply.tool_call("search", {"query": req.last_user_text}))
        .on_text(Reply.text("plain"))
    )
    with ScriptedOpenAIServer(responder) as srv:
        llm = _llm(srv)
        planner = [SystemMessage("You are the planner."), HumanMessage("x")]
        assert llm.invoke(planner).content == "plan 1"
        assert llm.invoke(planner).content == "plan 2"
        assert llm.invoke(planner).content == "plain"  # queue exhausted -> next rule
        assert llm.bind_tools([search]).invoke("q").tool_calls[0]["args"] == {"query": "q"}
        with pytest.raises(openai.InternalServerError, match="unscripted request #4"):
            llm.bind_tools([draw]).invoke("nothing scripted for draw")
    assert len(responder.unmatched) == 1 and responder.unmatched[0].tools == ["draw"]


def test_responder_exception_is_a_loud_500() -> None:
    def broken(_req: ChatRequest) -> Reply:
        raise ValueError("script bug")

    with ScriptedOpenAIServer(broken) as srv:
        with pytest.raises(openai.InternalServerError, match="script bug"):
            _llm(srv, max_retries=2).invoke("hi")
        assert srv.call_count == 1  # x-should-retry: false stopped the SDK retries
        assert "ValueError: script bug" in srv.errors[0]


def test_models_endpoint_and_raw_wire_format() -> None:
    def responder(_req: ChatRequest) -> Reply:
        return Reply.tool_call("f", {"a": 1})

    with (
        scripted_openai_server(responder) as srv,
        httpx.Client(base_url=srv.base_url, trust_env=False) as http,
    ):
        models = http.get("/models").json()
        body = http.post(
            "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        ).json()
        with http.stream(
            "POST",
            "/chat/completions",
            json={"model": "m", "messages": [], "stream": True},
        ) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = [ln for ln in resp.iter_lines() if ln]
        missing = http.post("/embeddings", json={})
    assert models["data"][0]["id"] == "scripted"
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"a": 1}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"]["total_tokens"] == (
        body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )
    assert lines[-1] == "data: [DONE]"
    first_tc = json.loads(lines[1].removeprefix("data: "))["choices"][0]["delta"]["tool_calls"][0]
    assert first_tc["index"] == 0 and first_tc["function"]["name"] == "f"
    assert missing.status_code == 404 and "error" in missing.json()


def test_fixture_factory(
    scripted_server: Callable[..., ScriptedOpenAIServer],  # noqa: F811 - the imported fixture
) -> None:
    srv = scripted_server(lambda _req: Reply.text("from fixture"))
    assert srv.chat_model().invoke("hi").content == "from fixture"


def test_stop_leaves_no_threads() -> None:
    before = {t.ident for t in threading.enumerate()}
    srv = ScriptedOpenAIServer(lambda _req: "ok").start()
    _llm(srv).invoke("hi")
    srv.stop()
    leaked = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not [t for t in leaked if t.name.startswith("scripted-openai")]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{srv.port}/v1/models", trust_env=False, timeout=1)


def test_garbled_and_cut_replies_break_the_real_client() -> None:
    replies = iter(
        [
            Reply.garbled(),
            Reply.cut(Reply.text("x" * 2000), after_bytes=100),
            Reply.garbled(),
            Reply.cut(Reply.text("y" * 2000, chunk_chars=4), after_bytes=300),
        ]
    )
    with ScriptedOpenAIServer(lambda _req: next(replies)) as srv:
        llm = srv.chat_model(timeout=5)
        for _ in range(2):  # plain completions: bad JSON, then a body cut short
            with pytest.raises((openai.APIError, httpx.HTTPError, ValueError)):
                llm.invoke("hi")
        for _ in range(2):  # streams: bad data, then a stream cut short
            with pytest.raises((openai.APIError, httpx.HTTPError, ValueError)):
                list(llm.stream("hi"))
