"""What a run's stream carries: LangGraph stream chunks turned into SSE frames.

Event names follow the LangGraph Platform dialect the official SDK parses:
`metadata` first, then one event per chunk named after its stream mode
(`messages-tuple` is sent as `messages`), `error` when the run failed, `end` last.
With `stream_subgraphs` a subgraph's chunk carries its namespace in the event name
(`updates|executor:<task id>`).

Deliberate deviation: the graph is always streamed with `subgraphs=True`. Without
it LangGraph drops the `custom` events and LLM tokens of subgraphs, and the
executor team (a subgraph) is where most pipeline events and the writer's tokens
come from; so when the client did not ask for subgraphs, those two modes are
sent un-namespaced and the subgraphs' other modes are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, cast

from langgraph.types import StreamMode

from providers.local_llm import EmbeddedModelCrashedError

#: Version of the frame format, sent in every `metadata` frame.
SCHEMA_VERSION = 1

StreamModeName = Literal["values", "updates", "messages-tuple", "custom", "tasks", "debug"]
#: Stream modes a client may ask for.
STREAM_MODES: tuple[str, ...] = ("values", "updates", "messages-tuple", "custom", "tasks", "debug")
#: Events every stream carries whatever its modes.
CONTROL_EVENTS: frozenset[str] = frozenset({"metadata", "error", "end", "gap"})
#: Subgraph modes forwarded even when the client did not ask for subgraphs.
_ALWAYS_FORWARDED = frozenset({"custom", "messages"})


def graph_mode(mode: str) -> str:
    """Return the LangGraph stream mode behind a client stream mode."""
    return "messages" if mode == "messages-tuple" else mode


def graph_modes(modes: Iterable[str]) -> list[StreamMode]:
    """Return the LangGraph stream modes for client modes, deduplicated, in order."""
    return [cast(StreamMode, m) for m in dict.fromkeys(graph_mode(m) for m in modes)]


MessageFilter = Callable[[Mapping[str, Any]], bool]


class FrameTranslator:
    """Turn `astream(..., subgraphs=True)` items into `(event, data)` pairs."""

    def __init__(
        self,
        modes: Iterable[str],
        *,
        subgraphs: bool,
        keep_message: MessageFilter | None = None,
    ) -> None:
        """Translate for the client's stream modes.

        Args:
            modes: Client stream modes (`messages-tuple`, not `messages`).
            subgraphs: Whether the client asked for namespaced subgraph events.
            keep_message: Decides from a token's metadata whether it is streamed
                (an assistant keeps its internal calls off the token stream).
        """
        self._modes = frozenset(graph_modes(modes))
        self._subgraphs = subgraphs
        self._keep_message = keep_message

    def __call__(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> tuple[str, Any] | None:
        """Return the frame's event name and data, or None when the chunk is not sent."""
        if mode not in self._modes:
            return None
        if namespace and not self._subgraphs and mode not in _ALWAYS_FORWARDED:
            return None
        if mode == "messages":
            message, metadata = chunk
            if self._keep_message is not None and not self._keep_message(metadata):
                return None
            chunk = [message, metadata]
        if namespace and self._subgraphs:
            return f"{mode}|{'|'.join(namespace)}", chunk
        return mode, chunk


def public_error(exc: BaseException) -> dict[str, str]:
    """Return the `error` frame of a failed run: the error's type and a safe message.

    Messages of LangGraph's own errors (recursion limit, invalid update, unknown
    interrupt) and of validation errors describe the run, not the server, and are
    kept; any other exception may carry internals (URLs, paths, provider answers),
    so only its type is named and the full error goes to the server log.
    """
    name = type(exc).__name__
    module = type(exc).__module__
    safe = (ValueError, KeyError, EmbeddedModelCrashedError)  # messages written for users
    if module.startswith(("langgraph.", "pydantic")) or isinstance(exc, safe):
        message = str(exc).strip() or name
    else:
        message = f"the run failed with {name}; the server log has the details"
    return {"error": name, "message": message[:1000]}
