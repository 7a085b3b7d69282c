"""Threads: create, read, update metadata, delete, search, and their checkpointed state.

    POST   /threads                         create (if_exists raise | do_nothing; ttl)
    GET    /threads/{t}                     one thread (values after its last run;
                                            include=ttl: its TTL)
    PATCH  /threads/{t}                     merge metadata, set a new TTL
    DELETE /threads/{t}                     cancel its runs, delete it and its checkpoints
    POST   /threads/search                  filter by metadata, status, ids
    POST   /threads/count                   how many match metadata and status
    POST   /threads/prune                   delete threads, or keep only their latest state
    GET    /threads/{t}/state               the latest checkpointed state
    GET    /threads/{t}/state/{checkpoint}  a past state
    POST   /threads/{t}/state/checkpoint    a past state, the checkpoint in the body (SDKs)
    POST   /threads/{t}/state               update the state as a node (graph's aupdate_state)
    GET    /threads/{t}/history             past states, newest first (POST: the SDK's form,
                                            with checkpoint and metadata filters)
    POST   /threads/{t}/copy                a new thread with the same checkpoints

A thread belongs to the API key that created it; another key gets 404 (and prune
leaves it alone). Every handler asks the threads service (`app.deps.ThreadsDep`); the
states are read from the checkpoints. TTLs and prunes: docs/retention.md.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import Field

from app.access import READ, WRITE
from app.deps import AuditDep, CallerDep, PrincipalDep, ThreadsDep
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
    ThreadPrune,
    ThreadPruneOut,
    ThreadSearch,
    ThreadStateOut,
    ThreadWithTTLOut,
)

router = APIRouter(tags=["threads"])

ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]


@router.post("/threads", response_model=ThreadOut, summary="Create a thread", dependencies=[WRITE])
async def create_thread(
    body: ThreadCreate, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Create a thread (a UUID unless `thread_id` is given)."""
    thread = await threads.create(
        owner,
        body.thread_id,
        body.metadata or {},
        if_exists=body.if_exists,
        ttl=body.ttl.record() if body.ttl is not None else None,
    )
    return thread.to_json()


@router.post(
    "/threads/prune",
    response_model=ThreadPruneOut,
    summary="Prune threads",
    dependencies=[WRITE],
)
async def prune_threads(
    body: ThreadPrune, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Prune the caller's threads it names: delete them, or keep only their latest state.

    `delete` removes each thread with its runs, logs and checkpoints (its active runs
    cancelled first), as DELETE does; `keep_latest` drops each one's checkpoints but
    the latest, so its state reads the same and a new run continues from it (a
    thread with an active run is skipped). Ids of no thread of the caller's are left
    alone; `pruned_count` counts the threads pruned.
    """
    pruned = await threads.prune(owner, body.thread_ids, body.strategy)
    return {"pruned_count": pruned}


@router.post(
    "/threads/search", response_model=list[ThreadOut], summary="Search threads", dependencies=[READ]
)
async def search_threads(
    body: ThreadSearch, threads: ThreadsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's threads matching every given filter."""
    found = await threads.search(
        owner,
        metadata=body.metadata,
        status=body.status,
        ids=body.ids,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )
    return [thread.to_json() for thread in found]


@router.post("/threads/count", response_model=int, summary="Count threads", dependencies=[READ])
async def count_threads(body: ThreadCount, threads: ThreadsDep, owner: PrincipalDep) -> int:
    """Return how many of the caller's threads match every given filter."""
    return await threads.count(owner, metadata=body.metadata, status=body.status)


@router.get(
    "/threads/{thread_id}",
    response_model=ThreadWithTTLOut,
    response_model_exclude_unset=True,
    summary="Get a thread",
    dependencies=[READ],
)
async def get_thread(
    thread_id: ThreadId,
    threads: ThreadsDep,
    owner: PrincipalDep,
    include: Annotated[
        str | None,
        Query(
            max_length=64,
            pattern=r"^ttl(,ttl)*$",
            description="`ttl`: add the thread's TTL (`ttl`, null when it has none).",
        ),
    ] = None,
) -> dict[str, Any]:
    """Return one thread (with `include=ttl`, its TTL too)."""
    return (await threads.get(owner, thread_id)).to_json(include_ttl=include is not None)


@router.patch(
    "/threads/{thread_id}",
    response_model=ThreadOut,
    summary="Update a thread",
    dependencies=[WRITE],
)
async def patch_thread(
    thread_id: ThreadId, body: ThreadPatch, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Merge metadata into the thread's; with `ttl`, give it a new TTL counted from now."""
    ttl = body.ttl.record() if body.ttl is not None else None
    return (await threads.patch(owner, thread_id, body.metadata, ttl=ttl)).to_json()


@router.delete(
    "/threads/{thread_id}", status_code=204, summary="Delete a thread", dependencies=[WRITE]
)
async def delete_thread(
    thread_id: ThreadId, threads: ThreadsDep, caller: CallerDep, audit: AuditDep
) -> Response:
    """Cancel the thread's runs, then delete it with its runs, logs and checkpoints."""
    await threads.delete(caller.owner, thread_id)
    await audit.record(caller.actor, "thread.delete", subject=caller.owner, target=thread_id)
    return Response(status_code=204)


# --------------------------------------------------------------------------- state


@router.get(
    "/threads/{thread_id}/state",
    response_model=ThreadStateOut,
    summary="Thread state",
    dependencies=[READ],
)
async def get_state(
    thread_id: ThreadId, threads: ThreadsDep, owner: PrincipalDep, subgraphs: QueryBool = False
) -> dict[str, Any]:
    """Return the thread's latest checkpointed state."""
    return await threads.state(owner, thread_id, subgraphs=subgraphs)


@router.get(
    "/threads/{thread_id}/state/{checkpoint_id}",
    response_model=ThreadStateOut,
    summary="Thread state at a checkpoint",
    dependencies=[READ],
)
async def get_state_at(
    thread_id: ThreadId,
    checkpoint_id: Annotated[str, Path(max_length=64)],
    threads: ThreadsDep,
    owner: PrincipalDep,
    subgraphs: QueryBool = False,
) -> dict[str, Any]:
    """Return the thread's state at one checkpoint."""
    return await threads.state_at(
        owner, thread_id, {"checkpoint_id": checkpoint_id}, subgraphs=subgraphs
    )


@router.get(
    "/threads/{thread_id}/history",
    response_model=list[ThreadStateOut],
    summary="Thread history",
    dependencies=[READ],
)
async def get_history(
    thread_id: ThreadId,
    threads: ThreadsDep,
    owner: PrincipalDep,
    limit: Annotated[int, Field(ge=1, le=1000), DIGITS_ONLY, Query()] = 10,
    before: Annotated[str | None, Query(max_length=64, description="A checkpoint id.")] = None,
) -> list[dict[str, Any]]:
    """Return the thread's past states, newest first."""
    return await threads.history(owner, thread_id, limit=limit, before=before)


@router.post(
    "/threads/{thread_id}/history",
    response_model=list[ThreadStateOut],
    summary="Thread history",
    dependencies=[READ],
)
async def post_history(
    thread_id: ThreadId, body: HistoryQuery, threads: ThreadsDep, owner: PrincipalDep
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
    return await threads.history(
        owner,
        thread_id,
        limit=body.limit,
        before=before,
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
    dependencies=[READ],
)
async def get_state_at_checkpoint(
    thread_id: ThreadId, body: StateCheckpointRequest, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return the thread's state at the checkpoint in the body (`get_state(checkpoint=...)`).

    With only `checkpoint_ns` (no id) it is the latest state of that namespace.
    """
    return await threads.state_at(
        owner, thread_id, _checkpoint_config(body.checkpoint), subgraphs=body.subgraphs
    )


@router.post(
    "/threads/{thread_id}/state",
    response_model=StateUpdateOut,
    summary="Update thread state",
    dependencies=[WRITE],
)
async def update_state(
    thread_id: ThreadId, body: StateUpdate, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Update the state as node `as_node` would, through the graph's own `aupdate_state`.

    Reducers apply, and the next run continues from the checkpoint written (with
    `checkpoint`/`checkpoint_id`, a fork from that checkpoint): how an edited post is
    checked again by the same critic. Answers the new checkpoint.
    """
    checkpoint = _checkpoint_config(body.checkpoint) if body.checkpoint else {}
    if body.checkpoint_id:
        checkpoint["checkpoint_id"] = body.checkpoint_id
    if checkpoint and "checkpoint_id" not in checkpoint:
        checkpoint = {}
    written = await threads.update_state(
        owner, thread_id, body.values, as_node=body.as_node, checkpoint=checkpoint or None
    )
    return {"checkpoint": written}


@router.post(
    "/threads/{thread_id}/copy",
    response_model=ThreadOut,
    summary="Copy a thread",
    dependencies=[WRITE],
)
async def copy_thread(
    thread_id: ThreadId, threads: ThreadsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Copy the thread with its whole checkpoint history under a new id (runs stay)."""
    return (await threads.copy(owner, thread_id)).to_json()
