"""The engine's registry of assistants: compiled graphs with their API contract.

An `AssistantSpec` is everything the engine needs to serve a graph under an
assistant id (the graph factory, the input model, the resume and update checks,
the token filter, the context type and how a saved context reaches a run's input);
the product declares its specs (`graphs.assistants.ASSISTANTS`), and the engine's
opener builds them once on its checkpointer (`build_assistants`, or an
`AssistantFactory` tests pass).

Those are the built-in assistants, one per graph, read-only. A client creates more
(`POST /assistants`): an `AssistantRecord`, one version of a saved configuration of a
graph owned by the API key that created it; a run naming one runs the built-in graph
of its `graph_id` with the record attached (`Assistant.with_record`). See
docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.store.base import BaseStore
from langgraph.types import Interrupt
from pydantic import BaseModel

from engine.records import now

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
#: Read the context fields an assistant's `config` carries (in `configurable`).
ConfigContext = Callable[[Mapping[str, Any]], dict[str, Any]]
#: Return a run's validated input with a created assistant's (checked) context in it.
ContextInput = Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class AssistantSpec:
    """One assistant: its id (also its graph id), its graph factory and its contract.

    A plain value: no compiled graph, no connection, so it can be declared at import.
    """

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
    # The context fields an assistant's `config.configurable` may carry too, checked
    # with its context (the context wins); None: configurable carries no context.
    context_in_config: ConfigContext | None = None
    # How a created assistant's context reaches its runs: put into the run's input
    # (the run's own input wins where the hook says); None: it does not.
    context_into_input: ContextInput | None = None
    # Served only to the engine's own services (the judges of evaluations): not listed,
    # not runnable or reachable by a client's request, never a created assistant's graph.
    internal: bool = False


#: What `POST /assistants` does when the id is taken by the caller.
IfExists = Literal["raise", "do_nothing"]


@dataclass(frozen=True)
class AssistantRecord:
    """One version of an assistant a client created: a saved configuration of a graph."""

    assistant_id: str
    #: The API key that created it; nobody else sees it.
    owner: str
    #: The built-in graph its runs run.
    graph_id: str
    version: int
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    #: When the assistant (its first version) was created.
    created_at: str
    #: When this version was made.
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        """Return the assistant (or version) in the LangGraph Platform shape."""
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.name,
            "description": self.description,
            "config": self.config,
            "context": self.context,
            "metadata": self.metadata,
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class Assistant:
    """One graph served under an assistant id: a built-in one, or one a client created."""

    spec: AssistantSpec
    graph: Pregel[Any, Any, Any, Any]
    created_at: str = field(default_factory=now)
    #: The created assistant's version this is (None: the built-in assistant).
    record: AssistantRecord | None = None

    def with_record(self, record: AssistantRecord) -> Assistant:
        """Return this graph served as the created assistant `record`."""
        return replace(self, record=record)

    @property
    def builtin(self) -> bool:
        """Whether this is the read-only assistant the server was started with."""
        return self.record is None

    @classmethod
    def build(cls, spec: AssistantSpec, checkpointer: BaseCheckpointSaver) -> Assistant:
        """Compile the spec's graph with `checkpointer`."""
        return cls(spec, spec.build_graph(checkpointer))

    @property
    def assistant_id(self) -> str:
        """The assistant's id (a built-in one's is its graph id)."""
        return self.record.assistant_id if self.record is not None else self.spec.assistant_id

    @property
    def graph_id(self) -> str:
        """The graph's id (the built-in assistant's id)."""
        return self.spec.assistant_id

    @property
    def node_names(self) -> list[str]:
        """The graph's nodes a request may name (goto, interrupt_before, …), sorted."""
        return sorted(n for n in self.graph.nodes if not n.startswith("__"))

    @property
    def state_keys(self) -> list[str]:
        """The graph's state keys a request may write (command.update, state values), sorted."""
        return sorted(k for k in self.graph.channels if not k.startswith("__") and ":" not in k)

    def to_json(self) -> dict[str, Any]:
        """Return the assistant in the LangGraph Platform shape."""
        if self.record is not None:
            return self.record.to_json()
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.spec.name,
            "description": self.spec.description,
            "config": {},
            "context": {},
            "metadata": {},
            "version": 1,
            "created_at": self.created_at,
            "updated_at": self.created_at,
        }


AssistantFactory = Callable[[BaseCheckpointSaver], Mapping[str, Assistant]]


def build_assistants(
    specs: Iterable[AssistantSpec], checkpointer: BaseCheckpointSaver
) -> dict[str, Assistant]:
    """Build each spec's assistant with `checkpointer`, by assistant id.

    Raises:
        ValueError: Two specs have the same assistant id.
    """
    assistants: dict[str, Assistant] = {}
    for spec in specs:
        if spec.assistant_id in assistants:
            raise ValueError(f"two assistants are named {spec.assistant_id!r}")
        assistants[spec.assistant_id] = Assistant.build(spec, checkpointer)
    return assistants


def with_store(assistants: Mapping[str, Assistant], store: BaseStore) -> dict[str, Assistant]:
    """Return the assistants with `store` as their graphs' runtime store (`runtime.store`).

    The graphs are copies compiled alike, with the store; their subgraphs get it from
    the run. A graph built outside the service (a notebook) has no store.
    """
    return {
        assistant_id: replace(assistant, graph=assistant.graph.copy(update={"store": store}))
        for assistant_id, assistant in assistants.items()
    }


def registry(specs: Iterable[AssistantSpec]) -> AssistantFactory:
    """Return the factory that builds the assistants of `specs` on the service's checkpointer."""
    frozen = tuple(specs)

    def build(checkpointer: BaseCheckpointSaver) -> dict[str, Assistant]:
        return build_assistants(frozen, checkpointer)

    return build
