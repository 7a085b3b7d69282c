"""The run manager's assistants: built-in ones beside those clients create, and their runs.

Real SQLite backend and sample graphs (tests/app/sample_graphs.py), as tests/engine/test_manager.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import Conflict, InvalidFields, NotFound
from engine.preparation import RunRequest
from tests.app.sample_graphs import scripted_reply
from tests.engine.test_manager import open_manager
from tests.support.scripted_openai import ScriptedOpenAIServer

BUILT_IN = ["boom", "burst", "slow", "studio"]


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


async def test_search_pages_through_the_built_in_ones_then_the_callers(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        made = [
            (await manager.create_assistant("alice", graph_id="studio", name=f"a{i}")).assistant_id
            for i in range(3)
        ]
        await manager.create_assistant("bob", graph_id="studio")
        listed = await manager.search_assistants("alice", limit=100)
        assert sorted(a["assistant_id"] for a in listed[:4]) == BUILT_IN
        assert [a["assistant_id"] for a in listed[4:]] == made[::-1]  # newest first
        page = await manager.search_assistants("alice", limit=3, offset=3)
        assert [a["assistant_id"] for a in page] == [listed[3]["assistant_id"], *made[::-1][:2]]
        by_name = await manager.search_assistants("alice", sort_by="name", sort_order="asc")
        assert [a["name"] for a in by_name[:3]] == ["a0", "a1", "a2"]
        assert await manager.count_assistants("alice") == 7
        assert await manager.count_assistants("alice", graph_id="studio") == 4
        assert await manager.count_assistants("bob", metadata={"x": 1}) == 0


async def test_a_built_in_assistant_is_read_only_and_another_owners_is_not_found(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        with pytest.raises(Conflict, match="read-only"):
            await manager.update_assistant("alice", "studio", {"name": "x"})
        with pytest.raises(Conflict, match="read-only"):
            await manager.delete_assistant("alice", "studio")
        with pytest.raises(Conflict, match="built-in"):
            await manager.create_assistant("alice", graph_id="studio", assistant_id="slow")
        with pytest.raises(InvalidFields, match="graph_id"):
            await manager.create_assistant("alice", graph_id="nope")
        mine = await manager.create_assistant("alice", graph_id="studio", assistant_id="mine")
        with pytest.raises(NotFound):
            await manager.resolve_assistant("bob", "mine")
        with pytest.raises(Conflict, match="already exists"):
            await manager.create_assistant("bob", graph_id="studio", assistant_id="mine")
        again = await manager.create_assistant(
            "alice", graph_id="slow", assistant_id="mine", if_exists="do_nothing"
        )
        assert again.graph_id == mine.graph_id == "studio"
        assert [v["version"] for v in await manager.assistant_versions("alice", "studio")] == [1]


async def test_a_run_of_a_created_assistant_runs_its_graph_under_its_id(
    tmp_path: Path, llm: Any
) -> None:
    async with open_manager(tmp_path, llm.base_url) as manager:
        created = await manager.create_assistant(
            "alice",
            graph_id="studio",
            config={"configurable": {"flavour": "saved", "kept": 1}, "tags": ["saved"]},
        )
        run, _ = await manager.create(
            RunRequest(
                owner="alice",
                thread_id=None,
                assistant=await manager.resolve_assistant("alice", created.assistant_id),
                kwargs={
                    "input": {"request": "hi", "auto_confirm": True},
                    "stream_mode": ["values"],
                    "config": {"configurable": {"flavour": "run"}},
                },
                if_not_exists="create",
            )
        )
        assert run.assistant_id == created.assistant_id and run.graph_id == "studio"
        assert run.kwargs["config"]["configurable"] == {"flavour": "run", "kept": 1}
        assert run.kwargs["config"]["tags"] == ["saved"]
        ended = await manager.wait(run.run_id)
        assert ended is not None and ended.status == "success", ended
        thread = await manager.get_thread("alice", run.thread_id)
        assert thread.metadata["assistant_id"] == created.assistant_id
        assert thread.metadata["graph_id"] == "studio"
        await manager.delete_assistant("alice", created.assistant_id)
        state = await manager.thread_state("alice", run.thread_id)
        assert state["values"], "the thread of a deleted assistant's run stays readable"
