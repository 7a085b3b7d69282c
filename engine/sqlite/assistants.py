"""Assistants clients created, in the run engine's SQLite database (`AssistantRepository`).

`assistants` holds one row per assistant (its owner and latest version);
`assistant_versions` one row per version, written once. An update reads the latest
version, then inserts the next one and points the assistant at it in one write
transaction; two updates racing for the same number: the second is refused by the
primary key and made again on the newer version.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

from engine.assistants import AssistantRecord
from engine.quotas import check_count
from engine.repositories import AssistantExists
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase
from engine.sqlite.quotas import count_owned

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
    "config, context, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: Tries of an update that lost the race for its version number.
UPDATE_TRIES = 5


def assistant_from_row(row: sqlite3.Row) -> AssistantRecord:
    """Return the assistant version a joined row holds."""
    return AssistantRecord(
        assistant_id=row["assistant_id"],
        owner=row["owner"],
        graph_id=row["graph_id"],
        version=row["version"],
        name=row["name"],
        description=row["description"],
        config=loads(row["config"]) or {},
        context=loads(row["context"]) or {},
        metadata=loads(row["metadata"]) or {},
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _version_row(record: AssistantRecord) -> tuple[Any, ...]:
    return (
        record.assistant_id,
        record.version,
        record.graph_id,
        record.name,
        record.description,
        dumps(record.config),
        dumps(record.context),
        dumps(record.metadata),
        record.updated_at,
    )


def _filters(
    owner: str, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
) -> tuple[str, list[Any]]:
    """Return the WHERE clause (and its parameters) of a search of latest versions."""
    where = ["a.owner = ?", "v.version = a.version"]
    params: list[Any] = [owner]
    if graph_id is not None:
        where.append("v.graph_id = ?")
        params.append(graph_id)
    if name is not None:
        where.append("v.name = ?")
        params.append(name)
    for key, value in (metadata or {}).items():
        where.append("json_extract(v.metadata, ?) IS json_extract(?, '$')")
        params += [f'$."{key}"', dumps(value)]
    return " AND ".join(where), params


class SqliteAssistantRepository:
    """Assistants and their versions in SQLite (see `engine.repositories.AssistantRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(self, record: AssistantRecord, *, limit: int | None = None) -> None:
        """Store a new assistant with its first version; raise `AssistantExists` if taken.

        With `limit`, only while its owner has fewer (counted in the same transaction;
        `QuotaExceeded` otherwise).
        """
        try:
            async with self._db.transaction() as db:
                if limit is not None:
                    count = await count_owned(db, "assistants", record.owner)
                    check_count("assistants", limit, count)
                await db.execute(
                    "INSERT INTO assistants (assistant_id, owner, version, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (record.assistant_id, record.owner, record.version, record.created_at),
                )
                await db.execute(_INSERT_VERSION, _version_row(record))
        except sqlite3.IntegrityError:
            raise AssistantExists(f"assistant {record.assistant_id!r} already exists") from None

    async def get(
        self, owner: str, assistant_id: str, version: int | None = None
    ) -> AssistantRecord | None:
        """Return the owner's assistant at its latest version (or at `version`), or None."""
        which = "v.version = a.version" if version is None else "v.version = ?"
        params: list[Any] = [assistant_id, owner] + ([] if version is None else [version])
        rows = await self._db.read(
            f"{_SELECT} WHERE a.assistant_id = ? AND a.owner = ? AND {which}", params
        )
        return assistant_from_row(rows[0]) if rows else None

    async def update(
        self, owner: str, assistant_id: str, changes: dict[str, Any], stamp: str
    ) -> AssistantRecord | None:
        """Write the next version (the latest with `changes`) and make it the latest."""
        for _ in range(UPDATE_TRIES):
            latest = await self.get(owner, assistant_id)
            if latest is None:
                return None
            rows = await self._db.read(
                "SELECT max(version) AS v FROM assistant_versions WHERE assistant_id = ?",
                (assistant_id,),
            )
            record = replace(latest, **changes, version=int(rows[0]["v"]) + 1, updated_at=stamp)
            try:
                async with self._db.transaction() as db:
                    await db.execute(_INSERT_VERSION, _version_row(record))
                    cursor = await db.execute(
                        "UPDATE assistants SET version = ? WHERE assistant_id = ? AND owner = ?",
                        (record.version, assistant_id, owner),
                    )
                    if cursor.rowcount != 1:  # deleted in between: undo the version
                        raise LookupError(assistant_id)
            except sqlite3.IntegrityError:
                continue  # another update took the number: make it again on the newer one
            except LookupError:
                return None
            return record
        raise RuntimeError(f"assistant {assistant_id!r}: too many concurrent updates")

    async def set_latest(
        self, owner: str, assistant_id: str, version: int
    ) -> AssistantRecord | None:
        """Make `version` the one runs use; return it (None: no such assistant or version)."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE assistants SET version = ? WHERE assistant_id = ? AND owner = ? "
                "AND EXISTS (SELECT 1 FROM assistant_versions "
                "WHERE assistant_id = ? AND version = ?)",
                (version, assistant_id, owner, assistant_id, version),
            )
            if cursor.rowcount != 1:
                return None
        return await self.get(owner, assistant_id, version)

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
        where = ["a.assistant_id = ?", "a.owner = ?"]
        params: list[Any] = [assistant_id, owner]
        for key, value in (metadata or {}).items():
            where.append("json_extract(v.metadata, ?) IS json_extract(?, '$')")
            params += [f'$."{key}"', dumps(value)]
        rows = await self._db.read(
            f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY v.version DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [assistant_from_row(row) for row in rows]

    async def delete(self, owner: str, assistant_id: str) -> bool:
        """Delete the owner's assistant with every version; False when there is none."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM assistants WHERE assistant_id = ? AND owner = ?",
                (assistant_id, owner),
            )
            if cursor.rowcount != 1:
                return False
            await db.execute(
                "DELETE FROM assistant_versions WHERE assistant_id = ?", (assistant_id,)
            )
            return True

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
        rows = await self._db.read(
            f"{_SELECT} WHERE {where} ORDER BY {_SORTABLE[sort_by]} {order}, "
            f"a.assistant_id {order} LIMIT ? OFFSET ?",
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
        rows = await self._db.read(
            "SELECT count(*) AS n FROM assistants a JOIN assistant_versions v "
            f"ON v.assistant_id = a.assistant_id WHERE {where}",
            params,
        )
        return int(rows[0]["n"])
