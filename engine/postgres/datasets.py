"""Datasets and their examples in PostgreSQL (`DatasetRepository`, schema version 11).

Bounds are checked in the transaction that adds to them: a new dataset counts the
owner's datasets under a transaction-level advisory lock on the owner, and new
examples move the dataset's count with a conditional update (its row lock orders
concurrent adds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.datasets import DatasetRecord, ExampleRecord
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp
from engine.repositories import LimitReached
from engine.serde import dumps, loads

_COLUMNS = "dataset_id, owner, name, description, metadata, example_count, created_at, updated_at"
_EXAMPLE_COLUMNS = (
    "example_id, dataset_id, position, example_input, expectations, source, created_at"
)


def dataset_from_row(row: DictRow) -> DatasetRecord:
    """Return the dataset a `datasets` row holds."""
    return DatasetRecord(
        dataset_id=row["dataset_id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        metadata=row["metadata"] or {},
        example_count=int(row["example_count"]),
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
    )


def example_from_row(row: DictRow) -> ExampleRecord:
    """Return the example a `dataset_examples` row holds."""
    return ExampleRecord(
        example_id=row["example_id"],
        dataset_id=row["dataset_id"],
        position=int(row["position"]),
        input=loads(row["example_input"]),
        expectations=loads(row["expectations"]) if row["expectations"] else None,
        source=loads(row["source"]) if row["source"] else None,
        created_at=stamp(row["created_at"]) or "",
    )


def _filters(
    owner: str, name: str | None, metadata: dict[str, Any] | None
) -> tuple[str, list[Any]]:
    where = ["owner = %s"]
    params: list[Any] = [owner]
    if name:
        where.append("strpos(lower(name), lower(%s)) > 0")
        params.append(name)
    if metadata:
        where.append("metadata @> %s")
        params.append(Jsonb(metadata))
    return " AND ".join(where), params


class PostgresDatasetRepository:
    """Datasets in PostgreSQL (see `engine.repositories.DatasetRepository`)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    async def insert(self, dataset: DatasetRecord, *, limit: int) -> None:
        """Store a new dataset unless the owner has `limit` already."""
        d = dataset
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('datasets:' || %s, 0))",
                (d.owner,),
            )
            cursor = await conn.execute(
                f"INSERT INTO datasets ({_COLUMNS}) SELECT %s, %s, %s, %s, %s, 0, "
                "%s::timestamptz, %s::timestamptz "
                "WHERE (SELECT count(*) FROM datasets WHERE owner = %s) < %s",
                (
                    d.dataset_id,
                    d.owner,
                    d.name,
                    d.description,
                    Jsonb(d.metadata),
                    d.created_at,
                    d.updated_at,
                    d.owner,
                    limit,
                ),
            )
            if cursor.rowcount != 1:
                raise LimitReached(f"an API key keeps at most {limit} datasets")

    async def get(self, owner: str, dataset_id: str) -> DatasetRecord | None:
        """Return the owner's dataset, or None."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM datasets WHERE dataset_id = %s AND owner = %s",
            (dataset_id, owner),
        )
        return dataset_from_row(rows[0]) if rows else None

    async def update(
        self, owner: str, dataset_id: str, changes: dict[str, Any], stamp: str
    ) -> DatasetRecord | None:
        """Change its name, description or metadata; return it."""
        sets = ["updated_at = %s::timestamptz"]
        params: list[Any] = [stamp]
        for name in ("name", "description", "metadata"):
            if name in changes:
                value = changes[name]
                sets.append(f"{name} = %s")
                params.append(Jsonb(value) if name == "metadata" else value)
        rows = await self._fetch(
            f"UPDATE datasets SET {', '.join(sets)} WHERE dataset_id = %s AND owner = %s "
            f"RETURNING {_COLUMNS}",
            (*params, dataset_id, owner),
        )
        return dataset_from_row(rows[0]) if rows else None

    async def delete(self, owner: str, dataset_id: str) -> bool:
        """Delete the owner's dataset with its examples (a cascade)."""
        rows = await self._fetch(
            "DELETE FROM datasets WHERE dataset_id = %s AND owner = %s RETURNING dataset_id",
            (dataset_id, owner),
        )
        return bool(rows)

    async def search(
        self,
        owner: str,
        *,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[DatasetRecord]:
        """Return the owner's matching datasets, newest first."""
        where, params = _filters(owner, name, metadata)
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM datasets WHERE {where} "
            "ORDER BY created_at DESC, dataset_id DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [dataset_from_row(row) for row in rows]

    async def count(
        self, owner: str, *, name: str | None = None, metadata: dict[str, Any] | None = None
    ) -> int:
        """Return how many of the owner's datasets match."""
        where, params = _filters(owner, name, metadata)
        rows = await self._fetch(f"SELECT count(*) AS n FROM datasets WHERE {where}", params)
        return int(rows[0]["n"])

    async def add_examples(
        self, owner: str, dataset_id: str, examples: Sequence[ExampleRecord], *, limit: int
    ) -> list[ExampleRecord] | None:
        """Append examples after the dataset's last, in one transaction."""
        n = len(examples)
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE datasets SET example_count = example_count + %s, "
                    "next_position = next_position + %s, updated_at = now() "
                    "WHERE dataset_id = %s AND owner = %s AND example_count + %s <= %s "
                    "RETURNING next_position",
                    (n, n, dataset_id, owner, n, limit),
                )
            ).fetchone()
            if row is None:
                found = await (
                    await conn.execute(
                        "SELECT 1 FROM datasets WHERE dataset_id = %s AND owner = %s",
                        (dataset_id, owner),
                    )
                ).fetchone()
                if found is None:
                    return None
                raise LimitReached(f"a dataset holds at most {limit} examples")
            first = int(row["next_position"]) - n
            stored = [replace(e, position=first + i) for i, e in enumerate(examples)]
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    f"INSERT INTO dataset_examples ({_EXAMPLE_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s::timestamptz)",
                    [
                        (
                            e.example_id,
                            dataset_id,
                            e.position,
                            dumps(e.input),
                            None if e.expectations is None else dumps(e.expectations),
                            None if e.source is None else dumps(e.source),
                            e.created_at,
                        )
                        for e in stored
                    ],
                )
            return stored

    async def examples(
        self, owner: str, dataset_id: str, *, limit: int, offset: int = 0
    ) -> list[ExampleRecord]:
        """Return the owner's dataset's examples in order."""
        columns = ", ".join("e." + c for c in _EXAMPLE_COLUMNS.split(", "))
        rows = await self._fetch(
            f"SELECT {columns} FROM dataset_examples e "
            "JOIN datasets d ON d.dataset_id = e.dataset_id "
            "WHERE e.dataset_id = %s AND d.owner = %s ORDER BY e.position LIMIT %s OFFSET %s",
            (dataset_id, owner, limit, offset),
        )
        return [example_from_row(row) for row in rows]

    async def delete_example(self, owner: str, dataset_id: str, example_id: str) -> bool:
        """Delete one example of the owner's dataset."""
        async with self._pool.connection() as conn, conn.transaction():
            deleted = await (
                await conn.execute(
                    "DELETE FROM dataset_examples WHERE example_id = %s AND dataset_id = %s "
                    "AND dataset_id IN (SELECT dataset_id FROM datasets WHERE owner = %s) "
                    "RETURNING example_id",
                    (example_id, dataset_id, owner),
                )
            ).fetchone()
            if deleted is None:
                return False
            await conn.execute(
                "UPDATE datasets SET example_count = example_count - 1 WHERE dataset_id = %s",
                (dataset_id,),
            )
            return True
