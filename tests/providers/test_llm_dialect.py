"""An external llama.cpp server as LLM_BASE_URL is spoken to in llama.cpp's dialect.

llama.cpp compiles a tool's JSON schema into a grammar and fails on large
`maxLength` bounds ("number of rules ... exceeds sane defaults"), so the schemas it
gets must be the grammar-safe ones the embedded model gets. `LLM_LLAMA_CPP_DIALECT`
says when: "auto" asks the endpoint's `/models` (llama.cpp's servers say who they are in
`owned_by`), "on" and "off" decide without asking.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from core.settings import Settings
from providers.llm import OpenAIModelFactory, detect_llama_cpp, open_model_factory
from providers.local_llm import GRAMMAR_MAX_REPEAT, LlamaCppChatOpenAI
from tests.app.harness import HOST, free_port
from tests.support.scripted_openai import ScriptedOpenAIServer

CRASHING_LLAMA = Path(__file__).resolve().parents[1] / "support" / "crashing_llama"


class Guidance(BaseModel):
    """Route the team (bounds like the supervisor's, which broke llama.cpp's grammar)."""

    next_agent: str = Field(max_length=64)
    guidance: str = Field(max_length=4000)


@pytest.fixture
def llama_cpp_like() -> Iterator[str]:
    """An endpoint whose /v1/models says what llama-cpp-python's server says (owned_by "me")."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(CRASHING_LLAMA)}
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{HOST}:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        yield url
    finally:
        process.kill()
        process.wait()


def _settings(url: str, **overrides: Any) -> Settings:
    values = {"llm_base_url": url, "llm_api_key": "k", "llm_model": "m", **overrides}
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def _tool_parameters(model: Any) -> dict[str, Any]:
    bound = model.bind_tools([Guidance], tool_choice="Guidance")
    payload = bound.bound._get_request_payload("hi", **bound.kwargs)
    parameters: dict[str, Any] = payload["tools"][0]["function"]["parameters"]
    return parameters


async def test_auto_detects_a_llama_cpp_server_and_sends_it_grammar_safe_schemas(
    llama_cpp_like: str,
) -> None:
    assert await detect_llama_cpp(llama_cpp_like)
    async with open_model_factory(_settings(llama_cpp_like)) as factory:
        assert factory.llama_cpp and factory.health() is None
        model = factory("supervisor")
    assert isinstance(model, LlamaCppChatOpenAI) and model.streaming
    guidance = _tool_parameters(model)["properties"]["guidance"]
    assert guidance["maxLength"] == GRAMMAR_MAX_REPEAT


async def test_auto_leaves_other_endpoints_in_the_openai_dialect() -> None:
    with ScriptedOpenAIServer(lambda _r: "unused") as server:
        assert not await detect_llama_cpp(server.base_url)
        async with open_model_factory(_settings(server.base_url)) as factory:
            model = factory("supervisor")
    assert type(model) is ChatOpenAI
    assert _tool_parameters(model)["properties"]["guidance"]["maxLength"] == 4000


async def test_an_endpoint_that_does_not_answer_is_not_llama_cpp() -> None:
    assert not await detect_llama_cpp(f"http://{HOST}:{free_port()}/v1")


@pytest.mark.parametrize(("mode", "llama"), [("on", True), ("off", False)])
async def test_on_and_off_decide_without_asking(
    llama_cpp_like: str, mode: str, llama: bool
) -> None:
    settings = _settings(llama_cpp_like, llm_llama_cpp_dialect=mode)
    async with open_model_factory(settings) as factory:
        assert isinstance(factory("planner"), LlamaCppChatOpenAI) is llama
    # The factory a context builds without opening (no request) honours "on" too.
    assert OpenAIModelFactory(settings).llama_cpp is llama
