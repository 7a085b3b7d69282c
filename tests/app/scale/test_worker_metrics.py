"""`atelier worker` serves its own metrics (WORKER_METRICS_PORT): claims, runs, LLM calls.

A worker has no HTTP API, so what it did is in no replica's `/metrics`. One API
replica and one worker process (`tests/app/scale/cluster.py`) run a run; the
worker's metrics port then reports the claim, the run and its LLM calls.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.harness import HOST, free_port, read_sse
from tests.app.sample_graphs import scripted_reply
from tests.app.scale.cluster import Cluster
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer

pytestmark = pytest.mark.slow


@pytest.fixture
def deployment(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_cluster: PostgresCluster,
    redis_server: RedisServer,
) -> Iterator[tuple[Cluster, int]]:
    port = free_port()
    url = postgres_cluster.create_database()
    with ScriptedOpenAIServer(scripted_reply) as llm:
        cluster = Cluster(
            tmp_path_factory.mktemp("metrics"),
            database_url=url,
            redis_url=redis_server.url,
            llm_base_url=llm.base_url,
            apis=1,
            workers=1,
            env={"WORKER_METRICS_PORT": str(port)},
        )
        try:
            yield cluster.start(), port
        finally:
            cluster.stop()
            postgres_cluster.drop_database(url)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_worker_reports_its_claims_runs_and_llm_calls_on_its_metrics_port(
    deployment: tuple[Cluster, int],
) -> None:
    cluster, port = deployment
    metrics_url = f"http://{HOST}:{port}/metrics"
    before = samples(httpx.get(metrics_url, timeout=10).text)
    assert before[("atelier_claim_duration_seconds_count", ())] == 0
    api = cluster.apis[0].url
    with httpx.Client(base_url=api, timeout=60) as http:
        thread = http.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "studio", "input": {"request": "写一篇笔记", "auto_confirm": True}}
        frames = read_sse(http.post(f"/threads/{thread}/runs/stream", json=body).text)
    assert frames[-1].event == "end" and not any(f.event == "error" for f in frames)
    after = samples(httpx.get(metrics_url, timeout=10).text)
    assert after[("atelier_claim_duration_seconds_count", ())] == 1
    assert after[("atelier_runs_total", (("status", "success"),))] == 1
    llm_calls = sum(v for (name, _), v in after.items() if name == "atelier_llm_calls_total")
    assert llm_calls >= 1
    assert after.get(("atelier_lease_losses_total", ()), 0) == 0
