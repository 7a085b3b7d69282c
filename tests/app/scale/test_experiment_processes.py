"""An experiment survives a worker killed mid-run: it completes, every pair judged once.

The real pipeline (`atelier serve --workers 0` twice and two `atelier worker`s,
`Cluster(cli=True)`) on a throwaway PostgreSQL and Redis. Every process advances
experiments (`engine.services.experiments`). The writers' answers are held, so the
experiment's runs are all in flight when the worker executing one of them is killed;
its runs are resumed by the other worker, the experiment completes, and each pair of
posts was judged by exactly one judge run asking the judge twice (one call per order).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.app.harness import wait_until
from tests.app.scale.cluster import Child, Cluster
from tests.app.test_evaluation import BRIEFS, EvaluationModel
from tests.support.judges import content_judge
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def model() -> EvaluationModel:
    return EvaluationModel()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: PostgresCluster,
    redis_server: RedisServer,
    model: EvaluationModel,
) -> Iterator[Cluster]:
    with ScriptedOpenAIServer(model) as llm:
        url = postgres_cluster.create_database()
        deployment = Cluster(
            tmp_path_factory.mktemp("experiments"),
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


def _post(url: str, path: str, body: Any) -> Any:
    answer = httpx.post(f"{url}{path}", json=body, timeout=60)
    answer.raise_for_status()
    return answer.json()


def _experiment_runs(cluster: Cluster, experiment_id: str) -> list[tuple[Any, ...]]:
    return cluster.query(
        "SELECT run_id, status, metadata->>'evaluation' FROM runs "
        "WHERE metadata->>'experiment_id' = %s",
        (experiment_id,),
    )


def _worker_holding(cluster: Cluster, experiment_id: str) -> tuple[str, Child] | None:
    for run_id, status, _kind in _experiment_runs(cluster, experiment_id):
        worker = cluster.executing(run_id) if status == "running" else None
        if worker is not None:
            return run_id, worker
    return None


def test_a_worker_killed_mid_run_leaves_the_experiment_to_complete_each_pair_judged_once(
    cluster: Cluster, model: EvaluationModel
) -> None:
    model.pairwise = content_judge("青禾")
    model.hold.clear()
    url = cluster.apis[0].url
    dataset = _post(url, "/datasets", {"name": "kill"})
    examples = [
        {"input": {"request": brief, "auto_confirm": True, "fast_mode": True}} for brief in BRIEFS
    ]
    _post(url, f"/datasets/{dataset['dataset_id']}/examples", {"examples": examples})
    arms = [{"assistant_id": "atelier", "name": "one"}, {"assistant_id": "atelier", "name": "two"}]
    experiment = _post(
        url,
        "/experiments",
        {"dataset_id": dataset["dataset_id"], "arms": arms, "max_concurrency": 8},
    )
    experiment_id = experiment["experiment_id"]

    wait_until(lambda: len(_experiment_runs(cluster, experiment_id)) == 8, timeout=120)
    held = wait_until(lambda: _worker_holding(cluster, experiment_id), timeout=120)
    run_id, worker = held
    worker.kill()
    model.hold.set()

    def ended() -> dict[str, Any] | None:
        answer = httpx.get(f"{cluster.apis[1].url}/experiments/{experiment_id}", timeout=60)
        body = answer.json()
        return body if body["status"] not in ("pending", "running") else None

    done = wait_until(ended, timeout=300, interval=1)
    assert done["status"] == "success", done["error"]
    assert done["progress"]["runs_done"] == 8 and done["progress"]["pairs_done"] == 4
    assert cluster.attempts(run_id)[-1] >= 2  # the killed worker's run was resumed
    runs = _experiment_runs(cluster, experiment_id)
    judges = [r for r in runs if r[2] == "pairwise_judge"]
    assert len(runs) == 12 and len(judges) == 4  # one judge run per pair
    assert {r[1] for r in runs} == {"success"}
    assert model.count("PairwiseVerdict") == 8  # each pair asked once per order, never again
    verdicts = cluster.query(
        "SELECT count(*) FROM experiment_pairs WHERE experiment_id = %s AND status = 'done'",
        (experiment_id,),
    )
    assert verdicts == [(4,)]
    frames = cluster.query(
        "SELECT id, event FROM experiment_events WHERE experiment_id = %s ORDER BY id",
        (experiment_id,),
    )
    assert [f[0] for f in frames] == list(range(1, len(frames) + 1))
    assert [f[1] for f in frames].count("end") == 1 and frames[-1][1] == "end"
    summary = json.loads(
        cluster.query(
            "SELECT data FROM experiment_events WHERE experiment_id = %s AND event = 'summary'",
            (experiment_id,),
        )[0][0]
    )
    assert [arm["runs"] for arm in summary["arms"]] == [4, 4]
    cluster.check_invariants()
