"""The README stays true: its graph drawing, event reference and Python API snippets."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from core.events import PipelineEvent
from graphs.pipeline import build_pipeline
from tests.app.atelier_llm import atelier_responder
from tests.support.fake_models import HAPPY_TITLE
from tests.support.scripted_openai import ScriptedOpenAIServer

REPO_ROOT = Path(__file__).resolve().parents[1]
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
#: Runs the snippets given as JSON on argv as a notebook runs cells: one after the
#: other in one namespace, top-level `await` allowed, all on one event loop.
NOTEBOOK = """
import ast, asyncio, inspect, json, sys

async def cells():
    namespace = {"__name__": "__main__"}
    for number, source in enumerate(json.loads(sys.argv[1])):
        code = compile(source, f"<cell {number}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            await result

asyncio.run(cells())
"""


def test_the_readme_shows_the_pipeline_as_the_graph_draws_itself() -> None:
    blocks = re.findall(r"```mermaid\n(.*?)```", README, flags=re.DOTALL)
    drawing = build_pipeline().get_graph(xray=1).draw_mermaid()
    assert [block.strip() for block in blocks] == [drawing.strip()], (
        "README's mermaid block is stale: paste "
        "build_pipeline().get_graph(xray=1).draw_mermaid() into it"
    )


def test_the_event_reference_lists_every_pipeline_event() -> None:
    union = get_args(PipelineEvent)[0]
    types = {model.model_fields["type"].default for model in get_args(union)}
    # The table under "Event reference": the rows up to the first line that is not one.
    table = README.split("**Event reference.**", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z]+)` \|", table, flags=re.MULTILINE))
    assert documented == types


def section(title: str) -> str:
    """Return the README's `## title` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.MULTILINE | re.DOTALL)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


def test_the_python_api_snippets_run_as_written_with_only_llm_base_url_set(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    # Regression: build_pipeline() run without a context failed before its first node
    # ("no AtelierContext and no services are bound"), and nothing ran the README's way.
    snippets = re.findall(r"```python\n(.*?)```", section("Python API"), flags=re.DOTALL)
    assert any("build_pipeline(checkpointer=InMemorySaver())" in s for s in snippets)
    assert any("build_team()" in s for s in snippets)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "LANGSMITH_TRACING": "false",
        "LLM_BASE_URL": llm.base_url,
    }
    # In a scratch directory: no `.env`, and the default DATA_DIR (./data) is private.
    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK, json.dumps(snippets)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "finalize" in lines, done.stdout
    assert f"completed {HAPPY_TITLE}" in lines, done.stdout
    assert lines[-1].startswith(f"{HAPPY_TITLE} ['"), "the team's post and its image"
    assert (tmp_path / "data" / "atelier.db").is_file(), "the vault of the default DATA_DIR"
    assert llm.call_count > 0


def test_the_layout_lists_every_package_in_the_order_of_the_layers() -> None:
    from tests.app.test_layering import RANK

    block = README.split("### Layout", 1)[1].split("```", 2)[1]
    listed = [m.group(1) for m in re.finditer(r"^(\w+)/ ", block, re.MULTILINE)]
    packages = sorted(p.parent.name for p in REPO_ROOT.glob("*/__init__.py"))
    assert sorted(listed) == packages
    ranks = [RANK[name] for name in listed if name in RANK]
    assert ranks == sorted(ranks, reverse=True), f"not top-down: {listed}"
