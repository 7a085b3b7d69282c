"""Campaigns in the engine: statuses, checks, each backend's repository and the MCP transport.

The repositories run on SQLite and PostgreSQL alike (`opened`): a write goes through
only on the version it read, a driver's claim is exclusive, a due publication is
handed over once (a webhook's to the outbox, an MCP call leased), and a call whose
sender died is `unknown`, never made again. The MCP transport is the real `mcp`
client against a real `mcp` server on loopback (tests/app/campaign_support.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest

from core.outbound import OutboundRules
from engine.campaigns import (
    CampaignItem,
    CampaignRecord,
    ItemPost,
    Publication,
    item_status,
    publication_id,
)
from engine.crons import iso
from engine.errors import InvalidFields
from engine.publishing import (
    GuardedMcpTransport,
    McpAddressRefused,
    call_tool,
    publication_delivery_id,
    tool_arguments,
    webhook_body,
)
from engine.repositories import CampaignRepository, LimitReached
from engine.services.campaigns import check_publisher, check_window
from tests.app.campaign_support import PublishingServer
from tests.engine.conftest import Opened

T0 = datetime(2026, 3, 2, 1, 0, tzinfo=UTC)
WINDOW = {
    "start": "2026-03-02T00:00:00",
    "end": "2026-03-05T00:00:00",
    "timezone": "Asia/Shanghai",
    "min_gap_minutes": 240,
}
OPEN = OutboundRules(allow_private=True)


def campaigns_of(opened: Opened) -> CampaignRepository:
    """Return the campaign repository on the storage's database."""
    if opened.where.startswith("postgresql://"):
        from engine.postgres.campaigns import PostgresCampaignRepository

        return PostgresCampaignRepository(opened.storage.pool)
    from engine.sqlite.campaigns import SqliteCampaignRepository

    return SqliteCampaignRepository(opened.storage.database)


def item(item_id: str = "i1", *statuses: str, slot: datetime = T0) -> CampaignItem:
    platforms = ("xiaohongshu", "weibo")
    return CampaignItem(
        item_id=item_id,
        topic=f"topic {item_id}",
        angle="angle",
        key_points=["a point"],
        slot=iso(slot) or "",
        posts=[
            ItemPost(platform=p, status=s)  # type: ignore[arg-type]
            for p, s in zip(platforms, statuses or ("planned", "planned"), strict=True)
        ],
    )


def campaign(campaign_id: str = "c1", owner: str = "alice", **fields: Any) -> CampaignRecord:
    values: dict[str, Any] = {
        "campaign_id": campaign_id,
        "owner": owner,
        "assistant_id": "atelier",
        "brief": "秋季护肤",
        "posts": 2,
        "platforms": ["xiaohongshu", "weibo"],
        "window": WINDOW,
        "approval": "required",
        "publisher": None,
        "status": "planning",
        "created_at": iso(T0),
        "updated_at": iso(T0),
        **fields,
    }
    return CampaignRecord(**values)


def publication(
    pid: str, campaign_id: str = "c1", transport: str = "mcp", slot: datetime = T0
) -> Publication:
    return Publication(
        publication_id=pid,
        campaign_id=campaign_id,
        item_id="i1",
        owner="alice",
        platform="xiaohongshu",
        transport=transport,  # type: ignore[arg-type]
        url="http://127.0.0.1:9/mcp",
        tool="publish_content" if transport == "mcp" else None,
        arguments={"title": "title", "content": "body"} if transport == "mcp" else {},
        payload={"title": "标题", "body": "正文", "tags": ["护肤"], "image_urls": []},
        slot=iso(slot) or "",
        run_id="r1",
        thread_id="t1",
        created_at=iso(T0) or "",
    )


# --------------------------------------------------------------------------- statuses, checks


def test_an_items_status_follows_its_posts_and_their_publications() -> None:
    assert item_status(item("a")) == "planned"
    rejected = dataclasses.replace(item("a"), status="rejected")
    assert item_status(rejected) == "rejected"
    assert item_status(item("a", "pending_review", "planned")) == "writing"
    assert item_status(item("a", "pending_review", "writing")) == "writing"
    assert item_status(item("a", "pending_review", "failed")) == "pending_review"
    assert item_status(item("a", "failed", "failed")) == "failed"
    approved = item("a", "approved", "approved")
    assert item_status(approved) == "approved"
    assert item_status(approved, {"xiaohongshu": "published"}) == "approved"
    assert item_status(approved, {"xiaohongshu": "published", "weibo": "published"}) == (
        "published"
    )
    assert item_status(approved, {"xiaohongshu": "published", "weibo": "unknown"}) == "failed"


def test_a_publications_id_is_one_per_item_post_and_writing() -> None:
    first = publication_id("c", "i", "weibo", 1)
    assert first == publication_id("c", "i", "weibo", 1)
    assert len({first, publication_id("c", "i", "weibo", 2), publication_id("c", "i", "x", 1)}) == 3
    assert publication_delivery_id(first) == publication_delivery_id(first) != first


def test_a_window_must_hold_the_posts_with_their_gap() -> None:
    check_window(WINDOW, 6, ["xiaohongshu", "weibo"])
    with pytest.raises(InvalidFields) as small:
        check_window({**WINDOW, "min_gap_minutes": 10080}, 6, ["weibo"])
    assert small.value.errors[0]["loc"] == ("window",)
    with pytest.raises(InvalidFields) as late:
        check_window({**WINDOW, "end": "2026-03-01T00:00:00"}, 1, ["weibo"])
    assert late.value.errors[0]["loc"] == ("window", "end")


@pytest.mark.parametrize(
    ("publisher", "field"),
    [
        ({"type": "mcp", "url": "http://127.0.0.1:9/mcp", "tool": "publish"}, "publisher.url"),
        ({"type": "webhook", "url": "http://169.254.169.254/x"}, "publisher.url"),
        ({"type": "mcp", "url": "https://example.com/mcp", "tool": "a b"}, "publisher.tool"),
        (
            {
                "type": "mcp",
                "url": "https://example.com/mcp",
                "tool": "publish",
                "arguments": {"content": "password"},
            },
            "publisher.arguments.content",
        ),
        ({"type": "ftp", "url": "https://example.com/x"}, "publisher.type"),
    ],
)
def test_a_publisher_breaking_a_rule_is_refused_naming_the_field(
    publisher: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidFields) as refused:
        check_publisher(publisher, OutboundRules())
    assert ".".join(refused.value.errors[0]["loc"]) == field


def test_a_private_publisher_is_accepted_where_private_addresses_are_allowed() -> None:
    checked = check_publisher(
        {"type": "mcp", "url": "http://127.0.0.1:9/mcp", "tool": "publish_content"}, OPEN
    )
    assert checked is not None and checked["arguments"]["image_urls"] == "image_urls"


def test_the_post_fields_are_mapped_to_the_tools_arguments() -> None:
    made = publication("p")
    made.arguments = {"title": "title", "content": "body", "images": "image_urls"}
    assert tool_arguments(made) == {"title": "标题", "content": "正文", "images": []}
    assert '"post":{"title":"标题"' in webhook_body(made)


# --------------------------------------------------------------------------- the repositories


async def test_an_owner_keeps_at_most_its_bound_of_campaigns(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign("a"), limit=2)
    await campaigns.insert(campaign("b"), limit=2)
    with pytest.raises(LimitReached, match="at most 2 campaigns"):
        await campaigns.insert(campaign("c"), limit=2)
    assert await campaigns.get("alice", "c") is None  # nothing half-written
    await campaigns.insert(campaign("d", owner="bob"), limit=2)  # another key's own bound


async def test_due_publications_of_a_skipped_owner_stay_where_they_are(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    record = campaign(items=[item("i1")])
    await campaigns.insert(record, limit=10)
    read = await campaigns.get("alice", "c1")
    assert read is not None
    made = [publication("p1"), publication("p2", transport="webhook")]
    assert await campaigns.replace(read, version=read.version, publications=made)
    due = iso(T0 + timedelta(days=30)) or ""
    assert await campaigns.due_owners(due, 10) == ["alice"]
    assert await campaigns.claim_calls(due, "w", 60, 10, skip={"alice"}) == []
    assert await campaigns.hand_to_outbox(due, skip={"alice"}) == 0
    assert len(await campaigns.claim_calls(due, "w", 60, 10, skip={"bob"})) == 1
    assert await campaigns.hand_to_outbox(due) == 1


async def test_a_campaign_is_written_only_on_the_version_it_read(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign(items=[item("i1")]), limit=10)
    read = await campaigns.get("alice", "c1")
    assert read is not None and read.items[0].posts[1].platform == "weibo"
    assert await campaigns.get("bob", "c1") is None  # another key's: as for none
    stale = dataclasses.replace(read, message="stale")
    read.message = "first"
    assert await campaigns.replace(read, version=1)
    assert not await campaigns.replace(stale, version=1)
    stored = await campaigns.get("alice", "c1")
    assert stored is not None and stored.message == "first" and stored.version == 2
    assert [c.campaign_id for c in await campaigns.search("alice", status="planning")] == ["c1"]
    assert await campaigns.search("bob") == []
    assert not await campaigns.delete("bob", "c1")
    assert await campaigns.delete("alice", "c1")
    assert await campaigns.get("alice", "c1") is None


async def test_a_driver_claim_is_exclusive_and_skips_idle_campaigns(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign("a"), limit=10)
    # "b" waits for a person: not driven
    await campaigns.insert(campaign("b", status="planned"), limit=10)
    await campaigns.insert(campaign("c", status="running"), limit=10)
    seen: list[str | None] = []
    gate = asyncio.Event()

    async def driver() -> None:
        async with campaigns.claim_next("") as claim:
            seen.append(claim.campaign.campaign_id if claim else None)
            await gate.wait()

    tasks = [asyncio.create_task(driver()) for _ in range(2)]
    for _ in range(200):  # both hold their claim (or none) before either lets go
        if len(seen) == 2:
            break
        await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(*tasks)
    if opened.where.startswith("postgresql://"):  # every process: each claims its own
        assert sorted(seen) == ["a", "c"]  # type: ignore[type-var]
    else:  # one process owns the file: both passes read the first
        assert seen == ["a", "a"]
    async with campaigns.claim_next("a") as claim:
        assert claim is not None and claim.campaign.campaign_id == "c"
        claim.campaign.message = "driven"
        assert await claim.save(claim.campaign)
    stored = await campaigns.get("alice", "c")
    assert stored is not None and stored.message == "driven"


async def test_a_due_mcp_call_is_claimed_once_and_recorded(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign(status="running"), limit=10)
    read = await campaigns.get("alice", "c1")
    assert read is not None
    later = T0 + timedelta(hours=1)
    assert await campaigns.replace(
        read, version=read.version, publications=[publication("p1"), publication("p2", slot=later)]
    )
    assert await campaigns.claim_calls(iso(T0 - timedelta(seconds=1)) or "", "w1", 60, 8) == []
    claimed = await campaigns.claim_calls(iso(T0) or "", "w1", 60, 8)
    assert [p.publication_id for p in claimed] == ["p1"] and claimed[0].attempts == 1
    assert await campaigns.claim_calls(iso(later) or "", "w2", 60, 8) != claimed  # p2 only
    assert not await campaigns.record_call(claimed[0], worker="w2", status="published")
    assert await campaigns.record_call(
        claimed[0], worker="w1", status="published", external_id="note-1", published_at=iso(T0)
    )
    shown = {p.publication_id: p for p in await campaigns.publications("alice", "c1")}
    assert shown["p1"].status == "published" and shown["p1"].external_id == "note-1"
    assert shown["p2"].status == "sending" and shown["p2"].attempts == 1
    assert await campaigns.publications("bob", "c1") == []


async def test_a_call_whose_sender_died_is_unknown_and_never_made_again(opened: Opened) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign(status="running"), limit=10)
    read = await campaigns.get("alice", "c1")
    assert read is not None
    assert await campaigns.replace(read, version=read.version, publications=[publication("p1")])
    (claimed,) = await campaigns.claim_calls(iso(T0) or "", "dead", 0.2, 8)
    await asyncio.sleep(1.2)  # its lease ran out: the process died mid-call
    assert await campaigns.expire_calls() == 1
    (shown,) = await campaigns.publications("alice", "c1")
    assert shown.status == "unknown" and "not sent again" in (shown.error or "")
    assert await campaigns.claim_calls(iso(T0 + timedelta(days=1)) or "", "w", 60, 8) == []
    assert not await campaigns.record_call(claimed, worker="dead", status="published")


async def test_a_due_webhook_goes_to_the_outbox_once_and_shows_its_delivery(
    opened: Opened,
) -> None:
    campaigns = campaigns_of(opened)
    await campaigns.insert(campaign(status="running"), limit=10)
    read = await campaigns.get("alice", "c1")
    assert read is not None
    hook = dataclasses.replace(publication("p1", transport="webhook"), url="https://example.com/h")
    assert await campaigns.replace(read, version=read.version, publications=[hook, hook])
    assert await campaigns.hand_to_outbox(iso(T0) or "") == 1
    assert await campaigns.hand_to_outbox(iso(T0 + timedelta(days=1)) or "") == 0
    (shown,) = await campaigns.publications("alice", "c1")
    assert shown.status == "sending" and shown.attempts == 0
    deliveries = opened.storage.deliveries
    (delivery,) = await deliveries.claim("deliverer", 8, 60)
    assert delivery.delivery_id == publication_delivery_id("p1")
    assert '"type":"campaign.publication"' in delivery.body
    from engine.webhooks import Attempt

    failed = Attempt(1, iso(T0) or "", "http_error", 5.0, status_code=503, error="HTTP 503")
    assert await deliveries.record(delivery, failed, worker="deliverer", retry_in=0.0)
    (shown,) = await campaigns.publications("alice", "c1")
    assert shown.status == "retrying" and shown.attempts == 1 and shown.error == "HTTP 503"
    (again,) = await deliveries.claim("deliverer", 8, 60)
    assert await deliveries.record(
        again,
        Attempt(2, iso(T0) or "", "success", 5.0, status_code=200),
        worker="deliverer",
        retry_in=None,
    )
    (shown,) = await campaigns.publications("alice", "c1")
    assert shown.status == "published" and shown.attempts == 2 and shown.published_at


# --------------------------------------------------------------------------- the MCP transport


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[PublishingServer]:
    with PublishingServer() as server:
        yield server


async def test_the_mcp_call_publishes_and_reads_the_external_id(
    mcp_server: PublishingServer,
) -> None:
    mcp_server.reset()
    made = dataclasses.replace(
        publication("p"),
        url=mcp_server.url,
        arguments={"title": "title", "content": "body", "images": "image_urls", "tags": "tags"},
    )
    outcome = await call_tool(made, OPEN, connect_timeout=5, read_timeout=10)
    assert outcome.ok and outcome.external_id == "note-1", outcome
    (call,) = mcp_server.calls
    assert (call.title, call.content, call.tags) == ("标题", "正文", ["护肤"])


async def test_a_failing_tool_or_server_is_an_error_to_retry(mcp_server: PublishingServer) -> None:
    mcp_server.reset(fail_first=1)
    made = dataclasses.replace(
        publication("p"),
        url=mcp_server.url,
        arguments={"title": "title", "content": "body", "images": "image_urls"},
    )
    failed = await call_tool(made, OPEN, connect_timeout=5, read_timeout=10)
    assert not failed.ok and not failed.final and "platform is busy" in (failed.error or "")
    gone = dataclasses.replace(made, url="http://127.0.0.1:9/mcp")
    unreachable = await call_tool(gone, OPEN, connect_timeout=2, read_timeout=2)
    assert not unreachable.ok and not unreachable.final
    assert "could not reach the publisher" in (unreachable.error or "")


async def test_a_private_address_is_refused_before_anything_is_sent(
    mcp_server: PublishingServer,
) -> None:
    mcp_server.reset()
    made = dataclasses.replace(publication("p"), url=mcp_server.url)
    refused = await call_tool(made, OutboundRules(), connect_timeout=2, read_timeout=2)
    assert not refused.ok and refused.final and "refused" in (refused.error or "")
    # A name is resolved and every address checked before connecting (no DNS rebinding).
    guard = GuardedMcpTransport(allow_private=False)
    named = mcp_server.url.replace("127.0.0.1", "localhost")
    with pytest.raises(McpAddressRefused, match="resolves to a loopback address"):
        await guard.handle_async_request(httpx2.Request("POST", named))
    await guard.aclose()
    assert mcp_server.attempts == 0
