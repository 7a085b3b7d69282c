"""Acceptance of evaluations (issue 34) with the real pipeline, on the three deployments.

A real service (embedded; PostgreSQL + Redis in one process; `atelier serve` replicas
behind nginx with `atelier worker`s) runs the real `atelier` pipeline and the judges
against the scripted OpenAI server (`EvaluationModel`): the writer writes a post with
the marker 青禾, unless its prompt asks for 玻尿酸精华 (arm B's preset must include it),
when it writes the same post without the marker — and never the term. The pairwise
judge is switched per test: always position 1 (position bias) or the post with 青禾
(content); the post judge scores 0.9 a post with 氨基酸. The official SDK's HTTP client
(`langgraph_sdk` `client.http`) drives the routes.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.harness import (
    DEPLOYMENTS,
    Served,
    SseFrame,
    parse_sse,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.support.fake_models import HAPPY_BODY, HAPPY_TITLE
from tests.support.judges import (
    Judge,
    content_judge,
    position_biased_judge,
    scoring_judge,
    wire,
)
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "evaluation-key-0123456789"
OTHER_KEY = "evaluation-other-0123456789"
#: What arm B's preset must include, and what arm A's posts have and B's lack.
TERM, MARKER = "玻尿酸精华", "青禾"
PRICES = {"scripted": {"input": 1.0, "output": 2.0}}
BRIEFS = [
    "写一篇小红书笔记：平价护肤，学生党友好",
    "写一篇小红书笔记：早八通勤的护肤步骤",
    "写一篇小红书笔记：军训期间怎么防晒",
    "写一篇小红书笔记：宿舍里的简单护肤",
]


def _post(marked: bool) -> str:
    body = HAPPY_BODY + (f"\n\n{MARKER}的小建议：先把基础做好。" if marked else "")
    return f"# {HAPPY_TITLE}\n\n{body}\n\n#平价护肤 #学生党"


class EvaluationModel:
    """The scripted model of these tests (see the module docstring); thread-safe counts."""

    def __init__(self) -> None:
        self.pipeline = atelier_responder()
        self.pairwise: Judge = position_biased_judge("1")
        self.post = wire(scoring_judge("氨基酸"))
        self.hold = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()
        self.forced: list[str] = []
        #: The model each writer request named, with whether it was asked for TERM.
        self.writers: list[tuple[str, bool]] = []

    def count(self, tool: str) -> int:
        with self.lock:
            return self.forced.count(tool)

    def reset(self) -> None:
        with self.lock:
            self.forced.clear()
            self.writers.clear()
        self.pairwise = position_biased_judge("1")
        self.hold.set()

    def __call__(self, req: ChatRequest) -> Reply | Awaitable[Reply]:
        with self.lock:
            self.forced.append(req.forced_tool or ("writer" if not req.tools else "tools"))
        if req.forced_tool == "PairwiseVerdict":
            return wire(self.pairwise)(req)
        if req.forced_tool == "PostScore":
            return self.post(req)
        if not req.tools:
            with self.lock:
                self.writers.append((req.model, TERM in req.all_text))
            return self.write(req)
        return self.pipeline(req)

    async def write(self, req: ChatRequest) -> Reply:
        """Answer as the writer, once the test lets writers answer (on the server's loop)."""
        await asyncio.to_thread(self.hold.wait, 60)
        return Reply.text(_post(marked=TERM not in req.all_text), chunk_chars=16)


@pytest.fixture(scope="module")
def model() -> EvaluationModel:
    return EvaluationModel()


@pytest.fixture(scope="module")
def scripted_llm(model: EvaluationModel) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(model) as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    env = {
        "AUTH_API_KEYS": f"{KEY},{OTHER_KEY}",
        "LLM_TIMEOUT": "30",
        "LLM_PRICES": json.dumps(PRICES),
        "SSE_HEARTBEAT_INTERVAL": "1",
    }
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    scripted_llm: ScriptedOpenAIServer,
    model: EvaluationModel,
) -> Iterator[Served]:
    model.reset()

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            scripted_llm.base_url,
            auth_api_keys=[KEY, OTHER_KEY],
            llm_prices=PRICES,
            sse_heartbeat_interval=1,
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served
    model.reset()


@pytest.fixture
def http(server: Served) -> Any:
    """The official SDK's HTTP client for the service's non-Platform routes."""
    return get_client(url=server.url, api_key=KEY).http


@pytest.fixture
def other(server: Served) -> Any:
    return get_client(url=server.url, api_key=OTHER_KEY).http


async def _dataset(http: Any, briefs: list[str] = BRIEFS) -> str:
    dataset = await http.post("/datasets", json={"name": "护肤简报"})
    examples = [
        {"input": {"request": brief, "auto_confirm": True, "fast_mode": True}} for brief in briefs
    ]
    added = await http.post(
        f"/datasets/{dataset['dataset_id']}/examples", json={"examples": examples}
    )
    assert [e["position"] for e in added] == list(range(len(briefs)))
    return str(dataset["dataset_id"])


async def _arms(http: Any) -> list[dict[str, Any]]:
    """Arm A: a preset; arm B: its next version, which must include TERM."""
    preset = await http.post(
        "/assistants",
        json={"graph_id": "atelier", "name": "青禾护肤", "context": {"brand_name": "青禾"}},
    )
    await http.patch(
        f"/assistants/{preset['assistant_id']}",
        json={"context": {"brand_name": "青禾", "must_include": [TERM]}},
    )
    return [
        {"name": "A", "assistant_id": preset["assistant_id"], "version": 1},
        {"name": "B", "assistant_id": preset["assistant_id"], "version": 2},
    ]


async def _finished(http: Any, experiment_id: str, within: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        experiment = await http.get(f"/experiments/{experiment_id}", params={"limit": 10})
        if experiment["status"] not in ("pending", "running"):
            return experiment
        assert time.monotonic() < deadline, f"the experiment did not end: {experiment['progress']}"
        await asyncio.sleep(0.5)


def _arm(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(arm for arm in summary["arms"] if arm["name"] == name)


def _frames(url: str, path: str, last_id: int | None = None) -> list[SseFrame]:
    headers = {"X-Api-Key": KEY, **({"Last-Event-ID": str(last_id)} if last_id else {})}
    frames: list[SseFrame] = []
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(60)) as client,
        client.stream("GET", path, headers=headers) as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        for item in parse_sse(stream.iter_lines()):
            if isinstance(item, SseFrame):
                frames.append(item)
    return frames


def _heartbeats(url: str, experiment_id: str, seconds: float = 3.5) -> list[str]:
    """Read an experiment's stream for a few seconds: its frames' events and its comments."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=2)) as client,
        client.stream(
            "GET", f"/experiments/{experiment_id}/stream", headers={"X-Api-Key": KEY}
        ) as stream,
    ):
        try:
            for item in parse_sse(stream.iter_lines()):
                seen.append(item.event if isinstance(item, SseFrame) else item)
                if time.monotonic() > deadline:
                    break
        except httpx.ReadTimeout:
            pass
    return seen


async def test_a_position_biased_judge_ties_every_pair_and_the_code_checks_tell_the_arms_apart(
    server: Served, http: Any, other: Any, model: EvaluationModel
) -> None:
    dataset_id = await _dataset(http)
    experiment = await http.post(
        "/experiments",
        json={"dataset_id": dataset_id, "arms": await _arms(http), "max_concurrency": 8},
    )
    assert experiment["status"] == "pending"
    assert experiment["progress"] == {
        "examples": 4,
        "runs_total": 8,
        "runs_done": 0,
        "pairs_total": 4,
        "pairs_done": 0,
    }
    done = await _finished(http, experiment["experiment_id"])
    assert done["status"] == "success", done["error"]
    a, b = _arm(done["summary"], "A"), _arm(done["summary"], "B")
    assert (a["pass_rate"], b["pass_rate"]) == (1.0, 0.0)
    assert (a["wins"], a["ties"], a["losses"]) == (0, 4, 0)
    assert (b["wins"], b["ties"], b["losses"]) == (0, 4, 0)
    assert a["win_rate"] == 0.5 and a["win_rate_low"] < 0.5 < a["win_rate_high"]
    assert done["summary"]["judge"]["agreed"] == 0
    assert model.count("PairwiseVerdict") == 8  # 4 pairs × 2 orders, each judged once

    # Side by side: each example's two posts and the judge's answers in both orders.
    first = done["results"][0]
    assert [p["arm"] for p in first["posts"]] == ["A", "B"]
    assert MARKER in json.dumps(first["posts"][0]["post"], ensure_ascii=False)
    assert "expectations.must_include" not in first["posts"][1]["failing"]
    assert "must_include" in first["posts"][1]["failing"]
    (pair,) = first["pairs"]
    assert pair["winner"] == "tie" and [o["answer"] for o in pair["orders"]] == ["1", "1"]
    assert all(o["reasons"] for o in pair["orders"])

    # Ordinary runs, listed with the experiment's metadata; the cost is their usage's.
    threads = await http.post(
        "/threads/search",
        json={"metadata": {"experiment_id": experiment["experiment_id"]}, "limit": 100},
    )
    arm_threads = [t for t in threads if t["metadata"].get("experiment_arm")]
    judge_threads = [t for t in threads if t["metadata"].get("graph_id") == "pairwise_judge"]
    assert len(arm_threads) == 8 and len(judge_threads) == 4  # every pair judged once
    costs = {"A": 0.0, "B": 0.0}
    for thread in arm_threads:
        (run,) = await http.get(f"/threads/{thread['thread_id']}/runs")
        assert run["status"] == "success"
        assert run["metadata"]["experiment_id"] == experiment["experiment_id"]
        usage = thread["values"]["result"]["usage"]["total"]
        costs[thread["metadata"]["experiment_arm"]] += usage["cost"]["total"]
    assert a["cost"] == pytest.approx(costs["A"]) and a["cost"] > 0
    assert b["cost"] == pytest.approx(costs["B"])

    # The progress stream: metadata first, end last, ids 1..n; a cursor resumes after it.
    path = f"/experiments/{experiment['experiment_id']}/stream"
    frames = _frames(server.url, path)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[0].event == "metadata" and frames[-1].event == "end"
    assert frames[-1].data["status"] == "success"
    assert [f.event for f in frames].count("judgement") == 4
    assert frames[-2].event == "summary" and frames[-2].data["arms"][0]["name"] == "A"
    assert [f.id for f in _frames(server.url, path, last_id=frames[-3].id)] == [
        frames[-2].id,
        frames[-1].id,
    ]

    # Another key: 404, never listed.
    for route in (f"/experiments/{experiment['experiment_id']}", f"/datasets/{dataset_id}"):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await other.get(route)
        assert refused.value.response.status_code == 404
    assert await other.post("/experiments/search", json={}) == []
    assert await other.post("/datasets/search", json={}) == []
    (listed,) = await http.post("/experiments/search", json={"dataset_id": dataset_id})
    assert listed["status"] == "success"


async def test_a_judge_preferring_one_posts_content_wins_it_every_pair(
    http: Any, model: EvaluationModel
) -> None:
    model.pairwise = content_judge(MARKER)
    dataset_id = await _dataset(http)
    arms = await _arms(http)
    arms[1]["models"] = {"writer_agent": "scripted-mini"}  # B's writer: another model
    experiment = await http.post(
        "/experiments", json={"dataset_id": dataset_id, "arms": arms, "max_concurrency": 8}
    )
    assert experiment["arms"][1]["models"] == {"writer_agent": "scripted-mini"}
    done = await _finished(http, experiment["experiment_id"])
    assert done["status"] == "success", done["error"]
    assert sorted(set(model.writers)) == [("scripted", False), ("scripted-mini", True)]
    a, b = _arm(done["summary"], "A"), _arm(done["summary"], "B")
    assert (a["wins"], a["ties"], a["losses"]) == (4, 0, 0)
    assert (b["wins"], b["ties"], b["losses"]) == (0, 0, 4)
    assert a["win_rate"] == 1.0
    assert a["win_rate_low"] == pytest.approx(0.510, abs=1e-3)  # Wilson, 4 of 4
    assert a["win_rate_low"] > 0.5  # the interval excludes 50 %
    assert a["against"] == [
        {
            "arm": "B",
            "wins": 4,
            "ties": 0,
            "losses": 0,
            "win_rate": 1.0,
            "win_rate_low": a["win_rate_low"],
            "win_rate_high": 1.0,
        }
    ]
    assert done["summary"]["judge"]["agreed"] == 4
    pair = done["results"][0]["pairs"][0]
    assert pair["winner"] == "A" and pair["agreed"] is True
    assert [o["preferred"] for o in pair["orders"]] == ["a", "a"]


async def test_cancel_and_delete_stop_the_remaining_runs(
    server: Served, http: Any, model: EvaluationModel
) -> None:
    model.hold.clear()  # the writers wait: the first runs stay in flight
    dataset_id = await _dataset(http)
    arms = [{"assistant_id": "atelier", "name": "one"}, {"assistant_id": "atelier", "name": "two"}]
    body = {"dataset_id": dataset_id, "arms": arms, "max_concurrency": 2}
    cancelled = await http.post("/experiments", json=body)
    deleted = await http.post("/experiments", json=body)

    async def started(experiment_id: str) -> list[dict[str, Any]]:
        return list(
            await http.post("/threads/search", json={"metadata": {"experiment_id": experiment_id}})
        )

    for experiment in (cancelled, deleted):
        deadline = time.monotonic() + 60
        while len(await started(experiment["experiment_id"])) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.3)
    # While nothing happens (the writers wait), the stream sends heartbeats.
    heard = await asyncio.to_thread(_heartbeats, server.url, cancelled["experiment_id"])
    assert heard[0] == "metadata" and ": heartbeat" in heard
    ended = await http.post(f"/experiments/{cancelled['experiment_id']}/cancel", json=None)
    assert ended["status"] == "cancelled"
    await http.delete(f"/experiments/{deleted['experiment_id']}")
    model.hold.set()
    await asyncio.sleep(3)  # passes that would start more runs, if anything still did
    for experiment in (cancelled, deleted):
        threads = await started(experiment["experiment_id"])
        assert len(threads) == 2  # 2 of 8 started, none after
        for thread in threads:
            (run,) = await http.get(f"/threads/{thread['thread_id']}/runs")
            for _ in range(60):
                if run["status"] not in ("pending", "running"):
                    break
                await asyncio.sleep(0.5)
                (run,) = await http.get(f"/threads/{thread['thread_id']}/runs")
            assert run["status"] == "interrupted"  # cancelled
    stopped = await http.get(f"/experiments/{cancelled['experiment_id']}")
    assert stopped["status"] == "cancelled"
    assert {p["status"] for r in stopped["results"] for p in r["posts"]} == {"cancelled"}
    frames = _frames(server.url, f"/experiments/{cancelled['experiment_id']}/stream")
    assert frames[-1].event == "end" and frames[-1].data == {"status": "cancelled"}
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await http.get(f"/experiments/{deleted['experiment_id']}")
    assert gone.value.response.status_code == 404


async def test_online_evaluation_judges_every_sampled_run_once_and_reports_agreement(
    http: Any, other: Any, model: EvaluationModel
) -> None:
    setting = await http.put("/assistants/atelier/evaluation", json={"sample_rate": 1.0})
    assert setting["sample_rate"] == 1.0 and setting["since"]
    assert (await other.get("/assistants/atelier/evaluation"))["sample_rate"] == 0.0
    runs = []
    for brief in BRIEFS[:4]:
        runs.append(
            await http.post(
                "/runs/wait",
                json={
                    "assistant_id": "atelier",
                    "input": {"request": brief, "auto_confirm": True, "fast_mode": True},
                },
            )
        )
    threads = await http.post(
        "/threads/search", json={"metadata": {"graph_id": "atelier"}, "limit": 100}
    )
    run_ids = []
    for thread in threads:
        (run,) = await http.get(f"/threads/{thread['thread_id']}/runs")
        run_ids.append(run["run_id"])
    assert len(run_ids) == 4

    async def judged() -> dict[str, list[dict[str, Any]]]:
        entries = {r: await http.get(f"/runs/{r}/feedback") for r in run_ids}
        return {r: [e for e in found if e["key"] == "judge"] for r, found in entries.items()}

    deadline = time.monotonic() + 120
    while not all((await judged()).values()):
        assert time.monotonic() < deadline, "not every run was judged"
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)  # more passes: nothing is judged twice
    verdicts = await judged()
    assert all(len(v) == 1 for v in verdicts.values())
    assert {v[0]["score"] for v in verdicts.values()} == {0.9}
    assert model.count("PostScore") == 4

    # People's thumbs on three of the four: two up, one down; the judge passed all four.
    for run_id, thumb in zip(run_ids[:3], (1, 1, 0), strict=True):
        await http.post(f"/runs/{run_id}/feedback", json={"key": "quality", "score": thumb})
    report = await http.get("/assistants/atelier/evaluation")
    assert report["judge"]["judged"] == 4 and report["judge"]["mean_score"] == pytest.approx(0.9)
    assert report["people"]["rated"] == 3 and report["people"]["thumbs_up"] == 2
    agreement = report["agreement"]
    assert (agreement["matches"], agreement["n"]) == (2, 3)
    assert agreement["rate"] == pytest.approx(2 / 3)
    assert agreement["low"] < agreement["rate"] < agreement["high"]
    assert report["pending"] == 0
    empty = await http.get(
        "/assistants/atelier/evaluation", params={"until": "2000-01-01T00:00:00Z"}
    )
    assert empty["judge"]["judged"] == 0 and empty["agreement"]["n"] == 0
    assert (await other.get("/assistants/atelier/evaluation"))["judge"]["judged"] == 0
    await http.put("/assistants/atelier/evaluation", json={"sample_rate": 0})
