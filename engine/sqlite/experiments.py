"""Experiments in the run engine's SQLite database (`ExperimentRepository`).

One process owns the database, so a claim needs no lock: it reads the experiment, and
its pass commits its changes in one write transaction, only while the experiment is
still active and no frame was added since the claim (a cancel adds its `end`), so a
cancel or delete in between wins and the pass writes nothing.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

import aiosqlite

from engine.experiments import (
    Arm,
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
    ExperimentStatus,
)
from engine.records import Frame
from engine.repositories import LimitReached
from engine.serde import dumps, loads
from engine.sqlite.database import SqliteDatabase

_COLUMNS = (
    "experiment_id, owner, dataset_id, name, arms, repetitions, max_concurrency, status, "
    "metadata, example_count, runs_total, pairs_total, runs_done, pairs_done, error, "
    "last_event_id, created_at, updated_at, finished_at"
)
_RUN_COLUMNS = "example_index, arm, repetition, status, run_id, thread_id, error"
_PAIR_COLUMNS = "example_index, repetition, arm_a, arm_b, status, run_id, thread_id, winner, error"
_ACTIVE = "status IN ('pending', 'running')"


def experiment_from_row(row: sqlite3.Row) -> ExperimentRecord:
    """Return the experiment an `experiments` row holds."""
    return ExperimentRecord(
        experiment_id=row["experiment_id"],
        owner=row["owner"],
        dataset_id=row["dataset_id"],
        name=row["name"],
        arms=[Arm.from_json(arm) for arm in loads(row["arms"])],
        repetitions=int(row["repetitions"]),
        max_concurrency=int(row["max_concurrency"]),
        status=row["status"],
        metadata=loads(row["metadata"]) or {},
        example_count=int(row["example_count"]),
        runs_total=int(row["runs_total"]),
        pairs_total=int(row["pairs_total"]),
        runs_done=int(row["runs_done"]),
        pairs_done=int(row["pairs_done"]),
        error=row["error"],
        last_event_id=int(row["last_event_id"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
    )


def run_from_row(row: sqlite3.Row, *, with_result: bool) -> ExperimentRun:
    """Return the task an `experiment_runs` row holds."""
    return ExperimentRun(
        example_index=int(row["example_index"]),
        arm=int(row["arm"]),
        repetition=int(row["repetition"]),
        status=row["status"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        error=row["error"],
        result=loads(row["result"]) if with_result and row["result"] else None,
    )


def pair_from_row(row: sqlite3.Row, *, with_result: bool) -> ExperimentPair:
    """Return the task an `experiment_pairs` row holds."""
    return ExperimentPair(
        example_index=int(row["example_index"]),
        repetition=int(row["repetition"]),
        arm_a=int(row["arm_a"]),
        arm_b=int(row["arm_b"]),
        status=row["status"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        winner=row["winner"],
        error=row["error"],
        result=loads(row["result"]) if with_result and row["result"] else None,
    )


def example_from_row(row: sqlite3.Row) -> ExampleSnapshot:
    """Return the example an `experiment_examples` row holds."""
    return ExampleSnapshot(
        example_index=int(row["example_index"]),
        example_id=row["example_id"],
        input=loads(row["example_input"]),
        expectations=loads(row["expectations"]) if row["expectations"] else None,
    )


def _run_params(experiment_id: str, run: ExperimentRun) -> tuple[Any, ...]:
    return (
        run.status,
        run.run_id,
        run.thread_id,
        None if run.result is None else dumps(run.result),
        run.error,
        experiment_id,
        run.example_index,
        run.repetition,
        run.arm,
    )


def _pair_params(experiment_id: str, pair: ExperimentPair) -> tuple[Any, ...]:
    return (
        pair.status,
        pair.run_id,
        pair.thread_id,
        pair.winner,
        None if pair.result is None else dumps(pair.result),
        pair.error,
        experiment_id,
        pair.example_index,
        pair.repetition,
        pair.arm_a,
        pair.arm_b,
    )


_UPDATE_RUN = (
    "UPDATE experiment_runs SET status = ?, run_id = ?, thread_id = ?, result = ?, error = ? "
    "WHERE experiment_id = ? AND example_index = ? AND repetition = ? AND arm = ?"
)
_UPDATE_PAIR = (
    "UPDATE experiment_pairs SET status = ?, run_id = ?, thread_id = ?, winner = ?, "
    "result = ?, error = ? WHERE experiment_id = ? AND example_index = ? AND repetition = ? "
    "AND arm_a = ? AND arm_b = ?"
)


async def _append(
    db: aiosqlite.Connection, experiment_id: str, first_id: int, events: Sequence[tuple[str, str]]
) -> None:
    await db.executemany(
        "INSERT INTO experiment_events (experiment_id, id, event, data) VALUES (?, ?, ?, ?)",
        [(experiment_id, first_id + i, event, data) for i, (event, data) in enumerate(events)],
    )


class SqliteExperimentPass:
    """A claimed experiment's pass (an `engine.repositories.ExperimentPass`)."""

    def __init__(self, db: SqliteDatabase, experiment: ExperimentRecord) -> None:
        """Advance `experiment` (as read) in `db`."""
        self._db = db
        self.experiment = experiment

    async def open_tasks(self) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return the tasks still pending or running."""
        key = (self.experiment.experiment_id,)
        runs = await self._db.read(
            f"SELECT {_RUN_COLUMNS} FROM experiment_runs WHERE experiment_id = ? AND {_ACTIVE} "
            "ORDER BY example_index, repetition, arm",
            key,
        )
        pairs = await self._db.read(
            f"SELECT {_PAIR_COLUMNS} FROM experiment_pairs WHERE experiment_id = ? AND {_ACTIVE} "
            "ORDER BY example_index, repetition, arm_a, arm_b",
            key,
        )
        return (
            [run_from_row(r, with_result=False) for r in runs],
            [pair_from_row(p, with_result=False) for p in pairs],
        )

    async def results(self, keys: Collection[tuple[int, int, int]]) -> list[ExperimentRun]:
        """Return the runs named (example, arm, repetition), with their results."""
        found = []
        for index, arm, repetition in keys:
            rows = await self._db.read(
                f"SELECT {_RUN_COLUMNS}, result FROM experiment_runs WHERE experiment_id = ? "
                "AND example_index = ? AND arm = ? AND repetition = ?",
                (self.experiment.experiment_id, index, arm, repetition),
            )
            found += [run_from_row(row, with_result=True) for row in rows]
        return found

    async def examples(self, indexes: Collection[int]) -> list[ExampleSnapshot]:
        """Return the examples at these indexes."""
        found = []
        for index in sorted(set(indexes)):
            rows = await self._db.read(
                "SELECT example_index, example_id, example_input, expectations "
                "FROM experiment_examples WHERE experiment_id = ? AND example_index = ?",
                (self.experiment.experiment_id, index),
            )
            found += [example_from_row(row) for row in rows]
        return found

    async def commit(
        self,
        experiment: ExperimentRecord,
        runs: Sequence[ExperimentRun],
        pairs: Sequence[ExperimentPair],
        events: Sequence[tuple[str, str]],
    ) -> bool:
        """Write the pass's changes, if nothing cancelled or deleted the experiment meanwhile."""
        e = experiment
        claimed = self.experiment.last_event_id
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE experiments SET status = ?, runs_done = ?, pairs_done = ?, error = ?, "
                "updated_at = ?, finished_at = ?, advanced_at = ?, last_event_id = ? "
                f"WHERE experiment_id = ? AND {_ACTIVE} AND last_event_id = ?",
                (
                    e.status,
                    e.runs_done,
                    e.pairs_done,
                    e.error,
                    e.updated_at,
                    e.finished_at,
                    e.updated_at,
                    claimed + len(events),
                    e.experiment_id,
                    claimed,
                ),
            )
            if cursor.rowcount != 1:
                return False
            await db.executemany(_UPDATE_RUN, [_run_params(e.experiment_id, r) for r in runs])
            await db.executemany(_UPDATE_PAIR, [_pair_params(e.experiment_id, p) for p in pairs])
            await _append(db, e.experiment_id, claimed + 1, events)
        e.last_event_id = claimed + len(events)
        return True


class SqliteExperimentRepository:
    """Experiments in SQLite (see `engine.repositories.ExperimentRepository`)."""

    def __init__(self, db: SqliteDatabase) -> None:
        """Use the engine's database."""
        self._db = db

    async def insert(
        self,
        experiment: ExperimentRecord,
        examples: Sequence[ExampleSnapshot],
        runs: Sequence[ExperimentRun],
        pairs: Sequence[ExperimentPair],
        first: tuple[str, str],
        *,
        max_active: int,
        max_total: int,
    ) -> None:
        """Store a new experiment with its tasks and its first frame, within the owner's bounds."""
        e = experiment
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "SELECT count(*) AS total, "
                f"coalesce(sum(CASE WHEN {_ACTIVE} THEN 1 ELSE 0 END), 0) AS active "
                "FROM experiments WHERE owner = ?",
                (e.owner,),
            )
            row = await cursor.fetchone()
            await cursor.close()
            assert row is not None
            if int(row["active"]) >= max_active:
                raise LimitReached(
                    f"an API key runs at most {max_active} experiments at once; "
                    "wait for one to end, or cancel one"
                )
            if int(row["total"]) >= max_total:
                raise LimitReached(
                    f"an API key keeps at most {max_total} experiments; delete old ones"
                )
            await db.execute(
                f"INSERT INTO experiments ({_COLUMNS}, advanced_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    e.experiment_id,
                    e.owner,
                    e.dataset_id,
                    e.name,
                    dumps([arm.to_json() for arm in e.arms]),
                    e.repetitions,
                    e.max_concurrency,
                    e.status,
                    dumps(e.metadata),
                    e.example_count,
                    e.runs_total,
                    e.pairs_total,
                    e.runs_done,
                    e.pairs_done,
                    e.error,
                    1,
                    e.created_at,
                    e.updated_at,
                    e.finished_at,
                ),
            )
            await db.executemany(
                "INSERT INTO experiment_examples (experiment_id, example_index, example_id, "
                "example_input, expectations) VALUES (?, ?, ?, ?, ?)",
                [
                    (
                        e.experiment_id,
                        ex.example_index,
                        ex.example_id,
                        dumps(ex.input),
                        None if ex.expectations is None else dumps(ex.expectations),
                    )
                    for ex in examples
                ],
            )
            await db.executemany(
                "INSERT INTO experiment_runs (experiment_id, example_index, repetition, arm) "
                "VALUES (?, ?, ?, ?)",
                [(e.experiment_id, r.example_index, r.repetition, r.arm) for r in runs],
            )
            await db.executemany(
                "INSERT INTO experiment_pairs (experiment_id, example_index, repetition, arm_a, "
                "arm_b) VALUES (?, ?, ?, ?, ?)",
                [(e.experiment_id, p.example_index, p.repetition, p.arm_a, p.arm_b) for p in pairs],
            )
            await _append(db, e.experiment_id, 1, [first])
        e.last_event_id = 1

    async def get(self, owner: str, experiment_id: str) -> ExperimentRecord | None:
        """Return the owner's experiment, or None."""
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM experiments WHERE experiment_id = ? AND owner = ?",
            (experiment_id, owner),
        )
        return experiment_from_row(rows[0]) if rows else None

    @staticmethod
    def _filters(
        owner: str, dataset_id: str | None, status: ExperimentStatus | None
    ) -> tuple[str, list[Any]]:
        where, params = ["owner = ?"], [owner]
        if dataset_id is not None:
            where.append("dataset_id = ?")
            params.append(dataset_id)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        return " AND ".join(where), params

    async def search(
        self,
        owner: str,
        *,
        dataset_id: str | None = None,
        status: ExperimentStatus | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[ExperimentRecord]:
        """Return the owner's experiments, newest first."""
        where, params = self._filters(owner, dataset_id, status)
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM experiments WHERE {where} "
            "ORDER BY created_at DESC, experiment_id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [experiment_from_row(row) for row in rows]

    async def count(
        self, owner: str, *, dataset_id: str | None = None, status: ExperimentStatus | None = None
    ) -> int:
        """Return how many of the owner's experiments match."""
        where, params = self._filters(owner, dataset_id, status)
        rows = await self._db.read(f"SELECT count(*) AS n FROM experiments WHERE {where}", params)
        return int(rows[0]["n"])

    async def examples(self, experiment_id: str) -> list[ExampleSnapshot]:
        """Return the experiment's examples, in order."""
        rows = await self._db.read(
            "SELECT example_index, example_id, example_input, expectations "
            "FROM experiment_examples WHERE experiment_id = ? ORDER BY example_index",
            (experiment_id,),
        )
        return [example_from_row(row) for row in rows]

    async def tasks(self, experiment_id: str) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return every task of the experiment with its result."""
        runs = await self._db.read(
            f"SELECT {_RUN_COLUMNS}, result FROM experiment_runs WHERE experiment_id = ? "
            "ORDER BY example_index, repetition, arm",
            (experiment_id,),
        )
        pairs = await self._db.read(
            f"SELECT {_PAIR_COLUMNS}, result FROM experiment_pairs WHERE experiment_id = ? "
            "ORDER BY example_index, repetition, arm_a, arm_b",
            (experiment_id,),
        )
        return (
            [run_from_row(r, with_result=True) for r in runs],
            [pair_from_row(p, with_result=True) for p in pairs],
        )

    async def events(self, experiment_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return progress frames after `after`, in order."""
        rows = await self._db.read(
            "SELECT id, event, data FROM experiment_events WHERE experiment_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (experiment_id, after, limit),
        )
        return [Frame(int(row["id"]), row["event"], row["data"]) for row in rows]

    async def cancel(
        self, owner: str, experiment_id: str, stamp: str, events: Sequence[tuple[str, str]]
    ) -> tuple[ExperimentRecord, list[str]] | None:
        """End an active experiment as cancelled; return it and its open tasks' runs."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "UPDATE experiments SET status = 'cancelled', updated_at = ?, finished_at = ?, "
                f"last_event_id = last_event_id + ? WHERE experiment_id = ? AND owner = ? "
                f"AND {_ACTIVE} RETURNING last_event_id",
                (stamp, stamp, len(events), experiment_id, owner),
            )
            row = await cursor.fetchone()
            await cursor.close()
            started: list[str] = []
            if row is not None:
                for table in ("experiment_runs", "experiment_pairs"):
                    found = await db.execute_fetchall(
                        f"SELECT run_id FROM {table} WHERE experiment_id = ? AND {_ACTIVE} "
                        "AND run_id IS NOT NULL",
                        (experiment_id,),
                    )
                    started += [r[0] for r in found]
                    await db.execute(
                        f"UPDATE {table} SET status = 'cancelled' "
                        f"WHERE experiment_id = ? AND {_ACTIVE}",
                        (experiment_id,),
                    )
                await _append(db, experiment_id, int(row[0]) - len(events) + 1, events)
        experiment = await self.get(owner, experiment_id)
        return None if experiment is None else (experiment, started)

    async def delete(self, owner: str, experiment_id: str) -> bool:
        """Delete the owner's experiment with its tasks and frames (a trigger)."""
        async with self._db.transaction() as db:
            cursor = await db.execute(
                "DELETE FROM experiments WHERE experiment_id = ? AND owner = ?",
                (experiment_id, owner),
            )
            return cursor.rowcount == 1

    @contextlib.asynccontextmanager
    async def claim(
        self, exclude: Collection[str] = (), only: str | None = None
    ) -> AsyncIterator[SqliteExperimentPass | None]:
        """Yield the active experiment advanced least recently (none: None)."""
        where, params = [_ACTIVE], []
        if only is not None:
            where.append("experiment_id = ?")
            params.append(only)
        if exclude:
            where.append(f"experiment_id NOT IN ({', '.join('?' for _ in exclude)})")
            params += list(exclude)
        rows = await self._db.read(
            f"SELECT {_COLUMNS} FROM experiments WHERE {' AND '.join(where)} "
            "ORDER BY advanced_at IS NOT NULL, advanced_at LIMIT 1",
            params,
        )
        yield SqliteExperimentPass(self._db, experiment_from_row(rows[0])) if rows else None
