"""Webhooks end to end: a receiver on loopback gets each finished run once, signed.

The receiver is a real HTTP server on 127.0.0.1 (allowed by WEBHOOK_ALLOW_PRIVATE in
these tests) answering a script of status codes; the service runs in the three
deployments (`serve_deployment`; with processes, the two `atelier worker`s deliver),
and as a child process killed between two attempts.
Without WEBHOOK_ALLOW_PRIVATE, loopback URLs are refused at creation and a name
resolving to loopback fails its delivery with the rule recorded (never the address).
A URL the deliverer could not send as it was checked (malformed, a numeric IPv4
spelling) is a 422 whatever the settings, for runs and crons; a row such a URL left
in the outbox of an older version ends failed.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.settings import Settings
from engine.postgres import webhooks as postgres_outbox
from engine.records import WebhookQueued
from engine.sqlite import webhooks as sqlite_outbox
from tests.app.harness import (
    DEPLOYMENTS,
    HOST,
    LiveServer,
    Served,
    ServerProcess,
    processes_deployment,
    serve_deployment,
    service_settings,
    wait_until,
)
from tests.app.sample_graphs import sample_assistants, scripted_reply
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

SECRET = "whsec_service_test"


class Receiver:
    """A webhook receiver on loopback: answers `statuses` in turn (then 200), keeps each POST."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers.items()), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                answer = b"receiver says no" if status >= 300 else b"ok"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/hook"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def signed(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """Whether a delivery carries a valid signature (the docs' recipe, docs/webhooks.md)."""
    namespace: dict[str, Any] = {}
    exec(code_block("webhooks", "python"), namespace)
    return bool(namespace["verify"](secret, headers, body))


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """Two API replicas behind nginx and two `atelier worker`s, each worker delivering."""
    env = {
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "WEBHOOK_SECRET": SECRET,
        "WEBHOOK_BACKOFF_SECONDS": "0.2",
    }
    with processes_deployment(request, tmp_path_factory, llm.base_url, env=env) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The app in each deployment, delivering to loopback with a short backoff."""

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            webhook_allow_private=True,
            webhook_secret=SECRET,
            webhook_backoff_seconds=0.2,
            **scale,
        )

    with serve_deployment(request, settings, sample_assistants) as served:
        yield served


@pytest.fixture
def http(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def finish_run(http: httpx.Client, assistant: str, graph_input: Any, webhook: str) -> str:
    """Run a thread-less run to its end; return its path."""
    body = {"assistant_id": assistant, "input": graph_input, "webhook": webhook}
    response = http.post("/runs/wait", json=body)
    assert response.status_code == 200, response.text
    return response.headers["Content-Location"]


def attempts(http: httpx.Client, path: str) -> int:
    """Return how many attempts the run's one delivery has recorded (0: none yet)."""
    deliveries = http.get(f"{path}/webhooks").json()
    return int(deliveries[0]["attempts"]) if deliveries else 0


def settled(http: httpx.Client, path: str, timeout: float) -> list[dict[str, Any]]:
    """Wait until none of the run's deliveries is pending; return them."""

    def done() -> list[dict[str, Any]] | None:
        deliveries: list[dict[str, Any]] = http.get(f"{path}/webhooks").json()
        if deliveries and all(d["status"] != "pending" for d in deliveries):
            return deliveries
        return None

    result: list[dict[str, Any]] = wait_until(done, timeout=timeout, interval=0.05)
    return result


def test_each_finished_run_is_delivered_once_with_a_valid_signature(
    server: Served, http: httpx.Client
) -> None:
    with Receiver() as receiver:
        paths = [finish_run(http, "burst", {"count": 2}, receiver.url) for _ in range(2)]
        paths.append(finish_run(http, "boom", {"x": 1}, receiver.url))
        wait_until(lambda: len(receiver.received) >= 3, timeout=20)
        time.sleep(1.5)  # a second delivery of any of them would come by now
        received = list(receiver.received)
    assert len(received) == 3
    bodies = {}
    for headers, raw in received:
        assert signed(headers, raw)
        assert headers["Content-Type"] == "application/json"
        bodies[headers["X-Atelier-Delivery"]] = json.loads(raw)
    assert len(bodies) == 3
    by_run = {body["run_id"]: body for body in bodies.values()}
    for path in paths:
        thread_id, run_id = path.split("/")[2], path.split("/")[4]
        body = by_run[run_id]
        assert body["thread_id"] == thread_id and body["created_at"] <= body["ended_at"]
        (delivery,) = http.get(f"{path}/webhooks").json()
        assert delivery["status"] == "success" and delivery["attempts"] == 1
        assert [a["outcome"] for a in delivery["history"]] == ["success"]
        assert delivery["history"][0]["status_code"] == 200
    statuses = sorted(body["status"] for body in bodies.values())
    assert statuses == ["error", "success", "success"]
    failed = next(body for body in bodies.values() if body["status"] == "error")
    assert failed["result"] is None and failed["error"]["error"]
    assert "/srv/secret" not in json.dumps(failed)  # the public error only
    ok = next(body for body in bodies.values() if body["status"] == "success")
    assert ok["assistant_id"] == "burst" and ok["result"]["emitted"] == 2 and ok["error"] is None
    if isinstance(server, LiveServer):  # the API's process delivers (not the processes')
        metrics = http.get("/metrics").text
        assert 'atelier_webhook_attempts_total{outcome="success"} 3.0' in metrics
        assert 'atelier_webhook_deliveries_total{outcome="success"} 3.0' in metrics


def outbox(http: httpx.Client) -> dict[str, float]:
    """Return the outbox gauges of the API's /metrics (the database's, at scrape)."""
    found = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        if family.name.startswith("atelier_webhook_outbox_"):
            for sample in family.samples:
                label = sample.labels.get("status") or sample.labels["outcome"]
                found[f"{family.name.removeprefix('atelier_webhook_outbox_')}:{label}"] = (
                    sample.value
                )
    return found


def test_a_receiver_failing_twice_gets_three_attempts_and_one_success(
    server: Served, http: httpx.Client
) -> None:
    before = outbox(http)
    with Receiver([500, 500]) as receiver:
        path = finish_run(http, "burst", {"count": 1}, receiver.url)
        (delivery,) = settled(http, path, timeout=20)
        received = list(receiver.received)
    # Whichever process delivered (a worker, in the processes deployment), the API's
    # /metrics counts it: the outbox is read from the database at scrape.
    after = outbox(http)
    change = {key: after[key] - before[key] for key in after}
    assert change == {
        "deliveries:pending": 0,
        "deliveries:success": 1,
        "deliveries:failed": 0,
        "deliveries:cancelled": 0,
        "attempts:success": 1,
        "attempts:http_error": 2,
        "attempts:network_error": 0,
        "attempts:refused": 0,
    }
    assert delivery["status"] == "success" and delivery["attempts"] == 3
    history = delivery["history"]
    assert [a["outcome"] for a in history] == ["http_error", "http_error", "success"]
    assert [a["status_code"] for a in history] == [500, 500, 200]
    assert history[0]["error"] == "HTTP 500"
    assert history[0]["response_excerpt"] == "receiver says no"
    assert all(a["latency_ms"] >= 0 for a in history)
    assert len(received) == 3
    assert len({headers["X-Atelier-Delivery"] for headers, _ in received}) == 1
    assert all(signed(headers, raw) for headers, raw in received)
    if isinstance(server, LiveServer):
        metrics = http.get("/metrics").text
        assert 'atelier_webhook_attempts_total{outcome="http_error"} 2.0' in metrics


#: URLs that passed creation in older versions, then jammed the outbox or were only
#: refused when sent (issue 33), with the rule each breaks. (A cron's `webhook` field
#: refuses white space by its pattern first.)
WHITE_SPACE = "malformed|should match pattern"
UNSENDABLE = [
    ("https://999.1.1.1/h", "malformed"),
    ("https://hooks.example.com/h\tx", WHITE_SPACE),
    ("https://hooks.example.com/h\nx", WHITE_SPACE),
    ("https://xn--a.com/h", "internationalized"),
    ("https://a..b.com/h", "not a valid host name"),
    ("https://2130706433/h", r"a\.b\.c\.d \(it means 127\.0\.0\.1\)"),
    ("https://0x7f000001/h", r"a\.b\.c\.d \(it means 127\.0\.0\.1\)"),
    ("https://127.1/h", r"a\.b\.c\.d \(it means 127\.0\.0\.1\)"),
    ("https://0177.0.0.1/h", "malformed"),
]


def test_a_url_the_deliverer_could_not_send_as_checked_is_a_422_and_queues_nothing(
    http: httpx.Client,
) -> None:
    """Even with WEBHOOK_ALLOW_PRIVATE (these servers' setting): runs and crons alike."""
    before = outbox(http)
    threads = http.post("/threads/count", json={}).json()
    thread_id = http.post("/threads", json={}).json()["thread_id"]
    run = {"assistant_id": "burst", "input": {"count": 1}}
    cron = {**run, "schedule": "*/5 * * * *"}
    targets = [
        ("/runs", run),
        ("/runs/wait", run),
        (f"/threads/{thread_id}/runs", run),
        ("/runs/crons", cron),
        (f"/threads/{thread_id}/runs/crons", cron),
    ]
    for url, rule in UNSENDABLE:
        for path, body in targets:
            response = http.post(path, json={**body, "webhook": url})
            assert response.status_code == 422, (path, url, response.text)
            (error,) = response.json()["detail"]
            assert error["loc"][-1] == "webhook" and re.search(rule, error["msg"]), (url, error)
    assert http.post("/runs/crons/search", json={}).json() == []
    assert http.post("/threads/count", json={}).json() == threads + 1  # the one made here
    assert http.get(f"/threads/{thread_id}/runs").json() == []
    assert outbox(http) == before  # nothing pending, nothing attempted


def queue_as_an_older_version(server: Served, change: WebhookQueued) -> None:
    """Write a delivery straight into the deployment's outbox, unchecked, as older versions did."""
    if isinstance(server, LiveServer) and server.settings.database_url is None:
        sql, params = sqlite_outbox.webhook_queued_statement(change)
        with sqlite3.connect(server.settings.database_path, timeout=10) as db:
            db.execute(sql, params)
        return
    url = (
        server.settings.database_url.get_secret_value()
        if isinstance(server, LiveServer) and server.settings.database_url is not None
        else server.cluster.database_url  # type: ignore[attr-defined]  # the processes
    )
    sql, params = postgres_outbox.webhook_queued_statement(change)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql, params)  # type: ignore[arg-type]


def test_a_row_an_older_version_left_with_an_unsendable_url_ends_failed(
    server: Served, http: httpx.Client
) -> None:
    with Receiver() as receiver:
        path = finish_run(http, "burst", {"count": 1}, receiver.url)
        settled(http, path, timeout=20)
    thread_id, run_id = path.split("/")[2], path.split("/")[4]
    for number, (url, _rule) in enumerate(UNSENDABLE):
        change = WebhookQueued(f"old-{run_id}-{number}", run_id, thread_id, "anonymous", url, "{}")
        queue_as_an_older_version(server, change)
    deliveries = settled(http, path, timeout=30)
    old = [d for d in deliveries if d["url"] != receiver.url]
    assert len(old) == len(UNSENDABLE)
    for delivery in old:
        assert delivery["status"] == "failed" and delivery["attempts"] == 1, delivery
        (attempt,) = delivery["history"]
        assert attempt["outcome"] == "refused" and attempt["error"].startswith("refused: ")
        assert delivery["last_error"] == attempt["error"]


def test_another_owners_run_shows_no_deliveries(http: httpx.Client) -> None:
    response = http.get("/threads/00000000-0000-4000-8000-000000000000/runs/x/webhooks")
    assert response.status_code == 404


# --------------------------------------------------------------------------- the rules


@pytest.fixture
def guarded(tmp_path: Path, llm: ScriptedOpenAIServer) -> Iterator[httpx.Client]:
    """The embedded app with the default rules: https and public addresses only."""

    class Embedded:
        param = "embedded"

    settings = service_settings(tmp_path / "data", llm.base_url, webhook_secret=SECRET)
    with (
        serve_deployment(Embedded(), lambda: settings, sample_assistants) as served,
        httpx.Client(base_url=served.url, timeout=30) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://127.0.0.1:9/hook", "only https"),
        ("https://127.0.0.1:9/hook", "loopback"),
        ("https://[::ffff:192.168.0.1]/hook", "private"),
        ("https://169.254.169.254/latest", "metadata"),
        ("ftp://hooks.example.com/", "only http(s)"),
    ],
)
def test_a_url_refused_by_rule_is_a_422_naming_webhook(
    guarded: httpx.Client, url: str, rule: str
) -> None:
    body = {"assistant_id": "burst", "input": {"count": 1}, "webhook": url}
    response = guarded.post("/runs", json=body)
    assert response.status_code == 422, response.text
    text = response.text
    assert "webhook" in text and rule in text


#: IPv6 addresses that carry or stand for a non-public IPv4 one, and a numeric spelling.
DISGUISED = [
    ("https://[2002:7f00:1::]/hook", "6to4 address carrying a loopback"),  # 127.0.0.1
    ("https://[2002:a9fe:a9fe::]/hook", "6to4 address carrying a cloud metadata"),
    ("https://[fec0::1]/hook", "site-local"),
    ("https://[64:ff9b::a00:1]/hook", "private"),  # NAT64 of 10.0.0.1
    ("https://[64:ff9b:1::1]/hook", "local-use NAT64"),
    ("https://[2001::1]/hook", "Teredo"),
    ("https://[::127.0.0.1]/hook", "IPv4-compatible"),
    ("https://0x7f000001/hook", "a.b.c.d (it means 127.0.0.1)"),
]


def test_a_disguised_non_public_address_is_a_422_for_runs_and_crons(
    guarded: httpx.Client,
) -> None:
    before = outbox(guarded)
    run = {"assistant_id": "burst", "input": {"count": 1}}
    for url, rule in DISGUISED:
        for path, body in (("/runs", run), ("/runs/crons", {**run, "schedule": "0 9 * * *"})):
            response = guarded.post(path, json={**body, "webhook": url})
            assert response.status_code == 422, (path, url, response.text)
            (error,) = response.json()["detail"]
            assert error["loc"][-1] == "webhook" and rule in error["msg"], (url, error)
    assert guarded.post("/runs/crons/search", json={}).json() == []
    assert guarded.post("/threads/count", json={}).json() == 0
    assert outbox(guarded) == before


def test_a_name_resolving_to_loopback_fails_its_delivery_with_the_reason(
    guarded: httpx.Client,
) -> None:
    with Receiver() as receiver:
        url = f"https://localhost:{receiver.port}/hook"
        path = finish_run(guarded, "burst", {"count": 1}, url)
        (delivery,) = settled(guarded, path, timeout=20)
        assert receiver.received == []
    assert delivery["status"] == "failed" and delivery["attempts"] == 1
    (attempt,) = delivery["history"]
    assert attempt["outcome"] == "refused" and attempt["status_code"] is None
    # The rule's name, never the resolver's answer (internal DNS, mapped for any key).
    assert attempt["error"] == "refused: localhost resolves to a loopback address"
    assert not re.search(r"\d+\.\d+\.\d+\.\d+|::1", json.dumps(delivery))
    assert delivery["last_error"] == attempt["error"]
    metrics = guarded.get("/metrics").text
    assert 'atelier_webhook_deliveries_total{outcome="failed"} 1.0' in metrics


# --------------------------------------------------------------------------- restarts


def test_a_server_killed_between_attempts_delivers_after_its_restart(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    env = {
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "WEBHOOK_SECRET": SECRET,
        "WEBHOOK_BACKOFF_SECONDS": "3",
    }
    server = ServerProcess(tmp_path, llm.base_url, env=env)
    with Receiver([500]) as receiver:
        try:
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as http:
                path = finish_run(http, "burst", {"count": 1}, receiver.url)
                wait_until(lambda: attempts(http, path) == 1, timeout=20, interval=0.05)
            server.kill()  # between the failed attempt and its retry
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as http:
                (delivery,) = settled(http, path, timeout=30)
        finally:
            server.stop()
        received = list(receiver.received)
    assert delivery["status"] == "success" and delivery["attempts"] == 2
    assert [a["status_code"] for a in delivery["history"]] == [500, 200]
    assert len(received) == 2
    assert received[0][0]["X-Atelier-Delivery"] == received[1][0]["X-Atelier-Delivery"]
    assert all(signed(headers, raw) for headers, raw in received)
