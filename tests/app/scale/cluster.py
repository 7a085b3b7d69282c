"""A scale-out deployment on loopback: API replicas and worker processes, killable.

`Cluster` starts `python -m tests.app.serve` children against one PostgreSQL database
and one Redis: API-only replicas (`RUN_WORKERS=0`, each on its own port) and workers
(`ATELIER_TEST_ROLE=worker`, no port), with the sample graphs and the scripted LLM.
A test can SIGKILL, SIGSTOP and SIGCONT any of them; `check_invariants` reads the
database afterwards.

With `cli=True` the children are the real commands instead (`atelier serve --port N
--workers 0` and `atelier worker`, the real `atelier` pipeline): `bench/bench_scale.py`
measures that deployment, and `Child.serve_command()` starts the embedded one.

`ProxiedCluster` puts the replicas behind nginx with the shipped `deploy/nginx.conf`
(round robin per request), one URL for the whole deployment: the service suites
(tests/app/test_runs_api.py, tests/app/test_atelier_service.py) run against it as
their "processes" deployment, one cluster per module, settled and emptied after every
test (`after_test`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import psycopg

from tests.app.harness import HOST, REPO_ROOT, free_port, wait_until
from tests.support.servers import NginxProxy, PostgresCluster, RedisServer, nginx_or_missing

#: Seconds a worker's lease lasts in these tests (renewed every second).
LEASE_SECONDS = 3

#: The `atelier` console script's entry point (cli.main has no __main__).
ATELIER_CLI = ("-c", "from cli.main import main; main()")


class Child:
    """One process of the deployment: an API replica (with a port) or a worker."""

    def __init__(
        self,
        name: str,
        env: dict[str, str],
        log_dir: Path,
        port: int | None,
        args: tuple[str, ...] = ("-m", "tests.app.serve"),
    ) -> None:
        """Configure the child (`python ARGS`); `start()` starts it."""
        self.name = name
        self.env = env
        self.port = port
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of an API replica."""
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self.process is not None
        return self.process.pid

    @classmethod
    def serve_command(cls, name: str, env: dict[str, str], log_dir: Path, *extra: str) -> Child:
        """`atelier serve --port N [EXTRA]` (the real command) as a child on a free port."""
        port = free_port()
        return cls(name, env, log_dir, port, (*ATELIER_CLI, "serve", "--port", str(port), *extra))

    def alive(self) -> bool:
        """Whether the child runs."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the child (the caller waits for it)."""
        env = {**os.environ, **self.env}
        if self.port is not None:
            env["ATELIER_TEST_PORT"] = str(self.port)
        env.pop("PYTEST_CURRENT_TEST", None)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, *self.args],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait until an API replica answers /ready, or a worker says it is ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
            if self.port is not None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                        return
            elif "ready" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not start: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the child's log."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def signal(self, signum: int) -> None:
        """Send a signal to the child."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the child and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM the child (a graceful stop), then SIGKILL it after a while."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


class Cluster:
    """API replicas and workers sharing one database and one Redis."""

    def __init__(
        self,
        log_dir: Path,
        *,
        database_url: str,
        redis_url: str,
        llm_base_url: str,
        apis: int = 2,
        workers: int = 2,
        cli: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        """Configure the deployment; `start()` starts it.

        `cli`: run the real `atelier serve --workers 0` and `atelier worker` commands
        (the real pipeline) instead of `tests.app.serve` with the sample graphs; `env`:
        settings over the tests' defaults.
        """
        self.database_url = database_url
        common = {
            "DATA_DIR": str(log_dir / "data"),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "LLM_BASE_URL": llm_base_url,
            "LLM_API_KEY": "test",
            "LLM_MODEL": "scripted",
            "LLM_MAX_RETRIES": "0",
            "AUTH_API_KEYS": "",
            "ATELIER_TEST_GRAPHS": "sample",
            "RUN_LEASE_SECONDS": str(LEASE_SECONDS),
            "RUN_MAX_ATTEMPTS": "3",
            "SSE_HEARTBEAT_INTERVAL": "0.5",
            **(env or {}),
        }
        if cli:
            self.apis = [
                Child.serve_command(f"api{i}", common, log_dir, "--workers", "0")
                for i in range(apis)
            ]
            self.workers = [
                Child(f"worker{i}", common, log_dir, None, (*ATELIER_CLI, "worker"))
                for i in range(workers)
            ]
            return
        self.apis = [
            Child(f"api{i}", {**common, "RUN_WORKERS": "0"}, log_dir, free_port())
            for i in range(apis)
        ]
        self.workers = [
            Child(f"worker{i}", {**common, "ATELIER_TEST_ROLE": "worker"}, log_dir, None)
            for i in range(workers)
        ]

    def start(self) -> Cluster:
        """Start every process (the first alone: it applies the schema) and wait for them."""
        children = [*self.apis, *self.workers]
        children[0].start()
        children[0].wait_ready()
        for child in children[1:]:
            child.start()
        for child in children[1:]:
            child.wait_ready()
        return self

    def ensure_running(self) -> None:
        """Start again any process a test killed or stopped."""
        for child in [*self.apis, *self.workers]:
            child.signal(signal.SIGCONT)
            if not child.alive():
                child.start()
                child.wait_ready()

    def stop(self) -> None:
        """Stop every process."""
        for child in [*self.apis, *self.workers]:
            child.stop()

    # -- the database's view -----------------------------------------------------------

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Run a query on the deployment's database."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def execute(self, sql: str) -> None:
        """Run a statement that returns no rows on the deployment's database."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def executing(self, run_id: str) -> Child | None:
        """Return the worker holding a running run, if any."""
        rows = self.query(
            "SELECT lease_owner FROM runs WHERE run_id = %s AND status = 'running'", (run_id,)
        )
        if not rows or rows[0][0] is None:
            return None
        pid = int(str(rows[0][0]).split(":")[1])
        return next((w for w in self.workers if w.alive() and w.pid == pid), None)

    def check_invariants(self) -> None:
        """One running run per thread at most, ids 1..n, one `end` per finished run."""
        running = self.query(
            "SELECT thread_id, count(*) FROM runs WHERE status = 'running' GROUP BY thread_id "
            "HAVING count(*) > 1"
        )
        assert running == [], f"threads with several running runs: {running}"
        for run_id, status in self.query("SELECT run_id, status FROM runs"):
            rows = self.query(
                "SELECT seq, event FROM run_events WHERE run_id = %s ORDER BY seq", (run_id,)
            )
            ids = [row[0] for row in rows]
            assert ids == list(range(1, len(ids) + 1)), f"run {run_id}: ids {ids}"
            ends = [row for row in rows if row[1] == "end"]
            if status in ("pending", "running"):
                assert ends == [], f"active run {run_id} has an end frame"
            else:
                assert len(ends) == 1 and rows[-1][1] == "end", f"run {run_id}: ends {ends}"

    def attempts(self, run_id: str) -> list[int]:
        """Return the attempt numbers of a run's `metadata` frames, in order."""
        rows = self.query(
            "SELECT data FROM run_events WHERE run_id = %s AND event = 'metadata' ORDER BY seq",
            (run_id,),
        )
        return [json.loads(str(row[0]))["attempt"] for row in rows]


#: The tables a test's data lives in, emptied between the tests sharing a cluster
#: (the schema, its version and the knowledge notes stay).
TEST_DATA_TABLES = (
    "store",
    "threads",
    "runs",
    "run_events",
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "webhook_deliveries",
    "webhook_attempts",
    "crons",
    "run_feedback",
    "assistants",
    "assistant_versions",
    "api_keys",
    "audit_log",
    "run_usage",
    "store_item_bytes",
    "quota_windows",
    "datasets",
    "dataset_examples",
    "experiments",
    "experiment_examples",
    "experiment_runs",
    "experiment_pairs",
    "experiment_events",
    "evaluation_settings",
    "online_judgements",
    "campaigns",
    "campaign_publications",
)


class ProxiedCluster:
    """A started `Cluster` behind a started nginx: one URL that spreads requests."""

    def __init__(self, cluster: Cluster, proxy: NginxProxy) -> None:
        """Wrap a running cluster and the proxy in front of its API replicas."""
        self.cluster = cluster
        self.proxy = proxy

    @property
    def url(self) -> str:
        """The proxy's base URL: consecutive requests go to alternate replicas."""
        return self.proxy.url

    @classmethod
    @contextlib.contextmanager
    def serve(cls, cluster: Cluster, nginx: str) -> Iterator[ProxiedCluster]:
        """Start `cluster` and nginx (binary `nginx`) in front of it; stop both after."""
        proxy = NginxProxy(nginx, [child.port for child in cluster.apis if child.port])
        try:
            cluster.start()
            proxy.start()
            yield cls(cluster, proxy)
            served = proxy.served()
            assert all(served.values()), f"requests per replica port: {served}"
        finally:
            proxy.stop()
            cluster.stop()

    def settle(self, headers: Mapping[str, str] | None = None, timeout: float = 30) -> None:
        """Cancel the runs a test left pending or running, and wait until none is.

        Experiments still going are ended first (and sampling stopped), so that no
        process starts another run meanwhile.
        """
        self.cluster.execute(
            "UPDATE experiments SET status = 'cancelled' WHERE status IN ('pending', 'running')"
        )
        self.cluster.execute("UPDATE evaluation_settings SET sample_rate = 0")
        active = "SELECT thread_id, run_id FROM runs WHERE status IN ('pending', 'running')"
        for thread_id, run_id in self.cluster.query(active):
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(
                    f"{self.cluster.apis[0].url}/threads/{thread_id}/runs/{run_id}/cancel",
                    params={"wait": "true"},
                    headers=dict(headers or {}),
                    timeout=timeout,
                )
        wait_until(lambda: not self.cluster.query(active), timeout=timeout, interval=0.1)

    def after_test(self, headers: Mapping[str, str] | None = None) -> None:
        """Settle the runs, check the database's invariants, then empty the test data.

        Every process must still run: one that died fails the test. The data goes even
        when a check fails, so that the next test starts from an empty database.
        """
        try:
            self.settle(headers)
            self.cluster.check_invariants()
            children = [*self.cluster.apis, *self.cluster.workers]
            dead = [child.name for child in children if not child.alive()]
            assert dead == [], f"processes of the deployment exited: {dead}"
        finally:
            self.cluster.execute(f"TRUNCATE {', '.join(TEST_DATA_TABLES)}")


@contextlib.contextmanager
def proxied_cluster(
    postgres: PostgresCluster,
    redis: RedisServer,
    log_dir: Path,
    llm_base_url: str,
    *,
    cli: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[ProxiedCluster]:
    """Two API replicas behind nginx and two workers on a database of their own.

    Skips (fails under CI) without nginx; the database is dropped afterwards.
    """
    nginx = nginx_or_missing()
    url = postgres.create_database()
    cluster = Cluster(
        log_dir,
        database_url=url,
        redis_url=redis.url,
        llm_base_url=llm_base_url,
        cli=cli,
        env=env,
    )
    try:
        with ProxiedCluster.serve(cluster, nginx) as deployment:
            yield deployment
    finally:
        postgres.drop_database(url)
