"""Retention over HTTP, with the official `langgraph-sdk` client, in the three deployments.

Thread TTLs on create and update and `POST /threads/prune` in the Platform's wire
format (what `client.threads.create(ttl=…)`, `update(ttl=…)` and `prune(…)` send),
owner-scoped between two API keys; junk in every field a client fills is a 422
naming it; and each deployment's own sweep (every process sweeps, every 1.2 s here)
deletes, or prunes to its latest state, a thread whose TTL ran out — its expiry is
moved into the past in the database rather than waited for. That two sweeps never
sweep one thread is tests/engine/test_retention.py's.
"""

from __future__ import annotations

import ast
import asyncio
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import NotFoundError

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.support.docs import code_blocks
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

KEY = "retention-key-0123456789"
OTHER_KEY = "retention-other-0123456789"
#: Minutes between two sweeps of each process (1.2 s).
SWEEP_MINUTES = 0.02


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """Two API replicas behind nginx and two `atelier worker`s, every one sweeping."""
    env = {"AUTH_API_KEYS": f"{KEY},{OTHER_KEY}", "RETENTION_SWEEP_MINUTES": str(SWEEP_MINUTES)}
    with processes_deployment(request, tmp_path_factory, llm.base_url, env=env) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[KEY, OTHER_KEY],
            retention_sweep_minutes=SWEEP_MINUTES,
            **scale,
        )

    with serve_deployment(request, settings, sample_assistants, {"X-Api-Key": KEY}) as served:
        yield served


def client(server: Served, key: str = KEY) -> Any:
    return get_sync_client(url=server.url, api_key=key)


def finish(server: Served, thread_id: str, steps: int) -> str:
    """Run `slow` on the thread to its end; return the run's id."""
    run = client(server).runs.wait(
        thread_id, "slow", input={"steps": steps, "delay": 0.01}, raise_error=True
    )
    assert run["done"] == list(range(1, steps + 1)), run
    (last, *_) = client(server).runs.list(thread_id, limit=1)
    return str(last["run_id"])


def expires_at(thread: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(thread["ttl"]["expires_at"])


def test_the_sdk_creates_and_updates_threads_with_a_ttl(server: Served) -> None:
    sdk = client(server)
    made = sdk.threads.create(ttl=30)  # minutes; the SDK sends {"ttl": 30, "strategy": "delete"}
    assert "ttl" not in sdk.threads.get(made["thread_id"])  # only when asked for
    shown = sdk.threads.get(made["thread_id"], include=["ttl"])
    assert shown["ttl"]["strategy"] == "delete" and shown["ttl"]["ttl_minutes"] == 30
    soon = datetime.now(UTC) + timedelta(minutes=30)
    assert abs(expires_at(shown) - soon) < timedelta(seconds=30)

    latest = sdk.threads.create(ttl={"ttl": 5, "strategy": "keep_latest"})
    shown = sdk.threads.get(latest["thread_id"], include=["ttl"])
    assert (shown["ttl"]["strategy"], shown["ttl"]["ttl_minutes"]) == ("keep_latest", 5)

    updated = sdk.threads.update(
        made["thread_id"], metadata={"brand": "acme"}, ttl={"ttl": 90.5, "strategy": "keep_latest"}
    )
    assert updated["metadata"] == {"brand": "acme"}
    shown = sdk.threads.get(made["thread_id"], include=["ttl"])
    assert (shown["ttl"]["strategy"], shown["ttl"]["ttl_minutes"]) == ("keep_latest", 90.5)
    assert expires_at(shown) > soon
    sdk.threads.update(made["thread_id"], metadata={"more": 1})  # no ttl: the TTL stays
    assert sdk.threads.get(made["thread_id"], include=["ttl"])["ttl"]["ttl_minutes"] == 90.5

    plain = sdk.threads.create()
    assert sdk.threads.get(plain["thread_id"], include=["ttl"])["ttl"] is None
    with pytest.raises(NotFoundError):
        client(server, OTHER_KEY).threads.get(made["thread_id"], include=["ttl"])
    with pytest.raises(NotFoundError):
        client(server, OTHER_KEY).threads.update(made["thread_id"], metadata={}, ttl=1)


def test_prune_removes_exactly_the_threads_it_names(server: Served) -> None:
    sdk, other = client(server), client(server, OTHER_KEY)
    a1, a2, a3 = (sdk.threads.create()["thread_id"] for _ in range(3))
    b1 = other.threads.create()["thread_id"]
    run_id = finish(server, a1, 1)
    answer = sdk.threads.prune([a1, a3, b1, "no-such-thread"])
    assert answer == {"pruned_count": 2}
    for gone in (a1, a3):
        with pytest.raises(NotFoundError):
            sdk.threads.get(gone)
    with pytest.raises(NotFoundError):
        sdk.runs.get(a1, run_id)
    assert sdk.threads.get(a2)["thread_id"] == a2
    assert other.threads.get(b1)["thread_id"] == b1  # another key's: untouched
    assert other.threads.prune([a2]) == {"pruned_count": 0}
    assert sdk.threads.get(a2)["thread_id"] == a2

    finish(server, a2, 2)
    finish(server, a2, 3)
    before = sdk.threads.get_state(a2)
    assert len(sdk.threads.get_history(a2, limit=20)) > 3
    assert sdk.threads.prune([a2], strategy="keep_latest") == {"pruned_count": 1}
    after = sdk.threads.get_state(a2)
    assert after["values"] == before["values"] and after["checkpoint"] == before["checkpoint"]
    assert len(sdk.threads.get_history(a2, limit=20)) == 1
    assert len(sdk.runs.list(a2)) == 2  # its runs stay
    finish(server, a2, 4)  # and a new one continues from the state kept


JUNK_TTLS: list[Any] = [
    30,  # the SDK's int is sent as an object; a bare number is not the wire format
    "30",
    {"ttl": "30"},
    {"ttl": True},
    {"ttl": 0},
    {"ttl": -5},
    {"ttl": 1e12},
    {"ttl": None},
    {"strategy": "delete"},
    {"ttl": 5, "strategy": "forever"},
    {"ttl": 5, "strategy": 1},
    {"ttl": 5, "sweep": "now"},
    [{"ttl": 5}],
]


def test_a_bad_ttl_is_a_422_naming_it_and_nothing_is_written(server: Served) -> None:
    headers = {"X-Api-Key": KEY}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        for ttl in JUNK_TTLS:
            made = http.post("/threads", json={"thread_id": "junk-ttl", "ttl": ttl})
            assert made.status_code == 422, (ttl, made.text)
            assert "ttl" in made.json()["message"], ttl
            assert http.get("/threads/junk-ttl").status_code == 404  # nothing half-written
            patched = http.patch(f"/threads/{thread_id}", json={"metadata": {"a": 1}, "ttl": ttl})
            assert patched.status_code == 422, (ttl, patched.text)
            assert "ttl" in patched.json()["message"], ttl
        shown = http.get(f"/threads/{thread_id}", params={"include": "ttl"}).json()
        assert shown["metadata"] == {} and shown["ttl"] is None


JUNK_PRUNES: list[tuple[Any, str]] = [
    ({}, "thread_ids"),
    ({"thread_ids": "abc"}, "thread_ids"),
    ({"thread_ids": [1, 2]}, "thread_ids"),
    ({"thread_ids": ["not an id!"]}, "thread_ids"),
    ({"thread_ids": ["a" * 200]}, "thread_ids"),
    ({"thread_ids": [f"t{i}" for i in range(1001)]}, "thread_ids"),
    ({"thread_ids": [], "strategy": "archive"}, "strategy"),
    ({"thread_ids": [], "strategy": None}, "strategy"),
    ({"thread_ids": [], "older_than": 5}, "older_than"),
    ([], "body"),
]


def test_a_bad_prune_or_include_is_a_422_naming_the_field(server: Served) -> None:
    headers = {"X-Api-Key": KEY}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        for body, field in JUNK_PRUNES:
            answer = http.post("/threads/prune", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert field in answer.json()["message"], body
        assert http.get(f"/threads/{thread_id}").status_code == 200
        assert http.post("/threads/prune", json={"thread_ids": []}).json() == {"pruned_count": 0}
        for include in ("values", "ttl,values", "t" * 100):
            bad = http.get(f"/threads/{thread_id}", params={"include": include})
            assert bad.status_code == 422 and "include" in bad.json()["message"], include


def expire(server: Served, thread_id: str) -> None:
    """Move a thread's TTL expiry a minute into the past, in the deployment's database."""
    if not isinstance(server, LiveServer):  # processes: the deployment's own database
        server.cluster.execute(  # type: ignore[attr-defined]
            "UPDATE threads SET expires_at = now() - interval '1 minute' "
            f"WHERE thread_id = '{thread_id}'"
        )
        return
    settings = server.settings
    if settings.database_url is not None:
        url = settings.database_url.get_secret_value()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE threads SET expires_at = now() - interval '1 minute' WHERE thread_id = %s",
                (thread_id,),
            )
        return
    with sqlite3.connect(settings.database_path, timeout=10) as conn:
        conn.execute(
            "UPDATE threads SET expires_at = ? WHERE thread_id = ?", (time.time() - 60, thread_id)
        )


def test_each_deployments_sweep_acts_on_an_expired_thread(server: Served) -> None:
    sdk = client(server)
    doomed = sdk.threads.create(ttl=1)["thread_id"]
    kept = sdk.threads.create(ttl={"ttl": 1, "strategy": "keep_latest"})["thread_id"]
    plain = sdk.threads.create()["thread_id"]
    run_id = finish(server, doomed, 1)
    finish(server, kept, 2)
    finish(server, kept, 3)
    before = sdk.threads.get_state(kept)
    expire(server, doomed)
    expire(server, kept)

    def swept() -> bool:
        try:
            sdk.threads.get(doomed)
        except NotFoundError:
            return len(sdk.threads.get_history(kept, limit=20)) == 1
        return False

    wait_until(swept, timeout=30, interval=0.2)
    with pytest.raises(NotFoundError):
        sdk.runs.get(doomed, run_id)
    after = sdk.threads.get_state(kept)
    assert after["values"] == before["values"]
    ttl = sdk.threads.get(kept, include=["ttl"])["ttl"]
    assert expires_at({"ttl": ttl}) > datetime.now(UTC)  # counted again from the sweep
    assert sdk.threads.get(plain)["thread_id"] == plain


async def test_the_retention_pages_examples_run_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/retention.md's snippets, one after the other, on the real pipeline."""
    snippets = code_blocks("retention", "python")
    assert len(snippets) == 2
    url = "http://localhost:8000"
    with (
        ScriptedOpenAIServer(atelier_responder()) as model,
        LiveServer(
            service_settings(tmp_path / "data", model.base_url, auth_api_keys=[KEY]), None
        ) as live,
    ):
        namespace: dict[str, Any] = {"KEY": KEY}
        for number, source in enumerate(snippets):
            code = compile(
                source.replace(url, live.url),
                f"retention-{number}",
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            )
            await asyncio.wait_for(eval(code, namespace), timeout=120)
        printed = capsys.readouterr().out.splitlines()
        assert printed == ["keep_latest 1440.0", "{'pruned_count': 1}", "1", "{'pruned_count': 1}"]
        state = namespace["state"]
        assert state["values"]["result"]["outcome"] == "completed"
        sdk = get_sync_client(url=live.url, api_key=KEY)
        with pytest.raises(NotFoundError):
            sdk.threads.get(namespace["thread"]["thread_id"])
