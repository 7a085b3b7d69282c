"""Which database work serves an HTTP request: it fails fast while PostgreSQL is away.

`RequestScopeMiddleware` marks every HTTP request (`in_request`); the pools of
`app.db.pool` then make it wait for a connection briefly instead of up to their
`CHECKOUT_TIMEOUT`, so a client gets a 503 in about a second rather than a hang.
Work outside requests (a worker's claims, event writes, checkpoints) keeps the
pool's own timeout and rides out a short outage. This module imports no driver:
the embedded deployment installs the middleware too, where it changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

_in_request: ContextVar[bool] = ContextVar("atelier_db_in_request", default=False)


def in_request() -> bool:
    """Whether the current code serves an HTTP request (see `request_scope`)."""
    return _in_request.get()


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """Mark the code inside as serving an HTTP request.

    Tasks and threads started inside (`asyncio.create_task`, `asyncio.to_thread`)
    inherit the mark, a streaming response's body included.
    """
    token = _in_request.set(True)
    try:
        yield
    finally:
        _in_request.reset(token)


class RequestScopeMiddleware:
    """Run every HTTP request inside `request_scope`."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap `app`."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request marked as one."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_scope():
            await self.app(scope, receive, send)
