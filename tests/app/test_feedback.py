"""Feedback on runs and the cost of a post, over HTTP in every deployment.

The real service (uvicorn) runs the real atelier pipeline against the scripted LLM
on loopback, which reports token usage as OpenAI does; the model is priced
(`LLM_PRICES`), so each run's `result.usage` carries costs. Runs are made with the
official `langgraph-sdk` client; feedback is plain HTTP (the SDK has no feedback
call). Embedded (SQLite), scale-out in one process, and API replicas + workers.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

from core.settings import Settings
from engine.feedback import MAX_COMMENT_CHARS, MAX_FEEDBACK_PER_RUN
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployments
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

KEY = "feedback-test-key-0123456789"
OTHER_KEY = "feedback-other-key-0123456789"
PRICES = {"scripted": {"input": 2.0, "output": 8.0}}
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
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


@pytest.fixture
def http(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"X-Api-Key": KEY}) as client:
        yield client


def _finished_run(server: Served) -> tuple[str, str, dict[str, Any]]:
    """Run the pipeline to its end; return (thread id, run id, result)."""
    sdk = get_sync_client(url=server.url, api_key=KEY)
    thread = sdk.threads.create()
    run = sdk.runs.create(
        thread["thread_id"], "atelier", input={"request": REQUEST, "auto_confirm": True}
    )
    values: Any = sdk.runs.join(thread["thread_id"], run["run_id"])
    return thread["thread_id"], run["run_id"], values["result"]


def test_feedback_round_trip_and_the_posts_cost(server: Served, http: httpx.Client) -> None:
    _, run_id, result = _finished_run(server)

    # The post's cost: every role's tokens × the scripted model's price, in CNY.
    usage = result["usage"]
    for role, numbers in usage["roles"].items():
        cost = numbers["cost"]
        expected_input = numbers["prompt_tokens"] * PRICES["scripted"]["input"] / 1e6
        expected_output = numbers["completion_tokens"] * PRICES["scripted"]["output"] / 1e6
        assert cost["currency"] == "CNY", role
        assert cost["input"] == pytest.approx(expected_input, abs=1e-9), role
        assert cost["output"] == pytest.approx(expected_output, abs=1e-9), role
    total = usage["total"]["cost"]
    assert total["total"] == pytest.approx(
        sum(n["cost"]["total"] for n in usage["roles"].values()), abs=1e-8
    )
    assert total["total"] > 0

    up = http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": True})
    assert up.status_code == 200, up.text
    assert up.json()["score"] == 1 and up.json()["comment"] is None
    published = http.post(
        f"/runs/{run_id}/feedback",
        json={"key": "published", "score": 0.5, "comment": "标题很抓人，第二段太长。"},
    )
    assert published.status_code == 200, published.text
    listed = http.get(f"/runs/{run_id}/feedback")
    assert listed.status_code == 200
    entries = listed.json()
    assert [(e["key"], e["score"], e["comment"]) for e in entries] == [
        ("quality", 1.0, None),
        ("published", 0.5, "标题很抓人，第二段太长。"),
    ]
    assert {e["run_id"] for e in entries} == {run_id}
    assert entries[0]["feedback_id"] == up.json()["feedback_id"]
    assert "owner" not in entries[0]


def test_another_keys_run_and_an_unknown_run_are_not_found(
    server: Served, http: httpx.Client
) -> None:
    _, run_id, _ = _finished_run(server)
    other = {"X-Api-Key": OTHER_KEY}
    body = {"key": "quality", "score": 0}
    refused = http.post(f"/runs/{run_id}/feedback", json=body, headers=other)
    assert refused.status_code == 404 and run_id in refused.json()["message"]
    assert http.get(f"/runs/{run_id}/feedback", headers=other).status_code == 404
    assert http.post("/runs/no-such-run/feedback", json=body).status_code == 404
    assert http.get("/runs/no-such-run/feedback").status_code == 404
    assert http.get(f"/runs/{run_id}/feedback").json() == []  # nothing was written


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "Quality!", "score": 1}, "key"),
        ({"key": "quality", "score": "good"}, "score"),
        ({"key": "quality", "score": 1e9}, "score"),
        ({"key": "quality"}, "score"),
        ({"key": "quality", "score": 1, "comment": "x" * (MAX_COMMENT_CHARS + 1)}, "comment"),
        ({"key": "quality", "score": 1, "rating": 5}, "rating"),
    ],
)
@pytest.mark.in_process_only("validation is the same code in every deployment")
def test_bad_feedback_is_refused_naming_the_field(
    server: Served, http: httpx.Client, body: dict[str, Any], field: str
) -> None:
    _, run_id, _ = _finished_run(server)
    answer = http.post(f"/runs/{run_id}/feedback", json=body)
    assert answer.status_code == 422, answer.text
    assert field in answer.text
    assert http.get(f"/runs/{run_id}/feedback").json() == []


@pytest.mark.in_process_only("the metrics of one process (replicas each count their own)")
def test_metrics_count_feedback_and_its_mean_score_per_key(
    server: Served, http: httpx.Client
) -> None:
    _, run_id, _ = _finished_run(server)
    for score in (1, 0, 1):
        http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": score})
    text = http.get("/metrics").text
    assert 'atelier_feedback_score_count{key="quality"} 3.0' in text
    assert 'atelier_feedback_score_sum{key="quality"} 2.0' in text
    # Known costs by model and role, in the price table's currency.
    assert 'atelier_llm_cost_total{currency="CNY",model="scripted",role="writer_agent"}' in text
    assert 'atelier_llm_model_tokens_total{direction="input",model="scripted"' in text


@pytest.mark.in_process_only("one run's limit, the same code in every deployment")
def test_a_run_keeps_a_bounded_number_of_entries_and_loses_them_with_its_thread(
    server: Served, http: httpx.Client
) -> None:
    thread_id, run_id, _ = _finished_run(server)
    for i in range(MAX_FEEDBACK_PER_RUN):
        added = http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": i})
        assert added.is_success
    full = http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": 1})
    assert full.status_code == 409 and str(MAX_FEEDBACK_PER_RUN) in full.json()["message"]
    assert len(http.get(f"/runs/{run_id}/feedback").json()) == MAX_FEEDBACK_PER_RUN

    assert http.delete(f"/threads/{thread_id}").status_code == 204
    assert http.get(f"/runs/{run_id}/feedback").status_code == 404


@pytest.mark.in_process_only("the README's commands; the route is the same everywhere")
def test_the_readme_feedback_commands_run_as_written(server: Served) -> None:
    script = code_block("feedback", "bash")
    _, run_id, _ = _finished_run(server)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace("localhost:8000", server.url)],
        env={**os.environ, "KEY": KEY, "RUN": run_id},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    decoder = json.JSONDecoder()
    added, end = decoder.raw_decode(done.stdout)
    listed, _ = decoder.raw_decode(done.stdout[end:].lstrip())
    assert added["key"] == "quality" and added["score"] == 1 and added["comment"] == "标题很抓人"
    assert listed == [added]


def test_the_feedback_routes_are_listed_with_typed_bodies(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    settings = service_settings(tmp_path / "data", "http://127.0.0.1:9/v1")
    document = TestClient(create_app(settings)).get("/openapi.json").json()
    item = document["paths"]["/runs/{run_id}/feedback"]
    post, get = item["post"], item["get"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/FeedbackCreate"}
    ok = post["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/FeedbackOut"}
    assert {"404", "409", "422"} <= set(post["responses"])
    listed = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert listed["items"] == {"$ref": "#/components/schemas/FeedbackOut"}
    assert "404" in get["responses"]
    fields = document["components"]["schemas"]["FeedbackCreate"]
    assert fields["additionalProperties"] is False and set(fields["required"]) == {"key", "score"}
    assert fields["properties"]["key"]["pattern"] and fields["properties"]["comment"]
