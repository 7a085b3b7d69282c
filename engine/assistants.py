"""The assistants the service serves: compiled graphs with their API contract.

An `Assistant` pairs a compiled LangGraph graph (built with the service's
checkpointer) with what the HTTP layer needs to serve it: the Pydantic model its
`input` must satisfy, a check of `command.resume` values against the pending
interrupts, and which LLM tokens reach the `messages` stream. The service builds
them once in the app's lifespan through an `AssistantFactory`; tests pass their
own factory with small graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from langgraph.types import Interrupt
from pydantic import BaseModel

from engine.frames import MessageFilter
from engine.records import now

#: Check a resume value against the pending interrupts; raise ValueError when wrong.
ResumeCheck = Callable[[Any, Sequence[Interrupt]], None]
#: Check a state update (values, the thread's values, goto nodes); raise ValueError when wrong.
UpdateCheck = Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[str]], None]


@dataclass(frozen=True)
class Assistant:
    """One graph served under an assistant id (also its graph id)."""

    assistant_id: str
    graph: Pregel[Any, Any, Any, Any]
    name: str
    description: str
    input_model: type[BaseModel] | None = None  # validates `input`; None accepts any object
    check_resume: ResumeCheck | None = None
    check_update: UpdateCheck | None = None  # command.update / POST …/state values
    keep_message: MessageFilter | None = None  # None streams every token LangGraph emits
    created_at: str = field(default_factory=now)

    @property
    def graph_id(self) -> str:
        """The graph's id (the assistant id: one assistant per graph)."""
        return self.assistant_id

    def to_json(self) -> dict[str, Any]:
        """Return the assistant in the LangGraph Platform shape."""
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.graph_id,
            "name": self.name,
            "description": self.description,
            "config": {},
            "context": {},
            "metadata": {},
            "version": 1,
            "created_at": self.created_at,
            "updated_at": self.created_at,
        }


AssistantFactory = Callable[[BaseCheckpointSaver], Mapping[str, Assistant]]


def default_assistants(checkpointer: BaseCheckpointSaver) -> dict[str, Assistant]:
    """Build the service's assistants: `atelier`, the content pipeline."""
    from app.schemas import (
        AtelierInput,
        check_clarification_answer,
        check_pipeline_update,
        writer_tokens_only,
    )
    from graphs.pipeline import build_pipeline

    atelier = Assistant(
        assistant_id="atelier",
        graph=build_pipeline(checkpointer=checkpointer),
        name="atelier",
        description="Plan, research, write, illustrate and review a post (PRODUCT.md §1).",
        input_model=AtelierInput,
        check_resume=check_clarification_answer,
        check_update=check_pipeline_update,
        keep_message=writer_tokens_only,
    )
    return {atelier.assistant_id: atelier}
