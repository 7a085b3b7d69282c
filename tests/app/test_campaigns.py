"""Campaigns over HTTP on the three deployments (issue 35), with the real `atelier` pipeline.

A real uvicorn serves the app with its default assistants; every LLM call goes to the
scripted OpenAI server (`tests.app.campaign_support.CampaignLLM`: the pipeline's normal
path, a planner that repeats a topic once, a writer that names its topic in the
title). Posts are published to a real MCP server built with the `mcp` SDK's server
(`PublishingServer`, xiaohongshu-mcp's `publish_content`) or a webhook receiver, both
on loopback. Time: in one process the campaigns' clock is the test's
(`engine.campaigns.clock`, moved on instead of waiting, as the cron tests do); against
separate processes, whose clocks are real, a test makes a publication due by moving
its slot into the past in the database, as the cron processes test does.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from core.settings import Settings
from tests.app.campaign_support import (
    DUPLICATE,
    TOPICS,
    CampaignLLM,
    MovingClock,
    PublishingServer,
    WebhookReceiver,
    wait_for,
    writer_prompts,
)
from tests.app.harness import (
    DEPLOYMENTS,
    LiveServer,
    Served,
    processes_deployment,
    serve_deployment,
    service_settings,
)
from tests.app.test_keys_service import query
from tests.support.docs import code_block
from tests.support.scripted_openai import ScriptedOpenAIServer
from tests.support.servers import (  # noqa: F401 - fixtures of the scale-out deployment
    migrated_postgres_url,
    postgres_cluster,
    redis_server,
)

pytestmark = pytest.mark.slow

KEY = "campaign-key-0123456789abcdef"
OTHER_KEY = "campaign-other-key-0123456789"
SECRET = "campaign-webhook-secret-0123456789"
ZONE = "Asia/Shanghai"
PUBLISH_CONTENT = {"title": "title", "content": "body", "images": "image_urls", "tags": "tags"}
#: Seconds of driver passes (one a second per process) a test lets go by.
PASSES = 3.0


@pytest.fixture(scope="module")
def campaign_llm() -> CampaignLLM:
    return CampaignLLM()


@pytest.fixture(scope="module")
def scripted_llm(campaign_llm: CampaignLLM) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(campaign_llm) as server:
        yield server


@pytest.fixture
def llm(scripted_llm: ScriptedOpenAIServer, campaign_llm: CampaignLLM) -> ScriptedOpenAIServer:
    scripted_llm.reset()
    campaign_llm.zui_titles = False
    campaign_llm.planner_calls = 0
    return scripted_llm


@pytest.fixture(scope="module")
def publisher() -> Iterator[PublishingServer]:
    with PublishingServer() as server:
        yield server


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.fixture(scope="module")
def processes(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scripted_llm: ScriptedOpenAIServer,
) -> Iterator[Any]:
    """`atelier serve --workers 0` twice behind nginx and `atelier worker` twice."""
    env = {
        "AUTH_API_KEYS": f"{KEY},{OTHER_KEY}",
        "LLM_TIMEOUT": "30",
        "MAX_RETRY_COUNT": "1",
        "WEBHOOK_ALLOW_PRIVATE": "true",
        "WEBHOOK_BACKOFF_SECONDS": "0.2",
        "WEBHOOK_SECRET": SECRET,
    }
    with processes_deployment(
        request, tmp_path_factory, scripted_llm.base_url, cli=True, env=env
    ) as deployment:
        yield deployment


class Deployment:
    """A deployment under test: its API (as KEY and as OTHER_KEY), and its campaigns' time."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.api = httpx.Client(base_url=served.url, headers={"X-Api-Key": KEY}, timeout=60)
        self.other = httpx.Client(base_url=served.url, headers={"X-Api-Key": OTHER_KEY}, timeout=60)
        self.clock: MovingClock | None = None
        if isinstance(served, LiveServer):
            self.clock = MovingClock(datetime.now(UTC))
            served.app.state.engine.campaigns.clock = self.clock

    def now(self) -> datetime:
        """The campaigns' time."""
        return self.clock() if self.clock is not None else datetime.now(UTC)

    def window(self, days: int = 3, gap: int = 240) -> dict[str, Any]:
        """A window of `days` days from the next full hour in an hour's time."""
        start = (self.now() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
        return {
            "start": start.isoformat(),
            "end": (start + timedelta(days=days)).isoformat(),
            "timezone": ZONE,
            "min_gap_minutes": gap,
        }

    def pass_time(self, campaign_id: str, until: datetime) -> None:
        """Make the publications due at or before `until` due now."""
        if self.clock is not None:
            self.clock.to(max(until, self.now()) + timedelta(seconds=1))
            return
        self.served.cluster.execute(  # type: ignore[attr-defined]
            "UPDATE campaign_publications SET slot = now() - interval '1 second', "
            "next_attempt_at = now() - interval '1 second' "
            f"WHERE campaign_id = '{campaign_id}' AND slot <= '{until.isoformat()}'"
        )

    # -- the API ------------------------------------------------------------------------

    def create(self, **body: Any) -> dict[str, Any]:
        values = {
            "assistant_id": "atelier",
            "brief": "秋季护肤新品：讲清楚成分、用法和真实体验，面向大学生",
            "posts": 6,
            "platforms": ["xiaohongshu", "weibo"],
            "window": self.window(),
            "approval": "required",
            **body,
        }
        answer = self.api.post("/campaigns", json=values)
        assert answer.status_code == 201, answer.text
        return dict(answer.json())

    def campaign(self, campaign_id: str) -> dict[str, Any]:
        answer = self.api.get(f"/campaigns/{campaign_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def items(self, campaign_id: str) -> list[dict[str, Any]]:
        answer = self.api.get(f"/campaigns/{campaign_id}/items")
        assert answer.status_code == 200, answer.text
        return list(answer.json())

    def publications(self, campaign_id: str) -> list[dict[str, Any]]:
        answer = self.api.get(f"/campaigns/{campaign_id}/publications")
        assert answer.status_code == 200, answer.text
        return list(answer.json())

    def planned(self, campaign_id: str) -> dict[str, Any]:
        return dict(
            wait_for(
                lambda: (c := self.campaign(campaign_id))["status"] != "planning" and c,
                timeout=90,
            )
        )

    def items_in(self, campaign_id: str, *statuses: str, timeout: float = 240) -> list[Any]:
        """Wait until every item is in one of `statuses`; return the items."""
        seen: list[Any] = []

        def arrived() -> list[Any] | None:
            seen[:] = self.items(campaign_id)
            return seen if seen and all(i["status"] in statuses for i in seen) else None

        try:
            return list(wait_for(arrived, timeout=timeout, interval=0.5))
        except AssertionError:
            shown = [(i["status"], [(p["status"], p["error"]) for p in i["posts"]]) for i in seen]
            raise AssertionError(f"items not {statuses} within {timeout} s: {shown}") from None

    def state(self, thread_id: str) -> dict[str, Any]:
        answer = self.api.get(f"/threads/{thread_id}/state")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["values"])


@pytest.fixture(params=DEPLOYMENTS)
def deployed(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    llm: ScriptedOpenAIServer,
    publisher: PublishingServer,
    receiver: WebhookReceiver,
) -> Iterator[Deployment]:
    """Each deployment (`serve_deployment`), with the real atelier pipeline and publishers."""
    publisher.reset()
    receiver.reset()

    def settings(**scale: Any) -> Settings:
        return service_settings(
            tmp_path / "data",
            llm.base_url,
            auth_api_keys=[KEY, OTHER_KEY],
            max_retry_count=1,
            webhook_allow_private=True,
            webhook_backoff_seconds=0.2,
            webhook_secret=SECRET,
            **scale,
        )

    with serve_deployment(request, settings, None, {"X-Api-Key": KEY}) as served:
        yield Deployment(served)


def mcp_publisher(server: PublishingServer) -> dict[str, Any]:
    return {
        "type": "mcp",
        "url": server.url,
        "tool": "publish_content",
        "arguments": PUBLISH_CONTENT,
    }


def slot_of(item: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(item["slot"])


def loads_without_a_key(url: str) -> bool:
    answer = httpx.get(url, timeout=30)
    return answer.status_code == 200 and answer.headers["content-type"].startswith("image/")


# --------------------------------------------------------------------------- the acceptance


def test_six_distinct_posts_on_two_platforms_are_planned_written_checked_and_published_once(
    deployed: Deployment,
    llm: ScriptedOpenAIServer,
    campaign_llm: CampaignLLM,
    publisher: PublishingServer,
) -> None:
    created = deployed.create(publisher=mcp_publisher(publisher))
    assert created["status"] == "planning" and created["plan_run_id"]
    cid = created["campaign_id"]
    campaign = deployed.planned(cid)
    assert campaign["status"] == "planned", campaign["message"]

    # Six items with distinct topics: the planner's repeated topic was rejected, and it
    # was asked again for the one missing.
    items = deployed.items(cid)
    assert [i["topic"] for i in items] == [t for t, _ in TOPICS]
    assert campaign_llm.planner_calls == 2
    plan = deployed.state(campaign["plan_thread_id"])["result"]
    assert [r["topic"] for r in plan["rejected"]] == [DUPLICATE[0]]
    assert "near-duplicate" in plan["rejected"][0]["reason"]
    # Slots inside the window, in order, at least four hours apart on each platform.
    window = created["window"]
    start, end = (datetime.fromisoformat(window[k]) for k in ("start", "end"))
    slots = [slot_of(i) for i in items]
    assert slots == sorted(slots) and start <= slots[0] and slots[-1] <= end
    assert all(b - a >= timedelta(hours=4) for a, b in itertools.pairwise(slots))
    assert all([p["platform"] for p in i["posts"]] == ["xiaohongshu", "weibo"] for i in items)

    started = deployed.api.post(f"/campaigns/{cid}/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    items = deployed.items_in(cid, "pending_review")

    # Twelve posts, each written for (or adapted to) its platform and passing its checks.
    for item in items:
        for post in item["posts"]:
            assert post["status"] == "pending_review" and post["error"] is None, post
            assert post["post"]["title"] == f"{item['topic']}笔记"
            assert post["post"]["platform"] == post["platform"]
            values = deployed.state(post["thread_id"])
            result = values["result"]
            assert result["outcome"] == "completed"
            checks = result["quality"]["checks"]
            assert all(c["passed"] for c in checks)
            assert any(c["name"].startswith("platform_") for c in checks)
            assert values["platform"] == post["platform"]
        weibo = item["posts"][1]
        assert weibo["post"]["body"].startswith("【微博版】")
        assert deployed.state(weibo["thread_id"])["adapt_from"]["platform"] == "xiaohongshu"
    assert deployed.publications(cid) == [] and publisher.calls == []  # nothing unapproved

    for item in items:
        approved = deployed.api.post(f"/campaigns/{cid}/items/{item['item_id']}/approve")
        assert approved.status_code == 200, approved.text
        assert approved.json()["status"] == "approved"
    scheduled = deployed.publications(cid)
    assert len(scheduled) == 12 and {p["status"] for p in scheduled} == {"scheduled"}
    assert sorted(p["slot"] for p in scheduled) == sorted(i["slot"] for i in items for _ in "xw")

    # The first slot: the first item's two posts go out, each once, and no other.
    deployed.pass_time(cid, slots[0])
    wait_for(lambda: len(publisher.calls) == 2, timeout=60)
    time.sleep(PASSES)
    assert len(publisher.calls) == 2
    first_title = f"{items[0]['topic']}笔记"
    assert {c.title for c in publisher.calls} == {first_title}
    assert sorted(c.content.startswith("【微博版】") for c in publisher.calls) == [False, True]
    for call in publisher.calls:
        assert call.tags == ["平价护肤", "学生党", "护肤成分"]
        assert call.images and all(loads_without_a_key(url) for url in call.images)
    done = [p for p in deployed.publications(cid) if p["status"] == "published"]
    assert len(done) == 2 and all(p["published_at"] >= p["slot"] for p in done)
    assert all(p["attempts"] == 1 and p["external_id"].startswith("note-") for p in done)

    # Every slot: twelve posts published, each exactly once.
    deployed.pass_time(cid, slots[-1])
    wait_for(lambda: len(publisher.calls) == 12, timeout=90)
    time.sleep(PASSES)
    published = {(c.title, c.content[:6]) for c in publisher.calls}
    assert len(publisher.calls) == 12 and len(published) == 12
    final = deployed.publications(cid)
    assert {p["status"] for p in final} == {"published"} and {p["attempts"] for p in final} == {1}
    assert wait_for(lambda: deployed.campaign(cid)["status"] == "completed", timeout=30)
    assert {i["status"] for i in deployed.items(cid)} == {"published"}


def test_a_title_with_zui_fails_its_check_naming_the_word(
    deployed: Deployment, llm: ScriptedOpenAIServer, campaign_llm: CampaignLLM
) -> None:
    campaign_llm.zui_titles = True
    created = deployed.create(posts=1, platforms=["xiaohongshu"], approval="auto")
    (item,) = deployed.items_in(created["campaign_id"], "failed")
    (post,) = item["posts"]
    assert post["status"] == "failed"
    assert (
        "ad_law" in post["error"]
        and "「最好」" in post["error"]
        and "广告法第九条" in post["error"]
    )
    assert post["post"]["title"].startswith("最好用的")
    assert deployed.publications(created["campaign_id"]) == []


def test_nothing_is_published_unapproved_and_a_rejection_is_written_again_with_the_reason(
    deployed: Deployment, llm: ScriptedOpenAIServer, publisher: PublishingServer
) -> None:
    created = deployed.create(posts=1, publisher=mcp_publisher(publisher))
    cid = created["campaign_id"]
    deployed.planned(cid)
    assert deployed.api.post(f"/campaigns/{cid}/start").status_code == 200
    (item,) = deployed.items_in(cid, "pending_review")
    item_id = item["item_id"]
    first_thread = item["posts"][0]["thread_id"]

    # Its slot and the whole window go by: nothing is published without an approval.
    deployed.pass_time(cid, datetime.fromisoformat(created["window"]["end"]) + timedelta(hours=1))
    time.sleep(PASSES)
    assert publisher.calls == [] and deployed.publications(cid) == []

    reason = "标题要点出宿舍场景，正文加一个真实用量"
    rejected = deployed.api.post(
        f"/campaigns/{cid}/items/{item_id}/reject", json={"reason": reason}
    )
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["status"] in ("rejected", "writing")
    (item,) = deployed.items_in(cid, "pending_review")
    assert item["generation"] == 2 and item["reason"] == reason
    assert item["posts"][0]["thread_id"] != first_thread  # written again, on a new thread
    assert any(reason in prompt for prompt in writer_prompts(llm.requests))

    # A person edits the 小红书 post on its thread (the edit-and-recheck path), then approves.
    xhs = item["posts"][0]
    edited = {"title": "宿舍干燥季保湿笔记", "body": "宿舍干燥，保湿要早做。" * 8, "tags": ["护肤"]}
    sdk = get_client(url=deployed.served.url, api_key=KEY)

    async def edit() -> None:
        await sdk.threads.update_state(
            xhs["thread_id"], {"generated_content": edited}, as_node="executor"
        )
        await sdk.runs.wait(xhs["thread_id"], "atelier", input=None)

    asyncio.run(edit())
    wait_for(
        lambda: deployed.items(cid)[0]["posts"][0]["post"]["title"] == edited["title"], timeout=30
    )
    approved = deployed.api.post(f"/campaigns/{cid}/items/{item_id}/approve")
    assert approved.status_code == 200, approved.text
    again = deployed.api.post(f"/campaigns/{cid}/items/{item_id}/approve")
    assert again.status_code == 409

    # Approved after its slot: it goes out at the next free slot, not at once.
    publications = deployed.publications(cid)
    assert len(publications) == 2
    if deployed.clock is not None:
        assert all(p["slot"] > item["slot"] for p in publications)
        assert all(datetime.fromisoformat(p["slot"]) >= deployed.now() for p in publications)
    deployed.pass_time(cid, max(datetime.fromisoformat(p["slot"]) for p in publications))
    wait_for(lambda: len(publisher.calls) == 2, timeout=60)
    time.sleep(PASSES)
    assert len(publisher.calls) == 2
    assert edited["title"] in {c.title for c in publisher.calls}


def test_a_failing_mcp_publisher_is_tried_again_until_it_publishes_once(
    deployed: Deployment, llm: ScriptedOpenAIServer, publisher: PublishingServer
) -> None:
    publisher.reset(fail_first=2)
    created = deployed.create(
        posts=1, platforms=["xiaohongshu"], approval="auto", publisher=mcp_publisher(publisher)
    )
    cid = created["campaign_id"]
    (item,) = deployed.items_in(cid, "approved")
    deployed.pass_time(cid, slot_of(item))
    (done,) = wait_for(
        lambda: [p for p in deployed.publications(cid) if p["status"] == "published"], timeout=60
    )
    time.sleep(PASSES)
    assert publisher.attempts == 3 and len(publisher.calls) == 1
    assert done["attempts"] == 3 and done["external_id"] == "note-1" and done["error"] is None


def test_a_signed_webhook_publisher_gets_each_post_once_after_two_failures(
    deployed: Deployment, llm: ScriptedOpenAIServer, receiver: WebhookReceiver
) -> None:
    receiver.reset(fail_first=2)
    created = deployed.create(
        posts=1,
        platforms=["xiaohongshu"],
        approval="auto",
        publisher={"type": "webhook", "url": receiver.url},
    )
    cid = created["campaign_id"]
    (item,) = deployed.items_in(cid, "approved")
    assert receiver.received == []
    deployed.pass_time(cid, slot_of(item))
    (done,) = wait_for(
        lambda: [p for p in deployed.publications(cid) if p["status"] == "published"], timeout=90
    )
    time.sleep(PASSES)
    assert len(receiver.received) == 3 and done["attempts"] == 3
    assert len({d.headers["x-atelier-delivery"] for d in receiver.received}) == 1
    last = receiver.received[-1]
    delivery, stamp = last.headers["x-atelier-delivery"], last.headers["x-atelier-timestamp"]
    signed = f"{delivery}.{stamp}.".encode() + last.body  # the per-key scheme (issue 33)
    mac = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert last.headers["x-atelier-signature"] == f"sha256={mac}"
    body = last.json
    assert body["type"] == "campaign.publication" and body["item_id"] == item["item_id"]
    post = body["post"]
    assert post["title"] == f"{item['topic']}笔记" and post["platform"] == "xiaohongshu"
    assert post["image_urls"] and all(loads_without_a_key(u) for u in post["image_urls"])


@pytest.mark.in_process_only("the campaigns' clock is the test's, in the server's process")
def test_a_revoked_keys_campaign_publishes_nothing_more_and_its_data_stays(
    deployed: Deployment, llm: ScriptedOpenAIServer, publisher: PublishingServer
) -> None:
    made = deployed.api.post("/keys", json={"name": "client", "role": "member"})
    assert made.status_code == 201, made.text  # KEY, from AUTH_API_KEYS, is an admin
    member = httpx.Client(
        base_url=deployed.served.url, headers={"X-Api-Key": made.json()["key"]}, timeout=60
    )
    values = {
        "assistant_id": "atelier",
        "brief": "秋季护肤新品：讲清楚成分、用法和真实体验，面向大学生",
        "posts": 1,
        "platforms": ["xiaohongshu"],
        "window": deployed.window(),
        "approval": "auto",
        "publisher": mcp_publisher(publisher),
    }
    created = member.post("/campaigns", json=values)
    assert created.status_code == 201, created.text
    cid = created.json()["campaign_id"]

    def approved() -> Any:
        items = member.get(f"/campaigns/{cid}/items").json()
        return items if items and all(i["status"] == "approved" for i in items) else None

    (item,) = wait_for(approved, timeout=240, interval=0.5)
    revoked = deployed.api.delete(f"/keys/{made.json()['key_id']}")
    assert revoked.status_code == 200, revoked.text
    deployed.pass_time(cid, slot_of(item))
    time.sleep(PASSES)

    assert publisher.calls == [] and publisher.attempts == 0  # its due post was not sent
    settings = deployed.served.settings  # type: ignore[attr-defined]
    rows = query(settings, "SELECT status, attempts FROM campaign_publications")
    assert [tuple(row) for row in rows] == [("scheduled", 0)]  # it stays, as it was
    (status,) = query(settings, "SELECT status FROM campaigns WHERE campaign_id = ?", (cid,))
    assert status[0] == "running"


def test_another_keys_campaigns_are_not_found_and_never_listed(
    deployed: Deployment, llm: ScriptedOpenAIServer
) -> None:
    created = deployed.create(posts=1, platforms=["weibo"])
    cid = created["campaign_id"]
    deployed.planned(cid)
    (item,) = deployed.items(cid)
    other = deployed.other
    for method, path in [
        ("GET", f"/campaigns/{cid}"),
        ("PATCH", f"/campaigns/{cid}"),
        ("GET", f"/campaigns/{cid}/items"),
        ("GET", f"/campaigns/{cid}/publications"),
        ("GET", f"/campaigns/{cid}/stream"),
        ("POST", f"/campaigns/{cid}/start"),
        ("POST", f"/campaigns/{cid}/plan"),
        ("POST", f"/campaigns/{cid}/items/{item['item_id']}/approve"),
        ("DELETE", f"/campaigns/{cid}/items/{item['item_id']}"),
        ("DELETE", f"/campaigns/{cid}"),
    ]:
        body = {} if method in ("PATCH", "POST") else None
        answer = other.request(method, path, json=body)
        assert answer.status_code == 404, (method, path, answer.text)
    assert other.post("/campaigns/search", json={}).json() == []
    mine = deployed.api.post("/campaigns/search", json={"status": "planned"}).json()
    assert [c["campaign_id"] for c in mine] == [cid]
    assert deployed.campaign(cid)["status"] == "planned"  # untouched by the other key


# --------------------------------------------------------------------------- one process


@pytest.fixture
def embedded(tmp_path: Path, llm: ScriptedOpenAIServer) -> Iterator[Deployment]:
    """The embedded deployment with the default outbound rules: no private publisher."""
    settings = service_settings(tmp_path / "strict", llm.base_url, auth_api_keys=[KEY, OTHER_KEY])
    with LiveServer(settings, None) as served:
        yield Deployment(served)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"platforms": ["xiaohongshu", "myspace"]}, ["body", "platforms", 1]),
        ({"platforms": ["weibo", "weibo"]}, ["body", "platforms", "1"]),
        ({"assistant_id": "team"}, ["body", "assistant_id"]),
        ({"posts": 0}, ["body", "posts"]),
        ({"brief": "   "}, ["body", "brief"]),
        (
            {
                "window": {
                    "start": "2026-03-02T00:00:00",
                    "end": "2026-03-01T00:00:00",
                    "timezone": ZONE,
                }
            },
            ["body", "window", "end"],
        ),
        (
            {
                "window": {
                    "start": "2026-03-02T00:00:00",
                    "end": "2026-03-03T00:00:00",
                    "timezone": "Mars/Base",
                }
            },
            ["body", "window", "timezone"],
        ),
        (
            {
                "posts": 40,
                "window": {
                    "start": "2026-03-02T00:00:00",
                    "end": "2026-03-03T00:00:00",
                    "timezone": ZONE,
                    "min_gap_minutes": 600,
                },
            },
            ["body", "window"],
        ),
        (
            {"publisher": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
            ["body", "publisher", "url"],
        ),
        (
            {
                "publisher": {
                    "type": "mcp",
                    "url": "https://example.com/mcp",
                    "tool": "publish",
                    "arguments": {"content": "secret"},
                }
            },
            ["body", "publisher", "mcp", "arguments", "content"],
        ),
    ],
)
def test_a_campaign_breaking_a_rule_is_refused_naming_the_field(
    embedded: Deployment, change: dict[str, Any], field: list[Any]
) -> None:
    body = {
        "assistant_id": "atelier",
        "brief": "秋季护肤",
        "posts": 2,
        "platforms": ["xiaohongshu"],
        "window": embedded.window(),
        **change,
    }
    answer = embedded.api.post("/campaigns", json=body)
    assert answer.status_code == 422, answer.text
    assert next(e["loc"] for e in answer.json()["detail"]) == field
    assert embedded.api.post("/campaigns/search", json={}).json() == []  # nothing was stored


def test_a_private_publisher_is_refused_unless_private_addresses_are_allowed(
    embedded: Deployment, deployed: Deployment, publisher: PublishingServer
) -> None:
    body = {
        "assistant_id": "atelier",
        "brief": "秋季护肤",
        "posts": 1,
        "platforms": ["xiaohongshu"],
        "window": embedded.window(),
        "publisher": mcp_publisher(publisher),
    }
    refused = embedded.api.post("/campaigns", json=body)
    assert refused.status_code == 422
    assert "WEBHOOK_ALLOW_PRIVATE" in refused.json()["message"]
    assert refused.json()["detail"][0]["loc"] == ["body", "publisher", "url"]
    allowed = deployed.api.post("/campaigns", json={**body, "window": deployed.window()})
    assert allowed.status_code == 201, allowed.text


@pytest.fixture
def single(tmp_path: Path, llm: ScriptedOpenAIServer) -> Iterator[Deployment]:
    """The embedded deployment, private publishers allowed (the loopback ones here)."""
    settings = service_settings(
        tmp_path / "single",
        llm.base_url,
        auth_api_keys=[KEY, OTHER_KEY],
        webhook_allow_private=True,
        max_retry_count=1,
    )
    with LiveServer(settings, None) as served:
        yield Deployment(served)


def test_a_plan_is_edited_before_it_is_written(
    single: Deployment, llm: ScriptedOpenAIServer, campaign_llm: CampaignLLM
) -> None:
    window = single.window(days=2, gap=120)
    created = single.create(posts=3, platforms=["weibo"], window=window)
    cid = created["campaign_id"]
    single.planned(cid)
    first, second, third = single.items(cid)
    url = f"/campaigns/{cid}/items"

    # A topic that repeats another item's, or a slot outside the window or too close to
    # another post on the platform, is refused naming the field.
    repeated = single.api.patch(f"{url}/{first['item_id']}", json={"topic": second["topic"]})
    assert repeated.status_code == 422 and repeated.json()["detail"][0]["loc"] == ["body", "topic"]
    late = datetime.fromisoformat(window["end"]) + timedelta(days=1)
    outside = single.api.patch(f"{url}/{first['item_id']}", json={"slot": late.isoformat()})
    assert outside.status_code == 422 and "inside the campaign's window" in outside.text
    close = slot_of(second) + timedelta(minutes=30)
    crowded = single.api.patch(f"{url}/{first['item_id']}", json={"slot": close.isoformat()})
    assert crowded.status_code == 422 and "min_gap_minutes" in crowded.text

    moved = slot_of(third) + timedelta(hours=3)
    edited = single.api.patch(
        f"{url}/{first['item_id']}", json={"topic": "秋季唇部护理", "slot": moved.isoformat()}
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["topic"] == "秋季唇部护理" and slot_of(edited.json()) == moved
    assert single.api.delete(f"{url}/{second['item_id']}").status_code == 204
    added = single.api.post(url, json={"topic": "熬夜后的急救面膜", "angle": "第二天早八"})
    assert added.status_code == 201, added.text
    items = single.items(cid)
    assert {i["topic"] for i in items} == {third["topic"], "秋季唇部护理", "熬夜后的急救面膜"}
    slots = [slot_of(i) for i in items]  # by slot: the new item took the earliest free one
    assert slots == sorted(slots)
    assert all(b - a >= timedelta(minutes=120) for a, b in itertools.pairwise(slots))

    # Planning again replaces the plan with topics unlike the current ones.
    before = campaign_llm.planner_calls
    again = single.api.post(f"/campaigns/{cid}/plan")
    assert again.status_code == 200 and again.json()["status"] == "planning"
    assert again.json()["plan_run_id"] != created["plan_run_id"]
    single.planned(cid)
    assert campaign_llm.planner_calls > before
    planner = [r for r in llm.requests if r.forced_tool == "CampaignTopics"][-1]
    assert "熬夜后的急救面膜" in planner.all_text  # to avoid
    replanned = single.items(cid)
    assert len(replanned) == 3 and "熬夜后的急救面膜" not in [i["topic"] for i in replanned]

    assert single.api.post(f"/campaigns/{cid}/start").status_code == 200
    assert single.api.post(f"/campaigns/{cid}/start").status_code == 409
    writing = single.items_in(cid, "writing", "pending_review", timeout=60)
    busy = single.api.patch(f"{url}/{writing[0]['item_id']}", json={"topic": "换个题"})
    assert busy.status_code == 409
    assert single.api.post(f"/campaigns/{cid}/plan").status_code == 409


def test_a_stream_follows_the_campaign_from_plan_to_review(
    single: Deployment, llm: ScriptedOpenAIServer
) -> None:
    created = single.create(posts=1, platforms=["weibo"], approval="auto")
    cid = created["campaign_id"]
    frames: list[tuple[str, Any]] = []
    with single.api.stream("GET", f"/campaigns/{cid}/stream", timeout=120) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        event = ""
        for line in answer.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                frames.append((event, json.loads(line.removeprefix("data: "))))
                if event == "item" and frames[-1][1]["status"] == "approved":
                    break
    assert frames[0] == ("metadata", {"campaign_id": cid})
    statuses = [data["status"] for event, data in frames if event == "campaign"]
    assert statuses[0] == "planning" and statuses[-1] in ("running", "completed")
    items = [data["status"] for event, data in frames if event == "item"]
    assert items[0] in ("planned", "writing") and "approved" in items
    assert single.other.get(f"/campaigns/{cid}/stream").status_code == 404


def test_the_docs_example_runs_as_written(
    tmp_path: Path, llm: ScriptedOpenAIServer, publisher: PublishingServer
) -> None:
    """The worked example of docs/campaigns.md, on a clock a day before its window."""
    publisher.reset()
    source = code_block("campaigns", "python")
    for url in ("http://localhost:8000", "http://localhost:18060/mcp"):
        assert url in source
    settings = service_settings(
        tmp_path / "docs", llm.base_url, auth_api_keys=[KEY], webhook_allow_private=True
    )
    with LiveServer(settings, None) as live:
        clock = MovingClock(datetime(2026, 3, 1, tzinfo=UTC))
        live.app.state.engine.campaigns.clock = clock
        code = source.replace("http://localhost:8000", live.url).replace(
            "http://localhost:18060/mcp", publisher.url
        )
        namespace: dict[str, Any] = {"KEY": KEY}
        exec(compile(code, "docs/campaigns.md", "exec"), namespace)
        assert len(namespace["publications"]) == 12
        cid = namespace["cid"]
        clock.to(datetime(2026, 3, 5, tzinfo=UTC))
        api = namespace["api"]
        wait_for(
            lambda: (
                {p["status"] for p in api.get(f"/campaigns/{cid}/publications").json()}
                == {"published"}
            ),
            timeout=90,
        )
        assert len(publisher.calls) == 12


def test_with_two_replicas_and_a_worker_killed_at_a_slot_each_post_goes_out_once(
    processes: Any, llm: ScriptedOpenAIServer, publisher: PublishingServer
) -> None:
    """Two API replicas and a worker left race for each due post: each is published once.

    The worker is killed as the slots come due (just before: a process killed in the
    middle of a call leaves its post `unknown`, which `tests/engine/test_campaigns.py`
    shows; here the survivors must publish everything, each post once).
    """
    publisher.reset()
    deployed = Deployment(processes)
    try:
        created = deployed.create(
            posts=3, platforms=["xiaohongshu"], approval="auto", publisher=mcp_publisher(publisher)
        )
        cid = created["campaign_id"]
        items = deployed.items_in(cid, "approved")
        assert len(deployed.publications(cid)) == 3
        processes.cluster.workers[0].kill()
        deployed.pass_time(cid, max(slot_of(i) for i in items))
        wait_for(lambda: len(publisher.calls) == 3, timeout=60)
        time.sleep(2 * PASSES)
        assert len(publisher.calls) == 3
        assert {c.title for c in publisher.calls} == {f"{i['topic']}笔记" for i in items}
        done = deployed.publications(cid)
        assert {p["status"] for p in done} == {"published"} and {p["attempts"] for p in done} == {1}
    finally:
        processes.cluster.ensure_running()
        processes.after_test({"X-Api-Key": KEY})
