"""Where a pipeline run starts: the per-run state a new run on a thread begins with.

A thread keeps its state between runs (the checkpointer), so a new run must
reset what belongs to one run: its counters, attempt history, verdict, question
and result. It also fixes the run's budget here, once: `max_attempts`
(1 + MAX_RETRY_COUNT, 1 in fast mode) and the team's loop bounds
(`team_limits`: the deployment's over the defaults, tightened in fast mode;
`studio.limits`), which every attempt's team gets as its input `limits`.

The pipeline enters its first node through `starting_run` (`graphs.pipeline`
wraps the planner with it), so the reset is part of the planner's step: no
extra node or superstep, and nothing is written before the planner's own
update. That means, too, that until the planner gets past a clarification
question (`interrupt()` re-runs the node from the top on resume) the thread's
state still shows the previous run's fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from langgraph.runtime import Runtime

from studio.context import AtelierContext, context_of
from studio.limits import fast_mode_limits, resolve_limits
from studio.state import PipelineState


class PipelineNode(Protocol):
    """A pipeline node taking the state and the run's runtime (the planner)."""

    def __call__(
        self, state: PipelineState, runtime: Runtime[AtelierContext]
    ) -> Awaitable[dict[str, Any]]:
        """Run the node and return its update."""
        ...


def starts_new_run(state: Mapping[str, Any]) -> bool:
    """Tell whether the pipeline is entered by a new run, not a replan or resume of one.

    New: the thread's first run (no `session_id` yet), or a run after the
    thread's previous run finished (its `result` is set).
    """
    return not state.get("session_id") or state.get("result") is not None


def new_run_state(ctx: AtelierContext, state: Mapping[str, Any], session_id: str) -> dict[str, Any]:
    """Return the per-run fields a new run starts with (budget, counters, history, question)."""
    fast = bool(state.get("fast_mode"))
    limits = resolve_limits(ctx.limits)
    return {
        "session_id": session_id,
        "max_attempts": 1 if fast else 1 + ctx.max_retry_count,
        "team_limits": fast_mode_limits(limits) if fast else limits,
        "attempt": 0,
        "replans": 0,
        "attempts": [],
        "verdict": None,
        "retry_context": None,
        "replan_notes": [],
        "clarification": None,
        "failure": None,
        "result": None,
    }


def session_id_of(runtime: Runtime[Any]) -> str:
    """Return the knowledge coordinator's key: the thread id, else the run id, else a fresh id."""
    info = getattr(runtime, "execution_info", None)
    for key in ("thread_id", "run_id"):
        value = getattr(info, key, None)
        if value:
            return str(value)
    return f"run-{uuid.uuid4().hex}"


def starting_run(node: PipelineNode) -> PipelineNode:
    """Return `node` entered with a new run's state reset first (see the module docstring).

    On a new run the wrapped node sees the reset state, and its update carries
    the reset fields under its own; otherwise (a replan, a resume) the node runs
    as it is.
    """

    async def entered(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
        if not starts_new_run(state):
            return await node(state, runtime)
        start = new_run_state(context_of(runtime), state, session_id_of(runtime))
        update = await node({**state, **start}, runtime)  # type: ignore[typeddict-item]
        return {**start, **update}

    entered.__name__ = getattr(node, "__name__", "entered")
    entered.__doc__ = node.__doc__
    return entered
