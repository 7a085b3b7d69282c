"""Benchmark what tracing costs: server CPU per pipeline run, tracing off and on, side by side.

    .venv/bin/python bench/bench_tracing.py [--runs 20]

Three services run at once, each a real uvicorn in a child process (as
`tests/app/serve.py` starts it) with the real `atelier` pipeline on the scripted
OpenAI server (this process; it answers at once):

* **off**: no OTEL_* setting (the default): no provider, no span;
* **on**: OTEL_EXPORTER_OTLP_ENDPOINT set to an OTLP/HTTP receiver in this process
  (`tests/support/otlp.py`, decoding every export): every span made and exported;
* **on, sampled out**: the same with OTEL_TRACES_SAMPLER=always_off: the spans'
  bookkeeping without recording or export.

Runs go to the three in turn (`POST /runs/wait`, one at a time), so load from
elsewhere on the machine falls on all three alike. The figure is the child's CPU
time (user + system, Linux /proc) from the first measured run to a few seconds after
the last (the batch exporter's last export included), divided by the runs.
Two warm-up runs each are not measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.app.atelier_llm import atelier_responder  # noqa: E402
from tests.app.harness import ServerProcess  # noqa: E402
from tests.support.otlp import OtlpReceiver  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAIServer  # noqa: E402

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
WARM_UP = 2
#: Seconds past the SDK's batch delay (5 s), so the last spans' export is counted.
EXPORT_WAIT = 6.0


def cpu_seconds(pid: int) -> float:
    """Return a process's CPU time so far (user + system), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(http: httpx.Client) -> float:
    """Run the pipeline once and wait for it; return the wall seconds."""
    body = {"assistant_id": "atelier", "input": {"request": REQUEST, "auto_confirm": True}}
    started = time.perf_counter()
    response = http.post("/runs/wait", json=body)
    response.raise_for_status()
    assert response.json()["result"]["outcome"] == "completed", response.text[:300]
    return time.perf_counter() - started


def main() -> None:
    """Measure the three services and print CPU per run side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="measured runs per service")
    args = parser.parse_args()
    with (
        ScriptedOpenAIServer(atelier_responder()) as llm,
        OtlpReceiver() as receiver,
        tempfile.TemporaryDirectory() as tmp,
    ):
        variants = {
            "off": {},
            "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
            "on, sampled out": {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_TRACES_SAMPLER": "always_off",
            },
        }
        servers = {
            name: ServerProcess(Path(tmp) / str(i), llm.base_url, graphs="atelier", env=env)
            for i, (name, env) in enumerate(variants.items())
        }
        for server in servers.values():
            server.data_dir.mkdir(parents=True)
            server.start()
        try:
            clients = {
                name: httpx.Client(base_url=server.url, timeout=120)
                for name, server in servers.items()
            }
            for _ in range(WARM_UP):
                for client in clients.values():
                    one_run(client)
            pids = {name: server.process.pid for name, server in servers.items()}  # type: ignore[union-attr]
            started = {name: cpu_seconds(pid) for name, pid in pids.items()}
            wall: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.runs):
                for name, client in clients.items():
                    wall[name].append(one_run(client))
            time.sleep(EXPORT_WAIT)  # the last batch of spans is exported too
            cpu = {name: cpu_seconds(pid) - started[name] for name, pid in pids.items()}
            for client in clients.values():
                client.close()
        finally:
            for server in servers.values():
                server.stop()
        print("Atelier tracing benchmark (atelier pipeline, scripted LLM answering at once;")
        print(f"server: uvicorn in a child process; {args.runs} runs each, interleaved)\n")
        base = cpu["off"] / args.runs
        print(f"{'tracing':<18}{'CPU ms/run':>12}{'× off':>8}{'wall ms/run (median)':>24}")
        for name in servers:
            per_run = cpu[name] / args.runs
            median = statistics.median(wall[name]) * 1000
            print(f"{name:<18}{per_run * 1000:>12.1f}{per_run / base:>8.2f}{median:>24.0f}")
        print(f"\nspans received by the OTLP receiver: {len(receiver.received())}")


if __name__ == "__main__":
    main()
