"""Threads: create, read, update metadata, delete, search, and their checkpointed state.

    POST   /threads                         create (if_exists raise | do_nothing)
    GET    /threads/{t}                     one thread (values after its last run)
    PATCH  /threads/{t}                     merge metadata
    DELETE /threads/{t}                     cancel its runs, delete it and its checkpoints
    POST   /threads/search                  filter by metadata, status, ids
    POST   /threads/count                   how many match metadata and status
    GET    /threads/{t}/state               the latest checkpointed state
    GET    /threads/{t}/state/{checkpoint}  a past state
    POST   /threads/{t}/state/checkpoint    a past state, the checkpoint in the body (SDKs)
    POST   /threads/{t}/state               update the state as a node (graph's aupdate_state)
    GET    /threads/{t}/history             past states, newest first (POST: the SDK's form,
                                            with checkpoint and metadata filters)
    POST   /threads/{t}/copy                a new thread with the same checkpoints

A thread belongs to the API key that created it; another key gets 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from langgraph.types import StateSnapshot
from pydantic import Field

from app.deps import PrincipalDep, RunsDep
from app.errors import Conflict, NotFound
from app.schemas import (
    DIGITS_ONLY,
    ID_PATTERN,
    HistoryQuery,
    QueryBool,
    StateCheckpointRequest,
    StateUpdate,
    StateUpdateOut,
    ThreadCount,
    ThreadCreate,
    ThreadOut,
    ThreadPatch,
    ThreadSearch,
    ThreadStateOut,
)
from engine.frames import checkpoint_ref, public_error
from engine.manager import RunManager
from engine.protocols import ThreadExists
from engine.records import ThreadRecord, now
from engine.serde import to_jsonable

router = APIRouter(tags=["threads"])

ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]


async def _owned_thread(manager: RunManager, owner: str, thread_id: str) -> ThreadRecord:
    thread = await manager.threads.get(owner, thread_id)
    if thread is None:
        raise NotFound(f"thread {thread_id!r} not found")
    return thread


@router.post("/threads", response_model=ThreadOut, summary="Create a thread")
async def create_thread(
    body: ThreadCreate, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Create a thread (a UUID unless `thread_id` is given)."""
    thread_id = body.thread_id or str(uuid.uuid4())
    existing = await manager.threads.get(owner, thread_id)
    if existing is not None and body.if_exists == "do_nothing":
        return existing.to_json()
    stamp = now()
    thread = ThreadRecord(
        thread_id=thread_id,
        owner=owner,
        created_at=stamp,
        updated_at=stamp,
        metadata=body.metadata or {},
    )
    try:
        await manager.threads.insert(thread)
    except ThreadExists:
        raise Conflict(f"thread {thread_id!r} already exists") from None
    return thread.to_json()


@router.post("/threads/search", response_model=list[ThreadOut], summary="Search threads")
async def search_threads(
    body: ThreadSearch, manager: RunsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's threads matching every given filter."""
    threads = await manager.threads.search(
        owner,
        metadata=body.metadata,
        status=body.status,
        ids=body.ids,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )
    return [thread.to_json() for thread in threads]


@router.post("/threads/count", response_model=int, summary="Count threads")
async def count_threads(body: ThreadCount, manager: RunsDep, owner: PrincipalDep) -> int:
    """Return how many of the caller's threads match every given filter."""
    return await manager.threads.count(owner, metadata=body.metadata, status=body.status)


@router.get("/threads/{thread_id}", response_model=ThreadOut, summary="Get a thread")
async def get_thread(thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep) -> dict[str, Any]:
    """Return one thread."""
    return (await _owned_thread(manager, owner, thread_id)).to_json()


@router.patch("/threads/{thread_id}", response_model=ThreadOut, summary="Update a thread")
async def patch_thread(
    thread_id: ThreadId, body: ThreadPatch, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Merge metadata into the thread's."""
    thread = await manager.threads.merge_metadata(owner, thread_id, body.metadata)
    if thread is None:
        raise NotFound(f"thread {thread_id!r} not found")
    return thread.to_json()


@router.delete("/threads/{thread_id}", status_code=204, summary="Delete a thread")
async def delete_thread(thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep) -> Response:
    """Cancel the thread's runs, then delete it with its runs, logs and checkpoints."""
    await manager.delete_thread(owner, thread_id)
    return Response(status_code=204)


# --------------------------------------------------------------------------- state


def snapshot_json(snapshot: StateSnapshot) -> dict[str, Any]:
    """Return a checkpointed state in the LangGraph Platform shape."""
    tasks = []
    for task in snapshot.tasks:
        state = task.state
        tasks.append(
            {
                "id": task.id,
                "name": task.name,
                "error": public_error(task.error)["message"] if task.error else None,
                "interrupts": to_jsonable(list(task.interrupts)),
                "checkpoint": checkpoint_ref(state) if isinstance(state, dict) else None,
                "state": snapshot_json(state) if isinstance(state, StateSnapshot) else None,
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


def _graph_of(manager: RunManager, thread: ThreadRecord) -> Any:
    """Return the graph that ran on the thread, or None when none has yet."""
    assistant = manager.assistants.get(str(thread.metadata.get("graph_id", "")))
    return assistant.graph if assistant else None


@router.get("/threads/{thread_id}/state", response_model=ThreadStateOut, summary="Thread state")
async def get_state(
    thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep, subgraphs: QueryBool = False
) -> dict[str, Any]:
    """Return the thread's latest checkpointed state."""
    thread = await _owned_thread(manager, owner, thread_id)
    graph = _graph_of(manager, thread)
    if graph is None:
        return _empty_state()
    snapshot = await graph.aget_state(manager.graph_config(thread_id), subgraphs=subgraphs)
    return snapshot_json(snapshot)


@router.get(
    "/threads/{thread_id}/state/{checkpoint_id}",
    response_model=ThreadStateOut,
    summary="Thread state at a checkpoint",
)
async def get_state_at(
    thread_id: ThreadId,
    checkpoint_id: Annotated[str, Path(max_length=64)],
    manager: RunsDep,
    owner: PrincipalDep,
    subgraphs: QueryBool = False,
) -> dict[str, Any]:
    """Return the thread's state at one checkpoint."""
    thread = await _owned_thread(manager, owner, thread_id)
    graph = _graph_of(manager, thread)
    if graph is None:
        raise NotFound(f"checkpoint {checkpoint_id!r} not found")
    config = manager.graph_config(thread_id)
    config["configurable"]["checkpoint_id"] = checkpoint_id
    snapshot = await graph.aget_state(config, subgraphs=subgraphs)
    if snapshot.config is None or not snapshot.created_at:
        raise NotFound(f"checkpoint {checkpoint_id!r} not found")
    return snapshot_json(snapshot)


async def _history(
    manager: RunManager,
    owner: str,
    thread_id: str,
    limit: int,
    before: str | None,
    *,
    metadata: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    thread = await _owned_thread(manager, owner, thread_id)
    graph = _graph_of(manager, thread)
    if graph is None:
        return []
    before_config = (
        {"configurable": {"thread_id": thread_id, "checkpoint_id": before}} if before else None
    )
    config = manager.graph_config(thread_id)
    if checkpoint:
        config["configurable"].update({k: v for k, v in checkpoint.items() if v is not None})
    return [
        snapshot_json(snapshot)
        async for snapshot in graph.aget_state_history(
            config, filter=metadata or None, limit=limit, before=before_config
        )
    ]


@router.get(
    "/threads/{thread_id}/history", response_model=list[ThreadStateOut], summary="Thread history"
)
async def get_history(
    thread_id: ThreadId,
    manager: RunsDep,
    owner: PrincipalDep,
    limit: Annotated[int, Field(ge=1, le=1000), DIGITS_ONLY, Query()] = 10,
    before: Annotated[str | None, Query(max_length=64, description="A checkpoint id.")] = None,
) -> list[dict[str, Any]]:
    """Return the thread's past states, newest first."""
    return await _history(manager, owner, thread_id, limit, before)


@router.post(
    "/threads/{thread_id}/history", response_model=list[ThreadStateOut], summary="Thread history"
)
async def post_history(
    thread_id: ThreadId, body: HistoryQuery, manager: RunsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the thread's past states, newest first (the SDK's `get_history`).

    `checkpoint` starts the history at that checkpoint (its namespace: a subgraph's
    history); `metadata` keeps the states whose checkpoint metadata has every given
    key and value (`{"source": "update"}`, `{"run_id": ...}`).
    """
    try:
        before = body.before_checkpoint()
    except ValueError as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body", "before"), "msg": str(exc)}]
        ) from None
    checkpoint = body.checkpoint.model_dump(exclude={"thread_id"}) if body.checkpoint else None
    return await _history(
        manager,
        owner,
        thread_id,
        body.limit,
        before,
        metadata=body.metadata,
        checkpoint=checkpoint,
    )


def _checkpoint_config(checkpoint: Any) -> dict[str, Any]:
    """Return the LangGraph configurable of a `CheckpointRef` (the thread id left out)."""
    ref = checkpoint.model_dump(exclude={"thread_id"})
    return {key: value for key, value in ref.items() if value not in (None, {})}


@router.post(
    "/threads/{thread_id}/state/checkpoint",
    response_model=ThreadStateOut,
    summary="Thread state at a checkpoint (SDK form)",
)
async def get_state_at_checkpoint(
    thread_id: ThreadId, body: StateCheckpointRequest, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return the thread's state at the checkpoint in the body (`get_state(checkpoint=...)`).

    With only `checkpoint_ns` (no id) it is the latest state of that namespace.
    """
    thread = await _owned_thread(manager, owner, thread_id)
    graph = _graph_of(manager, thread)
    wanted = body.checkpoint.checkpoint_id or body.checkpoint.checkpoint_ns or "head"
    if graph is None:
        raise NotFound(f"checkpoint {wanted!r} not found")
    config = manager.graph_config(thread_id)
    config["configurable"].update(_checkpoint_config(body.checkpoint))
    try:
        snapshot = await graph.aget_state(config, subgraphs=body.subgraphs)
    except ValueError:  # a namespace that names no subgraph of the graph
        raise NotFound(
            f"checkpoint namespace {body.checkpoint.checkpoint_ns!r} not found"
        ) from None
    if snapshot.config is None or not snapshot.created_at:
        raise NotFound(f"checkpoint {wanted!r} not found")
    return snapshot_json(snapshot)


@router.post(
    "/threads/{thread_id}/state", response_model=StateUpdateOut, summary="Update thread state"
)
async def update_state(
    thread_id: ThreadId, body: StateUpdate, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Update the state as node `as_node` would, through the graph's own `aupdate_state`.

    Reducers apply, and the next run continues from the checkpoint written (with
    `checkpoint`/`checkpoint_id`, a fork from that checkpoint): how an edited post is
    checked again by the same critic. Answers the new checkpoint.
    """
    thread = await _owned_thread(manager, owner, thread_id)
    assistant = manager.assistants.get(str(thread.metadata.get("graph_id", "")))
    if assistant is None:
        raise Conflict(f"thread {thread_id!r} has no graph yet; start a run on it first")
    checkpoint = _checkpoint_config(body.checkpoint) if body.checkpoint else {}
    if body.checkpoint_id:
        checkpoint["checkpoint_id"] = body.checkpoint_id
    if checkpoint and "checkpoint_id" not in checkpoint:
        checkpoint = {}
    written = await manager.update_state(
        thread, assistant, body.values, as_node=body.as_node, checkpoint=checkpoint or None
    )
    return {"checkpoint": written}


@router.post("/threads/{thread_id}/copy", response_model=ThreadOut, summary="Copy a thread")
async def copy_thread(thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep) -> dict[str, Any]:
    """Copy the thread with its whole checkpoint history under a new id (runs stay)."""
    thread = await _owned_thread(manager, owner, thread_id)
    return (await manager.copy_thread(thread)).to_json()
