"""Benchmark one pipeline three ways: raw LangGraph, `atelier serve`, `langgraph dev`.

    .venv/bin/python bench/bench_dialects.py [--concurrency 1 50] [--runs 20 300]

The same `atelier` pipeline and the same scripted model (the scripted OpenAI
server in this process, `tests/app/atelier_llm.py`, answering at once; one image
per post, drawn by the local card renderer) run to a post:

* **raw**: `graph.astream` in this process (the served graph with the services
  `graphs.served` opens, an in-memory checkpointer, no HTTP);
* **atelier serve**: the service in a child process (`tests/app/serve.py`), its
  runs on SQLite, streamed with the official `langgraph-sdk` client;
* **langgraph dev**: `langgraph dev --config langgraph.json` in a child process
  (blocking-call detection on), default (one run at a time) and with
  `--n-jobs-per-worker 50`, streamed with the same client.

At each concurrency c, c clients each stream runs on their own threads until
that concurrency's `--runs` runs are done (one count for all, or one per
concurrency: `--concurrency 1 50 --runs 20 300` measures the server's memory
after 300 runs at c=50). Printed: runs/s, seconds from sending the request to the
first frame (the SDK's `metadata` event; raw: the first chunk) p50/p95, and the
resident memory of the server process (with its children, if any) after the two
warm-up runs and after the measured runs, and the CPU time that process spent
per completed run, which a machine shared with other work disturbs less than
runs/s (raw: this process, which also holds the scripted model, the clients and
what the rows before it left; its CPU time includes theirs).

The scripted model answers on sockets with Nagle's algorithm off
(`tests/support/scripted_openai.py`): before, every keep-alive request waited ~40 ms
for a delayed ACK, so a run spent most of its time waiting for a model that is meant
to answer at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph_sdk import get_client  # noqa: E402

from graphs.served import atelier, served_services  # noqa: E402
from tests.app.atelier_llm import atelier_responder  # noqa: E402
from tests.app.harness import ServerProcess, service_settings  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAIServer  # noqa: E402
from tests.test_langgraph_dev import LanggraphDev  # noqa: E402

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
INPUT = {"request": REQUEST, "auto_confirm": True, "image_count": 1}
STREAM_MODE = ["updates", "custom"]

#: One run: returns seconds to its first frame; raises when the run did not complete.
RunOnce = Callable[[], Awaitable[float]]


@dataclass
class Figures:
    """What one (way, concurrency) measurement found."""

    runs: int
    seconds: float
    first_frames: list[float]
    failures: int
    rss_start: float | None = None
    rss_end: float | None = None
    cpu_seconds: float | None = None

    def line(self, label: str) -> str:
        """Format one table row: runs/s and CPU/run count the runs that completed."""
        completed = len(self.first_frames)
        ordered = sorted(self.first_frames) or [float("nan")]
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        cpu = (
            self.cpu_seconds * 1000 / completed
            if self.cpu_seconds is not None and completed
            else None
        )
        rss_cpu = " ".join(
            f"{value:9.0f}" if value is not None else f"{'-':>9}"
            for value in (self.rss_start, self.rss_end, cpu)
        )
        return (
            f"{label:<42} {self.runs:9d} {completed / self.seconds:9.2f} "
            f"{statistics.median(ordered) * 1000:7.0f}ms {p95 * 1000:7.0f}ms {rss_cpu} "
            f"{self.failures:9d}"
        )


async def measure(
    run_once: RunOnce, runs: int, concurrency: int, pid: int | None = None
) -> Figures:
    """Run `runs` runs with `concurrency` clients; time them.

    With `pid`, also the RSS of that process before and after, and its CPU time.
    """
    rss_start = rss_mb(pid) if pid is not None else None
    cpu_start = cpu_seconds(pid) if pid is not None else None
    left = runs
    first_frames: list[float] = []
    failures = 0

    async def client() -> None:
        nonlocal left, failures
        while left > 0:
            left -= 1
            try:
                first_frames.append(await run_once())
            except Exception as exc:
                failures += 1
                print(f"  run failed: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    figures = Figures(runs, time.perf_counter() - started, first_frames, failures)
    if pid is not None:
        figures.rss_start, figures.rss_end = rss_start, rss_mb(pid)
        cpu_end = cpu_seconds(pid)
        if cpu_start is not None and cpu_end is not None:
            figures.cpu_seconds = cpu_end - cpu_start
    return figures


def sdk_run(url: str) -> RunOnce:
    """One run streamed through the official SDK on a new thread."""
    client = get_client(url=url, timeout=300)

    async def run_once() -> float:
        thread = await client.threads.create()
        started = time.perf_counter()
        first: float | None = None
        async for part in client.runs.stream(
            thread["thread_id"],
            "atelier",
            input=INPUT,
            stream_mode=STREAM_MODE,
            stream_subgraphs=True,
        ):
            if first is None:
                first = time.perf_counter() - started
            if part.event == "error":
                raise RuntimeError(str(part.data))
        state = await client.threads.get_state(thread["thread_id"])
        outcome = (state["values"].get("result") or {}).get("outcome")
        if outcome != "completed" or first is None:
            raise RuntimeError(f"run ended {outcome!r}")
        return first

    return run_once


@asynccontextmanager
async def raw_run(
    llm_url: str,
    data_dir: Path,
    run_input: dict[str, Any] | None = None,
    *,
    subgraphs: bool = True,
) -> AsyncIterator[RunOnce]:
    """One run through `astream` in this process, on the services of `graphs.served`.

    `run_input`: the pipeline's input (default `INPUT`); `subgraphs`: stream the
    subgraphs' chunks too (as `stream_subgraphs=True` does on the server).
    """
    run_input = run_input or INPUT
    async with served_services(service_settings(data_dir, llm_url)):
        graph = atelier.copy(update={"checkpointer": InMemorySaver()})

        async def run_once() -> float:
            started = time.perf_counter()
            first: float | None = None
            values: dict[str, Any] = {}
            async for part in graph.astream(
                run_input,
                {"configurable": {"thread_id": str(uuid.uuid4())}},
                context={},
                stream_mode=[*STREAM_MODE, "values"],
                subgraphs=subgraphs,
            ):
                if first is None:
                    first = time.perf_counter() - started
                ns, mode, chunk = part if subgraphs else ((), *part)
                if mode == "values" and not ns:
                    values = chunk
            outcome = (values.get("result") or {}).get("outcome")
            if outcome != "completed" or first is None:
                raise RuntimeError(f"run ended {outcome!r}")
            return first

        yield run_once


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process and its descendants in MiB (Linux /proc).

    None when the process is gone or /proc cannot tell.
    """
    try:
        kib = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                kib = int(line.split()[1])
        children: list[int] = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return None
    return kib / 1024 + sum(rss_mb(child) or 0.0 for child in children)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its live descendants (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children: list[int] = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError, IndexError):
        return None
    # After the ")" that ends the command name: field 3 (state) is fields[0],
    # so utime (14) and stime (15) are fields[11] and fields[12].
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) or 0.0 for child in children)


def langgraph_dev_project(root: Path, llm_url: str) -> Path:
    """A project directory with the repository's langgraph.json and a .env of settings."""
    project = root / f"project-{uuid.uuid4().hex[:6]}"
    project.mkdir()
    shutil.copy(REPO_ROOT / "langgraph.json", project / "langgraph.json")
    (project / ".env").write_text(
        f"LLM_BASE_URL={llm_url}\nLLM_API_KEY=test\nLLM_MODEL=scripted\n"
        f"LLM_MAX_RETRIES=0\nDATA_DIR={project / 'data'}\n",
        encoding="utf-8",
    )
    return project


async def bench(args: argparse.Namespace, llm_url: str, root: Path) -> None:
    """Measure every way at every concurrency and print the table."""
    columns = (
        *("runs", "runs/s", "first p50", "first p95"),
        *("RSS 0 MiB", "RSS MiB", "CPU ms/rn", "failed"),
    )
    header = f"{'way':<42} " + " ".join(f"{column:>9}" for column in columns)
    print(header + "\n" + "-" * len(header))
    counts = args.runs if len(args.runs) > 1 else args.runs * len(args.concurrency)
    runs_at = dict(zip(args.concurrency, counts, strict=True))
    for concurrency in args.concurrency:
        runs = runs_at[concurrency]
        label = f"c={concurrency:<3}"
        async with raw_run(llm_url, root / f"raw-{concurrency}") as run_once:
            await measure(run_once, 2, 1)  # warm-up
            figures = await measure(run_once, runs, concurrency, os.getpid())
        print(figures.line(f"{label} raw LangGraph astream"), flush=True)

        data_dir = root / f"serve-{concurrency}"
        data_dir.mkdir()
        serve = ServerProcess(data_dir, llm_url, graphs="atelier").start(timeout=180)
        try:
            run_once = sdk_run(serve.url)
            await measure(run_once, 2, 1)
            assert serve.process is not None
            figures = await measure(run_once, runs, concurrency, serve.process.pid)
        finally:
            serve.stop()
        print(figures.line(f"{label} atelier serve"), flush=True)

        for extra in ((), ("--n-jobs-per-worker", "50")):
            name = "langgraph dev" + (" --n-jobs-per-worker 50" if extra else "")
            with LanggraphDev(langgraph_dev_project(root, llm_url), *extra) as dev:
                run_once = sdk_run(dev.url)
                await measure(run_once, 2, 1)
                assert dev.process is not None
                figures = await measure(run_once, runs, concurrency, dev.process.pid)
            print(figures.line(f"{label} {name}"), flush=True)


def main() -> None:
    """Parse the arguments, start the scripted model, run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        type=int,
        nargs="+",
        default=[20],
        help="runs per way: one count, or one per --concurrency value",
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 50], help="concurrent clients"
    )
    args = parser.parse_args()
    if len(args.runs) not in (1, len(args.concurrency)):
        parser.error("--runs takes one count or one per --concurrency value")
    print("One pipeline three ways (scripted model answering at once, one image per post;")
    print(f"runs per row {args.runs} at c={args.concurrency}, after 2 warm-up runs;")
    print("first frame = request → first frame; runs/s counts completed runs;")
    print("RSS 0 = after the warm-up, RSS = after the runs; CPU ms/rn = the server")
    print("process's user+system CPU per completed run, raw: the whole bench process)\n")
    with (
        ScriptedOpenAIServer(atelier_responder(images=1)) as llm,
        tempfile.TemporaryDirectory() as tmp,
    ):
        asyncio.run(bench(args, llm.base_url, Path(tmp)))


if __name__ == "__main__":
    main()
