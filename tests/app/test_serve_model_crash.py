"""`atelier serve` and `atelier run` with an embedded model that crashes (issue 10).

The model child is `tests/support/crashing_llama`: it loads and lists its model
like llama-cpp-python's server, then dies with SIGSEGV on a completion, as a
llama.cpp compiled with AMX instructions does on a CPU whose kernel refuses them.

* Crashing on the start-up self-test: `atelier serve` exits with the one-line
  reason and its remedy and never prints "Atelier is up"; `atelier run` fails the
  same way before any run starts.
* Crashing later, on every request: runs end with a message that says the
  embedded model crashed (not "Connection error"), and after the restart budget
  /ready says the model is given up, with the reason.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.harness import REPO_ROOT
from tests.support.atelier_cli import ATELIER, UP, spawn_serve, stop, user_env

CRASHING_LLAMA = REPO_ROOT / "tests" / "support" / "crashing_llama"


def _env(tmp_path: Path, answers: int) -> dict[str, str]:
    """The environment of an `atelier` child whose embedded model is the crashing stand-in."""
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    path = [str(CRASHING_LLAMA), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    return user_env(
        tmp_path / "data",
        PYTHONPATH=os.pathsep.join(p for p in path if p),
        LOCAL_MODEL_PATH=str(model),
        FAKE_LLAMA_ANSWERS=str(answers),
        FAKE_LLAMA_COUNTER=str(tmp_path / "answered"),
    )


def _serve(tmp_path: Path, answers: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = tmp_path / "serve.log"
    process, url = spawn_serve(tmp_path, _env(tmp_path, answers), log)
    return process, url, log


@pytest.fixture
def serve_up(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`atelier serve` whose model passes the self-test and crashes on every later call."""
    process, url, log = _serve(tmp_path, answers=1)
    try:
        deadline = time.monotonic() + 120
        while UP not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "atelier serve did not come up"
            time.sleep(0.2)
        yield url, log
    finally:
        stop(process)


@pytest.mark.timeout(180)
def test_serve_exits_with_the_one_line_reason_when_the_model_crashes_on_its_self_test(
    tmp_path: Path,
) -> None:
    process, _url, log = _serve(tmp_path, answers=0)
    try:
        code = process.wait(timeout=150)
    finally:
        stop(process)
    output = log.read_text(errors="replace")
    assert code != 0, output[-3000:]
    assert UP not in output
    lines = [line for line in output.splitlines() if "crashed (killed by SIGSEGV)" in line]
    assert lines, output[-3000:]
    assert "LLM_BASE_URL" in lines[0] and "ATELIER_NATIVE_BUILD" in lines[0]


@pytest.mark.timeout(180)
def test_run_command_fails_with_the_one_line_reason_before_the_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ATELIER), "run", "写一篇小红书笔记：平价护肤", "--auto-confirm", "--fast"],
        cwd=tmp_path,
        env=_env(tmp_path, answers=0),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    # The CLI speaks the request's language (a Chinese request: 运行失败); the crash
    # line itself is the provider's one safe line.
    assert "运行失败" in done.stderr and "crashed (killed by SIGSEGV)" in done.stderr
    assert "LLM_BASE_URL" in done.stderr


@pytest.mark.timeout(300)
def test_a_later_crash_shows_in_the_runs_message_and_in_ready(
    serve_up: tuple[str, Path],
) -> None:
    url, log = serve_up
    with httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=120)) as client:
        ready = client.get("/ready")
        assert ready.status_code == 200 and ready.json()["checks"]["model"] == "ok"
        body = {
            "assistant_id": "atelier",
            "input": {"request": "写一篇小红书笔记：平价护肤", "auto_confirm": True},
        }
        messages: list[str] = []
        for _ in range(8):  # every planner call crashes the child (with the client's retries)
            thread = client.post("/threads", json={}).json()["thread_id"]
            result = client.post(f"/threads/{thread}/runs/wait", json=body).json()["result"]
            assert result["outcome"] == "failed", result
            messages.append(result["message"])
            ready = client.get("/ready")
            if ready.status_code == 503 and "not restarted" in ready.text:
                break
        assert "内置模型崩溃" in messages[0] and "killed by SIGSEGV" in messages[0], messages
        assert all("Connection error" not in m for m in messages)
        assert "LLM_BASE_URL" in messages[0]
        ready_body = ready.json()
        assert ready.status_code == 503 and ready_body["checks"]["model"] == "failed"
        reason = ready_body["reasons"]["model"]
        assert "not restarted" in reason and "LLM_BASE_URL" in reason, ready_body
        assert reason in ready_body["message"]
        # Given up: the next run fails at once, with the same reason.
        thread = client.post("/threads", json={}).json()["thread_id"]
        started = time.monotonic()
        result = client.post(f"/threads/{thread}/runs/wait", json=body).json()["result"]
        assert time.monotonic() - started < 10
        assert result["outcome"] == "failed" and "not restarted" in result["message"]
    logged = [
        line for line in log.read_text(errors="replace").splitlines() if "not restarted" in line
    ]
    assert logged, "the log does not say the model was given up"
