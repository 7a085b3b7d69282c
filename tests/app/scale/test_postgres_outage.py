"""PostgreSQL stops under a busy deployment, stays down a while, and comes back.

Two API replicas and two workers (`tests/app/scale/cluster.py`) run against a
PostgreSQL server of this module's own, which the tests stop (`pg_ctl stop -m fast`
or `-m immediate`, a crash) while runs execute and clients stream them, then start
again on the same port and data directory. No process of the deployment is
restarted. What a user should see, and these tests check:

- a short outage (seconds): runs carry on where they stand and end `success` in
  their first attempt; a client streaming through an API replica keeps its stream
  (heartbeats meanwhile) and gets every frame once, ids strictly increasing, one
  `end`; while the server is away `/ready` answers 503 naming PostgreSQL and a new
  run is refused at once with a 503 that names the cause and nothing of the driver,
  writing nothing; once it is back `/ready` answers 200 and new runs work.
- a long outage (past the connection wait of the workers, the event writer's retry
  window and the lease): every run still ends once the server is back, either with
  `error` + `end` or resumed by a worker as a new attempt; none stays `running`; a
  client that rejoins with its `Last-Event-ID` gets the rest and one `end`.

The settings that make the long outage short enough for a test: leases of
`LEASE_SECONDS` and work outside requests waiting `CHECKOUT_SECONDS` for a
connection (`ATELIER_TEST_CHECKOUT_TIMEOUT`; 30 s by default), so a
`LONG_OUTAGE`-second outage stands for one of over 30 s in production.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from engine.group_commit import RETRY_FOR
from tests.app.harness import SseFrame, parse_sse, wait_until
from tests.app.sample_graphs import scripted_reply, slow_run
from tests.app.scale.cluster import Cluster
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import PostgresCluster, RedisServer, missing, postgres_bindir

pytestmark = pytest.mark.slow

#: Seconds a worker's lease lasts here (renewed every second).
LEASE_SECONDS = 8.0
#: Seconds work outside HTTP requests waits for a connection here (30 s in production).
CHECKOUT_SECONDS = 10.0
#: Seconds PostgreSQL is down in the short outage: inside every window above.
SHORT_OUTAGE = 4.0
#: Seconds PostgreSQL is down in the long outage: past every window above.
LONG_OUTAGE = 16.0
#: Seconds a request may take while PostgreSQL is down (it fails fast; slack for 2 cores).
FAIL_FAST_WITHIN = 4.0
#: Seconds after PostgreSQL is back within which every replica is ready again.
RECOVER_WITHIN = 10.0

# The short outage fits inside every window, the long one outlasts them all.
assert min(LEASE_SECONDS, CHECKOUT_SECONDS, RETRY_FOR) > SHORT_OUTAGE
assert max(LEASE_SECONDS, CHECKOUT_SECONDS, RETRY_FOR) < LONG_OUTAGE


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(scripted_reply) as server:
        yield server


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL server of this module's own (the tests stop it), crash-safe commits."""
    bindir = postgres_bindir()
    if bindir is None:
        missing("PostgreSQL is not installed (initdb not on PATH nor in /usr/lib/postgresql)")
    if shutil.which("redis-server") is None:
        missing("redis-server is not installed")
    assert bindir is not None
    server = PostgresCluster(bindir, durable_commits=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    postgres: PostgresCluster,
    redis_server: RedisServer,
    llm: ScriptedOpenAIServer,
) -> Iterator[Cluster]:
    deployment = Cluster(
        tmp_path_factory.mktemp("pgdown"),
        database_url=postgres.create_database(),
        redis_url=redis_server.url,
        llm_base_url=llm.base_url,
        env={
            "RUN_LEASE_SECONDS": f"{LEASE_SECONDS:g}",
            "ATELIER_TEST_CHECKOUT_TIMEOUT": f"{CHECKOUT_SECONDS:g}",
        },
    )
    try:
        yield deployment.start()
    finally:
        deployment.stop()


@pytest.fixture(autouse=True)
def unrestarted(cluster: Cluster, postgres: PostgresCluster) -> Iterator[None]:
    """Every process of the deployment lives through the test; the database is consistent."""
    pids = {child.name: child.pid for child in [*cluster.apis, *cluster.workers]}
    yield
    with contextlib.suppress(RuntimeError):  # a test that failed with the server down
        postgres.resume()
    for child in [*cluster.apis, *cluster.workers]:
        assert child.alive() and child.pid == pids[child.name], f"{child.name} died"
    cluster.check_invariants()


def _start(cluster: Cluster, body: dict[str, Any], replica: int = 0) -> tuple[str, str]:
    response = httpx.post(f"{cluster.apis[replica].url}/runs", json=body, timeout=30)
    assert response.status_code == 200, response.text
    run = response.json()
    return run["run_id"], f"/threads/{run['thread_id']}/runs/{run['run_id']}"


@dataclass
class Follower:
    """A client following a run's stream in a thread; it rejoins with `Last-Event-ID`.

    `breaks` lists every time its stream broke or was refused (then it rejoins after
    half a second); `stop_after` makes it leave after that many frames, like a client
    that goes away and rejoins later (`rejoin`).
    """

    url: str
    path: str
    stop_after: int | None = None
    frames: list[SseFrame] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)  # time.monotonic() of each frame
    breaks: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Follower:
        threading.Thread(target=self._follow, daemon=True).start()
        return self

    def rejoin(self, url: str) -> Follower:
        """Follow again from the last frame received, on the replica at `url`."""
        self.url, self.stop_after = url, None
        self.done.clear()
        return self.start()

    @property
    def ended(self) -> bool:
        return bool(self.frames) and self.frames[-1].event == "end"

    def _follow(self) -> None:
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline and not self.ended:
                if self._stream():
                    return
                time.sleep(0.5)
        finally:
            self.done.set()

    def _stream(self) -> bool:
        """Follow once; return True when the client is done (an `end`, or `stop_after`)."""
        headers = {"Last-Event-ID": str(self.frames[-1].id)} if self.frames else {}
        try:
            with (
                httpx.Client(base_url=self.url, timeout=httpx.Timeout(30, read=30)) as http,
                http.stream("GET", f"{self.path}/stream", headers=headers) as stream,
            ):
                if stream.status_code != 200:
                    self.breaks.append(f"HTTP {stream.status_code}: {stream.read()[:300]!r}")
                    return False
                for item in parse_sse(stream.iter_lines()):
                    if not isinstance(item, SseFrame):
                        continue  # a heartbeat
                    if item.id is None:  # a notice (RunStalled): the stream closes next
                        self.breaks.append(f"notice {item.event}: {item.data}")
                        continue
                    self.frames.append(item)
                    self.arrived.append(time.monotonic())
                    if item.event == "end":
                        return True
                    if self.stop_after is not None and len(self.frames) >= self.stop_after:
                        return True
        except httpx.HTTPError as exc:
            self.breaks.append(f"{type(exc).__name__}: {exc}")
            return False
        self.breaks.append("closed without an end")
        return False

    def check_stream(self) -> str:
        """Assert every frame came once, ids 1..n, one `end` last; return its status."""
        ids = [frame.id for frame in self.frames]
        assert ids == list(range(1, len(ids) + 1)), f"{self.path}: ids {ids}"
        assert [frame.event for frame in self.frames].count("end") == 1, self.path
        assert self.frames[-1].event == "end", self.path
        return str(self.frames[-1].data["status"])


def _ready_after(cluster: Cluster, since: float) -> float:
    """Wait until every API replica answers /ready 200; return the seconds since `since`."""
    for api in cluster.apis:
        wait_until(
            lambda url=api.url: httpx.get(f"{url}/ready", timeout=10).status_code == 200,
            timeout=RECOVER_WITHIN,
            interval=0.1,
        )
    return time.monotonic() - since


def _timed(call: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def _assert_clean_503(response: httpx.Response) -> dict[str, Any]:
    """A 503 in the service's JSON error shape that names the cause, no driver internals."""
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "unavailable"
    assert "database" in body["message"].lower() or "runs" in body["message"].lower()
    text = response.text.lower()
    for internal in ("traceback", "psycopg", "pooltimeout", "127.0.0.1", "postgresql://"):
        assert internal not in text, response.text
    return dict(body)


def test_a_short_postgres_outage_delays_runs_and_streams_but_loses_nothing(
    cluster: Cluster, postgres: PostgresCluster
) -> None:
    runs = [_start(cluster, slow_run(16, 0.5), replica=i % 2) for i in range(3)]
    followers = [Follower(cluster.apis[1].url, path).start() for _, path in runs]
    wait_until(lambda: all(len(f.frames) >= 3 for f in followers), timeout=30)
    known_runs = cluster.query("SELECT count(*) FROM runs")[0][0]

    halted = time.monotonic()
    postgres.halt("fast")  # every session is ended at once; nothing accepts connections

    # While it is down, asked at once on both replicas: /ready says not ready and
    # names PostgreSQL; a new run is refused with a clear 503, and so is a read that
    # needs the database (no 500, no hang).
    api0, api1 = (api.url for api in cluster.apis)
    probes = {
        "ready0": lambda: httpx.get(f"{api0}/ready", timeout=30),
        "ready1": lambda: httpx.get(f"{api1}/ready", timeout=30),
        "post0": lambda: httpx.post(f"{api0}/runs", json=slow_run(1, 0.1), timeout=30),
        "post1": lambda: httpx.post(f"{api1}/runs", json=slow_run(1, 0.1), timeout=30),
        "read": lambda: httpx.get(f"{api0}{runs[0][1]}", timeout=30),
    }
    with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
        answers = dict(zip(probes, pool.map(_timed, probes.values()), strict=True))
    for name, (response, took) in answers.items():
        assert took < FAIL_FAST_WITHIN, f"{name} took {took:.1f} s"
        if name.startswith("ready"):
            assert response.status_code == 503, response.text
            assert response.json()["checks"]["postgres"] != "ok"
            assert "PostgreSQL" in response.json()["message"]
        else:
            _assert_clean_503(response)
    assert "PostgreSQL" in answers["read"][0].json()["message"]
    assert answers["read"][0].headers.get("retry-after") == "2"

    time.sleep(max(0.0, SHORT_OUTAGE - (time.monotonic() - halted)))
    postgres.resume()
    back = time.monotonic()
    down_for = back - halted
    recovered_in = _ready_after(cluster, back)

    for follower in followers:
        assert follower.done.wait(60), f"{follower.path}: no end ({follower.breaks})"
    print(
        f"\nshort outage: down {down_for:.1f} s, requests answered 503 in "
        f"{max(took for _, took in answers.values()):.1f} s at most, "
        f"every replica ready {recovered_in:.1f} s "
        f"after the restart, streams ended {max(f.arrived[-1] for f in followers) - back:.1f} s "
        "after it"
    )
    for (run_id, path), follower in zip(runs, followers, strict=True):
        # The streams through the API replica did not even break: they heartbeat
        # through the outage and carry on with the frames committed after it.
        assert follower.breaks == [], f"{path}: {follower.breaks}"
        assert follower.check_stream() == "success"
        assert any(at < halted for at in follower.arrived)
        assert any(at > back for at in follower.arrived), "the run had ended before the outage"
        assert cluster.attempts(run_id) == [1]  # carried on where it stood, not redone
    # Nothing of the refused runs was written; new runs work on both replicas.
    assert cluster.query("SELECT count(*) FROM runs")[0][0] == known_runs
    for replica in (0, 1):
        _run_id, path = _start(cluster, slow_run(2, 0.1), replica=replica)
        after = Follower(cluster.apis[1 - replica].url, path).start()
        assert after.done.wait(30)
        assert after.check_stream() == "success"


def test_a_long_postgres_outage_ends_every_run_once_it_is_back(
    cluster: Cluster, postgres: PostgresCluster
) -> None:
    runs = [_start(cluster, slow_run(20, 0.5), replica=i % 2) for i in range(3)]
    followers = [Follower(cluster.apis[1].url, path).start() for _, path in runs[:2]]
    leaver = Follower(cluster.apis[0].url, runs[2][1], stop_after=3).start()
    wait_until(lambda: all(len(f.frames) >= 3 for f in [*followers, leaver]), timeout=30)
    assert leaver.done.wait(10)

    halted = time.monotonic()
    postgres.halt("immediate")  # a crash: recovery from the WAL at the next start
    time.sleep(LONG_OUTAGE)
    postgres.resume()
    back = time.monotonic()
    recovered_in = _ready_after(cluster, back)
    leaver.rejoin(cluster.apis[1].url)  # a client that comes back after the outage

    for follower in [*followers, leaver]:
        assert follower.done.wait(90), f"{follower.path}: no end ({follower.breaks})"
    statuses = [follower.check_stream() for follower in [*followers, leaver]]
    ended_in = max(f.arrived[-1] for f in [*followers, leaver]) - back
    attempts = [cluster.attempts(run_id) for run_id, _ in runs]
    print(
        f"\nlong outage: down {back - halted:.1f} s, ready {recovered_in:.1f} s after the "
        f"restart, every run ended {ended_in:.1f} s after it: {statuses}, attempts {attempts}"
    )
    for (run_id, path), follower, status in zip(runs, [*followers, leaver], statuses, strict=True):
        rows = cluster.query("SELECT status, attempt, error FROM runs WHERE run_id = %s", (run_id,))
        assert rows[0][0] == status, f"{path}: {rows}"
        if status == "error":  # ended loudly: an error frame says why, before the end
            error = follower.frames[-2]
            assert error.event == "error", follower.frames[-2:]
            assert "psycopg" not in json.dumps(error.data).lower()
        else:  # carried on, or resumed from its checkpoint as a new attempt
            assert status == "success", f"{path}: {rows}"
    assert cluster.query("SELECT count(*) FROM runs WHERE status IN ('pending', 'running')") == [
        (0,)
    ]
    _run_id, path = _start(cluster, slow_run(2, 0.1), replica=1)
    after = Follower(cluster.apis[0].url, path).start()
    assert after.done.wait(30)
    assert after.check_stream() == "success"
