"""Datasets and their examples in the run engine's SQLite database (`DatasetRepository`).

A dataset's count and the owner's number of datasets are checked in the write
transaction that adds to them, so a bound holds whatever the number of requests.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from engine.datasets import DatasetRecord, ExampleRecord
from engine.repositories import LimitReached
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase

_COLUMNS = "dataset_id, owner, name, description, metadata, example_count, created_at, updated_at"
_EXAMPLE_COLUMNS = (
    "example_id, dataset_id, position, example_input, expectations, source, created_at"
)


def dataset_from_row(row: sqlite3.Row) -> DatasetRecord:
    """Return the dataset a `datasets` row holds."""
    return DatasetRecord(
        dataset_id=row["dataset_id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        metadata=loads(row["metadata"]) or {},
        example_count=int(row["example_count"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def example_from_row(row: sqlite3.Row) -> ExampleRecord:
    """Return the example a `dataset_examples` row holds."""
    return ExampleRecord(
        example_id=row["example_id"],
        dataset_id=row["dataset_id"],
        position=int(row["position"]),
        input=loads(row["example_input"]),
        expectations=loads(row["expectations"]) if row["expectations"] else None,
        source=loads(row["source"]) if row["source"] else None,
        created_at=row["created_at"],
    )


def _filters(
    owner: str, name: str | None, metadata: dict[str, Any] | None
) -> tuple[str, list[Any]]:
    where = ["owner = ?"]
    params: list[Any] = [owner]
    if name:
        where.append("instr(lower(name), lower(?)) > 0")
        params.append(name)
    for key, value in (metadata or {}).items():
        where.append("json_extract(metadata, ?) IS json_extract(?, '$')")
        params += [f'$."{key}"', dumps(value)]
    return " AND ".join(where), params


class SqliteDatasetRepository:
    """Datasets in SQLite (see `engine.repositories.DatasetRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(self, dataset: DatasetRecord, *, limit: int) -> None:
        """Store a new dataset unless the owner has `limit` already."""
        d = dataset
        async with self._db.transaction() as db:
            cursor = await db.execute(
                f"INSERT INTO datasets ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, 0, ?, ? "
                "WHERE (SELECT count(*) FROM datasets WHERE owner = ?) < ?",
                (
                    d.dataset_id,
                    d.owner,
                    d.name,
                    d.description,
                    dumps(d.metadata),
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
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM datasets WHERE dataset_id = ? AND owner = ?",
            (dataset_id, owner),
        )
        return dataset_from_row(rows[0]) if rows else None

    async def update(
        self, owner: str, dataset_id: str, changes: dict[str, Any], stamp: str
    ) -> DatasetRecord | None:
        """Change its name, description or metadata; return it."""
        sets = ["updated_at = ?"]
        params: list[Any] = [stamp]
        for name in ("name", "description", "metadata"):
            if name in changes:
                value = changes[name]
                sets.append(f"{name} = ?")
                params.append(dumps(value) if name == "metadata" else value)
        async with self._db.transaction() as db:
            await db.execute(
                f"UPDATE datasets SET {', '.join(sets)} WHERE dataset_id = ? AND owner = ?",
                (*params, dataset_id, owner),
            )
        return await self.get(owner, dataset_id)

    async def delete(self, owner: str, dataset_id: str) -> bool:
        """Delete the owner's dataset with its examples (a trigger)."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM datasets WHERE dataset_id = ? AND owner = ?", (dataset_id, owner)
            )
            return cursor.rowcount == 1

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
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM datasets WHERE {where} "
            "ORDER BY created_at DESC, dataset_id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [dataset_from_row(row) for row in rows]

    async def count(
        self, owner: str, *, name: str | None = None, metadata: dict[str, Any] | None = None
    ) -> int:
        """Return how many of the owner's datasets match."""
        where, params = _filters(owner, name, metadata)
        rows = await self._db.read(f"SELECT count(*) AS n FROM datasets WHERE {where}", params)
        return int(rows[0]["n"])

    async def add_examples(
        self, owner: str, dataset_id: str, examples: Sequence[ExampleRecord], *, limit: int
    ) -> list[ExampleRecord] | None:
        """Append examples after the dataset's last, in one transaction."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE datasets SET example_count = example_count + ?, "
                "next_position = next_position + ?, updated_at = ? "
                "WHERE dataset_id = ? AND owner = ? AND example_count + ? <= ? "
                "RETURNING next_position",
                (
                    len(examples),
                    len(examples),
                    examples[0].created_at if examples else "",
                    dataset_id,
                    owner,
                    len(examples),
                    limit,
                ),
            )
            row = await cursor.fetchone()
            await cursor.close()
            if row is None:
                exists = await db.execute(
                    "SELECT 1 FROM datasets WHERE dataset_id = ? AND owner = ?", (dataset_id, owner)
                )
                found = await exists.fetchone()
                await exists.close()
                if found is None:
                    return None
                raise LimitReached(f"a dataset holds at most {limit} examples")
            first = int(row[0]) - len(examples)
            stored = [replace(e, position=first + i) for i, e in enumerate(examples)]
            await db.executemany(
                f"INSERT INTO dataset_examples ({_EXAMPLE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
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
        rows = await self._db.read(
            f"SELECT {', '.join('e.' + c for c in _EXAMPLE_COLUMNS.split(', '))} "
            "FROM dataset_examples e JOIN datasets d ON d.dataset_id = e.dataset_id "
            "WHERE e.dataset_id = ? AND d.owner = ? ORDER BY e.position LIMIT ? OFFSET ?",
            (dataset_id, owner, limit, offset),
        )
        return [example_from_row(row) for row in rows]

    async def delete_example(self, owner: str, dataset_id: str, example_id: str) -> bool:
        """Delete one example of the owner's dataset."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM dataset_examples WHERE example_id = ? AND dataset_id = ? "
                "AND dataset_id IN (SELECT dataset_id FROM datasets WHERE owner = ?)",
                (example_id, dataset_id, owner),
            )
            if cursor.rowcount != 1:
                return False
            await db.execute(
                "UPDATE datasets SET example_count = example_count - 1 WHERE dataset_id = ?",
                (dataset_id,),
            )
            return True
