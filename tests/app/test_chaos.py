"""Chaos: a model that fails 30 % of its calls in every way; every run still ends.

The service runs in a child process (real uvicorn, real SQLite) serving the sample
`studio` graph; its LLM is the scripted OpenAI server in this process, which fails
three calls in ten, taking turns through every kind of fault an upstream model
shows: HTTP 500, HTTP 429, a hang past LLM_TIMEOUT, a 200 whose body is not JSON,
and a response or stream cut off mid-way. The client retries once (LLM_MAX_RETRIES).

Every run must end with `end` (after an `error` frame when it failed), its ids
gapless; none may hang; `/health` must answer throughout; and afterwards no run
is left pending or running.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.app.harness import ServerProcess, SseFrame, read_sse
from tests.app.many_runs import stream_all
from tests.app.sample_graphs import scripted_reply
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RUNS = 30
FAULT_RATE = 0.3
FAULTS = ("500", "429", "hang", "garbage", "cut")
LLM_TIMEOUT = 2.0
DEADLINE = 120  # seconds for all runs; a run makes at most 2 calls × 2 tries × 2 s


class ChaosModel:
    """The scripted replies of the sample graphs, with 30 % of calls failing."""

    def __init__(self, seed: int = 11) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.faults: Counter[str] = Counter()
        self.calls = 0

    def __call__(self, req: ChatRequest) -> Reply:
        reply = Reply.delay(0.05, scripted_reply(req))
        with self._lock:
            self.calls += 1
            if self._random.random() >= FAULT_RATE:
                return reply
            fault = FAULTS[sum(self.faults.values()) % len(FAULTS)]
            self.faults[fault] += 1
        if fault == "500":
            return Reply.error(500, "chaos: internal error")
        if fault == "429":
            return Reply.error(429, "chaos: rate limited", type="rate_limit_error")
        if fault == "hang":
            return Reply.delay(LLM_TIMEOUT * 3, reply)
        if fault == "garbage":
            return Reply.garbled()
        return Reply.cut(reply, after_bytes=60)


async def stream_run(client: httpx.AsyncClient, index: int) -> list[SseFrame]:
    body = {
        "assistant_id": "studio",
        "input": {"request": f"post {index}", "auto_confirm": True},
        "stream_mode": ["custom", "updates", "messages-tuple"],
    }
    async with client.stream("POST", "/runs/stream", json=body) as response:
        assert response.status_code == 200, await response.aread()
        text = "\n".join([line async for line in response.aiter_lines()])
    return read_sse(text + "\n\n")


def test_every_run_ends_while_the_model_fails_in_every_way(tmp_path: Path) -> None:
    model = ChaosModel()
    health: list[int | str] = []
    stop = threading.Event()

    def watch_health(url: str) -> None:
        with httpx.Client(base_url=url, timeout=5) as http:
            while not stop.is_set():
                try:
                    health.append(http.get("/health").status_code)
                except httpx.HTTPError as exc:
                    health.append(repr(exc))
                time.sleep(0.25)

    with ScriptedOpenAIServer(model) as llm:
        server = ServerProcess(
            tmp_path,
            llm.base_url,
            env={
                "LLM_TIMEOUT": str(LLM_TIMEOUT),
                "LLM_MAX_RETRIES": "1",
                "SSE_HEARTBEAT_INTERVAL": "1",
            },
        )
        try:
            server.start()
            watcher = threading.Thread(target=watch_health, args=(server.url,), daemon=True)
            watcher.start()
            started = time.monotonic()
            results = asyncio.run(stream_all(server.url, RUNS, DEADLINE, stream_run))
            elapsed = time.monotonic() - started
            stop.set()
            watcher.join(timeout=10)
        finally:
            stop.set()
            server.stop()

    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"{len(failures)} of {RUNS} streams did not end: {failures[:3]!r}"
    statuses: Counter[str] = Counter()
    for frames in results:
        assert isinstance(frames, list)
        events = [f.event for f in frames]
        assert [f.id for f in frames] == list(range(1, len(frames) + 1)), events
        assert events[0] == "metadata" and events[-1] == "end" and events.count("end") == 1
        status = frames[-1].data["status"]
        statuses[status] += 1
        if status == "error":  # a failed run says why, without internals
            assert events[-2] == "error", events
            assert "Traceback" not in str(frames[-2].data)
        else:
            assert status == "success", frames[-1]
    assert statuses["error"] > 0 and statuses["success"] > 0, statuses  # the faults bit
    assert set(model.faults) == set(FAULTS), model.faults  # every kind happened
    assert health and all(code == 200 for code in health), Counter(map(str, health))
    assert elapsed < DEADLINE
    with sqlite3.connect(tmp_path / "atelier.db") as db:
        left = db.execute("SELECT count(*) FROM runs WHERE status IN ('pending', 'running')")
        assert left.fetchone()[0] == 0
