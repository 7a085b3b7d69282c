"""The assistants this service serves, each with its contract (PRODUCT.md §2.6).

    atelier   the content pipeline (`graphs.pipeline.build_pipeline`): its input is
              `agentkit.state.AtelierInput`, an assistant of it carries a brand
              preset in its context (`agentkit.brand.BrandPreset`, also read from its
              `config.configurable`), which becomes its runs' input `brand`
              (`brand_into_input`); a resume answers the planner's
              clarification question (`check_clarification_answer`); a state update
              may ask for a card to be redrawn (`check_pipeline_update`); only the
              writing roles' tokens are streamed (`writer_tokens_only`).
    team      the executor team alone (`graphs.team.build_team`), as `langgraph.json`
              declares it: its input is `TeamRunInput`; the same token filter.
    campaign_planner  a brief → distinct topics for a campaign's calendar
              (`graphs.campaign_planner`): its input is
              `agentkit.campaign_plan.CampaignPlanRequest`; campaigns run it
              (docs/campaigns.md), and a client may too.

`atelier` and `team` take LangChain chat input (`messages`; `chat_text` reads the request of a
chat message) and keep the conversation in their state (PRODUCT.md §7).

`INTERNAL_ASSISTANTS` are the judges of evaluations (`graphs.judge`): hidden
assistants (`AssistantSpec.internal`) that only the engine's evaluation services run,
as ordinary runs (`graphs.evaluation`, docs/evaluate.md).

The product's composition (`app.composition`) hands `ASSISTANTS` to the engine's
opener, whose registry compiles each graph on the service's checkpointer.
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

from agentkit.brand import BrandPreset, preset_of, preset_with
from agentkit.campaign_plan import CampaignPlanRequest
from agentkit.chat import chat_request
from agentkit.judge_state import PairwiseJudgeInput, PostJudgeInput
from agentkit.post import card_to_redraw
from agentkit.state import AtelierInput, ChatInputRules, ChatMessages, RequestText
from engine import AssistantSpec
from graphs.campaign_planner import build_campaign_planner
from graphs.judge import build_pairwise_judge, build_post_judge
from graphs.pipeline import build_pipeline
from graphs.team import build_team
from providers.llm import streams_to_users


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


class EditedClarification(BaseModel):
    """The args of an `edit` decision: the details the user added."""

    details: str = Field(min_length=1, max_length=4000)

    @model_validator(mode="after")
    def _not_blank(self) -> EditedClarification:
        if not self.details.strip():
            raise ValueError("details must not be blank")
        return self


class EditedAction(BaseModel):
    """The action an `edit` decision sends back, with its edited args."""

    name: str = Field(max_length=128)
    args: EditedClarification


class ClarificationDecision(BaseModel):
    """One HITL decision on the clarification question (what Agent Chat UI sends).

    `approve` continues with defaults, `edit` carries the details in
    `edited_action.args.details`, `reject` ends the run as `needs_clarification`.
    """

    type: Literal["approve", "edit", "reject"]
    edited_action: EditedAction | None = None
    message: str | None = Field(default=None, max_length=4000)

    @model_validator(mode="after")
    def _edit_has_details(self) -> ClarificationDecision:
        if self.type == "edit" and self.edited_action is None:
            raise ValueError("an edit decision needs edited_action.args.details")
        return self


class ClarificationDecisions(BaseModel):
    """A HITL answer: one decision for the one action the question offers."""

    decisions: list[ClarificationDecision] = Field(min_length=1, max_length=1)


_CLARIFICATION_ANSWER: TypeAdapter[Any] = TypeAdapter(
    Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    | ClarificationDetails
    | ClarificationDecisions
)


def check_clarification_answer(value: Any, interrupts: Sequence[Interrupt]) -> None:
    """Check a resume value for the planner's clarification question.

    Accepted: "defaults", any other text (1–4000 characters, added as details),
    `{"action": "defaults"}` / `{"action": "details", "details": "..."}`, or a
    HITL answer `{"decisions": [{"type": "approve" | "edit" | "reject", …}]}`.

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
            'a clarification answer is "defaults", a text of 1-4000 characters, '
            '{"action": "defaults"} / {"action": "details", "details": "..."}, or '
            '{"decisions": [{"type": "approve"}]} (or "reject", or "edit" with '
            '{"edited_action": {"name": "clarify_request", "args": {"details": "..."}}})'
        ) from None


def check_pipeline_update(
    update: Mapping[str, Any], values: Mapping[str, Any], goto: Sequence[str]
) -> None:
    """Check a state update (a run's `command`, or `POST /threads/{t}/state`) of `atelier`.

    Only the card redraw has a rule beyond the state's keys: `redraw` must name a
    card of the thread's post (`agentkit.post.card_to_redraw`), and a
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


def chat_text(graph_input: Mapping[str, Any]) -> str:
    """Return what a run input says as a chat message: its last human message's text."""
    return chat_request(graph_input.get("messages"))


def brand_in_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the brand preset fields an assistant's `config.configurable` carries."""
    return preset_of(None, config)


def brand_into_input(graph_input: Mapping[str, Any], preset: Mapping[str, Any]) -> dict[str, Any]:
    """Return a run's input with its assistant's preset as its `brand`.

    The fields of a `brand` the input sends itself win (`agentkit.brand.preset_with`);
    the graph fills the input's unset fields from it when the run starts.
    """
    return {**graph_input, "brand": preset_with(preset, graph_input.get("brand"))}


class TeamRunInput(ChatInputRules):
    """The `input` of a run of the `team` assistant: `agentkit.state.TeamInput`.

    The request (or chat `messages`, as for `atelier`) is checked; the team's
    other keys (`platform`, `constraints`, `intent`, `limits`, …) go to its entry
    node as they are.
    """

    model_config = ConfigDict(extra="allow")

    request: RequestText
    messages: ChatMessages = Field(default_factory=list)


ATELIER = AssistantSpec(
    assistant_id="atelier",
    build_graph=build_pipeline,
    name="atelier",
    description="Plan, research, write, illustrate and review a post (PRODUCT.md §1).",
    input_model=AtelierInput,
    check_resume=check_clarification_answer,
    check_update=check_pipeline_update,
    keep_message=writer_tokens_only,
    chat_text=chat_text,
    context_type=BrandPreset,
    context_in_config=brand_in_config,
    context_into_input=brand_into_input,
)

TEAM = AssistantSpec(
    assistant_id="team",
    build_graph=build_team,
    name="team",
    description="The executor team alone: research, write, illustrate and review one draft.",
    input_model=TeamRunInput,
    keep_message=writer_tokens_only,
    chat_text=chat_text,
)

CAMPAIGN_PLANNER = AssistantSpec(
    assistant_id="campaign_planner",
    build_graph=build_campaign_planner,
    name="campaign_planner",
    description="Plan a campaign's calendar: a brief → as many distinct topics as posts.",
    input_model=CampaignPlanRequest,
)

#: Every assistant the service serves: every graph `langgraph.json` declares.
ASSISTANTS: tuple[AssistantSpec, ...] = (ATELIER, TEAM, CAMPAIGN_PLANNER)

PAIRWISE_JUDGE = AssistantSpec(
    assistant_id="pairwise_judge",
    build_graph=build_pairwise_judge,
    name="pairwise_judge",
    description="Compare two posts of one brief, judged in both orders (experiments).",
    input_model=PairwiseJudgeInput,
    internal=True,
)

POST_JUDGE = AssistantSpec(
    assistant_id="post_judge",
    build_graph=build_post_judge,
    name="post_judge",
    description="Score one finished post on an absolute rubric (online evaluation).",
    input_model=PostJudgeInput,
    internal=True,
)

#: The hidden assistants the engine's evaluation services run (never listed or served).
INTERNAL_ASSISTANTS: tuple[AssistantSpec, ...] = (PAIRWISE_JUDGE, POST_JUDGE)
