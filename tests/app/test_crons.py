"""Crons over HTTP with the official `langgraph-sdk` client, real uvicorn.

The scheduler's clock is the test's (`CronsService.scheduler.clock`): moving it
past a tick makes the next pass (every second) fire it, so no test waits for the
minute. Embedded (SQLite) and scale-out in one process (PostgreSQL + Redis, the API
and a worker): the processes deployment's exactly-once test is in
tests/app/scale/test_crons_processes.py.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from core.settings import Settings
from engine.crons import utc_now
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, serve_deployment, service_settings, wait_until
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

KEY = "cron-test-key-0123456789"
OTHER_KEY = "cron-other-key-0123456789"
#: Where the test's clock starts: half a minute before a tick.
START = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


class Clock:
    """A clock the test moves on."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(params=["embedded", "scale-out"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data", llm.base_url, auth_api_keys=[KEY, OTHER_KEY], **scale
        )

    with serve_deployment(request, settings, sample_assistants) as served:
        assert isinstance(served, LiveServer)
        yield served


@pytest.fixture
def clock(server: LiveServer) -> Clock:
    clock = Clock(START)
    server.app.state.engine.crons.scheduler.clock = clock
    return clock


def studio_input() -> dict[str, Any]:
    return {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True}


def cron_threads(server: LiveServer, cron_id: str, key: str = KEY) -> list[dict[str, Any]]:
    answer = httpx.post(
        f"{server.url}/threads/search",
        json={"metadata": {"cron_id": cron_id}, "limit": 100},
        headers={"X-Api-Key": key},
        timeout=30,
    )
    answer.raise_for_status()
    return list(answer.json())


def runs_of(server: LiveServer, thread_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{server.url}/threads/{thread_id}/runs", headers={"X-Api-Key": KEY}, timeout=30
    )
    return list(answer.json())


def passes(seconds: float = 2.5) -> None:
    """Give the scheduler (a pass a second) time to fire whatever is due."""
    time.sleep(seconds)


async def test_a_one_minute_cron_starts_a_run_on_each_minute(
    server: LiveServer, clock: Clock
) -> None:
    client = get_client(url=server.url, api_key=KEY)
    cron = await client.crons.create(
        "studio",
        schedule="* * * * *",
        input=studio_input(),
        metadata={"team": "notes"},
        on_run_completed="keep",
    )
    assert cron["next_run_date"].startswith("2026-03-02T09:01:00")
    assert cron["enabled"] is True and cron["thread_id"] is None
    passes()
    assert cron_threads(server, cron["cron_id"]) == []  # not due yet

    clock.now = START + timedelta(seconds=31)  # 09:01:01
    threads = wait_until(lambda: cron_threads(server, cron["cron_id"]) or None, timeout=20)
    assert len(threads) == 1
    (run,) = runs_of(server, threads[0]["thread_id"])
    assert run["metadata"]["cron_id"] == cron["cron_id"]
    assert run["metadata"]["team"] == "notes"
    # An ordinary run: joinable, its stream replayed in full.
    values = await client.runs.join(threads[0]["thread_id"], run["run_id"])
    assert values["result"]["outcome"] == "completed"
    parts = [p async for p in client.runs.join_stream(threads[0]["thread_id"], run["run_id"])]
    assert parts[-1].event == "end"
    passes()
    assert len(cron_threads(server, cron["cron_id"])) == 1  # once per tick

    # Ticks missed while nothing fired them start one run, not a burst.
    clock.now = START + timedelta(minutes=5)
    wait_until(lambda: len(cron_threads(server, cron["cron_id"])) == 2, timeout=20)
    passes()
    assert len(cron_threads(server, cron["cron_id"])) == 2
    (listed,) = await client.crons.search(assistant_id="studio")
    assert listed["next_run_date"].startswith("2026-03-02T09:06:00")


async def test_a_disabled_cron_starts_nothing_until_enabled(
    server: LiveServer, clock: Clock
) -> None:
    client = get_client(url=server.url, api_key=KEY)
    cron = await client.crons.create(
        "studio", schedule="* * * * *", input=studio_input(), enabled=False
    )
    clock.now = START + timedelta(minutes=3)
    passes()
    assert cron_threads(server, cron["cron_id"]) == []
    updated = await client.crons.update(cron["cron_id"], enabled=True)
    assert updated["enabled"] is True
    assert updated["next_run_date"].startswith("2026-03-02T09:04:00")  # from now, no backlog
    clock.now = START + timedelta(minutes=3, seconds=40)
    wait_until(lambda: cron_threads(server, cron["cron_id"]) or None, timeout=20)


async def test_no_run_starts_after_the_end_time(server: LiveServer, clock: Clock) -> None:
    client = get_client(url=server.url, api_key=KEY)
    cron = await client.crons.create(
        "studio",
        schedule="* * * * *",
        input=studio_input(),
        end_time=START + timedelta(seconds=80),  # 09:01:50: the 09:01 tick only
    )
    clock.now = START + timedelta(seconds=31)
    wait_until(lambda: cron_threads(server, cron["cron_id"]) or None, timeout=20)
    (after,) = await client.crons.search()
    assert after["next_run_date"] is None
    clock.now = START + timedelta(minutes=10)
    passes()
    assert len(cron_threads(server, cron["cron_id"])) == 1


async def test_update_changes_the_schedule_and_delete_stops_the_cron(
    server: LiveServer, clock: Clock
) -> None:
    client = get_client(url=server.url, api_key=KEY)
    thread = await client.threads.create()
    cron = await client.crons.create_for_thread(
        thread["thread_id"],
        "studio",
        schedule="* * * * *",
        input=studio_input(),
        timezone="Asia/Shanghai",
    )
    assert cron["thread_id"] == thread["thread_id"] and cron["timezone"] == "Asia/Shanghai"
    # 09:00 in Shanghai is 01:00 UTC: the next one after 09:00:30 UTC is the next day's.
    updated = await client.crons.update(cron["cron_id"], schedule="0 9 * * *")
    assert updated["schedule"] == "0 9 * * *"
    assert updated["next_run_date"].startswith("2026-03-03T01:00:00")
    clock.now = START + timedelta(minutes=2)
    passes()
    assert runs_of(server, thread["thread_id"]) == []

    clock.now = datetime(2026, 3, 3, 1, 0, 5, tzinfo=UTC)
    runs = wait_until(lambda: runs_of(server, thread["thread_id"]) or None, timeout=20)
    assert runs[0]["metadata"]["cron_id"] == cron["cron_id"]
    await client.runs.join(thread["thread_id"], runs[0]["run_id"])

    await client.crons.delete(cron["cron_id"])
    clock.now = datetime(2026, 3, 4, 1, 0, 5, tzinfo=UTC)
    passes()
    assert len(runs_of(server, thread["thread_id"])) == 1
    with pytest.raises(NotFoundError):
        await client.crons.delete(cron["cron_id"])


async def test_crons_are_searched_and_counted_per_key(server: LiveServer, clock: Clock) -> None:
    client = get_client(url=server.url, api_key=KEY)
    other = get_client(url=server.url, api_key=OTHER_KEY)
    first = await client.crons.create(
        "studio", schedule="0 8 * * 1-5", input=studio_input(), metadata={"kind": "daily"}
    )
    await client.crons.create(
        "studio", schedule="0 18 * * 5", input=studio_input(), metadata={"kind": "weekly"}
    )
    assert await client.crons.count() == 2
    assert await client.crons.count(metadata={"kind": "daily"}) == 1
    found = await client.crons.search(metadata={"kind": "daily"})
    assert [c["cron_id"] for c in found] == [first["cron_id"]]
    ordered = await client.crons.search(sort_by="next_run_date", sort_order="asc")
    assert [c["schedule"] for c in ordered] == ["0 8 * * 1-5", "0 18 * * 5"]
    assert await other.crons.search() == [] and await other.crons.count() == 0
    with pytest.raises(NotFoundError):
        await other.crons.update(first["cron_id"], enabled=False)
    with pytest.raises(NotFoundError):
        await other.crons.delete(first["cron_id"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"schedule": "* * * *"}, "schedule"),
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"schedule": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ],
)
def test_a_bad_schedule_or_time_zone_is_a_422_naming_the_field(
    server: LiveServer, body: dict[str, Any], field: str
) -> None:
    answer = httpx.post(
        f"{server.url}/runs/crons",
        json={"assistant_id": "studio", "input": studio_input(), **body},
        headers={"X-Api-Key": KEY},
        timeout=30,
    )
    assert answer.status_code == 422
    assert field in answer.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/runs/crons", {"schedule": "0 0 31 2 *"}, "schedule"),  # no such day
        (
            "/runs/crons",
            {"schedule": "* * * * *", "end_time": "0001-01-01T00:00:00+01:00"},
            "end_time",
        ),
        ("/runs/crons/search", {"metadata": {'a"b': 1}}, "metadata"),
        ("/runs/crons/count", {"metadata": {"a\\b": 1}}, "metadata"),
    ],
)
def test_what_no_cron_can_use_is_a_422_not_a_500(
    server: LiveServer, path: str, body: dict[str, Any], field: str
) -> None:
    if path == "/runs/crons":
        body = {"assistant_id": "studio", "input": studio_input(), **body}
    answer = httpx.post(f"{server.url}{path}", json=body, headers={"X-Api-Key": KEY}, timeout=30)
    assert answer.status_code == 422, answer.text
    assert field in answer.text


def test_a_process_with_the_scheduler_off_fires_nothing(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    settings = service_settings(tmp_path / "data", llm.base_url, cron_scheduler=False)
    with LiveServer(settings, sample_assistants) as live:
        live.app.state.engine.crons.scheduler.clock = Clock(START)
        answer = httpx.post(
            f"{live.url}/runs/crons",
            json={"assistant_id": "studio", "input": studio_input(), "schedule": "* * * * *"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        live.app.state.engine.crons.scheduler.clock = Clock(START + timedelta(minutes=5))
        passes()
        assert cron_threads(live, answer.json()["cron_id"]) == []  # stored, never fired
        assert answer.json()["next_run_date"].startswith("2026-03-02T09:01:00")


# --------------------------------------------------------------------------- README


def readme_cron_example() -> str:
    """Return the Python example of the "Crons" page (docs/crons.md)."""
    return code_block("crons", "python")


async def test_the_readme_cron_example_runs_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example, on the real pipeline, with the scheduler's clock two seconds short
    of a minute (a real clock that runs ahead), so its tick comes without a minute's wait.
    """
    source = readme_cron_example()
    url = "http://localhost:8000"
    assert url in source
    with (
        ScriptedOpenAIServer(atelier_responder()) as model,
        LiveServer(
            service_settings(tmp_path / "data", model.base_url, auth_api_keys=[KEY]), None
        ) as live,
    ):
        real = utc_now()
        ahead = real.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=-2) - real
        live.app.state.engine.crons.scheduler.clock = lambda: utc_now() + ahead
        code = compile(
            source.replace(url, live.url), "README", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        namespace: dict[str, Any] = {"KEY": KEY}
        await asyncio.wait_for(eval(code, namespace), timeout=90)
        printed = capsys.readouterr().out.strip()
        assert datetime.fromisoformat(printed) == (real + ahead).replace(
            second=0, microsecond=0
        ) + timedelta(minutes=1)
        (thread,) = namespace["threads"]
        (run,) = namespace["runs"]
        assert thread["metadata"]["cron_id"] == run["metadata"]["cron_id"]
        assert run["metadata"]["series"] == "daily-tips"
        client = get_client(url=live.url, api_key=KEY)
        state = await client.threads.get_state(thread["thread_id"])
        assert state["values"]["result"]["outcome"] == "completed"
        # The tick's thread shows the cron's request as its first message, as a chat UI lists it.
        asked = state["values"]["messages"][0]
        assert asked["type"] == "human" and asked["id"] == f"request-{run['run_id']}"
        assert asked["content"] == state["values"]["request"]
        assert await client.crons.search() == []  # the example deletes its cron
