"""The console's keys page in a real browser (app/static/keys.js), in both languages.

The real service (uvicorn on 127.0.0.1, SQLite) keyed with one bootstrap admin key,
which the page holds. The admin makes a member key (its secrets shown once), changes
its role, expiry and quotas, gives it a new webhook secret and revokes it; each step is
checked through the API and every label is in the page's language. A member's
console shows no keys page. Chromium as in tests/browser/test_console.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.app.harness import LiveServer, service_settings
from tests.browser.test_console import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, TIMEOUT_MS
from tests.browser.test_schedules import assert_in_language, language

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN_KEY = "console-keys-admin-0123456789"
ADMIN = {"X-Api-Key": ADMIN_KEY}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = service_settings(
        tmp_path_factory.mktemp("keys") / "data",
        "http://127.0.0.1:9/v1",  # nothing here calls a model
        auth_api_keys=[ADMIN_KEY],
    )
    with LiveServer(settings, None) as live:
        yield live.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_console(browser: Any, server: str, key: str, lang: str, errors: list[str]) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, locale="zh-CN")
    context.add_init_script(
        f"localStorage.setItem('atelier.lang', '{lang}');"
        f"localStorage.setItem('atelier.key', '{key}')"
    )
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("dialog", lambda dialog: dialog.accept())  # the revocation's confirmation
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(server)
    return page


def the_key(server: str, key_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server}/keys/{key_id}", headers=ADMIN, timeout=30).json())


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_admin_makes_changes_and_revokes_a_key_in_the_console(
    browser: Any, server: str, lang: str
) -> None:
    errors: list[str] = []
    page = open_console(browser, server, ADMIN_KEY, lang, errors)
    page.wait_for_selector("#keys:not([hidden])")
    page.click("#keys summary")
    assert_in_language(page, "#keys")
    name = f"客户 B ({lang})"
    page.fill("#key-name", name)
    page.select_option("#key-role", "member")
    page.fill("#key-quotas input[name='crons']", "50")
    page.fill("#key-quotas input[name='monthly_spend']", "12.5")
    page.click("#key-submit")
    page.wait_for_selector("#key-secrets:not([hidden])")
    secret = page.inner_text("#key-secret-value").strip()
    webhook_secret = page.inner_text("#key-webhook-secret-value").strip()
    assert re.fullmatch(r"atl_[A-Za-z0-9]{43}", secret)
    assert webhook_secret.startswith("whsec_")
    me = httpx.get(f"{server}/keys/me", headers={"X-Api-Key": secret}, timeout=30).json()
    key_id = me["key_id"]
    assert me["role"] == "member" and me["name"] == name
    assert me["quotas"] == {"crons": 50, "monthly_spend": 12.5}
    item = page.locator(f"#keys-list li[data-key='{key_id}']")
    assert name in item.inner_text()
    assert_in_language(page, "#keys")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#keys").screenshot(path=str(SCREENSHOTS / f"console-keys-{language(page)}.png"))
    page.click("#key-secrets-done")  # shown once: gone from the page
    assert page.is_hidden("#key-secrets") and secret not in page.content()

    item.locator("select.role").select_option("read-only")
    page.wait_for_function(f"() => keys.find((k) => k.key_id === '{key_id}')?.role === 'read-only'")
    assert the_key(server, key_id)["role"] == "read-only"

    item.locator("button.edit").click()
    page.fill("#key-expires", "2031-06-01T09:30")
    page.fill("#key-quotas input[name='crons']", "")
    page.fill("#key-quotas input[name='runs_per_minute']", "3")
    page.click("#key-submit")
    page.wait_for_selector("#keys-note:not([hidden])")
    changed = the_key(server, key_id)
    assert changed["quotas"] == {"runs_per_minute": 3, "monthly_spend": 12.5}
    assert changed["expires_at"] is not None and changed["expires_at"].startswith("2031-06-01")

    item.locator("button.rotate").click()
    page.wait_for_selector("#key-secrets:not([hidden])")
    rotated = page.inner_text("#key-webhook-secret-value").strip()
    assert rotated.startswith("whsec_") and rotated != webhook_secret
    assert page.is_hidden("#key-secret-row")  # only the webhook secret is new
    page.click("#key-secrets-done")

    item.locator("button.revoke").click()
    page.wait_for_selector(f"#keys-list li[data-key='{key_id}'][data-state='revoked']")
    assert the_key(server, key_id)["state"] == "revoked"
    revoked = page.locator(f"#keys-list li[data-key='{key_id}']").inner_text()
    assert ("已吊销" if lang == "zh" else "Revoked") in revoked
    assert_in_language(page, "#keys")

    other = "en" if lang == "zh" else "zh"
    page.select_option("#lang", other)  # the switch redraws the keys page too
    assert language(page) == other
    assert_in_language(page, "#keys")
    page.context.close()
    refused = "the server responded with a status of"
    assert not [e for e in errors if refused not in e], errors


def test_a_member_sees_no_keys_page(browser: Any, server: str) -> None:
    made = httpx.post(
        f"{server}/keys", json={"name": "member", "role": "member"}, headers=ADMIN, timeout=30
    ).json()
    errors: list[str] = []
    page = open_console(browser, server, made["key"], "en", errors)
    page.wait_for_function("() => document.querySelector('#models') !== null")
    page.wait_for_load_state("networkidle")
    assert page.is_hidden("#keys")
    page.context.close()
    assert not errors, errors
