"""The assistants this service serves, each with its contract (PRODUCT.md §2.6).

    atelier   the content pipeline (`graphs.pipeline.build_pipeline`): its input is
              `studio.state.AtelierInput`; a resume answers the planner's
              clarification question (`check_clarification_answer`); a state update
              may ask for a card to be redrawn (`check_pipeline_update`); only the
              writing roles' tokens are streamed (`writer_tokens_only`).

Whoever opens the run engine (the app, `atelier worker`) hands `ASSISTANTS` to its
registry (`engine.assistants.build_assistants`), which compiles each graph on the
service's checkpointer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from langgraph.types import Interrupt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from graphs.pipeline import build_pipeline
from graphs.spec import AssistantSpec
from providers.llm import streams_to_users
from studio.post import card_to_redraw
from studio.state import AtelierInput


class ClarificationDetails(BaseModel):
    """An answer to the planner's clarification question."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["defaults", "details"]
    details: str = Field(default="", max_length=4000)

    @model_validator(mode="after")
    def _details_given(self) -> ClarificationDetails:
        if self.action == "details" and not self.details.strip():
            raise ValueError("details must not be blank when action is 'details'")
        return self


_CLARIFICATION_ANSWER: TypeAdapter[Any] = TypeAdapter(
    Annotated[str, StringConstraints(min_length=1, max_length=4000)] | ClarificationDetails
)


def check_clarification_answer(value: Any, interrupts: Sequence[Interrupt]) -> None:
    """Check a resume value for the planner's clarification question.

    Accepted: "defaults", any other text (1–4000 characters, added as details), or
    `{"action": "defaults"}` / `{"action": "details", "details": "..."}`.

    Raises:
        ValueError: The value is none of those.
    """
    asks_clarification = any(
        isinstance(i.value, Mapping) and i.value.get("type") == "clarification" for i in interrupts
    )
    if not asks_clarification:
        return
    try:
        _CLARIFICATION_ANSWER.validate_python(value)
    except ValidationError:
        raise ValueError(
            'a clarification answer is "defaults", a text of 1-4000 characters, or '
            '{"action": "defaults"} / {"action": "details", "details": "..."}'
        ) from None


def check_pipeline_update(
    update: Mapping[str, Any], values: Mapping[str, Any], goto: Sequence[str]
) -> None:
    """Check a state update (a run's `command`, or `POST /threads/{t}/state`) of `atelier`.

    Only the card redraw has a rule beyond the state's keys: `redraw` must name a
    card of the thread's post (`studio.post.card_to_redraw`), and a
    `goto: "redraw_card"` needs one, in the update or already in the state.

    Raises:
        ValueError: What is wrong, starting with the key at fault (`redraw`, `redraw.slot`).
    """
    wanted = update.get("redraw") if "redraw" in update else values.get("redraw")
    if wanted is None:
        if "redraw_card" in goto:
            raise ValueError('redraw: goto "redraw_card" needs {"redraw": {"slot": n}}')
        return
    try:
        card_to_redraw(wanted, values.get("images") or [])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("redraw", *first["loc"]))
        raise ValueError(f"{where}: {first['msg']}") from None
    except ValueError as exc:
        raise ValueError(f"redraw.slot: {exc}") from None


#: The `atelier` assistant's token filter: the writing roles' tokens only.
writer_tokens_only = streams_to_users

ATELIER = AssistantSpec(
    assistant_id="atelier",
    build_graph=build_pipeline,
    name="atelier",
    description="Plan, research, write, illustrate and review a post (PRODUCT.md §1).",
    input_model=AtelierInput,
    check_resume=check_clarification_answer,
    check_update=check_pipeline_update,
    keep_message=writer_tokens_only,
)

#: Every assistant the service serves.
ASSISTANTS: tuple[AssistantSpec, ...] = (ATELIER,)
