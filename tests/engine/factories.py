"""Thread and run records for the storage tests."""

from __future__ import annotations

from engine.records import RunRecord, ThreadRecord, now
from engine.spec import RunOptions


def thread(thread_id: str = "t1", owner: str = "alice") -> ThreadRecord:
    """Return a new thread record."""
    stamp = now()
    return ThreadRecord(thread_id=thread_id, owner=owner, created_at=stamp, updated_at=stamp)


def run(run_id: str, thread_id: str = "t1", owner: str = "alice") -> RunRecord:
    """Return a new pending run record."""
    stamp = now()
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        owner=owner,
        assistant_id="studio",
        status="pending",
        created_at=stamp,
        updated_at=stamp,
        options=RunOptions(input={"request": "hi"}),
        multitask_strategy="reject",
    )
