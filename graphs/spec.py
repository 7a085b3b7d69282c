"""What an assistant is, as a plain value: its graph factory and its API contract.

An `AssistantSpec` says everything the run engine needs to serve a graph under an
assistant id: how to build the graph on the service's checkpointer, the strict
Pydantic model a run's `input` must satisfy, a check of resume values against the
pending interrupts, a check of state updates, which LLM tokens reach the
`messages` stream, and how to read its input as a chat message. It holds no
compiled graph and no connection, so it can be declared at import
(`graphs.assistants`), stored, or made by a user (a preset). The engine's
registry (`engine.assistants.build_assistants`) compiles the graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Interrupt
from pydantic import BaseModel

#: Build an assistant's graph, compiled with the given checkpointer.
GraphFactory = Callable[[BaseCheckpointSaver], Pregel[Any, Any, Any, Any]]
#: Check a resume value against the pending interrupts; raise ValueError when wrong.
ResumeCheck = Callable[[Any, Sequence[Interrupt]], None]
#: Check a state update (values, the thread's values, goto nodes); raise ValueError
#: whose text starts with the key at fault ("redraw.slot: ...") when wrong.
UpdateCheck = Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[str]], None]
#: Decide from a token's `messages` metadata whether it is streamed.
TokenFilter = Callable[[Mapping[str, Any]], bool]
#: Read what a (validated) run input says as a chat message: the text of its last
#: human message, "" when it has none.
ChatReader = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True)
class AssistantSpec:
    """One assistant: its id (also its graph id), its graph factory and its contract."""

    assistant_id: str
    build_graph: GraphFactory
    name: str
    description: str
    input_model: type[BaseModel] | None = None  # validates `input`; None accepts any object
    check_resume: ResumeCheck | None = None  # `command.resume` values
    check_update: UpdateCheck | None = None  # `command.update` and POST …/state values
    keep_message: TokenFilter | None = None  # None streams every token LangGraph emits
    # Chat input (`messages`): a message on a thread waiting at an interrupt answers it;
    # None: the assistant takes no chat input.
    chat_text: ChatReader | None = None
    # What an assistant of this graph carries in its `context` (a TypedDict or model,
    # validated and published as its context schema); None: any object.
    context_type: Any = None
