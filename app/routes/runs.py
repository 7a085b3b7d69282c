"""Runs: create (background, streamed, waited), list, get, join, stream, cancel.

    POST /threads/{t}/runs            background run → the run record
    POST /threads/{t}/runs/stream     run and stream it (SSE)
    POST /threads/{t}/runs/wait       run and answer its final values
    POST /runs, /runs/stream, /runs/wait        the same on a new thread
    GET  /threads/{t}/runs            the thread's runs, newest first
    GET  /threads/{t}/runs/{r}        one run
    DELETE /threads/{t}/runs/{r}      delete a finished run and its log
    GET  /threads/{t}/runs/{r}/stream join the stream (replay after a cursor, then live)
    GET  /threads/{t}/runs/{r}/join   wait for the run and answer its final values
    POST /threads/{t}/runs/{r}/cancel cancel: action=interrupt|rollback, wait=0|1
    GET  /threads/{t}/runs/{r}/webhooks the run's webhook deliveries and their attempts

Handlers only parse, record and subscribe: the run executes in the engine's
task and every stream response follows its event log (app/sse.py). A handler
reads the body in the Platform dialect and turns it into the engine's `RunSpec`
(`run_spec`, the one place); the runs service checks it completely — input,
command, options against the assistant's graph and contract, Idempotency-Key —
before anything is written, so a refused request leaves no thread or run behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import Field, StringConstraints

from app.access import READ, WRITE
from app.deps import PrincipalDep, RunsDep, SettingsDep, WebhooksDep
from app.metrics import AtelierMetrics, MetricsDep
from app.schemas import (
    DIGITS_ONLY,
    ID_PATTERN,
    IDEMPOTENCY_KEY_RE,
    MAX_OFFSET,
    STREAM_EXAMPLE,
    QueryBool,
    RunCreate,
    RunOut,
)
from app.sse import SSE_HEADERS, DisconnectAwareResponse, follow_run, parse_cursor
from engine import (
    STREAM_MODES,
    CancelAction,
    RunRecord,
    RunSpec,
    RunsService,
    RunStatus,
    dumps,
    trace_headers,
)

router = APIRouter(tags=["runs"])

ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]
RunId = Annotated[str, Path(pattern=ID_PATTERN, description="Run id.")]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=255,
        description="A retried POST with the same key returns the same run (1-255 "
        "printable ASCII characters).",
    ),
]
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=20,
        description="Id of the last frame the client has; the stream resumes after it.",
    ),
]

STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id:` (per-run sequence number), `event:` and "
        "JSON `data:` per frame; `metadata` first, `end` last (after `error` on failure), "
        "`: heartbeat` comments while idle. `custom` frames carry the pipeline events "
        "(`PipelineEvent`).",
        "content": {
            "text/event-stream": {
                "schema": {"$ref": "#/components/schemas/StreamFrame"},
                "example": STREAM_EXAMPLE,
            }
        },
        "headers": {
            "Content-Location": {
                "description": "The run: /threads/{thread_id}/runs/{run_id}.",
                "schema": {"type": "string"},
            },
            "Location": {
                "description": "Where to rejoin (with Last-Event-ID), when stream_resumable.",
                "schema": {"type": "string"},
            },
        },
    }
}
WAIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The thread's values after the run (blank lines may precede the "
        'JSON while the run is going); `{"__error__": {"error", "message"}}` when it '
        "failed, `__interrupt__` when it paused for an answer.",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


# --------------------------------------------------------------------------- helpers


_CHECKPOINT_KEYS = ("checkpoint_id", "checkpoint_ns", "checkpoint_map")


def run_spec(
    request: Request,
    owner: str,
    thread_id: str | None,
    body: RunCreate,
    idempotency_key: str | None,
) -> RunSpec:
    """Return the engine's run request for a body of the run-creating endpoints.

    The start checkpoint (`checkpoint`, `checkpoint_id` or `config.configurable`'s
    `checkpoint_id`) leaves `configurable`, so only the run's start uses it. The
    request's base URL goes with it: a run links its images with it (behind a proxy,
    the Host header the proxy forwards). So do its W3C `traceparent` and `tracestate`
    headers: with tracing on, the run's trace continues the caller's.
    """
    config = body.config.model_dump(exclude_defaults=True) if body.config else {}
    configurable = config.get("configurable") or {}
    start = body.start_checkpoint(configurable)
    for key in _CHECKPOINT_KEYS:
        configurable.pop(key, None)
    return RunSpec(
        assistant_id=body.assistant_id,
        owner=owner,
        thread_id=thread_id,
        input=body.input,
        command=body.command.model_dump(exclude_none=True) if body.command else None,
        stream_mode=tuple(body.modes),
        stream_subgraphs=body.stream_subgraphs,
        stream_resumable=body.stream_resumable,
        on_disconnect=body.on_disconnect,
        config=config,
        checkpoint=start,
        interrupt_before=body.interrupt_before,
        interrupt_after=body.interrupt_after,
        durability=body.graph_durability(),
        on_completion=body.on_completion,
        after_seconds=body.after_seconds,
        webhook=body.webhook or None,
        metadata=body.metadata or {},
        multitask_strategy=body.multitask_strategy,
        if_not_exists=body.if_not_exists,
        idempotency_key=idempotency_key,
        base_url=str(request.base_url),
        trace_headers=trace_headers(request.headers),
    )


async def _create(
    request: Request,
    runs: RunsService,
    owner: str,
    thread_id: str | None,
    body: RunCreate,
    idempotency_key: str | None,
) -> tuple[RunRecord, bool]:
    """Hand the run request to the runs service, which checks, records and starts it."""
    if idempotency_key is not None and not IDEMPOTENCY_KEY_RE.match(idempotency_key):
        raise _header_error(
            "Idempotency-Key", "Idempotency-Key must be 1-255 printable ASCII characters"
        )
    return await runs.create(run_spec(request, owner, thread_id, body, idempotency_key))


def _run_headers(run: RunRecord, *, resumable: bool) -> dict[str, str]:
    path = f"/threads/{run.thread_id}/runs/{run.run_id}"
    headers = {"Content-Location": path}
    if resumable:
        headers["Location"] = f"{path}/stream"
    return headers


def _stream_response(
    metrics: AtelierMetrics | None,
    manager: RunsService,
    run: RunRecord,
    *,
    after: int,
    modes: list[str] | None,
    heartbeat: float,
    cancel_on_disconnect: bool,
) -> DisconnectAwareResponse:
    body = follow_run(
        manager,
        run.run_id,
        run.thread_id,
        after=after,
        modes=modes,
        heartbeat=heartbeat,
        on_open=metrics.sse_subscribed if metrics else None,
        on_close=metrics.sse_unsubscribed if metrics else None,
    )
    run_id = run.run_id
    return DisconnectAwareResponse(
        body,
        media_type="text/event-stream",
        headers={
            **SSE_HEADERS,
            **_run_headers(run, resumable=run.options.stream_resumable),
        },
        on_disconnect=(lambda: manager.cancel_soon(run_id)) if cancel_on_disconnect else None,
    )


async def _result_body(manager: RunsService, run_id: str, heartbeat: float) -> AsyncIterator[bytes]:
    """Yield blank lines while the run goes on, then its result as JSON."""
    joining = asyncio.ensure_future(manager.join(run_id))
    try:
        while True:
            done, _ = await asyncio.wait({joining}, timeout=heartbeat)
            if done:
                break
            yield b"\n"  # JSON allows leading whitespace; keeps proxies from timing out
        yield dumps(joining.result()).encode()
    finally:
        joining.cancel()


def _wait_response(
    manager: RunsService, run: RunRecord, heartbeat: float, *, cancel_on_disconnect: bool
) -> DisconnectAwareResponse:
    run_id = run.run_id
    return DisconnectAwareResponse(
        _result_body(manager, run_id, heartbeat),
        media_type="application/json",
        headers=_run_headers(run, resumable=False),
        on_disconnect=(lambda: manager.cancel_soon(run_id)) if cancel_on_disconnect else None,
    )


# --------------------------------------------------------------------------- create


@router.post(
    "/threads/{thread_id}/runs",
    response_model=RunOut,
    summary="Start a background run",
    dependencies=[WRITE],
)
async def create_run(
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
    manager: RunsDep,
    owner: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Start a run on a thread and answer its record at once."""
    run, _ = await _create(request, manager, owner, thread_id, body, idempotency_key)
    response.headers.update(_run_headers(run, resumable=body.stream_resumable))
    return run.to_json()


@router.post(
    "/runs",
    response_model=RunOut,
    summary="Start a background run on a new thread",
    dependencies=[WRITE],
)
async def create_threadless_run(
    request: Request,
    body: RunCreate,
    manager: RunsDep,
    owner: PrincipalDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Start a run on a new thread and answer its record at once."""
    run, _ = await _create(request, manager, owner, None, body, idempotency_key)
    response.headers.update(_run_headers(run, resumable=body.stream_resumable))
    return run.to_json()


async def _stream_new_run(
    request: Request,
    manager: RunsService,
    metrics: AtelierMetrics,
    settings: Any,
    owner: str,
    thread_id: str | None,
    body: RunCreate,
    idempotency_key: str | None,
    last_event_id: str | None,
) -> DisconnectAwareResponse:
    try:
        after = parse_cursor(last_event_id, None)
    except ValueError as exc:
        raise _header_error("Last-Event-ID", str(exc)) from None
    run, _ = await _create(request, manager, owner, thread_id, body, idempotency_key)
    return _stream_response(
        metrics,
        manager,
        run,
        after=after,
        modes=None,
        heartbeat=settings.sse_heartbeat_interval,
        cancel_on_disconnect=run.options.on_disconnect == "cancel",
    )


@router.post(
    "/threads/{thread_id}/runs/stream",
    summary="Start a run and stream it",
    response_class=DisconnectAwareResponse,
    responses=STREAM_RESPONSES,
    dependencies=[WRITE],
)
async def stream_run(
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
    manager: RunsDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
    last_event_id: LastEventId = None,
) -> DisconnectAwareResponse:
    """Start a run on a thread and stream its frames (the main call)."""
    return await _stream_new_run(
        request, manager, metrics, settings, owner, thread_id, body, idempotency_key, last_event_id
    )


@router.post(
    "/runs/stream",
    summary="Start a run on a new thread and stream it",
    response_class=DisconnectAwareResponse,
    responses=STREAM_RESPONSES,
    dependencies=[WRITE],
)
async def stream_threadless_run(
    request: Request,
    body: RunCreate,
    manager: RunsDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
    last_event_id: LastEventId = None,
) -> DisconnectAwareResponse:
    """Start a run on a new thread and stream its frames."""
    return await _stream_new_run(
        request, manager, metrics, settings, owner, None, body, idempotency_key, last_event_id
    )


@router.post(
    "/threads/{thread_id}/runs/wait",
    summary="Run and wait for the result",
    response_class=DisconnectAwareResponse,
    responses=WAIT_RESPONSES,
    dependencies=[WRITE],
)
async def wait_run(
    request: Request,
    thread_id: ThreadId,
    body: RunCreate,
    manager: RunsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> DisconnectAwareResponse:
    """Start a run on a thread and answer the thread's values once it ends."""
    run, _ = await _create(request, manager, owner, thread_id, body, idempotency_key)
    return _wait_response(
        manager,
        run,
        settings.sse_heartbeat_interval,
        cancel_on_disconnect=body.on_disconnect == "cancel",
    )


@router.post(
    "/runs/wait",
    summary="Run on a new thread and wait for the result",
    response_class=DisconnectAwareResponse,
    responses=WAIT_RESPONSES,
    dependencies=[WRITE],
)
async def wait_threadless_run(
    request: Request,
    body: RunCreate,
    manager: RunsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
) -> DisconnectAwareResponse:
    """Start a run on a new thread and answer its values once it ends."""
    run, _ = await _create(request, manager, owner, None, body, idempotency_key)
    return _wait_response(
        manager,
        run,
        settings.sse_heartbeat_interval,
        cancel_on_disconnect=body.on_disconnect == "cancel",
    )


# --------------------------------------------------------------------------- read


@router.get(
    "/threads/{thread_id}/runs",
    response_model=list[RunOut],
    summary="List runs",
    dependencies=[READ],
)
async def list_runs(
    thread_id: ThreadId,
    manager: RunsDep,
    owner: PrincipalDep,
    limit: Annotated[int, Field(ge=1, le=1000), DIGITS_ONLY, Query()] = 10,
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query()] = 0,
    status: RunStatus | None = None,
) -> list[dict[str, Any]]:
    """List a thread's runs, newest first."""
    runs = await manager.for_thread(owner, thread_id, limit=limit, offset=offset, status=status)
    return [run.to_json() for run in runs]


@router.get(
    "/threads/{thread_id}/runs/{run_id}",
    response_model=RunOut,
    summary="Get a run",
    dependencies=[READ],
)
async def get_run(
    thread_id: ThreadId, run_id: RunId, manager: RunsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Return one run record."""
    return (await manager.get(owner, thread_id, run_id)).to_json()


@router.get(
    "/threads/{thread_id}/runs/{run_id}/webhooks",
    summary="List a run's webhook deliveries",
    responses={200: {"content": {"application/json": {"schema": {"type": "array"}}}}},
    dependencies=[READ],
)
async def run_webhooks(
    thread_id: ThreadId, run_id: RunId, webhooks: WebhooksDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the run's webhook deliveries, each with every attempt (docs "Webhooks")."""
    return await webhooks.for_run(owner, thread_id, run_id)


@router.delete(
    "/threads/{thread_id}/runs/{run_id}",
    status_code=204,
    summary="Delete a run",
    dependencies=[WRITE],
)
async def delete_run(
    thread_id: ThreadId, run_id: RunId, manager: RunsDep, owner: PrincipalDep
) -> Response:
    """Delete a finished run and its event log (cancel an active one first)."""
    await manager.delete(owner, thread_id, run_id)
    return Response(status_code=204)


def _header_error(name: str, message: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "value_error", "loc": ("header", name), "msg": message}]
    )


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    summary="Join a run's stream",
    response_class=DisconnectAwareResponse,
    responses=STREAM_RESPONSES,
    dependencies=[READ],
)
async def join_stream(
    thread_id: ThreadId,
    run_id: RunId,
    manager: RunsDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
    last_event_id_header: LastEventId = None,
    last_event_id: Annotated[
        str | None, Query(max_length=20, description="Same as the Last-Event-ID header.")
    ] = None,
    stream_mode: Annotated[
        list[Annotated[str, StringConstraints(max_length=32)]] | None,
        Query(max_length=len(STREAM_MODES), description="Only these of the run's stream modes."),
    ] = None,
    cancel_on_disconnect: QueryBool = False,
) -> DisconnectAwareResponse:
    """Replay a run's frames after the cursor, then follow it live until its end.

    Without a cursor the whole stream is replayed from its first frame.
    """
    try:
        after = parse_cursor(last_event_id_header, last_event_id)
    except ValueError as exc:
        raise _header_error("Last-Event-ID", str(exc)) from None
    run = await manager.get(owner, thread_id, run_id)
    modes = [m for m in (stream_mode or []) if m]
    run_modes = list(run.options.stream_mode)
    for mode in modes:
        if mode not in STREAM_MODES or mode not in run_modes:
            raise RequestValidationError(
                [
                    {
                        "type": "value_error",
                        "loc": ("query", "stream_mode"),
                        "msg": f"stream_mode {mode!r} is not one of the run's modes {run_modes}",
                    }
                ]
            )
    return _stream_response(
        metrics,
        manager,
        run,
        after=after,
        modes=modes or None,
        heartbeat=settings.sse_heartbeat_interval,
        cancel_on_disconnect=cancel_on_disconnect,
    )


@router.get(
    "/threads/{thread_id}/runs/{run_id}/join",
    summary="Wait for a run's result",
    response_class=DisconnectAwareResponse,
    responses=WAIT_RESPONSES,
    dependencies=[READ],
)
async def join_run(
    thread_id: ThreadId,
    run_id: RunId,
    manager: RunsDep,
    settings: SettingsDep,
    owner: PrincipalDep,
) -> DisconnectAwareResponse:
    """Wait until the run ends and answer the thread's values (or its error)."""
    run = await manager.get(owner, thread_id, run_id)
    return _wait_response(manager, run, settings.sse_heartbeat_interval, cancel_on_disconnect=False)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    response_model=RunOut,
    summary="Cancel a run",
    responses={202: {"description": "Cancellation requested (wait=0)."}},
    dependencies=[WRITE],
)
async def cancel_run(
    thread_id: ThreadId,
    run_id: RunId,
    manager: RunsDep,
    owner: PrincipalDep,
    response: Response,
    action: CancelAction = "interrupt",
    wait: QueryBool = False,
) -> dict[str, Any]:
    """Cancel a pending or running run.

    `interrupt` keeps what the run checkpointed (status interrupted); `rollback`
    also deletes the checkpoints it wrote. With `wait=1` the answer comes once the
    run has stopped.
    """
    run = await manager.get(owner, thread_id, run_id)
    run = await manager.cancel(run, action, wait=wait)
    response.status_code = 200 if wait else 202
    return run.to_json()
