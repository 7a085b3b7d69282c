"""Mark every HTTP request, so that the engine's database pools fail fast inside one.

See `engine.request_scope`: while PostgreSQL is away, work that serves a request waits for a
connection about a second instead of the pool's whole checkout timeout.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from engine import request_scope


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
