"""Quotas per key over HTTP on every deployment (issue 33): 429 with `Retry-After`, no trace.

Each deployment of `serve_deployment` (embedded, scale-out in one process, two API
replicas behind nginx with two workers) runs with small `QUOTA_*` settings and the
sample graphs on the scripted model. Creations race each other (many at once, through
both replicas where there are two): exactly the quota's worth is admitted, the rest
answered 429 naming the quota, with `Retry-After`, and nothing of them is stored.
`GET /keys/{key_id}/usage` reports what each key holds against its quotas. The spend
cap and the usage's costs are in tests/app/test_spend_caps.py.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from app.security import owner_id_for
from core.settings import Settings
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.app.sample_graphs import sample_assistants, scripted_reply, slow_run
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployments
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

KEY = "quota-test-key-0123456789"
OTHER_KEY = "quota-other-key-0123456789"
#: The deployments' quotas: small, so that a test reaches each one.
QUOTAS = {
    "quota_crons": 300,
    "quota_assistants": 100,
    "quota_store_bytes": 20_000,
    "quota_store_searches_per_minute": 3,
    "quota_runs_per_minute": 4,
}
STUDIO_INPUT = {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True}


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
    env = {name.upper(): str(value) for name, value in QUOTAS.items()}
    env["AUTH_API_KEYS"] = f"{KEY},{OTHER_KEY}"
    with processes_deployment(request, tmp_path_factory, llm.base_url, env=env) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data", llm.base_url, auth_api_keys=[KEY, OTHER_KEY], **QUOTAS, **scale
        )

    with serve_deployment(request, settings, sample_assistants, {"X-Api-Key": KEY}) as served:
        yield served


def _client(server: Served, key: str = KEY) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=30, max_keepalive_connections=30)
    return httpx.AsyncClient(
        base_url=server.url, headers={"X-Api-Key": key}, timeout=120, limits=limits
    )


async def _all_at_once(
    server: Served, method: str, path: str, bodies: list[dict[str, Any]]
) -> list[httpx.Response]:
    """Send every body at once (at most 25 in flight); return the answers in order."""
    gate = asyncio.Semaphore(25)
    async with _client(server) as client:

        async def send(body: dict[str, Any]) -> httpx.Response:
            async with gate:
                return await client.request(method, path, json=body)

        return list(await asyncio.gather(*(send(body) for body in bodies)))


def _assert_refused(answer: httpx.Response, quota: str, limit: int) -> None:
    """The answer is a 429 naming the quota and its limit, with `Retry-After`."""
    assert answer.status_code == 429, answer.text
    body = answer.json()
    assert body["error"] == "rate_limited"
    assert body["message"].startswith(f"quota {quota} ({limit}) reached")
    assert body["detail"]["quota"] == quota and body["detail"]["limit"] == limit
    wait = int(answer.headers["retry-after"])
    assert 1 <= wait <= 60 and body["detail"]["retry_after"] == wait
    assert body["message"].endswith(f"retry in {wait} s")


async def test_the_301st_cron_is_refused_naming_its_quota(server: Served) -> None:
    body = {"assistant_id": "studio", "schedule": "0 9 * * *", "input": STUDIO_INPUT}

    answers = await _all_at_once(server, "POST", "/runs/crons", [body] * 305)

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 300 + [429] * 5, statuses
    for answer in answers:
        if answer.status_code == 429:
            _assert_refused(answer, "crons", 300)
    client = get_client(url=server.url, api_key=KEY)
    assert await client.crons.count() == 300  # the refused ones left nothing behind
    other = get_client(url=server.url, api_key=OTHER_KEY)
    assert (await other.crons.create("studio", schedule="0 9 * * *", input=STUDIO_INPUT))["cron_id"]


async def test_the_101st_assistant_is_refused_naming_its_quota(server: Served) -> None:
    bodies = [{"graph_id": "studio", "name": f"preset {i}"} for i in range(103)]

    answers = await _all_at_once(server, "POST", "/assistants", bodies)

    assert sorted(a.status_code for a in answers) == [200] * 100 + [429] * 3
    refused = [a for a in answers if a.status_code == 429]
    _assert_refused(refused[0], "assistants", 100)
    client = get_client(url=server.url, api_key=KEY)
    found = await client.assistants.search(graph_id="studio", limit=1000)
    assert len([a for a in found if a["assistant_id"] != "studio"]) == 100  # but the built-in
    # An update is a new version of one, not one more: allowed.
    created = next(a.json() for a in answers if a.status_code == 200)
    await client.assistants.update(created["assistant_id"], name="renamed")


async def test_a_store_put_past_the_keys_bytes_is_refused_and_stores_nothing(
    server: Served,
) -> None:
    item = {"text": "护肤" * 2000}  # ~12 KB as JSON: the second one passes 20,000 bytes
    async with _client(server) as client:
        first = await client.put(
            "/store/items", json={"namespace": ["notes"], "key": "a", "value": item}
        )
        assert first.status_code == 204, first.text
        second = await client.put(
            "/store/items", json={"namespace": ["notes"], "key": "b", "value": item}
        )
        _assert_refused(second, "store_bytes", 20_000)
        assert "would take" in second.json()["message"]
        missing = await client.get("/store/items", params={"namespace": "notes", "key": "b"})
        assert missing.status_code == 200 and missing.json() is None
        # Replacing the item it has, with a smaller value, is fine; so is another key's put.
        replaced = await client.put(
            "/store/items", json={"namespace": ["notes"], "key": "a", "value": {"text": "短"}}
        )
        assert replaced.status_code == 204
        again = await client.put(
            "/store/items", json={"namespace": ["notes"], "key": "b", "value": item}
        )
        assert again.status_code == 204, again.text
    async with _client(server, OTHER_KEY) as other:
        put = await other.put(
            "/store/items", json={"namespace": ["notes"], "key": "a", "value": item}
        )
        assert put.status_code == 204


async def test_store_searches_with_a_query_count_toward_the_keys_rate(server: Served) -> None:
    search = {"namespace_prefix": ["notes"], "query": "护肤"}
    async with _client(server) as client:
        put = await client.put(
            "/store/items", json={"namespace": ["notes"], "key": "a", "value": {"t": "护肤"}}
        )
        assert put.status_code == 204
        # The server's first search also starts its ranking process (seconds): it counts
        # in the calendar minute it was asked in; the rest start well inside one minute.
        asked = datetime.now(UTC)
        assert (await client.post("/store/items/search", json=search)).status_code == 200
        now = datetime.now(UTC)
        left = 3 - (now.replace(second=0, microsecond=0) == asked.replace(second=0, microsecond=0))
        if now.second > 40:
            await asyncio.sleep(61 - now.second)
            left = 3
        for _ in range(left):
            found = await client.post("/store/items/search", json=search)
            assert found.status_code == 200 and [i["key"] for i in found.json()["items"]] == ["a"]
        refused = await client.post("/store/items/search", json=search)
        _assert_refused(refused, "store_searches_per_minute", 3)
        # A search without a query reads, it does not rank: not counted.
        plain = await client.post("/store/items/search", json={"namespace_prefix": ["notes"]})
        assert plain.status_code == 200
        too_long = await client.post(
            "/store/items/search", json={"namespace_prefix": ["notes"], "query": "护" * 2001}
        )
        assert too_long.status_code == 422 and "query" in too_long.text


async def test_runs_per_minute_hold_across_replicas(server: Served) -> None:
    """Runs started at once, through both replicas where there are two: four pass."""
    body = {"assistant_id": "studio", "input": STUDIO_INPUT}

    answers = await _all_at_once(server, "POST", "/runs", [body] * 12)

    assert sorted(a.status_code for a in answers) == [200] * 4 + [429] * 8
    for answer in answers:
        if answer.status_code == 429:
            _assert_refused(answer, "runs_per_minute", 4)
    async with _client(server) as client:
        threads = (await client.post("/threads/search", json={"limit": 100})).json()
    assert len(threads) == 4  # a refused run made no thread either


@pytest.fixture(params=["embedded", "scale-out"])
def two_at_once(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """A deployment in one process whose keys may run two runs at once."""

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[KEY, OTHER_KEY],
            quota_runs_at_once=2,
            quota_runs_per_minute=4,
            **scale,
        )

    with serve_deployment(request, settings, sample_assistants) as served:
        yield served


async def test_runs_at_once_refuses_a_third_run_while_two_run(two_at_once: Served) -> None:
    server = two_at_once
    body = slow_run(steps=40, delay=0.25)
    body.pop("stream_mode")
    async with _client(server) as client:
        started = [await client.post("/runs", json=body) for _ in range(2)]
        assert [s.status_code for s in started] == [200, 200], started[0].text
        refused = await client.post("/runs", json=body)
        _assert_refused(refused, "runs_at_once", 2)
        assert refused.headers["retry-after"] == "5"
        first = started[0].json()
        cancel = await client.post(
            f"/threads/{first['thread_id']}/runs/{first['run_id']}/cancel",
            params={"wait": "true"},
        )
        assert cancel.status_code == 200
        again = await client.post("/runs", json=body)
        assert again.status_code == 200, again.text  # a run under way is never cut: room came
        usage = (await client.get("/keys/me/usage")).json()
        quotas = {q["name"]: q for q in usage["quotas"]}
        assert quotas["runs_at_once"] == {"name": "runs_at_once", "limit": 2, "used": 2}
        assert quotas["runs_per_minute"]["used"] == 3


async def test_a_keys_usage_shows_its_quotas_and_no_other_keys(server: Served) -> None:
    async with _client(server) as client:
        for i in range(2):
            created = await client.post(
                "/runs/crons",
                json={"assistant_id": "studio", "schedule": f"{i} 9 * * *", "input": STUDIO_INPUT},
            )
            assert created.status_code == 200
        mine = await client.get("/keys/me/usage")
        by_id = await client.get(f"/keys/{owner_id_for(KEY)}/usage")
        others = await client.get(f"/keys/{owner_id_for(OTHER_KEY)}/usage")

    assert mine.status_code == 200 and by_id.status_code == 200, mine.text
    usage = mine.json()
    assert usage["key_id"] == "me" and by_id.json()["key_id"] == owner_id_for(KEY)
    assert usage["month"] == datetime.now(UTC).strftime("%Y-%m")
    assert usage["total"]["runs"] == 0 and usage["total"]["cost"] == 0
    quotas = {q["name"]: (q["limit"], q["used"]) for q in usage["quotas"]}
    assert quotas["crons"] == (300, 2) and quotas["assistants"] == (100, 0)
    assert quotas["monthly_spend"] == (None, 0) and quotas["store_bytes"] == (20_000, 0)
    assert usage["spend"] == {"cap": None, "spent": 0, "complete": True}
    assert others.status_code == 404  # another key's usage is not this key's to read
    assert others.json()["error"] == "not_found"


@pytest.mark.in_process_only("the crons' clock is the test's, in the server's process")
async def test_a_crons_tick_over_the_keys_run_rate_is_skipped(server: Served) -> None:
    assert isinstance(server, LiveServer)
    client = get_client(url=server.url, api_key=KEY)
    for i in range(6):  # six ticks due at once; four runs a minute
        await client.crons.create(
            "studio", schedule="* * * * *", input=STUDIO_INPUT, metadata={"n": i}
        )
    crons = server.app.state.engine.crons
    later = datetime.now(UTC) + timedelta(minutes=1, seconds=5)
    crons.scheduler.clock = lambda: later

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if all(c["next_run_date"] > later.isoformat() for c in await client.crons.search()):
            break  # every tick spent
    threads = await client.threads.search(limit=100)

    assert len(threads) == 4  # two ticks were skipped: the key's runs_per_minute
    assert {t["metadata"]["cron_id"] for t in threads} <= {
        c["cron_id"] for c in await client.crons.search()
    }


async def test_the_document_lists_the_usage_route_and_every_429(server: Served) -> None:
    async with _client(server) as client:
        document = (await client.get("/openapi.json")).json()

    usage = document["paths"]["/keys/{key_id}/usage"]["get"]
    schema = usage["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/UsageOut"}
    assert {"401", "404", "422"} <= set(usage["responses"])
    for method, path in (
        ("post", "/runs"),
        ("post", "/threads/{thread_id}/runs/stream"),
        ("post", "/runs/crons"),
        ("post", "/threads/{thread_id}/runs/crons"),
        ("post", "/assistants"),
        ("put", "/store/items"),
        ("post", "/store/items/search"),
    ):
        refused = document["paths"][path][method]["responses"]["429"]
        assert "quota" in refused["description"], path
        assert refused["headers"]["Retry-After"]["schema"]["type"] == "integer"
    properties = document["components"]["schemas"]["UsageOut"]["properties"]
    assert {"total", "assistants", "quotas", "spend", "currency"} <= set(properties)


@pytest.mark.in_process_only("the page's commands; the route is the same everywhere")
async def test_the_quotas_page_snippets_run_as_written(server: Served) -> None:
    script = code_block("keys", "bash", heading="A key's usage")
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-euo", "pipefail", "-c", script.replace("localhost:8000", server.url)],
        env={**os.environ, "KEY": KEY},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout)["key_id"] == "me"

    snippet = code_block("keys", "python", heading="A key's usage")
    snippet = snippet.replace("http://localhost:8000", server.url).replace("your-api-key", KEY)
    printed = io.StringIO()
    code = compile(snippet, "<docs/keys.md>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with contextlib.redirect_stdout(printed):
        await eval(code, {"__name__": "__main__"})
    lines = printed.getvalue().splitlines()
    assert lines[0] == f"{datetime.now(UTC):%Y-%m} 0 0.0 USD"
    assert "crons 0 of 300" in lines and "monthly_spend 0.0 of None" in lines
