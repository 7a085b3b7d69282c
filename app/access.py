"""What each role may call, declared on every route as one dependency.

Every route of the API declares its access, once, in its decorator:

    @router.get("/threads/{thread_id}", dependencies=[READ])
    @router.post("/threads", dependencies=[WRITE])
    @router.post("/keys", dependencies=[ADMIN])
    @router.get("/ok", dependencies=[PUBLIC])

* `PUBLIC`: anyone, no key (probes, the console page, A2A agent cards);
* `SIGNED`: any key, or no key with the signed link of that one asset (the auth
  middleware checks the signature before the route runs; `GET /assets/{id}?sig=…`);
* `READ`: any key: it reads and searches its own things (`POST …/search` included);
* `WRITE`: `admin` and `member` keys: it creates, changes, deletes or starts
  something; a `read-only` key gets 403 naming its role;
* `ADMIN`: `admin` keys only (keys, the audit log, any key's crons).

`AUTH_API_KEYS` keys and open mode's anonymous caller are admins. A test walks every
route of the app and fails on one that declares no access (`route_access`), so a new
route cannot forget. Calls that start runs through MCP or A2A are writes too; their
endpoints check with `refusal` per call. Finer rules live with their resource (shared
knowledge is written by admins only: `app.routes.knowledge`). See docs/keys.md.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Security, params
from fastapi.routing import APIRoute

from app.security import Caller, get_caller


class Access(StrEnum):
    """Who may call a route."""

    PUBLIC = "public"
    SIGNED = "signed"
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


#: The attribute naming a guard's access level.
_ACCESS_ATTRIBUTE = "atelier_access"


def refusal(caller: Caller, access: Access) -> str | None:
    """Return why `caller` may not call a route of `access` (None: it may)."""
    if access == Access.WRITE and caller.role == "read-only":
        return (
            "This API key's role is read-only: it may read and search its own things, "
            "not create, change, delete or start anything."
        )
    if access == Access.ADMIN and caller.role != "admin":
        return f"This needs an admin API key; this key's role is {caller.role}."
    return None


def require(caller: Caller, access: Access) -> None:
    """Raise a 403 naming the role when `caller` may not call a route of `access`."""
    reason = refusal(caller, access)
    if reason is not None:
        raise HTTPException(403, reason)


def _guard(access: Access) -> Callable[..., Coroutine[Any, Any, None]]:
    guard: Callable[..., Coroutine[Any, Any, None]]
    if access in (Access.PUBLIC, Access.SIGNED):

        async def unchecked() -> None:
            """Let anyone the auth middleware let through call (every role may read)."""

        guard = unchecked
    else:

        async def keyed(caller: Annotated[Caller, Security(get_caller)]) -> None:
            require(caller, access)

        keyed.__doc__ = f"Let callers with {access.value} access call; refuse others 403."
        guard = keyed
    setattr(guard, _ACCESS_ATTRIBUTE, access)
    return guard


PUBLIC: params.Depends = Depends(_guard(Access.PUBLIC))
SIGNED: params.Depends = Depends(_guard(Access.SIGNED))
READ: params.Depends = Depends(_guard(Access.READ))
WRITE: params.Depends = Depends(_guard(Access.WRITE))
ADMIN: params.Depends = Depends(_guard(Access.ADMIN))


def route_access(route: APIRoute) -> list[Access]:
    """Return the access levels a route declares (exactly one when it is declared right)."""
    found: list[Access] = []
    for dependency in route.dependant.dependencies:
        access = getattr(dependency.call, _ACCESS_ATTRIBUTE, None)
        if isinstance(access, Access):
            found.append(access)
    return found


__all__ = [
    "ADMIN",
    "PUBLIC",
    "READ",
    "SIGNED",
    "WRITE",
    "Access",
    "refusal",
    "require",
    "route_access",
]
