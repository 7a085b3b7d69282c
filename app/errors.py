"""Errors the service answers, and how every one of them is rendered.

Every error is JSON of one shape, `{"detail": ..., "error": "<code>", "message":
"<one sentence>"}`. `detail` is what FastAPI and LangGraph Platform clients read (a
string, or the list of field errors for a 422); `message` is always a string, and
the first key `langgraph-sdk` reads for its exception text. An unexpected exception
becomes a 500 with an error id that is also in the server log; no traceback,
exception text or submitted value reaches a client.

`RunsError` and its subclasses (`engine.errors`) are what the run engine refuses a request with
(a `QuotaExceeded` is a 429 with `Retry-After`, its `detail` naming the quota);
`install_error_handlers(app)` (called by `app.main.create_app`) renders them, HTTP
exceptions, validation errors and unexpected exceptions in that shape.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

# The engine's refusals, rendered here; re-exported for the routes.
from engine import (
    DATABASE_UNAVAILABLE,
    Conflict,
    Invalid,
    InvalidFields,
    NotFound,
    NotReadyError,
    QuotaExceeded,
    RunsError,
    Unavailable,
)

__all__ = [
    "DATABASE_UNAVAILABLE",
    "Conflict",
    "Invalid",
    "InvalidFields",
    "NotFound",
    "NotReadyError",
    "QuotaExceeded",
    "RunsError",
    "Unavailable",
    "endpoint_routes",
    "error_body",
    "error_response",
    "install_error_handlers",
]

log = logging.getLogger(__name__)

ERROR_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


def error_body(status_code: int, message: str, detail: Any = None) -> dict[str, Any]:
    """Return the service's JSON error body for a status and a client-safe message."""
    return {
        "detail": message if detail is None else detail,
        "error": ERROR_CODES.get(status_code, f"http_{status_code}"),
        "message": message,
    }


def error_response(
    status_code: int,
    message: str,
    detail: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """Return a JSON error response in the service's error shape."""
    return JSONResponse(
        error_body(status_code, message, detail), status_code=status_code, headers=headers
    )


# --- handlers ---------------------------------------------------------------------


async def _http_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    """Render an HTTPException in the service's error shape, keeping its detail."""
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    if isinstance(detail, str):
        message = detail
    elif isinstance(detail, Mapping) and isinstance(detail.get("message"), str):
        message = detail["message"]
    else:
        message = _status_phrase(exc.status_code)
    headers = exc.headers
    if exc.status_code == 405:
        # Starlette names only the methods of the first route matching the path; one
        # FastAPI route serves one method, so the header would list just that one.
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    return error_response(exc.status_code, message, detail, headers=headers)


def allowed_methods(request: Request) -> list[str]:
    """Return every method some route of the app serves at the request's path."""
    methods: set[str] = set()
    for route in _endpoint_routes(request.app.router.routes):
        if route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", ()))
    return sorted(methods)


def endpoint_routes(app: Any) -> Iterator[BaseRoute]:
    """Yield every route with methods of an app, inside included routers too."""
    yield from _endpoint_routes(app.router.routes)


def _endpoint_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Yield the routes with methods, inside routers included with `include_router` too.

    FastAPI (0.16x) keeps an included router as one entry pointing at the original
    router, whose routes carry their full paths (this app includes routers without
    an extra prefix).
    """
    for route in routes:
        if getattr(route, "methods", None):
            yield route
        inner = getattr(getattr(route, "original_router", None), "routes", None)
        if inner:
            yield from _endpoint_routes(inner)


async def _validation_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    """Render a 422 that names each field and rule, without echoing the submitted values."""
    assert isinstance(exc, RequestValidationError)
    errors = [_safe_error(error) for error in exc.errors()]
    return error_response(422, validation_message(errors), errors)


async def _unhandled_exception_handler(request: Request, exc: Exception) -> JSONResponse:
    """Log an unexpected exception under an error id and tell the client only that id."""
    error_id = secrets.token_hex(6)
    log.error(
        "unhandled error %s on %s %s",
        error_id,
        request.method,
        request.url.path,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    return error_response(
        500, f"The server hit an unexpected error (error id {error_id}); it has been logged."
    )


def _safe_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """Keep an error's location, type, message and JSON-safe rule values; drop its input."""
    safe: dict[str, Any] = {
        "type": str(error.get("type", "value_error")),
        "loc": [part if isinstance(part, int) else str(part) for part in error.get("loc", ())],
        "msg": str(error.get("msg", "")),
    }
    ctx = {
        key: value
        for key, value in (error.get("ctx") or {}).items()
        if isinstance(value, str | int | float | bool) and key != "error"
    }
    if error.get("type") == "json_invalid":
        ctx["error"] = str((error.get("ctx") or {}).get("error", ""))[:200]
    if ctx:
        safe["ctx"] = jsonable_encoder(ctx)
    return safe


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """Return one sentence naming every invalid field and the rule it broke."""
    parts = []
    for error in errors[:10]:
        loc = ".".join(str(part) for part in error.get("loc", ())) or "request"
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error") or "JSON decode error"
            position = next((p for p in error.get("loc", ()) if isinstance(p, int)), None)
            where = f" at character {position}" if position is not None else ""
            parts.append(f"body: the body is not valid JSON{where} ({reason})")
        else:
            parts.append(f"{loc}: {error.get('msg', 'invalid value')}")
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return "Invalid request: " + "; ".join(parts) + more


def _status_phrase(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase
    except ValueError:
        return f"HTTP {status_code}"


async def _database_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """Answer 503 when PostgreSQL is unreachable or dropped the connection (no 500, no text)."""
    log.warning(
        "database unavailable on %s %s: %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc,
    )
    return error_response(503, DATABASE_UNAVAILABLE, headers={"Retry-After": "2"})


def database_errors() -> tuple[type[Exception], ...]:
    """Return the driver's errors that mean "PostgreSQL did not answer" (none without it).

    A refused or dropped connection, a pool with no connection to give
    (`PoolTimeout`), a server shutting down: psycopg's `OperationalError` family.
    """
    try:
        from psycopg import OperationalError
        from psycopg_pool import PoolTimeout
    except ImportError:  # the embedded deployment, without the `scale` extra
        return ()
    return (OperationalError, PoolTimeout)


async def _runs_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """Render a `RunsError` in the service's error shape (422s name the field)."""
    assert isinstance(exc, RunsError)
    if isinstance(exc, QuotaExceeded):  # which quota, its limit and when to come back
        quota = {"quota": exc.quota, "limit": exc.limit, "retry_after": exc.retry_after}
        headers = {"Retry-After": str(exc.retry_after)}
        return error_response(429, exc.message, quota, headers=headers)
    if isinstance(exc, InvalidFields):  # answered as a body failing its model would be
        errors = [_safe_error({**e, "loc": ("body", *e["loc"])}) for e in exc.errors]
        return error_response(422, validation_message(errors), errors)
    detail = None
    if exc.status == 422 and exc.field:
        where, _, name = exc.field.rpartition(":")
        loc = [where or "body", *name.split(".")]
        detail = [{"type": "value_error", "loc": loc, "msg": exc.message}]
    return error_response(exc.status, exc.message, detail)


# --- installation -----------------------------------------------------------------


def install_error_handlers(app: FastAPI) -> None:
    """Render every error `app` answers in the service's error shape (call once, in create_app)."""
    app.add_exception_handler(StarletteHTTPException, _http_exception_handler)
    app.add_exception_handler(RequestValidationError, _validation_exception_handler)
    app.add_exception_handler(RunsError, _runs_error_handler)
    for error in database_errors():
        app.add_exception_handler(error, _database_error_handler)
    app.add_exception_handler(Exception, _unhandled_exception_handler)
