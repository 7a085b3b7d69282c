"""Managed keys and the audit trail in PostgreSQL (schema v8).

`PostgresKeyRepository` (`engine.keys.KeyRepository`) writes each change of a key with
its audit entries in one transaction; a revocation pauses the key's crons and cancels
its pending webhook deliveries in that same transaction, so every replica's scheduler
and deliverer see them stopped as soon as it commits. `PostgresAuditRepository`
(`engine.audit.AuditRepository`) appends and reads the log (a trigger refuses to
change it).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.audit import AuditEntry, AuditRecord
from engine.keys import KeyRecord, Revocation
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp

_COLUMNS = (
    "key_id, prefix, name, role, quotas, created_at, updated_at, expires_at, last_used_at, "
    "revoked_at, created_by, webhook_secret, previous_webhook_secret, previous_secret_until"
)
_AUDIT_COLUMNS = "entry_id, at, actor, actor_role, action, subject, target, details"
#: What a delivery cancelled by its key's revocation says.
CANCELLED = "cancelled: the API key that owns the run was revoked"


def key_from_row(row: DictRow) -> KeyRecord:
    """Return the key an `api_keys` row holds."""
    return KeyRecord(
        key_id=row["key_id"],
        prefix=row["prefix"],
        name=row["name"],
        role=row["role"],
        quotas=row["quotas"] or {},
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
        expires_at=stamp(row["expires_at"]),
        last_used_at=stamp(row["last_used_at"]),
        revoked_at=stamp(row["revoked_at"]),
        created_by=row["created_by"],
        webhook_secret=row["webhook_secret"],
        previous_webhook_secret=row["previous_webhook_secret"],
        previous_secret_until=stamp(row["previous_secret_until"]),
    )


async def append_entry(conn: AsyncConnection[DictRow], entry: AuditEntry) -> None:
    """Append an audit entry on the caller's connection (inside its transaction)."""
    await conn.execute(
        "INSERT INTO audit_log (at, actor, actor_role, action, subject, target, details) "
        "VALUES (%s::timestamptz, %s, %s, %s, %s, %s, %s)",
        (
            entry.at,
            entry.actor,
            entry.actor_role,
            entry.action,
            entry.subject,
            entry.target,
            Jsonb(entry.details),
        ),
    )


class PostgresKeyRepository:
    """Managed keys in PostgreSQL (see `engine.keys.KeyRepository`)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def insert(self, record: KeyRecord, digest: str, audit: AuditEntry) -> None:
        """Store a new key under its secret's digest, with its audit entry."""
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO api_keys (digest, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, "
                "%s::timestamptz, %s::timestamptz, %s::timestamptz, %s::timestamptz, "
                "%s::timestamptz, %s, %s, %s, %s::timestamptz)",
                (
                    digest,
                    record.key_id,
                    record.prefix,
                    record.name,
                    record.role,
                    Jsonb(record.quotas),
                    record.created_at,
                    record.updated_at,
                    record.expires_at,
                    record.last_used_at,
                    record.revoked_at,
                    record.created_by,
                    record.webhook_secret,
                    record.previous_webhook_secret,
                    record.previous_secret_until,
                ),
            )
            await append_entry(conn, audit)

    async def get(self, key_id: str) -> KeyRecord | None:
        """Return a key by id, or None."""
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,))
        return key_from_row(rows[0]) if rows else None

    async def by_digest(self, digest: str) -> KeyRecord | None:
        """Return the key whose secret has this digest, or None."""
        rows = await self._fetch(f"SELECT {_COLUMNS} FROM api_keys WHERE digest = %s", (digest,))
        return key_from_row(rows[0]) if rows else None

    async def search(
        self, *, include_revoked: bool = True, limit: int = 100, offset: int = 0
    ) -> list[KeyRecord]:
        """Return keys, newest first."""
        where = "" if include_revoked else "WHERE revoked_at IS NULL"
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM api_keys {where} "
            "ORDER BY created_at DESC, key_id DESC LIMIT %s OFFSET %s",
            (limit, offset),
        )
        return [key_from_row(row) for row in rows]

    async def count(self, *, include_revoked: bool = True) -> int:
        """Return how many keys there are."""
        where = "" if include_revoked else "WHERE revoked_at IS NULL"
        rows = await self._fetch(f"SELECT count(*) AS n FROM api_keys {where}")
        return int(rows[0]["n"])

    async def update(
        self, key_id: str, changes: dict[str, Any], stamp: str, audit: list[AuditEntry]
    ) -> KeyRecord | None:
        """Change a key that is not revoked; None when there is none such."""
        sets = ["updated_at = %s::timestamptz"]
        params: list[Any] = [stamp]
        for name in ("name", "role", "expires_at", "quotas"):
            if name in changes:
                cast = "::timestamptz" if name == "expires_at" else ""
                sets.append(f"{name} = %s{cast}")
                params.append(Jsonb(changes[name]) if name == "quotas" else changes[name])
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    f"UPDATE api_keys SET {', '.join(sets)} "
                    f"WHERE key_id = %s AND revoked_at IS NULL RETURNING {_COLUMNS}",
                    (*params, key_id),
                )
            ).fetchone()
            if row is None:
                return None
            for entry in audit:
                await append_entry(conn, entry)
        return key_from_row(row)

    async def revoke(self, key_id: str, stamp: str, audit: AuditEntry) -> Revocation | None:
        """Revoke a key, pause its crons and cancel its pending deliveries."""
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE api_keys SET revoked_at = %s::timestamptz, "
                    "updated_at = %s::timestamptz "
                    f"WHERE key_id = %s AND revoked_at IS NULL RETURNING {_COLUMNS}",
                    (stamp, stamp, key_id),
                )
            ).fetchone()
            if row is None:
                return None
            crons = await conn.execute(
                "UPDATE crons SET enabled = false, updated_at = %s::timestamptz "
                "WHERE owner = %s AND enabled",
                (stamp, key_id),
            )
            deliveries = await conn.execute(
                "UPDATE webhook_deliveries SET status = 'cancelled', updated_at = now(), "
                "last_error = %s, lease_owner = NULL, lease_expires_at = NULL "
                "WHERE owner = %s AND status = 'pending'",
                (CANCELLED, key_id),
            )
            paused, cancelled = crons.rowcount, deliveries.rowcount
            details = {**audit.details, "crons_paused": paused, "deliveries_cancelled": cancelled}
            await append_entry(
                conn,
                AuditEntry(
                    at=audit.at,
                    actor=audit.actor,
                    action=audit.action,
                    actor_role=audit.actor_role,
                    subject=audit.subject,
                    target=audit.target,
                    details=details,
                ),
            )
        return Revocation(key_from_row(row), crons_paused=paused, deliveries_cancelled=cancelled)

    async def rotate_webhook_secret(
        self, key_id: str, secret: str, previous_until: str, stamp: str, audit: AuditEntry
    ) -> KeyRecord | None:
        """Make `secret` the key's webhook secret, keeping the current one until then."""
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE api_keys SET previous_webhook_secret = webhook_secret, "
                    "previous_secret_until = %s::timestamptz, webhook_secret = %s, "
                    "updated_at = %s::timestamptz WHERE key_id = %s AND revoked_at IS NULL "
                    f"RETURNING {_COLUMNS}",
                    (previous_until, secret, stamp, key_id),
                )
            ).fetchone()
            if row is None:
                return None
            await append_entry(conn, audit)
        return key_from_row(row)

    async def touch(self, key_id: str, stamp: str, unless_after: str) -> None:
        """Set `last_used_at`, unless it is already after `unless_after`."""
        await self._fetch(
            "UPDATE api_keys SET last_used_at = %s::timestamptz WHERE key_id = %s "
            "AND (last_used_at IS NULL OR last_used_at <= %s::timestamptz) RETURNING key_id",
            (stamp, key_id, unless_after),
        )

    async def pause_crons(self, owner: str) -> int:
        """Disable every enabled cron of `owner`; return how many."""
        rows = await self._fetch(
            "UPDATE crons SET enabled = false WHERE owner = %s AND enabled RETURNING cron_id",
            (owner,),
        )
        return len(rows)


class PostgresAuditRepository:
    """The audit log in PostgreSQL (see `engine.audit.AuditRepository`)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def append(self, entry: AuditEntry) -> None:
        """Append one entry."""
        async with self._pool.connection() as conn:
            await append_entry(conn, entry)

    async def search(
        self,
        *,
        key_id: str | None = None,
        action: str | None = None,
        since: str | None = None,
        until: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> list[AuditRecord]:
        """Return entries newest first, matching every filter given."""
        where: list[str] = []
        params: list[Any] = []
        if key_id is not None:
            where.append("(actor = %s OR subject = %s)")
            params += [key_id, key_id]
        for clause, value in (
            ("action = %s", action),
            ("at >= %s::timestamptz", since),
            ("at < %s::timestamptz", until),
            ("entry_id < %s", before),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        async with self._pool.connection() as conn:
            rows = await (
                await conn.execute(
                    f"SELECT {_AUDIT_COLUMNS} FROM audit_log {condition} "
                    "ORDER BY entry_id DESC LIMIT %s",
                    (*params, limit),
                )
            ).fetchall()
        return [
            AuditRecord(
                entry_id=int(row["entry_id"]),
                entry=AuditEntry(
                    at=stamp(row["at"]) or "",
                    actor=row["actor"],
                    actor_role=row["actor_role"],
                    action=row["action"],
                    subject=row["subject"],
                    target=row["target"],
                    details=row["details"] or {},
                ),
            )
            for row in rows
        ]
