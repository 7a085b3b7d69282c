"""Crons in the processes deployment: two API replicas and two workers, each tick once.

The cron scheduler runs against the one PostgreSQL database (`engine/postgres/crons.py`)
in every process that has CRON_SCHEDULER on. Each test runs on two deployments: every
process scheduling (the default), and the workers alone (the API replicas set
CRON_SCHEDULER=off), where the logs show the workers fired every tick. The test makes
a tick due by moving the cron's `next_run_at` into the past in the database (the
schedulers' clocks are real), then checks that exactly one run was started for it,
whoever raced for it, and that the run is an ordinary one: executed by a worker, its
frames 1..n, resumed when its worker is killed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.app.harness import SseFrame, parse_sse, wait_until
from tests.app.sample_graphs import scripted_reply, slow_run
from tests.app.scale.cluster import LEASE_SECONDS, Child, Cluster
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer

pytestmark = pytest.mark.slow

#: Seconds of scheduler passes (one a second per replica) a test lets go by.
PASSES = 3.0
#: Seconds within which a dead worker's run is resumed elsewhere (see test_processes).
RESUME_WITHIN = LEASE_SECONDS * 2 + 15


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


#: Who runs the cron scheduler: every process, or the workers alone.
SCHEDULERS = ("everyone", "workers")
#: What the process that fired a tick logs (`engine.services.crons.CronsService._fire`).
FIRED = re.compile(r"cron (\S+): tick \S+ started run")


@pytest.fixture(scope="module", params=SCHEDULERS)
def cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: PostgresCluster,
    redis_server: RedisServer,
    llm: ScriptedOpenAIServer,
) -> Iterator[Cluster]:
    url = postgres_cluster.create_database()
    deployment = Cluster(
        tmp_path_factory.mktemp("crons"),
        database_url=url,
        redis_url=redis_server.url,
        llm_base_url=llm.base_url,
    )
    if request.param == "workers":
        for api in deployment.apis:
            api.env["CRON_SCHEDULER"] = "off"
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
    if all(api.env.get("CRON_SCHEDULER") == "off" for api in cluster.apis):
        assert not any(fired_by(api) for api in cluster.apis), "a replica fired a tick"
        assert any(fired_by(worker) for worker in cluster.workers), "no worker fired a tick"


def fired_by(child: Child) -> set[str]:
    """Return the crons whose ticks a process says it fired (its log)."""
    return set(FIRED.findall(child.log_path.read_text(errors="replace")))


def _create_cron(cluster: Cluster, steps: int, delay: float) -> str:
    body = slow_run(steps, delay)
    answer = httpx.post(
        f"{cluster.apis[0].url}/runs/crons",
        json={
            "assistant_id": body["assistant_id"],
            "input": body["input"],
            "schedule": "0 0 1 1 *",  # once a year: only the test makes it due
        },
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["cron_id"])


def _make_due(cluster: Cluster, cron_id: str) -> None:
    cluster.execute(
        f"UPDATE crons SET next_run_at = now() - interval '1 second' WHERE cron_id = '{cron_id}'"
    )


def _runs(cluster: Cluster, cron_id: str) -> list[tuple[str, str, str]]:
    """Return the cron's runs (run id, thread id, status), oldest first."""
    rows = cluster.query(
        "SELECT run_id, thread_id, status FROM runs WHERE metadata ->> 'cron_id' = %s ORDER BY seq",
        (cron_id,),
    )
    return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


def _frames(url: str, thread_id: str, run_id: str) -> list[SseFrame]:
    """Follow a run's stream from its first frame to its end."""
    frames: list[SseFrame] = []
    path = f"/threads/{thread_id}/runs/{run_id}/stream"
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(60, read=60)) as http,
        http.stream("GET", path) as stream,
    ):
        for item in parse_sse(stream.iter_lines()):
            if isinstance(item, SseFrame):
                frames.append(item)
                if item.event == "end":
                    break
    return frames


def _fire_once(cluster: Cluster, cron_id: str, expected: int) -> tuple[str, str, str]:
    """Make the cron's tick due; wait for its run, and check no other one follows."""
    _make_due(cluster, cron_id)
    wait_until(lambda: len(_runs(cluster, cron_id)) >= expected, timeout=30)
    time.sleep(PASSES)
    runs = _runs(cluster, cron_id)
    assert len(runs) == expected, runs
    (due,) = cluster.query("SELECT next_run_at > now() FROM crons WHERE cron_id = %s", (cron_id,))
    assert due == (True,)
    return runs[-1]


def test_over_three_ticks_the_replicas_start_exactly_three_runs(cluster: Cluster) -> None:
    cron_id = _create_cron(cluster, 3, 0.1)
    for tick in (1, 2, 3):
        run_id, thread_id, _status = _fire_once(cluster, cron_id, tick)
        frames = _frames(cluster.apis[tick % 2].url, thread_id, run_id)
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        assert frames[0].event == "metadata" and frames[-1].event == "end"
        assert frames[-1].data["status"] == "success"
    assert len({thread for _r, thread, _s in _runs(cluster, cron_id)}) == 3  # a thread each
    httpx.delete(f"{cluster.apis[1].url}/runs/crons/{cron_id}", timeout=30).raise_for_status()
    assert cluster.query("SELECT count(*) FROM crons") == [(0,)]


def test_a_worker_killed_during_a_tick_leaves_exactly_one_run_for_it(cluster: Cluster) -> None:
    cron_id = _create_cron(cluster, 12, 0.5)
    run_id, thread_id, _status = _fire_once(cluster, cron_id, 1)
    worker = wait_until(lambda: cluster.executing(run_id), timeout=30)
    worker.kill()
    frames = _frames(cluster.apis[1].url, thread_id, run_id)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end" and frames[-1].data["status"] == "success"
    assert cluster.attempts(run_id) == [1, 2]
    assert [r[0] for r in _runs(cluster, cron_id)] == [run_id]
    httpx.delete(f"{cluster.apis[0].url}/runs/crons/{cron_id}", timeout=30).raise_for_status()


def test_a_replica_killed_as_a_tick_falls_due_leaves_exactly_one_run(cluster: Cluster) -> None:
    cron_id = _create_cron(cluster, 2, 0.1)
    _make_due(cluster, cron_id)
    cluster.apis[0].kill()  # firing it, or about to: either it committed, or the other fires
    wait_until(lambda: _runs(cluster, cron_id) or None, timeout=30)
    time.sleep(PASSES)
    (run,) = _runs(cluster, cron_id)
    wait_until(lambda: _runs(cluster, cron_id)[0][2] not in ("pending", "running"), timeout=60)
    assert _runs(cluster, cron_id)[0][0] == run[0]
    httpx.delete(f"{cluster.apis[1].url}/runs/crons/{cron_id}", timeout=30).raise_for_status()


def test_a_worker_killed_as_a_tick_falls_due_leaves_exactly_one_run(cluster: Cluster) -> None:
    cron_id = _create_cron(cluster, 2, 0.1)
    _make_due(cluster, cron_id)
    cluster.workers[0].kill()  # firing it, or about to: either it committed, or another fires
    wait_until(lambda: _runs(cluster, cron_id) or None, timeout=30)
    time.sleep(PASSES)
    (run,) = _runs(cluster, cron_id)
    wait_until(lambda: _runs(cluster, cron_id)[0][2] not in ("pending", "running"), timeout=60)
    assert _runs(cluster, cron_id) == [(run[0], run[1], "success")]
    httpx.delete(f"{cluster.apis[0].url}/runs/crons/{cron_id}", timeout=30).raise_for_status()
