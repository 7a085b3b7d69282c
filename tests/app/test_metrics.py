"""Prometheus metrics: run, node, LLM, SSE and retry figures (app/metrics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest
from fastapi.testclient import TestClient
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from app.main import create_app
from app.metrics import AtelierMetrics, role_of
from core.settings import Settings
from tests.support.fake_models import FakeModels

METRIC_NAMES = (
    "atelier_runs_started_total",
    "atelier_runs_total",
    "atelier_active_runs",
    "atelier_run_duration_seconds",
    "atelier_node_duration_seconds",
    "atelier_llm_calls_total",
    "atelier_llm_tokens_total",
    "atelier_llm_call_duration_seconds",
    "atelier_llm_calls_without_usage_total",
    "atelier_sse_subscribers",
    "atelier_retries_total",
)


#: An endpoint nothing listens on: the app's lifespan then skips the embedded model,
#: and nothing in these tests calls an LLM.
NO_LLM = "http://127.0.0.1:9/v1"


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    """Return settings for an app with its data under tmp_path and no embedded model."""
    return Settings(data_dir=tmp_path / "data", llm_base_url=NO_LLM, **overrides)


def value(metrics: AtelierMetrics, name: str, **labels: str) -> float:
    sample = metrics.registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


class State(TypedDict):
    text: str


def _team(models: Any) -> Any:
    """A pipeline with a team subgraph, as the real ones nest: executor → writer/critic."""

    async def writer(state: State) -> State:
        reply = await models("writer_agent").ainvoke("写一篇笔记")
        return {"text": str(reply.content)}

    async def critic(state: State) -> State:
        await models("critic").ainvoke(state["text"])
        return state

    team = StateGraph(State)
    team.add_node("writer_agent", writer)
    team.add_node("critic", critic)
    team.add_edge(START, "writer_agent")
    team.add_edge("writer_agent", "critic")
    team.add_edge("critic", END)
    pipeline = StateGraph(State)
    pipeline.add_node("executor", team.compile())
    pipeline.add_edge(START, "executor")
    pipeline.add_edge("executor", END)
    return pipeline.compile()


async def test_the_callback_counts_llm_calls_by_role_and_times_every_node() -> None:
    metrics = AtelierMetrics()
    models = FakeModels({"writer_agent": "正文" * 10, "critic": "ok"})

    await _team(models).ainvoke({"text": ""}, config={"callbacks": [metrics.callback]})

    assert value(metrics, "atelier_llm_calls_total", role="writer_agent", outcome="ok") == 1
    assert value(metrics, "atelier_llm_calls_total", role="critic", outcome="ok") == 1
    assert value(metrics, "atelier_llm_call_duration_seconds_count", role="critic") == 1
    for node in ("executor", "writer_agent", "critic"):
        assert value(metrics, "atelier_node_duration_seconds_count", node=node) == 1, node
    assert value(metrics, "atelier_node_duration_seconds_count", node="__start__") == 0


async def test_tokens_come_from_usage_metadata_and_the_role_from_a_tag() -> None:
    metrics = AtelierMetrics()
    reply = AIMessage(
        content="hi", usage_metadata={"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
    )
    model = GenericFakeChatModel(messages=iter([reply]), tags=["role:planner", "nostream"])

    await model.ainvoke("hello", config={"callbacks": [metrics.callback]})

    assert value(metrics, "atelier_llm_tokens_total", role="planner", direction="input") == 11
    assert value(metrics, "atelier_llm_tokens_total", role="planner", direction="output") == 7


async def test_a_call_whose_answer_reports_no_usage_is_counted_as_such() -> None:
    metrics = AtelierMetrics()
    silent = GenericFakeChatModel(messages=iter([AIMessage(content="hi")]), tags=["role:critic"])
    metered = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    content="hi",
                    usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
                )
            ]
        ),
        tags=["role:critic"],
    )

    await silent.ainvoke("hello", config={"callbacks": [metrics.callback]})
    await metered.ainvoke("hello", config={"callbacks": [metrics.callback]})

    assert value(metrics, "atelier_llm_calls_without_usage_total", role="critic") == 1
    assert value(metrics, "atelier_llm_calls_total", role="critic", outcome="ok") == 2
    assert value(metrics, "atelier_llm_tokens_total", role="critic", direction="input") == 3


async def test_a_failed_call_counts_as_an_error() -> None:
    metrics = AtelierMetrics()
    models = FakeModels({"supervisor": []})  # an empty script: the first call fails

    with pytest.raises(AssertionError):
        await models("supervisor").ainvoke("route", config={"callbacks": [metrics.callback]})

    assert value(metrics, "atelier_llm_calls_total", role="supervisor", outcome="error") == 1
    assert value(metrics, "atelier_llm_calls_total", role="supervisor", outcome="ok") == 0


async def test_with_retry_attempts_of_a_model_count_as_llm_retries() -> None:
    metrics = AtelierMetrics()
    failures = [ConnectionError("transient"), ConnectionError("transient")]

    def flaky(messages: list[Any]) -> str:
        if failures:
            raise failures.pop()
        return "ok"

    model = FakeModels({"writer_agent": flaky})("writer_agent")
    retrying = model.with_retry(
        retry_if_exception_type=(ConnectionError,),
        stop_after_attempt=3,
        wait_exponential_jitter=False,
    )

    reply = await retrying.ainvoke("写", config={"callbacks": [metrics.callback]})

    assert reply.content == "ok"
    assert value(metrics, "atelier_retries_total", kind="llm", role="writer_agent") == 2
    assert value(metrics, "atelier_llm_calls_total", role="writer_agent", outcome="error") == 2
    assert value(metrics, "atelier_llm_calls_total", role="writer_agent", outcome="ok") == 1


async def test_a_model_inside_a_retried_chain_is_not_an_llm_retry() -> None:
    metrics = AtelierMetrics()
    model = FakeModels({"critic": "ok"})("critic")
    attempts: list[int] = []

    async def step(text: str) -> str:
        await model.ainvoke(text)
        attempts.append(1)
        if len(attempts) < 2:
            raise ConnectionError("the step failed after its call")
        return text

    chain = RunnableLambda(step).with_retry(
        retry_if_exception_type=(ConnectionError,),
        stop_after_attempt=2,
        wait_exponential_jitter=False,
    )
    await chain.ainvoke("x", config={"callbacks": [metrics.callback]})

    assert value(metrics, "atelier_retries_total", kind="llm", role="critic") == 0
    assert value(metrics, "atelier_llm_calls_total", role="critic", outcome="ok") == 2


def test_run_lifecycle_figures() -> None:
    metrics = AtelierMetrics()

    metrics.run_started()
    metrics.run_started()
    assert value(metrics, "atelier_active_runs") == 2
    metrics.run_finished("success", 12.5)
    metrics.run_finished("timeout", 600)

    assert value(metrics, "atelier_runs_started_total") == 2
    assert value(metrics, "atelier_active_runs") == 0
    assert value(metrics, "atelier_runs_total", status="success") == 1
    assert value(metrics, "atelier_runs_total", status="timeout") == 1
    assert value(metrics, "atelier_runs_total", status="error") == 0  # present from the start
    assert value(metrics, "atelier_run_duration_seconds_sum", status="success") == 12.5


def test_critic_verdicts_count_retries_and_replans() -> None:
    metrics = AtelierMetrics()
    verdict = {"type": "critic.verdict", "verdict": "needs_improvement", "passed": False}

    metrics.observe_event({**verdict, "next": "rag"})
    metrics.observe_event({**verdict, "next": "rag"})
    metrics.observe_event({**verdict, "next": "planner"})
    metrics.observe_event({**verdict, "next": "finalize"})
    metrics.observe_event({"type": "stage.completed", "stage": "critic", "duration_ms": 5})

    assert value(metrics, "atelier_retries_total", kind="critic", role="critic") == 2
    assert value(metrics, "atelier_retries_total", kind="replan", role="critic") == 1


def test_sse_subscribers_gauge_follows_streams() -> None:
    metrics = AtelierMetrics()

    metrics.sse_subscribed()
    with metrics.sse_subscription():
        assert value(metrics, "atelier_sse_subscribers") == 2
    metrics.sse_unsubscribed()

    assert value(metrics, "atelier_sse_subscribers") == 0


def test_label_values_stay_bounded() -> None:
    metrics = AtelierMetrics()

    metrics.run_finished("made-up-status", 1)
    metrics.retry("made-up-kind")

    assert value(metrics, "atelier_runs_total", status="other") == 1
    assert value(metrics, "atelier_retries_total", kind="other", role="unknown") == 1
    assert role_of({"role": "writer_agent"}, None) == "writer_agent"
    assert role_of(None, ["nostream", "role:critic"]) == "critic"
    assert role_of({"role": "attacker-chosen"}, None) == "other"
    assert role_of(None, None) == "unknown"


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    first = create_app(settings_for(tmp_path / "a"))
    second = create_app(settings_for(tmp_path / "b"))

    first.state.metrics.run_started()

    assert value(first.state.metrics, "atelier_runs_started_total") == 1
    assert value(second.state.metrics, "atelier_runs_started_total") == 0


def test_get_metrics_lists_every_metric(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path))) as client:
        client.app.state.metrics.run_started()  # type: ignore[attr-defined]
        client.app.state.metrics.run_finished("success", 3.0)  # type: ignore[attr-defined]
        client.app.state.metrics.node_finished("planner", 0.2)  # type: ignore[attr-defined]
        text = client.get("/metrics").text

    for name in METRIC_NAMES:
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    assert 'atelier_runs_total{status="success"} 1.0' in text
    assert 'atelier_node_duration_seconds_count{node="planner"} 1.0' in text
