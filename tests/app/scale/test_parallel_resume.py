"""Agents started together resume correctly after their worker is killed mid-step (issue 28).

The real pipeline (`atelier serve --workers 0` and two `atelier worker` processes,
`Cluster(cli=True)`) on a throwaway PostgreSQL and Redis, with a scripted supervisor
that plans the normal path (`atelier_responder(plans=True)`): research, references and
layout start in one superstep. The research agent's first answer is held back, so the
worker is killed while references and layout have finished and research is still in
its call. The run resumes on the other worker: the two finished agents are not run
again (their writes were kept with the step), research is, and the stream a client
rejoins with `Last-Event-ID` is gapless with one `end`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import SseFrame, parse_sse, wait_until
from tests.app.scale.cluster import LEASE_SECONDS, Cluster
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: How long the research agent's first answer is held: the kill lands in it.
HOLD_S = 20.0


class HeldResearch:
    """The planning pipeline's answers; the first research call waits `HOLD_S`."""

    def __init__(self) -> None:
        self.inner = atelier_responder(images=2, plans=True)
        self.lock = threading.Lock()
        self.calls: list[str] = []

    def __call__(self, req: ChatRequest) -> Reply:
        role = req.forced_tool or ",".join(req.tools) or "writer"
        with self.lock:
            self.calls.append(role)
            first_research = "search_knowledge" in req.tools and self.count(role) == 1
        reply = self.inner(req)
        return Reply.delay(HOLD_S, reply) if first_research else reply

    def count(self, role: str) -> int:
        return sum(1 for call in self.calls if call == role)

    def count_forced(self, name: str) -> int:
        with self.lock:
            return self.count(name)


@pytest.fixture(scope="module")
def model() -> HeldResearch:
    return HeldResearch()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: PostgresCluster,
    redis_server: RedisServer,
    model: HeldResearch,
) -> Iterator[Cluster]:
    with ScriptedOpenAIServer(model) as llm:
        url = postgres_cluster.create_database()
        deployment = Cluster(
            tmp_path_factory.mktemp("parallel"),
            database_url=url,
            redis_url=redis_server.url,
            llm_base_url=llm.base_url,
            cli=True,
        )
        try:
            yield deployment.start()
        finally:
            deployment.stop()
            postgres_cluster.drop_database(url)


def _follow(url: str, path: str, *, last_id: int | None = None) -> list[SseFrame]:
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    frames: list[SseFrame] = []
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(120, read=120)) as http,
        http.stream("GET", f"{path}/stream", headers=headers) as stream,
    ):
        for item in parse_sse(stream.iter_lines()):
            if isinstance(item, SseFrame):
                frames.append(item)
                if item.event == "end":
                    break
    return frames


def _custom(frames: list[SseFrame], kind: str) -> list[dict[str, Any]]:
    return [f.data for f in frames if f.event.startswith("custom") and f.data["type"] == kind]


def test_a_worker_killed_mid_fan_out_resumes_without_lost_or_doubled_writes(
    cluster: Cluster, model: HeldResearch
) -> None:
    body = {
        "assistant_id": "atelier",
        "input": {
            "request": "写一篇小红书笔记：平价护肤，学生党友好",
            "auto_confirm": True,
            "fast_mode": True,
            "image_count": 2,
        },
        "stream_mode": ["custom", "updates"],
    }
    run = httpx.post(f"{cluster.apis[0].url}/runs", json=body, timeout=30).json()
    path = f"/threads/{run['thread_id']}/runs/{run['run_id']}"

    # References and layout answered; research is still in its held first call.
    wait_until(
        lambda: model.count_forced("ReferenceAnalysis") and model.count_forced("LayoutSpec"),
        timeout=120,
    )
    time.sleep(2.0)  # their writes reach the checkpointer with the step's other writes
    worker = wait_until(lambda: cluster.executing(run["run_id"]), timeout=30)
    seen = _follow_some(cluster.apis[0].url, path)
    worker.kill()

    rest = _follow(cluster.apis[1].url, path, last_id=seen[-1].id)
    frames = seen + rest
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))  # gapless, once each
    assert [f.event for f in frames].count("end") == 1
    assert rest[-1].data["status"] == "success"
    assert cluster.attempts(run["run_id"]) == [1, 2]

    # The finished agents' writes were kept: neither ran again; research did.
    assert model.count_forced("ReferenceAnalysis") == 1
    assert model.count_forced("LayoutSpec") == 1
    assert model.count_forced("CreativeBrief") == 1
    state = httpx.get(f"{cluster.apis[1].url}/threads/{run['thread_id']}/state", timeout=30)
    result = state.json()["values"]["result"]
    assert result["outcome"] == "completed"
    assert len(result["images"]) == 2
    routes = _custom(frames, "supervisor.route")
    planned = [r for r in routes if r["planned"]]
    assert [r["next_agent"] for r in planned] == [
        "research_evidence_agent",
        "image_planner_agent",
        "image_agent",
    ]
    cluster.check_invariants()


def _follow_some(url: str, path: str) -> list[SseFrame]:
    """Read the frames the run has written so far (it is held mid-step: no more come)."""
    frames: list[SseFrame] = []
    deadline = time.monotonic() + 4
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=2 + LEASE_SECONDS)) as http,
        http.stream("GET", f"{path}/stream", headers={"Last-Event-ID": "0"}) as stream,
    ):
        try:
            for item in parse_sse(stream.iter_lines()):
                if isinstance(item, SseFrame):
                    frames.append(item)
                if time.monotonic() > deadline:
                    break
        except httpx.ReadTimeout:
            pass
    assert frames, "no frame before the kill"
    return frames
