"""The console page in a real browser: Playwright driving Debian's headless Chromium.

The real service (uvicorn on 127.0.0.1, the real `atelier` pipeline, SQLite) with a
scripted LLM on loopback (`tests/app/atelier_llm.py`). The browser only does what a
person would: fill the form, watch the run, reload mid-run, answer the planner's
question. Screenshots go to `tests/artifacts/screenshots/`, or to the README's
`docs/screenshots/` with `ATELIER_SCREENSHOTS=docs/screenshots`.

`playwright install` cannot download browsers here, so the test uses the system
Chromium at /usr/bin/chromium; `.ci/run` installs it. Outside CI a machine without
it skips this module; in CI (`CI=true`) a missing browser fails it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, SseFrame, read_sse, service_settings
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
# Screenshots land in tests/artifacts/screenshots (git-ignored); the README's copies in
# docs/screenshots are refreshed with ATELIER_SCREENSHOTS=docs/screenshots.
SCREENSHOTS = REPO / os.environ.get("ATELIER_SCREENSHOTS", "tests/artifacts/screenshots")
REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"
TIMEOUT_MS = 30_000

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

# Each test takes about 10 s; a hung one fails instead of holding up the suite.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _skipping_the_brief(respond: Callable[[ChatRequest], Reply]) -> Callable[[ChatRequest], Reply]:
    """Have the supervisor's first decision of a team skip the brief.

    Routing corrects it (writer_agent needs a brief: a `precondition` fallback to
    brief_compiler_agent), so every run shows a fallback with its reason.
    """

    def wrapped(req: ChatRequest) -> Reply:
        turn = str(req.messages[-1].get("content") or "") if req.messages else ""
        if "SupervisorDecision" in req.tools and turn.startswith("第 1 / "):
            decision = {"next_agent": "writer_agent", "guidance": "直接写正文"}
            return Reply.tool_calls([("SupervisorDecision", decision)])
        return respond(req)

    return wrapped


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    # The writer streams its draft in slow chunks so a reload can land mid-run.
    responder = atelier_responder(images=2, writer_delay=0.5, writer_chunk_delay=0.15)
    with ScriptedOpenAIServer(_skipping_the_brief(responder)) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer) -> Iterator[str]:
    settings = service_settings(tmp_path_factory.mktemp("console") / "data", llm.base_url)
    with LiveServer(settings, None) as live:  # None: the real atelier pipeline
        yield live.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, f"errors on the page: {errors}"


def _start(page: Any, url: str, request: str, *, auto_confirm: bool, images: int = 2) -> None:
    page.goto(url)
    page.fill("#request", request)
    page.fill("#image_count", str(images))
    if auto_confirm:
        page.check("#auto_confirm")
    page.click("#start")


def _wait_for_result(page: Any) -> None:
    page.wait_for_selector("#result:not([hidden]) #post h1")
    page.wait_for_function(
        "() => { const imgs = [...document.querySelectorAll('#post img')];"
        " return imgs.length > 0 && imgs.every((i) => i.complete && i.naturalWidth > 0); }"
    )
    page.wait_for_function("() => document.querySelector('#run-status').textContent === '完成'")


def _run_log(url: str, page: Any) -> list[SseFrame]:
    """The run's whole stream as the server keeps it (join from the first frame)."""
    params = dict(part.split("=") for part in page.url.split("?", 1)[1].split("&"))
    path = f"/threads/{params['thread']}/runs/{params['run']}/stream"
    text = httpx.get(url + path, headers={"Last-Event-ID": "0"}, timeout=30).text
    return read_sse(text)


def _custom(frames: list[SseFrame], *types: str) -> list[dict[str, Any]]:
    return [f.data for f in frames if f.event.startswith("custom") and f.data["type"] in types]


def _entries(page: Any) -> dict[str, int]:
    return page.evaluate(
        """() => ({
            routes: document.querySelectorAll('#routes li').length,
            verdicts: document.querySelectorAll('#verdicts .verdict').length,
            gallery: document.querySelectorAll('#gallery figure').length,
            drafts: document.querySelectorAll('#draft .draft-part').length,
        })"""
    )


def _expected_entries(frames: list[SseFrame]) -> dict[str, int]:
    writer_messages = {
        f.data[0]["id"]
        for f in frames
        if f.event.startswith("messages") and f.data[1].get("langgraph_node") == "writer_agent"
    }
    return {
        "routes": len(
            _custom(
                frames,
                "supervisor.route",
                "agent.fallback",
                "knowledge.injected",
                "knowledge.deviation",
            )
        ),
        "verdicts": len(_custom(frames, "critic.verdict")),
        "gallery": len({e["asset_id"] for e in _custom(frames, "asset.created")}),
        "drafts": len(writer_messages),
    }


def _draws_chinese(page: Any) -> bool:
    """Whether the page's font draws 汉字 as glyphs, not as the missing-glyph box.

    Draws 汉 and a code point no font has (U+10FFFD) with the body's font on a
    canvas, once the page's fonts have loaded: a missing glyph looks like the other.
    """
    return bool(
        page.evaluate(
            """async () => {
                await document.fonts.ready;
                const font = getComputedStyle(document.body).font;
                const pixels = (text) => {
                    const canvas = document.createElement('canvas');
                    canvas.width = canvas.height = 64;
                    const ctx = canvas.getContext('2d');
                    ctx.font = font.replace(/\\d+(\\.\\d+)?px/, '40px');
                    ctx.fillText(text, 4, 48);
                    return ctx.getImageData(0, 0, 64, 64).data.join(',');
                };
                return pixels('汉') !== pixels('\\u{10FFFD}') && pixels('汉') !== pixels('');
            }"""
        )
    )


def test_the_console_serves_a_cjk_web_font(server: str) -> None:
    font = httpx.get(f"{server}/console/fonts/cjk", timeout=30)
    assert font.status_code == 200
    assert font.headers["content-type"] in ("font/otf", "font/ttf", "font/woff", "font/woff2")
    assert font.content[:4] in (b"OTTO", b"\x00\x01\x00\x00", b"wOFF", b"wOF2")


def test_a_run_streams_its_stages_routes_verdicts_and_ends_with_the_post(
    page: Any, server: str
) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)

    stages = page.eval_on_selector_all("#stages li", "els => els.map((e) => e.className)")
    assert stages == ["done"] * 5  # planner, rag, executor, critic, finalize
    assert "第 1 / " in page.inner_text("#attempt")
    routes = page.inner_text("#routes")
    # Agents by name in the page's language (简报整理 = brief_compiler_agent, …).
    for agent in ("简报整理", "写作", "配图", "审稿"):
        assert f"→ {agent}" in routes
    assert "↪ 写作 → 简报整理" in routes and "前置条件" in routes
    verdict = page.inner_text("#verdicts")
    assert "通过" in verdict and "✓" in verdict and "阈值" in verdict
    assert page.inner_text("#draft").strip()  # the writer's tokens streamed in
    assert page.locator("#gallery figure img").count() == 2
    post = page.inner_text("#post")
    assert page.inner_text("#post h1") and "#" in post  # a title and tags
    assert "质量" in page.inner_text("#quality")
    assert "scripted" in page.inner_text("#models")  # the model of each role
    page.click("#roles summary")
    roles = page.inner_text("#roles-list")
    assert "写作" in roles and "调度" in roles and "scripted" in roles
    assert _entries(page) == _expected_entries(_run_log(server, page))

    assert _draws_chinese(page)

    page.screenshot(path=str(SCREENSHOTS / "console-desktop.png"), full_page=True)

    # The same page on a phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    page.evaluate("() => document.querySelector('#live').scrollIntoView()")
    page.screenshot(path=str(SCREENSHOTS / "console-phone.png"))


def test_reloading_mid_run_rejoins_without_missing_or_repeating_anything(
    page: Any, server: str
) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    # Mid-run: the writer is streaming its draft (slow chunks).
    page.wait_for_function("() => document.querySelector('#draft').textContent.length > 0")
    assert "run=" in page.url and page.is_hidden("#result")
    before = _entries(page)
    cursors: list[str | None] = []  # Last-Event-ID of each join of a run's stream
    page.on(
        "request",
        lambda r: (
            cursors.append(r.headers.get("last-event-id"))
            if r.method == "GET" and r.url.endswith("/stream")
            else None
        ),
    )

    page.reload()
    _wait_for_result(page)
    assert len(cursors) == 1 and int(cursors[0] or 0) > 0  # rejoined after what it had

    after = _entries(page)
    assert after["routes"] >= before["routes"]
    expected = _expected_entries(_run_log(server, page))
    assert after == expected  # every entry exactly once

    page.reload()  # after the end: the page has every frame and shows the run as it was
    _wait_for_result(page)
    assert _entries(page) == expected
    assert len(cursors) == 1  # nothing left to join


def test_a_vague_request_asks_and_the_answer_resumes_the_run(page: Any, server: str) -> None:
    _start(page, server, "写一篇笔记", auto_confirm=False)
    page.wait_for_selector("#clarify:not([hidden]) #clarify-options button")
    assert page.inner_text("#clarify-question").strip()
    assert page.inner_text("#run-status") == "等待回答"  # waiting, not an error
    page.screenshot(path=str(SCREENSHOTS / "console-clarify.png"))

    page.reload()  # the question is still open after a reload
    page.wait_for_selector("#clarify:not([hidden]) #clarify-options button")
    assert page.inner_text("#run-status") == "等待回答"

    page.fill("#clarify-details", "写给大学新生，讲平价护肤的三个步骤，轻松口吻")
    page.click("#clarify-options button[data-option='details']")
    _wait_for_result(page)
    assert page.is_hidden("#clarify")
    assert page.inner_text("#post h1")

    # Replaying the run that asked shows its question answered: no card, no post.
    page.locator("#history-list li", has_text="已中断").locator("button").click()
    page.wait_for_function("() => document.querySelector('#run-status').textContent === '已中断'")
    assert page.is_hidden("#clarify") and page.is_hidden("#result")


def test_cancel_stops_the_run(page: Any, server: str) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    page.wait_for_function("() => document.querySelector('#draft').textContent.length > 0")
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#run-status').textContent === '已中断'")
    assert page.is_hidden("#result")
    assert page.is_disabled("#cancel")


def test_a_past_run_replays_from_the_history_list(page: Any, server: str) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    expected = _expected_entries(_run_log(server, page))

    page.click("#history-list button")  # the thread's one run: replay it
    _wait_for_result(page)
    assert _entries(page) == expected
