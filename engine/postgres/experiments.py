"""Experiments in PostgreSQL (`ExperimentRepository`), advanced by any number of processes.

Every process's scheduler claims an active experiment with `SELECT … FOR UPDATE SKIP
LOCKED` (least recently advanced first): the others skip it while the pass runs. The
pass reads the tasks on the claim's connection and writes its changes — tasks, status,
progress frames numbered after `last_event_id` — in the claim's transaction, so they
commit together. A process killed mid-pass commits nothing; its lock goes with its
connection and another process advances the experiment (starting no run twice: runs
are started with idempotency keys). A cancel or delete waits for a pass's commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from engine.experiments import (
    Arm,
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
    ExperimentStatus,
)
from engine.postgres.pool import AsyncPool
from engine.postgres.threads import stamp
from engine.records import Frame
from engine.repositories import LimitReached
from engine.serde import dumps, loads

_COLUMNS = (
    "experiment_id, owner, dataset_id, name, arms, repetitions, max_concurrency, status, "
    "metadata, example_count, runs_total, pairs_total, runs_done, pairs_done, error, "
    "last_event_id, created_at, updated_at, finished_at"
)
_RUN_COLUMNS = "example_index, arm, repetition, status, run_id, thread_id, error"
_PAIR_COLUMNS = "example_index, repetition, arm_a, arm_b, status, run_id, thread_id, winner, error"
_ACTIVE = "status IN ('pending', 'running')"
_UPDATE_RUN = (
    "UPDATE experiment_runs SET status = %s, run_id = %s, thread_id = %s, result = %s, "
    "error = %s WHERE experiment_id = %s AND example_index = %s AND repetition = %s AND arm = %s"
)
_UPDATE_PAIR = (
    "UPDATE experiment_pairs SET status = %s, run_id = %s, thread_id = %s, winner = %s, "
    "result = %s, error = %s WHERE experiment_id = %s AND example_index = %s "
    "AND repetition = %s AND arm_a = %s AND arm_b = %s"
)


def experiment_from_row(row: DictRow) -> ExperimentRecord:
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
        metadata=row["metadata"] or {},
        example_count=int(row["example_count"]),
        runs_total=int(row["runs_total"]),
        pairs_total=int(row["pairs_total"]),
        runs_done=int(row["runs_done"]),
        pairs_done=int(row["pairs_done"]),
        error=row["error"],
        last_event_id=int(row["last_event_id"]),
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
        finished_at=stamp(row["finished_at"]),
    )


def run_from_row(row: DictRow, *, with_result: bool) -> ExperimentRun:
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


def pair_from_row(row: DictRow, *, with_result: bool) -> ExperimentPair:
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


def example_from_row(row: DictRow) -> ExampleSnapshot:
    """Return the example an `experiment_examples` row holds."""
    return ExampleSnapshot(
        example_index=int(row["example_index"]),
        example_id=row["example_id"],
        input=loads(row["example_input"]),
        expectations=loads(row["expectations"]) if row["expectations"] else None,
    )


async def _fetch(conn: AsyncConnection[DictRow], sql: str, params: Any = ()) -> list[DictRow]:
    return await (await conn.execute(sql, params)).fetchall()


async def _append(
    conn: AsyncConnection[DictRow],
    experiment_id: str,
    first_id: int,
    events: Sequence[tuple[str, str]],
) -> None:
    if not events:
        return
    async with conn.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO experiment_events (experiment_id, id, event, data) "
            "VALUES (%s, %s, %s, %s)",
            [(experiment_id, first_id + i, event, data) for i, (event, data) in enumerate(events)],
        )


class PostgresExperimentPass:
    """An experiment locked by this transaction (an `engine.repositories.ExperimentPass`)."""

    def __init__(self, conn: AsyncConnection[DictRow], experiment: ExperimentRecord) -> None:
        """Advance `experiment` (its row locked) on `conn`, inside the claim's transaction."""
        self._conn = conn
        self.experiment = experiment

    async def open_tasks(self) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return the tasks still pending or running."""
        key = (self.experiment.experiment_id,)
        runs = await _fetch(
            self._conn,
            f"SELECT {_RUN_COLUMNS} FROM experiment_runs WHERE experiment_id = %s AND {_ACTIVE} "
            "ORDER BY example_index, repetition, arm",
            key,
        )
        pairs = await _fetch(
            self._conn,
            f"SELECT {_PAIR_COLUMNS} FROM experiment_pairs WHERE experiment_id = %s "
            f"AND {_ACTIVE} ORDER BY example_index, repetition, arm_a, arm_b",
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
            rows = await _fetch(
                self._conn,
                f"SELECT {_RUN_COLUMNS}, result FROM experiment_runs WHERE experiment_id = %s "
                "AND example_index = %s AND arm = %s AND repetition = %s",
                (self.experiment.experiment_id, index, arm, repetition),
            )
            found += [run_from_row(row, with_result=True) for row in rows]
        return found

    async def examples(self, indexes: Collection[int]) -> list[ExampleSnapshot]:
        """Return the examples at these indexes."""
        rows = await _fetch(
            self._conn,
            "SELECT example_index, example_id, example_input, expectations "
            "FROM experiment_examples WHERE experiment_id = %s AND example_index = ANY(%s) "
            "ORDER BY example_index",
            (self.experiment.experiment_id, sorted(set(indexes))),
        )
        return [example_from_row(row) for row in rows]

    async def commit(
        self,
        experiment: ExperimentRecord,
        runs: Sequence[ExperimentRun],
        pairs: Sequence[ExperimentPair],
        events: Sequence[tuple[str, str]],
    ) -> bool:
        """Write the pass's changes in the claim's transaction (committed when it ends)."""
        e = experiment
        claimed = self.experiment.last_event_id
        row = await (
            await self._conn.execute(
                "UPDATE experiments SET status = %s, runs_done = %s, pairs_done = %s, "
                "error = %s, updated_at = %s::timestamptz, finished_at = %s::timestamptz, "
                "advanced_at = now(), last_event_id = %s "
                f"WHERE experiment_id = %s AND {_ACTIVE} RETURNING experiment_id",
                (
                    e.status,
                    e.runs_done,
                    e.pairs_done,
                    e.error,
                    e.updated_at,
                    e.finished_at,
                    claimed + len(events),
                    e.experiment_id,
                ),
            )
        ).fetchone()
        if row is None:
            return False
        async with self._conn.cursor() as cursor:
            if runs:
                await cursor.executemany(
                    _UPDATE_RUN,
                    [
                        (
                            r.status,
                            r.run_id,
                            r.thread_id,
                            None if r.result is None else dumps(r.result),
                            r.error,
                            e.experiment_id,
                            r.example_index,
                            r.repetition,
                            r.arm,
                        )
                        for r in runs
                    ],
                )
            if pairs:
                await cursor.executemany(
                    _UPDATE_PAIR,
                    [
                        (
                            p.status,
                            p.run_id,
                            p.thread_id,
                            p.winner,
                            None if p.result is None else dumps(p.result),
                            p.error,
                            e.experiment_id,
                            p.example_index,
                            p.repetition,
                            p.arm_a,
                            p.arm_b,
                        )
                        for p in pairs
                    ],
                )
        await _append(self._conn, e.experiment_id, claimed + 1, events)
        e.last_event_id = claimed + len(events)
        return True


class PostgresExperimentRepository:
    """Experiments in PostgreSQL (see the module docstring)."""

    def __init__(self, pool: AsyncPool) -> None:
        """Borrow connections from the process's pool."""
        self._pool = pool

    async def _fetch(self, sql: str, params: Any = ()) -> list[DictRow]:
        async with self._pool.connection() as conn:
            return await _fetch(conn, sql, params)

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
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('experiments:' || %s, 0))",
                (e.owner,),
            )
            (row,) = await _fetch(
                conn,
                "SELECT count(*) AS total, count(*) FILTER (WHERE "
                f"{_ACTIVE}) AS active FROM experiments WHERE owner = %s",
                (e.owner,),
            )
            if int(row["active"]) >= max_active:
                raise LimitReached(
                    f"an API key runs at most {max_active} experiments at once; "
                    "wait for one to end, or cancel one"
                )
            if int(row["total"]) >= max_total:
                raise LimitReached(
                    f"an API key keeps at most {max_total} experiments; delete old ones"
                )
            await conn.execute(
                f"INSERT INTO experiments ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s, %s, %s, %s, %s, %s, 1, %s::timestamptz, %s::timestamptz, NULL)",
                (
                    e.experiment_id,
                    e.owner,
                    e.dataset_id,
                    e.name,
                    dumps([arm.to_json() for arm in e.arms]),
                    e.repetitions,
                    e.max_concurrency,
                    e.status,
                    Jsonb(e.metadata),
                    e.example_count,
                    e.runs_total,
                    e.pairs_total,
                    e.runs_done,
                    e.pairs_done,
                    e.error,
                    e.created_at,
                    e.updated_at,
                ),
            )
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO experiment_examples (experiment_id, example_index, example_id, "
                    "example_input, expectations) VALUES (%s, %s, %s, %s, %s)",
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
                await cursor.executemany(
                    "INSERT INTO experiment_runs (experiment_id, example_index, repetition, arm) "
                    "VALUES (%s, %s, %s, %s)",
                    [(e.experiment_id, r.example_index, r.repetition, r.arm) for r in runs],
                )
                await cursor.executemany(
                    "INSERT INTO experiment_pairs (experiment_id, example_index, repetition, "
                    "arm_a, arm_b) VALUES (%s, %s, %s, %s, %s)",
                    [
                        (e.experiment_id, p.example_index, p.repetition, p.arm_a, p.arm_b)
                        for p in pairs
                    ],
                )
            await _append(conn, e.experiment_id, 1, [first])
        e.last_event_id = 1

    async def get(self, owner: str, experiment_id: str) -> ExperimentRecord | None:
        """Return the owner's experiment, or None."""
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM experiments WHERE experiment_id = %s AND owner = %s",
            (experiment_id, owner),
        )
        return experiment_from_row(rows[0]) if rows else None

    @staticmethod
    def _filters(
        owner: str, dataset_id: str | None, status: ExperimentStatus | None
    ) -> tuple[str, list[Any]]:
        where, params = ["owner = %s"], [owner]
        if dataset_id is not None:
            where.append("dataset_id = %s")
            params.append(dataset_id)
        if status is not None:
            where.append("status = %s")
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
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM experiments WHERE {where} "
            "ORDER BY created_at DESC, experiment_id DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [experiment_from_row(row) for row in rows]

    async def count(
        self, owner: str, *, dataset_id: str | None = None, status: ExperimentStatus | None = None
    ) -> int:
        """Return how many of the owner's experiments match."""
        where, params = self._filters(owner, dataset_id, status)
        rows = await self._fetch(f"SELECT count(*) AS n FROM experiments WHERE {where}", params)
        return int(rows[0]["n"])

    async def examples(self, experiment_id: str) -> list[ExampleSnapshot]:
        """Return the experiment's examples, in order."""
        rows = await self._fetch(
            "SELECT example_index, example_id, example_input, expectations "
            "FROM experiment_examples WHERE experiment_id = %s ORDER BY example_index",
            (experiment_id,),
        )
        return [example_from_row(row) for row in rows]

    async def tasks(self, experiment_id: str) -> tuple[list[ExperimentRun], list[ExperimentPair]]:
        """Return every task of the experiment with its result."""
        async with self._pool.connection() as conn:
            runs = await _fetch(
                conn,
                f"SELECT {_RUN_COLUMNS}, result FROM experiment_runs WHERE experiment_id = %s "
                "ORDER BY example_index, repetition, arm",
                (experiment_id,),
            )
            pairs = await _fetch(
                conn,
                f"SELECT {_PAIR_COLUMNS}, result FROM experiment_pairs WHERE experiment_id = %s "
                "ORDER BY example_index, repetition, arm_a, arm_b",
                (experiment_id,),
            )
        return (
            [run_from_row(r, with_result=True) for r in runs],
            [pair_from_row(p, with_result=True) for p in pairs],
        )

    async def events(self, experiment_id: str, after: int, limit: int = 500) -> list[Frame]:
        """Return progress frames after `after`, in order."""
        rows = await self._fetch(
            "SELECT id, event, data FROM experiment_events WHERE experiment_id = %s AND id > %s "
            "ORDER BY id LIMIT %s",
            (experiment_id, after, limit),
        )
        return [Frame(int(row["id"]), row["event"], row["data"]) for row in rows]

    async def cancel(
        self, owner: str, experiment_id: str, stamp: str, events: Sequence[tuple[str, str]]
    ) -> tuple[ExperimentRecord, list[str]] | None:
        """End an active experiment as cancelled; return it and its open tasks' runs."""
        started: list[str] = []
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    "UPDATE experiments SET status = 'cancelled', updated_at = %s::timestamptz, "
                    "finished_at = %s::timestamptz, last_event_id = last_event_id + %s "
                    f"WHERE experiment_id = %s AND owner = %s AND {_ACTIVE} "
                    "RETURNING last_event_id",
                    (stamp, stamp, len(events), experiment_id, owner),
                )
            ).fetchone()
            if row is not None:
                for table in ("experiment_runs", "experiment_pairs"):
                    found = await _fetch(
                        conn,
                        f"UPDATE {table} SET status = 'cancelled' WHERE experiment_id = %s "
                        f"AND {_ACTIVE} RETURNING run_id",
                        (experiment_id,),
                    )
                    started += [r["run_id"] for r in found if r["run_id"] is not None]
                await _append(
                    conn, experiment_id, int(row["last_event_id"]) - len(events) + 1, events
                )
        experiment = await self.get(owner, experiment_id)
        return None if experiment is None else (experiment, started)

    async def delete(self, owner: str, experiment_id: str) -> bool:
        """Delete the owner's experiment with its tasks and frames (cascades)."""
        rows = await self._fetch(
            "DELETE FROM experiments WHERE experiment_id = %s AND owner = %s "
            "RETURNING experiment_id",
            (experiment_id, owner),
        )
        return bool(rows)

    @contextlib.asynccontextmanager
    async def claim(
        self, exclude: Collection[str] = (), only: str | None = None
    ) -> AsyncIterator[PostgresExperimentPass | None]:
        """Lock the active experiment advanced least recently that no other process holds."""
        where = [_ACTIVE, "NOT (experiment_id = ANY(%s))"]
        params: list[Any] = [list(exclude)]
        if only is not None:
            where.append("experiment_id = %s")
            params.append(only)
        async with self._pool.connection() as conn, conn.transaction():
            row = await (
                await conn.execute(
                    f"SELECT {_COLUMNS} FROM experiments WHERE {' AND '.join(where)} "
                    "ORDER BY advanced_at NULLS FIRST LIMIT 1 FOR UPDATE SKIP LOCKED",
                    params,
                )
            ).fetchone()
            yield PostgresExperimentPass(conn, experiment_from_row(row)) if row else None
