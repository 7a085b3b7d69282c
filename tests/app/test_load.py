"""Load: 100 streamed runs started at once through the real server all end, gapless.

The service runs in a child process (`python -m tests.app.serve`, real uvicorn,
real SQLite) serving the sample `studio` graph (two LLM calls per run); the LLM is
the scripted OpenAI server in this process, answering after 0.2 s so the runs
overlap. 100 clients start at the same moment, as the official SDK does: create a
thread (`POST /threads`), then stream a run on it (`POST /threads/{id}/runs/stream`),
and read their streams to the end.

Regression: with reads and writes on one SQLite connection, the event log's first
commit of some runs failed with "database is locked" (15 of 100 under this load,
measured); those runs never started, never ended, and their streams heartbeated
forever, so here they would hit the deadline.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.app.harness import ServerProcess, SseFrame, read_sse, wait_until
from tests.app.many_runs import stream_all
from tests.app.sample_graphs import scripted_reply
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUNS = 100
DEADLINE = 90  # seconds for all of them; a healthy run takes well under 10


def slow_reply(req: ChatRequest) -> Reply:
    return Reply.delay(0.2, scripted_reply(req))


async def stream_run(client: httpx.AsyncClient, index: int) -> list[SseFrame]:
    body = {
        "assistant_id": "studio",
        "input": {"request": f"post number {index}", "auto_confirm": True},
        "stream_mode": ["custom", "updates"],
    }
    created = await client.post("/threads", json={})
    assert created.status_code == 200, created.text
    path = f"/threads/{created.json()['thread_id']}/runs/stream"
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        text = "\n".join([line async for line in response.aiter_lines()])
    return read_sse(text + "\n\n")


def active_runs_gauge(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(r"^atelier_active_runs (\S+)$", text, re.M)
    assert match, "atelier_active_runs is not exported"
    return float(match.group(1))


def test_a_hundred_streamed_runs_at_once_all_end_gapless(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(slow_reply) as llm:
        server = ServerProcess(tmp_path, llm.base_url, env={"SSE_HEARTBEAT_INTERVAL": "2"})
        try:
            server.start()
            results = asyncio.run(stream_all(server.url, RUNS, DEADLINE, stream_run))
            failures = [r for r in results if isinstance(r, BaseException)]
            assert not failures, f"{len(failures)} of {RUNS} streams failed: {failures[:3]!r}"
            streams = [r for r in results if not isinstance(r, BaseException)]
            for frames in streams:
                events = [f.event for f in frames]
                assert [f.id for f in frames] == list(range(1, len(frames) + 1)), events
                assert events[0] == "metadata" and events[-1] == "end", events
                assert events.count("end") == 1
                assert frames[-1].data["status"] == "success", frames[-2:]
            wait_until(lambda: active_runs_gauge(server.url) == 0, timeout=10)
        finally:
            server.stop()
    with sqlite3.connect(tmp_path / "atelier.db") as db:
        statuses = dict(db.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall())
    assert statuses == {"success": RUNS}
