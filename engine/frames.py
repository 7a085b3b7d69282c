"""What a run's stream carries: LangGraph stream chunks turned into SSE frames.

Event names follow the LangGraph Platform dialect the official SDK parses:
`metadata` first, then one event per chunk named after its stream mode
(`messages-tuple` is sent as `messages`), `error` when the run failed, `end` last.
With `stream_subgraphs` a subgraph's chunk carries its namespace in the event name
(`updates|executor:<task id>`).

Two modes older clients (Studio among them) still ask for are served with the
Platform's meaning:

* `messages` (the legacy mode, when `messages-tuple` is not asked for too): for
  each LLM message, `messages/metadata` `{id: {"metadata": ...}}` when it starts,
  then `messages/partial` with the message accumulated so far after every token
  (`messages/complete` for a whole message), never namespaced.
* `checkpoints`: LangGraph's checkpoint payload (`config`, `parent_config`,
  `values`, `metadata`, `next`, `tasks`) plus `checkpoint` and
  `parent_checkpoint` as `{thread_id, checkpoint_ns, checkpoint_id, ...}`.

`events` (LangChain's `astream_events`) is a different way of running a graph and
is refused with a 422 that names it, like any mode not listed here.

Deliberate deviation: the graph is always streamed with `subgraphs=True`. Without
it LangGraph drops the `custom` events and LLM tokens of subgraphs, and the
executor team (a subgraph) is where most pipeline events and the writer's tokens
come from; so when the client did not ask for subgraphs, those two modes are
sent un-namespaced and the subgraphs' other modes are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, cast, get_args

from langchain_core.messages import BaseMessage, BaseMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode

#: Version of the frame format, sent in every `metadata` frame.
SCHEMA_VERSION = 1

StreamModeName = Literal[
    "values", "updates", "messages-tuple", "messages", "custom", "tasks", "checkpoints", "debug"
]
#: Stream modes a client may ask for.
STREAM_MODES: tuple[str, ...] = get_args(StreamModeName)
#: Platform stream modes Atelier refuses, with the reason the 422 gives.
UNSUPPORTED_STREAM_MODES: dict[str, str] = {
    "events": "LangChain's astream_events is a different way of running a graph; "
    "messages-tuple streams the tokens and custom the pipeline's events",
    "tools": "it belongs to the Platform's v2 event streaming, which Atelier does not serve",
    "lifecycle": "it belongs to the Platform's v2 event streaming, which Atelier does not serve",
}
#: Events every stream carries whatever its modes.
CONTROL_EVENTS: frozenset[str] = frozenset({"metadata", "error", "end", "gap"})
#: Subgraph modes forwarded even when the client did not ask for subgraphs.
_ALWAYS_FORWARDED = frozenset({"custom", "messages"})


def graph_mode(mode: str) -> str:
    """Return the LangGraph stream mode behind a client stream mode."""
    return "messages" if mode == "messages-tuple" else mode


def checkpoint_ref(config: RunnableConfig | None) -> dict[str, Any] | None:
    """Return the Platform's name of the checkpoint a config points at (None for none)."""
    if not config:
        return None
    configurable = config.get("configurable") or {}
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
        "checkpoint_map": configurable.get("checkpoint_map"),
    }


def graph_modes(modes: Iterable[str]) -> list[StreamMode]:
    """Return the LangGraph stream modes for client modes, deduplicated, in order."""
    return [cast(StreamMode, m) for m in dict.fromkeys(graph_mode(m) for m in modes)]


MessageFilter = Callable[[Mapping[str, Any]], bool]


Frame = tuple[str, Any]


class FrameTranslator:
    """Turn `astream(..., subgraphs=True)` items into `(event, data)` frames.

    One translator serves one run's execution: the legacy `messages` mode
    accumulates each message's tokens across calls.
    """

    def __init__(
        self,
        modes: Iterable[str],
        *,
        subgraphs: bool,
        keep_message: MessageFilter | None = None,
    ) -> None:
        """Translate for the client's stream modes.

        Args:
            modes: Client stream modes.
            subgraphs: Whether the client asked for namespaced subgraph events.
            keep_message: Decides from a token's metadata whether it is streamed
                (an assistant keeps its internal calls off the token stream).
        """
        modes = list(modes)
        self._modes = frozenset(graph_modes(modes))
        self._subgraphs = subgraphs
        self._keep_message = keep_message
        # As the Platform: asked together, `messages-tuple` wins over legacy `messages`.
        self._legacy_messages = "messages" in modes and "messages-tuple" not in modes
        self._messages: dict[str, BaseMessage] = {}

    def __call__(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> list[Frame]:
        """Return the frames (event name and data) a chunk becomes; none when it is not sent."""
        if mode not in self._modes:
            return []
        if namespace and not self._subgraphs and mode not in _ALWAYS_FORWARDED:
            return []
        if mode == "messages":
            message, metadata = chunk
            if self._keep_message is not None and not self._keep_message(metadata):
                return []
            if self._legacy_messages:
                return self._legacy_message(message, metadata)
            chunk = [message, metadata]
        elif mode == "checkpoints":
            chunk = {
                **chunk,
                "checkpoint": checkpoint_ref(chunk.get("config")),
                "parent_checkpoint": checkpoint_ref(chunk.get("parent_config")),
            }
        if namespace and self._subgraphs:
            return [(f"{mode}|{'|'.join(namespace)}", chunk)]
        return [(mode, chunk)]

    def _legacy_message(self, message: BaseMessage, metadata: Any) -> list[Frame]:
        """Frames of the legacy `messages` mode: the message so far, its metadata first."""
        frames: list[Frame] = []
        key = message.id or ""
        seen = self._messages.get(key)
        if seen is None:
            self._messages[key] = message
            frames.append(("messages/metadata", {key: {"metadata": metadata}}))
        elif isinstance(seen, BaseMessageChunk) and isinstance(message, BaseMessageChunk):
            self._messages[key] = seen + message
        else:
            self._messages[key] = message
        event = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        return [*frames, (event, [self._messages[key]])]


#: Exceptions whose messages are written for users, wherever they are raised.
SAFE_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError)


def public_error(exc: BaseException, safe: tuple[type[BaseException], ...] = ()) -> dict[str, str]:
    """Return the `error` frame of a failed run: the error's type and a safe message.

    Messages of LangGraph's own errors (recursion limit, invalid update, unknown
    interrupt) and of validation errors describe the run, not the server, and are
    kept, as are those of `safe` (the product's errors written for users, e.g. a
    crashed model's one line, which the engine's opener is given); any other
    exception may carry internals (URLs, paths, provider answers), so only its type
    is named and the full error goes to the server log.
    """
    name = type(exc).__name__
    module = type(exc).__module__
    if module.startswith(("langgraph.", "pydantic")) or isinstance(exc, (*SAFE_ERRORS, *safe)):
        message = str(exc).strip() or name
    else:
        message = f"the run failed with {name}; the server log has the details"
    return {"error": name, "message": message[:1000]}
