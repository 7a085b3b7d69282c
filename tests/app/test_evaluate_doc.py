"""docs/evaluate.md stays true: its worked example, its curl lines and its CLI lines run.

The Python example and the `curl` snippets run against a real service (embedded,
the real pipeline, the scripted model of tests/app/test_evaluation.py with a judge that
prefers the post with 青禾); the CLI snippet runs the `atelier` console script in a
directory of its own, on the same scripted model.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.harness import LiveServer, service_settings
from tests.app.test_evaluation import MARKER, PRICES, EvaluationModel
from tests.support.docs import code_block
from tests.support.judges import content_judge
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "evaluate-doc-key-0123456789"
URL = "localhost:8000"


@pytest.fixture(scope="module")
def model() -> EvaluationModel:
    model = EvaluationModel()
    model.pairwise = content_judge(MARKER)
    return model


@pytest.fixture(scope="module")
def llm(model: EvaluationModel) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(model) as server:
        yield server


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer
) -> Iterator[LiveServer]:
    settings = service_settings(
        tmp_path_factory.mktemp("doc") / "data",
        llm.base_url,
        auth_api_keys=[KEY],
        llm_prices=PRICES,
        sse_heartbeat_interval=1,
    )
    with LiveServer(settings, None) as server:
        yield server


def _bash(script: str, server: LiveServer, **env: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(URL, server.url.removeprefix("http://"))],
        env={**os.environ, "KEY": KEY, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


async def test_the_worked_example_and_its_curl_lines_run_as_written(
    live: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    source = code_block("evaluate", "python", heading="A worked example")
    assert f"http://{URL}" in source
    code = compile(
        source.replace(f"http://{URL}", live.url),
        "evaluate.md",
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    namespace: dict[str, Any] = {"KEY": KEY}
    await asyncio.wait_for(eval(code, namespace), timeout=300)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["v1 1.0 4 0 0 0.51 1.0", "v2 0.0 0 0 4 0.0 0.49"]

    experiment_id = namespace["experiment"]["experiment_id"]
    script = code_block("evaluate", "bash", heading="A worked example")
    out = await asyncio.to_thread(_bash, script, live, EXPERIMENT=experiment_id)
    assert out.splitlines()[0] == "12 threads"  # 8 posts, 4 judged pairs
    assert "event: end" in out.splitlines()[-4:]


async def test_the_online_evaluation_lines_run_as_written(live: LiveServer) -> None:
    script = code_block("evaluate", "bash", heading="Online evaluation")
    out = await asyncio.to_thread(_bash, script, live)
    decoder = json.JSONDecoder()
    setting, end = decoder.raw_decode(out)
    report, _ = decoder.raw_decode(out[end:].lstrip())
    assert setting["sample_rate"] == 1.0
    assert report["sample_rate"] == 1.0 and report["agreement"]["n"] == 0


def test_the_command_line_lines_run_as_written(tmp_path: Path, llm: ScriptedOpenAIServer) -> None:
    script = code_block("evaluate", "bash", heading="From the command line")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "AUTH_"))},
        "DATA_DIR": str(tmp_path / "data"),
        "LLM_BASE_URL": llm.base_url,
        "LLM_API_KEY": "test",
        "LLM_MODEL": "scripted",
        "LLM_MAX_RETRIES": "0",
        "COLUMNS": "200",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, *table = done.stdout.splitlines()
    assert first.endswith("2 examples added (2 in all)")
    shown = "\n".join(table)
    assert "baseline" in shown and "again" in shown and "· success" in shown
