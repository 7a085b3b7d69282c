"""The official JS SDK, unmodified from npm, against a real server: `useStream` flows.

`tests/js/flows.mjs` mounts the SDK's React hook `useStream` (React 19, react-dom,
a jsdom DOM; no browser) and drives what Agent Chat UI and Studio do — first submit,
interrupt and resume, a second submit with `fetchStateHistory`, reconnect on mount
(`Last-Event-ID: -1`), edit and regenerate from a checkpoint, joining a running run
— plus the thread routes through the SDK's `Client`. The versions are pinned in
tests/js/package-lock.json; `npm ci` installs them (`.ci/run` does it first; this
module does it when `node_modules` is missing).

The first flows drive a sample chat graph (`tests/app/chat_graph.py`); the
`atelier-*` flows drive the product's own `atelier` graph on a scripted model,
mounted as Agent Chat UI mounts `useStream` (PRODUCT.md §7 "Conversation"), on
every deployment the service suites use (`serve_deployment`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from tests.app.atelier_llm import atelier_responder
from tests.app.chat_graph import chat_reply, dialect_assistants
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.graphs.pipeline_runs import planner_reply
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

JS_DIR = Path(__file__).resolve().parents[1] / "js"
FLOWS = ("submit", "interrupt", "second", "reconnect", "branch", "join", "client")
ATELIER_FLOWS = ("atelier-post", "atelier-question", "atelier-revise", "atelier-branch")
KEY = "js-acceptance-key-0123456789"
#: A second API key of the assistants flow (its assistants are the first key's alone).
OTHER_KEY = "js-acceptance-other-0123456789"
#: What the writer's prompt says when it revises the thread's previous post (agentkit.post).
REVISING = "要修改的上一篇帖子"


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


def run_flow(node: str, flow: str, url: str, *args: str) -> dict[str, Any]:
    """Run one flow of flows.mjs; return its RESULT."""
    done = subprocess.run(
        [node, "flows.mjs", flow, url, *args],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return dict(json.loads(line.removeprefix("RESULT ")))


def chat_responder() -> Callable[[ChatRequest], Reply]:
    """The atelier pipeline's scripted model; its planner revises when given a post to revise."""
    pipeline = atelier_responder()
    revise = Reply.tool_calls(
        [("PlannerIntent", planner_reply(action="revise_post").tool_calls[0]["args"])]
    )

    def respond(req: ChatRequest) -> Reply:
        if req.forced_tool == "PlannerIntent" and REVISING in json.dumps(
            req.messages, ensure_ascii=False
        ):
            return revise
        return pipeline(req)

    return respond


@pytest.fixture(scope="module")
def scripted_llm() -> Iterator[ScriptedOpenAIServer]:
    """The module's scripted LLM: the "processes" deployment's workers need its URL at start."""
    with ScriptedOpenAIServer(chat_responder()) as llm:
        yield llm


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {
        "AUTH_API_KEYS": f"{KEY},{OTHER_KEY}",
        "LLM_TIMEOUT": "30",
        "SSE_HEARTBEAT_INTERVAL": "15",
    }
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


@pytest.fixture(params=DEPLOYMENTS)
def studio(
    request: pytest.FixtureRequest, tmp_path: Path, scripted_llm: ScriptedOpenAIServer
) -> Iterator[Served]:
    """The service with its default assistants (atelier, team), in each deployment."""
    scripted_llm.reset()

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data", scripted_llm.base_url, auth_api_keys=[KEY, OTHER_KEY], **scale
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield served


@pytest.mark.slow
@pytest.mark.parametrize("flow", ATELIER_FLOWS)
def test_agent_chat_ui_flow_on_atelier(
    flow: str, node: str, studio: Served, scripted_llm: ScriptedOpenAIServer
) -> None:
    result = run_flow(node, flow, studio.url, KEY)
    if flow == "atelier-revise":
        # The second message's writer was shown the first post to revise.
        revising = [
            r
            for r in scripted_llm.requests
            if not r.tools and REVISING in json.dumps(r.messages, ensure_ascii=False)
        ]
        assert revising, "no writer prompt carried the previous post"
        prompt = json.dumps(revising[-1].messages, ensure_ascii=False)
        assert result["previous_title"] in prompt


@pytest.mark.slow
def test_brand_presets_through_the_js_sdk(
    node: str, studio: Served, scripted_llm: ScriptedOpenAIServer
) -> None:
    """Create, run, update, roll back, search and delete a preset with the JS SDK's Client."""
    result = run_flow(node, "assistants-preset", studio.url, KEY, OTHER_KEY)
    assert result["voices"] == ["JS第一版", "JS第二版", "JS第一版"]
    writer_prompts = [
        str(r.messages[0].get("content"))
        for r in scripted_llm.requests
        if not r.tools and r.messages and r.messages[0].get("role") == "system"
    ]
    for voice in ("JS第一版", "JS第二版"):  # the preset's voice and terms reach the writer
        assert any(voice in p and "JS 青禾" in p and "营销" in p for p in writer_prompts)
