"""LLM usage per role — calls, tokens and time — counted where every model call passes.

`providers.llm.OpenAIModelFactory` gives every model it builds a `UsageCallback`.
The callback reports each finished (or failed) call to the `UsageLedger` of the
code that is running it: `metering()` opens one for a block (the pipeline meters
each node, `graphs.pipeline`), and asyncio tasks started inside the block — the
team subgraph's nodes, concurrent tool calls — inherit it with their context.
Outside a metered block calls are not recorded here (the app's `/metrics`
counts every call on its own).

Tokens come from the provider's answer: the message's `usage_metadata` (the
factory asks for `stream_usage`, so streamed answers carry it too), else the
`token_usage` of the response. A call whose answer carries no usage — some
servers send none, and a call that failed has none — counts as a call with its
time and *unknown* tokens: it is never given a made-up number. A role's token
sums then cover only its `metered` calls; when none of its calls was metered,
its tokens are null.

A usage mapping, as it is kept in state and shown in the result payload:

```
{"<role>": {"calls": int, "metered": int, "prompt_tokens": int | None,
            "completion_tokens": int | None, "seconds": float}, ...}
```
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

UNKNOWN_ROLE = "unknown"
MAX_TRACKED_CALLS = 10_000  # calls in flight remembered; one that never ends is forgotten


@dataclass
class RoleUsage:
    """What one role's model calls cost."""

    calls: int = 0
    metered: int = 0  # calls whose answer reported its token usage
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form; token sums are None when no call was metered."""
        return {
            "calls": self.calls,
            "metered": self.metered,
            "prompt_tokens": self.prompt_tokens if self.metered else None,
            "completion_tokens": self.completion_tokens if self.metered else None,
            "seconds": round(self.seconds, 3),
        }


class UsageLedger:
    """The LLM usage of one metered block, by role."""

    def __init__(self) -> None:
        """Start empty."""
        self.roles: dict[str, RoleUsage] = {}

    def record(self, role: str, seconds: float, tokens: tuple[int, int] | None) -> None:
        """Count one call of `role` that took `seconds`; `tokens` (prompt, completion) or None."""
        usage = self.roles.setdefault(role, RoleUsage())
        usage.calls += 1
        usage.seconds += max(0.0, seconds)
        if tokens is not None:
            usage.metered += 1
            usage.prompt_tokens += tokens[0]
            usage.completion_tokens += tokens[1]

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Return the usage mapping (see the module docstring)."""
        return {role: usage.as_dict() for role, usage in sorted(self.roles.items())}


_LEDGER: ContextVar[UsageLedger | None] = ContextVar("atelier_usage_ledger", default=None)


@contextmanager
def metering() -> Iterator[UsageLedger]:
    """Record the LLM calls made inside the block (and in tasks it starts) in a new ledger."""
    ledger = UsageLedger()
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def response_tokens(response: LLMResult) -> tuple[int, int] | None:
    """Return (prompt, completion) tokens a response reported, or None when it reported none."""
    found = False
    prompt = completion = 0
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
            if usage:
                found = True
                prompt += int(usage.get("input_tokens", 0) or 0)
                completion += int(usage.get("output_tokens", 0) or 0)
    if found:
        return prompt, completion
    usage = (response.llm_output or {}).get("token_usage") or {}
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return None


def call_role(metadata: Mapping[str, Any] | None, tags: Sequence[str] | None) -> str:
    """Return the role of a call: its `role` metadata, else its `role:<name>` tag."""
    role = (metadata or {}).get("role")
    if isinstance(role, str) and role:
        return role
    return next((t[5:] for t in tags or () if t.startswith("role:")), UNKNOWN_ROLE)


class UsageCallback(BaseCallbackHandler):
    """Report each model call's role, duration and tokens to the running block's ledger.

    Run inline (it only adds numbers), so it sees the caller's context: the ledger
    `metering()` set for the block the call runs in.
    """

    run_inline = True
    raise_error = False

    def __init__(self) -> None:
        """Track no call yet."""
        self._started: dict[UUID, tuple[str, float, UsageLedger]] = {}

    def _start(
        self, run_id: UUID, metadata: Mapping[str, Any] | None, tags: Sequence[str] | None
    ) -> None:
        ledger = _LEDGER.get()
        if ledger is None:
            return
        if len(self._started) >= MAX_TRACKED_CALLS:
            self._started.pop(next(iter(self._started)))
        self._started[run_id] = (call_role(metadata, tags), time.perf_counter(), ledger)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start timing a chat model call."""
        self._start(run_id, metadata, tags)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start timing a completion model call."""
        self._start(run_id, metadata, tags)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a finished call with the tokens its answer reported."""
        started = self._started.pop(run_id, None)
        if started is not None:
            role, start, ledger = started
            ledger.record(role, time.perf_counter() - start, response_tokens(response))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a failed (or cancelled) call: its time, tokens unknown."""
        started = self._started.pop(run_id, None)
        if started is not None:
            role, start, ledger = started
            ledger.record(role, time.perf_counter() - start, None)


def add_usage(
    left: Mapping[str, Mapping[str, Any]] | None, right: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Reduce two usage mappings into one: per role, calls, tokens and time add up.

    A token sum stays None only while no call of the role was metered on either side.
    """
    merged: dict[str, dict[str, Any]] = {role: dict(u) for role, u in (left or {}).items()}
    for role, usage in (right or {}).items():
        if role not in merged:
            merged[role] = dict(usage)
            continue
        mine = merged[role]
        for key in ("calls", "metered"):
            mine[key] = int(mine.get(key) or 0) + int(usage.get(key) or 0)
        mine["seconds"] = round(
            float(mine.get("seconds") or 0) + float(usage.get("seconds") or 0), 3
        )
        for key in ("prompt_tokens", "completion_tokens"):
            a, b = mine.get(key), usage.get(key)
            mine[key] = None if a is None and b is None else int(a or 0) + int(b or 0)
    return dict(sorted(merged.items()))


def usage_totals(usage: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Return the sum over every role, in the same shape as one role's usage."""
    total = add_usage(None, {"all": {"calls": 0, "metered": 0, "seconds": 0.0}})
    for role_usage in (usage or {}).values():
        total = add_usage(total, {"all": role_usage})
    all_roles = total["all"]
    all_roles.setdefault("prompt_tokens", None)
    all_roles.setdefault("completion_tokens", None)
    return all_roles
