"""The console's schedules and webhook deliveries in a real browser (app/static/schedules.js).

The real service (uvicorn on 127.0.0.1, the real `atelier` pipeline, SQLite) with the
scripted LLM on loopback, and a webhook receiver on loopback (allowed by
WEBHOOK_ALLOW_PRIVATE here). The browser schedules the compose form's request,
pauses, resumes and deletes the schedule, and shows a run's deliveries with each
attempt; what it did is checked through the API, in both languages. Chromium as in
tests/browser/test_console.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.app.atelier_llm import atelier_responder
from tests.app.harness import LiveServer, service_settings, wait_until
from tests.app.test_webhooks import Receiver
from tests.browser.test_console import CHROMIUM, CHROMIUM_ARGS, REQUEST, SCREENSHOTS, TIMEOUT_MS
from tests.support.scripted_openai import ScriptedOpenAIServer

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: Once a year: no tick falls due while a test runs.
YEARLY = "0 9 1 1 *"
#: Chinese characters; three or more latin letters (an untranslated English word).
CHINESE = re.compile(r"[\u3400-\u9fff]")
ENGLISH = re.compile(r"[A-Za-z]{3,}")


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(atelier_responder(images=1)) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: ScriptedOpenAIServer) -> Iterator[str]:
    settings = service_settings(
        tmp_path_factory.mktemp("schedules") / "data",
        llm.base_url,
        webhook_allow_private=True,
        webhook_backoff_seconds=0.2,
    )
    with LiveServer(settings, None) as live:  # None: the real atelier pipeline
        yield live.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page_errors() -> list[str]:
    """What the page logged as errors (a test removes those it caused on purpose)."""
    return []


@pytest.fixture(params=["zh", "en"])
def page(
    request: pytest.FixtureRequest, browser: Any, server: str, page_errors: list[str]
) -> Iterator[Any]:
    """A page of the console in the parameter's language, with no schedule left over."""
    for cron in httpx.post(f"{server}/runs/crons/search", json={"limit": 100}).json():
        httpx.delete(f"{server}/runs/crons/{cron['cron_id']}").raise_for_status()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    context.add_init_script(f"localStorage.setItem('atelier.lang', '{request.param}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("dialog", lambda dialog: dialog.accept())  # the delete confirmation
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    page.on("console", lambda m: page_errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not page_errors, f"errors on the page: {page_errors}"


def crons(server: str) -> list[dict[str, Any]]:
    return list(httpx.post(f"{server}/runs/crons/search", json={"limit": 100}).json())


def language(page: Any) -> str:
    """The console's language now (its `lang`)."""
    return str(page.evaluate("() => lang"))


def labels_of(page: Any, selector: str) -> list[str]:
    """The texts the console wrote inside `selector` (not user content), placeholders too."""
    return list(
        page.evaluate(
            """(selector) => {
                const out = [];
                for (const root of document.querySelectorAll(selector)) {
                    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
                    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                        const text = n.textContent.trim();
                        if (text && !n.parentElement.closest('[data-user]')) out.push(text);
                    }
                    const fields = root.querySelectorAll('[placeholder]');
                    for (const el of fields) out.push(el.placeholder);
                }
                return out;
            }""",
            selector,
        )
    )


def assert_in_language(page: Any, selector: str) -> None:
    """Every label inside `selector` is in the page's language."""
    texts = labels_of(page, selector)
    assert texts, f"no label in {selector}"
    if language(page) == "en":
        assert not [text for text in texts if CHINESE.search(text)], texts
    else:
        assert not [text for text in texts if ENGLISH.search(text)], texts


def test_schedule_the_request_then_pause_resume_and_delete_it(page: Any, server: str) -> None:
    page.goto(server)
    page.fill("#request", REQUEST)
    page.select_option("#platform", "weibo")
    page.click("#schedule summary")
    page.fill("#schedule-cron", "30 9 * * 1-5")
    page.fill("#schedule-timezone", "Asia/Shanghai")
    page.click("#schedule-create")
    page.wait_for_selector("#schedules-list li[data-state='on']")
    (cron,) = crons(server)
    assert cron["assistant_id"] == "atelier" and cron["thread_id"] is None
    assert cron["schedule"] == "30 9 * * 1-5" and cron["timezone"] == "Asia/Shanghai"
    assert cron["enabled"] is True and cron["next_run_date"]
    run_input = cron["payload"]["input"]
    assert run_input["request"] == REQUEST and run_input["platform"] == "weibo"
    assert run_input["auto_confirm"] is True  # nobody answers a scheduled run's question
    item = page.locator("#schedules-list li")
    assert REQUEST in item.inner_text() and "30 9 * * 1-5 · Asia/Shanghai" in item.inner_text()
    assert_in_language(page, "#schedule, #schedules")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"console-schedules-{language(page)}.png"))

    item.locator("button.toggle").click()
    page.wait_for_selector("#schedules-list li[data-state='paused']")
    assert crons(server)[0]["enabled"] is False
    assert ("已暂停" if language(page) == "zh" else "Paused") in item.inner_text()
    assert_in_language(page, "#schedules")

    item.locator("button.toggle").click()
    page.wait_for_selector("#schedules-list li[data-state='on']")
    assert crons(server)[0]["enabled"] is True

    page.reload()  # the list is the server's, not the page's
    page.wait_for_selector("#schedules-list li[data-state='on']")
    page.locator("#schedules-list li button.delete").click()
    page.wait_for_selector("#schedules-empty:not([hidden])")
    assert crons(server) == []


def test_a_refused_schedule_shows_the_servers_reason(
    page: Any, server: str, page_errors: list[str]
) -> None:
    page.goto(server)
    page.fill("#request", REQUEST)
    page.click("#schedule summary")
    page.fill("#schedule-cron", "61 * * * *")
    page.click("#schedule-create")
    error = page.wait_for_selector("#schedule-error:not([hidden])")
    assert "schedule" in error.inner_text()
    refused = "the server responded with a status of 422"
    assert len([e for e in page_errors if refused in e]) == 1  # the browser logs the 422
    page_errors[:] = [e for e in page_errors if refused not in e]
    page.fill("#schedule-cron", YEARLY)
    page.uncheck("#schedule-enabled")
    page.click("#schedule-create")
    page.wait_for_selector("#schedules-list li[data-state='paused']")
    assert page.is_hidden("#schedule-error")
    assert crons(server)[0]["enabled"] is False


def test_a_runs_view_lists_its_webhook_deliveries_with_each_attempt(page: Any, server: str) -> None:
    with Receiver([500]) as receiver, httpx.Client(base_url=server, timeout=60) as http:
        thread_id = http.post("/threads", json={}).json()["thread_id"]
        body = {
            "assistant_id": "atelier",
            "input": {"request": REQUEST, "auto_confirm": True, "image_count": 1},
            "webhook": receiver.url,
        }
        answer = http.post(f"/threads/{thread_id}/runs/wait", json=body)
        assert answer.status_code == 200, answer.text
        run_id = answer.headers["Content-Location"].split("/")[4]
        path = f"/threads/{thread_id}/runs/{run_id}/webhooks"
        wait_until(lambda: http.get(path).json()[0]["status"] == "success", timeout=30)
        page.goto(f"{server}/?thread={thread_id}&run={run_id}")
        page.wait_for_selector("#deliveries:not([hidden]) li[data-status='success']")
    attempts = page.locator("#deliveries .attempts li")
    assert attempts.count() == 2
    first, second = attempts.nth(0), attempts.nth(1)
    assert first.get_attribute("data-outcome") == "http_error"
    assert "HTTP 500" in first.inner_text() and "HTTP 200" in second.inner_text()
    assert first.locator(".error").inner_text().strip() == "HTTP 500"
    latency = "毫秒" if language(page) == "zh" else "ms"
    assert re.search(rf"\d+ {latency}", second.locator(".latency").inner_text())
    assert receiver.url in page.inner_text("#deliveries")
    assert ("已送达" if language(page) == "zh" else "Delivered") in page.inner_text("#deliveries")
    assert_in_language(page, "#deliveries")
    page.locator("#deliveries").screenshot(
        path=str(SCREENSHOTS / f"console-deliveries-{language(page)}.png")
    )
    other = "en" if language(page) == "zh" else "zh"
    page.select_option("#lang", other)  # the switch redraws the deliveries too
    assert language(page) == other
    assert_in_language(page, "#deliveries")
