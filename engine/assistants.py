"""The engine's registry of assistants: compiled graphs with their API contract.

An `Assistant` is an `AssistantSpec` (`graphs.spec`: the graph factory, the input
model, the resume and update checks, the token filter) whose graph has been built
with the service's checkpointer. Whoever opens the engine passes the specs it
serves (`graphs.assistants.ASSISTANTS`; tests their small graphs'), and the
registry builds them once in the app's lifespan (or a worker's start) through an
`AssistantFactory` (`registry(specs)`).

Those are the built-in assistants, one per graph, read-only. A client creates more
(`POST /assistants`): an `AssistantRecord`, one version of a saved configuration of a
graph (its `config`, `context`, `metadata`, `name`, `description`) owned by the API key
that created it. Every update is a new version; one version is the latest, the one
runs use. A run naming such an assistant runs the built-in graph of its `graph_id`
with the record attached (`Assistant.with_record`): the run's `assistant_id` is the
created one, its graph the graph id's (`RunRecord.graph_id`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from engine.records import now
from graphs.spec import AssistantSpec

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


def registry(specs: Iterable[AssistantSpec]) -> AssistantFactory:
    """Return the factory that builds the assistants of `specs` on the service's checkpointer."""
    frozen = tuple(specs)

    def build(checkpointer: BaseCheckpointSaver) -> dict[str, Assistant]:
        return build_assistants(frozen, checkpointer)

    return build
