"""Campaigns and their publications in the run engine's SQLite database (`CampaignRepository`).

One process owns the database (`engine.sqlite.ownership`), so its one driver and
one publisher are the only ones: a claim is a read, and a write goes through only
while the campaign's `version` is the one read (a person's edit in between wins;
the driver reads it again next pass). A due webhook publication is queued in the
webhook outbox in the transaction that marks it handed over; a due MCP call is
marked `sending` (leased, its attempt counted) before it is made. Due times are
ISO 8601 text in UTC (sortable as text); leases are Unix seconds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from engine.campaigns import (
    CampaignRecord,
    CampaignStatus,
    Publication,
    campaign_document,
    campaign_from_row,
    publication_from_row,
)
from engine.publishing import IN_DOUBT, publication_delivery_id, webhook_body
from engine.records import WebhookQueued, now
from engine.repositories import LimitReached
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.webhooks import webhook_queued_statement

_CAMPAIGN = "campaign_id, owner, status, created_at, updated_at, version, document"
_PUBLICATION = (
    "p.publication_id, p.campaign_id, p.item_id, p.owner, p.platform, p.transport, p.url, "
    "p.tool, p.arguments, p.payload, p.slot, p.run_id, p.thread_id, p.status, p.attempts, "
    "p.next_attempt_at, p.published_at, p.external_id, p.answer, p.error, p.created_at, "
    "d.status AS d_status, d.attempts AS d_attempts, d.last_error AS d_error, "
    "d.updated_at AS d_updated_at, d.next_attempt_at AS d_next_attempt_at"
)
_FROM = "campaign_publications p LEFT JOIN webhook_deliveries d ON d.delivery_id = p.delivery_id"


def _campaign(row: sqlite3.Row) -> CampaignRecord:
    return campaign_from_row(row, loads(row["document"]))


def _due_text(seconds: float | None) -> str | None:
    """Return a delivery's due time (Unix seconds) as ISO 8601 text in UTC."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")


def _publication(row: sqlite3.Row) -> Publication:
    return publication_from_row(row, _due_text)


def publication_values(publication: Publication) -> tuple[Any, ...]:
    """Return a new publication's column values, in `INSERT_PUBLICATION`'s order."""
    return (
        publication.publication_id,
        publication.campaign_id,
        publication.item_id,
        publication.owner,
        publication.platform,
        publication.transport,
        publication.url,
        publication.tool,
        dumps(publication.arguments),
        dumps(publication.payload),
        publication.slot,
        publication.run_id,
        publication.thread_id,
        publication.slot,
        publication.created_at,
        publication.created_at,
    )


INSERT_PUBLICATION = (
    "INSERT INTO campaign_publications (publication_id, campaign_id, item_id, owner, "
    "platform, transport, url, tool, arguments, payload, slot, run_id, thread_id, "
    "next_attempt_at, created_at, updated_at) VALUES "
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (publication_id) DO NOTHING"
)


async def _write(
    db: aiosqlite.Connection,
    campaign: CampaignRecord,
    version: int,
    publications: Sequence[Publication],
) -> bool:
    """Write a campaign read at `version` and its new publications; False: it moved."""
    cursor = await db.execute(
        "UPDATE campaigns SET status = ?, updated_at = ?, version = ?, document = ? "
        "WHERE campaign_id = ? AND owner = ? AND version = ?",
        (
            campaign.status,
            campaign.updated_at,
            version + 1,
            dumps(campaign_document(campaign)),
            campaign.campaign_id,
            campaign.owner,
            version,
        ),
    )
    if cursor.rowcount != 1:
        return False
    for publication in publications:
        await db.execute(INSERT_PUBLICATION, publication_values(publication))
    campaign.version = version + 1
    return True


class SqliteCampaignClaim:
    """An active campaign read for a driver pass (an `engine.repositories.CampaignClaim`)."""

    def __init__(self, db: SqliteDatabase, campaign: CampaignRecord) -> None:
        """Drive `campaign` (as read) in `db`."""
        self._db = db
        self.campaign = campaign
        self._version = campaign.version

    async def save(
        self, campaign: CampaignRecord, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write the campaign, if nobody changed it since it was read."""
        async with self._db.transaction() as db:
            return await _write(db, campaign, self._version, publications)


class SqliteCampaignRepository:
    """Campaigns and publications in SQLite (see `engine.repositories.CampaignRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(self, campaign: CampaignRecord, *, limit: int) -> None:
        """Store a new campaign unless the owner has `limit` already."""
        c = campaign
        async with self._db.transaction() as db:
            cursor = await db.execute(
                f"INSERT INTO campaigns ({_CAMPAIGN}) SELECT ?, ?, ?, ?, ?, ?, ? "
                "WHERE (SELECT count(*) FROM campaigns WHERE owner = ?) < ?",
                (
                    c.campaign_id,
                    c.owner,
                    c.status,
                    c.created_at,
                    c.updated_at,
                    c.version,
                    dumps(campaign_document(c)),
                    c.owner,
                    limit,
                ),
            )
            if cursor.rowcount != 1:
                raise LimitReached(f"an API key keeps at most {limit} campaigns")

    async def get(self, owner: str, campaign_id: str) -> CampaignRecord | None:
        """Return the owner's campaign, or None."""
        rows = await self._db.read(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE campaign_id = ? AND owner = ?",
            (campaign_id, owner),
        )
        return _campaign(rows[0]) if rows else None

    async def replace(
        self, campaign: CampaignRecord, *, version: int, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write a campaign read at `version` and its new publications."""
        async with self._db.transaction() as db:
            return await _write(db, campaign, version, publications)

    async def delete(self, owner: str, campaign_id: str) -> bool:
        """Delete the owner's campaign and its publications."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM campaigns WHERE campaign_id = ? AND owner = ?", (campaign_id, owner)
            )
            if cursor.rowcount != 1:
                return False
            await db.execute(
                "DELETE FROM campaign_publications WHERE campaign_id = ?", (campaign_id,)
            )
            return True

    async def search(
        self,
        owner: str,
        *,
        status: CampaignStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[CampaignRecord]:
        """Return the owner's campaigns (of one status), newest first."""
        where, params = "owner = ?", [owner]
        if status is not None:
            where += " AND status = ?"
            params.append(status)
        rows = await self._db.read(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE {where} "
            "ORDER BY created_at DESC, campaign_id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [_campaign(row) for row in rows]

    @contextlib.asynccontextmanager
    async def claim_next(self, after: str) -> AsyncIterator[SqliteCampaignClaim | None]:
        """Yield the active campaign with the smallest id above `after`, or None."""
        rows = await self._db.read(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE status IN ('planning', 'running') "
            "AND campaign_id > ? ORDER BY campaign_id LIMIT 1",
            (after,),
        )
        yield SqliteCampaignClaim(self._db, _campaign(rows[0])) if rows else None

    async def publications(self, owner: str, campaign_id: str) -> list[Publication]:
        """Return a campaign's publications by slot."""
        rows = await self._db.read(
            f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.campaign_id = ? AND p.owner = ? "
            "ORDER BY p.slot, p.platform",
            (campaign_id, owner),
        )
        return [_publication(row) for row in rows]

    async def due_owners(self, now_at: str, limit: int) -> list[str]:
        """Return the owners of the publications due at `now_at`."""
        rows = await self._db.read(
            "SELECT DISTINCT owner FROM campaign_publications WHERE next_attempt_at <= ? "
            "AND (status = 'scheduled' OR (transport = 'mcp' AND status = 'retrying')) LIMIT ?",
            (now_at, limit),
        )
        return [str(row[0]) for row in rows]

    async def hand_to_outbox(self, now_at: str, skip: Collection[str] = ()) -> int:
        """Queue the due webhook publications in the webhook outbox, each once."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.transport = 'webhook' "
                "AND p.status = 'scheduled' AND p.next_attempt_at <= ? "
                "AND p.owner NOT IN (SELECT value FROM json_each(?)) "
                "ORDER BY p.next_attempt_at LIMIT 100",
                (now_at, dumps(sorted(skip))),
            )
            due = [_publication(row) for row in await cursor.fetchall()]
            for publication in due:
                delivery = publication_delivery_id(publication.publication_id)
                queued = WebhookQueued(
                    delivery_id=delivery,
                    run_id=publication.run_id,
                    thread_id=publication.thread_id,
                    owner=publication.owner,
                    url=publication.url,
                    body=webhook_body(publication),
                )
                await db.execute(*webhook_queued_statement(queued))
                await db.execute(
                    "UPDATE campaign_publications SET status = 'outbox', delivery_id = ?, "
                    "updated_at = ? WHERE publication_id = ?",
                    (delivery, now(), publication.publication_id),
                )
        return len(due)

    async def claim_calls(
        self, now_at: str, worker: str, lease_seconds: float, limit: int, skip: Collection[str] = ()
    ) -> list[Publication]:
        """Lease the due MCP publications to `worker`, each as `sending` with one more attempt."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE campaign_publications SET status = 'sending', attempts = attempts + 1, "
                "lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE publication_id IN "
                "(SELECT publication_id FROM campaign_publications WHERE transport = 'mcp' "
                "AND status IN ('scheduled', 'retrying') AND next_attempt_at <= ? "
                "AND owner NOT IN (SELECT value FROM json_each(?)) "
                "ORDER BY next_attempt_at LIMIT ?) RETURNING publication_id",
                (worker, time.time() + lease_seconds, now(), now_at, dumps(sorted(skip)), limit),
            )
            ids = [row[0] for row in await cursor.fetchall()]
            if not ids:
                return []
            marks = ", ".join("?" for _ in ids)
            cursor = await db.execute(
                f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.publication_id IN ({marks}) "
                "ORDER BY p.next_attempt_at",
                ids,
            )
            return [_publication(row) for row in await cursor.fetchall()]

    async def record_call(
        self,
        publication: Publication,
        *,
        worker: str,
        status: str,
        error: str | None = None,
        external_id: str | None = None,
        answer: str | None = None,
        published_at: str | None = None,
        next_attempt_at: str | None = None,
    ) -> bool:
        """Record how a claimed call went, if `worker` still holds it."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE campaign_publications SET status = ?, error = ?, external_id = ?, "
                "answer = ?, published_at = ?, next_attempt_at = COALESCE(?, next_attempt_at), "
                "lease_owner = NULL, lease_expires_at = NULL, updated_at = ? "
                "WHERE publication_id = ? AND lease_owner = ? AND status = 'sending'",
                (
                    status,
                    error,
                    external_id,
                    answer,
                    published_at,
                    next_attempt_at,
                    now(),
                    publication.publication_id,
                    worker,
                ),
            )
            return cursor.rowcount == 1

    async def expire_calls(self) -> int:
        """Mark `unknown` the calls whose lease ran out (their sender stopped mid-call)."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE campaign_publications SET status = 'unknown', error = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, updated_at = ? "
                "WHERE status = 'sending' AND lease_expires_at < ?",
                (IN_DOUBT, now(), time.time()),
            )
            return cursor.rowcount


__all__ = [
    "INSERT_PUBLICATION",
    "SqliteCampaignClaim",
    "SqliteCampaignRepository",
    "publication_values",
]
