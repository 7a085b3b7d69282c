"""The assistants service: built-in ones beside those clients create, and their runs.

Real SQLite backend and sample graphs (tests/app/sample_graphs.py), as test_services.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import RunSpec
from engine.errors import Conflict, InvalidFields, NotFound
from tests.app.sample_graphs import scripted_reply
from tests.engine.test_services import open_test_engine
from tests.support.scripted_openai import ScriptedOpenAIServer

BUILT_IN = ["boom", "burst", "slow", "studio"]


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


async def test_search_pages_through_the_built_in_ones_then_the_callers(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        made = [
            (await engine.assistants.create("alice", graph_id="studio", name=f"a{i}")).assistant_id
            for i in range(3)
        ]
        await engine.assistants.create("bob", graph_id="studio")
        listed = await engine.assistants.search("alice", limit=100)
        assert sorted(a["assistant_id"] for a in listed[:4]) == BUILT_IN
        assert [a["assistant_id"] for a in listed[4:]] == made[::-1]  # newest first
        page = await engine.assistants.search("alice", limit=3, offset=3)
        assert [a["assistant_id"] for a in page] == [listed[3]["assistant_id"], *made[::-1][:2]]
        by_name = await engine.assistants.search("alice", sort_by="name", sort_order="asc")
        assert [a["name"] for a in by_name[:3]] == ["a0", "a1", "a2"]
        assert await engine.assistants.count("alice") == 7
        assert await engine.assistants.count("alice", graph_id="studio") == 4
        assert await engine.assistants.count("bob", metadata={"x": 1}) == 0


async def test_a_built_in_assistant_is_read_only_and_another_owners_is_not_found(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        with pytest.raises(Conflict, match="read-only"):
            await engine.assistants.update("alice", "studio", {"name": "x"})
        with pytest.raises(Conflict, match="read-only"):
            await engine.assistants.delete("alice", "studio")
        with pytest.raises(Conflict, match="built-in"):
            await engine.assistants.create("alice", graph_id="studio", assistant_id="slow")
        with pytest.raises(InvalidFields, match="graph_id"):
            await engine.assistants.create("alice", graph_id="nope")
        mine = await engine.assistants.create("alice", graph_id="studio", assistant_id="mine")
        with pytest.raises(NotFound):
            await engine.assistants.resolve("bob", "mine")
        with pytest.raises(Conflict, match="already exists"):
            await engine.assistants.create("bob", graph_id="studio", assistant_id="mine")
        again = await engine.assistants.create(
            "alice", graph_id="slow", assistant_id="mine", if_exists="do_nothing"
        )
        assert again.graph_id == mine.graph_id == "studio"
        assert [v["version"] for v in await engine.assistants.versions("alice", "studio")] == [1]


async def test_a_run_of_a_created_assistant_runs_its_graph_under_its_id(
    tmp_path: Path, llm: Any
) -> None:
    async with open_test_engine(tmp_path, llm.base_url) as engine:
        created = await engine.assistants.create(
            "alice",
            graph_id="studio",
            config={"configurable": {"flavour": "saved", "kept": 1}, "tags": ["saved"]},
        )
        run, _ = await engine.runs.create(
            RunSpec(
                assistant_id=created.assistant_id,
                owner="alice",
                input={"request": "hi", "auto_confirm": True},
                config={"configurable": {"flavour": "run"}},
                if_not_exists="create",
            )
        )
        assert run.assistant_id == created.assistant_id and run.graph_id == "studio"
        assert run.options.config["configurable"] == {"flavour": "run", "kept": 1}
        assert run.options.config["tags"] == ["saved"]
        ended = await engine.runs.wait(run.run_id)
        assert ended is not None and ended.status == "success", ended
        thread = await engine.threads.get("alice", run.thread_id)
        assert thread.metadata["assistant_id"] == created.assistant_id
        assert thread.metadata["graph_id"] == "studio"
        await engine.assistants.delete("alice", created.assistant_id)
        state = await engine.threads.state("alice", run.thread_id)
        assert state["values"], "the thread of a deleted assistant's run stays readable"
