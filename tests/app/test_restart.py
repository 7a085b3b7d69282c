"""A server killed mid-run (SIGKILL) and started again finishes the run under the same id.

The service runs in a child process (`python -m tests.app.serve`) with the real
`atelier` pipeline; its LLM is the scripted server in this process, whose writer
hangs on the first attempt so the kill lands mid-run. After the restart the run
resumes from its last checkpoint, and a rejoin from id 0 replays one coherent
stream: ids 1..N without a gap or a repeat, a `metadata` frame per attempt, one
`end`, last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import ServerProcess, SseFrame, parse_sse, read_sse, wait_until
from tests.app.sample_graphs import scripted_reply
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

pytestmark = pytest.mark.slow

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


def test_a_killed_server_resumes_the_run_and_its_stream(tmp_path: Path) -> None:
    inner = atelier_responder()
    writer_calls: list[ChatRequest] = []

    def responder(req: ChatRequest) -> Reply:
        reply = inner(req)
        if not req.tools:
            writer_calls.append(req)
            if len(writer_calls) == 1:
                return Reply.delay(60, reply)  # the first writer never answers in time
        return reply

    with ScriptedOpenAIServer(responder) as llm:
        server = ServerProcess(
            tmp_path, llm.base_url, graphs="atelier", env={"SSE_HEARTBEAT_INTERVAL": "0.2"}
        )
        try:
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as http:
                body = {
                    "assistant_id": "atelier",
                    "input": {"request": REQUEST, "auto_confirm": True},
                    "stream_mode": ["updates", "custom"],
                    "stream_subgraphs": True,
                }
                run: dict[str, Any] = http.post("/runs", json=body).json()
                path = f"/threads/{run['thread_id']}/runs/{run['run_id']}"
                wait_until(lambda: len(writer_calls) >= 1, timeout=60)
                # A client follows the run until it goes idle (the writer hangs)...
                seen: list[SseFrame] = []
                with http.stream("GET", f"{path}/stream") as stream:
                    for item in parse_sse(stream.iter_lines()):
                        if isinstance(item, SseFrame):
                            seen.append(item)
                        elif seen:
                            break  # a heartbeat: nothing more is coming for now
                server.kill()  # ...and the server dies without any shutdown code

            server.start()
            with httpx.Client(base_url=server.url, timeout=60) as http:
                frames = read_sse(http.get(f"{path}/stream").text)  # follows to the end
                record = http.get(path).json()
        finally:
            server.stop()

    assert record["status"] == "success" and record["attempt"] == 2
    assert [f.id for f in frames] == list(range(1, len(frames) + 1)), [
        (f.id, f.event) for f in frames
    ]
    assert [f.data["attempt"] for f in frames if f.event == "metadata"] == [1, 2]
    assert frames[0].event == "metadata"
    assert [f.event for f in frames].count("end") == 1 and frames[-1].event == "end"
    assert frames[-1].data["status"] == "success"
    assert len(writer_calls) == 2  # the killed attempt's call, and the resumed one
    # What a client saw before the crash was durable: the replay starts with exactly it.
    assert seen and frames[: len(seen)] == seen


def test_a_kill_during_a_runs_first_commit_resumes_it_with_a_coherent_stream(
    tmp_path: Path,
) -> None:
    # The server pauses inside the transaction of the run's very first frame (after
    # its INSERT, before COMMIT; see tests/app/serve.py) and is SIGKILLed right there.
    marker = tmp_path / "in-first-commit"
    with ScriptedOpenAIServer(scripted_reply) as llm:
        server = ServerProcess(
            tmp_path,
            llm.base_url,
            env={
                "ATELIER_TEST_PAUSE_FIRST_COMMIT": "60",
                "ATELIER_TEST_MARKER": str(marker),
                "SSE_HEARTBEAT_INTERVAL": "0.2",
            },
        )
        try:
            server.start()
            with httpx.Client(base_url=server.url, timeout=30) as http:
                body = {
                    "assistant_id": "studio",
                    "input": {"request": "a post", "auto_confirm": True},
                    "stream_mode": ["updates", "custom"],
                }
                run: dict[str, Any] = http.post("/runs", json=body).json()
                path = f"/threads/{run['thread_id']}/runs/{run['run_id']}"
            wait_until(marker.exists, timeout=30)
            server.kill()

            del server.extra_env["ATELIER_TEST_PAUSE_FIRST_COMMIT"]
            server.start()
            with httpx.Client(base_url=server.url, timeout=60) as http:
                # -1: from the first frame (what the official useStream sends).
                response = http.get(f"{path}/stream", headers={"Last-Event-ID": "-1"})
                assert response.status_code == 200, response.text
                frames = read_sse(response.text)  # follows to the end
                record = http.get(path).json()
                again = read_sse(http.get(f"{path}/stream?last_event_id=-1").text)
        finally:
            server.stop()

    # Nothing of the killed commit survived, so the run starts over as attempt 1.
    assert record["status"] == "success" and record["attempt"] == 1
    assert [f.id for f in frames] == list(range(1, len(frames) + 1)), [
        (f.id, f.event) for f in frames
    ]
    assert [f.data["attempt"] for f in frames if f.event == "metadata"] == [1]
    assert [f.event for f in frames].count("end") == 1 and frames[-1].event == "end"
    assert frames[-1].data["status"] == "success"
    assert again == frames
