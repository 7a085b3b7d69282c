"""Threads: create, read, update metadata, delete, search, and their checkpointed state.

    POST   /threads                         create (if_exists raise | do_nothing)
    GET    /threads/{t}                     one thread (values after its last run)
    PATCH  /threads/{t}                     merge metadata
    DELETE /threads/{t}                     cancel its runs, delete it and its checkpoints
    POST   /threads/search                  filter by metadata, status, ids
    GET    /threads/{t}/state               the latest checkpointed state
    GET    /threads/{t}/state/{checkpoint}  a past state
    GET    /threads/{t}/history             past states, newest first (POST: the SDK's form)

A thread belongs to the API key that created it; another key gets 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import aiosqlite
from fastapi import APIRouter, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot
from pydantic import Field

from app.deps import RunsDep
from app.runs.frames import public_error
from app.runs.manager import Conflict, NotFound, RunManager
from app.runs.serde import to_jsonable
from app.runs.store import ThreadRecord, now
from app.schemas import (
    DIGITS_ONLY,
    ID_PATTERN,
    HistoryRequest,
    QueryBool,
    ThreadCreate,
    ThreadOut,
    ThreadPatch,
    ThreadSearch,
    ThreadStateOut,
)
from app.security import PrincipalDep

router = APIRouter(tags=["threads"])

ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]


async def _owned_thread(manager: RunManager, owner: str, thread_id: str) -> ThreadRecord:
    thread = await manager.store.get_thread(owner, thread_id)
    if thread is None:
        raise NotFound(f"thread {thread_id!r} not found")
    return thread


@router.post("/threads", response_model=ThreadOut, summary="Create a thread")
async def create_thread(
    body: ThreadCreate, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Create a thread (a UUID unless `thread_id` is given)."""
    thread_id = body.thread_id or str(uuid.uuid4())
    existing = await manager.store.get_thread(owner, thread_id)
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
        await manager.store.insert_thread(thread)
    except aiosqlite.IntegrityError:
        raise Conflict(f"thread {thread_id!r} already exists") from None
    return thread.to_json()


@router.post("/threads/search", response_model=list[ThreadOut], summary="Search threads")
async def search_threads(
    body: ThreadSearch, manager: RunsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's threads matching every given filter."""
    threads = await manager.store.search_threads(
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


@router.get("/threads/{thread_id}", response_model=ThreadOut, summary="Get a thread")
async def get_thread(thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep) -> dict[str, Any]:
    """Return one thread."""
    return (await _owned_thread(manager, owner, thread_id)).to_json()


@router.patch("/threads/{thread_id}", response_model=ThreadOut, summary="Update a thread")
async def patch_thread(
    thread_id: ThreadId, body: ThreadPatch, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Merge metadata into the thread's."""
    thread = await _owned_thread(manager, owner, thread_id)
    await manager.store.update_thread_metadata(thread_id, {**thread.metadata, **body.metadata})
    return (await _owned_thread(manager, owner, thread_id)).to_json()


@router.delete("/threads/{thread_id}", status_code=204, summary="Delete a thread")
async def delete_thread(thread_id: ThreadId, manager: RunsDep, owner: PrincipalDep) -> Response:
    """Cancel the thread's runs, then delete it with its runs, logs and checkpoints."""
    await manager.delete_thread(owner, thread_id)
    return Response(status_code=204)


# --------------------------------------------------------------------------- state


def _checkpoint(config: RunnableConfig | None) -> dict[str, Any] | None:
    if not config:
        return None
    configurable = config.get("configurable") or {}
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
        "checkpoint_map": configurable.get("checkpoint_map"),
    }


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
                "checkpoint": _checkpoint(state) if isinstance(state, dict) else None,
                "state": snapshot_json(state) if isinstance(state, StateSnapshot) else None,
                "result": to_jsonable(task.result),
            }
        )
    return {
        "values": to_jsonable(snapshot.values),
        "next": list(snapshot.next),
        "tasks": tasks,
        "checkpoint": _checkpoint(snapshot.config),
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
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
    manager: RunManager, owner: str, thread_id: str, limit: int, before: str | None
) -> list[dict[str, Any]]:
    thread = await _owned_thread(manager, owner, thread_id)
    graph = _graph_of(manager, thread)
    if graph is None:
        return []
    before_config = (
        {"configurable": {"thread_id": thread_id, "checkpoint_id": before}} if before else None
    )
    return [
        snapshot_json(snapshot)
        async for snapshot in graph.aget_state_history(
            manager.graph_config(thread_id), limit=limit, before=before_config
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
    thread_id: ThreadId, body: HistoryRequest, manager: RunsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the thread's past states, newest first (the SDK's `get_history`)."""
    if body.metadata:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "metadata"),
                    "msg": "filtering history by metadata is not supported",
                }
            ]
        )
    try:
        before = body.before_checkpoint()
    except ValueError as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body", "before"), "msg": str(exc)}]
        ) from None
    return await _history(manager, owner, thread_id, body.limit, before)
