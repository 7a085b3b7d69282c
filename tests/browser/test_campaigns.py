"""The console's campaign page in a real browser (app/static/campaigns.js), in both languages.

The real service (uvicorn on 127.0.0.1, the real `atelier` pipeline, SQLite) with the
scripted campaign model on loopback (`tests.app.campaign_support.CampaignLLM`: a
planner that repeats a topic once, a writer that names its topic in the title) and a
loopback MCP server with xiaohongshu-mcp's `publish_content` (`PublishingServer`).
The campaigns' clock is the test's (moved on instead of waiting, as in
tests/app/test_campaigns.py). The browser creates a campaign, reviews and edits its
plan, starts it, shows its calendar by month and week, approves one item, edits a
post and sends another back with a reason (then sees it written again), and sees
the publications go out; each step is checked through the API, and every label is
in the page's language. Chromium as in tests/browser/test_console.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright import sync_api

from tests.app.campaign_support import (
    TOPICS,
    CampaignLLM,
    MovingClock,
    PublishingServer,
    wait_for,
    writer_prompts,
)
from tests.app.harness import LiveServer, service_settings
from tests.browser.test_console import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, TIMEOUT_MS
from tests.browser.test_schedules import assert_in_language, language
from tests.support.scripted_openai import ScriptedOpenAIServer

if not CHROMIUM.exists() and os.environ.get("CI") != "true":
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)

# A campaign of three items on two platforms is written in about a minute here.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

ZONE = "Asia/Shanghai"
BRIEF = "秋季护肤新品：讲清楚成分、用法和真实体验，面向大学生"
EDITED_TOPIC = "宿舍洗脸台收纳"
ADDED_TOPIC = "早八通勤补水"
REASON = "标题要点出宿舍场景，正文加一个真实用量"
#: Writing six posts and rewriting two takes the scripted pipeline this long at most.
WRITING_MS = 240_000


class Service:
    """The live service, its scripted model, its publisher and its campaigns' clock."""

    def __init__(self, live: LiveServer, llm: ScriptedOpenAIServer, publisher: PublishingServer):
        self.url = live.url
        self.llm = llm
        self.publisher = publisher
        self.clock = MovingClock(datetime.now(UTC))
        live.app.state.engine.campaigns.clock = self.clock
        self.api = httpx.Client(base_url=live.url, timeout=60)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with (
        ScriptedOpenAIServer(CampaignLLM()) as llm,
        PublishingServer() as publisher,
    ):
        settings = service_settings(
            tmp_path_factory.mktemp("campaigns") / "data",
            llm.base_url,
            max_retry_count=1,
            webhook_allow_private=True,  # the publisher is on loopback
            webhook_backoff_seconds=0.2,
        )
        with LiveServer(settings, None) as live:  # None: the real atelier pipeline
            yield Service(live, llm, publisher)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(params=["zh", "en"])
def page(request: pytest.FixtureRequest, browser: Any, service: Service) -> Iterator[Any]:
    """A page of the console in the parameter's language, in Shanghai, no campaign left."""
    for campaign in service.api.post("/campaigns/search", json={"limit": 100}).json():
        service.api.delete(f"/campaigns/{campaign['campaign_id']}").raise_for_status()
    service.publisher.reset()
    service.llm.reset()
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, locale="zh-CN", timezone_id=ZONE
    )
    context.add_init_script(f"localStorage.setItem('atelier.lang', '{request.param}')")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("dialog", lambda dialog: dialog.accept())  # the drop confirmation
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, f"errors on the page: {errors}"


def local_input(moment: datetime) -> str:
    """A datetime-local value: `moment` in Shanghai."""
    return moment.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%dT%H:%M")


def screenshot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}-{language(page)}.png"), full_page=True)


def items_of(service: Service, campaign_id: str) -> list[dict[str, Any]]:
    return list(service.api.get(f"/campaigns/{campaign_id}/items").json())


def review(page: Any, item_id: str) -> Any:
    return page.locator(f"#cp-reviews .cp-review[data-item='{item_id}']")


def test_a_campaign_from_its_plan_to_its_publications(page: Any, service: Service) -> None:
    page.goto(service.url)
    zh = language(page) == "zh"
    page.click("#nav-campaigns")
    page.wait_for_selector("#campaigns:not([hidden])")
    assert page.is_hidden("main.layout")
    assert page.input_value("#cp-timezone") == ZONE  # the browser's time zone by default

    # Create: three posts on 小红书 and 微博 over three days, four hours apart, published
    # through the MCP server's publish_content.
    start = (service.clock() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    page.fill("#cp-brief", BRIEF)
    page.fill("#cp-posts", "3")
    page.check("#cp-platforms input[value='weibo']")
    page.fill("#cp-start", local_input(start))
    page.fill("#cp-end", local_input(start + timedelta(days=3)))
    page.fill("#cp-gap", "240")
    page.select_option("#cp-publisher", "mcp")
    page.fill("#cp-publisher-url", service.publisher.url)
    assert page.input_value("#cp-tool") == "publish_content"
    assert page.locator("#cp-args .cp-arg").count() == 4  # xiaohongshu-mcp's arguments
    assert_in_language(page, "#cp-side")
    page.locator("#cp-side").screenshot(
        path=str(SCREENSHOTS / f"console-campaign-new-{language(page)}.png")
    )
    page.click("#cp-create")
    page.wait_for_selector("#cp-status[data-status='planned']", timeout=90_000)
    (campaign,) = service.api.post("/campaigns/search", json={}).json()
    cid = campaign["campaign_id"]
    assert page.url.endswith(f"#campaigns/{cid}")
    assert campaign["platforms"] == ["xiaohongshu", "weibo"] and campaign["posts"] == 3
    assert campaign["window"]["timezone"] == ZONE and campaign["window"]["min_gap_minutes"] == 240
    assert campaign["publisher"] == {
        "type": "mcp",
        "url": service.publisher.url,
        "tool": "publish_content",
        "arguments": {"title": "title", "content": "body", "images": "image_urls", "tags": "tags"},
    }

    # The plan: three distinct topics (the planner's repeat was refused), by slot.
    rows = page.locator("#cp-items > li")
    assert rows.count() == 3
    planned = items_of(service, cid)
    assert [i["topic"] for i in planned] == [t for t, _ in TOPICS[:3]]
    for row, item in zip(rows.all(), planned, strict=True):
        assert row.get_attribute("data-item") == item["item_id"]
        assert item["topic"] in row.inner_text()

    # Review it: a new topic for the first, the last dropped, one added.
    first = rows.nth(0)
    first.locator("button.edit").click()
    first.locator("input.plan-topic").fill(EDITED_TOPIC)
    first.locator("button.save").click()
    page.wait_for_selector(f"#cp-items > li:has-text('{EDITED_TOPIC}')")
    rows.nth(2).locator("button.drop").click()
    page.wait_for_function("() => document.querySelectorAll('#cp-items > li').length === 2")
    page.fill("#cp-add-topic", ADDED_TOPIC)
    page.click("#cp-add")
    page.wait_for_selector(f"#cp-items > li:has-text('{ADDED_TOPIC}')")
    topics = [i["topic"] for i in items_of(service, cid)]
    assert sorted(topics) == sorted([EDITED_TOPIC, TOPICS[1][0], ADDED_TOPIC])
    assert_in_language(page, "#cp-detail")

    # The calendar: a month with the three posts at their days, then their week.
    chips = page.locator("#cp-cal-grid .cp-chip")
    wait_for(lambda: chips.count() == 3, timeout=10)
    items = items_of(service, cid)
    for item in items:
        day = datetime.fromisoformat(item["slot"]).astimezone(ZoneInfo(ZONE))
        cell = page.locator(f"#cp-cal-grid .cp-day[data-day='{day:%Y-%m-%d}']")
        chip = cell.locator(f".cp-chip[data-item='{item['item_id']}']")
        assert chip.get_attribute("data-status") == "planned"
        assert f"{day:%H:%M}" in chip.inner_text()  # local time in the campaign's zone
    assert page.get_attribute("#cp-view-month", "aria-pressed") == "true"
    screenshot(page, "console-campaign-plan")
    page.click("#cp-view-week")
    assert page.get_attribute("#cp-view-week", "aria-pressed") == "true"
    assert page.locator("#cp-cal-grid.week .cp-day").count() == 7
    first_day = datetime.fromisoformat(items[0]["slot"]).astimezone(ZoneInfo(ZONE))
    assert page.locator(f".cp-day[data-day='{first_day:%Y-%m-%d}'] .cp-chip").count() >= 1
    page.locator("#cp-calendar").screenshot(
        path=str(SCREENSHOTS / f"console-campaign-week-{language(page)}.png")
    )
    assert_in_language(page, "#cp-calendar")

    # Start: every item is written for 小红书 and adapted for 微博, then waits for review.
    page.click("#cp-start-writing")
    page.wait_for_selector("#cp-status[data-status='running']")
    page.wait_for_function(
        "() => document.querySelectorAll('#cp-reviews .cp-review').length === 3",
        timeout=WRITING_MS,
    )
    items = items_of(service, cid)
    assert {i["status"] for i in items} == {"pending_review"}
    approved, rejected, edited = items
    card = review(page, approved["item_id"])
    xhs, weibo = card.locator(".cp-post").all()
    assert xhs.get_attribute("data-platform") == "xiaohongshu"
    assert weibo.get_attribute("data-platform") == "weibo"
    assert xhs.locator(".cp-post-title").inner_text() == approved["posts"][0]["post"]["title"]
    assert weibo.locator(".cp-post-body").inner_text().startswith("【微博版】")
    side_by_side = xhs.bounding_box(), weibo.bounding_box()
    assert side_by_side[0]["y"] == side_by_side[1]["y"]
    assert side_by_side[0]["x"] < side_by_side[1]["x"]
    for image in page.locator("#cp-reviews img").all():
        image.scroll_into_view_if_needed()  # they load lazily, as they come into view
    page.wait_for_function(  # the cards load by their signed links
        "() => { const imgs = [...document.querySelectorAll('#cp-reviews img')];"
        " return imgs.length > 0 && imgs.every((i) => i.complete && i.naturalWidth > 0); }"
    )
    assert_in_language(page, "#cp-queue")
    screenshot(page, "console-campaign-review")

    # Approve one: its two posts are scheduled at its slot.
    card.locator("button.approve").click()
    review(page, approved["item_id"]).wait_for(state="detached")
    page.wait_for_function("() => document.querySelectorAll('#cp-pubs-table tbody tr').length > 1")
    publications = service.api.get(f"/campaigns/{cid}/publications").json()
    assert len(publications) == 2 and page.locator("#cp-pubs-table tbody tr").count() == 2
    assert {p["status"] for p in publications} == {"scheduled"}
    assert {p["item_id"] for p in publications} == {approved["item_id"]}

    # Edit a post on its thread (the critic checks the edit), then see it revised.
    post = review(page, edited["item_id"]).locator(".cp-post[data-platform='xiaohongshu']")
    post.locator("button.edit").click()
    post.locator("input.edit-title").fill("宿舍早八五分钟护肤")
    post.locator("button.save").click()
    page.wait_for_selector(
        f"#cp-reviews .cp-review[data-item='{edited['item_id']}'] "
        ".cp-post-title:text-is('宿舍早八五分钟护肤')",
        timeout=60_000,
    )
    after = next(i for i in items_of(service, cid) if i["item_id"] == edited["item_id"])
    assert after["posts"][0]["post"]["title"] == "宿舍早八五分钟护肤"

    # Redraw its second card (the redraw path): a new card, the others kept.
    cards = after["posts"][0]["post"]["image_urls"]
    assert len(cards) >= 2
    post.locator("button.redraw[data-slot='2']").click()
    page.wait_for_selector(
        f"#cp-reviews .cp-review[data-item='{edited['item_id']}'] .cp-post .checking",
        state="detached",
        timeout=60_000,
    )
    redrawn = next(i for i in items_of(service, cid) if i["item_id"] == edited["item_id"])
    urls = redrawn["posts"][0]["post"]["image_urls"]
    assert urls[0] == cards[0] and urls[1] != cards[1]
    assert redrawn["posts"][0]["post"]["title"] == "宿舍早八五分钟护肤"
    assert page.locator(f"#cp-reviews img[src='{urls[1]}']").count() == 1

    # Send one back with a reason: it is written again, the reason in the writer's prompt.
    back = review(page, rejected["item_id"])
    back.locator("textarea.reason").fill(REASON)
    back.locator("button.reject").click()
    page.wait_for_selector(
        f"#cp-reviews .cp-review[data-item='{rejected['item_id']}'] .cp-reason",
        timeout=WRITING_MS,
    )
    rewritten = next(i for i in items_of(service, cid) if i["item_id"] == rejected["item_id"])
    assert rewritten["generation"] == 2 and rewritten["reason"] == REASON
    assert rewritten["posts"][0]["thread_id"] != rejected["posts"][0]["thread_id"]
    assert any(REASON in prompt for prompt in writer_prompts(service.llm.requests))
    assert REASON in review(page, rejected["item_id"]).inner_text()

    # The approved item's slot comes: both posts go out once, and the page shows it.
    service.clock.to(datetime.fromisoformat(approved["slot"]) + timedelta(seconds=1))
    wait_for(lambda: len(service.publisher.calls) == 2, timeout=60)
    published = "#cp-pubs-table tr[data-status='published']"
    page.wait_for_function(
        f'() => document.querySelectorAll("{published}").length === 2', timeout=30_000
    )
    rows = page.locator("#cp-pubs-table tbody tr")
    for row in rows.all():
        assert row.locator(".external-id").inner_text().startswith("note-")
        assert row.locator(".attempts").inner_text() == "1"
    assert (
        page.locator(
            f"#cp-cal-grid .cp-chip[data-item='{approved['item_id']}'][data-status='published']"
        ).count()
        == 1
    )
    assert ("已发布" if zh else "Published") in page.inner_text("#cp-pubs")
    assert_in_language(page, "#campaigns")
    screenshot(page, "console-campaign")

    # A phone: one column, the month's posts as their times; dark as the rest of the
    # console; then the other language.
    page.set_viewport_size({"width": 390, "height": 844})
    page.click("#cp-view-month")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    screenshot(page, "console-campaign-phone")
    page.emulate_media(color_scheme="dark")
    panel = page.evaluate("() => getComputedStyle($('cp-detail')).backgroundColor")
    assert panel == "rgb(33, 32, 37)"  # console.css's dark --panel
    screenshot(page, "console-campaign-phone-dark")
    other = "en" if zh else "zh"
    page.select_option("#lang", other)
    assert language(page) == other
    assert_in_language(page, "#campaigns")
