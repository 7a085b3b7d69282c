"""The graphs as a library (PRODUCT.md §6): runs given no context open the studio's services.

`build_pipeline()` and `build_team()` run without a `context`, with only the
environment set, as in a notebook or a script: the first run on an event loop
opens the services of `Settings()` (`agentkit.services.ensure_services`), later
and concurrent runs on that loop share them, and `asyncio.run()` closes them as
it returns. Every LLM call goes through the real model factory to the scripted
OpenAI server. `tests/test_docs.py` and the tests of each docs page run their notebook snippets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

import agentkit.services
from agentkit.context import AtelierContext
from agentkit.services import ensure_services
from core.settings import Settings
from graphs.pipeline import build_pipeline
from graphs.team import build_team
from providers.local_llm import EmbeddedModelError
from tests.app.atelier_llm import atelier_responder
from tests.support.fake_models import HAPPY_TITLE, README_REQUEST, fake_context
from tests.support.scripted_openai import ScriptedOpenAIServer

REQUEST = README_REQUEST


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: ScriptedOpenAIServer) -> None:
    """Only `LLM_BASE_URL` and a private `DATA_DIR`, in a directory without `.env`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLM_BASE_URL", llm.base_url)
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("LOCAL_MODEL_PATH", raising=False)


@pytest.fixture
def openings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each opening ("open") and closing ("close") of the composition root."""
    events: list[str] = []
    real = agentkit.services.open_services

    @asynccontextmanager
    async def recorded(settings: Settings, **kwargs: Any) -> AsyncIterator[AtelierContext]:
        events.append("open")
        try:
            async with real(settings, **kwargs) as context:
                yield context
        finally:
            events.append("close")

    monkeypatch.setattr(agentkit.services, "open_services", recorded)
    return events


async def pipeline_title(graph: Any, thread_id: str) -> str:
    """Stream one pipeline run to its end as the README does; return its post's title."""
    config = {"configurable": {"thread_id": thread_id}}
    nodes = [
        node
        async for update in graph.astream(
            {"request": REQUEST, "auto_confirm": True}, config, stream_mode="updates"
        )
        for node in update
    ]
    assert nodes[-1] == "finalize", nodes
    result = (await graph.aget_state(config)).values["result"]
    assert result["outcome"] == "completed", result
    return str(result["post"]["title"])


async def team_title() -> str:
    """Run the team alone; return its post's title."""
    out = await build_team().ainvoke({"request": REQUEST, "image_count": 1})
    return str(out["generated_content"]["title"])


@pytest.mark.usefixtures("environment")
def test_runs_share_one_opening_per_event_loop_and_asyncio_run_closes_it(
    openings: list[str],
) -> None:
    graph = build_pipeline(checkpointer=InMemorySaver())

    async def concurrent_first_runs() -> list[str]:
        return await asyncio.gather(
            pipeline_title(graph, "a"), pipeline_title(graph, "b"), team_title()
        )

    # A script calling asyncio.run twice: each loop opens the services once, for its
    # three concurrent runs, and closes them as it returns; the second loop uses no
    # client of the first.
    assert asyncio.run(concurrent_first_runs()) == [HAPPY_TITLE] * 3
    assert openings == ["open", "close"]
    assert asyncio.run(concurrent_first_runs()) == [HAPPY_TITLE] * 3
    assert openings == ["open", "close"] * 2


@pytest.mark.usefixtures("environment")
def test_without_llm_base_url_a_model_that_cannot_start_fails_the_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openings: list[str]
) -> None:
    # Without LLM_BASE_URL the services serve the embedded model; this one has no file.
    monkeypatch.delenv("LLM_BASE_URL")
    monkeypatch.setenv("LOCAL_MODEL_PATH", str(tmp_path / "missing.gguf"))
    team = build_team()

    async def two_runs() -> None:
        for _ in range(2):
            with pytest.raises(EmbeddedModelError, match="LOCAL_MODEL_PATH") as failed:
                await team.ainvoke({"request": REQUEST})
            assert "\n" not in str(failed.value)

    asyncio.run(two_runs())
    assert openings == ["open", "close"] * 2, "the run after a failed opening tries again"


async def test_a_run_given_its_services_opens_none(tmp_path: Path, openings: list[str]) -> None:
    runtime = type("R", (), {"context": fake_context({}, tmp_path)})()
    await ensure_services(runtime)
    assert openings == []
