"""Feedback on a finished post in the console, in a real browser (app/static/feedback.js).

The fixtures are tests/browser/test_console.py's: the real service and pipeline with
the scripted LLM, Debian's headless Chromium driven by Playwright. The browser does
what a person would: finish a post, write a comment, press thumbs up, then down; the
entries are read back over HTTP, as the API stores them.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.browser.test_console import (  # noqa: F401 - the console's fixtures
    _start,
    _thread_id,
    _visible_labels,
    _wait_for_result,
    browser,
    llm,
    page,
    pytestmark,
    server,
)

REQUEST = "写一篇小红书笔记：周末城市骑行路线"


def _run_id(view: Any) -> str:
    return dict(part.split("=") for part in view.url.split("?", 1)[1].split("&"))["run"]


def _feedback(url: str, run_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/runs/{run_id}/feedback", timeout=30)
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, Any]] = answer.json()
    return entries


def test_thumbs_and_a_comment_on_a_finished_post_reach_the_run(
    page: Any,  # noqa: F811 - the console's fixture
    server: str,  # noqa: F811 - the console's fixture
) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    run_id = _run_id(page)
    assert _thread_id(page)
    assert page.is_visible("#feedback") and "这篇怎么样" in page.inner_text("#feedback")
    assert page.locator("#feedback-list li[data-key]").count() == 0
    # The usage table's cost column: no LLM_PRICES here, so every cost is unknown.
    texts = "els => els.map((e) => e.textContent)"
    assert page.eval_on_selector_all("#usage th", texts)[-1] == "费用"
    costs = page.eval_on_selector_all("#usage tr td:last-child", texts)
    assert costs and set(costs) == {"未知"}

    page.fill("#feedback-comment", "标题很抓人，第二段可以再短一点。")
    page.click("#feedback-up")
    page.wait_for_selector("#feedback-list li[data-key='quality'][data-score='1']")
    assert "谢谢" in page.inner_text("#feedback-note")
    assert page.input_value("#feedback-comment") == ""
    page.click("#feedback-down")
    page.wait_for_selector("#feedback-list li[data-score='0']")

    entries = _feedback(server, run_id)
    assert [(e["key"], e["score"], e["comment"]) for e in entries] == [
        ("quality", 1.0, "标题很抓人，第二段可以再短一点。"),
        ("quality", 0.0, None),
    ]
    listed = page.inner_text("#feedback-list")
    assert "👍" in listed and "👎" in listed and "第二段可以再短一点" in listed

    page.select_option("#lang", "en")  # the form and the list redraw in English
    assert "How is this post?" in page.inner_text("#feedback")
    page.wait_for_function(
        "() => document.querySelectorAll('#feedback-list li[data-key]').length === 2"
    )
    chinese = [t for t in _visible_labels(page) if re.search(r"[\u3400-\u9fff]", t)]
    assert not chinese, chinese
