"""Benchmark one pipeline on the embedded and the scale-out deployment, side by side.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_scale.py \\
        [--concurrency 1 50 300] [--runs 3 100 300] [--latency 1.0] [--ways raw embedded scale]

(issue 13's acceptance figures: the defaults.) The same `atelier` pipeline (`fast_mode`,
one image, as `bench/bench_load.py`; `--full` for full runs) and the same scripted model
(`tests/support/scripted_openai.py` in this process, `tests/app/atelier_llm.py`'s
answers, each after `--latency` seconds: `bench_load.TimedModel`) run three ways:

* **raw**: LangGraph `astream` of the served graph in this process, no HTTP
  (`bench_dialects.raw_run`);
* **embedded**: `atelier serve` (the real command, one process, SQLite in a fresh
  DATA_DIR);
* **scale**: a throwaway PostgreSQL and Redis (`tests/support/servers.py`), one
  `atelier serve --workers 0` API replica and two `atelier worker` processes
  (`tests/app/scale/cluster.py` with `cli=True`), each worker executing up to
  `--worker-concurrency` runs (default: all the runs of the largest level split
  between the workers, so no run waits in the queue that the embedded mode would run).

Each way is started once, warmed up with one run, then measured at each concurrency c:
c clients each stream runs (`POST /threads`, then `POST /threads/{id}/runs/stream`,
read to the end, as the official SDK does) until that level's runs are done; c equal
to the runs means all started at once. Each client has its own connection, and the
clients and the model run on uvloop in this process: they share the machine's cores
with the deployment under test (the scale-out one uses both), so they are kept light.
Printed per row: wall time, runs/s, first frame (stream request → first frame)
p50/p95, total (stream request → `end`) p99, CPU per run, RSS and the runs that failed.
A run succeeds when its stream is gapless (ids 1..n), ends with one `end` and the
run's status is `success`; each failure is listed with
what the client saw (status, last frame, error) and what the server kept (the run's
row, its events, the log lines naming it); the deployment's logs are then kept.

CPU per run: user + system seconds of the deployment's processes (embedded: the one
process; scale: API + workers, each with its live children) over the level, divided by
its runs; PostgreSQL (postmaster and backends, exited backends included) and Redis
are reported apart. Raw: this process less the scripted model's thread (the clients
are not running then). RSS: the processes' resident memory after the level (raw: this
whole process, with the model and the clients; PostgreSQL and Redis: PSS, apart).
The machine's load average is
printed before and after each level: the machine may be shared.

The summary gives, per level, the wall ratio scale/embedded, CPU per run against raw,
the cores each deployment kept busy and, where the scale-out deployment was CPU-bound,
the best wall ratio the machine allows (`capacity`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import resource
import shutil
import sqlite3
import ssl
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvloop

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.bench_dialects import cpu_seconds, raw_run, rss_mb  # noqa: E402
from bench.bench_load import TimedModel, critical_path, run_body, served_env  # noqa: E402
from tests.app.harness import SseFrame, read_sse  # noqa: E402
from tests.app.scale.cluster import Child, Cluster  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAIServer  # noqa: E402
from tests.support.servers import PostgresCluster, RedisServer, postgres_bindir  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


# -- one run, as the client saw it -------------------------------------------------------


@dataclass
class RunResult:
    """One run: its frames, its timings, and what went wrong, if anything."""

    index: int
    thread_id: str | None = None
    frames: list[SseFrame] = field(default_factory=list)
    #: Seconds its thread took to create (`POST /threads`), before the stream request.
    setup: float | None = None
    first: float | None = None
    total: float | None = None
    error: BaseException | None = None
    trace: str = ""

    @property
    def run_id(self) -> str | None:
        """The run's id, from its `metadata` frame."""
        for frame in self.frames:
            if frame.event == "metadata" and isinstance(frame.data, dict):
                return frame.data.get("run_id")
        return None

    @property
    def status(self) -> str | None:
        """The status its `end` frame carries."""
        last = self.frames[-1] if self.frames else None
        if last is not None and last.event == "end" and isinstance(last.data, dict):
            return last.data.get("status")
        return None

    def problem(self) -> str | None:
        """Why the run does not count as a success; None when it does."""
        if self.error is not None:
            return f"client error {type(self.error).__name__}: {self.error}"
        ids = [frame.id for frame in self.frames]
        events = [frame.event for frame in self.frames]
        if not self.frames or events[-1] != "end":
            return "no `end` frame"
        if events.count("end") != 1:
            return f"{events.count('end')} `end` frames"
        if ids != list(range(1, len(ids) + 1)):
            return "ids not 1..n"
        if self.status != "success":
            return f"status {self.status}"
        return None

    def describe(self) -> str:
        """What the client saw: status, the last frame, any error frame."""
        last = self.frames[-1] if self.frames else None
        errors = [f.data for f in self.frames if f.event == "error"]
        ids = [f.id for f in self.frames]
        gaps = [(a, b) for a, b in itertools.pairwise(ids) if a is None or b != a + 1]
        return (
            f"run {self.run_id} thread {self.thread_id}: {self.problem()}; "
            f"{len(self.frames)} frames, last "
            f"{(last.id, last.event) if last else None}, end status {self.status}, "
            f"gaps {gaps[:5]}, error frames {json.dumps(errors, ensure_ascii=False)[:300]}, "
            f"after {self.total if self.total is not None else float('nan'):.1f} s {self.trace}"
        )


async def stream_one(client: httpx.AsyncClient, body: dict[str, Any], result: RunResult) -> None:
    """Create a thread and stream one run on it into `result` (kept when it fails midway)."""
    lines: list[str] = []
    started = 0.0
    try:
        asked = time.perf_counter()
        created = await client.post("/threads", json={})
        created.raise_for_status()
        result.thread_id = created.json()["thread_id"]
        started = time.perf_counter()
        result.setup = started - asked
        path = f"/threads/{result.thread_id}/runs/stream"
        async with client.stream("POST", path, json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if result.first is None and line and not line.startswith(":"):
                    result.first = time.perf_counter() - started
                lines.append(line)
    except Exception as exc:
        result.error = exc
        cause = exc.__cause__ or exc.__context__
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result.trace = (
            f"raised in {where.name} ({Path(where.filename).name}:{where.lineno}) "
            f"{len(lines)} lines read, stream request {'sent' if started else 'not sent'}, "
            f"cause {cause!r}"
        )
    finally:
        result.frames = read_sse("\n".join(lines) + "\n\n")
        if started:
            result.total = time.perf_counter() - started


async def drive(
    run_one: Callable[[RunResult], Awaitable[None]], runs: int, concurrency: int, limit: float
) -> tuple[list[RunResult], float]:
    """Run `runs` runs with `concurrency` lanes, all within `limit` seconds; return the wall."""
    results: list[RunResult] = []
    indices = iter(range(runs))

    async def lane() -> None:
        for index in indices:
            result = RunResult(index)
            results.append(result)
            await run_one(result)

    started = time.perf_counter()
    tasks = [asyncio.ensure_future(lane()) for _ in range(min(concurrency, runs))]
    _done, pending = await asyncio.wait(tasks, timeout=limit)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    wall = time.perf_counter() - started
    for result in results:
        if result.total is None and result.error is None:
            result.error = TimeoutError(f"no end within {limit:.0f} s")
    return sorted(results, key=lambda r: r.index), wall


# -- processes: CPU and memory ------------------------------------------------------------


def reaped_cpu(pid: int) -> float:
    """CPU seconds of a process's children that exited and were waited for (cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[13]) + int(fields[14])) / TICK


def thread_cpu(tid: int) -> float:
    """CPU seconds of one thread of this process."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pss_mb(pid: int) -> float:
    """Proportional set size of a process and its live descendants in MiB (Linux /proc)."""
    total = 0.0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) / 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += pss_mb(int(child))
    return total


def self_cpu() -> float:
    """User + system CPU seconds of this process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Deployment:
    """A way to run the pipeline: how to run one, and which processes to account."""

    name: str
    run_one: Callable[[RunResult], Awaitable[None]]
    #: Name → pid of the processes that serve runs (empty: this process, raw).
    processes: dict[str, int] = field(default_factory=dict)
    #: Name → pid of PostgreSQL (postmaster) and Redis, accounted apart.
    services: dict[str, int] = field(default_factory=dict)
    #: Returns what the server kept about a failed run.
    inspect: Callable[[RunResult], str] = lambda _r: ""
    logs: list[Path] = field(default_factory=list)
    #: CPU seconds of threads of this process that are not the deployment's (raw).
    foreign_cpu: Callable[[], float] = lambda: 0.0

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each accounted process (raw: this process)."""
        if not self.processes:
            return {"bench": self_cpu() - self.foreign_cpu()}
        found = {name: cpu_seconds(pid) or 0.0 for name, pid in self.processes.items()}
        for name, pid in self.services.items():
            found[name] = (cpu_seconds(pid) or 0.0) + reaped_cpu(pid)
        return found

    def rss(self) -> dict[str, float]:
        """Resident MiB of each accounted process (with its children).

        PostgreSQL and Redis: their proportional set size (PSS), which counts the
        shared buffers once rather than once per backend.
        """
        pids = self.processes or {"bench": os.getpid()}
        found = {name: rss_mb(pid) or 0.0 for name, pid in pids.items()}
        return found | {name: pss_mb(pid) for name, pid in self.services.items()}


# -- one level of one way ------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


@dataclass
class Row:
    """What one (way, level) measurement found."""

    way: str
    concurrency: int
    runs: int
    wall: float
    results: list[RunResult]
    cpu: dict[str, float]
    rss: dict[str, float]
    load: tuple[float, float]
    own: list[str]
    #: CPU seconds of this process (the clients and the scripted model) over the level,
    #: when it is not the deployment (raw): on 2 cores it competes with the deployment.
    harness: float | None = None

    @property
    def failures(self) -> list[RunResult]:
        """The runs that did not succeed."""
        return [r for r in self.results if r.problem() is not None]

    @property
    def own_cpu(self) -> float:
        """Deployment CPU seconds over the level (PostgreSQL and Redis not included)."""
        return sum(self.cpu[name] for name in self.own)

    @property
    def cpu_per_run(self) -> float:
        """Deployment CPU ms per run (PostgreSQL and Redis not included)."""
        return self.own_cpu * 1000 / max(self.runs, 1)

    def line(self) -> str:
        """One table row."""
        good = [r for r in self.results if r.problem() is None]
        firsts = [r.first for r in good if r.first is not None]
        totals = [r.total for r in good if r.total is not None]
        rss = sum(self.rss[name] for name in self.own)
        return (
            f"{self.way:<9} {self.concurrency:>4} {self.runs:>5} {self.wall:>8.1f} "
            f"{len(good) / self.wall:>7.2f} {percentile(firsts, 0.5) * 1000:>8.0f} "
            f"{percentile(firsts, 0.95) * 1000:>8.0f} {percentile(totals, 0.99):>8.1f} "
            f"{self.cpu_per_run:>8.0f} {rss:>7.0f} {len(self.failures):>6}"
        )

    def detail(self) -> str:
        """CPU and RSS per process, load average."""
        cpu = ", ".join(f"{name} {value:.1f}" for name, value in self.cpu.items())
        rss = ", ".join(f"{name} {value:.0f}" for name, value in self.rss.items())
        statuses = Counter(r.status for r in self.results)
        harness = "" if self.harness is None else f", bench clients+model {self.harness:.1f}"
        return (
            f"{'':<15}CPU s: {cpu}{harness}; RSS MiB: {rss}; end statuses {dict(statuses)}; "
            f"load {self.load[0]:.2f} → {self.load[1]:.2f}; {self.slowest()}"
        )

    def slowest(self) -> str:
        """The slowest thread creation, first frame and run (what a wall beyond total99 is)."""

        def most(values: list[float | None]) -> float:
            return max((v for v in values if v is not None), default=math.nan)

        setup = most([r.setup for r in self.results])
        first = most([r.first for r in self.results])
        total = most([r.total for r in self.results])
        thread = "" if math.isnan(setup) else f"thread created in {setup:.1f} s, "
        return f"slowest: {thread}first frame {first * 1000:.0f} ms, run {total:.1f} s"


HEADER = (
    f"{'way':<9} {'c':>4} {'runs':>5} {'wall s':>8} {'runs/s':>7} {'first50':>8} "
    f"{'first95':>8} {'total99':>8} {'CPU ms/r':>8} {'RSS MiB':>7} {'failed':>6}"
)


async def measure(deployment: Deployment, runs: int, concurrency: int, limit: float) -> Row:
    """Measure one level on one deployment and print its row (and its failures)."""
    load_before = os.getloadavg()[0]
    cpu_before, harness_before = deployment.cpu(), self_cpu()
    results, wall = await drive(deployment.run_one, runs, concurrency, limit)
    cpu_after, harness_after = deployment.cpu(), self_cpu()
    row = Row(
        deployment.name,
        concurrency,
        runs,
        wall,
        results,
        {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        deployment.rss(),
        (load_before, os.getloadavg()[0]),
        [name for name in cpu_after if name not in deployment.services],
        None if not deployment.processes else harness_after - harness_before,
    )
    print(row.line(), flush=True)
    print(row.detail(), flush=True)
    for failure in row.failures:
        print(f"    FAILED {failure.describe()}", flush=True)
        kept = deployment.inspect(failure)
        for line in kept.splitlines():
            print(f"      {line}", flush=True)
    return row


# -- the three ways ------------------------------------------------------------------------


def log_lines(logs: list[Path], needles: list[str], limit: int = 12) -> list[str]:
    """Lines of the logs that name any of `needles` (a run id, a thread id)."""
    found: list[str] = []
    for log in logs:
        with contextlib.suppress(OSError):
            for line in log.read_text(errors="replace").splitlines():
                if any(needle in line for needle in needles):
                    found.append(f"{log.name}: {line[:300]}")
    return found[:limit]


def http_run(
    url: str, body: dict[str, Any], limit: float
) -> Callable[[RunResult], Awaitable[None]]:
    """Stream one run against a served deployment, each client on its own connection.

    A run borrows an idle client (made when none is idle) and gives it back after, so
    c lanes use c clients, as c users would, each reusing its keep-alive connection.
    One client shared by all would scan its whole pool of c connections on every
    request (httpcore): at 300 at once that cost the bench process more CPU than the
    model, CPU that the scale-out deployment, which uses both cores, competes for.
    """
    idle: list[httpx.AsyncClient] = []
    # One TLS context for all (plain HTTP here; httpx makes one per client otherwise,
    # loading the CA bundle: 300 clients made at once cost 4 s of the bench's CPU).
    tls = ssl.create_default_context()

    async def run_one(result: RunResult) -> None:
        client = (
            idle.pop()
            if idle
            else httpx.AsyncClient(
                base_url=url, timeout=httpx.Timeout(limit, connect=60), verify=tls
            )
        )
        try:
            await stream_one(client, body, result)
        finally:
            idle.append(client)

    return run_one


@contextlib.asynccontextmanager
async def raw_way(
    llm: ScriptedOpenAIServer, root: Path, run_input: dict[str, Any]
) -> AsyncIterator[Deployment]:
    """LangGraph `astream` in this process."""
    thread = llm._thread  # the scripted model's thread: its CPU is not the pipeline's
    assert thread is not None and thread.native_id is not None
    tid = thread.native_id
    async with raw_run(llm.base_url, root / "raw", run_input, subgraphs=False) as run_once:

        async def run_one(result: RunResult) -> None:
            started = time.perf_counter()
            try:
                result.first = await run_once()
                result.frames = [SseFrame(1, "end", {"status": "success"})]
            except Exception as exc:
                result.error = exc
            result.total = time.perf_counter() - started

        yield Deployment("raw", run_one, foreign_cpu=lambda: thread_cpu(tid))


@contextlib.contextmanager
def embedded_way(
    llm_url: str, root: Path, body: dict[str, Any], limit: float
) -> Iterator[Deployment]:
    """`atelier serve` with SQLite."""
    log_dir = root / "embedded"
    log_dir.mkdir()
    server = Child.serve_command("embedded", deployment_env(log_dir, llm_url), log_dir)
    server.start()
    try:
        server.wait_ready(180)

        def inspect(result: RunResult) -> str:
            with sqlite3.connect(log_dir / "data" / "atelier.db") as db:
                db.row_factory = sqlite3.Row
                rows = db.execute(
                    "SELECT * FROM runs WHERE run_id = ? OR thread_id = ?",
                    (result.run_id, result.thread_id),
                ).fetchall()
                lines = []
                for row in rows:
                    record = {k: row[k] for k in row.keys() if k != "kwargs"}  # noqa: SIM118
                    events = db.execute(
                        "SELECT count(*), max(id), group_concat(event) FROM "
                        "(SELECT id, event FROM run_events WHERE run_id = ? ORDER BY id DESC "
                        "LIMIT 3)",
                        (row["run_id"],),
                    ).fetchone()
                    count = db.execute(
                        "SELECT count(*) FROM run_events WHERE run_id = ?", (row["run_id"],)
                    ).fetchone()[0]
                    lines.append(f"row {record}")
                    lines.append(f"events: {count}, last ids ≤ {events[1]}: {events[2]}")
            needles = [n for n in (result.run_id, result.thread_id) if n]
            return "\n".join(lines + log_lines([server.log_path], needles))

        yield Deployment(
            "embedded",
            http_run(server.url, body, limit),
            {"serve": server.pid},
            inspect=inspect,
            logs=[server.log_path],
        )
    finally:
        server.stop()


@contextlib.contextmanager
def scale_way(
    llm_url: str, root: Path, body: dict[str, Any], limit: float, worker_concurrency: int
) -> Iterator[Deployment]:
    """Throwaway PostgreSQL + Redis, `atelier serve --workers 0` and two `atelier worker`."""
    bindir, redis_binary = postgres_bindir(), shutil.which("redis-server")
    if bindir is None or redis_binary is None:
        raise SystemExit("the scale way needs Debian's postgresql and redis-server")
    log_dir = root / "scale"
    log_dir.mkdir()
    postgres, redis = PostgresCluster(bindir), RedisServer(redis_binary)
    postgres.start()
    cluster: Cluster | None = None
    try:
        redis.start()
        env = deployment_env(log_dir, llm_url)
        env["RUN_WORKER_CONCURRENCY"] = str(worker_concurrency)
        env["RUN_LEASE_SECONDS"] = "30"  # the product's default, not the tests' 3
        cluster = Cluster(
            log_dir,
            database_url=postgres.create_database(),
            redis_url=redis.url,
            llm_base_url=llm_url,
            apis=1,
            workers=2,
            cli=True,
            env=env,
        )
        cluster.start()
        children = [*cluster.apis, *cluster.workers]
        assert postgres.root is not None
        postmaster = int((postgres.data / "postmaster.pid").read_text().split()[0])
        assert redis.process is not None
        logs = [child.log_path for child in children]

        def inspect(result: RunResult) -> str:
            assert cluster is not None and postgres.root is not None
            rows = cluster.query(
                "SELECT run_id, (to_jsonb(r) - 'kwargs')::text FROM runs r "
                "WHERE run_id = %s OR thread_id = %s",
                (result.run_id, result.thread_id),
            )
            lines = []
            for run_id, record in rows:
                events = cluster.query(
                    "SELECT count(*), max(seq), (array_agg(event ORDER BY seq DESC))[1:3] "
                    "FROM run_events WHERE run_id = %s",
                    (run_id,),
                )[0]
                lines.append(f"row {record}")
                lines.append(f"events: {events[0]}, last seq {events[1]}: {events[2]}")
            shutil.copy(postgres.root / "postgres.log", log_dir / "postgres.log")
            needles = [n for n in (result.run_id, result.thread_id) if n]
            return "\n".join(lines + log_lines(logs, needles))

        yield Deployment(
            "scale",
            http_run(cluster.apis[0].url, body, limit),
            {child.name: child.pid for child in children},
            {"postgres": postmaster, "redis": redis.process.pid},
            inspect=inspect,
            logs=logs,
        )
        cluster.check_invariants()
        print(
            f"{'':<15}scale: database invariants hold (one running run per thread, "
            "ids 1..n, one `end` per finished run)",
            flush=True,
        )
    finally:
        if cluster is not None:
            cluster.stop()
        redis.stop()
        postgres.stop()


def deployment_env(log_dir: Path, llm_url: str) -> dict[str, str]:
    """Settings of a served deployment (`bench_load.served_env`), its data under `log_dir`."""
    return {**served_env(log_dir / "data", llm_url), "SSE_HEARTBEAT_INTERVAL": "15"}


# -- the whole bench -----------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, llm: ScriptedOpenAIServer, model: TimedModel, root: Path
) -> tuple[list[Row], bool]:
    """Measure every way at every level; return the rows and whether any run failed."""
    body = run_body(args.full)
    levels = list(zip(args.concurrency, args.runs, strict=True))
    rows: list[Row] = []
    worker_concurrency = args.worker_concurrency or max(
        1, math.ceil(max(min(c, n) for c, n in levels) / 2)
    )
    print(f"scale: 1 API replica + 2 workers, RUN_WORKER_CONCURRENCY={worker_concurrency}\n")
    print(HEADER + "\n" + "-" * len(HEADER), flush=True)
    for way in args.ways:
        if way == "raw":
            opened: Any = raw_way(llm, root, body["input"])
        elif way == "embedded":
            opened = _sync(embedded_way(llm.base_url, root, body, args.limit))
        else:
            opened = _sync(scale_way(llm.base_url, root, body, args.limit, worker_concurrency))
        async with opened as deployment:
            model.arrivals.clear()
            warm = await measure_quiet(deployment, args.limit)
            if warm.problem() is None and not rows:
                chain = critical_path(model.arrivals, args.latency)
                print(
                    f"{'':<15}one run: {len(model.arrivals)} LLM calls, {chain} on its "
                    f"critical path (ideal {chain * args.latency:.0f} s), took "
                    f"{warm.total:.1f} s",
                    flush=True,
                )
            for concurrency, runs in levels:
                # The scripted model keeps every request it answers (tests read them);
                # the bench reads none. Kept, the bodies of thousands of calls made this
                # process's garbage collection a cost that grew with every level.
                llm.reset()
                rows.append(await measure(deployment, runs, concurrency, args.limit))
            if any(row.failures for row in rows if row.way == way):
                print(f"{'':<15}{way}: logs kept: {' '.join(map(str, deployment.logs))}")
    return rows, any(row.failures for row in rows)


@contextlib.asynccontextmanager
async def _sync(
    manager: contextlib.AbstractContextManager[Deployment],
) -> AsyncIterator[Deployment]:
    """Use a synchronous context manager (starting servers) in `async with`."""
    with manager as deployment:
        yield deployment


async def measure_quiet(deployment: Deployment, limit: float) -> RunResult:
    """One warm-up run."""
    results, _wall = await drive(deployment.run_one, 1, 1, limit)
    if results[0].problem() is not None:
        print(f"{'':<15}{deployment.name} warm-up run FAILED: {results[0].describe()}")
    return results[0]


def capacity(embedded: Row, scale: Row) -> str:
    """The cores each deployment kept busy, and the best wall ratio this machine allows.

    A bound, not a measurement: the scale-out deployment's wall if it spent exactly the
    embedded server's CPU per run, PostgreSQL, Redis, the API replica and the database
    client cost nothing, and the pipeline, the clients and the scripted model kept
    every core of the machine busy. The embedded server uses about one core (its event
    loop, plus threads for SQLite and the cards); the scale-out deployment shares all
    of them with PostgreSQL, the clients and the model. Where this bound is near a
    target, single comparisons land on both sides of it with the machine's noise.
    Only stated where the scale-out level kept at least 90 % of the cores busy
    (below that the runs wait on the model, not on CPU, and no such bound applies).
    """

    def used(row: Row) -> float:
        return sum(row.cpu.values()) + (row.harness or 0.0)

    cores = os.cpu_count() or 1
    scale_busy = used(scale) / scale.wall
    embedded_busy = used(embedded) / embedded.wall
    busy = f"cores busy embedded {embedded_busy:.2f}, scale {scale_busy:.2f} of {cores}"
    if scale_busy < 0.9 * cores:
        return busy
    best = (embedded.own_cpu + (scale.harness or 0.0)) / cores
    return (
        f"{busy}; best wall scale/embedded here {best / embedded.wall:.2f} "
        "(scale-out at the embedded CPU/run, its services free, every core busy)"
    )


def summary(rows: list[Row]) -> None:
    """Ratios: scale-out wall against embedded, CPU per run against raw."""
    print(
        "\nratios (issue 13 targets: wall(scale)/wall(embedded) ≤ 0.6 at 300 at once; "
        "CPU/run ≤ 1.1× raw):"
    )
    by_level: dict[tuple[int, int], dict[str, Row]] = {}
    for row in rows:
        by_level.setdefault((row.concurrency, row.runs), {})[row.way] = row
    for (concurrency, runs), ways in by_level.items():
        parts = []
        if "scale" in ways and "embedded" in ways:
            parts.append(f"wall scale/embedded {ways['scale'].wall / ways['embedded'].wall:.2f}")
            parts.append(capacity(ways["embedded"], ways["scale"]))
        if "raw" in ways:
            raw = ways["raw"].cpu_per_run
            for name in ("embedded", "scale"):
                if name in ways and raw > 0:
                    parts.append(f"CPU/run {name}/raw {ways[name].cpu_per_run / raw:.2f}")
            if "scale" in ways and raw > 0:
                row = ways["scale"]
                services = sum(row.cpu[n] for n in row.cpu if n not in row.own)
                with_services = (row.cpu_per_run + services * 1000 / row.runs) / raw
                parts.append(f"scale with PostgreSQL+Redis/raw {with_services:.2f}")
        print(f"  c={concurrency:<4} runs={runs:<4} " + "; ".join(parts))


def main() -> None:
    """Parse the arguments, start the scripted model, run the bench, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50, 300])
    parser.add_argument(
        "--runs", type=int, nargs="+", default=[3, 100, 300], help="runs per --concurrency value"
    )
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per LLM call")
    parser.add_argument(
        "--ways",
        nargs="+",
        default=["raw", "embedded", "scale"],
        choices=["raw", "embedded", "scale"],
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=0,
        help="runs per worker (default: the largest level / 2)",
    )
    parser.add_argument("--limit", type=float, default=1800, help="seconds per level")
    parser.add_argument("--full", action="store_true", help="full runs, not fast_mode")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="directory for the deployments' data and logs (default: a "
        "temporary one, removed unless a run failed)",
    )
    args = parser.parse_args()
    if len(args.runs) != len(args.concurrency):
        parser.error("--runs takes one count per --concurrency value")
    root = Path(tempfile.mkdtemp(prefix="atelier-bench-scale-", dir=args.keep))
    model = TimedModel(args.latency)
    print(
        f"bench_scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"model latency {args.latency:g} s; input {run_body(args.full)['input']}"
    )
    print(
        "first = stream request → first frame (ms); total99 = request → `end` p99 (s); "
        "CPU ms/r = deployment CPU per run (PostgreSQL, Redis apart); RSS after the level"
    )
    # The clients and the model share the machine's cores with the deployment under
    # test (all of them, in the scale-out way): both run on uvloop, as the deployments
    # do, so that the load they put on the machine is mostly the deployment's own.
    with ScriptedOpenAIServer(model, loop_factory=uvloop.new_event_loop) as llm:
        rows, failed = uvloop.run(bench(args, llm, model, root))
    summary(rows)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if failed:
        print(f"runs failed: data and logs kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
