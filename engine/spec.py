"""The typed run request: what an adapter asks the engine to run, and what a run keeps.

`RunSpec` is the one value every adapter (HTTP, MCP, A2A, the CLI, the cron
scheduler, …) builds from its own request, once, in one function of its own; the
engine resolves its assistant, validates it against the assistant and fingerprints
it (`fingerprint`) itself. `RunOptions` is the part of it that says how the run
executes; a run record keeps it, as the engine prepared it (the validated input,
the assistant's config merged in, the graph and trace it runs under).

A run's options are stored as the JSON object the LangGraph Platform calls a run's
`kwargs` (`to_json` / `from_json`), so a row written before these types existed
loads and runs as it did. This module is the only one that reads those keys. See
docs/architecture.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from engine.serde import dumps

#: What a new run does when its thread has a pending or running run (the SDK's names).
MultitaskStrategy = Literal["reject", "interrupt", "rollback", "enqueue"]
#: What a run on a missing thread does: create it, or be refused.
IfNotExists = Literal["create", "reject"]
#: What a client disconnect does to a run it streams or waits for.
OnDisconnect = Literal["cancel", "continue"]
#: What a thread-less run does with its thread once it ended.
OnCompletion = Literal["delete", "keep"]
#: Nodes to pause at: `*` (all) or their names.
Breakpoints = Literal["*"] | Sequence[str]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run executes: its input or command, its stream and its Platform options."""

    #: The graph input (checked against the assistant's input model), or None.
    input: Any = None
    #: `{"resume", "update", "goto"}` instead of input, or None.
    command: Mapping[str, Any] | None = None
    #: The stream modes the run's stream carries.
    stream_mode: tuple[str, ...] = ("values",)
    #: Send subgraph events, namespaced.
    stream_subgraphs: bool = False
    #: Advertise the stream for reconnection (every run's log is kept either way).
    stream_resumable: bool = False
    #: What a disconnect of the client that started it does.
    on_disconnect: OnDisconnect = "continue"
    #: The run's LangGraph config (`configurable`, `tags`, `recursion_limit`).
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The checkpoint to start from (`checkpoint_id`, `checkpoint_ns`, `checkpoint_map`).
    checkpoint: Mapping[str, Any] | None = None
    interrupt_before: Breakpoints | None = None
    interrupt_after: Breakpoints | None = None
    #: LangGraph's durability (`sync`, `async`, `exit`), or None for its default.
    durability: str | None = None
    #: Thread-less runs: delete or keep the thread once the run ended.
    on_completion: OnCompletion | None = None
    #: Seconds to wait before the first execution.
    after_seconds: float | None = None
    #: The URL told about the run's end (`engine.webhooks`).
    webhook: str | None = None
    #: Set by the engine: the graph a created assistant runs (None: its assistant id's).
    graph_id: str | None = None
    #: Set by the engine: the W3C context of the run's trace (`engine.tracing`).
    trace_context: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the options as the run's stored (and answered) `kwargs` object."""
        stored: dict[str, Any] = {
            "input": self.input,
            "command": dict(self.command) if self.command is not None else None,
            "stream_mode": list(self.stream_mode),
            "stream_subgraphs": self.stream_subgraphs,
            "stream_resumable": self.stream_resumable,
            "on_disconnect": self.on_disconnect,
            "config": dict(self.config),
        }
        optional = {
            "checkpoint": dict(self.checkpoint) if self.checkpoint is not None else None,
            "interrupt_before": _breakpoints(self.interrupt_before),
            "interrupt_after": _breakpoints(self.interrupt_after),
            "durability": self.durability,
            "on_completion": self.on_completion,
            "after_seconds": self.after_seconds,
            "webhook": self.webhook,
            "graph_id": self.graph_id,
            "trace_context": dict(self.trace_context) if self.trace_context else None,
        }
        stored.update((key, value) for key, value in optional.items() if value is not None)
        return stored

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> RunOptions:
        """Return the options a stored `kwargs` object holds (unset keys take their defaults).

        Rows written by any version of the engine load: a key it did not write
        takes its default, a key this version does not know is dropped.
        """
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in stored.items() if key in known}
        modes = values.pop("stream_mode", None) or ["values"]
        return cls(
            stream_mode=tuple([modes] if isinstance(modes, str) else modes),
            stream_subgraphs=bool(values.pop("stream_subgraphs", False)),
            stream_resumable=bool(values.pop("stream_resumable", False)),
            on_disconnect=values.pop("on_disconnect", None) or "continue",
            config=values.pop("config", None) or {},
            **values,
        )

    def copy_options(self) -> RunOptions:
        """Return the run options alone (a `RunSpec`'s, without its request envelope)."""
        return RunOptions(**{f.name: getattr(self, f.name) for f in fields(RunOptions)})


@dataclass(frozen=True, kw_only=True)
class RunSpec(RunOptions):
    """A request to start a run, as an adapter builds it (see the module docstring)."""

    #: The assistant to run: a built-in one's id or one the owner created.
    assistant_id: str
    #: The caller's owner id (the API key's), who owns the run and its thread.
    owner: str
    #: The thread, or None for a thread-less run (a new thread).
    thread_id: str | None = None
    #: Stored with the run.
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: What to do when the thread has a pending or running run.
    multitask_strategy: MultitaskStrategy = "reject"
    #: A missing thread: create it, or refuse (404).
    if_not_exists: IfNotExists = "reject"
    #: A retried request with the same key answers the same run.
    idempotency_key: str | None = None
    #: The server's base URL the client reached (absolute links in the run's output).
    base_url: str | None = None
    #: The caller's W3C Trace Context headers: with tracing on, the run's trace is a
    #: child of the caller's (`engine.tracing`).
    trace_headers: Mapping[str, str] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """Return a stable hash of what the request asks (to tell a retry from another request).

        The base URL and trace headers are left out: a retry through another proxy,
        or in another trace, is the same request.
        """
        asked = {**self.to_json(), "assistant_id": self.assistant_id}
        body = {
            "thread_id": self.thread_id,
            "body": asked,
            "metadata": dict(self.metadata),
            "multitask_strategy": self.multitask_strategy,
            "if_not_exists": self.if_not_exists,
        }
        return hashlib.sha256(dumps(body).encode()).hexdigest()


def stored_multitask_strategy(stored: Mapping[str, Any]) -> MultitaskStrategy:
    """Return the multitask strategy a stored request names (a cron's payload; default reject)."""
    strategy = stored.get("multitask_strategy")
    return strategy if strategy in ("reject", "interrupt", "rollback", "enqueue") else "reject"


def _breakpoints(value: Breakpoints | None) -> str | list[str] | None:
    if value is None or isinstance(value, str):
        return value
    return list(value)


__all__ = [
    "Breakpoints",
    "IfNotExists",
    "MultitaskStrategy",
    "OnCompletion",
    "OnDisconnect",
    "RunOptions",
    "RunSpec",
    "stored_multitask_strategy",
]
