"""Token usage of llama.cpp answers: streamed calls report their tokens too.

llama-cpp-python's server sends usage only with non-streamed answers; the embedded
model is served through `providers.llama_cpp_server`, which ends every streamed
answer with the final usage chunk OpenAI sends (`{"choices": [], "usage": …}`).
The fast tests have the scripted OpenAI-compatible server answer that way (and the
way llama.cpp's own `llama-server` does, usage on the finishing chunk) to the
llama.cpp dialect's client; the slow one starts the real embedded server and checks
the streamed counts equal what the same request reports non-streamed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from core.settings import Settings
from providers.llm import OpenAIModelFactory
from providers.local_llm import serve_embedded_model
from providers.usage import metering
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer, usage_of


class Verdict(BaseModel):
    """Judge a note."""

    verdict: str = Field(description="pass or revise", max_length=10)


def _reply(req: ChatRequest) -> Reply:
    if req.forced_tool:
        return Reply.tool_call(req.forced_tool, {"verdict": "pass"})
    return Reply.text("一篇关于茶的笔记。" * 5)


def _llama_cpp_factory(server: ScriptedOpenAIServer, tmp_path: Path) -> OpenAIModelFactory:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=tmp_path / "data",
        llm_base_url=server.base_url,
        llm_llama_cpp_dialect="on",
        llm_max_retries=0,
    )
    return OpenAIModelFactory(settings)


@pytest.mark.parametrize("usage_chunk", ["separate", "on_finish"])
async def test_streamed_llama_cpp_answers_report_tokens_for_every_role(
    tmp_path: Path, usage_chunk: str
) -> None:
    def respond(req: ChatRequest) -> Reply:
        return dataclasses.replace(_reply(req), usage_chunk=usage_chunk)

    with ScriptedOpenAIServer(respond) as server:
        models = _llama_cpp_factory(server, tmp_path)
        with metering() as ledger:
            await (
                models("critic")
                .with_structured_output(Verdict, method="function_calling")
                .ainvoke("评一评")
            )
            await models("writer_agent").ainvoke("写一篇")
        await models.aclose()
        requests = server.requests

    assert all(req.stream for req in requests)  # the dialect streams every call
    usage = ledger.as_dict()
    for req, role in zip(requests, ("critic", "writer_agent"), strict=True):
        expected = usage_of(req, respond(req))
        assert usage[role]["metered"] == 1, role
        assert usage[role]["prompt_tokens"] == expected["prompt_tokens"], role
        assert usage[role]["completion_tokens"] == expected["completion_tokens"], role


@pytest.mark.slow
async def test_the_embedded_model_reports_streamed_tokens_as_it_counts_them(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=tmp_path / "data",
        llm_base_url=None,
        local_model_ctx=2048,
    )
    messages = [SystemMessage("Answer in one short sentence."), HumanMessage("What is tea?")]
    async with serve_embedded_model(settings) as base_url:
        models = OpenAIModelFactory(settings, base_url=base_url, embedded=True)
        with metering() as ledger:
            await models("writer_agent").ainvoke(messages)  # streamed
            await (
                models("critic")
                .with_structured_output(Verdict, method="function_calling")
                .ainvoke(messages)
            )
        await models.aclose()
        # The same request, not streamed: the server's own usage figures.
        model: Any = models.model_name("writer_agent")
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.post(
                f"{base_url}/chat/completions",
                json={
                    "model": model,
                    "messages": [
                        {"role": "system", "content": messages[0].content},
                        {"role": "user", "content": messages[1].content},
                    ],
                    "temperature": 0,
                    "max_tokens": settings.local_max_tokens_for("writer_agent"),
                },
            )
    usage = ledger.as_dict()
    for role in ("writer_agent", "critic"):
        assert usage[role]["metered"] == 1, role
        assert usage[role]["prompt_tokens"] > 0 and usage[role]["completion_tokens"] > 0, role
    reported = answer.json()["usage"]
    assert usage["writer_agent"]["prompt_tokens"] == reported["prompt_tokens"]
    assert usage["writer_agent"]["completion_tokens"] == reported["completion_tokens"]
