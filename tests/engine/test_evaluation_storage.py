"""Datasets, experiments and online evaluation in each backend (SQLite, PostgreSQL).

Each repository answers its owner only, holds its bounds in the transaction that would
pass them, and writes what must happen once once: an experiment pass's changes commit
only while the experiment is active, a claimed experiment is skipped by a second
claimer (PostgreSQL), and a judgement's verdict is recorded with its feedback once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from engine.datasets import DatasetRecord, ExampleRecord
from engine.experiments import (
    Arm,
    ExampleSnapshot,
    ExperimentPair,
    ExperimentRecord,
    ExperimentRun,
)
from engine.feedback import FeedbackRecord
from engine.online_evaluation import EvaluationSetting
from engine.records import now
from engine.repositories import LimitReached
from engine.serde import dumps
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread


def _repositories(opened: Opened) -> tuple[Any, Any, Any]:
    if opened.where.startswith("postgresql://"):
        from engine.postgres.datasets import PostgresDatasetRepository
        from engine.postgres.evaluation import PostgresOnlineEvaluationRepository
        from engine.postgres.experiments import PostgresExperimentRepository

        pool = opened.storage.pool
        return (
            PostgresDatasetRepository(pool),
            PostgresExperimentRepository(pool),
            PostgresOnlineEvaluationRepository(pool),
        )
    from engine.sqlite.datasets import SqliteDatasetRepository
    from engine.sqlite.evaluation import SqliteOnlineEvaluationRepository
    from engine.sqlite.experiments import SqliteExperimentRepository

    db = opened.storage.database
    return (
        SqliteDatasetRepository(db),
        SqliteExperimentRepository(db),
        SqliteOnlineEvaluationRepository(db),
    )


def _dataset(dataset_id: str, owner: str = "alice", name: str = "护肤") -> DatasetRecord:
    stamp = now()
    return DatasetRecord(
        dataset_id=dataset_id,
        owner=owner,
        name=name,
        description=None,
        metadata={"team": "notes"},
        created_at=stamp,
        updated_at=stamp,
    )


def _example(n: int, dataset_id: str = "d1") -> ExampleRecord:
    return ExampleRecord(
        example_id=f"e{n}",
        dataset_id=dataset_id,
        position=-1,
        input={"request": f"写一篇笔记 {n}"},
        expectations={"must_include": ["氨基酸"]} if n % 2 else None,
        created_at=now(),
    )


async def test_datasets_are_their_owners_and_hold_their_bounds(opened: Opened) -> None:
    datasets, _, _ = _repositories(opened)
    await datasets.insert(_dataset("d1"), limit=2)
    await datasets.insert(_dataset("d2", name="Coffee 咖啡"), limit=2)
    with pytest.raises(LimitReached):
        await datasets.insert(_dataset("d3"), limit=2)
    await datasets.insert(_dataset("b1", owner="bob"), limit=2)  # bob's own bound

    assert await datasets.get("bob", "d1") is None
    assert [d.dataset_id for d in await datasets.search("alice", name="coffee")] == ["d2"]
    assert await datasets.count("alice", metadata={"team": "notes"}) == 2
    assert await datasets.count("bob") == 1

    added = await datasets.add_examples("alice", "d1", [_example(0), _example(1)], limit=3)
    assert [e.position for e in added] == [0, 1]
    with pytest.raises(LimitReached):  # 2 + 2 > 3: none added
        await datasets.add_examples("alice", "d1", [_example(2), _example(3)], limit=3)
    assert await datasets.add_examples("bob", "d1", [_example(4)], limit=3) is None
    (third,) = await datasets.add_examples("alice", "d1", [_example(5)], limit=3)
    assert third.position == 2
    stored = await datasets.examples("alice", "d1", limit=10)
    assert [e.example_id for e in stored] == ["e0", "e1", "e5"]
    assert stored[1].expectations == {"must_include": ["氨基酸"]}
    assert stored[0].input == {"request": "写一篇笔记 0"}
    assert await datasets.examples("bob", "d1", limit=10) == []

    assert not await datasets.delete_example("bob", "d1", "e0")
    assert await datasets.delete_example("alice", "d1", "e0")
    updated = await datasets.update("alice", "d1", {"name": "新名字", "metadata": {}}, now())
    assert updated.name == "新名字" and updated.example_count == 2 and updated.metadata == {}
    assert await datasets.update("bob", "d1", {"name": "x"}, now()) is None

    assert not await datasets.delete("bob", "d1")
    assert await datasets.delete("alice", "d1")
    assert await datasets.examples("alice", "d1", limit=10) == []


async def test_concurrent_adds_never_pass_a_datasets_bound(opened: Opened) -> None:
    datasets, _, _ = _repositories(opened)
    await datasets.insert(_dataset("d1"), limit=5)

    async def add(n: int) -> bool:
        try:
            await datasets.add_examples("alice", "d1", [_example(n), _example(n + 100)], limit=5)
        except LimitReached:
            return False
        return True

    done = await asyncio.gather(*(add(n) for n in range(5)))
    assert sorted(done) == [False, False, False, True, True]
    positions = [e.position for e in await datasets.examples("alice", "d1", limit=10)]
    assert positions == [0, 1, 2, 3]


def _experiment(experiment_id: str = "x1", owner: str = "alice") -> ExperimentRecord:
    stamp = now()
    return ExperimentRecord(
        experiment_id=experiment_id,
        owner=owner,
        dataset_id="d1",
        name="v2 vs v3",
        arms=[Arm("v2", "preset", 2), Arm("v3", "preset", 3, {"writer_agent": "gpt-4o"})],
        repetitions=1,
        max_concurrency=2,
        status="pending",
        metadata={},
        created_at=stamp,
        updated_at=stamp,
        example_count=2,
        runs_total=4,
        pairs_total=2,
    )


async def _insert(experiments: Any, experiment: ExperimentRecord, **bounds: int) -> None:
    examples = [ExampleSnapshot(i, f"e{i}", {"request": f"r{i}"}, None) for i in range(2)]
    runs = [ExperimentRun(i, a, 0) for i in range(2) for a in range(2)]
    pairs = [ExperimentPair(i, 0, 0, 1) for i in range(2)]
    first = ("metadata", dumps({"experiment_id": experiment.experiment_id}))
    limits = {"max_active": 5, "max_total": 10, **bounds}
    await experiments.insert(experiment, examples, runs, pairs, first, **limits)


async def test_a_pass_commits_its_changes_together_and_not_after_a_cancel(opened: Opened) -> None:
    _, experiments, _ = _repositories(opened)
    await _insert(experiments, _experiment())
    stored = await experiments.get("alice", "x1")
    assert stored.arms[1].models == {"writer_agent": "gpt-4o"} and stored.arms[0].version == 2
    assert await experiments.get("bob", "x1") is None
    assert [f.event for f in await experiments.events("x1", 0)] == ["metadata"]

    async with experiments.claim() as claimed:
        assert claimed.experiment.experiment_id == "x1"
        tasks, pairs = await claimed.open_tasks()
        assert [t.key for t in tasks] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
        assert len(pairs) == 2
        (example,) = await claimed.examples([1])
        assert example.input == {"request": "r1"}
        first = dataclasses.replace(tasks[0], status="done", run_id="r1", result={"post": {}})
        experiment = claimed.experiment
        experiment.status, experiment.runs_done = "running", 1
        events = [("status", dumps({"status": "running"})), ("run", dumps({"n": 1}))]
        assert await claimed.commit(experiment, [first], [], events)
        (read,) = await claimed.results([(0, 0, 0)])
        assert read.result == {"post": {}}

    assert [f.id for f in await experiments.events("x1", 0)] == [1, 2, 3]
    async with experiments.claim() as claimed:
        tasks, _ = await claimed.open_tasks()
        assert len(tasks) == 3
        # A cancel lands while the pass runs: on PostgreSQL it waits for the pass's commit
        # (the row is locked), on SQLite the pass's commit is refused. Either way the pass
        # writes nothing after the cancel, and the cancel ends every open task.
        cancelling = asyncio.ensure_future(
            experiments.cancel("alice", "x1", now(), [("end", dumps({"status": "cancelled"}))])
        )
        await asyncio.sleep(0.2)
        started = dataclasses.replace(tasks[0], status="running", run_id="r2")
        committed = await claimed.commit(claimed.experiment, [started], [], [("run", "{}")])
    cancelled, running = await cancelling
    assert cancelled.status == "cancelled"
    runs, pairs = await experiments.tasks("x1")
    if committed:  # PostgreSQL: the pass first, then the cancel, which saw its run
        assert running == ["r2"]
    else:
        assert running == []
    assert {r.status for r in runs} == {"done", "cancelled"}
    assert {p.status for p in pairs} == {"cancelled"}
    frames = await experiments.events("x1", 0)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event == "end"
    async with experiments.claim() as claimed:
        assert claimed is None  # nothing active
    assert await experiments.cancel("bob", "x1", now(), []) is None
    assert not await experiments.delete("bob", "x1")
    assert await experiments.delete("alice", "x1")
    assert await experiments.events("x1", 0) == []
    assert await experiments.tasks("x1") == ([], [])


async def test_an_owners_experiments_are_bounded(opened: Opened) -> None:
    _, experiments, _ = _repositories(opened)
    await _insert(experiments, _experiment("x1"), max_active=2)
    await _insert(experiments, _experiment("x2"), max_active=2)
    with pytest.raises(LimitReached, match="at once"):
        await _insert(experiments, _experiment("x3"), max_active=2)
    await _insert(experiments, _experiment("b1", owner="bob"), max_active=2)
    await experiments.cancel("alice", "x1", now(), [("end", "{}")])
    with pytest.raises(LimitReached, match="keeps at most"):
        await _insert(experiments, _experiment("x3"), max_active=2, max_total=2)
    await _insert(experiments, _experiment("x3"), max_active=2, max_total=3)
    assert [e.experiment_id for e in await experiments.search("alice")] == ["x3", "x2", "x1"]
    assert await experiments.count("alice", status="cancelled") == 1
    assert await experiments.count("bob") == 1


async def test_postgres_claims_skip_an_experiment_another_pass_holds(opened: Opened) -> None:
    if not opened.where.startswith("postgresql://"):
        pytest.skip("one process owns a SQLite database: there is no other claimer")
    _, experiments, _ = _repositories(opened)
    await _insert(experiments, _experiment("x1"))
    await _insert(experiments, _experiment("x2"))
    async with experiments.claim() as first, experiments.claim() as second:
        assert {first.experiment.experiment_id, second.experiment.experiment_id} == {
            "x1",
            "x2",
        }
        async with experiments.claim() as third:
            assert third is None


async def test_a_judgement_and_its_feedback_are_recorded_once(opened: Opened) -> None:
    store = opened.storage
    _, _, evaluations = _repositories(opened)
    await store.threads.insert(thread())
    for run_id in ("r1", "r2", "r3"):
        live = dataclasses.replace(run(run_id), assistant_id="atelier")
        if run_id == "r3":
            live.metadata = {"experiment_id": "x1"}
        assert await store.runs.insert(live, exclusive=False)
    setting = EvaluationSetting("alice", "atelier", 1.0, now(), now())
    await evaluations.put_setting(setting)
    await _finish_runs(opened, ["r1", "r2", "r3"])
    assert (await evaluations.get_setting("alice", "atelier")).sample_rate == 1.0
    assert await evaluations.get_setting("bob", "atelier") is None
    assert [s.owner for s in await evaluations.sampling()] == ["alice"]

    unseen = await evaluations.unseen_runs(setting, 10)
    assert sorted(j.run_id for j in unseen) == ["r1", "r2"]  # not the experiment's run
    unseen[1].status = "skipped"
    await evaluations.record(unseen)
    await evaluations.record(unseen)  # a second process, a moment later: no change
    assert await evaluations.unseen_runs(setting, 10) == []
    (pending,) = await evaluations.open(10)
    assert await evaluations.start(pending.run_id, "j1", "jt1")
    assert not await evaluations.start(pending.run_id, "j2", "jt2")
    (judging,) = await evaluations.open(10)
    assert judging.judge_run_id == "j1" and judging.status == "judging"

    def feedback(n: int) -> FeedbackRecord:
        return FeedbackRecord(f"f{n}", judging.run_id, "t1", "alice", "judge", 0.8, "pass", now())

    judging.status, judging.score, judging.passed = "done", 0.8, True
    ends = await asyncio.gather(
        *(evaluations.finish(judging, feedback(n), expected="judging") for n in range(3))
    )
    assert sorted(ends) == [False, False, True]
    entries = await _feedback(opened, judging.run_id)
    assert [(f.key, f.score) for f in entries] == [("judge", 0.8)]
    assert await evaluations.pending("alice", "atelier") == 0

    await _thumb(opened, judging.run_id, 0.0)
    rows = await evaluations.report_rows("alice", "atelier", "2000-01-01", "2999-01-01", 100)
    assert [(r.run_id, r.score, r.passed, r.quality) for r in rows] == [
        (judging.run_id, 0.8, True, 0.0)
    ]
    assert await evaluations.report_rows("bob", "atelier", "2000-01-01", "2999-01-01", 100) == []


async def _finish_runs(opened: Opened, run_ids: list[str]) -> None:
    stamp = now()
    if opened.where.startswith("postgresql://"):
        async with opened.storage.pool.connection() as conn:
            await conn.execute(
                "UPDATE runs SET status = 'success', finished_at = %s::timestamptz "
                "WHERE run_id = ANY(%s)",
                (stamp, run_ids),
            )
        return
    await opened.storage.database.execute(
        [
            ("UPDATE runs SET status = 'success', finished_at = ? WHERE run_id = ?", (stamp, r))
            for r in run_ids
        ]
    )


async def _feedback(opened: Opened, run_id: str) -> list[FeedbackRecord]:
    if opened.where.startswith("postgresql://"):
        from engine.postgres.feedback import PostgresFeedbackRepository

        return await PostgresFeedbackRepository(opened.storage.pool).for_run(run_id)
    from engine.sqlite.feedback import SqliteFeedbackRepository

    return await SqliteFeedbackRepository(opened.storage.database).for_run(run_id)


async def _thumb(opened: Opened, run_id: str, score: float) -> None:
    if opened.where.startswith("postgresql://"):
        from engine.postgres.feedback import PostgresFeedbackRepository

        repository: Any = PostgresFeedbackRepository(opened.storage.pool)
    else:
        from engine.sqlite.feedback import SqliteFeedbackRepository

        repository = SqliteFeedbackRepository(opened.storage.database)
    entry = FeedbackRecord("q1", run_id, "t1", "alice", "quality", score, None, now())
    assert await repository.add(entry, limit=10)
