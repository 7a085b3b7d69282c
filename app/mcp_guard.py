"""`/mcp`'s checks of `Origin` and `Host`, against DNS rebinding.

The MCP Streamable HTTP transport requires a server to validate `Origin`: a page
a browser loaded from another site must not drive the tools. `McpOriginGuard`
wraps the MCP endpoint and answers 403 in the service's error shape when

* the request carries an `Origin` (a browser's) that is not in CORS_ORIGINS
  (`*` there allows any, as for CORS). A request without `Origin` is a
  non-browser client's (the `mcp` SDK, an IDE) and passes;
* the service runs open (no AUTH_API_KEYS) and the `Host` header names neither a
  loopback host (`localhost`, 127.0.0.0/8, `[::1]`, any port) nor one of
  MCP_ALLOWED_HOSTS. A page whose name an attacker rebound to this server's
  address sends that name as `Host`, and with `Origin` its own origin: only the
  `Host` check tells it apart. With API keys such a page holds no key, so the
  `Host` is not checked (a proxy may name the service as it likes).

The `mcp` SDK's `TransportSecuritySettings` check both headers too, but only
together (no `Origin`-only mode for a keyed service behind a proxy), by exact
string (no `*`), and answer a plain-text 421 or 403; hence this small guard.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import error_response

FOREIGN_ORIGIN = (
    "A browser page may call /mcp only from an origin in CORS_ORIGINS (this request's "
    "Origin is not one of them): DNS rebinding protection."
)
FOREIGN_HOST = (
    "This service runs without API keys, so /mcp answers only requests addressed to a "
    "loopback host (localhost, 127.0.0.1, [::1]) or to one in MCP_ALLOWED_HOSTS: DNS "
    "rebinding protection."
)
#: Host names that always mean this machine (browsers never ask DNS for them).
LOOPBACK_NAMES = frozenset({"localhost"})


def split_host(value: str) -> tuple[str, str | None]:
    """Return the host (lower case, an IPv6 address without brackets) and port of a Host value."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        rest = value[end + 1 :]
        return value[1:end], rest[1:] if rest.startswith(":") else None
    host, colon, port = value.partition(":")
    return host, port if colon else None


def is_loopback(host: str) -> bool:
    """Whether a host (as `split_host` returns it) names this machine's loopback."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class McpOriginGuard:
    """Answer 403 to a request from a foreign origin or, open, to a foreign host (see above)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_origins: Iterable[str],
        check_host: bool,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        """Guard `app`.

        Args:
            app: The MCP endpoint.
            allowed_origins: CORS_ORIGINS (`*`: any origin).
            check_host: Whether the `Host` must be loopback or listed (an open service).
            allowed_hosts: MCP_ALLOWED_HOSTS: `host` (any port) or `host:port`.
        """
        self.app = app
        origins = {origin.lower() for origin in allowed_origins}
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)
        self.check_host = check_host
        self.hosts = frozenset(split_host(entry) for entry in allowed_hosts)

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether a request's `Origin` header (None: absent) may call."""
        return origin is None or self.any_origin or origin.strip().lower() in self.origins

    def host_allowed(self, value: str | None) -> bool:
        """Whether a request's `Host` header may be answered (always, unless `check_host`)."""
        if not self.check_host:
            return True
        if not value:
            return False
        host, port = split_host(value)
        return is_loopback(host) or (host, None) in self.hosts or (host, port) in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a foreign origin or host with 403; pass anything else on."""
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            if not self.origin_allowed(headers.get("origin")):
                await error_response(403, FOREIGN_ORIGIN)(scope, receive, send)
                return
            if not self.host_allowed(headers.get("host")):
                await error_response(403, FOREIGN_HOST)(scope, receive, send)
                return
        await self.app(scope, receive, send)
