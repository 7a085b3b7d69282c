"""The graphs `langgraph.json` serves (`graphs.served`), run in-process as its server runs them.

LangGraph's own server (`langgraph dev`, Studio) passes every run a JSON
`context` (`{}` at least), opens the services at start-up through the http app's
lifespan, and fails a run that blocks its event loop. Here the same graphs run
with `context={}` after `served_services` opened the services from settings,
under a BlockBuster stricter than `langgraph dev`'s: it also rejects file
`stat`s and reads on the event loop, which that server lets through. Every LLM
call goes through the real model factory to the scripted OpenAI server.

`tests/test_langgraph_dev.py` runs the real `langgraph dev` on `langgraph.json`.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster
from PIL import Image
from pydantic import ValidationError

from agentkit.context import AtelierContext, RunOptions, bind_services, context_of
from graphs.served import atelier, served_services, team
from knowledge.repository import SqliteNoteRepository
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import service_settings
from tests.support.fake_models import HAPPY_TITLE, README_REQUEST, STUDENT_NOTE, fake_context
from tests.support.scripted_openai import ScriptedOpenAIServer

REQUEST = README_REQUEST
NOTE = STUDENT_NOTE
# A blocking call counts when a frame of these is on its stack: every node runs under
# LangGraph's runner, so this covers a whole run, and nothing of the scripted server.
SCANNED = ["graphs", "nodes", "knowledge", "providers", "core", "langgraph"]


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


@asynccontextmanager
async def served(tmp_path: Path, llm: ScriptedOpenAIServer) -> AsyncIterator[AtelierContext]:
    """The services of LangGraph's server, with one approved note in the vault."""
    settings = service_settings(tmp_path / "data", llm.base_url)
    settings.data_dir.mkdir(parents=True)
    async with SqliteNoteRepository(settings.database_path) as notes:
        await notes.add(NOTE)
    async with served_services(settings) as context:
        yield context


@asynccontextmanager
async def no_blocking_calls() -> AsyncIterator[None]:
    """Fail any blocking call made on the event loop inside the block."""
    buster = BlockBuster(scanned_modules=SCANNED)
    buster.activate()
    try:
        yield
    finally:
        buster.deactivate()


def png_bytes() -> bytes:
    """A small reference image, as a user would upload."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (224, 122, 95)).save(buffer, format="PNG")
    return buffer.getvalue()


async def stream(graph: Any, inputs: dict[str, Any], context: Any) -> tuple[dict[str, Any], list]:
    """Run `graph` as the server does; return its last values and its custom events."""
    values: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    async for mode, chunk in graph.astream(
        inputs, context=context, stream_mode=["values", "custom"], subgraphs=False
    ):
        if mode == "values":
            values = chunk
        else:
            events.append(chunk)
    return values, events


async def test_served_pipeline_runs_with_a_json_context_and_no_blocking_call(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    # Regression: LangGraph's server passes context={} and LangGraph coerced it with
    # AtelierContext(**{}), a TypeError before the first node; rag then loaded jieba's
    # dictionary on the event loop (a BlockingError under langgraph dev).
    async with served(tmp_path, llm) as context:
        reference = context.assets.put(png_bytes(), kind="uploaded").asset_id
        inputs = {
            "request": REQUEST,
            "auto_confirm": True,
            "image_count": 1,
            "reference_images": [reference],
        }
        async with no_blocking_calls():
            values, events = await stream(atelier, inputs, context={})

    result = values["result"]
    assert result["outcome"] == "completed", result
    assert len(result["images"]) == 1 and result["post"]["title"] == HAPPY_TITLE
    injected = [e for e in events if e["type"] == "knowledge.injected"]
    assert injected and injected[0]["notes"][0]["id"] == NOTE.id, "rag read the vault"
    assert llm.call_count > 0


async def test_served_team_runs_with_a_json_context_and_no_blocking_call(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    async with served(tmp_path, llm) as context, no_blocking_calls():
        values, _ = await stream(team, {"request": REQUEST, "image_count": 1}, context={})

    assert values["generated_content"]["title"] == HAPPY_TITLE
    assert len(values["generated_image_asset_ids"]) == 1
    assert context.assets.path(values["generated_image_asset_ids"][0]) is not None


async def test_a_runs_options_apply_to_the_bound_services_and_bad_ones_fail_the_run(
    tmp_path: Path,
) -> None:
    base = fake_context({}, tmp_path)
    with bind_services(base):
        runtime = type("R", (), {"context": RunOptions(critic_pass_threshold=0.9)})()
        ctx = context_of(runtime)
        assert ctx.critic_pass_threshold == 0.9 and ctx.models is base.models
        assert context_of(type("R", (), {"context": RunOptions()})()) is base
        assert context_of(type("R", (), {"context": {"critic_timeout": 3}})()).critic_timeout == 3
        # An out-of-range option fails the run when LangGraph builds the context.
        with pytest.raises(ValidationError, match="critic_pass_threshold"):
            await atelier.ainvoke({"request": REQUEST}, context={"critic_pass_threshold": 2})


def test_a_run_without_services_says_how_to_get_them() -> None:
    with pytest.raises(RuntimeError, match="no services are bound"):
        context_of(type("R", (), {"context": RunOptions()})())
