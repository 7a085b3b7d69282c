"""Which database work serves an HTTP request: it fails fast while PostgreSQL is away.

The HTTP app marks every request (`app.request_scope.RequestScopeMiddleware` enters
`request_scope`); the pools of `engine.postgres.pool` then make it wait for a connection
briefly instead of up to their `CHECKOUT_TIMEOUT`, so a client gets a 503 in about
a second rather than a hang. Work outside requests (a worker's claims, event
writes, checkpoints) keeps the pool's own timeout and rides out a short outage.
This module imports no driver: the embedded deployment installs the middleware
too, where it changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

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
