"""What the run engine stores and streams: threads, runs, frames and their names.

The names of run statuses, thread statuses, multitask strategies and cancel
actions are the official SDK's (`langgraph_sdk.schema`: `RunStatus`,
`ThreadStatus`, `MultitaskStrategy`, `CancelAction`); each is declared once (the
run request's in `engine.spec`), with the tuple of its values derived from it
(tests/engine/test_records.py checks they agree with the SDK's). A run keeps its
options as a typed value (`engine.spec.RunOptions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from engine.serde import loads
from engine.spec import MultitaskStrategy, RunOptions
from engine.usage import RunUsage

#: Status of a run (the LangGraph Platform set).
RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
#: Status of a thread.
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
#: How a cancel ends a run: keep its checkpoints (interrupt) or delete them (rollback).
CancelAction = Literal["interrupt", "rollback"]
#: What becomes of a thread whose TTL ran out, or that is pruned (the Platform's names):
#: deleted with its runs and checkpoints, or its checkpoints but the latest dropped.
TtlStrategy = Literal["delete", "keep_latest"]

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
THREAD_STATUSES: tuple[ThreadStatus, ...] = get_args(ThreadStatus)
MULTITASK_STRATEGIES: tuple[MultitaskStrategy, ...] = get_args(MultitaskStrategy)
CANCEL_ACTIONS: tuple[CancelAction, ...] = get_args(CancelAction)
TTL_STRATEGIES: tuple[TtlStrategy, ...] = get_args(TtlStrategy)
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


@dataclass(frozen=True, slots=True)
class ThreadTTL:
    """A thread's time to live: what the retention sweep does with it, and when.

    `expires_at` is `minutes` after the TTL was set, moved on whenever a run starts or
    ends on the thread (`engine.retention`); None on a TTL not stored yet.
    """

    strategy: TtlStrategy
    minutes: float
    #: ISO 8601 UTC: when the sweep may act on the thread.
    expires_at: str | None = None

    def starting(self, moment: datetime | None = None) -> ThreadTTL:
        """Return this TTL counted from `moment` (default: now)."""
        start = moment or datetime.now(UTC)
        return ThreadTTL(
            self.strategy, self.minutes, (start + timedelta(minutes=self.minutes)).isoformat()
        )

    def stored(self) -> ThreadTTL:
        """Return this TTL as stored: its expiry as set, or counted from now."""
        return self if self.expires_at is not None else self.starting()

    def to_json(self) -> dict[str, Any]:
        """Return the TTL as the Platform shows it (`GET /threads/{t}?include=ttl`)."""
        return {
            "strategy": self.strategy,
            "ttl_minutes": self.minutes,
            "expires_at": self.expires_at,
        }


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
    #: Its time to live, or None: kept until deleted.
    ttl: ThreadTTL | None = None

    def to_json(self, *, include_ttl: bool = False) -> dict[str, Any]:
        """Return the thread in the LangGraph Platform shape (`ttl` only when asked for)."""
        shown = {
            "thread_id": self.thread_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "metadata": self.metadata,
            "status": self.status,
            "values": self.values,
            "interrupts": self.interrupts,
        }
        if include_ttl:
            shown["ttl"] = self.ttl.to_json() if self.ttl is not None else None
        return shown


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
    #: How it executes (stored as the Platform's `kwargs` object).
    options: RunOptions
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

    @property
    def graph_id(self) -> str:
        """The graph the run runs: its assistant's, recorded for a created assistant."""
        return self.options.graph_id or self.assistant_id

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
            "kwargs": self.options.to_json(),
            "multitask_strategy": self.multitask_strategy,
            "attempt": self.attempt,
            "cancel_reason": self.cancel_reason,
            "error": self.error,
        }


def out_of_attempts(attempt: int, max_attempts: int) -> bool:
    """Whether a run executed `attempt` times is given up rather than executed again.

    The rule of every recovery: the restart sweep (`EngineCore.recover`), a worker's
    claim and the lease sweep (`engine.postgres`) end such a run with `RunAbandoned`.

    Args:
        attempt: The executions the run started (its record's `attempt`).
        max_attempts: RUN_MAX_ATTEMPTS.
    """
    return attempt >= max_attempts


def _as_text(value: Any) -> str | None:
    return value


def _decoded(value: Any) -> Any:
    """Return a JSON column's value: decoded when the driver handed over its text."""
    return loads(value) if isinstance(value, str) else value


def run_from_row(row: Any, stamp: Callable[[Any], str | None] = _as_text) -> RunRecord:
    """Return the run a `runs` row holds, read by either backend's driver.

    Args:
        row: The row, by column name.
        stamp: Turns a timestamp column into the records' ISO 8601 text (SQLite
            stores that text already).
    """
    return RunRecord(
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        owner=row["owner"],
        assistant_id=row["assistant_id"],
        status=row["status"],
        created_at=stamp(row["created_at"]) or "",
        updated_at=stamp(row["updated_at"]) or "",
        finished_at=stamp(row["finished_at"]),
        metadata=_decoded(row["metadata"]) or {},
        options=RunOptions.from_json(_decoded(row["kwargs"]) or {}),
        multitask_strategy=row["multitask_strategy"],
        attempt=row["attempt"],
        cancel_reason=row["cancel_reason"],
        error=_decoded(row["error"]),
        idempotency_key=row["idempotency_key"],
        request_hash=row["request_hash"],
    )


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


@dataclass(frozen=True, slots=True)
class WebhookQueued:
    """A webhook delivery of a run's end, written with the run's terminal status (the outbox).

    `body` is the JSON text POSTed on every attempt (`engine.webhooks.delivery_body`).
    """

    delivery_id: str
    run_id: str
    thread_id: str
    owner: str
    url: str
    body: str


@dataclass(frozen=True, slots=True)
class RunUsageRecorded:
    """A run's LLM usage, written with its terminal status (`engine.usage`).

    Kept apart from the run's row, so a run deleted later still counts toward its
    owner's month; written once per run (a repeat replaces it).
    """

    run_id: str
    owner: str
    assistant_id: str
    #: When the run was created (ISO 8601): the per-minute rate counts deleted runs by it.
    created_at: str
    usage: RunUsage


RecordChange = RunStatusChange | ThreadStateChange | WebhookQueued | RunUsageRecorded
