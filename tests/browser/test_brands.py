"""The console's brand presets in a real browser (app/static/brands.js): issue 25's acceptance.

The real service (uvicorn on 127.0.0.1, the real `atelier` pipeline, SQLite) with the
scripted LLM on loopback. The scripted writer writes the brand voice its system
prompt carries into the post, so the post a person sees shows which version of the
preset the run used; the scripted model's request log shows what the writer was
told. The browser creates a preset from the form the context schema drives, picks it,
runs, edits it (version 2), rolls back to version 1 from the version history and
deletes it; what it did is checked through the API too, in both languages. Chromium
as in tests/browser/test_console.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings
from tests.browser.test_console import (
    CHROMIUM,
    CHROMIUM_ARGS,
    REQUEST,
    SCREENSHOTS,
    TIMEOUT_MS,
    _visible_labels,
)
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: Chinese characters; three or more latin letters (an untranslated English word).
CHINESE = re.compile(r"[\u3400-\u9fff]")
ENGLISH = re.compile(r"[A-Za-z]{3,}")
BRAND = "青禾护肤"
VOICE_1 = "像学姐一样亲切，讲成分不讲玄学"
VOICE_2 = "像实验室工程师一样冷静，只讲数据"
#: How the writer's system prompt names the brand's voice (prompts/writer.py BRAND).
VOICE_LINE = re.compile(r"语气和风格：(.+)")


def _writing_in_the_voice(req: ChatRequest, reply: Reply) -> Reply:
    """Have the writer's post open with the voice its system prompt gives, if any."""
    found = VOICE_LINE.search(req.system_text)
    if req.tools or not found or not reply.content:
        return reply
    title, rest = reply.content.split("\n\n", 1)
    return dataclasses.replace(reply, content=f"{title}\n\n语气：{found.group(1)}\n\n{rest}")


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    respond = atelier_responder(images=1)
    with ScriptedOpenAIServer(lambda req: _writing_in_the_voice(req, respond(req))) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer) -> Iterator[str]:
    settings = service_settings(tmp_path_factory.mktemp("brands") / "data", llm.base_url)
    with LiveServer(settings, None) as live:  # None: the real atelier pipeline
        yield live.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _open(browser: Any, server: str, language: str, errors: list[str], **options: Any) -> Any:
    """A console page in `language` with no preset left over; its errors go to `errors`."""
    for preset in _presets(server):
        httpx.delete(f"{server}/assistants/{preset['assistant_id']}").raise_for_status()
    context = browser.new_context(
        **{"viewport": {"width": 1280, "height": 900}, "locale": "zh-CN", **options}
    )
    context.add_init_script(f"localStorage.setItem('atelier.lang', '{language}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(server)
    return page


@pytest.fixture
def page_errors() -> list[str]:
    """What the page logged as errors (a test removes those it caused on purpose)."""
    return []


@pytest.fixture
def page(browser: Any, server: str, page_errors: list[str]) -> Iterator[Any]:
    page = _open(browser, server, "zh", page_errors)
    yield page
    page.context.close()
    assert not page_errors, f"errors on the page: {page_errors}"


def _presets(server: str) -> list[dict[str, Any]]:
    found = httpx.post(f"{server}/assistants/search", json={"graph_id": "atelier", "limit": 100})
    return [a for a in found.raise_for_status().json() if a["assistant_id"] != "atelier"]


def _create_in_the_form(page: Any, voice: str) -> None:
    page.click("#brands summary")
    page.click("#brand-new")
    page.fill("#brand-field-brand_name", BRAND)
    page.fill("#brand-field-voice", voice)
    page.fill("#brand-field-audience", "大学生")
    page.fill("#brand-field-must_include", "氨基酸\n防晒")
    page.select_option("#brand-field-platform", "xiaohongshu")
    page.fill("#brand-field-image_count", "1")
    page.click("#brand-save")
    page.wait_for_selector("#brands-list li")


def _run(page: Any) -> str:
    """Write a post with the form as it is; return the post's text once it is done."""
    page.fill("#request", REQUEST)
    page.check("#auto_confirm")
    page.click("#start")
    page.wait_for_selector("#result:not([hidden]) #post h1")
    page.wait_for_function("() => document.querySelector('#run-status').textContent === '完成'")
    return str(page.inner_text("#post"))


def _writer_systems(llm: ScriptedOpenAIServer) -> list[str]:
    return [r.system_text for r in llm.requests if not r.tools and r.system_text]


def test_a_preset_made_in_the_console_writes_in_its_voice_is_edited_and_rolled_back(
    page: Any, server: str, llm: ScriptedOpenAIServer
) -> None:
    _create_in_the_form(page, VOICE_1)
    (preset,) = _presets(server)
    assistant_id = preset["assistant_id"]
    assert preset["version"] == 1 and preset["name"] == BRAND
    assert preset["context"] == {
        "brand_name": BRAND,
        "voice": VOICE_1,
        "audience": "大学生",
        "must_include": ["氨基酸", "防晒"],
        "platform": "xiaohongshu",
        "image_count": 1,
    }
    # The new preset is picked, and the form takes its images.
    assert page.input_value("#brand") == assistant_id
    assert page.input_value("#image_count") == "1"
    assert "已创建品牌预设" in page.inner_text("#brand-note")

    llm.reset()
    assert f"语气：{VOICE_1}" in _run(page)
    (system,) = _writer_systems(llm)
    assert f"品牌名：{BRAND}" in system and VOICE_1 in system and "氨基酸、防晒" in system
    thread_id = page.evaluate("state.threadId")
    runs = httpx.get(f"{server}/threads/{thread_id}/runs").json()
    assert [r["assistant_id"] for r in runs] == [assistant_id]

    # Edit: version 2, which the next run uses. Saving leaves the picker as the person set it.
    page.select_option("#brand", "")
    page.click(f"#brands-list li[data-assistant='{assistant_id}'] button[data-action='edit']")
    assert page.input_value("#brand-field-voice") == VOICE_1
    assert page.input_value("#brand-field-must_include") == "氨基酸\n防晒"
    page.fill("#brand-field-voice", VOICE_2)
    page.click("#brand-save")
    page.wait_for_function("() => document.querySelector('#brand-note').textContent.includes('2')")
    assert page.inner_text("#brand-note") == "已保存为第 2 版，之后的创作使用这一版。"
    assert "第 2 版" in page.inner_text("#brands-list li .muted")
    assert page.input_value("#brand") == ""
    page.select_option("#brand", assistant_id)
    llm.reset()
    post = _run(page)
    assert f"语气：{VOICE_2}" in post and VOICE_1 not in post

    # The version history lists both; "use this version" rolls back to version 1.
    page.click(f"#brands-list li[data-assistant='{assistant_id}'] button[data-action='versions']")
    page.wait_for_selector("#brand-versions:not([hidden]) li[data-version='1']")
    assert page.eval_on_selector_all(
        "#brand-versions-list li", "els => els.map((e) => e.dataset.version)"
    ) == ["2", "1"]
    current = page.locator("#brand-versions-list li[data-current]")
    assert current.get_attribute("data-version") == "2"
    page.click("#brand-versions-list li[data-version='1'] button.use")
    page.wait_for_selector("#brand-versions-list li[data-version='1'][data-current]")
    assert page.inner_text("#brand-note") == "之后的创作使用第 1 版。"
    latest = httpx.get(f"{server}/assistants/{assistant_id}").json()
    assert latest["version"] == 1 and latest["context"]["voice"] == VOICE_1
    llm.reset()
    post = _run(page)
    assert f"语气：{VOICE_1}" in post and VOICE_2 not in post
    assert all(VOICE_1 in s and VOICE_2 not in s for s in _writer_systems(llm))
    page.screenshot(path=str(SCREENSHOTS / "console-brands.png"), full_page=True)

    # Delete (the confirm is accepted): gone from the list, the picker and the API;
    # the posts written with it stay readable.
    page.click(f"#brands-list li[data-assistant='{assistant_id}'] button[data-action='delete']")
    page.wait_for_selector("#brands-empty:not([hidden])")
    assert page.locator("#brand option").count() == 1 and page.input_value("#brand") == ""
    assert page.locator("#brand-versions").is_hidden()
    assert httpx.get(f"{server}/assistants/{assistant_id}").status_code == 404
    assert httpx.get(f"{server}/threads/{thread_id}/state").json()["values"]["brand"]["voice"]


def test_a_reopened_post_picks_the_brand_it_was_written_for(page: Any, server: str) -> None:
    _create_in_the_form(page, VOICE_1)
    (preset,) = _presets(server)
    _run(page)
    thread_id = page.evaluate("state.threadId")
    page.select_option("#brand", "")
    page.goto(server)  # a fresh page opens the post from the library
    page.wait_for_selector(f"#library-list li[data-thread='{thread_id}']")
    page.click(f"#library-list li[data-thread='{thread_id}'] button.open")
    page.wait_for_function(
        "(id) => document.querySelector('#brand').value === id", arg=preset["assistant_id"]
    )


def test_the_form_follows_the_context_schema_and_shows_the_servers_refusal(
    page: Any, page_errors: list[str]
) -> None:
    page.click("#brands summary")
    page.click("#brand-new")
    count = page.locator("#brand-field-image_count")
    assert (count.get_attribute("min"), count.get_attribute("max")) == ("1", "9")
    assert page.inner_text("[data-field='image_count'] .hint") == "1–9"
    assert page.get_attribute("#brand-field-voice", "maxlength") == "2000"
    assert page.eval_on_selector_all(
        "#brand-fields [data-field]", "els => els.map((e) => e.dataset.field)"
    ) == [
        "brand_name", "voice", "audience", "platform", "image_provider", "image_count",
        "must_include", "must_avoid", "title_min", "title_max", "body_min", "body_max",
        "example_posts", "critic_pass_threshold", "knowledge_namespace",
    ]  # fmt: skip
    # A rule the browser does not check (a term over 50 characters) is the server's 422.
    page.fill("#brand-field-brand_name", BRAND)
    page.fill("#brand-field-must_avoid", "长" * 51)
    page.click("#brand-save")
    page.wait_for_selector("#brand-error:not([hidden])")
    assert "context.must_avoid" in page.inner_text("#brand-error"), page.inner_text("#brand-error")
    page_errors.remove(
        "Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"
    )
    assert page.locator("#brand-form").is_visible()
    assert page.locator("#brands-list li").count() == 0


def test_the_brand_labels_in_both_languages(browser: Any, server: str) -> None:
    errors: list[str] = []
    page = _open(browser, server, "zh", errors)
    try:
        _create_in_the_form(page, VOICE_1)
        page.click("#brands-list li button[data-action='versions']")
        page.click("#brand-new")
        page.wait_for_selector("#brand-versions:not([hidden])")
        page.select_option("#lang", "en")
        chinese = [text for text in _visible_labels(page) if CHINESE.search(text)]
        assert not chinese, chinese
        assert page.inner_text("label[for='brand']") == "Brand"
        assert page.inner_text("label[for='brand-field-voice']") == "Voice and tone"
        assert "Version 1" in page.inner_text("#brand-versions-list")
        page.select_option("#lang", "zh")
        allowed = {"Atelier", "OpenAI", "API", "Key", "Markdown"}
        english = [text for text in _visible_labels(page) if set(ENGLISH.findall(text)) - allowed]
        assert not english, english
        assert page.inner_text("label[for='brand-field-voice']") == "语气和风格"
    finally:
        page.context.close()
    assert not errors, errors


def test_the_brands_panel_fits_a_phone_in_dark_mode(browser: Any, server: str) -> None:
    errors: list[str] = []
    options = {"viewport": {"width": 390, "height": 844}, "color_scheme": "dark"}
    page = _open(browser, server, "zh", errors, **options)
    try:
        _create_in_the_form(page, VOICE_1)
        page.click("#brands-list li button[data-action='versions']")
        page.click("#brand-new")
        page.wait_for_selector("#brand-versions:not([hidden])")
        background = page.evaluate(
            "() => getComputedStyle(document.querySelector('#brand-form')).backgroundColor"
        )
        assert background == "rgb(33, 32, 37)"
        overflow = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0
        page.screenshot(path=str(SCREENSHOTS / "console-brands-phone-dark.png"), full_page=True)
    finally:
        page.context.close()
    assert not errors, errors


def test_a_presets_notes_are_its_namespaces_notes(page: Any, server: str) -> None:
    other = {"type": "reference", "content": "别的品牌的笔记", "namespace": "other-brand"}
    httpx.post(f"{server}/knowledge/notes", json=other).raise_for_status()
    page.click("#brands summary")
    page.click("#brand-new")
    page.fill("#brand-field-brand_name", BRAND)
    namespace = "#brand-field-knowledge_namespace"
    page.fill(namespace, "Bad NS")  # the schema's pattern, checked by the browser
    assert page.eval_on_selector(namespace, "el => el.validity.patternMismatch")
    page.fill(namespace, "qinghe")
    assert not page.eval_on_selector(namespace, "el => el.validity.patternMismatch")
    assert page.inner_text("[data-field='knowledge_namespace'] .hint") == "小写字母、数字和 - _ ."
    page.click("#brand-save")
    page.click("#brands-list li button[data-action='notes']")
    page.wait_for_selector("#brand-notes:not([hidden]) #brand-notes-empty:not([hidden])")
    assert "qinghe" in page.inner_text("#brand-notes-hint")

    page.fill("#brand-note-content", "禁止使用绝对化用语（最、第一）")
    page.select_option("#brand-note-type", "blocker")
    page.click("#brand-note-add")
    page.wait_for_selector("#brand-notes-list li")
    assert page.inner_text("#brand-notes-list li .badge") == "硬性规则"
    assert "别的品牌" not in page.inner_text("#brand-notes")
    listed = httpx.get(f"{server}/knowledge/notes", params={"namespace": "qinghe"}).json()
    (note,) = listed["items"]
    assert (note["type"], note["status"], note["content"]) == (
        "blocker",
        "approved",
        "禁止使用绝对化用语（最、第一）",
    )
    page.select_option("#lang", "en")
    assert page.inner_text("#brand-notes-list li .badge") == "Hard rule"
    assert page.inner_text("#brand-note-add") == "Add note"

    page.click("#brand-notes-list li button.delete")  # the confirm is accepted
    page.wait_for_selector("#brand-notes-empty:not([hidden])")
    archived = httpx.get(f"{server}/knowledge/notes/{note['id']}").json()
    assert archived["status"] == "archived"
