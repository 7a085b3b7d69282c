"""The run engine's read side: what runs left behind, read without writing anything.

It reads the thread record and the graph's checkpoints. The run manager answers
routes with it, and the executor reads a thread's values and interrupts with it
when a run ends.

    run_result      what `/wait` and `/join` answer: the thread's values after a run
    thread_values   a thread's values and pending interrupts, as its graph sees them
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from engine.assistants import Assistant
from engine.records import RunRecord, ThreadRecord
from engine.serde import to_jsonable

log = logging.getLogger(__name__)


def thread_config(thread_id: str) -> RunnableConfig:
    """Return the LangGraph config that reads a thread's checkpoints."""
    return {"configurable": {"thread_id": thread_id}}


async def run_result(
    run: RunRecord,
    load_thread: Callable[[str, str], Awaitable[ThreadRecord | None]],
    ended: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return what `/wait` and `/join` answer: the thread's values after the run.

    A failed run answers `{"__error__": {"error", "message"}}`; an interrupted one
    carries its pending interrupts under `__interrupt__`.

    Args:
        run: The run, as recorded.
        load_thread: Reads a thread by owner and id (`ThreadRepository.get`).
        ended: The result kept for a run deleted as it ended (its thread may be gone).
    """
    if run.status in ("error", "timeout"):
        return {"__error__": run.error or {"error": run.status, "message": run.status}}
    if ended is not None:
        return ended
    thread = await load_thread(run.owner, run.thread_id)
    if thread is None:
        return {}
    values = dict(thread.values or {})
    pending = [i for group in thread.interrupts.values() for i in group]
    if pending:
        values["__interrupt__"] = pending
    return values


async def thread_values(assistant: Assistant | None, thread_id: str) -> tuple[dict | None, dict]:
    """Return a thread's values and pending interrupts (by task id), as its graph sees them.

    None and no interrupts when the assistant is gone or its checkpoints cannot be read.
    """
    if assistant is None:
        return None, {}
    try:
        snapshot: StateSnapshot = await assistant.graph.aget_state(thread_config(thread_id))
    except Exception:
        log.exception("could not read the state of thread %s", thread_id)
        return None, {}
    interrupts = {
        task.id: to_jsonable(list(task.interrupts)) for task in snapshot.tasks if task.interrupts
    }
    values = to_jsonable(snapshot.values)
    return (values if isinstance(values, dict) else {"value": values}), interrupts


__all__ = ["run_result", "thread_config", "thread_values"]
