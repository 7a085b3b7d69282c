"""The monthly spend cap and a key's usage, served (issue 33), on every deployment.

The real `atelier` pipeline runs on the scripted model, which reports token usage as
OpenAI does; priced (`LLM_PRICES`), each run's `result.usage` carries its cost, and
the run records the same calls' cost when it ends. Once a key's month has reached
`QUOTA_MONTHLY_SPEND`, its next run is refused with 429 before it starts: the
scripted model gets no call (over HTTP and over MCP alike). `GET /keys/me/usage`
matches the sum of the runs' `result.usage` costs. Without prices a run's cost is
unknown, never 0: the usage says so, and the cap, which counts known costs only,
says it is not complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.app.test_mcp import mcp_session
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployments
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

KEY = "spend-test-key-0123456789"
OTHER_KEY = "spend-other-key-0123456789"
PRICES = {"scripted": {"input": 2.0, "output": 8.0}}
#: A cap one run passes (a post costs about a hundredth of a yuan here).
CAP = 0.000_01
REQUEST = "写一篇小红书笔记：平价护肤，学生党友好"


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder()) as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {
        "AUTH_API_KEYS": f"{KEY},{OTHER_KEY}",
        "LLM_TIMEOUT": "30",
        "LLM_PRICES": json.dumps(PRICES),
        "LLM_PRICE_CURRENCY": "CNY",
        "QUOTA_MONTHLY_SPEND": str(CAP),
    }
    with processes_deployment(
        request, tmp_path_factory, llm.base_url, cli=True, env=env
    ) as deployment:
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
            llm_prices=PRICES,
            llm_price_currency="CNY",
            quota_monthly_spend=CAP,
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


def _post(server: Served, key: str = KEY) -> dict[str, Any]:
    """Run the pipeline to its end with the official SDK; return its result."""
    sdk = get_sync_client(url=server.url, api_key=key)
    thread = sdk.threads.create()
    run = sdk.runs.create(
        thread["thread_id"], "atelier", input={"request": REQUEST, "auto_confirm": True}
    )
    values: Any = sdk.runs.join(thread["thread_id"], run["run_id"])
    return dict(values["result"])


def _usage(server: Served, key: str = KEY) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/keys/me/usage", headers={"X-Api-Key": key}, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_past_the_spend_cap_no_run_starts_and_the_usage_matches_the_runs(
    server: Served, llm: ScriptedOpenAIServer
) -> None:
    result = _post(server)  # the month's first run: 0 spent, under the cap
    cost = result["usage"]["total"]["cost"]
    assert cost is not None and cost["currency"] == "CNY" and cost["total"] > CAP

    usage = _usage(server)
    assert usage["currency"] == "CNY" and usage["total"]["runs"] == 1
    assert usage["total"]["cost"] == pytest.approx(cost["total"], abs=1e-8)
    tokens = [r["prompt_tokens"] for r in result["usage"]["roles"].values()]
    assert usage["total"]["prompt_tokens"] == sum(tokens)
    assert [a["assistant_id"] for a in usage["assistants"]] == ["atelier"]
    assert usage["spend"] == {"cap": CAP, "spent": usage["total"]["cost"], "complete": True}

    calls = llm.call_count
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Api-Key": KEY}, timeout=60
    ) as client:
        refused = await client.post(
            "/runs/wait",
            json={"assistant_id": "atelier", "input": {"request": REQUEST, "auto_confirm": True}},
        )
    assert refused.status_code == 429, refused.text
    body = refused.json()
    assert body["detail"]["quota"] == "monthly_spend"
    assert body["message"].startswith(f"quota monthly_spend ({CAP:g}) reached: this month's")
    assert int(refused.headers["retry-after"]) > 0  # the next month's start
    async with mcp_session(server.url, {"X-Api-Key": KEY}) as session:
        over_mcp = await session.call_tool("atelier", {"request": REQUEST})
    assert over_mcp.is_error and "quota monthly_spend" in str(over_mcp.content)
    assert llm.call_count == calls  # refused before any LLM call
    async with httpx.AsyncClient(
        base_url=server.url, headers={"X-Api-Key": KEY}, timeout=60
    ) as client:
        threads = (await client.post("/threads/search", json={})).json()
    assert len(threads) == 1  # nothing half-written
    assert _usage(server, OTHER_KEY)["total"] == {
        "runs": 0,
        "calls": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "cost": 0,
        "known_cost": 0,
        "unknown_cost_runs": 0,
    }


@pytest.fixture(params=["embedded", "scale-out"])
def unpriced(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """A deployment with a spend cap and no LLM_PRICES: every cost is unknown."""

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[KEY],
            quota_monthly_spend=CAP,
            **scale,
        )

    with serve_deployment(request, settings, None) as served:
        yield served


def test_without_prices_the_cost_is_unknown_and_the_cap_says_it_is_incomplete(
    unpriced: Served,
) -> None:
    result = _post(unpriced)
    assert result["usage"]["total"]["cost"] is None  # unknown, never 0

    usage = _usage(unpriced)

    assert usage["total"]["runs"] == 1 and usage["total"]["calls"] > 0
    assert usage["total"]["cost"] is None and usage["total"]["unknown_cost_runs"] == 1
    assert usage["total"]["known_cost"] == 0
    assert usage["spend"] == {"cap": CAP, "spent": 0, "complete": False}
    # The cap counts the known costs: none here, so the next run is not refused.
    assert _post(unpriced)["outcome"] in ("completed", "exhausted")
