"""Crons: runs that start themselves on a schedule (LangGraph Platform's `crons` client).

    POST   /runs/crons                  a cron whose every run gets a new thread
    POST   /threads/{t}/runs/crons      a cron whose runs go to the thread
    GET    /runs/crons/{c}              one cron
    PATCH  /runs/crons/{c}              change its schedule, payload, state
    DELETE /runs/crons/{c}              stop and delete it
    POST   /runs/crons/search           the caller's crons, filtered and sorted
    POST   /runs/crons/count            how many

A cron belongs to the API key that made it; another key gets 404. The schedule is
five cron fields, read in `timezone` (UTC when unset). Each tick starts an ordinary
run through the crons service's scheduler (`engine.services.crons`), exactly once
whatever the number of processes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    field_validator,
)

from app.access import READ, WRITE
from app.deps import AuditDep, CallerDep, CronsDep, PrincipalDep
from app.schemas import (
    ID_PATTERN,
    MAX_OFFSET,
    JsonObject,
    RunConfigIn,
    check_json_integers,
)
from engine import (
    CronRecord,
    CronsService,
    MultitaskStrategy,
    StreamModeName,
    check_schedule,
    check_timezone,
    dumps,
)

router = APIRouter(tags=["crons"])

CronId = Annotated[str, Path(pattern=ID_PATTERN, description="Cron id.")]
ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]
#: `POST /runs/crons` names its assistant in the body (the others have a path too).
UNKNOWN_ASSISTANT: dict[int | str, dict[str, Any]] = {
    404: {"description": "The body names an assistant this server does not run."}
}

#: Largest `metadata` of a cron, in keys and in bytes of JSON.
MAX_METADATA_KEYS = 64
MAX_METADATA_BYTES = 16_384
#: Metadata keys a search filters by: the thread search's rule (no quote, backslash or
#: control character, which a JSON path in SQL cannot carry).
SEARCH_KEY = re.compile(r'^[^"\\\x00-\x1f\x7f]{1,128}$')
#: Run options a cron stores for its runs (the rest of a body is the cron's own).
RUN_OPTIONS = (
    "input",
    "config",
    "webhook",
    "interrupt_before",
    "interrupt_after",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "durability",
    "multitask_strategy",
)

Schedule = Annotated[
    str,
    StringConstraints(min_length=9, max_length=256),
    Field(
        description="Five cron fields: minute hour day-of-month month day-of-week.",
        examples=["*/30 9-18 * * 1-5"],
    ),
]
Timezone = Annotated[
    str,
    StringConstraints(min_length=1, max_length=64),
    Field(
        description="IANA time zone the schedule is read in (unset: UTC).",
        examples=["Asia/Shanghai"],
    ),
]
Webhook = Annotated[
    str,
    StringConstraints(max_length=2048, pattern=r"^https?://[^\s]+$"),
    Field(
        description="URL told about each run's end (http or https).",
        examples=["https://example.com/hook"],
    ),
]
NodeList = Literal["*"] | list[Annotated[str, StringConstraints(max_length=128)]]


class _CronFields(BaseModel):
    """What a cron's create and update bodies share."""

    model_config = ConfigDict(extra="forbid")

    input: JsonObject | None = Field(default=None, description="Each run's graph input.")
    config: RunConfigIn | None = Field(default=None, description="Each run's config.")
    metadata: dict[str, Any] | None = Field(
        default=None, description="The cron's metadata; its runs carry it with `cron_id`."
    )
    webhook: Webhook | None = None
    interrupt_before: NodeList | None = Field(default=None, description="Pause before these nodes.")
    interrupt_after: NodeList | None = Field(default=None, description="Pause after these nodes.")
    stream_mode: StreamModeName | list[StreamModeName] | None = Field(
        default=None, description="Stream mode(s) each run's stream carries."
    )
    stream_subgraphs: StrictBool | None = None
    stream_resumable: StrictBool | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    end_time: datetime | None = Field(
        default=None, description="No run starts after this time (ISO 8601; naive: UTC)."
    )
    enabled: StrictBool | None = Field(default=None, description="False: no run starts.")
    timezone: Timezone | None = None
    context: Any = Field(default=None, description="Refused when set (non-empty).")
    checkpoint_during: bool | None = Field(
        default=None, description="Deprecated form of durability: true async, false exit."
    )

    @field_validator("schedule", check_fields=False)
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        return None if value is None else check_schedule(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str | None) -> str | None:
        return check_timezone(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"metadata may have at most {MAX_METADATA_KEYS} keys")
        if value is not None and len(dumps(value).encode()) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata may be at most {MAX_METADATA_BYTES} bytes of JSON")
        return check_json_integers(value)

    @field_validator("context")
    @classmethod
    def _no_context(cls, value: Any) -> Any:
        if value in (None, {}, []):
            return None
        raise ValueError(
            "context is not supported: the runtime context is the server's own; "
            "per-run settings go in config.configurable"
        )

    @field_validator("end_time")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        try:
            return aware.astimezone(UTC)
        except OverflowError:
            raise ValueError("end_time is outside the years 1-9999 in UTC") from None

    def run_options(self) -> dict[str, Any]:
        """Return the run options given, as each tick's run request takes them."""
        options = self.model_dump(include=set(RUN_OPTIONS), exclude_none=True, mode="json")
        if "config" in options:
            options["config"] = self.config.model_dump(exclude_defaults=True) if self.config else {}
        if self.checkpoint_during is not None and self.durability is None:
            options["durability"] = "async" if self.checkpoint_during else "exit"
        mode = options.get("stream_mode")
        if isinstance(mode, str):
            options["stream_mode"] = [mode]
        return options


class ThreadCronCreate(_CronFields):
    """Body of `POST /threads/{thread_id}/runs/crons`."""

    assistant_id: str = Field(
        min_length=1, max_length=128, description="Assistant each run runs.", examples=["atelier"]
    )
    schedule: Schedule
    multitask_strategy: MultitaskStrategy | None = Field(
        default=None, description="What a tick does when the thread is busy (default reject)."
    )


class CronCreate(ThreadCronCreate):
    """Body of `POST /runs/crons`: each run on a new thread."""

    on_run_completed: Literal["delete", "keep"] | None = Field(
        default=None,
        description="Delete or keep each run's thread when the run ended (default keep "
        "here; the Platform deletes).",
    )


class CronUpdate(_CronFields):
    """Body of `PATCH /runs/crons/{cron_id}`: the fields to change."""

    schedule: Schedule | None = None
    on_run_completed: Literal["delete", "keep"] | None = None


def _search_keys(value: dict[str, Any] | None) -> dict[str, Any] | None:
    for key in value or {}:
        if not SEARCH_KEY.match(key):
            raise ValueError(
                "metadata keys to search by are 1-128 characters without double quotes, "
                "backslashes or control characters"
            )
    return check_json_integers(value)


class CronSearch(BaseModel):
    """Body of `POST /runs/crons/search`."""

    model_config = ConfigDict(extra="forbid")

    assistant_id: str | None = Field(default=None, max_length=128)
    thread_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)] | None = None
    enabled: StrictBool | None = None
    metadata: dict[str, Any] | None = None
    limit: StrictInt = Field(default=10, ge=1, le=1000)
    offset: StrictInt = Field(default=0, ge=0, le=MAX_OFFSET)
    sort_by: Literal[
        "cron_id",
        "assistant_id",
        "thread_id",
        "created_at",
        "updated_at",
        "next_run_date",
        "end_time",
    ] = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[Annotated[str, StringConstraints(max_length=64)]] | None = Field(
        default=None, max_length=32, description="Fields to answer (default: all)."
    )

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _search_keys(value)


class CronCount(BaseModel):
    """Body of `POST /runs/crons/count`."""

    model_config = ConfigDict(extra="forbid")

    assistant_id: str | None = Field(default=None, max_length=128)
    thread_id: Annotated[str, StringConstraints(pattern=ID_PATTERN)] | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _search_keys(value)


class CronOut(BaseModel):
    """A cron, as the Platform answers it."""

    cron_id: str
    assistant_id: str
    thread_id: str | None
    user_id: str | None = Field(default=None, description="Always null here.")
    schedule: str
    timezone: str | None
    payload: dict[str, Any] = Field(description="The run options each tick's run gets.")
    metadata: dict[str, Any]
    on_run_completed: Literal["delete", "keep"] | None
    end_time: str | None
    enabled: bool
    next_run_date: str | None = Field(description="When it fires next (null: never).")
    created_at: str
    updated_at: str


def cron_out(cron: CronRecord) -> dict[str, Any]:
    """Return a cron in the Platform's shape."""
    return {
        "cron_id": cron.cron_id,
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id,
        "user_id": None,
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "payload": {"assistant_id": cron.assistant_id, "schedule": cron.schedule, **cron.payload},
        "metadata": cron.metadata,
        "on_run_completed": cron.on_run_completed,
        "end_time": cron.end_time,
        "enabled": cron.enabled,
        "next_run_date": cron.next_run_at,
        "created_at": cron.created_at,
        "updated_at": cron.updated_at,
    }


async def _create(
    crons: CronsService, owner: str, thread_id: str | None, body: ThreadCronCreate
) -> dict[str, Any]:
    options = body.run_options()
    on_run_completed = body.on_run_completed if isinstance(body, CronCreate) else None
    cron = await crons.create(
        owner,
        assistant_id=body.assistant_id,
        thread_id=thread_id,
        schedule=body.schedule,
        timezone=body.timezone,
        payload=options,
        metadata=body.metadata,
        on_run_completed=on_run_completed,
        end_time=body.end_time,
        enabled=True if body.enabled is None else body.enabled,
    )
    return cron_out(cron)


@router.post(
    "/runs/crons",
    response_model=CronOut,
    summary="Create a cron (a new thread per run)",
    responses=UNKNOWN_ASSISTANT,
    dependencies=[WRITE],
)
async def create_cron(body: CronCreate, crons: CronsDep, owner: PrincipalDep) -> dict[str, Any]:
    """Schedule runs of an assistant, each on a new thread."""
    return await _create(crons, owner, None, body)


@router.post(
    "/threads/{thread_id}/runs/crons",
    response_model=CronOut,
    summary="Create a cron on a thread",
    dependencies=[WRITE],
)
async def create_thread_cron(
    thread_id: ThreadId, body: ThreadCronCreate, crons: CronsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Schedule runs of an assistant on one of the caller's threads."""
    return await _create(crons, owner, thread_id, body)


@router.post(
    "/runs/crons/search", response_model=list[CronOut], summary="Search crons", dependencies=[READ]
)
async def search_crons(
    body: CronSearch, crons: CronsDep, owner: PrincipalDep
) -> list[dict[str, Any]]:
    """Return the caller's crons matching every given filter."""
    found = await crons.search(
        owner,
        assistant_id=body.assistant_id,
        thread_id=body.thread_id,
        enabled=body.enabled,
        metadata=body.metadata,
        limit=body.limit,
        offset=body.offset,
        sort_by=body.sort_by,
        sort_order=body.sort_order,
    )
    answers = [cron_out(cron) for cron in found]
    if body.select:
        keep = set(body.select)
        answers = [{k: v for k, v in answer.items() if k in keep} for answer in answers]
    return answers


@router.post("/runs/crons/count", response_model=int, summary="Count crons", dependencies=[READ])
async def count_crons(body: CronCount, crons: CronsDep, owner: PrincipalDep) -> int:
    """Return how many of the caller's crons match every given filter."""
    return await crons.count(
        owner, assistant_id=body.assistant_id, thread_id=body.thread_id, metadata=body.metadata
    )


@router.get(
    "/runs/crons/{cron_id}", response_model=CronOut, summary="Get a cron", dependencies=[READ]
)
async def get_cron(cron_id: CronId, crons: CronsDep, owner: PrincipalDep) -> dict[str, Any]:
    """Return one of the caller's crons."""
    return cron_out(await crons.get(owner, cron_id))


@router.patch(
    "/runs/crons/{cron_id}", response_model=CronOut, summary="Update a cron", dependencies=[WRITE]
)
async def patch_cron(
    cron_id: CronId, body: CronUpdate, crons: CronsDep, owner: PrincipalDep
) -> dict[str, Any]:
    """Change a cron; a new schedule, time zone, end time or state recomputes its next run."""
    given = body.model_fields_set
    changes: dict[str, Any] = {"payload": body.run_options()}
    for name in ("schedule", "timezone", "enabled", "metadata", "on_run_completed"):
        if name in given and getattr(body, name) is not None:
            changes[name] = getattr(body, name)
    if "end_time" in given:
        changes["end_time"] = body.end_time
    return cron_out(await crons.update(owner, cron_id, changes))


@router.delete(
    "/runs/crons/{cron_id}", status_code=204, summary="Delete a cron", dependencies=[WRITE]
)
async def delete_cron(
    cron_id: CronId, crons: CronsDep, caller: CallerDep, audit: AuditDep
) -> Response:
    """Stop and delete a cron (the runs it started stay)."""
    await crons.delete(caller.owner, cron_id)
    await audit.record(caller.actor, "cron.delete", subject=caller.owner, target=cron_id)
    return Response(status_code=204)
