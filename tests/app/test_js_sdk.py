"""The official JS SDK, unmodified from npm, against a real server: `useStream` flows.

`tests/js/flows.mjs` mounts the SDK's React hook `useStream` (React 19, react-dom,
a jsdom DOM; no browser) and drives what Agent Chat UI and Studio do — first submit,
interrupt and resume, a second submit with `fetchStateHistory`, reconnect on mount
(`Last-Event-ID: -1`), edit and regenerate from a checkpoint, joining a running run
— plus the thread routes through the SDK's `Client`. The versions are pinned in
tests/js/package-lock.json; `npm ci` installs them (`.ci/run` does it first; this
module does it when `node_modules` is missing).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.chat_graph import chat_reply, dialect_assistants
from tests.app.harness import LiveServer, service_settings
from tests.support.scripted_openai import ScriptedOpenAIServer

JS_DIR = Path(__file__).resolve().parents[1] / "js"
FLOWS = ("submit", "interrupt", "second", "reconnect", "branch", "join", "client")


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    assert found, "Node.js is needed for the JS SDK tests (.ci/run installs it)"
    if not (JS_DIR / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        npm = shutil.which("npm")
        assert npm, "npm is needed to install tests/js (npm ci)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True)
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with ScriptedOpenAIServer(chat_reply) as llm:
        settings = service_settings(tmp_path_factory.mktemp("data"), llm.base_url)
        with LiveServer(settings, dialect_assistants) as live:
            yield live


@pytest.mark.parametrize("flow", FLOWS)
def test_use_stream_flow(flow: str, node: str, server: LiveServer) -> None:
    done = subprocess.run(
        [node, "flows.mjs", flow, server.url],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "RESULT " in done.stdout, output[-4000:]
