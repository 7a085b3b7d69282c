"""Two API replicas and two workers on loopback: streams, crashes, stalls, outages, cancels.

Real processes (`tests/app/scale/cluster.py`) against a throwaway PostgreSQL and
Redis, with the scripted LLM answering the `slow` sample graph's steps after a
delay. Every test ends by checking the database: at most one running run per
thread, each run's event ids 1..n, exactly one `end` per finished run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.harness import SseFrame, parse_sse, read_sse, wait_until
from tests.app.sample_graphs import scripted_reply, slow_run
from tests.app.scale.cluster import LEASE_SECONDS, Cluster
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer

pytestmark = pytest.mark.slow

#: Seconds within which a dead worker's run is resumed elsewhere: the lease, a sweep
#: (a third of the lease), a claim poll, and slack for a shared 2-core machine.
RESUME_WITHIN = LEASE_SECONDS * 2 + 15


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: PostgresCluster,
    redis_server: RedisServer,
    llm: ScriptedOpenAIServer,
) -> Iterator[Cluster]:
    url = postgres_cluster.create_database()
    deployment = Cluster(
        tmp_path_factory.mktemp("cluster"),
        database_url=url,
        redis_url=redis_server.url,
        llm_base_url=llm.base_url,
    )
    try:
        yield deployment.start()
    finally:
        deployment.stop()
        postgres_cluster.drop_database(url)


@pytest.fixture(autouse=True)
def invariants(cluster: Cluster) -> Iterator[None]:
    cluster.ensure_running()
    yield
    cluster.check_invariants()


def _follow(
    url: str, path: str, *, last_id: int | None = None, stop_after: int | None = None
) -> list[SseFrame]:
    """Follow a run's stream on a replica until its end (or `stop_after` frames)."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    frames: list[SseFrame] = []
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(60, read=60)) as http,
        http.stream("GET", f"{path}/stream", headers=headers) as stream,
    ):
        for item in parse_sse(stream.iter_lines()):
            if not isinstance(item, SseFrame):
                continue
            frames.append(item)
            if item.event == "end" or (stop_after is not None and len(frames) >= stop_after):
                break
    return frames


def _start(cluster: Cluster, body: dict[str, Any], replica: int = 0) -> tuple[str, str]:
    run = httpx.post(f"{cluster.apis[replica].url}/runs", json=body, timeout=30).json()
    return run["run_id"], f"/threads/{run['thread_id']}/runs/{run['run_id']}"


def _status(cluster: Cluster, path: str) -> str:
    return str(httpx.get(f"{cluster.apis[1].url}{path}", timeout=30).json()["status"])


def test_a_run_created_on_one_replica_streams_on_the_other(cluster: Cluster) -> None:
    run_id, path = _start(cluster, slow_run(3, 0.2), replica=0)
    frames = _follow(cluster.apis[1].url, path)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    assert cluster.attempts(run_id) == [1]


def test_a_killed_workers_run_is_resumed_and_a_rejoin_misses_nothing(cluster: Cluster) -> None:
    run_id, path = _start(cluster, slow_run(12, 0.5))
    first = _follow(cluster.apis[0].url, path, stop_after=4)  # the client sees a few frames
    worker = wait_until(lambda: cluster.executing(run_id), timeout=30)
    worker.kill()
    killed_at = time.monotonic()
    last = first[-1].id
    assert last is not None
    rest = _follow(cluster.apis[1].url, path, last_id=last)  # rejoins on the other replica
    ids = [f.id for f in first] + [f.id for f in rest]
    assert ids == list(range(1, len(ids) + 1))  # every frame once, strictly increasing
    assert [f.event for f in first + rest].count("end") == 1 and rest[-1].event == "end"
    assert rest[-1].data["status"] == "success"
    assert cluster.attempts(run_id) == [1, 2]
    assert any(f.event == "metadata" and f.data["attempt"] == 2 for f in rest)
    assert time.monotonic() - killed_at < RESUME_WITHIN + 12 * 0.5


def test_a_stalled_worker_past_its_lease_writes_nothing_after_it_wakes(cluster: Cluster) -> None:
    run_id, path = _start(cluster, slow_run(12, 0.5))
    stale = wait_until(lambda: cluster.executing(run_id), timeout=30)
    wait_until(
        lambda: (
            cluster.query("SELECT count(*) FROM run_events WHERE run_id = %s", (run_id,))[0][0] >= 3
        ),
        timeout=30,
    )
    stale.signal(signal.SIGSTOP)
    other = wait_until(
        lambda: (w := cluster.executing(run_id)) is not None and w is not stale and w,
        timeout=RESUME_WITHIN,
    )
    assert other is not stale
    stale.signal(signal.SIGCONT)
    frames = _follow(cluster.apis[1].url, path)
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    wait_until(lambda: "lost the lease of run" in stale.log_tail(20000), timeout=15)
    assert cluster.attempts(run_id) == [1, 2]
    rows = cluster.query("SELECT status, attempt FROM runs WHERE run_id = %s", (run_id,))
    assert rows == [("success", 2)]


def test_a_redis_restart_mid_stream_loses_no_frame(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    run_id, path = _start(cluster, slow_run(10, 0.3))
    first = _follow(cluster.apis[1].url, path, stop_after=3)
    last = first[-1].id
    redis_server.restart(down_for=1.0)
    rest = _follow(cluster.apis[1].url, path, last_id=last)
    frames = first + rest
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    assert cluster.attempts(run_id) == [1]


def test_a_redis_restart_under_a_live_stream_loses_no_frame(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    _run_id, path = _start(cluster, slow_run(10, 0.3))
    frames: list[SseFrame] = []
    restarted = False
    with (
        httpx.Client(base_url=cluster.apis[1].url, timeout=60) as http,
        http.stream("GET", f"{path}/stream") as stream,
    ):
        for item in parse_sse(stream.iter_lines()):
            if not isinstance(item, SseFrame):
                continue
            frames.append(item)
            if len(frames) == 3 and not restarted:
                redis_server.restart(down_for=1.0)
                restarted = True
            if item.event == "end":
                break
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"


def test_a_cancel_through_the_other_replica_stops_the_worker_at_once(
    cluster: Cluster, llm: ScriptedOpenAIServer
) -> None:
    run_id, path = _start(cluster, slow_run(30, 0.5), replica=0)
    wait_until(lambda: cluster.executing(run_id), timeout=30)
    wait_until(lambda: _status(cluster, path) == "running", timeout=30)
    time.sleep(0.7)  # mid-way through an LLM call
    started = time.monotonic()
    response = httpx.post(
        f"{cluster.apis[1].url}{path}/cancel",
        params={"wait": "true", "action": "interrupt"},
        timeout=30,
    )
    stopped_in = time.monotonic() - started
    assert response.status_code in (200, 202, 204), response.text
    assert _status(cluster, path) == "interrupted"
    assert stopped_in < 1.5, f"the cancel took {stopped_in:.2f} s"
    calls = len(llm.requests)
    time.sleep(1.5)
    assert len(llm.requests) == calls  # no further LLM call
    frames = read_sse(httpx.get(f"{cluster.apis[0].url}{path}/stream", timeout=30).text)
    assert frames[-1].event == "end" and frames[-1].data["status"] == "interrupted"


def test_a_worker_stopped_gracefully_hands_its_run_back_at_once(cluster: Cluster) -> None:
    run_id, path = _start(cluster, slow_run(10, 0.5))
    worker = wait_until(lambda: cluster.executing(run_id), timeout=30)
    wait_until(lambda: len(cluster.attempts(run_id)) == 1, timeout=30)
    worker.stop()  # SIGTERM: stop claiming, stop the run at its checkpoint, hand it back
    assert "handed run" in worker.log_tail(20000)
    other = wait_until(lambda: cluster.executing(run_id), timeout=LEASE_SECONDS - 0.5)
    assert other is not worker  # claimed again before its lease could have expired
    frames = _follow(cluster.apis[1].url, path)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    assert cluster.attempts(run_id) == [1, 2]
