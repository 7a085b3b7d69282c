"""Assistants clients created, in PostgreSQL (`AssistantRepository`).

`assistants` holds one row per assistant (its owner and latest version);
`assistant_versions` one row per version, written once (schema version 7). An
update locks the assistant's row (`FOR UPDATE`), so concurrent updates from any
replica number their versions one after the other.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.assistants import AssistantRecord
from engine.postgres.pool import AsyncPool
from engine.postgres.quotas import count_owned
from engine.postgres.threads import stamp
from engine.quotas import check_count
from engine.repositories import AssistantExists

_SELECT = (
    "SELECT a.assistant_id, a.owner, a.created_at, v.version, v.graph_id, v.name, "
    "v.description, v.config, v.context, v.metadata, v.created_at AS updated_at "
    "FROM assistants a JOIN assistant_versions v ON v.assistant_id = a.assistant_id"
)
_SORTABLE = {
    "assistant_id": "a.assistant_id",
    "graph_id": "v.graph_id",
    "name": "v.name",
    "created_at": "a.created_at",
    "updated_at": "v.created_at",
}
_INSERT_VERSION = (
    "INSERT INTO assistant_versions (assistant_id, version, graph_id, name, description, "
    "config, context, metadata, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::timestamptz)"
)


def assistant_from_row(row: DictRow) -> AssistantRecord:
    """Return the assistant version a joined row holds."""
    return AssistantRecord(
        assistant_id=row["assistant_id"],
        owner=row["owner"],
        graph_id=row["graph_id"],
        version=row["version"],
        name=row["name"],
        description=row["description"],
        config=row["config"] or {},
        context=row["context"] or {},
        metadata=row["metadata"] or {},
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
    )


def _version_row(record: AssistantRecord) -> tuple[Any, ...]:
    return (
        record.assistant_id,
        record.version,
        record.graph_id,
        record.name,
        record.description,
        Jsonb(record.config),
        Jsonb(record.context),
        Jsonb(record.metadata),
        record.updated_at,
    )


def _filters(
    owner: str, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a search of latest versions."""
    where = ["a.owner = %s", "v.version = a.version"]
    params: list[Any] = [owner]
    if graph_id is not None:
        where.append("v.graph_id = %s")
        params.append(graph_id)
    if name is not None:
        where.append("v.name = %s")
        params.append(name)
    if metadata:
        where.append("v.metadata @> %s")
        params.append(Jsonb(metadata))
    return " AND ".join(where), params


class PostgresAssistantRepository:
    """Assistants and their versions in PostgreSQL (`engine.repositories.AssistantRepository`)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def insert(self, record: AssistantRecord, *, limit: int | None = None) -> None:
        """Store a new assistant with its first version; raise `AssistantExists` if taken.

        With `limit`, only while its owner has fewer (counted under the owner's lock,
        every replica's in turn; `QuotaExceeded` otherwise).
        """
        try:
            async with self._pool.connection() as conn, conn.transaction():
                if limit is not None:
                    count = await count_owned(conn, "assistants", record.owner)
                    check_count("assistants", limit, count)
                await conn.execute(
                    "INSERT INTO assistants (assistant_id, owner, version, created_at) "
                    "VALUES (%s, %s, %s, %s::timestamptz)",
                    (record.assistant_id, record.owner, record.version, record.created_at),
                )
                await conn.execute(_INSERT_VERSION, _version_row(record))
        except psycopg.errors.UniqueViolation:
            raise AssistantExists(f"assistant {record.assistant_id!r} already exists") from None

    async def get(
        self, owner: str, assistant_id: str, version: int | None = None
    ) -> AssistantRecord | None:
        """Return the owner's assistant at its latest version (or at `version`), or None."""
        which = "v.version = a.version" if version is None else "v.version = %s"
        params: list[Any] = [assistant_id, owner] + ([] if version is None else [version])
        rows = await self._fetch(
            f"{_SELECT} WHERE a.assistant_id = %s AND a.owner = %s AND {which}", params
        )
        return assistant_from_row(rows[0]) if rows else None

    async def update(
        self, owner: str, assistant_id: str, changes: dict[str, Any], stamp: str
    ) -> AssistantRecord | None:
        """Write the next version (the latest with `changes`) and make it the latest."""
        async with self._pool.connection() as conn, conn.transaction():
            locked = await (
                await conn.execute(
                    "SELECT version FROM assistants WHERE assistant_id = %s AND owner = %s "
                    "FOR UPDATE",
                    (assistant_id, owner),
                )
            ).fetchone()
            if locked is None:
                return None
            rows = await (
                await conn.execute(
                    f"{_SELECT} WHERE a.assistant_id = %s AND v.version = a.version",
                    (assistant_id,),
                )
            ).fetchall()
            top = await (
                await conn.execute(
                    "SELECT max(version) AS v FROM assistant_versions WHERE assistant_id = %s",
                    (assistant_id,),
                )
            ).fetchone()
            assert top is not None
            latest = assistant_from_row(rows[0])
            record = replace(latest, **changes, version=int(top["v"]) + 1, updated_at=stamp)
            await conn.execute(_INSERT_VERSION, _version_row(record))
            await conn.execute(
                "UPDATE assistants SET version = %s WHERE assistant_id = %s",
                (record.version, assistant_id),
            )
        return record

    async def set_latest(
        self, owner: str, assistant_id: str, version: int
    ) -> AssistantRecord | None:
        """Make `version` the one runs use; return it (None: no such assistant or version)."""
        rows = await self._fetch(
            "UPDATE assistants SET version = %s WHERE assistant_id = %s AND owner = %s "
            "AND EXISTS (SELECT 1 FROM assistant_versions "
            "WHERE assistant_id = %s AND version = %s) RETURNING assistant_id",
            (version, assistant_id, owner, assistant_id, version),
        )
        return await self.get(owner, assistant_id, version) if rows else None

    async def versions(
        self,
        owner: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[AssistantRecord]:
        """Return the assistant's versions matching `metadata`, newest first."""
        where = "a.assistant_id = %s AND a.owner = %s"
        params: list[Any] = [assistant_id, owner]
        if metadata:
            where += " AND v.metadata @> %s"
            params.append(Jsonb(metadata))
        rows = await self._fetch(
            f"{_SELECT} WHERE {where} ORDER BY v.version DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [assistant_from_row(row) for row in rows]

    async def delete(self, owner: str, assistant_id: str) -> bool:
        """Delete the owner's assistant with every version (cascade); False when none."""
        rows = await self._fetch(
            "DELETE FROM assistants WHERE assistant_id = %s AND owner = %s RETURNING assistant_id",
            (assistant_id, owner),
        )
        return bool(rows)

    async def search(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str = "created_at",
        sort_order: str = "desc",
    ) -> list[AssistantRecord]:
        """Return the owner's assistants (at their latest versions) matching every filter."""
        if sort_by not in _SORTABLE:
            raise ValueError(f"cannot sort assistants by {sort_by!r}")
        where, params = _filters(owner, graph_id, name, metadata)
        order = "ASC" if sort_order == "asc" else "DESC"
        rows = await self._fetch(
            f"{_SELECT} WHERE {where} ORDER BY {_SORTABLE[sort_by]} {order}, "
            f"a.assistant_id {order} LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [assistant_from_row(row) for row in rows]

    async def count(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many of the owner's assistants match every given filter."""
        where, params = _filters(owner, graph_id, name, metadata)
        rows = await self._fetch(
            "SELECT count(*) AS n FROM assistants a JOIN assistant_versions v "
            f"ON v.assistant_id = a.assistant_id WHERE {where}",
            params,
        )
        return int(rows[0]["n"])
