"""Start and stop children the way a user does: the `atelier` console script, no `.env`.

Shared by the end-to-end tests, the crash tests and `bench/bench_startup.py`, which
all start `atelier serve` from an empty directory with a fresh `DATA_DIR` and no
`LLM_*`/`LOCAL_MODEL_*` variable of the calling shell (so the embedded model is
the default unless a caller sets one), and stop it the way a terminal does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.app.harness import HOST, free_port

#: The console script installed beside this interpreter.
ATELIER = Path(sys.executable).with_name("atelier")
#: The line `atelier serve` prints once it answers (after the model's self-test).
UP = "Atelier is up"


def user_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    """This process's environment as a fresh user's shell: no model settings, no keys.

    Args:
        data_dir: The child's `DATA_DIR`.
        **overrides: Settings the test gives the child (they win).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "LOCAL_MODEL_"))}
    env.update(
        DATA_DIR=str(data_dir),
        AUTH_API_KEYS="",
        PYTHONUNBUFFERED="1",
        COLUMNS="200",  # rich wraps the announcement panel at the terminal width
    )
    env.update(overrides)
    return env


def spawn_serve(
    cwd: Path, env: dict[str, str], log_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `atelier serve` on a free loopback port; returns the process and its base URL."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(ATELIER), "serve", "--host", HOST, "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return process, f"http://{HOST}:{port}"


def wait_for_200(
    url: str, process: subprocess.Popen[bytes], log_path: Path, *, timeout: float
) -> None:
    """Poll `url` until it answers 200; fail with the log's tail if the child exits or stalls."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200 in {timeout:.0f} s"
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes], *, timeout: float = 30) -> None:
    """Stop a child as Ctrl-C would (SIGTERM), by force after `timeout`, and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
