"""Managed keys and the audit trail in the run engine's SQLite database.

`SqliteKeyRepository` (`engine.keys.KeyRepository`) writes each change of a key with
its audit entries in one write transaction; a revocation pauses the key's crons and
cancels its pending webhook deliveries in that same transaction.
`SqliteAuditRepository` (`engine.audit.AuditRepository`) appends and reads the log
(triggers refuse to change it, `engine.sqlite.database`).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import aiosqlite

from engine.audit import AuditEntry, AuditRecord
from engine.keys import KeyRecord, Revocation
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase

_COLUMNS = (
    "key_id, prefix, name, role, quotas, created_at, updated_at, expires_at, last_used_at, "
    "revoked_at, created_by, webhook_secret, previous_webhook_secret, previous_secret_until"
)
_AUDIT_COLUMNS = "entry_id, at, actor, actor_role, action, subject, target, details"
#: What a delivery cancelled by its key's revocation says.
CANCELLED = "cancelled: the API key that owns the run was revoked"


def key_from_row(row: sqlite3.Row) -> KeyRecord:
    """Return the key an `api_keys` row holds."""
    return KeyRecord(
        key_id=row["key_id"],
        prefix=row["prefix"],
        name=row["name"],
        role=row["role"],
        quotas=loads(row["quotas"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
        created_by=row["created_by"],
        webhook_secret=row["webhook_secret"],
        previous_webhook_secret=row["previous_webhook_secret"],
        previous_secret_until=row["previous_secret_until"],
    )


async def append_entry(db: aiosqlite.Connection, entry: AuditEntry) -> None:
    """Append an audit entry inside the caller's write transaction."""
    await db.execute(
        "INSERT INTO audit_log (at, actor, actor_role, action, subject, target, details) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            entry.at,
            entry.actor,
            entry.actor_role,
            entry.action,
            entry.subject,
            entry.target,
            dumps(entry.details),
        ),
    )


class SqliteKeyRepository:
    """Managed keys in SQLite (see `engine.keys.KeyRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(self, record: KeyRecord, digest: str, audit: AuditEntry) -> None:
        """Store a new key under its secret's digest, with its audit entry."""
        async with self._db.transaction() as db:
            await db.execute(
                f"INSERT INTO api_keys (digest, {_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    digest,
                    record.key_id,
                    record.prefix,
                    record.name,
                    record.role,
                    dumps(record.quotas),
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
            await append_entry(db, audit)

    async def _one(self, where: str, value: str) -> KeyRecord | None:
        rows = await self._db.read(f"SELECT {_COLUMNS} FROM api_keys WHERE {where} = ?", (value,))
        return key_from_row(rows[0]) if rows else None

    async def get(self, key_id: str) -> KeyRecord | None:
        """Return a key by id, or None."""
        return await self._one("key_id", key_id)

    async def by_digest(self, digest: str) -> KeyRecord | None:
        """Return the key whose secret has this digest, or None."""
        return await self._one("digest", digest)

    async def search(
        self, *, include_revoked: bool = True, limit: int = 100, offset: int = 0
    ) -> list[KeyRecord]:
        """Return keys, newest first."""
        where = "" if include_revoked else "WHERE revoked_at IS NULL"
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM api_keys {where} "
            "ORDER BY created_at DESC, key_id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [key_from_row(row) for row in rows]

    async def count(self, *, include_revoked: bool = True) -> int:
        """Return how many keys there are."""
        where = "" if include_revoked else "WHERE revoked_at IS NULL"
        rows = await self._db.read(f"SELECT count(*) AS n FROM api_keys {where}")
        return int(rows[0]["n"])

    async def update(
        self, key_id: str, changes: dict[str, Any], stamp: str, audit: list[AuditEntry]
    ) -> KeyRecord | None:
        """Change a key that is not revoked; None when there is none such."""
        sets = ["updated_at = ?"]
        params: list[Any] = [stamp]
        for name in ("name", "role", "expires_at", "quotas"):
            if name in changes:
                sets.append(f"{name} = ?")
                params.append(dumps(changes[name]) if name == "quotas" else changes[name])
        async with self._db.transaction() as db:
            cursor = await db.execute(
                f"UPDATE api_keys SET {', '.join(sets)} WHERE key_id = ? AND revoked_at IS NULL",
                (*params, key_id),
            )
            if cursor.rowcount != 1:
                return None
            for entry in audit:
                await append_entry(db, entry)
        return await self.get(key_id)

    async def revoke(self, key_id: str, stamp: str, audit: AuditEntry) -> Revocation | None:
        """Revoke a key, pause its crons and cancel its pending deliveries."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE api_keys SET revoked_at = ?, updated_at = ? "
                "WHERE key_id = ? AND revoked_at IS NULL",
                (stamp, stamp, key_id),
            )
            if cursor.rowcount != 1:
                return None
            crons = await db.execute(
                "UPDATE crons SET enabled = 0, updated_at = ? WHERE owner = ? AND enabled = 1",
                (stamp, key_id),
            )
            deliveries = await db.execute(
                "UPDATE webhook_deliveries SET status = 'cancelled', updated_at = ?, "
                "last_error = ?, lease_owner = NULL, lease_expires_at = NULL "
                "WHERE owner = ? AND status = 'pending'",
                (stamp, CANCELLED, key_id),
            )
            paused, cancelled = crons.rowcount, deliveries.rowcount
            details = {**audit.details, "crons_paused": paused, "deliveries_cancelled": cancelled}
            await append_entry(db, _with_details(audit, details))
        record = await self.get(key_id)
        assert record is not None  # revoked keys are never deleted
        return Revocation(record, crons_paused=paused, deliveries_cancelled=cancelled)

    async def rotate_webhook_secret(
        self, key_id: str, secret: str, previous_until: str, stamp: str, audit: AuditEntry
    ) -> KeyRecord | None:
        """Make `secret` the key's webhook secret, keeping the current one until then."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE api_keys SET previous_webhook_secret = webhook_secret, "
                "previous_secret_until = ?, webhook_secret = ?, updated_at = ? "
                "WHERE key_id = ? AND revoked_at IS NULL",
                (previous_until, secret, stamp, key_id),
            )
            if cursor.rowcount != 1:
                return None
            await append_entry(db, audit)
        return await self.get(key_id)

    async def touch(self, key_id: str, stamp: str, unless_after: str) -> None:
        """Set `last_used_at`, unless it is already after `unless_after`."""
        await self._db.execute(
            [
                (
                    "UPDATE api_keys SET last_used_at = ? WHERE key_id = ? "
                    "AND (last_used_at IS NULL OR last_used_at <= ?)",
                    (stamp, key_id, unless_after),
                )
            ]
        )

    async def pause_crons(self, owner: str) -> int:
        """Disable every enabled cron of `owner`; return how many."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE crons SET enabled = 0 WHERE owner = ? AND enabled = 1", (owner,)
            )
            return cursor.rowcount


def _with_details(entry: AuditEntry, details: dict[str, Any]) -> AuditEntry:
    return AuditEntry(
        at=entry.at,
        actor=entry.actor,
        action=entry.action,
        actor_role=entry.actor_role,
        subject=entry.subject,
        target=entry.target,
        details=details,
    )


class SqliteAuditRepository:
    """The audit log in SQLite (see `engine.audit.AuditRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def append(self, entry: AuditEntry) -> None:
        """Append one entry."""
        async with self._db.transaction() as db:
            await append_entry(db, entry)

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
            where.append("(actor = ? OR subject = ?)")
            params += [key_id, key_id]
        for clause, value in (
            ("action = ?", action),
            ("at >= ?", since),
            ("at < ?", until),
            ("entry_id < ?", before),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        condition = f"WHERE {' AND '.join(where)}" if where else ""
        rows = await self._db.read(
            f"SELECT {_AUDIT_COLUMNS} FROM audit_log {condition} ORDER BY entry_id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            AuditRecord(
                entry_id=row["entry_id"],
                entry=AuditEntry(
                    at=row["at"],
                    actor=row["actor"],
                    actor_role=row["actor_role"],
                    action=row["action"],
                    subject=row["subject"],
                    target=row["target"],
                    details=loads(row["details"]),
                ),
            )
            for row in rows
        ]
