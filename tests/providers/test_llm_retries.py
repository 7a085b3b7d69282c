"""Retries and failed attempts inside the OpenAI client are counted per role (issue 11).

The real factory's models talk to the scripted OpenAI server, which answers with
errors first; the OpenAI SDK retries them below LangChain, and the counting
transport reports each retry and each failed attempt to the app's metrics.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.metrics import AtelierMetrics
from core.settings import Settings
from providers.llm import OpenAIModelFactory, failure_reason, open_model_factory
from tests.app.harness import LiveServer, service_settings
from tests.app.sample_graphs import sample_assistants
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer


def value(metrics: AtelierMetrics, name: str, **labels: str) -> float:
    sample = metrics.registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def failing_first(*errors: Reply, then: str = "ok") -> Callable[[ChatRequest], Reply]:
    """Answer `errors` in turn, then `then` to every later request."""
    replies = itertools.chain(errors, itertools.repeat(Reply.text(then)))
    return lambda _req: next(replies)


def settings_for(tmp_path: Path, base_url: str, retries: int) -> Settings:
    return service_settings(tmp_path / "data", base_url, llm_max_retries=retries, llm_timeout=10)


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(failing_first()) as server:
        yield server


async def test_a_429_then_200_counts_one_llm_retry_and_one_rate_limited_failure(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    llm.responder = failing_first(Reply.error(429, "slow down", retry=True))
    metrics = AtelierMetrics()

    async with open_model_factory(settings_for(tmp_path, llm.base_url, 2), observer=metrics) as f:
        reply = await f("planner").ainvoke("plan")

    assert reply.content == "ok"
    assert llm.call_count == 2  # the SDK retried once, under LangChain
    assert value(metrics, "atelier_retries_total", kind="llm", role="planner") == 1
    assert value(metrics, "atelier_llm_failures_total", role="planner", reason="rate_limited") == 1
    assert value(metrics, "atelier_retries_total", kind="llm", role="critic") == 0


async def test_server_errors_are_counted_per_role_until_the_retries_run_out(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    llm.responder = failing_first(*[Reply.error(500, "boom", retry=True)] * 3)
    metrics = AtelierMetrics()

    async with open_model_factory(settings_for(tmp_path, llm.base_url, 1), observer=metrics) as f:
        with pytest.raises(Exception, match="boom"):
            await f("critic").ainvoke("judge")
        reply = await f("critic").ainvoke("judge again")  # 1 more 500, then ok

    assert reply.content == "ok"
    assert value(metrics, "atelier_retries_total", kind="llm", role="critic") == 2
    assert value(metrics, "atelier_llm_failures_total", role="critic", reason="server_error") == 3


def test_a_synchronous_call_is_counted_too(tmp_path: Path, llm: ScriptedOpenAIServer) -> None:
    llm.responder = failing_first(Reply.error(429, "slow down", retry=True))
    metrics = AtelierMetrics()
    factory = OpenAIModelFactory(settings_for(tmp_path, llm.base_url, 2), observer=metrics)

    assert factory("writer_agent").invoke("write").content == "ok"
    assert value(metrics, "atelier_retries_total", kind="llm", role="writer_agent") == 1


async def test_a_connection_failure_is_counted_as_one(tmp_path: Path) -> None:
    metrics = AtelierMetrics()
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", 1)  # nothing listens there

    async with open_model_factory(settings, observer=metrics) as f:
        with pytest.raises(Exception, match=r"(?i)connection"):
            await f("planner").ainvoke("plan")

    assert value(metrics, "atelier_llm_failures_total", role="planner", reason="connection") == 2
    assert value(metrics, "atelier_retries_total", kind="llm", role="planner") == 1


def test_failure_reasons() -> None:
    assert [failure_reason(s) for s in (200, 301, 400, 404, 429, 500, 503)] == [
        None,
        None,
        "client_error",
        "client_error",
        "rate_limited",
        "server_error",
        "server_error",
    ]


def test_the_service_shows_client_retries_per_role_in_metrics(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    llm.responder = failing_first(Reply.error(429, "slow down", retry=True))
    settings = settings_for(tmp_path, llm.base_url, 2)

    with (
        LiveServer(settings, sample_assistants) as live,
        httpx.Client(base_url=live.url, timeout=30) as http,
    ):
        run = http.post(
            "/runs/wait",
            json={"assistant_id": "slow", "input": {"steps": 1, "delay": 0}},
        )
        text = http.get("/metrics").text

    assert run.status_code == 200 and "__error__" not in run.json(), run.text
    assert 'atelier_retries_total{kind="llm",role="writer_agent"} 1.0' in text
    assert 'atelier_llm_failures_total{reason="rate_limited",role="writer_agent"} 1.0' in text
