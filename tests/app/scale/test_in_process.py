"""`atelier serve` on PostgreSQL + Redis in one process: the API and a worker together.

The app runs on a real uvicorn (tests/app/harness.py `LiveServer`) with the sample
graphs and the scripted LLM; runs go through the queue (pending → claimed by the
in-process worker → executed under a lease) and stream over SSE as in the embedded mode.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.harness import LiveServer, read_sse, service_settings, wait_until
from tests.app.sample_graphs import sample_assistants, scripted_reply, slow_run
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import RedisServer


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture
def server(
    tmp_path: Path, llm: ScriptedOpenAIServer, migrated_postgres_url: str, redis_server: RedisServer
) -> Iterator[LiveServer]:
    settings = service_settings(
        tmp_path,
        llm.base_url,
        database_url=migrated_postgres_url,
        redis_url=redis_server.url,
        sse_heartbeat_interval=0.5,
    )
    with LiveServer(settings, sample_assistants) as live:
        yield live


def test_a_run_streams_to_its_end_through_the_queue(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        response = http.post("/runs/stream", json=slow_run(3))
        assert response.status_code == 200
        frames = read_sse(response.text)
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        assert frames[0].event == "metadata" and frames[0].data["attempt"] == 1
        assert [f.event for f in frames].count("end") == 1 and frames[-1].event == "end"
        assert frames[-1].data["status"] == "success"
        run_id = frames[0].data["run_id"]
        thread_id = frames[0].data["thread_id"]
        run = http.get(f"/threads/{thread_id}/runs/{run_id}").json()
        assert run["status"] == "success" and run["attempt"] == 1
        # A rejoin replays the same stream from PostgreSQL.
        again = read_sse(http.get(f"/threads/{thread_id}/runs/{run_id}/stream").text)
        assert [(f.id, f.event) for f in again] == [(f.id, f.event) for f in frames]
        ready = http.get("/ready").json()
        assert ready["ready"] and {"postgres", "redis", "runs"} <= set(ready["checks"])
        metrics = http.get("/metrics").text
        assert "atelier_queue_depth 0.0" in metrics
        assert "atelier_claim_duration_seconds_count 1.0" in metrics


def test_enqueued_runs_of_a_thread_run_one_after_another(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        runs = [
            http.post(
                f"/threads/{thread_id}/runs",
                json={**slow_run(2), "multitask_strategy": "enqueue"},
            ).json()
            for _ in range(3)
        ]
        for run in runs:
            joined = http.get(f"/threads/{thread_id}/runs/{run['run_id']}/join")
            assert joined.status_code == 200
        records = [http.get(f"/threads/{thread_id}/runs/{r['run_id']}").json() for r in runs]
        assert [r["status"] for r in records] == ["success"] * 3
        started = [r["updated_at"] for r in records]
        assert started == sorted(started)


def test_a_cancel_interrupts_a_run_executing_in_the_worker(
    server: LiveServer, llm: ScriptedOpenAIServer
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        run = http.post("/runs", json=slow_run(20, delay=0.3)).json()
        path = f"/threads/{run['thread_id']}/runs/{run['run_id']}"
        wait_until(lambda: http.get(path).json()["status"] == "running", timeout=15)
        cancelled = http.post(f"{path}/cancel?wait=true&action=interrupt")
        assert cancelled.status_code in (200, 202, 204)
        record = http.get(path).json()
        assert record["status"] == "interrupted"
        frames = read_sse(http.get(f"{path}/stream").text)
        assert frames[-1].event == "end" and frames[-1].data["status"] == "interrupted"
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        calls = len(llm.requests)
        time.sleep(1.0)
        assert len(llm.requests) == calls  # no LLM call after the cancel
        assert record["run_id"] == run["run_id"]


def test_a_run_cancelled_while_pending_ends_when_a_worker_claims_it(server: LiveServer) -> None:
    """The worker claims it with the cancel recorded and cancels it in the same step."""
    with httpx.Client(base_url=server.url, timeout=30) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        runs = f"/threads/{thread_id}/runs"
        first = http.post(runs, json=slow_run(4, delay=0.3)).json()
        wait_until(lambda: http.get(f"{runs}/{first['run_id']}").json()["status"] == "running")
        queued = http.post(runs, json={**slow_run(2), "multitask_strategy": "enqueue"}).json()
        path = f"{runs}/{queued['run_id']}"
        assert http.get(path).json()["status"] == "pending"
        assert http.post(f"{path}/cancel", params={"action": "interrupt"}).status_code in (
            200,
            202,
            204,
        )
        wait_until(lambda: http.get(path).json()["status"] == "interrupted", timeout=15)
        frames = read_sse(http.get(f"{path}/stream").text)
        assert frames[-1].event == "end" and frames[-1].data["status"] == "interrupted"
        assert http.get(f"{runs}/{first['run_id']}").json()["status"] == "success"
        after = http.post(f"{runs}/wait", json=slow_run(1))  # the thread takes runs again
        assert after.status_code == 200 and len(after.json()["done"]) == 5  # 4 + 0 + 1 steps
