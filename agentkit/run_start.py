"""Where a run starts: the per-run state a new pipeline run begins with, and its request shown.

A thread keeps its state between runs (the checkpointer), so a new run must
reset what belongs to one run: its counters, attempt history, verdict, question
and result. It also fixes the run's budget here, once: `max_attempts`
(1 + MAX_RETRY_COUNT, 1 in fast mode) and the team's loop bounds
(`team_limits`: the deployment's over the defaults, tightened in fast mode;
`agentkit.limits`), which every attempt's team gets as its input `limits`.

The pipeline enters its first node through `starting_run` (`graphs.pipeline`
wraps the planner with it), so the reset is part of the planner's step: no
extra node or superstep, and nothing is written before the planner's own
update. A planner that asks a question first writes it with the reset
(`nodes.planner`), so a thread waiting for an answer shows the new run's state.

Whatever started a run, its conversation shows what was asked (PRODUCT.md §7
"Conversation"): a request given as the `request` field becomes the user's
message (`shown_request`), written by the planner when it takes a new request
(`nodes.planner`) and by the standalone team's entry (`graphs.team`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from langgraph.config import get_config
from langgraph.runtime import Runtime

from agentkit.brand import brand_fill
from agentkit.chat import (
    REQUEST_MESSAGE_PREFIX,
    chat_request,
    image_blocks,
    is_human,
    request_message,
)
from agentkit.context import AtelierContext, context_of
from agentkit.limits import fast_mode_limits, resolve_limits
from agentkit.state import PipelineState

log = logging.getLogger(__name__)

#: The most reference images a run takes (`agentkit.state.ReferenceImages`).
_MAX_REFERENCE_IMAGES = 9


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
        "question": None,
        "failure": None,
        "result": None,
        "previous_post": None,
        "post_message_id": None,
        "drifted": None,  # a new run asks its supervisor again, whatever the last one did
    }


async def chat_start(ctx: AtelierContext, state: Mapping[str, Any]) -> dict[str, Any]:
    """Return what a new run takes from the chat message that started it (module docstring).

    Empty unless the conversation's last message is the user's: a run started with
    `request` alone takes nothing from it (the planner then adds the request to the
    conversation, `shown_request`).
    """
    messages = list(state.get("messages") or [])
    if not messages or not is_human(messages[-1]):
        return {}
    update: dict[str, Any] = {}
    if not str(state.get("request") or "").strip():
        update["request"] = chat_request(messages)[:4000]
    references = list(state.get("reference_images") or [])
    for data, mime in image_blocks(messages[-1]):
        try:
            record = await ctx.assets.aput(data, mime, kind="uploaded", meta={"source": "chat"})
        except ValueError:
            log.warning("a chat image is not a readable image; skipped")
            continue
        if record.asset_id not in references:
            references.append(record.asset_id)
    if references != list(state.get("reference_images") or []):
        update["reference_images"] = references[:_MAX_REFERENCE_IMAGES]
    previous = (state.get("result") or {}).get("post") or {}
    if previous.get("title") or previous.get("blocks"):
        update["previous_post"] = state.get("generated_content") or previous
    return update


def session_id_of(runtime: Runtime[Any]) -> str:
    """Return the knowledge coordinator's key: the thread id, else the run id, else a fresh id."""
    info = getattr(runtime, "execution_info", None)
    for key in ("thread_id", "run_id"):
        value = getattr(info, key, None)
        if value:
            return str(value)
    return f"run-{uuid.uuid4().hex}"


def _run_id() -> str | None:
    """Return the run id the service put in the run's metadata (None outside a run)."""
    try:
        metadata = get_config().get("metadata") or {}
    except RuntimeError:  # called outside a graph (a node under test)
        return None
    value = metadata.get("run_id")
    return str(value) if value else None


def request_message_id(runtime: Runtime[Any]) -> str:
    """Return the id of the message that shows a run's request: `request-` and the run's id.

    The run's id where LangGraph or the service gives one, else the checkpoint the
    step runs from: either way the same when a crashed run's step is run again (it
    resumes from that checkpoint), so a retried step never adds a second copy.
    """
    info = getattr(runtime, "execution_info", None)
    key = getattr(info, "run_id", None) or _run_id() or getattr(info, "checkpoint_id", None)
    return f"{REQUEST_MESSAGE_PREFIX}{key or uuid.uuid4()}"


def shown_request(state: Mapping[str, Any], runtime: Runtime[Any]) -> dict[str, Any]:
    """Return the update that shows the run's `request` as the user's message, or nothing.

    Nothing when the conversation already ends with what the user said
    (`agentkit.chat.request_message`), and in a graph run inside another (the
    team as the pipeline's executor): the conversation is the caller's. LangGraph
    names a task inside a subgraph `parent:<id>|child:<id>`.
    """
    info = getattr(runtime, "execution_info", None)
    if "|" in str(getattr(info, "checkpoint_ns", "") or ""):
        return {}
    message = request_message(
        state.get("messages"), str(state.get("request") or ""), request_message_id(runtime)
    )
    return {"messages": [message]} if message is not None else {}


def starting_run(node: PipelineNode) -> PipelineNode:
    """Return `node` entered with a new run's state reset first (see the module docstring).

    On a new run the wrapped node sees the reset state, with what the run's brand
    preset fills of the input (`agentkit.brand.brand_fill`), and its update carries
    the reset fields under its own; otherwise (a replan, a resume) the node runs
    as it is.
    """

    async def entered(state: PipelineState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
        if not starts_new_run(state):
            return await node(state, runtime)
        ctx = context_of(runtime)
        start = {
            **new_run_state(ctx, state, session_id_of(runtime)),
            **await chat_start(ctx, state),
            **brand_fill(state),
        }
        update = await node({**state, **start}, runtime)  # type: ignore[typeddict-item]
        return {**start, **update}

    entered.__name__ = getattr(node, "__name__", "entered")
    entered.__doc__ = node.__doc__
    return entered
