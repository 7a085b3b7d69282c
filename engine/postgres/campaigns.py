"""Campaigns and their publications in PostgreSQL (`CampaignRepository`), schema v12.

Every process runs a campaign driver and a publisher (engine/services/campaigns.py).
A driver pass leases an active campaign nobody holds (`driver_until`, set from the
database clock in the transaction that takes the row with `SELECT … FOR UPDATE SKIP
LOCKED`), drives it outside any transaction (it starts runs, which take their own),
and writes it back only while its version is still the one read, releasing the
lease; so two processes never drive one campaign at once, and a person's edit
(`replace`, written on the version it read) wins over a pass that read before it. A
process killed mid-pass leaves its lease to run out (`DRIVER_LEASE_SECONDS`).

Publications are claimed alike: the due webhook ones are queued in the outbox in the
transaction that marks them handed over; the due MCP calls are leased (owner and
expiry from the database clock) and marked `sending`, committed before the call is
made, so no other process makes it; a lease that runs out mid-call makes the
publication `unknown` (`expire_calls`), never a second call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.campaigns import (
    CampaignRecord,
    CampaignStatus,
    Publication,
    campaign_document,
    campaign_from_row,
    publication_from_row,
)
from engine.crons import iso
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp
from engine.postgres.webhooks import webhook_queued_statement
from engine.publishing import IN_DOUBT, publication_delivery_id, webhook_body
from engine.records import WebhookQueued
from engine.repositories import LimitReached
from engine.serde import dumps, loads

_CAMPAIGN = "campaign_id, owner, status, created_at, updated_at, version, document"
_COLUMNS_OF_C = ", ".join(f"c.{name}" for name in _CAMPAIGN.split(", "))
_PUBLICATION = (
    "p.publication_id, p.campaign_id, p.item_id, p.owner, p.platform, p.transport, p.url, "
    "p.tool, p.arguments, p.payload, p.slot, p.run_id, p.thread_id, p.status, p.attempts, "
    "p.next_attempt_at, p.published_at, p.external_id, p.answer, p.error, p.created_at, "
    "d.status AS d_status, d.attempts AS d_attempts, d.last_error AS d_error, "
    "d.updated_at AS d_updated_at, d.next_attempt_at AS d_next_attempt_at"
)
_FROM = "campaign_publications p LEFT JOIN webhook_deliveries d ON d.delivery_id = p.delivery_id"
_TIMES = ("slot", "next_attempt_at", "published_at", "created_at", "d_updated_at")
#: Seconds a driver pass holds a campaign at most (a pass takes a fraction of it).
DRIVER_LEASE_SECONDS = 60.0


def _campaign(row: DictRow) -> CampaignRecord:
    columns = {
        **row,
        "created_at": stamp(row["created_at"]) or "",
        "updated_at": stamp(row["updated_at"]) or "",
    }
    return campaign_from_row(columns, loads(row["document"]))


def _publication(row: DictRow) -> Publication:
    texts = {key: iso(row[key]) if isinstance(row[key], datetime) else row[key] for key in _TIMES}
    return publication_from_row({**row, **texts}, due=iso)


async def _write(
    conn: AsyncConnection[DictRow],
    campaign: CampaignRecord,
    version: int,
    publications: Sequence[Publication],
    *,
    release: bool = False,
) -> bool:
    """Write a campaign read at `version` and its new publications; False: it moved.

    `release`: a driver pass writes it, and lets go of its lease.
    """
    lease = ", driver_until = NULL" if release else ""
    row = await (
        await conn.execute(
            "UPDATE campaigns SET status = %s, updated_at = %s::timestamptz, version = %s, "
            f"document = %s{lease} WHERE campaign_id = %s AND owner = %s AND version = %s "
            "RETURNING campaign_id",
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
    ).fetchone()
    if row is None:
        return False
    for publication in publications:
        await conn.execute(
            "INSERT INTO campaign_publications (publication_id, campaign_id, item_id, owner, "
            "platform, transport, url, tool, arguments, payload, slot, run_id, thread_id, "
            "next_attempt_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
            "%s::timestamptz, %s, %s, %s::timestamptz) ON CONFLICT (publication_id) DO NOTHING",
            (
                publication.publication_id,
                publication.campaign_id,
                publication.item_id,
                publication.owner,
                publication.platform,
                publication.transport,
                publication.url,
                publication.tool,
                Jsonb(publication.arguments),
                dumps(publication.payload),
                publication.slot,
                publication.run_id,
                publication.thread_id,
                publication.slot,
            ),
        )
    campaign.version = version + 1
    return True


class PostgresCampaignClaim:
    """An active campaign leased to a driver pass (an `engine.repositories.CampaignClaim`)."""

    def __init__(self, pool: AsyncPool, campaign: CampaignRecord) -> None:
        """Drive `campaign` (as read when leased), writing through `pool`."""
        self._pool = pool
        self.campaign = campaign
        self._version = campaign.version
        self.saved = False

    async def save(
        self, campaign: CampaignRecord, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write the campaign and its new publications, if nobody changed it; release it."""
        async with self._pool.connection() as conn, conn.transaction():
            self.saved = await _write(conn, campaign, self._version, publications, release=True)
        return self.saved


class PostgresCampaignRepository:
    """Campaigns and publications in PostgreSQL (see the module docstring)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def insert(self, campaign: CampaignRecord, *, limit: int) -> None:
        """Store a new campaign unless the owner has `limit` already (counted in turn)."""
        c = campaign
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('campaigns:' || %s, 0))",
                (c.owner,),
            )
            cursor = await conn.execute(
                f"INSERT INTO campaigns ({_CAMPAIGN}) SELECT %s, %s, %s, %s::timestamptz, "
                "%s::timestamptz, %s, %s "
                "WHERE (SELECT count(*) FROM campaigns WHERE owner = %s) < %s",
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
        rows = await self._fetch(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE campaign_id = %s AND owner = %s",
            (campaign_id, owner),
        )
        return _campaign(rows[0]) if rows else None

    async def replace(
        self, campaign: CampaignRecord, *, version: int, publications: Sequence[Publication] = ()
    ) -> bool:
        """Write a campaign read at `version` and its new publications."""
        async with self._pool.connection() as conn, conn.transaction():
            return await _write(conn, campaign, version, publications)

    async def delete(self, owner: str, campaign_id: str) -> bool:
        """Delete the owner's campaign; its publications go with it (a foreign key)."""
        rows = await self._fetch(
            "DELETE FROM campaigns WHERE campaign_id = %s AND owner = %s RETURNING campaign_id",
            (campaign_id, owner),
        )
        return bool(rows)

    async def search(
        self,
        owner: str,
        *,
        status: CampaignStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[CampaignRecord]:
        """Return the owner's campaigns (of one status), newest first."""
        where, params = "owner = %s", [owner]
        if status is not None:
            where += " AND status = %s"
            params.append(status)
        rows = await self._fetch(
            f"SELECT {_CAMPAIGN} FROM campaigns WHERE {where} "
            "ORDER BY created_at DESC, campaign_id DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [_campaign(row) for row in rows]

    @contextlib.asynccontextmanager
    async def claim_next(self, after: str) -> AsyncIterator[PostgresCampaignClaim | None]:
        """Lease the active campaign with the smallest id above `after` nobody holds."""
        rows = await self._fetch(
            "WITH next AS (SELECT campaign_id FROM campaigns "
            "WHERE status IN ('planning', 'running') AND campaign_id > %s "
            "AND (driver_until IS NULL OR driver_until < now()) "
            "ORDER BY campaign_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
            "UPDATE campaigns c SET driver_until = now() + make_interval(secs => %s) "
            f"FROM next WHERE c.campaign_id = next.campaign_id RETURNING {_COLUMNS_OF_C}",
            (after, DRIVER_LEASE_SECONDS),
        )
        if not rows:
            yield None
            return
        claim = PostgresCampaignClaim(self._pool, _campaign(rows[0]))
        try:
            yield claim
        finally:
            if not claim.saved:  # nothing written (or a person's edit won): let it go
                await self._fetch(
                    "UPDATE campaigns SET driver_until = NULL WHERE campaign_id = %s "
                    "RETURNING campaign_id",
                    (claim.campaign.campaign_id,),
                )

    async def publications(self, owner: str, campaign_id: str) -> list[Publication]:
        """Return a campaign's publications by slot."""
        rows = await self._fetch(
            f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.campaign_id = %s AND p.owner = %s "
            "ORDER BY p.slot, p.platform",
            (campaign_id, owner),
        )
        return [_publication(row) for row in rows]

    async def due_owners(self, now_at: str, limit: int) -> list[str]:
        """Return the owners of the publications due at `now_at`."""
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT DISTINCT owner FROM campaign_publications "
                    "WHERE next_attempt_at <= %s::timestamptz AND (status = 'scheduled' "
                    "OR (transport = 'mcp' AND status = 'retrying')) LIMIT %s",
                    (now_at, limit),
                )
            ).fetchall()
        return [str(row["owner"]) for row in rows]

    async def hand_to_outbox(self, now_at: str, skip: Collection[str] = ()) -> int:
        """Queue the due webhook publications in the outbox, each once (SKIP LOCKED)."""
        async with self._pool.connection() as conn, conn.transaction():
            rows = await (
                await conn.execute(
                    f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.transport = 'webhook' "
                    "AND p.status = 'scheduled' AND p.next_attempt_at <= %s::timestamptz "
                    "AND NOT (p.owner = ANY(%s::text[])) "
                    "ORDER BY p.next_attempt_at LIMIT 100 FOR UPDATE OF p SKIP LOCKED",
                    (now_at, sorted(skip)),
                )
            ).fetchall()
            for publication in map(_publication, rows):
                delivery = publication_delivery_id(publication.publication_id)
                queued = WebhookQueued(
                    delivery_id=delivery,
                    run_id=publication.run_id,
                    thread_id=publication.thread_id,
                    owner=publication.owner,
                    url=publication.url,
                    body=webhook_body(publication),
                )
                await conn.execute(*webhook_queued_statement(queued))
                await conn.execute(
                    "UPDATE campaign_publications SET status = 'outbox', delivery_id = %s, "
                    "updated_at = now() WHERE publication_id = %s",
                    (delivery, publication.publication_id),
                )
        return len(rows)

    async def claim_calls(
        self, now_at: str, worker: str, lease_seconds: float, limit: int, skip: Collection[str] = ()
    ) -> list[Publication]:
        """Lease the due MCP publications to `worker`, each as `sending` with one more attempt."""
        async with self._pool.connection() as conn, conn.transaction():
            claimed = await (
                await conn.execute(
                    "WITH due AS (SELECT publication_id FROM campaign_publications "
                    "WHERE transport = 'mcp' AND status IN ('scheduled', 'retrying') "
                    "AND next_attempt_at <= %s::timestamptz AND NOT (owner = ANY(%s::text[])) "
                    "ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED) "
                    "UPDATE campaign_publications p SET status = 'sending', "
                    "attempts = p.attempts + 1, lease_owner = %s, "
                    "lease_expires_at = now() + make_interval(secs => %s), updated_at = now() "
                    "FROM due WHERE p.publication_id = due.publication_id "
                    "RETURNING p.publication_id",
                    (now_at, sorted(skip), limit, worker, lease_seconds),
                )
            ).fetchall()
            if not claimed:
                return []
            rows = await (
                await conn.execute(
                    f"SELECT {_PUBLICATION} FROM {_FROM} WHERE p.publication_id = ANY(%s) "
                    "ORDER BY p.next_attempt_at",
                    ([row["publication_id"] for row in claimed],),
                )
            ).fetchall()
        return [_publication(row) for row in rows]

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
        rows = await self._fetch(
            "UPDATE campaign_publications SET status = %s, error = %s, external_id = %s, "
            "answer = %s, published_at = %s::timestamptz, "
            "next_attempt_at = COALESCE(%s::timestamptz, next_attempt_at), "
            "lease_owner = NULL, lease_expires_at = NULL, updated_at = now() "
            "WHERE publication_id = %s AND lease_owner = %s AND status = 'sending' "
            "RETURNING publication_id",
            (
                status,
                error,
                external_id,
                answer,
                published_at,
                next_attempt_at,
                publication.publication_id,
                worker,
            ),
        )
        return bool(rows)

    async def expire_calls(self) -> int:
        """Mark `unknown` the calls whose lease ran out (their sender stopped mid-call)."""
        rows = await self._fetch(
            "UPDATE campaign_publications SET status = 'unknown', error = %s, "
            "lease_owner = NULL, lease_expires_at = NULL, updated_at = now() "
            "WHERE status = 'sending' AND lease_expires_at < now() RETURNING publication_id",
            (IN_DOUBT,),
        )
        return len(rows)
