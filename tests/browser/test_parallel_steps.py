"""The console shows the steps a planning supervisor started together (issue 28).

The real service and pipeline with a scripted supervisor that plans the normal path
(`atelier_responder(plans=True)`): research, references and layout run together,
then the image planner with the writer, then the cards while the review reads. The
routes log shows each such step as one line naming its agents, marked as planned,
in Chinese and, after the language switch, in English with no Chinese label left.
Reuses `test_console`'s browser, page and helpers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings
from tests.browser import test_console as console
from tests.browser.test_console import (
    REQUEST,
    SCREENSHOTS,
    _custom,
    _run_log,
    _start,
    _visible_labels,
    _wait_for_result,
)
from tests.support.scripted_openai import ScriptedOpenAIServer

# The console suite's fixtures: one headless Chromium for the module, a fresh page a test.
browser = console.browser
page = console.page

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def planning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ScriptedOpenAIServer(atelier_responder(images=2, plans=True)) as llm:
        settings = service_settings(tmp_path_factory.mktemp("steps") / "data", llm.base_url)
        with LiveServer(settings, None) as live:  # None: the real atelier pipeline
            yield live.url


def _route_lines(page: Any) -> list[str]:
    return [" ".join(t.split()) for t in page.locator("#routes li").all_inner_texts()]


def test_steps_run_together_show_as_one_line_in_both_languages(
    page: Any, planning_server: str
) -> None:
    _start(page, planning_server, REQUEST, auto_confirm=True)
    _wait_for_result(page)

    routes = _custom(_run_log(planning_server, page), "supervisor.route")
    together = [r for r in routes if r["parallel_agents"]]
    assert len(together) == 3 and all(r["planned"] for r in together)
    lines = _route_lines(page)
    assert len(lines) == len(routes) + 1  # and the knowledge line
    step = next(line for line in lines if "‖" in line)
    assert re.search(r"#\d+ · 按计划⇉ .+ ‖ .+ ‖ .+ · 同时进行", step), step
    assert page.locator("#routes li.together").count() == 3
    page.screenshot(path=str(SCREENSHOTS / "console-parallel-steps.png"), full_page=True)

    page.select_option("#lang", "en")
    english = _route_lines(page)
    assert sum("· together" in line and "planned" in line for line in english) == 3
    assert "Research" in next(line for line in english if "‖" in line)
    chinese = [text for text in _visible_labels(page) if re.search(r"[\u3400-\u9fff]", text)]
    assert not chinese, chinese
