"""Benchmark the run stream: time to the first frame and frames per second on one stream.

    .venv/bin/python bench/bench_stream.py [--runs 20] [--events 20000]

The service runs in a child process (a real uvicorn on 127.0.0.1, as
`tests/app/serve.py` starts it) with a fresh DATA_DIR; its LLM is the scripted
OpenAI server in this process (`tests/support/scripted_openai.py`), which
answers at once. This process is the SSE client (httpx, reading raw lines).

Measured:

* **first frame**: from sending `POST /runs/stream` to receiving the `metadata`
  frame, and to the first `custom` frame (the planner's `stage.started`), for the
  real `atelier` pipeline; also the whole run, for scale, and how long the same
  pipeline takes to its first custom event with no service in between.
* **frames/s**: one stream of the `burst` test graph, which emits `--events`
  custom events from one node as fast as it can: frames received per second
  from the first frame to `end`, next to how fast the same graph emits them
  with no service in between (`graph.astream` in this process).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.app.atelier_llm import atelier_responder  # noqa: E402
from tests.app.harness import ServerProcess, SseFrame, parse_sse  # noqa: E402
from tests.app.sample_graphs import build_burst  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAIServer  # noqa: E402

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


def first_frames(url: str, runs: int) -> dict[str, list[float]]:
    """Stream `runs` atelier runs; return seconds to metadata, first custom, end."""
    out: dict[str, list[float]] = {"metadata": [], "custom": [], "end": []}
    body = {
        "assistant_id": "atelier",
        "input": {"request": REQUEST, "auto_confirm": True},
        "stream_mode": ["updates", "custom", "messages-tuple"],
        "stream_subgraphs": True,
    }
    with httpx.Client(base_url=url, timeout=120) as http:
        http.get("/ok")  # the connection is open before the clock starts
        for _ in range(runs):
            marks: dict[str, float] = {}
            started = time.perf_counter()
            with http.stream("POST", "/runs/stream", json=body) as response:
                response.raise_for_status()
                for item in parse_sse(response.iter_lines()):
                    if not isinstance(item, SseFrame):
                        continue
                    kind = item.event.split("|")[0]
                    if kind in out and kind not in marks:
                        marks[kind] = time.perf_counter() - started
            for kind, seconds in marks.items():
                out[kind].append(seconds)
    return out


def stream_rate(url: str, events: int) -> tuple[int, float]:
    """Stream one burst run; return frames received and seconds from first frame to end."""
    body = {"assistant_id": "burst", "input": {"count": events}, "stream_mode": "custom"}
    frames = 0
    first = last = 0.0
    with (
        httpx.Client(base_url=url, timeout=300) as http,
        http.stream("POST", "/runs/stream", json=body) as response,
    ):
        response.raise_for_status()
        for item in parse_sse(response.iter_lines()):
            if isinstance(item, SseFrame):
                frames += 1
                last = time.perf_counter()
                if frames == 1:
                    first = last
    return frames, last - first


async def pipeline_first_custom(llm_url: str, data_dir: Path, runs: int) -> list[float]:
    """Return seconds from `astream` to the first custom event of the pipeline in-process."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agentkit.services import build_context
    from graphs.pipeline import build_pipeline
    from providers.llm import OpenAIModelFactory
    from tests.app.harness import service_settings

    settings = service_settings(data_dir, llm_url)
    context = build_context(settings, models=OpenAIModelFactory(settings))
    seconds: list[float] = []
    async with AsyncSqliteSaver.from_conn_string(str(data_dir / "graph-only.db")) as saver:
        graph = build_pipeline(checkpointer=saver)
        for index in range(runs + 2):
            started = time.perf_counter()
            first = None
            async for _ns, mode, _chunk in graph.astream(
                {"request": REQUEST, "auto_confirm": True},
                {"configurable": {"thread_id": f"bench-{index}"}},
                context=context,
                stream_mode=["custom", "updates"],
                subgraphs=True,
            ):
                if mode == "custom" and first is None:
                    first = time.perf_counter() - started
            if index >= 2 and first is not None:  # the first two warm up
                seconds.append(first)
    return seconds


async def graph_rate(events: int) -> float:
    """Return events per second the burst graph emits with no service in between."""
    graph = build_burst()
    started = time.perf_counter()
    count = 0
    async for _ in graph.astream({"count": events}, stream_mode="custom"):
        count += 1
    return count / (time.perf_counter() - started)


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   "
        f"min {ordered[0] * 1000:7.1f} ms   (n={len(ordered)})"
    )


def main() -> None:
    """Run both measurements and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="atelier runs to time")
    parser.add_argument("--events", type=int, default=20000, help="events in the burst run")
    args = parser.parse_args()

    with ScriptedOpenAIServer(atelier_responder()) as llm, tempfile.TemporaryDirectory() as tmp:
        print("Atelier stream benchmark (server: uvicorn in a child process on 127.0.0.1,")
        print("LLM: scripted OpenAI-compatible server answering at once)\n")

        server = ServerProcess(Path(tmp) / "atelier", llm.base_url, graphs="atelier")
        (Path(tmp) / "atelier").mkdir()
        server.start()
        try:
            first_frames(server.url, 2)  # warm-up: imports, connection pools, caches
            marks = first_frames(server.url, args.runs)
        finally:
            server.stop()
        print("atelier pipeline, POST /runs/stream →")
        print(f"  first frame (metadata)     {ms(marks['metadata'])}")
        print(f"  first custom event         {ms(marks['custom'])}")
        print(f"  end of run                 {ms(marks['end'])}")
        alone = asyncio.run(pipeline_first_custom(llm.base_url, Path(tmp), min(args.runs, 10)))
        print("  the pipeline alone (graph.astream, no service) to its first custom event:")
        print(f"                             {ms(alone)}")

        server = ServerProcess(Path(tmp) / "sample", llm.base_url, graphs="sample")
        (Path(tmp) / "sample").mkdir()
        server.start()
        try:
            stream_rate(server.url, 1000)  # warm-up
            frames, seconds = stream_rate(server.url, args.events)
        finally:
            server.stop()
        emitted = asyncio.run(graph_rate(args.events))
        print(f"\none stream of {args.events} custom events (burst graph) →")
        print(f"  received {frames} frames in {seconds:.2f} s: {frames / seconds:,.0f} frames/s")
        print(f"  the graph alone emits       {emitted:,.0f} events/s (graph.astream, no service)")


if __name__ == "__main__":
    main()
