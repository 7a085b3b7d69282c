"""Request and response models of the threads, runs and assistants endpoints.

They follow the LangGraph Platform dialect (what `langgraph-sdk` sends and reads)
and bound every field a client fills in. A request option this server does not
implement is refused with a 422 naming it (`extra="forbid"`), never ignored.

What an assistant's `input` must be is its own contract, not the dialect's (for
`atelier`: `agentkit.state.AtelierInput`, PRODUCT.md §2.6); the run engine checks it.
The stream models at the end describe the SSE frames for the OpenAPI document.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from agentkit.brand import BrandPreset
from engine import (
    MAX_TTL_MINUTES,
    SCHEMA_VERSION,
    STREAM_MODES,
    UNSUPPORTED_STREAM_MODES,
    IfNotExists,
    MultitaskStrategy,
    RunStatus,
    StreamModeName,
    ThreadStatus,
    ThreadTTL,
    TtlStrategy,
)

#: Ids of threads (client-chosen or generated UUIDs) and runs.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
#: Largest JSON object accepted as `metadata` or `config.configurable`.
MAX_MAPPING_KEYS = 64
MAX_MAPPING_BYTES = 16_384
#: `configurable` keys the server sets itself.
RESERVED_CONFIGURABLE = frozenset({"thread_id", "run_id", "assistant_id"})

#: Integers a client may put anywhere in free-form JSON (metadata, config, input,
#: command): SQLite, the event log (orjson) and the checkpointer (msgpack) store
#: signed 64-bit integers, so anything wider is refused where it enters.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Largest page offset any list or search accepts.
MAX_OFFSET = 1_000_000

ResourceId = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_json_integers(value: Any) -> Any:
    """Refuse free-form JSON holding an integer outside the signed 64-bit range.

    Walks lists and objects without recursion (the body's depth is bounded by the
    JSON parser, not here) and returns `value` unchanged.

    Raises:
        ValueError: An integer anywhere inside is below -2^63 or above 2^63-1.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise ValueError(
                    f"integers must be within the signed 64-bit range ({INT64_MIN} to {INT64_MAX})"
                )
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return value


#: Free-form JSON a client sends (graph input, resume values, state updates).
JsonAny = Annotated[Any, AfterValidator(check_json_integers)]
JsonObject = Annotated[dict[str, Any], AfterValidator(check_json_integers)]


def _bounded_mapping(value: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """Refuse mappings with too many keys, too large a JSON form or too wide an integer."""
    if value is None:
        return value
    from engine import dumps

    check_json_integers(value)
    if len(value) > MAX_MAPPING_KEYS:
        raise ValueError(f"{name} may have at most {MAX_MAPPING_KEYS} keys")
    if len(dumps(value).encode()) > MAX_MAPPING_BYTES:
        raise ValueError(f"{name} may be at most {MAX_MAPPING_BYTES} bytes of JSON")
    return value


# --------------------------------------------------------------------------- query values

# Query values arrive as text. Pydantic's lax parsing would turn "254695.0" into an
# integer and "yes", "on" or "t" into true; a query parameter the document declares
# integer or boolean takes exactly what the type says instead: decimal digits for an
# integer, `true`/`false` for a boolean (also `1`/`0`, which langgraph-sdk sends).
# JSON bodies are strict the same way (StrictInt, StrictBool): `1.0` is not an
# integer and `"true"` not a boolean.

_DIGITS = re.compile(r"^-?[0-9]{1,30}$")


def _whole_number(value: Any) -> Any:
    if isinstance(value, str):
        if not _DIGITS.match(value):
            raise ValueError("must be a whole number written in decimal digits")
        return int(value)
    return value


def _query_bool(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError("must be true or false (or 1 or 0)")
    return value


#: Put after the bounds of an integer query parameter: decimal digits only, e.g.
#: `Annotated[int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query()]`. The bounds go
#: in `Field` before it, not in `Query`: only then does the document show them as
#: minimum/maximum.
DIGITS_ONLY = BeforeValidator(_whole_number)
#: A boolean query parameter: true/false or 1/0, nothing else.
QueryBool = Annotated[bool, BeforeValidator(_query_bool)]


# --------------------------------------------------------------------------- runs


#: A node name in `command.goto` and a state key in `command.update`.
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
StateKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class CommandIn(_Strict):
    """A command for the graph: resume an interrupt, update state, or jump to nodes."""

    resume: JsonAny = Field(
        default=None,
        description="Answer to the pending interrupt, or a map of interrupt id → answer.",
        examples=["defaults"],
    )
    update: (
        Annotated[dict[str, Any] | list[tuple[StateKey, Any]], AfterValidator(check_json_integers)]
        | None
    ) = Field(
        default=None,
        max_length=MAX_MAPPING_KEYS,
        description="State update applied before continuing: state key → value, or a list "
        "of [key, value] pairs. Keys must be state keys of the assistant's graph.",
    )
    goto: NodeName | Annotated[list[NodeName], Field(max_length=32)] | None = Field(
        default=None,
        description="Node(s) of the assistant's graph to run next; an empty list means none "
        "(RemoteGraph sends `goto: []` with every resume).",
    )

    @model_validator(mode="after")
    def _not_empty(self) -> CommandIn:
        if self.goto == []:
            self.goto = None
        if self.resume is None and self.update is None and self.goto is None:
            raise ValueError("command needs at least one of resume, update, goto")
        return self


class RunConfigIn(_Strict):
    """The parts of a LangGraph run config a client may set."""

    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=16
    )
    recursion_limit: StrictInt | None = Field(default=None, ge=1, le=10_000)
    configurable: dict[str, Any] = Field(default_factory=dict)

    @field_validator("configurable")
    @classmethod
    def _configurable(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(k for k in value if k in RESERVED_CONFIGURABLE or k.startswith("__"))
        if reserved:
            raise ValueError(f"configurable keys {reserved} are set by the server")
        return _bounded_mapping(value, "configurable") or {}


class CheckpointRef(BaseModel):
    """A checkpoint of a thread, as the SDKs send it (`checkpoint` of a run or a state read)."""

    model_config = ConfigDict(extra="ignore")  # the SDKs echo back what the server sent

    checkpoint_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    checkpoint_ns: Annotated[str, StringConstraints(max_length=512)] = ""
    checkpoint_map: dict[str, Any] | None = None
    thread_id: str | None = Field(default=None, description="Ignored: the path names the thread.")


#: Run options of the current SDKs this server refuses, and why (docs/sdk-cross-check.md).
REFUSED_RUN_OPTIONS: dict[str, str] = {
    "feedback_keys": "feedback keys need LangSmith, which this server does not use",
    "context": "the runtime context is the server's own (models, assets, notes); "
    "per-run settings go in config.configurable",
    "langsmith_tracer": "LangSmith tracing is not supported",
}


class RunPlatformOptions(_Strict):
    """LangGraph Platform run options beyond input and streaming (mixed into RunCreate).

    Each option the current SDKs send is either honoured with the Platform's meaning
    or, when set, refused with a 422 that names it and says why — never ignored.
    """

    checkpoint: CheckpointRef | None = Field(
        default=None,
        description="Start from this checkpoint of the thread (a fork when it is not the "
        "head): the edit-and-regenerate path of Studio and useStream.",
    )
    checkpoint_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        default=None, description="Same as checkpoint.checkpoint_id."
    )
    interrupt_before: (
        Literal["*"] | list[Annotated[str, StringConstraints(max_length=128)]] | None
    ) = Field(default=None, description="Pause before these nodes ('*': every node).")
    interrupt_after: (
        Literal["*"] | list[Annotated[str, StringConstraints(max_length=128)]] | None
    ) = Field(default=None, description="Pause after these nodes ('*': every node).")
    durability: Literal["sync", "async", "exit"] | None = Field(
        default=None,
        description="When checkpoints are written: sync (before the next step), async "
        "(while it runs, the default), exit (only when the run ends).",
    )
    checkpoint_during: bool | None = Field(
        default=None, description="Deprecated form of durability: true async, false exit."
    )
    on_completion: Literal["delete", "keep"] | None = Field(
        default=None,
        description="Thread-less runs only: delete the run's thread when it ends, or keep "
        "it (the default here; see docs/sdk-cross-check.md).",
    )
    after_seconds: float | None = Field(
        default=None, ge=0, le=86_400, description="Start the run this many seconds later."
    )
    strict_resume: bool | None = Field(
        default=None,
        description="True (or unset): a resume must answer pending interrupts, which this "
        "server always checks; false is refused.",
    )
    webhook: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None,
        description="POST the run's end here, signed (docs/webhooks.md): http(s) only, "
        "by default https to a public host.",
    )
    feedback_keys: Any = Field(default=None, description="Refused when set.")
    context: Any = Field(default=None, description="Refused when set (non-empty).")
    langsmith_tracer: Any = Field(default=None, description="Refused when set.")

    @field_validator("feedback_keys", "context", "langsmith_tracer")
    @classmethod
    def _refuse(cls, value: Any, info: Any) -> Any:
        if value is None or value == {} or value == []:
            return None
        raise ValueError(
            f"{info.field_name} is not supported: {REFUSED_RUN_OPTIONS[info.field_name]}"
        )

    @field_validator("strict_resume")
    @classmethod
    def _always_strict(cls, value: bool | None) -> bool | None:
        if value is False:
            raise ValueError(
                "strict_resume false is not supported: a resume is always checked against "
                "the pending interrupts"
            )
        return value

    @model_validator(mode="after")
    def _one_checkpoint(self) -> RunPlatformOptions:
        if (
            self.checkpoint is not None
            and self.checkpoint_id is not None
            and self.checkpoint.checkpoint_id not in (None, self.checkpoint_id)
        ):
            raise ValueError(
                "checkpoint.checkpoint_id and checkpoint_id name different checkpoints"
            )
        if self.durability is not None and self.checkpoint_during is not None:
            raise ValueError("give durability or checkpoint_during, not both")
        return self

    def start_checkpoint(self, configurable: dict[str, Any] | None) -> dict[str, Any] | None:
        """Return the checkpoint the run starts from ({checkpoint_id, checkpoint_ns}), if any."""
        ref = self.checkpoint
        checkpoint_id = (ref.checkpoint_id if ref else None) or self.checkpoint_id
        checkpoint_ns = ref.checkpoint_ns if ref else ""
        configurable = configurable or {}
        checkpoint_id = checkpoint_id or configurable.get("checkpoint_id")
        checkpoint_ns = checkpoint_ns or str(configurable.get("checkpoint_ns") or "")
        if not checkpoint_id:
            return None
        return {"checkpoint_id": str(checkpoint_id), "checkpoint_ns": checkpoint_ns}

    def graph_durability(self) -> str | None:
        """Return the LangGraph durability the run asked for (None: LangGraph's default)."""
        if self.checkpoint_during is not None:
            return "async" if self.checkpoint_during else "exit"
        return self.durability


class RunCreate(RunPlatformOptions, _Strict):
    """Body of the run-creating endpoints (`/runs`, `/runs/stream`, `/runs/wait`)."""

    assistant_id: str = Field(
        min_length=1, max_length=128, description="Assistant to run.", examples=["atelier"]
    )
    input: JsonObject | None = Field(
        default=None,
        description="Graph input; for `atelier` see AtelierInput.",
        examples=[{"request": "写一篇小红书笔记：平价护肤，学生党友好", "auto_confirm": True}],
    )
    command: CommandIn | None = Field(default=None, description="Resume, update or goto.")
    stream_mode: StreamModeName | list[StreamModeName] = Field(
        default="values", description="Stream mode(s) of the run's stream."
    )
    stream_subgraphs: StrictBool = Field(
        default=False, description="Send subgraph events, namespaced `mode|node:<task id>`."
    )
    stream_resumable: StrictBool = Field(
        default=False,
        description="Advertise the stream for reconnection (`Location` header). Every "
        "run's events are kept either way, so any run can be joined and replayed.",
    )
    on_disconnect: Literal["cancel", "continue"] = Field(
        default="continue", description="What a client disconnect does to the run."
    )
    multitask_strategy: MultitaskStrategy = Field(
        default="reject", description="What to do when the thread already has an active run."
    )
    config: RunConfigIn | None = None
    metadata: dict[str, Any] | None = Field(default=None, description="Stored with the run.")
    if_not_exists: IfNotExists = Field(
        default="reject", description="Create the thread when it does not exist."
    )

    @field_validator("stream_mode", mode="before")
    @classmethod
    def _known_modes(cls, value: Any) -> Any:
        modes = value if isinstance(value, list) else [value]
        for mode in modes:
            if isinstance(mode, str) and mode not in STREAM_MODES:
                reason = UNSUPPORTED_STREAM_MODES.get(mode, "it is not a stream mode")
                raise ValueError(
                    f"stream mode {mode[:40]!r} is not served: {reason}; "
                    f"use {', '.join(STREAM_MODES)}"
                )
        return value

    @field_validator("stream_mode")
    @classmethod
    def _modes(cls, value: str | list[str]) -> list[str]:
        modes = [value] if isinstance(value, str) else value
        if not modes:
            raise ValueError("stream_mode needs at least one mode")
        return list(dict.fromkeys(modes))

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_mapping(value, "metadata")

    @model_validator(mode="after")
    def _input_or_command(self) -> RunCreate:
        if self.input == {} and self.command is not None:
            self.input = None  # what LangChain's chat UIs send with a resume: no input
        if self.input is not None and self.command is not None:
            raise ValueError("input and command are mutually exclusive")
        # Neither: continue a thread paused at a breakpoint (checked by the engine).
        return self

    @property
    def modes(self) -> list[str]:
        """The stream modes as a list."""
        return list(self.stream_mode) if isinstance(self.stream_mode, list) else [self.stream_mode]


IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


class RunOut(BaseModel):
    """A run record."""

    run_id: str
    thread_id: str
    assistant_id: str
    created_at: str
    updated_at: str
    status: RunStatus
    metadata: dict[str, Any]
    kwargs: dict[str, Any]
    multitask_strategy: MultitaskStrategy
    attempt: int = Field(description="Executions started (a restart resumes with the next).")
    cancel_reason: str | None = None
    error: dict[str, Any] | None = None


# --------------------------------------------------------------------------- threads


class ThreadTTLIn(_Strict):
    """A thread's time to live, as the LangGraph Platform takes it (docs/retention.md)."""

    strategy: TtlStrategy = Field(
        default="delete",
        description="When it runs out: `delete` the thread with its runs and checkpoints, "
        "or `keep_latest` (drop its checkpoints but the latest; the thread stays).",
    )
    ttl: StrictFloat = Field(
        gt=0,
        le=MAX_TTL_MINUTES,
        allow_inf_nan=False,
        description="Minutes from now, and again from each run's start and end, until "
        "the retention sweep acts on the thread.",
        examples=[43200],
    )

    def record(self) -> ThreadTTL:
        """Return the TTL for the engine (counted from when it is stored)."""
        return ThreadTTL(self.strategy, float(self.ttl))


class ThreadTTLOut(BaseModel):
    """A thread's TTL, shown by `GET /threads/{thread_id}?include=ttl`."""

    strategy: TtlStrategy
    ttl_minutes: float = Field(description="The TTL in minutes.")
    expires_at: str | None = Field(description="When the sweep may act on the thread.")


class ThreadCreate(_Strict):
    """Body of POST /threads."""

    thread_id: ResourceId | None = Field(default=None, description="Id; a UUID when unset.")
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    ttl: ThreadTTLIn | None = Field(
        default=None, description="Its TTL (default: THREAD_TTL_MINUTES, if set)."
    )

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_mapping(value, "metadata")


class ThreadPatch(_Strict):
    """Body of PATCH /threads/{thread_id}: metadata merged into the thread's, a new TTL."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl: ThreadTTLIn | None = Field(default=None, description="A new TTL, counted from now.")

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _bounded_mapping(value, "metadata") or {}


#: A metadata key a search may filter by: it becomes a quoted SQLite JSON path label.
_SEARCH_KEY = re.compile(r'^[^"\\\x00-\x1f\x7f]{1,128}$')


def search_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Check a metadata filter: keys that can be JSON path labels, a bounded mapping."""
    for key in value or {}:
        if not _SEARCH_KEY.match(key):
            raise ValueError(
                "metadata keys to search by are 1-128 characters without double "
                "quotes, backslashes or control characters"
            )
    return _bounded_mapping(value, "metadata")


class ThreadSearch(_Strict):
    """Body of POST /threads/search."""

    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None
    ids: list[ResourceId] | None = Field(default=None, max_length=1000)
    limit: StrictInt = Field(default=10, ge=1, le=1000)
    offset: StrictInt = Field(default=0, ge=0, le=MAX_OFFSET)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return search_metadata(value)


class ThreadCount(_Strict):
    """Body of POST /threads/count: the filters of POST /threads/search."""

    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None
    values: dict[str, Any] | None = Field(default=None, description="Refused when set.")

    @field_validator("values")
    @classmethod
    def _no_values(cls, value: dict[str, Any] | None) -> None:
        if value:
            raise ValueError("filtering threads by values is not supported; use metadata")
        return None


class ThreadOut(BaseModel):
    """A thread."""

    thread_id: str
    created_at: str
    updated_at: str
    metadata: dict[str, Any]
    status: ThreadStatus
    values: dict[str, Any] | None = Field(description="State after the thread's last run.")
    interrupts: dict[str, list[dict[str, Any]]] = Field(description="Pending, by task id.")


class ThreadWithTTLOut(ThreadOut):
    """A thread, with its TTL when `include=ttl` asks for it (null: it has none)."""

    ttl: ThreadTTLOut | None = Field(
        default=None, description="Only present with `include=ttl`; null: no TTL."
    )


class ThreadPrune(_Strict):
    """Body of POST /threads/prune (the Platform's)."""

    thread_ids: list[ResourceId] = Field(
        max_length=1000,
        description="The caller's threads to prune; ids of no thread of the caller's are "
        "left alone and not counted.",
    )
    strategy: TtlStrategy = Field(
        default="delete",
        description="`delete` each thread with its runs and checkpoints; `keep_latest` "
        "drops its checkpoints but the latest (a thread with an active run is skipped).",
    )


class ThreadPruneOut(BaseModel):
    """What POST /threads/prune did."""

    pruned_count: int = Field(description="Threads pruned.", examples=[2])


class HistoryRequest(_Strict):
    """Body of POST /threads/{thread_id}/history (the SDK's `get_history`)."""

    limit: StrictInt = Field(default=10, ge=1, le=1000)
    before: Annotated[str, StringConstraints(max_length=64)] | JsonObject | None = Field(
        default=None, description="A checkpoint id, or a checkpoint object with one."
    )
    metadata: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_mapping(value, "metadata")

    def before_checkpoint(self) -> str | None:
        """Return the checkpoint id `before` names (an id, or an object with one).

        Raises:
            ValueError: `before` is an object without a checkpoint id of 1-64 characters.
        """
        before = self.before
        if before is None or isinstance(before, str):
            return before or None
        inner = before.get("configurable", before)
        checkpoint_id = inner.get("checkpoint_id") if isinstance(inner, Mapping) else None
        if not isinstance(checkpoint_id, str) or not 1 <= len(checkpoint_id) <= 64:
            raise ValueError(
                "before is a checkpoint id or an object with a checkpoint_id "
                "(or configurable.checkpoint_id) of 1-64 characters"
            )
        return checkpoint_id


class HistoryQuery(HistoryRequest):
    """Body of POST /threads/{thread_id}/history: also `checkpoint`, the SDKs' start point.

    `checkpoint` narrows the history to a checkpoint namespace (a subgraph's) and to
    the checkpoints up to the one it names; `metadata` keeps the checkpoints whose
    metadata has every given key and value.
    """

    checkpoint: CheckpointRef | None = None


class StateCheckpointRequest(_Strict):
    """Body of POST /threads/{thread_id}/state/checkpoint (the SDKs' `get_state(checkpoint)`)."""

    checkpoint: CheckpointRef
    subgraphs: bool = Field(default=False, description="Include subgraph states.")


class StateUpdate(_Strict):
    """Body of POST /threads/{thread_id}/state: update the state as a node would.

    Goes through the graph's own `aupdate_state`, so reducers apply and the next run
    continues from the new checkpoint (the edit-and-regenerate path).
    """

    values: dict[str, Any] | list[Any] | None = Field(
        default=None, description="Values to write, as the node `as_node` would return them."
    )
    as_node: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = Field(
        default=None, description="Node the update is attributed to (decides what runs next)."
    )
    checkpoint: CheckpointRef | None = Field(
        default=None, description="Update from this checkpoint instead of the head (a fork)."
    )
    checkpoint_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None


class StateUpdateOut(BaseModel):
    """Answer of POST /threads/{thread_id}/state: the checkpoint the update wrote."""

    checkpoint: dict[str, Any]


class ThreadStateOut(BaseModel):
    """A checkpointed state of a thread."""

    values: dict[str, Any] | list[Any]
    next: list[str]
    tasks: list[dict[str, Any]]
    checkpoint: dict[str, Any] | None
    parent_checkpoint: dict[str, Any] | None
    metadata: dict[str, Any] | None
    created_at: str | None
    interrupts: list[dict[str, Any]]


# --------------------------------------------------------------------------- assistants


class AssistantSearch(_Strict):
    """Body of POST /assistants/search."""

    graph_id: str | None = Field(default=None, max_length=128)
    name: str | None = Field(default=None, max_length=128)
    metadata: dict[str, Any] | None = None
    limit: StrictInt = Field(default=10, ge=1, le=1000)
    offset: StrictInt = Field(default=0, ge=0, le=MAX_OFFSET)
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return search_metadata(value)


class AssistantCount(_Strict):
    """Body of POST /assistants/count."""

    graph_id: str | None = Field(default=None, max_length=128)
    name: str | None = Field(default=None, max_length=128)
    metadata: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return search_metadata(value)


#: An assistant's context: for an `atelier` assistant a brand preset, checked by the
#: engine against its graph's context schema (`GET /assistants/{id}/schemas`).
AssistantContext = Annotated[
    BrandPreset | dict[str, Any],
    Field(
        description="What the assistant's runs carry: for an atelier assistant a brand "
        "preset (BrandPreset; 422 naming context.<field> when it breaks a rule), for other "
        "graphs any object.",
    ),
]
AssistantName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
AssistantDescription = Annotated[str, StringConstraints(max_length=2000)]


class AssistantConfig(_Strict):
    """An assistant's config: `configurable` keys (a preset's fields too), tags, recursion limit."""

    configurable: dict[str, Any] | None = None
    tags: list[Annotated[str, StringConstraints(max_length=128)]] | None = Field(
        default=None, max_length=32
    )
    recursion_limit: StrictInt | None = Field(default=None, ge=1, le=10_000)

    @field_validator("configurable")
    @classmethod
    def _configurable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        reserved = sorted(RESERVED_CONFIGURABLE & set(value or {}))
        if reserved:
            raise ValueError(f"configurable keys {reserved} are set by the server")
        return _bounded_mapping(value, "configurable")


class _AssistantFields(_Strict):
    config: AssistantConfig | None = None
    context: AssistantContext | None = None
    metadata: dict[str, Any] | None = None
    name: AssistantName | None = None
    description: AssistantDescription | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return search_metadata(value)

    @field_validator("context")
    @classmethod
    def _context(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_mapping(dict(value) if value is not None else None, "context")

    @model_validator(mode="after")
    def _no_nul(self) -> _AssistantFields:
        # PostgreSQL's text and jsonb cannot hold U+0000: refused alike in every backend.
        from engine import dumps

        if "\\u0000" in dumps(self.model_dump(exclude_none=True)):
            raise ValueError("an assistant's texts may not contain U+0000 (NUL)")
        return self


class AssistantCreate(_AssistantFields):
    """Body of POST /assistants: a saved configuration of a graph (version 1)."""

    graph_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="The graph its runs run.", examples=["atelier"]
    )
    assistant_id: ResourceId | None = Field(default=None, description="Id; a UUID when unset.")
    if_exists: Literal["raise", "do_nothing"] = "raise"


class AssistantPatch(_AssistantFields):
    """Body of PATCH /assistants/{id}: a new version (fields unset stay; metadata merged)."""

    graph_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None


class AssistantVersionSearch(_Strict):
    """Body of POST /assistants/{id}/versions."""

    metadata: dict[str, Any] | None = None
    limit: StrictInt = Field(default=10, ge=1, le=1000)
    offset: StrictInt = Field(default=0, ge=0, le=MAX_OFFSET)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return search_metadata(value)


class AssistantLatest(_Strict):
    """Body of POST /assistants/{id}/latest: the version runs use from now on."""

    version: StrictInt = Field(ge=1, le=INT64_MAX)


class AssistantOut(BaseModel):
    """An assistant: a built-in graph, or a saved configuration of one (a version of it)."""

    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    version: int
    created_at: str
    updated_at: str


# --------------------------------------------------------------------------- stream frames


class RunMetadataData(BaseModel):
    """`data` of the first frame of every stream (again when a restart resumes the run)."""

    run_id: str
    thread_id: str
    attempt: int = Field(
        ge=0,
        description="1 on the first execution, +1 per resume after a restart; 0 when the run "
        "was cancelled before it started.",
    )
    schema_version: int = Field(default=SCHEMA_VERSION, description="Frame format version.")


class ErrorData(BaseModel):
    """`data` of the `error` frame sent before `end` when a run fails or times out."""

    error: str = Field(description="Error type.", examples=["TimeoutError"])
    message: str = Field(description="What went wrong, safe to show.")


class GapData(BaseModel):
    """`data` of a `gap` frame: frames before this id are no longer kept."""

    first_missing: int = Field(ge=1)
    last_missing: int = Field(ge=1)
    message: str = Field(
        description="Re-read the thread state (GET /threads/{thread_id}/state) to catch up."
    )


class EndData(BaseModel):
    """`data` of the last frame of every stream."""

    run_id: str
    status: Literal["success", "error", "timeout", "interrupted"]


STREAM_EXAMPLE = (
    "id: 1\nevent: metadata\n"
    'data: {"run_id":"1f0c…","thread_id":"9a1d…","attempt":1,"schema_version":1}\n\n'
    "id: 2\nevent: custom\n"
    'data: {"type":"stage.started","stage":"planner","attempt":0}\n\n'
    "id: 3\nevent: updates\n"
    'data: {"planner":{"intent":{"action":"create_post","topic":"平价护肤"}}}\n\n'
    "id: 4\nevent: custom|executor:5b7e…\n"
    'data: {"type":"supervisor.route","next_agent":"brief_compiler_agent","guidance":"",'
    '"focus_areas":[],"step":1}\n\n'
    ": heartbeat\n\n"
    "id: 5\nevent: messages|executor:5b7e…\n"
    'data: [{"type":"AIMessageChunk","content":"学生党"},{"langgraph_node":"writer_agent"}]\n\n'
    "id: 6\nevent: end\n"
    'data: {"run_id":"1f0c…","status":"success"}\n\n'
)
