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

import io
import os
import re
import threading
import zipfile
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


#: While set, the judge model answers HTTP 500: the critic decides without it.
JUDGE_DOWN = threading.Event()


def _judge_can_fail(respond: Callable[[ChatRequest], Reply]) -> Callable[[ChatRequest], Reply]:
    def wrapped(req: ChatRequest) -> Reply:
        if JUDGE_DOWN.is_set() and req.forced_tool == "JudgeVerdict":
            return Reply.error(500, "judge down")
        return respond(req)

    return wrapped


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    # The writer streams its draft in slow chunks so a reload can land mid-run.
    responder = atelier_responder(images=2, writer_delay=0.5, writer_chunk_delay=0.15)
    with ScriptedOpenAIServer(_judge_can_fail(_skipping_the_brief(responder))) as server:
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

    stages = page.eval_on_selector_all(
        "#stages li:not([hidden])", "els => els.map((e) => e.className)"
    )
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
    slots = page.eval_on_selector_all(
        "#gallery figure", "figs => figs.map(f => Number(f.dataset.slot))"
    )
    assert slots == sorted(slots), slots  # drawn concurrently, shown in slot order
    post = page.inner_text("#post")
    assert page.inner_text("#post h1") and "#" in post  # a title and tags
    assert "质量" in page.inner_text("#quality")
    assert "scripted" in page.inner_text("#models")  # the model of each role
    _check_usage(page, _result(server, _thread_id(page)))
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


def _thread_id(page: Any) -> str:
    return dict(part.split("=") for part in page.url.split("?", 1)[1].split("&"))["thread"]


def _result(url: str, thread_id: str) -> dict[str, Any]:
    state = httpx.get(f"{url}/threads/{thread_id}/state", timeout=30).json()
    result: dict[str, Any] = state["values"]["result"]
    return result


def _visible_labels(page: Any) -> list[str]:
    """Every text of the page the console wrote (not user or model content, not the switch)."""
    return list(
        page.evaluate(
            """() => {
                const out = [];
                const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
                for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                    const el = n.parentElement;
                    if (!n.textContent.trim()) continue;
                    if (el.closest('[data-user], #lang, script, template')) continue;
                    out.push(n.textContent.trim());
                }
                const fields = document.querySelectorAll('[placeholder]');
                for (const el of fields) out.push(el.placeholder);
                return out;
            }"""
        )
    )


def test_an_unjudged_verdict_shows_no_score_and_no_pass(page: Any, server: str) -> None:
    JUDGE_DOWN.set()
    try:
        _start(page, server, REQUEST, auto_confirm=True)
        _wait_for_result(page)
    finally:
        JUDGE_DOWN.clear()
    verdicts = page.inner_text("#verdicts")
    assert "未评审" in verdicts and "无评分" in verdicts
    shown = " ".join(page.inner_text(s) for s in ("#verdicts", "#quality", "#outcome", "#attempt"))
    assert "通过 " not in shown and "：通过" not in shown and ": 通过" not in shown
    assert not re.search(r"\b[01]\.\d\d\b", page.inner_text("#verdicts .v-score"))
    assert not re.search(r"\b[01]\.\d\d\b", page.inner_text("#quality strong"))
    assert "未评审" in page.inner_text("#quality") and "未评审" in page.inner_text("#attempt")


def test_failed_checks_name_what_to_fix_in_the_users_language(page: Any, server: str) -> None:
    page.goto(server)
    check = {"name": "title_length", "passed": False, "measured": 42, "expected": "≤ 20"}
    texts = page.evaluate(
        """(check) => {
            const out = {zh: checkText(check)};
            lang = 'en';
            out.en = checkText(check);
            out.unknown = checkText({name: 'novel_check', passed: false});
            lang = 'zh';
            return out;
        }""",
        check,
    )
    assert texts["zh"] == "✗ 标题 42 字，要求 ≤ 20：请调整标题长度"
    assert texts["en"] == "✗ The title has 42 characters, ≤ 20 wanted: adjust its length"
    assert texts["unknown"] == "✗ Check “novel_check” failed"


def test_the_language_switch_leaves_no_label_of_the_other_language(page: Any, server: str) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    assert page.inner_text("#quality .dims").count("信息密度") == 1

    page.select_option("#lang", "en")
    labels = _visible_labels(page)
    chinese = [text for text in labels if re.search(r"[\u3400-\u9fff]", text)]
    assert not chinese, chinese
    assert "Information density" in page.inner_text("#quality")
    assert "→ Brief compiler" in page.inner_text("#routes")
    assert page.inner_text("#run-status") == "Done"
    assert re.fullmatch(r"\d\d:\d\d · Done", page.inner_text("#history-list li span"))
    page.screenshot(path=str(SCREENSHOTS / "console-desktop-en.png"), full_page=True)

    page.reload()  # the choice is remembered
    _wait_for_result_in(page, "Done")
    assert page.input_value("#lang") == "en"
    assert not [text for text in _visible_labels(page) if re.search(r"[\u3400-\u9fff]", text)]

    page.select_option("#lang", "zh")
    allowed = {"Atelier", "OpenAI", "API", "Key", "Markdown"}
    english = [
        text for text in _visible_labels(page) if set(re.findall(r"[A-Za-z]{3,}", text)) - allowed
    ]
    assert not english, english


def _wait_for_result_in(page: Any, done: str) -> None:
    page.wait_for_selector("#result:not([hidden]) #post h1")
    page.wait_for_function(
        "(done) => document.querySelector('#run-status').textContent === done", arg=done
    )


def test_the_library_lists_and_reopens_posts_after_a_reload_and_deletes(
    page: Any, server: str
) -> None:
    request = "写一篇小红书笔记：宿舍平价护肤三步走"
    _start(page, server, request, auto_confirm=True, images=2)
    _wait_for_result(page)
    thread = _thread_id(page)
    title = page.inner_text("#post h1")

    page.goto(server)  # a fresh page: no thread in the URL
    item = page.locator(f"#library-list li[data-thread='{thread}']")
    item.wait_for()
    assert title in item.inner_text()
    assert re.search(r"\d{4}/\d\d/\d\d \d\d:\d\d · 已完成", item.inner_text())
    page.wait_for_function(
        "(t) => { const i = document.querySelector(`#library-list li[data-thread='${t}'] img`);"
        " return i && i.complete && i.naturalWidth > 0; }",
        arg=thread,
    )
    page.fill("#library-search", "没有这样的标题")
    assert item.count() == 0 and page.is_visible("#library-empty")
    page.fill("#library-search", "宿舍")
    item.locator("button.open").click()
    _wait_for_result(page)
    assert page.inner_text("#post h1") == title
    assert page.input_value("#request") == request  # its own request and settings
    assert page.input_value("#image_count") == "2"
    assert _thread_id(page) == thread

    page.on("dialog", lambda dialog: dialog.accept())
    item.locator("button.delete").click()
    page.wait_for_function(
        "(t) => !document.querySelector(`#library-list li[data-thread='${t}']`)", arg=thread
    )
    assert httpx.get(f"{server}/threads/{thread}", timeout=30).status_code == 404


def test_copy_export_download_and_enlarge(page: Any, server: str) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server)
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    result = _result(server, _thread_id(page))
    post = result["post"]

    page.click("#actions button[data-action='copy']")
    page.wait_for_function("() => document.querySelector('#action-note').textContent !== ''")
    body = "\n".join(
        ("• " + b["text"]) if b["type"] == "list_item" else b["text"] for b in post["blocks"]
    )
    tags = " ".join(f"#{t}" for t in post["tags"])
    assert page.evaluate("() => navigator.clipboard.readText()") == "\n\n".join(
        [post["title"], body, tags]
    )

    with page.expect_download() as download_info:
        page.click("#actions button[data-action='export']")
    archive = zipfile.ZipFile(io.BytesIO(Path(download_info.value.path()).read_bytes()))
    markdown = archive.read("post.md").decode()
    assert markdown.startswith(f"# {post['title']}\n")
    for block in post["blocks"]:
        assert block["text"] in markdown
    assert tags in markdown
    for image in result["images"]:
        card = archive.read(f"card-{image['slot']}.png")
        assert card[:8] == b"\x89PNG\r\n\x1a\n"
        assert card == httpx.get(server + image["url"], timeout=30).content

    first = result["images"][0]
    link = page.locator(f"#post figure[data-asset='{first['asset_id']}'] a.download")
    assert link.get_attribute("href") == first["url"]
    assert link.get_attribute("download") == f"card-{first['slot']}.png"
    page.locator(f"#post figure[data-asset='{first['asset_id']}'] .enlarge").click()
    page.wait_for_selector("#lightbox[open]")
    assert str(page.get_attribute("#lightbox-img", "src")).endswith(first["url"])
    page.click("#lightbox button")
    page.wait_for_selector("#lightbox", state="hidden")


def test_the_export_route_is_owner_checked_and_needs_a_post(server: str) -> None:
    assert httpx.get(f"{server}/threads/nope/export.zip", timeout=30).status_code == 404
    thread = httpx.post(f"{server}/threads", json={}, timeout=30).json()["thread_id"]
    assert httpx.get(f"{server}/threads/{thread}/export.zip", timeout=30).status_code == 409


def test_an_edit_is_checked_again_and_keeps_the_verdict_history(page: Any, server: str) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    thread = _thread_id(page)
    before = _result(server, thread)
    runs_before = len(httpx.get(f"{server}/threads/{thread}/runs", timeout=30).json())

    page.click("#actions button[data-action='edit']")
    new_title = "宿舍护肤三步：平价也好用"
    page.fill("#edit-title", new_title)
    page.fill("#edit-tags", "平价护肤 学生党 宿舍好物")
    page.click("#edit-save")
    page.wait_for_function(
        "(t) => document.querySelector('#post h1')?.textContent === t"
        " && document.querySelector('#run-status').textContent === '完成'",
        arg=new_title,
    )
    after = _result(server, thread)
    assert after["post"]["title"] == new_title
    assert after["post"]["tags"] == ["平价护肤", "学生党", "宿舍好物"]
    assert after["post"]["blocks"] == before["post"]["blocks"]
    # The critic judged the edit as a new attempt: the earlier verdicts stay.
    assert len(after["attempts"]) == len(before["attempts"]) + 1
    assert after["attempts"][: len(before["attempts"])] == before["attempts"]
    assert len(httpx.get(f"{server}/threads/{thread}/runs", timeout=30).json()) == runs_before + 1
    shown = page.eval_on_selector_all(
        "#verdicts .verdict", "els => els.map((e) => e.dataset.attempt)"
    )
    assert shown == [str(after["attempts"][-1]["attempt"])]  # this run: the critic only
    assert page.locator("#quality .attempts li").count() == len(after["attempts"])
    assert page.eval_on_selector_all(
        "#stages li.done", "els => els.map((e) => e.dataset.stage)"
    ) == [
        "critic",
        "finalize",
    ]


def test_the_draft_renders_as_formatted_text_without_markup_injection(
    page: Any, server: str
) -> None:
    page.goto(server)
    page.evaluate(
        """() => onMessage([
            {id: 'm1', content: '## 标题\\n- 第一点 **重点**\\n<img src=x onerror=alert(1)>'},
            {langgraph_node: 'writer_agent'}])"""
    )
    assert page.inner_text("#draft h4") == "标题"
    assert page.inner_text("#draft li strong") == "重点"
    assert page.locator("#draft img").count() == 0
    assert "<img src=x" in page.inner_text("#draft p")


def test_dark_mode_and_a_phone_width_fit(browser: Any, server: str) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, locale="zh-CN", color_scheme="dark"
    )
    page = context.new_page()
    try:
        page.goto(server)
        background = page.evaluate(
            "() => getComputedStyle(document.querySelector('.panel')).backgroundColor"
        )
        assert background == "rgb(33, 32, 37)"
        overflow = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
    finally:
        context.close()


SCHEMES = [  # (file name, language, colour scheme, viewport); console-desktop/-phone above
    ("console-desktop-dark", "zh", "dark", {"width": 1280, "height": 900}),
    ("console-desktop-en-dark", "en", "dark", {"width": 1280, "height": 900}),
    ("console-phone-en", "en", "light", {"width": 390, "height": 844}),
    ("console-phone-dark", "zh", "dark", {"width": 390, "height": 844}),
]


def test_a_finished_run_in_both_languages_and_colour_schemes(
    page: Any, browser: Any, server: str
) -> None:
    _start(page, server, REQUEST, auto_confirm=True)
    _wait_for_result(page)
    run_url = page.url
    for name, lang, scheme, viewport in SCHEMES:
        context = browser.new_context(viewport=viewport, locale="zh-CN", color_scheme=scheme)
        context.add_init_script(f"localStorage.setItem('atelier.lang', '{lang}')")
        other = context.new_page()
        errors: list[str] = []
        other.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        other.on(
            "console",
            lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None,
        )
        try:
            other.goto(run_url)  # a fresh tab replays the run from its first frame
            _wait_for_result_in(other, "完成" if lang == "zh" else "Done")
            full = viewport["width"] > 400
            if not full:  # the cards load lazily: bring them on screen first
                other.evaluate("() => document.querySelector('#post .gallery').scrollIntoView()")
            other.wait_for_function(
                "() => [...document.querySelectorAll('#post img')]"
                ".every((i) => i.complete && i.naturalWidth > 0)"
            )
            overflow = other.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, name
            if not full:
                other.evaluate("() => document.querySelector('#result').scrollIntoView()")
            other.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full)
        finally:
            context.close()
        assert not errors, (name, errors)


def test_regenerate_starts_a_new_post_with_the_same_request(page: Any, server: str) -> None:
    request = "写一篇小红书笔记：早八通勤五分钟妆容"
    _start(page, server, request, auto_confirm=True, images=2)
    _wait_for_result(page)
    first = _thread_id(page)

    page.click("#actions button[data-action='regenerate']")
    page.wait_for_function("(t) => !location.search.includes(t)", arg=first)
    _wait_for_result(page)
    second = _thread_id(page)
    assert second != first
    values = httpx.get(f"{server}/threads/{second}/state", timeout=30).json()["values"]
    assert values["request"] == request and values["image_count"] == 2
    assert page.input_value("#request") == request
    # Both posts are in the library.
    page.wait_for_selector(f"#library-list li[data-thread='{second}']")
    assert page.locator(f"#library-list li[data-thread='{first}']").count() == 1


def _check_usage(page: Any, result: dict[str, Any]) -> None:
    """The usage panel shows the result's calls and tokens by role, and their total."""
    usage = result["usage"]
    assert usage["roles"] and usage["total"]["calls"] > 0
    assert usage["total"]["calls"] == sum(u["calls"] for u in usage["roles"].values())
    for role, numbers in usage["roles"].items():
        cells = page.eval_on_selector_all(
            f"#usage tr[data-role='{role}'] td", "els => els.map((e) => e.textContent)"
        )
        # The scripted server reports usage on every answer: every call is metered.
        assert numbers["metered"] == numbers["calls"] > 0
        assert cells[1:4] == [
            str(numbers["calls"]),
            str(numbers["prompt_tokens"]),
            str(numbers["completion_tokens"]),
        ], role
    total = page.eval_on_selector_all("#usage tr.total td", "els => els.map((e) => e.textContent)")
    assert total[1] == str(usage["total"]["calls"])
    assert total[2] == str(usage["total"]["prompt_tokens"])
    assert "写作" in page.inner_text("#usage")  # roles by name


def test_regenerating_one_card_replaces_only_that_card(page: Any, server: str) -> None:
    _start(page, server, REQUEST, auto_confirm=True, images=2)
    _wait_for_result(page)
    thread = _thread_id(page)
    before = _result(server, thread)
    cover, card = before["images"]
    cover_bytes = httpx.get(server + cover["url"], timeout=30).content
    card_bytes = httpx.get(server + card["url"], timeout=30).content
    runs_before = len(httpx.get(f"{server}/threads/{thread}/runs", timeout=30).json())

    page.locator(f"#post figure[data-asset='{card['asset_id']}'] button.redraw").click()
    page.wait_for_function(
        "(old) => { const imgs = [...document.querySelectorAll('#post figure')];"
        " return document.querySelector('#run-status').textContent === '完成'"
        " && imgs.length === 2 && !imgs.some((f) => f.dataset.asset === old); }",
        arg=card["asset_id"],
    )
    after = _result(server, thread)
    new_cover, new_card = after["images"]
    assert new_cover == cover  # the other card: same asset, same URL …
    assert httpx.get(server + new_cover["url"], timeout=30).content == cover_bytes  # same bytes
    assert new_card["slot"] == card["slot"] and new_card["asset_id"] != card["asset_id"]
    assert new_card["url"] != card["url"]
    new_bytes = httpx.get(server + new_card["url"], timeout=30).content
    assert new_bytes[:8] == b"\x89PNG\r\n\x1a\n" and new_bytes != card_bytes
    assert after["post"] == before["post"]  # the text is untouched
    # The critic checked the post with its new card: one more attempt, of source "card".
    assert len(after["attempts"]) == len(before["attempts"]) + 1
    assert after["attempts"][-1]["source"] == "card" and after["revision"] == "card"
    assert len(httpx.get(f"{server}/threads/{thread}/runs", timeout=30).json()) == runs_before + 1
    assert page.eval_on_selector_all(
        "#stages li.done", "els => els.map((e) => e.dataset.stage)"
    ) == ["redraw_card", "critic", "finalize"]
    assert page.locator("#gallery figure").count() == 1  # the run drew one card
    shown = page.eval_on_selector_all("#post figure", "els => els.map((e) => e.dataset.asset)")
    assert shown == [cover["asset_id"], new_card["asset_id"]]


def test_a_redraw_that_names_no_card_of_the_post_is_refused(server: str) -> None:
    thread = httpx.post(f"{server}/threads", json={}, timeout=30).json()["thread_id"]
    body = {
        "assistant_id": "atelier",
        "input": {"request": REQUEST, "auto_confirm": True, "image_count": 1},
    }
    run = httpx.post(f"{server}/threads/{thread}/runs/wait", json=body, timeout=120)
    assert run.status_code == 200

    def redraw(command: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{server}/threads/{thread}/runs",
            json={"assistant_id": "atelier", "command": command},
            timeout=30,
        )

    wrong = redraw({"goto": "redraw_card", "update": {"redraw": {"slot": 5}}})
    assert wrong.status_code == 422
    assert "command.update.redraw.slot" in wrong.text and "slot 5 is not a card" in wrong.text
    missing = redraw({"goto": "redraw_card"})
    assert missing.status_code == 422 and "needs" in missing.text
    bad = redraw({"goto": "redraw_card", "update": {"redraw": {"slot": "two"}}})
    assert bad.status_code == 422 and "redraw.slot" in bad.text
    as_finalize = httpx.post(
        f"{server}/threads/{thread}/state",
        json={"values": {"redraw": {"slot": 9}}, "as_node": "finalize"},
        timeout=30,
    )
    assert as_finalize.status_code == 422 and "values.redraw.slot" in as_finalize.text
    # Nothing was half-written: the thread still has no redraw asked for.
    values = httpx.get(f"{server}/threads/{thread}/state", timeout=30).json()["values"]
    assert not values.get("redraw")
