"""Feedback storage in each backend (engine/feedback.py): the limit holds under
concurrency, entries read back oldest first, and they go with their run."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.feedback import FeedbackRecord
from engine.records import now
from tests.engine.conftest import Opened
from tests.engine.factories import run, thread


def _repository(opened: Opened) -> Any:
    if opened.where.startswith("postgresql://"):
        from engine.postgres.feedback import PostgresFeedbackRepository

        return PostgresFeedbackRepository(opened.storage.pool)
    from engine.sqlite.feedback import SqliteFeedbackRepository

    return SqliteFeedbackRepository(opened.storage.database)


def _entry(n: int, run_id: str = "r1") -> FeedbackRecord:
    return FeedbackRecord(
        feedback_id=f"f{n:03d}",
        run_id=run_id,
        thread_id="t1",
        owner="alice",
        key="quality",
        score=float(n % 2),
        comment=f"意见 {n}" if n % 2 else None,
        created_at=now(),
    )


async def test_entries_read_back_oldest_first_and_the_limit_holds_concurrently(
    opened: Opened,
) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    assert await store.runs.insert(run("r1"), exclusive=True)
    feedback = _repository(opened)
    for n in range(3):
        assert await feedback.add(_entry(n), limit=5)
    # Five more at once, two places left: exactly two are stored.
    stored = await asyncio.gather(*(feedback.add(_entry(n), limit=5) for n in range(3, 8)))
    assert sorted(stored) == [False, False, False, True, True]
    entries = await feedback.for_run("r1")
    assert len(entries) == 5
    assert [e.feedback_id for e in entries[:3]] == ["f000", "f001", "f002"]
    assert entries[1].comment == "意见 1" and entries[0].comment is None
    assert entries[1].score == 1.0 and entries[0].owner == "alice"
    assert await feedback.for_run("r2") == []


async def test_a_runs_feedback_goes_with_the_run_and_with_its_thread(opened: Opened) -> None:
    store = opened.storage
    await store.threads.insert(thread())
    assert await store.runs.insert(run("r1"), exclusive=True)
    feedback = _repository(opened)
    assert await feedback.add(_entry(1), limit=5)
    await store.runs.delete("r1")
    assert await feedback.for_run("r1") == []

    assert await store.runs.insert(run("r2"), exclusive=True)
    assert await feedback.add(_entry(2, "r2"), limit=5)
    await store.threads.delete("t1")
    assert await feedback.for_run("r2") == []
