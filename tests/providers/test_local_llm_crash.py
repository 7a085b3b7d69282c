"""A crashing embedded model says so: at start-up (self-test), per call, and once given up.

The child here is `tests/support/crashing_llama`, a `python -m llama_cpp.server`
stand-in that loads and lists its model like the real server but dies with SIGSEGV
on a chat completion, the way a llama.cpp compiled with AMX instructions does on a
CPU whose kernel refuses them (issue 10). It answers `FAKE_LLAMA_ANSWERS`
completions first, counted across restarts in `FAKE_LLAMA_COUNTER`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import openai
import pytest

from core.settings import Settings
from providers.llm import OpenAIModelFactory, model_crash
from providers.local_llm import (
    CRASH_REMEDY,
    EmbeddedModelCrashedError,
    EmbeddedModelServer,
    LlamaCppChatOpenAI,
)
from tests.support.processes import alive

CRASHING_LLAMA = Path(__file__).resolve().parents[1] / "support" / "crashing_llama"


@pytest.fixture
def crashing_llama(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Make `python -m llama_cpp.server` the crashing stand-in; return a setter of its answers."""
    path = os.pathsep.join(p for p in (str(CRASHING_LLAMA), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("FAKE_LLAMA_COUNTER", str(tmp_path / "answered"))

    def answers(count: int) -> None:
        monkeypatch.setenv("FAKE_LLAMA_ANSWERS", str(count))

    answers(0)
    return answers


def _settings(tmp_path: Path) -> Settings:
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    return Settings(_env_file=None, llm_base_url=None, local_model_path=model)  # type: ignore[call-arg]


async def test_a_model_that_crashes_on_its_first_completion_fails_start_with_one_line(
    crashing_llama: Any, tmp_path: Path
) -> None:
    server = EmbeddedModelServer(_settings(tmp_path))
    with pytest.raises(EmbeddedModelCrashedError) as caught:
        await server.start()
    reason = str(caught.value)
    assert "\n" not in reason
    assert "crashed (killed by SIGSEGV)" in reason and reason.endswith(CRASH_REMEDY)
    assert "LLM_BASE_URL" in reason and "ATELIER_NATIVE_BUILD" in reason
    assert server.pid is None and server.base_url is None


async def test_a_model_that_crashes_on_every_call_is_reported_then_given_up(
    crashing_llama: Any, tmp_path: Path
) -> None:
    crashing_llama(1)  # the self-test passes; every later completion crashes
    server = EmbeddedModelServer(_settings(tmp_path))
    await server.start()
    try:
        first = server.pid
        assert first is not None and server.health() is None
        model = LlamaCppChatOpenAI(
            model="m",
            base_url=server.base_url,
            api_key="x",  # type: ignore[arg-type]
            max_retries=0,
            streaming=True,
        )
        model.watch_server(server)
        errors: list[EmbeddedModelCrashedError] = []
        for _ in range(12):  # each call crashes the child once; the budget is 5 restarts
            with pytest.raises(EmbeddedModelCrashedError) as caught:
                await model.ainvoke("hi")
            errors.append(caught.value)
            for _ in range(300):  # the next request once it is back (or given up)
                if server.broken or server.health() is None:
                    break
                await asyncio.sleep(0.1)
            if server.broken:
                break
        assert server.broken, "a child that crashes on every call was restarted forever"
        assert not alive(first)
        assert "crashed (killed by SIGSEGV)" in str(errors[0])
        assert isinstance(errors[0].__cause__, openai.APIConnectionError | openai.APIError)
        assert "not restarted" in server.broken and server.broken.endswith(CRASH_REMEDY)
        assert server.health() == server.broken and server.pid is None
        assert server.restarts == 5
        # Given up: a call fails at once with the reason, without reaching for the port.
        with pytest.raises(EmbeddedModelCrashedError, match="not restarted"):
            await model.ainvoke("hi")
    finally:
        await server.stop()


def test_model_crash_finds_the_crash_behind_the_errors_that_wrap_it() -> None:
    crash = EmbeddedModelCrashedError("the embedded model (llama.cpp) crashed")
    try:
        try:
            raise crash
        except EmbeddedModelCrashedError as exc:
            raise RuntimeError("team failed") from exc
    except RuntimeError as wrapped:
        assert model_crash(wrapped) == str(crash)
    assert model_crash(RuntimeError("Connection error.")) is None


def test_factory_models_report_the_servers_crashes(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    server = EmbeddedModelServer(settings)
    factory = OpenAIModelFactory(
        settings, base_url="http://127.0.0.1:9/v1", embedded=True, server=server
    )
    model = factory("planner")
    assert isinstance(model, LlamaCppChatOpenAI) and model._server is server
    server.broken = "given up"
    assert factory.health() == "given up"
