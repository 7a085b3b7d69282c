"""With OTLP configured, an experiment's runs and judges are traced like any run, and an
online judge's verdict joins the judged run's trace as a feedback event.

Embedded, the real pipeline on the scripted model of tests/app/test_evaluation.py,
exporting to the loopback OTLP receiver (`tests.support.otlp`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.harness import LiveServer, service_settings, wait_until
from tests.app.test_evaluation import EvaluationModel
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEY = "evaluation-tracing-0123456789"
BRIEF = {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True, "fast_mode": True}


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, OtlpReceiver]]:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with (
        OtlpReceiver() as receiver,
        ScriptedOpenAIServer(EvaluationModel()) as llm,
        LiveServer(
            service_settings(
                tmp_path / "data",
                llm.base_url,
                auth_api_keys=[KEY],
                otel_exporter_otlp_endpoint=receiver.endpoint,
            ),
            None,
        ) as live,
        httpx.Client(base_url=live.url, timeout=120, headers={"X-Api-Key": KEY}) as http,
    ):
        yield http, receiver


def _run_spans(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {
        str(s.attributes["atelier.run_id"]): s for s in spans if "atelier.run_id" in s.attributes
    }


def test_an_experiments_runs_and_judges_are_traced_and_a_verdict_joins_its_runs_trace(
    traced: tuple[Any, OtlpReceiver],
) -> None:
    http, receiver = traced
    dataset = http.post("/datasets", json={"name": "traced"}).json()
    http.post(f"/datasets/{dataset['dataset_id']}/examples", json={"examples": [{"input": BRIEF}]})
    arms = [{"assistant_id": "atelier", "name": "a"}, {"assistant_id": "atelier", "name": "b"}]
    experiment = http.post(
        "/experiments", json={"dataset_id": dataset["dataset_id"], "arms": arms}
    ).json()
    experiment_id = experiment["experiment_id"]
    done = wait_until(
        lambda: (
            (e := http.get(f"/experiments/{experiment_id}").json())["status"] == "success" and e
        ),
        timeout=180,
        interval=0.5,
    )
    posts = done["results"][0]["posts"]
    (pair,) = done["results"][0]["pairs"]
    wanted = {p["run_id"]: "run atelier" for p in posts} | {pair["run_id"]: "run pairwise_judge"}
    spans = receiver.wait_for(lambda s: set(wanted) <= set(_run_spans(s)), timeout=60)
    found = _run_spans(spans)
    for run_id, name in wanted.items():
        assert found[run_id].name == name
        assert found[run_id].attributes["atelier.outcome"] == "success"

    # Online evaluation: the judge's verdict is an event on the judged run's trace.
    http.put("/assistants/atelier/evaluation", json={"sample_rate": 1.0})
    run = http.post("/runs/wait", json={"assistant_id": "atelier", "input": BRIEF})
    assert run.status_code == 200
    (thread,) = [
        t
        for t in http.post("/threads/search", json={"metadata": {"graph_id": "atelier"}}).json()
        if "experiment_id" not in t["metadata"]
    ]
    (live_run,) = http.get(f"/threads/{thread['thread_id']}/runs").json()
    deadline = time.monotonic() + 120
    while not [f for f in http.get(f"/runs/{live_run['run_id']}/feedback").json()]:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    spans = receiver.wait_for(lambda s: live_run["run_id"] in _run_spans(s), timeout=60)
    trace = _run_spans(spans)[live_run["run_id"]].trace_id

    def has_verdict(spans: list[ReceivedSpan]) -> bool:
        return any(s.trace_id == trace and s.name == "feedback judge" for s in spans)

    (verdict,) = [
        s
        for s in receiver.wait_for(has_verdict)
        if s.trace_id == trace and s.name == "feedback judge"
    ]
    ((event, attributes),) = verdict.events
    assert event == "feedback" and attributes["atelier.feedback.score"] == 0.9
