"""What the run engine stores and streams: threads, runs, frames and their names.

The names of run statuses, thread statuses, multitask strategies and cancel
actions are the official SDK's (`langgraph_sdk.schema`: `RunStatus`,
`ThreadStatus`, `MultitaskStrategy`, `CancelAction`); each is declared here once,
with the tuple of its values derived from it (tests/engine/test_records.py
checks they agree with the SDK's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

#: Status of a run (the LangGraph Platform set).
RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
#: Status of a thread.
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
#: What a new run does when its thread has a pending or running run.
MultitaskStrategy = Literal["reject", "interrupt", "rollback", "enqueue"]
#: What a run on a missing thread does: create it, or be refused.
IfNotExists = Literal["create", "reject"]
#: How a cancel ends a run: keep its checkpoints (interrupt) or delete them (rollback).
CancelAction = Literal["interrupt", "rollback"]

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
THREAD_STATUSES: tuple[ThreadStatus, ...] = get_args(ThreadStatus)
MULTITASK_STRATEGIES: tuple[MultitaskStrategy, ...] = get_args(MultitaskStrategy)
CANCEL_ACTIONS: tuple[CancelAction, ...] = get_args(CancelAction)
#: Statuses of a run that still owns its thread.
ACTIVE_STATUSES: tuple[RunStatus, ...] = ("pending", "running")
#: Frames a pruned event log keeps, so a late rejoin still ends the way the run did.
KEPT_AFTER_PRUNING = ("error", "end")


def now() -> str:
    """Return the current UTC time as an ISO 8601 string (sortable as text)."""
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame of a run's stream: `id:`, `event:` and JSON `data:`.

    Ids are the run's own sequence, 1, 2, 3… with no gap; the executor that owns
    the run numbers its frames and the event log keeps `(run_id, id)` unique.
    """

    id: int
    event: str  # e.g. "metadata", "custom", "updates|executor:<task id>", "end"
    data: str  # compact JSON text, one line

    @property
    def mode(self) -> str:
        """The stream mode the frame belongs to (the event name without its namespace)."""
        return self.event.split("|", 1)[0]

    def encode(self) -> bytes:
        """Return the frame as SSE bytes."""
        return f"id: {self.id}\nevent: {self.event}\ndata: {self.data}\n\n".encode()


@dataclass(slots=True)
class ThreadRecord:
    """A thread: a checkpointed conversation owned by one API key."""

    thread_id: str
    owner: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    status: ThreadStatus = "idle"
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the thread in the LangGraph Platform shape."""
        return {
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
            "status": self.status,
            "values": self.values,
            "interrupts": self.interrupts,
        }


@dataclass(slots=True)
class RunRecord:
    """A run: one execution of an assistant on a thread."""

    run_id: str
    thread_id: str
    owner: str
    assistant_id: str
    status: RunStatus
    created_at: str
    updated_at: str
    kwargs: dict[str, Any]
    multitask_strategy: MultitaskStrategy
    metadata: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    finished_at: str | None = None
    cancel_reason: str | None = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None

    @property
    def active(self) -> bool:
        """Whether the run is pending or running."""
        return self.status in ACTIVE_STATUSES

    def to_json(self) -> dict[str, Any]:
        """Return the run in the LangGraph Platform shape."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "status": self.status,
            "metadata": self.metadata,
            "kwargs": self.kwargs,
            "multitask_strategy": self.multitask_strategy,
            "attempt": self.attempt,
            "cancel_reason": self.cancel_reason,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class RunStatusChange:
    """A run's new status, written in the same transaction as the frames before it.

    A terminal status also stamps the run finished; `attempt`, `cancel_reason` and
    `error` replace the stored ones only when given.
    """

    run_id: str
    status: RunStatus
    attempt: int | None = None
    cancel_reason: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ThreadStateChange:
    """A thread's new status, and its values and pending interrupts when given."""

    thread_id: str
    status: ThreadStatus
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] | None = None


RecordChange = RunStatusChange | ThreadStateChange
