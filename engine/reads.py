"""The run engine's read side: a run's result, a thread's state, its snapshots and history.

Everything here reads what runs left behind — the thread record and the graph's
checkpoints — and writes nothing. The run manager answers routes with it, and the
executor reads a thread's values and interrupts with it when a run ends.

    run_result      what `/wait` and `/join` answer: the thread's values after a run
    thread_values   a thread's values and pending interrupts, as its graph sees them
    state           the latest checkpointed state (the Platform's `ThreadState`)
    state_at        the state at one checkpoint (or a subgraph namespace's head)
    history         past states, newest first (a page that cuts a fork carries both sides)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import StateSnapshot

from engine.assistants import Assistant
from engine.errors import NotFound
from engine.frames import checkpoint_ref, public_error
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


#: Errors whose messages a task's `error` shows (`engine.frames.public_error`).
Safe = tuple[type[BaseException], ...]


def snapshot_json(snapshot: StateSnapshot, safe: Safe = ()) -> dict[str, Any]:
    """Return a checkpointed state in the LangGraph Platform shape."""
    tasks = []
    for task in snapshot.tasks:
        state = task.state
        tasks.append(
            {
                "id": task.id,
                "name": task.name,
                "error": public_error(task.error, safe)["message"] if task.error else None,
                "interrupts": to_jsonable(list(task.interrupts)),
                "checkpoint": checkpoint_ref(state) if isinstance(state, dict) else None,
                "state": snapshot_json(state, safe) if isinstance(state, StateSnapshot) else None,
                "result": to_jsonable(task.result),
            }
        )
    return {
        "values": to_jsonable(snapshot.values),
        "next": list(snapshot.next),
        "tasks": tasks,
        "checkpoint": checkpoint_ref(snapshot.config),
        "parent_checkpoint": checkpoint_ref(snapshot.parent_config),
        "metadata": to_jsonable(snapshot.metadata),
        "created_at": snapshot.created_at,
        "interrupts": to_jsonable(list(snapshot.interrupts)),
    }


def _empty_state() -> dict[str, Any]:
    return {
        "values": {},
        "next": [],
        "tasks": [],
        "checkpoint": None,
        "parent_checkpoint": None,
        "metadata": None,
        "created_at": None,
        "interrupts": [],
    }


async def state(
    graph: Any, thread_id: str, *, subgraphs: bool = False, safe: Safe = ()
) -> dict[str, Any]:
    """Return a thread's latest checkpointed state (empty before any graph ran on it).

    Args:
        graph: The compiled graph that ran on the thread, or None when none has yet.
        thread_id: The thread.
        subgraphs: Include the state of subgraphs paused inside a task.
        safe: Errors whose messages a task's `error` shows.
    """
    if graph is None:
        return _empty_state()
    snapshot = await graph.aget_state(thread_config(thread_id), subgraphs=subgraphs)
    return snapshot_json(snapshot, safe)


async def state_at(
    graph: Any,
    thread_id: str,
    checkpoint: dict[str, Any],
    *,
    subgraphs: bool = False,
    safe: Safe = (),
) -> dict[str, Any]:
    """Return a thread's state at a checkpoint.

    Args:
        graph: The compiled graph that ran on the thread, or None when none has yet.
        thread_id: The thread.
        checkpoint: The LangGraph configurable naming it (`checkpoint_id`,
            `checkpoint_ns`, `checkpoint_map`); with only a namespace, that
            namespace's latest state.
        subgraphs: Include the state of subgraphs paused inside a task.
        safe: Errors whose messages a task's `error` shows.

    Raises:
        NotFound: The thread has no such checkpoint (or namespace).
    """
    wanted = checkpoint.get("checkpoint_id") or checkpoint.get("checkpoint_ns") or "head"
    if graph is None:
        raise NotFound(f"checkpoint {wanted!r} not found")
    config = thread_config(thread_id)
    config["configurable"].update(checkpoint)
    try:
        snapshot = await graph.aget_state(config, subgraphs=subgraphs)
    except ValueError:  # a namespace that names no subgraph of the graph
        raise NotFound(
            f"checkpoint namespace {checkpoint.get('checkpoint_ns')!r} not found"
        ) from None
    if snapshot.config is None or not snapshot.created_at:
        raise NotFound(f"checkpoint {wanted!r} not found")
    return snapshot_json(snapshot, safe)


async def history(
    graph: Any,
    thread_id: str,
    *,
    limit: int,
    before: str | None = None,
    metadata: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    safe: Safe = (),
) -> list[dict[str, Any]]:
    """Return a thread's past states, newest first (none before any graph ran on it).

    A first page (no `before`, `metadata` or `checkpoint`) that cuts a fork in two
    also carries the other side (`_fork_siblings`): where one of its lines starts
    below a fork (a checkpoint with several children: an edit or a regenerate
    started there) at most `limit` checkpoints up, the checkpoints up to the fork
    are added, and each other child's line, from it towards its newest state, up
    to `limit` states. Chat clients load a short first page (useStream's
    `fetchStateHistory: true` asks for 10) and find a thread's branches in it, but
    one pipeline run writes more checkpoints than that (input, start, then each
    node), so an edit of the last message would otherwise leave its other side out
    of the page, and Agent Chat UI would show no branch switcher. Such a page holds
    more than `limit` states; later pages (`before`) and filtered ones hold at most
    `limit`.

    Args:
        graph: The compiled graph that ran on the thread, or None when none has yet.
        thread_id: The thread.
        limit: At most this many states.
        before: Only states older than this checkpoint id.
        metadata: Only states whose checkpoint metadata has every given key and value.
        checkpoint: Start at this checkpoint (its namespace: a subgraph's history);
            keys whose value is None are left out.
        safe: Errors whose messages a task's `error` shows.
    """
    if graph is None:
        return []
    before_config = (
        {"configurable": {"thread_id": thread_id, "checkpoint_id": before}} if before else None
    )
    config = thread_config(thread_id)
    if checkpoint:
        config["configurable"].update({k: v for k, v in checkpoint.items() if v is not None})
    snapshots = [
        snapshot
        async for snapshot in graph.aget_state_history(
            config, filter=metadata or None, limit=limit, before=before_config
        )
    ]
    if not (before or metadata or checkpoint) and len(snapshots) == limit:
        snapshots += await _fork_siblings(graph, thread_id, snapshots, limit)
        snapshots.sort(key=lambda s: _checkpoint_id(s.config) or "", reverse=True)
    return [snapshot_json(snapshot, safe) for snapshot in snapshots]


async def _fork_siblings(
    graph: Any, thread_id: str, page: list[StateSnapshot], limit: int
) -> list[StateSnapshot]:
    """Return the states that join a page of history to the forks it cuts, and their sides.

    From each state of the page whose parent checkpoint is not in the page, the
    checkpoints above it are walked, at most `limit`, up to the first with several
    children (a fork: an edit or a regenerate started there). The checkpoints walked
    are added, and each other child of the fork starts a line: the child, then its
    newest child, and so on, until the page or `limit` states are reached. Only the
    checkpoints from the oldest one walked on are listed to find the children
    (checkpoint ids grow with time, and the savers list them newest first).
    """
    checkpointer = getattr(graph, "checkpointer", None)
    if not isinstance(checkpointer, BaseCheckpointSaver):
        return []
    held = {_checkpoint_id(s.config) for s in page}
    walks: list[list[str]] = []
    for snapshot in page:
        walk: list[str] = []
        above = _checkpoint_id(snapshot.parent_config)
        while above is not None and above not in held and len(walk) <= limit:
            walk.append(above)
            saved = await checkpointer.aget_tuple(_at(thread_id, above))
            above = _checkpoint_id(saved.parent_config) if saved is not None else None
        if walk:
            walks.append(walk)
    if not walks:
        return []
    oldest = min(checkpoint_id for walk in walks for checkpoint_id in walk)
    children: dict[str, list[str]] = {}
    async for saved in checkpointer.alist(_at(thread_id, None)):
        checkpoint_id = _checkpoint_id(saved.config)
        if checkpoint_id is None or checkpoint_id < oldest:
            break
        parent = _checkpoint_id(saved.parent_config)
        if parent is not None:
            children.setdefault(parent, []).append(checkpoint_id)
    wanted: list[str] = []
    for walk in walks:
        forks = [depth for depth, above in enumerate(walk) if len(children.get(above, [])) > 1]
        if not forks:
            continue  # no fork cut within reach
        fork = walk[forks[0]]
        between = [c for c in walk[: forks[0]] if c not in held]
        held.update(between)
        wanted += between
        for child in children[fork]:
            line = 0
            while child not in held and line < limit:
                held.add(child)
                wanted.append(child)
                line += 1
                newer = children.get(child)
                if not newer:
                    break
                child = max(newer)
    return [await graph.aget_state(_at(thread_id, checkpoint_id)) for checkpoint_id in wanted]


def _checkpoint_id(config: RunnableConfig | None) -> str | None:
    value = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    return str(value) if value else None


def _at(thread_id: str, checkpoint_id: str | None) -> RunnableConfig:
    """Return the config of a checkpoint of the thread's own graph (not its subgraphs')."""
    config = thread_config(thread_id)
    config["configurable"]["checkpoint_ns"] = ""
    if checkpoint_id is not None:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    return config


__all__ = [
    "history",
    "run_result",
    "snapshot_json",
    "state",
    "state_at",
    "thread_config",
    "thread_values",
]
