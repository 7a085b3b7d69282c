"""Managed API keys over HTTP: admins make, list, change and revoke them (docs/keys.md).

    POST   /keys                              make a key: its secret and webhook secret,
                                              shown this once (201)
    GET    /keys                              the keys, newest first (no secrets)
    GET    /keys/me                           the caller: key id, role, quotas (any key)
    GET    /keys/{key_id}                     one key
    PATCH  /keys/{key_id}                     change its name, role, expiry or quotas
    DELETE /keys/{key_id}                     revoke it: refused everywhere within a
                                              second or so; its crons pause, its pending
                                              deliveries are cancelled, its data stays
    POST   /keys/{key_id}/webhook-secret      a new webhook signing secret (shown once);
                                              the old one signs on for the overlap
    GET    /keys/{key_id}/crons               any key's crons (paused ones included)
    DELETE /keys/{key_id}/crons/{cron_id}     delete one of them

Admin only, but `/keys/me`. A key's id is its owner id (`key_…`), also for the
`AUTH_API_KEYS` keys and `anonymous` (open mode), whose crons the last two routes
reach too. Managed keys need a keyed service: without `AUTH_API_KEYS` the service is
open and the key routes answer 409 (`atelier keys create` still writes to the
database). Every change is in the audit trail (`GET /audit`), never a secret.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response, status
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)
from starlette.convertors import Convertor, register_url_convertor

from app.access import ADMIN, READ
from app.deps import AuditDep, CallerDep, CronsDep, KeysDep, SettingsDep
from app.routes.crons import CronId, CronOut, cron_out
from app.schemas import DIGITS_ONLY, MAX_OFFSET, QueryBool
from app.security import auth_mode
from engine import KEY_ID_PATTERN, MAX_QUOTA, KeyRecord, KeyRole, KeysService, utc_now

router = APIRouter(prefix="/keys", tags=["keys"])


class KeyIdConvertor(Convertor[str]):
    """Match a key id in a path, so `/keys/me` is never taken for one (405, not 422)."""

    regex = KEY_ID_PATTERN.removeprefix("^").removesuffix("$")

    def convert(self, value: str) -> str:
        """Return the key id as matched."""
        return value

    def to_string(self, value: str) -> str:
        """Return the key id as written in a path."""
        return value


register_url_convertor("key_id", KeyIdConvertor())

#: A key id, or the owner id of open mode (whose crons an admin may also see).
OWNER_PATTERN = r"^(key_[0-9a-f]{24}|anonymous)$"
MAX_PAGE = 200

KeyId = Annotated[
    str,
    Path(
        pattern=KEY_ID_PATTERN,
        description="The key's id.",
        examples=["key_0123456789abcdef01234567"],
    ),
]
OwnerId = Annotated[
    str,
    Path(
        pattern=OWNER_PATTERN,
        description="A key's id (a managed key's, an AUTH_API_KEYS key's, or `anonymous`).",
        examples=["key_0123456789abcdef01234567"],
    ),
]
Name = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=100),
    Field(description="What the key is for: a person, a client, a service.", examples=["Client B"]),
]
Role = Annotated[
    KeyRole,
    Field(
        description="admin: keys, quotas, shared knowledge, the audit log, any key's crons; "
        "member: its own posts, presets, Store, crons; read-only: reads its own things.",
        examples=["member"],
    ),
]
_NOT_KEYED = (
    "Managed keys need a keyed service: set AUTH_API_KEYS (bootstrap admin keys). "
    "This service runs open, so every caller is anonymous and no key would be checked."
)
_OPEN: dict[int | str, dict[str, Any]] = {
    409: {"description": "The service runs open (no AUTH_API_KEYS): no managed keys."}
}
_REVOKED: dict[int | str, dict[str, Any]] = {
    404: {"description": "No key has this id."},
    409: {"description": "The service runs open, or the key is revoked."},
}


def _quota(description: str, example: float, **more: Any) -> Any:
    return Field(
        default=None,
        ge=0,
        le=MAX_QUOTA,
        strict=True,
        description=description + " Null: unlimited; left out: the default.",
        examples=[example],
        **more,
    )


class Quotas(BaseModel):
    """A key's limits over the deployment's defaults: a number ≥ 0, or null for unlimited.

    A quota left out takes the settings' default.
    """

    model_config = ConfigDict(extra="forbid")

    runs_at_once: StrictInt | None = _quota("Runs of the key pending or running at once.", 2)
    runs_per_minute: StrictInt | None = _quota("Runs the key may start in a minute.", 20)
    crons: StrictInt | None = _quota("Crons the key may have.", 50)
    assistants: StrictInt | None = _quota("Assistants (brand presets) the key may have.", 50)
    store_bytes: StrictInt | None = _quota("Bytes the key's Store items may hold.", 10_000_000)
    store_searches_per_minute: StrictInt | None = _quota(
        "Store searches with a `query` the key may make in a minute.", 60
    )
    monthly_spend: float | None = _quota(
        "What the key's runs may cost in a calendar month, in LLM_PRICE_CURRENCY.",
        100.0,
        allow_inf_nan=False,
    )

    def overrides(self) -> dict[str, int | float | None]:
        """Return the quotas given (null included), the ones left out omitted."""
        return {name: getattr(self, name) for name in self.model_fields_set}


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return aware.astimezone(UTC)
    except OverflowError:
        raise ValueError("expires_at is outside the years 1-9999 in UTC") from None


Expiry = Annotated[
    datetime | None,
    Field(
        description="After this time (ISO 8601; naive: UTC) the key authenticates nothing; "
        "null: never.",
        examples=["2027-01-01T00:00:00Z"],
    ),
]


class KeyCreate(BaseModel):
    """Body of `POST /keys`."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    role: Role
    expires_at: Expiry = None
    quotas: Quotas | None = Field(default=None, description="Limits over the defaults.")

    _expiry = field_validator("expires_at")(_utc)


class KeyUpdate(BaseModel):
    """Body of `PATCH /keys/{key_id}`: the fields to change (at least one)."""

    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    role: Role | None = None
    expires_at: Expiry = None
    quotas: Quotas | None = Field(
        default=None,
        description="The key's quotas, replacing all it had (`{}`: every default).",
    )

    _expiry = field_validator("expires_at")(_utc)

    def changes(self) -> dict[str, Any]:
        """Return the changes as the keys service takes them."""
        given = self.model_fields_set
        changes: dict[str, Any] = {}
        for name in ("name", "role"):
            if name in given and getattr(self, name) is not None:
                changes[name] = getattr(self, name)
        if "expires_at" in given:
            changes["expires_at"] = self.expires_at
        if "quotas" in given:
            changes["quotas"] = self.quotas.overrides() if self.quotas is not None else {}
        return changes

    @model_validator(mode="after")
    def _changes_something(self) -> KeyUpdate:
        if not self.changes():
            raise ValueError("give at least one of name, role, expires_at, quotas to change")
        return self


class KeyOut(BaseModel):
    """A managed key, without its secrets."""

    key_id: str = Field(
        description="Its id: the owner id its threads, runs and crons are recorded under.",
        examples=["key_0123456789abcdef01234567"],
    )
    name: str = Field(examples=["Client B"])
    role: KeyRole
    state: Literal["active", "revoked", "expired"] = Field(description="Whether it works now.")
    prefix: str = Field(
        description="The secret's first characters, to tell keys apart.",
        examples=["atl_AbCdEfGh"],
    )
    quotas: dict[str, int | float | None] = Field(
        description="Its quota overrides (a name left out: the default; null: unlimited)."
    )
    created_at: str
    updated_at: str
    expires_at: str | None
    last_used_at: str | None = Field(description="Written at most once a minute.")
    revoked_at: str | None
    created_by: str | None = Field(description="The key id that made it, or `cli`.")


class KeyCreated(KeyOut):
    """A key just made, with its secrets: shown this once, never again."""

    key: str = Field(
        description="The API key: send it as 'Authorization: Bearer <key>' or 'X-Api-Key'.",
        examples=["atl_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg"],
    )
    webhook_secret: str = Field(
        description="Signs the key's webhook deliveries (X-Atelier-Signature).",
        examples=["whsec_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg"],
    )


class KeyRevoked(KeyOut):
    """A key just revoked, and what the revocation stopped."""

    crons_paused: int = Field(ge=0, description="Its crons paused (they fire no more).")
    deliveries_cancelled: int = Field(
        ge=0, description="Its pending webhook deliveries, now `cancelled`."
    )


class KeyPage(BaseModel):
    """A page of keys, newest first."""

    items: list[KeyOut]
    total: int = Field(ge=0, description="Keys over all pages.")
    limit: int = Field(ge=1)
    offset: int = Field(ge=0)


class WebhookSecret(BaseModel):
    """A key's new webhook signing secret: shown this once."""

    key_id: str
    webhook_secret: str = Field(examples=["whsec_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg"])
    previous_valid_until: str | None = Field(
        description="Until then the previous secret signs too (WEBHOOK_SECRET_OVERLAP_HOURS)."
    )


class Me(BaseModel):
    """The caller, as the service sees it."""

    key_id: str = Field(
        description="Its key id (owner id); `anonymous` when the service runs open.",
        examples=["key_0123456789abcdef01234567"],
    )
    role: KeyRole
    kind: Literal["managed", "bootstrap", "open"] = Field(
        description="managed: a key made with POST /keys; bootstrap: an AUTH_API_KEYS key "
        "(admin); open: no keys at all (admin)."
    )
    name: str | None = Field(description="A managed key's name.")
    quotas: dict[str, int | float | None] = Field(description="A managed key's quota overrides.")
    auth: Literal["open", "api_key"] = Field(description="How the service authenticates.")


def key_out(record: KeyRecord) -> dict[str, Any]:
    """Return a key as the API answers it."""
    return {
        "key_id": record.key_id,
        "name": record.name,
        "role": record.role,
        "state": record.state(utc_now()),
        "prefix": record.prefix,
        "quotas": record.quotas,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "last_used_at": record.last_used_at,
        "revoked_at": record.revoked_at,
        "created_by": record.created_by,
    }


async def keyed(keys: KeysDep) -> KeysService:
    """Return the keys service, or answer 409 when the service runs open."""
    if not keys.keyed:
        raise HTTPException(status.HTTP_409_CONFLICT, _NOT_KEYED)
    return keys


ManagedKeysDep = Annotated[KeysService, Depends(keyed)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    summary="Make an API key",
    dependencies=[ADMIN],
    responses=_OPEN,
)
async def create_key(
    body: KeyCreate, keys: ManagedKeysDep, caller: CallerDep, response: Response
) -> dict[str, Any]:
    """Make a key; its secret and webhook secret are in this answer only."""
    made = await keys.create(
        name=body.name,
        role=body.role,
        expires_at=body.expires_at,
        quotas=body.quotas.overrides() if body.quotas is not None else {},
        actor=caller.actor,
    )
    response.headers["Location"] = f"/keys/{made.record.key_id}"
    return {**key_out(made.record), "key": made.secret, "webhook_secret": made.webhook_secret}


@router.get(
    "", response_model=KeyPage, summary="List API keys", dependencies=[ADMIN], responses=_OPEN
)
async def list_keys(
    keys: ManagedKeysDep,
    include_revoked: Annotated[
        QueryBool, Query(description="Also list revoked keys (default true).")
    ] = True,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PAGE), DIGITS_ONLY, Query(description="Page size.")
    ] = 50,
    offset: Annotated[
        int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query(description="Keys to skip.")
    ] = 0,
) -> dict[str, Any]:
    """Return the managed keys, newest first, without their secrets."""
    found = await keys.search(include_revoked=include_revoked, limit=limit, offset=offset)
    total = await keys.count(include_revoked=include_revoked)
    return {
        "items": [key_out(record) for record in found],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


@router.get("/me", response_model=Me, summary="Who am I", dependencies=[READ])
async def who_am_i(caller: CallerDep, settings: SettingsDep) -> dict[str, Any]:
    """Return the caller's key id, role and quota overrides."""
    return {
        "key_id": caller.key_id,
        "role": caller.role,
        "kind": caller.kind,
        "name": caller.name,
        "quotas": dict(caller.quotas),
        "auth": auth_mode(settings),
    }


@router.get(
    "/{key_id:key_id}",
    response_model=KeyOut,
    summary="Get an API key",
    dependencies=[ADMIN],
    responses=_REVOKED,
)
async def get_key(key_id: KeyId, keys: ManagedKeysDep) -> dict[str, Any]:
    """Return one key, without its secrets."""
    return key_out(await keys.get(key_id))


@router.patch(
    "/{key_id:key_id}",
    response_model=KeyOut,
    summary="Change an API key",
    dependencies=[ADMIN],
    responses=_REVOKED,
)
async def update_key(
    key_id: KeyId, body: KeyUpdate, keys: ManagedKeysDep, caller: CallerDep
) -> dict[str, Any]:
    """Change a key's name, role, expiry or quotas (all its quotas at once)."""
    return key_out(await keys.update(key_id, body.changes(), actor=caller.actor))


@router.delete(
    "/{key_id:key_id}",
    response_model=KeyRevoked,
    summary="Revoke an API key",
    dependencies=[ADMIN],
    responses=_REVOKED,
)
async def revoke_key(key_id: KeyId, keys: ManagedKeysDep, caller: CallerDep) -> dict[str, Any]:
    """Revoke a key: refused everywhere from now on; its crons pause, its pending
    webhook deliveries are cancelled, its running runs finish and its data stays."""
    revoked = await keys.revoke(key_id, actor=caller.actor)
    return {
        **key_out(revoked.record),
        "crons_paused": revoked.crons_paused,
        "deliveries_cancelled": revoked.deliveries_cancelled,
    }


@router.post(
    "/{key_id:key_id}/webhook-secret",
    response_model=WebhookSecret,
    summary="Rotate a key's webhook secret",
    dependencies=[ADMIN],
    responses=_REVOKED,
)
async def rotate_webhook_secret(
    key_id: KeyId, keys: ManagedKeysDep, caller: CallerDep
) -> dict[str, Any]:
    """Give a key a new webhook signing secret (shown once); the old one signs on a while."""
    record, secret = await keys.rotate_webhook_secret(key_id, actor=caller.actor)
    return {
        "key_id": record.key_id,
        "webhook_secret": secret,
        "previous_valid_until": record.previous_secret_until,
    }


@router.get(
    "/{key_id}/crons",
    response_model=list[CronOut],
    summary="List any key's crons",
    dependencies=[ADMIN],
)
async def key_crons(
    key_id: OwnerId,
    crons: CronsDep,
    limit: Annotated[
        int, Field(ge=1, le=MAX_PAGE), DIGITS_ONLY, Query(description="Page size.")
    ] = 100,
    offset: Annotated[
        int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query(description="Crons to skip.")
    ] = 0,
) -> list[dict[str, Any]]:
    """Return a key's crons, paused ones (a revoked key's) included, newest first."""
    found = await crons.search(key_id, limit=limit, offset=offset)
    return [cron_out(cron) for cron in found]


@router.delete(
    "/{key_id}/crons/{cron_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete any key's cron",
    dependencies=[ADMIN],
)
async def delete_key_cron(
    key_id: OwnerId, cron_id: CronId, crons: CronsDep, audit: AuditDep, caller: CallerDep
) -> Response:
    """Delete one of a key's crons (the runs it started stay)."""
    await crons.delete(key_id, cron_id)
    await audit.record(caller.actor, "cron.delete", subject=key_id, target=cron_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
