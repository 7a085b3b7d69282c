"""Who may call the service and how much they may send.

`install_security(app, settings)` wires three things into the app, outermost first:

1. **CORS** (Starlette's `CORSMiddleware`), only for the `CORS_ORIGINS` allowlist;
   none by default. Preflights are answered before authentication, as browsers
   send them without credentials.
2. **API keys** (`AuthMiddleware`): every request outside `PUBLIC_PATHS` must carry
   one of `AUTH_API_KEYS` as `Authorization: Bearer <key>` or `X-Api-Key: <key>`,
   or it gets 401 before any route runs. It is a middleware rather than a route
   dependency so that a route nobody remembered to protect is protected anyway
   (fail closed). A presented key is hashed and compared with `secrets.compare_digest`
   against every configured key's hash, without stopping at a match, so neither the
   keys' contents nor their lengths nor which one matched show in the timing. With no
   key configured the service runs open: a warning is logged at start-up and /info
   reports `"auth": "open"`.
3. **Body limit** (`BodyLimitMiddleware`): a pure ASGI middleware counting the body
   bytes actually received, so a chunked body or a lying `Content-Length` cannot get
   past `MAX_BODY_BYTES` (POST /assets gets room for `MAX_UPLOAD_BYTES` as base64).
   Past the limit the client gets 413 and the route's response, if any, is dropped.
   Starlette's own `RequestBodyLimitMiddleware` does the counting the same way but
   answers a bare "Content Too Large" and knows one limit per route at import time;
   ours names the limit and takes it from settings.
Their refusals (401, 403, 413) use the service's error shape (`app.errors`).

One exception to the key: a GET (or HEAD) of `/assets/{id}` whose `sig` query parameter
is that asset's signature (`providers.asset_links`) is served without a key, so a
browser's `<img>` loads the image links in posts; a `sig` that is not the one for
that asset gets 403. Only that one asset is let through, never another path.

Managed keys (`POST /keys`, `atelier keys create`; `engine.keys`) are checked after
the `AUTH_API_KEYS` ones: a presented `atl_…` secret is looked up by its digest in the
database (`engine.KeysService.authenticate`, trusted for at most a second, so a
revoked or expired key is refused on every replica within about a second; the 401
says which). They need a keyed service: with no `AUTH_API_KEYS` the service runs open
and every caller is `anonymous`, whatever it presents.

Routes learn the caller through `app.deps.CallerDep` (`get_caller`): a `Caller`, its
owner id, role (`admin`, `member`, `read-only`; `AUTH_API_KEYS` keys and open mode's
anonymous caller are admins), kind and quota overrides; `PrincipalDep`
(`get_principal`) is its owner id alone: `key_` and 24 hex characters of an
HMAC-SHA256 of the key (stable across restarts and key reordering, not reversible
to the key), or `anonymous` when the service is open. Threads and runs store it so
another key cannot see them. What each role may call is declared per route
(`app.access`). See docs/keys.md.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from fastapi import FastAPI, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import DATABASE_UNAVAILABLE, error_response
from core.settings import Settings
from engine import (
    ANONYMOUS,
    Actor,
    Engine,
    KeyRecord,
    KeyRole,
    KeysService,
    is_key_secret,
    owner_id_for,
    utc_now,
)
from providers.asset_links import AssetLinks, signature_of

log = logging.getLogger(__name__)

PRINCIPAL_STATE_KEY = "principal"
"""Key under `request.state` (the ASGI scope's "state") holding the caller's owner id."""
CALLER_STATE_KEY = "caller"
"""Key under `request.state` holding the `Caller`."""
#: How a caller was authenticated: a managed key, an AUTH_API_KEYS key, or none (open).
CallerKind = Literal["managed", "bootstrap", "open"]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: an owner id, a role, and the quota overrides of a managed key."""

    #: The owner id its things are recorded under (a key's id; `anonymous` when open).
    owner: str
    role: KeyRole
    kind: CallerKind
    #: A managed key's quota overrides (`engine.QUOTA_NAMES`); empty: the defaults.
    quotas: Mapping[str, int | float | None] = field(default_factory=dict)
    #: A managed key's name.
    name: str | None = None

    @property
    def key_id(self) -> str:
        """The caller's key id (its owner id)."""
        return self.owner

    @property
    def actor(self) -> Actor:
        """The caller as the audit trail names it."""
        return Actor(self.owner, self.role)

    @classmethod
    def of_key(cls, record: KeyRecord) -> Caller:
        """Return the caller a managed key authenticates."""
        return cls(record.key_id, record.role, "managed", dict(record.quotas), record.name)


#: The caller of an open service.
OPEN_CALLER = Caller(ANONYMOUS, "admin", "open")

#: Paths anyone may call: probes, the API's own description and the console page
#: (which asks for a key before it calls anything else).
PUBLIC_PATHS: frozenset[str] = frozenset(
    {"/", "/ok", "/health", "/ready", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
)
PUBLIC_PREFIXES: tuple[str, ...] = ("/console/",)
#: Also public: each assistant's A2A agent card (app/a2a.py). A2A clients fetch it before
#: they call, to learn where to call and which key to present (its security schemes);
#: it names no thread, run or key.
PUBLIC_PATTERN = re.compile(r"^/a2a/[^/]+/\.well-known/agent-card\.json$")

#: Routes whose body may be larger than MAX_BODY_BYTES (see `upload_body_limit`).
UPLOAD_ROUTES: frozenset[tuple[str, str]] = frozenset({("POST", "/assets")})

#: Headers longer than this cannot hold a key (keys are at most 256 characters).
_MAX_CREDENTIAL_CHARS = 1024

#: The one path a signed link may open: an asset by id (GET or HEAD).
_ASSET_PATH = re.compile(r"^/assets/(?P<asset_id>[0-9a-f]{32})$")
_BAD_SIGNATURE = "The image link's signature is not valid for this asset."

_UNAUTHORIZED = (
    "A valid API key is required: send it as 'Authorization: Bearer <key>' or 'X-Api-Key: <key>'."
)
_REVOKED = "This API key was revoked; ask an admin for a new one."
_EXPIRED = "This API key has expired; ask an admin for a new one."


# --- API keys ---------------------------------------------------------------------


class ApiKeys:
    """The configured API keys, kept only as hashes, and the check of a presented key."""

    def __init__(self, keys: Iterable[SecretStr | str]) -> None:
        """Hash every key once; the plain keys are not kept."""
        self._entries: list[tuple[bytes, str]] = []
        for key in keys:
            plain = key.get_secret_value() if isinstance(key, SecretStr) else key
            self._entries.append((_digest(plain), owner_id_for(plain)))

    @property
    def open(self) -> bool:
        """Whether no key is configured, so every caller is let in as anonymous."""
        return not self._entries

    def identify(self, presented: str | None) -> str | None:
        """Return the owner id of a presented key, or None when it matches no key.

        The presented key's hash is compared with every configured key's hash in
        constant time, and the loop never stops early.
        """
        if not presented or len(presented) > _MAX_CREDENTIAL_CHARS:
            return None
        candidate = _digest(presented)
        owner: str | None = None
        for digest, entry_owner in self._entries:
            if secrets.compare_digest(candidate, digest):
                owner = entry_owner
        return owner

    def authenticate(self, headers: Headers) -> Caller | None:
        """Return the caller an AUTH_API_KEYS key (or open mode) makes; None: neither."""
        if self.open:
            return OPEN_CALLER
        for presented in presented_keys(headers):
            owner = self.identify(presented)
            if owner is not None:
                return Caller(owner, "admin", "bootstrap")
        return None


async def managed_caller(keys: KeysService, headers: Headers) -> tuple[Caller | None, str]:
    """Return the caller a managed key makes, or None and why it was refused.

    Only credentials shaped like a managed key's secret are looked up.
    """
    refusal = _UNAUTHORIZED
    for presented in presented_keys(headers):
        if not is_key_secret(presented):
            continue
        record = await keys.authenticate(presented)
        if record is None:
            continue
        state = record.state(utc_now())
        if state == "active":
            return Caller.of_key(record), refusal
        refusal = _REVOKED if state == "revoked" else _EXPIRED
    return None, refusal


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def presented_keys(headers: Headers) -> list[str]:
    """Return the keys a request presents: its bearer token, then its X-Api-Key."""
    keys: list[str] = []
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        keys.append(token.strip())
    api_key = headers.get("x-api-key", "").strip()
    if api_key:
        keys.append(api_key)
    return keys


def is_public(path: str) -> bool:
    """Return whether a path is served without an API key."""
    return (
        path in PUBLIC_PATHS
        or path.startswith(PUBLIC_PREFIXES)
        or PUBLIC_PATTERN.match(path) is not None
    )


def signed_asset(scope: Scope, links: AssetLinks | None) -> bool | None:
    """Tell whether a request is a signed asset link: True (valid), False (bad `sig`), None.

    None: not a GET/HEAD of `/assets/{id}` with a `sig`, or no links are signed.
    """
    if links is None or scope["method"] not in ("GET", "HEAD"):
        return None
    matched = _ASSET_PATH.match(scope["path"])
    query = scope.get("query_string", b"").decode("latin-1")
    signature = signature_of(query) if matched else None
    if matched is None or signature is None:
        return None
    return links.verify(matched["asset_id"], signature)


class AuthMiddleware:
    """Refuse requests without a valid API key (401) and record the caller."""

    def __init__(
        self,
        app: ASGIApp,
        keys: ApiKeys,
        links: AssetLinks | None = None,
        managed: Callable[[], KeysService | None] | None = None,
    ) -> None:
        """Wrap `app`, checking requests against `keys` (and asset links against `links`).

        Args:
            app: The app.
            keys: The AUTH_API_KEYS keys.
            links: The asset link signer (None: no signed links).
            managed: Returns the managed keys (None while the engine is not open);
                None: managed keys are not checked (open mode).
        """
        self.app = app
        self.keys = keys
        self.links = links
        self.managed = managed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate an HTTP request, then pass it on or answer 401."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        caller = self.keys.authenticate(headers)
        refusal = _UNAUTHORIZED
        service = self.managed() if caller is None and self.managed is not None else None
        if service is not None:
            try:
                caller, refusal = await managed_caller(service, headers)
            except Exception:  # the database did not answer: no key can be checked now
                log.warning("could not look up an API key", exc_info=True)
                if not is_public(scope["path"]):
                    await error_response(503, DATABASE_UNAVAILABLE, headers={"Retry-After": "2"})(
                        scope, receive, send
                    )
                    return
        if caller is None and not is_public(scope["path"]):
            signed = signed_asset(scope, self.links)
            if signed is True:
                await self.app(scope, receive, send)
                return
            if signed is False:
                await error_response(403, _BAD_SIGNATURE)(scope, receive, send)
                return
            response = error_response(
                401, refusal, headers={"WWW-Authenticate": 'Bearer realm="atelier"'}
            )
            await response(scope, receive, send)
            return
        if caller is not None:
            state = scope.setdefault("state", {})
            state[CALLER_STATE_KEY] = caller
            state[PRINCIPAL_STATE_KEY] = caller.owner
        await self.app(scope, receive, send)


# Declared for the OpenAPI document only (Swagger's and Apifox's "Authorize" button);
# `AuthMiddleware` has already checked the key by the time these run.
_bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API key (an AUTH_API_KEYS key or a managed `atl_…` key) as a bearer token.",
)
_api_key_scheme = APIKeyHeader(
    name="X-Api-Key",
    auto_error=False,
    scheme_name="apiKey",
    description="An API key (an AUTH_API_KEYS key or a managed `atl_…` key).",
)


def caller_of(request: Request) -> Caller | None:
    """Return the caller `AuthMiddleware` recorded for a request (None: it recorded none).

    Falls back to checking the AUTH_API_KEYS key itself when the middleware did not
    run (an app built without `install_security`).
    """
    caller = request.scope.get("state", {}).get(CALLER_STATE_KEY)
    if isinstance(caller, Caller):
        return caller
    keys = getattr(request.app.state, "api_keys", None)
    if keys is None:
        keys = ApiKeys(request.app.state.settings.auth_api_keys)
    found: Caller | None = keys.authenticate(request.headers)
    return found


async def get_caller(
    request: Request,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer_scheme)],
    _api_key: Annotated[str | None, Security(_api_key_scheme)],
) -> Caller:
    """Return the caller (see the module docstring); a route using it never runs without one."""
    caller = caller_of(request)
    if caller is None:
        raise StarletteHTTPException(
            401, _UNAUTHORIZED, headers={"WWW-Authenticate": 'Bearer realm="atelier"'}
        )
    return caller


async def get_principal(caller: Annotated[Caller, Security(get_caller)]) -> str:
    """Return the caller's owner id (see the module docstring)."""
    return caller.owner


# --- body limit ---------------------------------------------------------------------


class _BodyTooLarge(StarletteHTTPException):
    """Raised from `receive` when the body passes the limit; ends the route's body read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_message(limit))
        self.limit = limit


def too_large_message(limit: int) -> str:
    """Return the 413 message for a limit in bytes."""
    return f"Request body is larger than the limit of {limit} bytes."


def upload_body_limit(settings: Settings) -> int:
    """Return the body limit of an upload: the image as base64 in JSON, plus room for fields."""
    as_base64 = -(-settings.max_upload_bytes // 3) * 4
    return max(settings.max_body_bytes, as_base64 + 64 * 1024)


class BodyLimitMiddleware:
    """Answer 413 to requests whose body is larger than the limit, counting received bytes.

    A declared `Content-Length` over the limit is refused before the app runs. Else the
    chunks are counted as the app reads them: past the limit, `receive` raises, the
    app's own response (an error page for the failed read) is discarded, and the
    client gets this middleware's 413. The route's handler never runs for a JSON or
    form body, as FastAPI reads those before calling it.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        route_limits: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        """Wrap `app` with a default limit and per-(method, path) limits."""
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.route_limits = dict(route_limits or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Count the request body and answer 413 past the limit."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.route_limits.get((scope["method"], scope["path"]), self.max_body_bytes)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await error_response(413, too_large_message(limit))(scope, receive, send)
            return

        received = 0
        exceeded = False
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise _BodyTooLarge(limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _BodyTooLarge(limit)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if exceeded and not response_started:
                return  # the app's answer to a failed read; ours is sent below
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded or response_started:
                raise
        if exceeded and not response_started:
            await error_response(413, too_large_message(limit))(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


# --- installation -----------------------------------------------------------------


def install_security(app: FastAPI, settings: Settings) -> ApiKeys:
    """Install CORS, API keys and the body limit on `app`.

    Call it once in `create_app`, before the app serves. Returns the key ring, which is
    also kept as `app.state.api_keys`; the asset link signer (None when the service
    runs open) is kept as `app.state.asset_links`.
    """
    keys = ApiKeys(settings.auth_api_keys)
    app.state.api_keys = keys
    links = AssetLinks.from_settings(settings)
    app.state.asset_links = links

    def managed_keys() -> KeysService | None:
        engine = getattr(app.state, "engine", None)
        return None if engine is None else engine.keys

    # add_middleware wraps what is there: the last one added runs first.
    upload_limit = upload_body_limit(settings)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=settings.max_body_bytes,
        route_limits=dict.fromkeys(UPLOAD_ROUTES, upload_limit),
    )
    app.add_middleware(
        AuthMiddleware, keys=keys, links=links, managed=None if keys.open else managed_keys
    )
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "HEAD", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"],
            allow_headers=[
                "Authorization",
                "X-Api-Key",
                "Content-Type",
                "Last-Event-ID",
                "Idempotency-Key",
            ],
            expose_headers=["Content-Location", "Location", "ETag"],
            allow_credentials=False,  # keys travel in headers, never in cookies
            max_age=600,
        )

    return keys


def announce_auth_mode(settings: Settings) -> None:
    """Log how callers are authenticated; loudly when the service is open to anyone.

    Called from the app's lifespan, so it is said once per server start (not on import).
    """
    if settings.auth_api_keys:
        log.info("API keys required: %d key(s) configured", len(settings.auth_api_keys))
    else:
        log.warning(OPEN_WARNING)


async def announce_ignored_keys(engine: Engine) -> None:
    """Warn once when the service runs open while the database holds managed keys.

    Those keys are not checked (every caller is anonymous) until AUTH_API_KEYS is set.
    """
    keys = engine.keys
    if keys.keyed:
        return
    try:
        count = await keys.count(include_revoked=False)
    except Exception:  # the database is away: /ready says so; this is only a warning
        return
    if count:
        log.warning(
            "%d managed API key(s) in the database are ignored: AUTH_API_KEYS is not set, "
            "so the service runs open. Set AUTH_API_KEYS to require keys.",
            count,
        )


OPEN_WARNING = (
    "AUTH_API_KEYS is not set: this service is OPEN and anyone who can reach it can "
    "start runs, read every thread and change the knowledge vault. Set AUTH_API_KEYS "
    "before exposing it beyond localhost."
)


def auth_mode(settings: Settings) -> str:
    """Return "open" when no API key is configured, else "api_key"."""
    return "api_key" if settings.auth_api_keys else "open"


__all__ = [
    "ANONYMOUS",
    "CALLER_STATE_KEY",
    "OPEN_CALLER",
    "OPEN_WARNING",
    "ApiKeys",
    "AuthMiddleware",
    "BodyLimitMiddleware",
    "Caller",
    "announce_auth_mode",
    "announce_ignored_keys",
    "auth_mode",
    "caller_of",
    "get_caller",
    "get_principal",
    "install_security",
    "owner_id_for",
]
