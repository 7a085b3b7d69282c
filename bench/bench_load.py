"""Benchmark many streamed runs started at once on one `atelier serve`.

    .venv/bin/python bench/bench_load.py [--runs 100] [--latency 1.0] [--full]

(the acceptance figure of issue 11 is `--runs 300 --latency 1`; the default keeps
`./dev bench` short.)

The service is `atelier serve` (`cli.serve`'s `serve` command: uvicorn in a child
process, the real `atelier` pipeline, a fresh DATA_DIR). Its LLM is the scripted
OpenAI server in this process (`tests/support/scripted_openai.py`), answering
every call of the pipeline's normal path after `--latency` seconds. This process
is every client: like the official SDK, each creates a thread (`POST /threads`) and
streams a run on it (`POST /threads/{id}/runs/stream`), all at the same moment,
and reads its stream to the end. Runs use `fast_mode` and one image unless `--full`.

Printed:

* one run alone first: its LLM calls, how many of them lie on its critical path
  (calls that cannot overlap, at `--latency` each), and its wall time;
* then `--runs` runs at once: how many streams ended with `end`, how many were
  gapless (ids 1..n), run statuses, runs left `pending`/`running` in the database
  afterwards, `atelier_active_runs` afterwards, "database is locked" lines in the
  server log, and the wall time against the ideal (critical-path calls × latency:
  what the runs would take if nothing but the model's latency held them up);
* the machine's load average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.app.atelier_llm import atelier_responder  # noqa: E402
from tests.app.harness import SseFrame, free_port, read_sse  # noqa: E402
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer  # noqa: E402

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


class TimedModel:
    """The pipeline's scripted replies after a fixed latency; records when each call came."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.inner = atelier_responder()
        self.arrivals: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, req: ChatRequest) -> Reply:
        with self._lock:
            self.arrivals.append(time.monotonic())
        return Reply.delay(self.latency, self.inner(req))


def critical_path(arrivals: list[float], latency: float) -> int:
    """Return the longest chain of calls where each starts after the previous answered."""
    chain, free_at = 0, float("-inf")
    for start in sorted(arrivals):
        if start >= free_at - 0.05 * latency:
            chain += 1
            free_at = start + latency
    return chain


def served_env(data_dir: Path, llm_url: str) -> dict[str, str]:
    """Settings of a served deployment: the scripted model, no retries, generous timeouts."""
    return {
        "PYTHONPATH": str(REPO_ROOT),
        "DATA_DIR": str(data_dir),
        "LLM_BASE_URL": llm_url,
        "LLM_API_KEY": "bench",
        "LLM_MODEL": "scripted",
        "LLM_MAX_RETRIES": "0",
        "LLM_TIMEOUT": "600",
        "RUN_TIMEOUT": "3600",
        "AUTH_API_KEYS": "",
    }


class AtelierServe:
    """`atelier serve` in a child process with its own DATA_DIR."""

    def __init__(self, data_dir: Path, llm_url: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = data_dir / "serve.log"
        self.llm_url = llm_url
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AtelierServe:
        env = {**os.environ, **served_env(self.data_dir, self.llm_url)}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                # The `atelier` console script's entry point (cli.main has no __main__).
                [
                    sys.executable,
                    "-c",
                    "from cli.main import main; main()",
                    "serve",
                    "--port",
                    str(self.port),
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self.log_path.read_text()[-2000:])
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("atelier serve did not start")

    def __exit__(self, *_exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def run_body(full: bool) -> dict:
    run_input: dict = {"request": REQUEST, "auto_confirm": True}
    if not full:
        run_input |= {"fast_mode": True, "image_count": 1}
    return {"assistant_id": "atelier", "input": run_input, "stream_mode": ["custom", "updates"]}


async def stream_run(
    client: httpx.AsyncClient, body: dict, t0: float
) -> tuple[list[SseFrame], float]:
    created = await client.post("/threads", json={})
    created.raise_for_status()
    path = f"/threads/{created.json()['thread_id']}/runs/stream"
    async with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        text = "\n".join([line async for line in response.aiter_lines()])
    return read_sse(text + "\n\n"), time.monotonic() - t0


async def stream_many(url: str, runs: int, body: dict, limit: float) -> tuple[list, float]:
    limits = httpx.Limits(max_connections=runs + 10, max_keepalive_connections=runs + 10)
    timeout = httpx.Timeout(limit, connect=60)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(stream_run(client, body, t0)) for _ in range(runs)]
        _done, pending = await asyncio.wait(tasks, timeout=limit)
        for task in pending:
            task.cancel()
        wall = time.monotonic() - t0
        results = [
            TimeoutError("no end within the limit")
            if task in pending
            else (task.exception() or task.result())
            for task in tasks
        ]
        return results, wall


def active_gauge(url: str) -> str:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    match = re.search(r"^atelier_active_runs (\S+)$", text, re.M)
    return match.group(1) if match else "?"


def main() -> None:
    """Measure one run alone, then `--runs` at once, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs started at once")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per LLM call")
    parser.add_argument("--limit", type=float, default=1800, help="seconds before giving up")
    parser.add_argument("--full", action="store_true", help="full runs, not fast_mode")
    args = parser.parse_args()
    body = run_body(args.full)
    load_before = os.getloadavg()

    model = TimedModel(args.latency)
    with (
        ScriptedOpenAIServer(model) as llm,
        tempfile.TemporaryDirectory() as tmp,
        AtelierServe(Path(tmp), llm.base_url) as server,
    ):
        print(f"atelier serve (uvicorn child process) on {server.url}, DATA_DIR {tmp}")
        print(f"scripted model: {args.latency:g} s per call; runs: {body['input']}\n")

        alone, alone_wall = asyncio.run(stream_many(server.url, 1, body, args.limit))
        frames = alone[0][0] if not isinstance(alone[0], BaseException) else []
        calls = len(model.arrivals)
        chain = critical_path(model.arrivals, args.latency)
        ideal = chain * args.latency
        print(
            f"one run alone: {calls} LLM calls, {chain} on its critical path; "
            f"{len(frames)} frames; wall {alone_wall:.1f} s (ideal {ideal:.0f} s)"
        )

        model.arrivals.clear()
        results, wall = asyncio.run(stream_many(server.url, args.runs, body, args.limit))
        streams = [r for r in results if not isinstance(r, BaseException)]
        failed = [r for r in results if isinstance(r, BaseException)]
        ended = [s for s in streams if s[0] and s[0][-1].event == "end"]
        gapless = [s for s in ended if [f.id for f in s[0]] == list(range(1, len(s[0]) + 1))]
        statuses = Counter(s[0][-1].data.get("status") for s in ended)
        durations = sorted(s[1] for s in ended)
        time.sleep(1)
        gauge = active_gauge(server.url)
        with sqlite3.connect(Path(tmp) / "atelier.db") as db:
            left = db.execute(
                "SELECT count(*) FROM runs WHERE status IN ('pending', 'running')"
            ).fetchone()[0]
        log_lines = server.log_path.read_text(errors="replace").splitlines()
        locked = [line for line in log_lines if "database is locked" in line]

    load_after = os.getloadavg()
    print(f"\n{args.runs} runs started at once:")
    print(
        f"  ended with `end`        {len(ended)} / {args.runs}"
        f"   (statuses {dict(statuses)}; client errors/timeouts {len(failed)})"
    )
    print(f"  gapless ids 1..n        {len(gapless)} / {args.runs}")
    print(f"  left pending/running    {left}   atelier_active_runs afterwards {gauge}")
    print(f"  'database is locked'    {len(locked)} line(s) in the server log")
    for line in locked[:3]:
        print(f"      {line[:160]}")
    print(f"  LLM calls               {len(model.arrivals)}")
    if durations:
        print(
            f"  run wall time           median {statistics.median(durations):.1f} s, "
            f"p95 {durations[int(0.95 * (len(durations) - 1))]:.1f} s, "
            f"last {durations[-1]:.1f} s"
        )
    print(
        f"  all runs, wall time     {wall:.1f} s   vs ideal {ideal:.0f} s "
        f"({chain} critical-path calls × {args.latency:g} s): {wall / max(ideal, 1e-9):.1f}×"
    )
    print(
        f"\nload average before {load_before[0]:.2f} / after {load_after[0]:.2f} "
        f"(1 min; {os.cpu_count()} CPUs)"
    )
    if failed:
        print(f"first failures: {failed[:3]!r}")


if __name__ == "__main__":
    main()
