"""The docs stay true: the site builds, and what it shows is what the code does.

The documentation site (mkdocs.yml, docs/) must build with `mkdocs build --strict`, so a
broken link or anchor fails the suite; its configuration reference lists every setting;
its graph drawing, event reference and Python API snippets match the code. The README
stays the newcomer's page: short, the two Quick start commands, the package layout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from fontTools.ttLib import TTFont

from core.events import PipelineEvent
from core.settings import Settings
from graphs.pipeline import build_pipeline
from tests.app.atelier_llm import atelier_responder
from tests.support.docs import DOCS, code_blocks, section
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


# -- the site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the docs site as CI does (strict: any warning fails) and return its folder."""
    target = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return target


def test_every_page_is_in_the_nav_and_built(site: Path) -> None:
    pages = sorted(path.stem for path in DOCS.glob("*.md"))
    assert "index" in pages and "configuration" in pages
    for name in pages:
        built = site / ("index.html" if name == "index" else f"{name}/index.html")
        assert built.is_file(), f"docs/{name}.md was not built"
    # strict mode already refuses a page left out of the nav (validation.omitted_files)


def test_the_configuration_reference_lists_every_setting(site: Path) -> None:
    reference = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "<!-- settings-reference -->" not in reference, "the marker was not replaced"
    rows = re.findall(r"<tr>\s*<td><code>([A-Z0-9_]+)</code></td>", reference)
    assert sorted(rows) == sorted(name.upper() for name in Settings.model_fields)
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description for the reference"


def test_the_site_ships_a_cjk_font_for_every_chinese_character_it_shows(site: Path) -> None:
    font = TTFont(site / "assets" / "fonts" / "atelier-cjk.woff")
    covered = set(font.getBestCmap())
    quickstart = (site / "quickstart" / "index.html").read_text(encoding="utf-8")
    chinese = {char for char in quickstart if "\u4e00" <= char <= "\u9fff"}
    assert "写" in chinese and "笔" in chinese
    assert {ord(char) for char in chinese} <= covered
    stylesheet = (site / "stylesheets" / "atelier.css").read_text(encoding="utf-8")
    assert "../assets/fonts/atelier-cjk.woff" in stylesheet


# -- what the pages show -------------------------------------------------------------------


def test_the_architecture_page_shows_the_pipeline_as_the_graph_draws_itself() -> None:
    drawing = build_pipeline().get_graph(xray=1).draw_mermaid()
    assert [block.strip() for block in code_blocks("architecture", "mermaid")] == [
        drawing.strip()
    ], (
        "docs/architecture.md's mermaid block is stale: paste "
        "build_pipeline().get_graph(xray=1).draw_mermaid() into it"
    )


def test_the_event_reference_lists_every_pipeline_event() -> None:
    union = get_args(PipelineEvent)[0]
    types = {model.model_fields["type"].default for model in get_args(union)}
    table = section("api", "Event reference")
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z]+)` \|", table, flags=re.MULTILINE))
    assert documented == types


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


def test_the_python_api_snippets_run_as_written_with_only_llm_base_url_set(
    tmp_path: Path, llm: ScriptedOpenAIServer
) -> None:
    # Regression: build_pipeline() run without a context failed before its first node
    # ("no AtelierContext and no services are bound"), and nothing ran the docs' way.
    snippets = code_blocks("python-api", "python")
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


# -- the README ----------------------------------------------------------------------------


def test_the_readme_is_a_newcomers_page_with_the_two_commands() -> None:
    assert len(README.splitlines()) <= 250, "the manual belongs in docs/, not the README"
    quick_start = README.split("\n## Quick start\n", 1)[1].split("```bash\n", 1)[1]
    assert quick_start.split("```", 1)[0].splitlines() == [
        "./dev up      # set up .venv with the embedded model, start the service, print the "
        "console URL",
        "./dev test    # set up .venv with the test tools and run the whole test suite",
    ]


def test_the_readme_links_into_pages_that_exist() -> None:
    targets = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README)
    assert any(target.endswith(".md") for target in targets)
    for target in targets:
        assert (REPO_ROOT / target).is_file(), f"README links to a missing {target}"


def test_the_layout_lists_every_package_in_the_order_of_the_layers() -> None:
    from tests.app.test_layering import RANK

    block = README.split("\n## Layout\n", 1)[1].split("```", 2)[1]
    listed = [m.group(1) for m in re.finditer(r"^(\w+)/ ", block, re.MULTILINE)]
    packages = sorted(p.parent.name for p in REPO_ROOT.glob("*/__init__.py"))
    assert sorted(listed) == packages
    ranks = [RANK[name] for name in listed if name in RANK]
    assert ranks == sorted(ranks, reverse=True), f"not top-down: {listed}"
