"""State of the executor team (PRODUCT.md §1.2).

Each field says who writes it and who reads it. Artefact fields are written by
exactly one agent; control fields (counters, logs) are written by the node that
owns the loop and read by the router of that loop under the same name.
"""

from __future__ import annotations

from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    get_args,
    get_origin,
    get_type_hints,
)

import orjson
from langgraph.graph.message import add_messages
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

# typing_extensions' TypedDict: pydantic (graph JSON schemas, Studio) rejects typing's on 3.11.
from typing_extensions import TypedDict

from agentkit.adaptation import AdaptFrom
from agentkit.brand import BrandPreset
from agentkit.chat import chat_request, malformed
from agentkit.checks import Constraints
from agentkit.limits import TeamLimits
from agentkit.platforms import PLATFORM_IDS, PlatformId
from agentkit.post import DEFAULT_PLATFORM
from core.settings import ImageProviderName
from providers.assets import ASSET_ID_LENGTH
from providers.usage import add_usage

# The types and bounds of the pipeline's input fields (`PipelineInput`).
RequestText = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
#: One of the platform table's ids (`agentkit.platforms`); an unknown one is a 422 naming it.
PlatformName = PlatformId
AudienceText = Annotated[str, StringConstraints(max_length=200)]
AssetId = Annotated[str, StringConstraints(pattern=rf"^[0-9a-f]{{{ASSET_ID_LENGTH}}}$")]
ReferenceImages = Annotated[list[AssetId], Field(max_length=9)]
ReferenceTexts = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=4000)]], Field(max_length=5)
]
LayoutPreference = Literal["balanced", "image_heavy", "text_heavy"]
#: A conversation as a client sends it: LangChain messages in their JSON form.
ChatMessages = Annotated[list[dict[str, Any]], Field(max_length=200)]
ImageCount = Annotated[int, Field(ge=1, le=9)]


#: Quality dimensions the review agent scores, in fallback priority order.
QUALITY_DIMENSIONS: tuple[str, ...] = (
    "infoDensity",
    "textImageAlignment",
    "styleConsistency",
    "readability",
    "platformFit",
)


class TeamLogEntry(TypedDict):
    """One supervisor turn: what was asked for, where the run went, and why."""

    step: int
    requested: str  # the supervisor's raw choice ("" when unparsable)
    routed: str  # the node the router sent the run to
    reason: str | None  # fallback reason, None when the choice was followed
    detail: str  # why the choice was corrected ("" when followed)
    guidance: str
    focus_areas: list[str]
    digest: str  # fingerprint of the artefacts at decision time (progress detection)
    # The agents started together with `routed` (a parallel or planned step); absent
    # on the one-agent path.
    group: NotRequired[list[str]]
    planned: NotRequired[bool]  # the step came from the supervisor's plan, not a decision


class TeamInput(TypedDict, total=False):
    """What a caller (the pipeline's executor node, a test, Studio) passes in."""

    request: str  # the user's request, verbatim; read by every agent as data
    platform: str  # target platform, e.g. "xiaohongshu"
    audience: str | None
    constraints: dict[str, Any]  # planner's verifiable constraints (title/body length, …)
    intent: dict[str, Any] | None  # planner's intent (topic, goal, style, …)
    reference_images: list[str]  # uploaded asset ids; read by reference_intelligence_agent
    reference_texts: list[str]  # example posts; read by reference_intelligence_agent
    layout_preference: LayoutPreference
    image_count: int  # images wanted (1–9); read by layout and image planners
    image_provider: ImageProviderName  # read by the image tool
    knowledge_notes: list[dict[str, Any]]  # notes injected by rag; shown to every agent
    retry_context: dict[str, Any] | None  # previous verdict on a retry (PRODUCT.md §1.3)
    # Loop bounds; unset ones come from the context, then the defaults. The team's entry
    # node resolves them (agentkit.limits); routers and nodes read them (limits_of).
    limits: TeamLimits
    # The brand preset the run writes for (`agentkit.brand`): the writer reads its name and voice.
    brand: BrandPreset | None
    # The conversation when the team is served on its own (PRODUCT.md §7): the client's
    # messages, then writer_agent's draft as an AI message. The pipeline passes none.
    messages: Annotated[list[Any], add_messages]


class TeamOutput(TypedDict, total=False):
    """The artefacts that cross back to the caller."""

    creative_brief: dict[str, Any] | None  # brief_compiler_agent → all agents
    evidence_pack: dict[str, Any] | None  # research_evidence_agent → writer, review
    body_blocks: list[dict[str, Any]]  # research_evidence_agent → writer, layout, image cards
    reference_analyses: dict[str, Any] | None  # reference_intelligence_agent → image, writer
    layout_spec: dict[str, Any] | None  # layout_planner_agent → image_planner_agent
    image_plans: list[dict[str, Any]]  # image_planner_agent → image_agent
    generated_content: dict[str, Any] | None  # writer_agent {title, body, tags} → review, critic
    # writer_agent: its reply's id, which its streamed tokens carry → executor (the draft
    # message of the conversation, `agentkit.chat.post_message_update`)
    draft_message_id: str | None
    review_feedback: dict[str, Any] | None  # review_agent → supervisor, routers
    quality_scores: dict[str, float]  # review_agent → should_continue_review, quality_fallback
    reviewed_digest: str | None  # review_agent: fingerprint of the draft it judged (staleness)
    generated_image_asset_ids: list[str]  # image_agent (ordered by slot) → review, finalize
    images: list[dict[str, Any]]  # image_agent: {asset_id, url, slot, alt, path}
    team_log: list[TeamLogEntry]  # supervisor → routers (repeat cap), critic (deviation)


def transcript(
    left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Reduce a tool loop's transcript: append the new entries; None clears it.

    Entries are messages in `langchain_core.messages.message_to_dict` form, not
    message objects: LangGraph's `messages` stream mode emits every message a
    node returns, and the tool loops' turns are internal — only the writer's
    tokens belong on that stream (PRODUCT.md §2.3).
    """
    if right is None:
        return []
    return [*(left or []), *right]


#: How many unparsable-output notes `agent_errors` keeps (newest last).
MAX_NOTES = 8


def shared_list(
    left: list[str] | None, right: list[str] | dict[str, list[str]] | None
) -> list[str]:
    """Reduce a list of notes that agents running together may both change.

    A plain list replaces the notes (one writer, as every node writes it alone).
    A change `{"add": [...], "drop": [...]}` — what the team's wiring turns an
    agent's new list into, against the list the agent read (`graphs.team`) —
    applies to the current notes, so two agents of one parallel step that each
    add or clear their own note both keep their change. At most `MAX_NOTES`
    newest are kept.
    """
    if right is None:
        return list(left or [])
    if isinstance(right, list):
        return right[-MAX_NOTES:]
    dropped = set(right.get("drop") or [])
    kept = [note for note in left or [] if note not in dropped]
    added = [note for note in right.get("add") or [] if note not in kept]
    return [*kept, *added][-MAX_NOTES:]


class TeamState(TeamInput, TeamOutput, total=False):
    """Working state of the team subgraph."""

    supervisor_decision: dict[str, Any] | None  # supervisor → route_from_supervisor
    team_step: int  # supervisor decisions made so far; supervisor → router (step cap)
    invalid_decisions: int  # consecutive unparsable decisions; supervisor → router
    supervisor_messages: Annotated[list[dict[str, Any]], transcript]  # this turn's look-ups
    supervisor_tool_rounds: int  # supervisor → should_continue_supervisor
    research_messages: Annotated[list[dict[str, Any]], transcript]  # research tool loop
    research_tool_rounds: int  # rounds asked; research_evidence_agent → should_continue_research
    image_messages: Annotated[list[dict[str, Any]], transcript]  # image tool loop
    image_tool_rounds: int  # rounds asked for; image_agent → should_continue_image
    images_complete: bool  # image_agent → should_continue_image
    # Agents whose output could not be parsed, for the prompt; agents write it (a reducer:
    # agents of one parallel step may both write it).
    agent_errors: NotRequired[Annotated[list[str], shared_list]]
    # Agents routing stopped sending work to in this team run: capped after being chosen
    # again and again without progress. supervisor writes it; the routers and the
    # supervisor's stage table and suggestion read it (agentkit.routing.given_up).
    given_up: list[str]
    # Agents routing capped in this team run (chosen again and again without progress);
    # a re-pick of one whose artefact is present is redirected at once. supervisor writes
    # it, resolve_route reads it (agentkit.routing.capped).
    capped: list[str]
    # Roles whose model answered an optional tool offer in prose (small local models never
    # choose a tool unforced); supervisor / research / image agents write and read it, and
    # skip the offer on later turns instead of paying for another prose answer.
    no_optional_tools: Annotated[list[str], shared_list]
    # The supervisor's plan (PRODUCT.md §1.2, `plan`): the steps still to run, each the
    # agents started together. The supervisor writes it, the join after each step
    # (`team_join`) pops a step or clears it when the supervisor must be asked again.
    team_plan: list[list[str]]
    # The agents of the step running now when it came from a plan or named
    # `parallel_agents` (None on the one-agent path, where each agent hands straight
    # back to the supervisor). Supervisor and join write it; the agents' exits read it.
    team_group: list[str] | None
    # Where the join sends the run: the next step's agents, "supervisor" or "__end__".
    team_route: list[str]
    # Fingerprints of the context sections the supervisor was shown in this team run,
    # so a later decision shows only what changed (nodes.supervisor).
    supervisor_seen: dict[str, str]


# ---------------------------------------------------------------------------
# Pipeline (PRODUCT.md §1.1): planner → rag → executor → critic → finalize
# ---------------------------------------------------------------------------

Outcome = Literal["completed", "exhausted", "needs_clarification", "failed"]


class PipelineInput(TypedDict, total=False):
    """What a client passes in (PRODUCT.md §2.6); read-only once the run starts.

    The one declaration of the `atelier` input: each key's type, bounds, default
    and description. The graph takes it as its input schema; `AtelierInput`, the
    strict model a run's `input` is validated with, is derived from it (`model_of`).
    The TypedDict, not the model, is the source: `PipelineState` inherits its keys
    so that the nodes reading them are type-checked, a TypedDict can only inherit a
    TypedDict, and one built from a model at import is invisible to a type checker;
    a model built from a TypedDict keeps every annotation.

    `fast_mode` trades quality for time: one attempt (no critic retries) and a
    smaller team budget (at most 12 supervisor decisions, one research tool round,
    no supervisor look-ups, an agent re-chosen without progress corrected at its first
    repeat). The critic still judges the single attempt.
    """

    # The user's request; planner, rag, executor, critic.
    request: Required[
        Annotated[
            RequestText,
            Field(
                description="What to write, in the user's words (1–4000 characters).",
                examples=["写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"],
            ),
        ]
    ]
    # Target platform; planner → intent, team.
    platform: Annotated[
        PlatformName,
        Field(
            default=DEFAULT_PLATFORM,
            description=f"Target platform: one of {', '.join(PLATFORM_IDS)}.",
            examples=["xiaohongshu"],
        ),
    ]
    # Who the post is for, if the user said; planner, clarity.
    audience: Annotated[
        AudienceText | None,
        Field(default=None, description="Who the post is for.", examples=["大学生"]),
    ]
    # The user's verifiable constraints (`agentkit.checks.Constraints`); planner.
    constraints: Annotated[
        dict[str, Any] | None,
        Field(
            default=None,
            description="Verifiable constraints the post must meet: title_min/title_max, "
            "body_min/body_max (characters), tag_min/tag_max, image_min/image_max, "
            "must_include/must_avoid (term lists).",
            examples=[{"body_max": 600, "must_include": ["烟酰胺"]}],
        ),
    ]
    # Uploaded asset ids; executor → reference agent.
    reference_images: Annotated[
        ReferenceImages,
        Field(
            default_factory=list,
            description="Ids of uploaded reference images (POST /assets), at most 9.",
        ),
    ]
    # Example posts to imitate; executor → reference agent.
    reference_texts: Annotated[
        ReferenceTexts, Field(default_factory=list, description="Example posts to imitate.")
    ]
    # Executor → layout.
    layout_preference: Annotated[
        LayoutPreference,
        Field(default="balanced", description="How text and images are balanced."),
    ]
    # None: the deployment's default; executor → image tool.
    image_provider: Annotated[
        ImageProviderName | None,
        Field(default=None, description="Image provider (default: IMAGE_PROVIDER)."),
    ]
    # Images wanted; the planner merges it into the constraints.
    image_count: Annotated[
        Annotated[ImageCount, Strict()] | None,
        Field(default=None, description="Images wanted (1–9)."),
    ]
    # One attempt and a smaller team budget (see above); run start.
    fast_mode: Annotated[
        StrictBool, Field(default=False, description="One attempt, smaller team budget.")
    ]
    # Never ask a clarification question; planner.
    auto_confirm: Annotated[
        StrictBool, Field(default=False, description="Never ask a clarification question.")
    ]
    # The brand preset the run was started with (`agentkit.brand`): the fields it shares
    # with the input are merged into it (the input wins); writer, critic, rag read the rest.
    brand: Annotated[
        BrandPreset | None,
        Field(
            default=None,
            description="The brand preset (an assistant's context) the run writes for.",
        ),
    ]
    # A finished post to adapt for `platform` (`agentkit.adaptation`): planner (no question,
    # the post is in the request), the pipeline routes rag → the writer's adapter, not the team.
    adapt_from: Annotated[
        AdaptFrom | None,
        Field(
            default=None,
            description="A post written for another platform to adapt for `platform`: "
            "{platform, title, body, tags, images} (images: asset ids, reused where the "
            "target platform takes images).",
        ),
    ]
    # The conversation (PRODUCT.md §7): the client's messages are added with their ids;
    # the planner's question and the post are added as AI messages. Run start reads the
    # last human message's images (reference images); planner, writer the previous post.
    messages: Annotated[
        ChatMessages,
        Field(
            default_factory=list,
            description="LangChain chat input: when `request` is absent, it is the text of "
            "the last human message (string content, or its text blocks joined with "
            "newlines); that message's image blocks become reference images.",
            examples=[[{"type": "human", "content": "写一篇小红书笔记：平价护肤"}]],
        ),
        add_messages,
    ]


#: Largest JSON form of the `constraints` input.
MAX_CONSTRAINTS_BYTES = 16_384


class ChatInputRules(BaseModel):
    """The rules of chat input (`messages`), for a model with `request` and `messages`.

    When `request` is absent it is the text of the last human message
    (`agentkit.chat.chat_request`); a conversation with no human text is refused at
    `messages`.
    """

    @model_validator(mode="before")
    @classmethod
    def _request_from_messages(cls, data: Any) -> Any:
        # An explicit request wins; a conversation without human text is refused at
        # `messages` (below), where the client can see what to fix.
        if isinstance(data, dict) and "request" not in data and data.get("messages"):
            request = chat_request(data["messages"]) if isinstance(data["messages"], list) else ""
            if request:
                return {**data, "request": request}
        return data

    @field_validator("messages", check_fields=False)
    @classmethod
    def _human_text(cls, value: list[dict[str, Any]], info: ValidationInfo) -> list[dict[str, Any]]:
        for index, message in enumerate(value):
            wrong = malformed(message)
            if wrong:
                raise ValueError(f"messages[{index}]: {wrong}")
        if value and "request" not in info.data and not chat_request(value):
            raise ValueError("messages needs a human message with text (the request)")
        return value


class _InputRules(ChatInputRules):
    """What `AtelierInput` checks beyond each field's type and bounds."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("request", check_fields=False)
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("request must not be blank")
        return value

    @field_validator("constraints", check_fields=False)
    @classmethod
    def _valid_constraints(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        unknown = sorted(set(value) - set(Constraints.model_fields))
        if unknown:
            raise ValueError(
                f"unknown constraint(s) {unknown}; known: {', '.join(Constraints.model_fields)}"
            )
        Constraints.model_validate(value)  # bounds and ordered ranges
        if len(orjson.dumps(value)) > MAX_CONSTRAINTS_BYTES:
            raise ValueError(f"constraints may be at most {MAX_CONSTRAINTS_BYTES} bytes of JSON")
        return value


def model_of(schema: type[Any], *, name: str, base: type[BaseModel], doc: str) -> type[BaseModel]:
    """Return a Pydantic model with the keys of a TypedDict.

    Each key keeps its annotation (type, bounds, `Field` default and description);
    the model's fields are required exactly where the TypedDict's keys are.

    Args:
        schema: The TypedDict.
        name: The model's name (its JSON schema's title).
        base: The model's base: its config and validators.
        doc: The model's docstring (its JSON schema's description).

    Raises:
        TypeError: A key the TypedDict does not require has no default.
    """
    fields: dict[str, Any] = {}
    required: set[str] = set()
    # Read from the annotations, not `__required_keys__`: a TypedDict cannot see a
    # `Required` in the text annotations of a module with `from __future__ import annotations`.
    for key, hint in get_type_hints(schema, include_extras=True).items():
        marker = get_origin(hint)
        if marker is Required or (marker is not NotRequired and schema.__total__):
            required.add(key)
        fields[key] = get_args(hint)[0] if marker in (Required, NotRequired) else hint
    model = create_model(name, __base__=base, __doc__=doc, __module__=__name__, **fields)
    wrong = [k for k, f in model.model_fields.items() if f.is_required() != (k in required)]
    if wrong:
        raise TypeError(f"{schema.__name__}: give {wrong} a default or make them Required")
    return model


#: The `input` of a run of the `atelier` assistant: `PipelineInput`, strictly. Unknown
#: keys are refused, integers and booleans are not coerced from text, and the request
#: must not be blank; the graph gets only the fields the client sent.
AtelierInput = model_of(
    PipelineInput,
    name="AtelierInput",
    base=_InputRules,
    doc="The `input` of a run of the `atelier` assistant (PRODUCT.md §2.6).",
)


class PipelineOutput(TypedDict, total=False):
    """What crosses back to the client: the result payload of PRODUCT.md §2.5."""

    result: dict[str, Any]  # finalize → the caller (see nodes.finalize for the shape)


class PipelineState(PipelineInput, PipelineOutput, TeamOutput, total=False):
    """Working state of the pipeline; the TeamOutput fields hold the latest attempt.

    "run start" is `agentkit.run_start`, which also resets the per-run counters and
    history below when a new run enters the pipeline.
    """

    session_id: str  # run start: thread id (or a run-scoped id) → rag, critic (coordinator key)
    clarity: dict[str, Any] | None  # planner: {score, dimensions, missing} → finalize, events
    clarification: dict[str, Any] | None  # planner after a question: {choice, details} → planner
    # planner: {value: the interrupt value, request: what it asks about} → planner, which
    # pauses on it next (nodes.planner.question_pending)
    question: dict[str, Any] | None
    intent: dict[str, Any] | None  # planner: action, topic, …, constraints → rag, executor, critic
    max_attempts: int  # run start: 1 + MAX_RETRY_COUNT, 1 in fast mode → critic, route_from_critic
    team_limits: TeamLimits  # run start: the team's bounds, fast mode applied → executor
    replan_notes: list[dict[str, Any]]  # critic: ignored blocker notes → planner's context
    knowledge_query: str  # rag: the retrieval query of this attempt → events, finalize
    knowledge_notes: list[dict[str, Any]]  # rag → executor (team), critic (deviation check)
    style_references: list[str]  # rag: reference notes' content → executor (reference_texts)
    retry_context: dict[str, Any] | None  # critic: the previous verdict → rag query, executor
    failure: dict[str, Any] | None  # planner/executor: {stage, message} → routers, finalize
    attempt: int  # critic: attempts judged so far → route_from_critic, rag, executor, finalize
    replans: int  # critic: critic → planner loops so far → critic, route_from_critic
    verdict: dict[str, Any] | None  # critic: the latest verdict → route_from_critic, finalize
    attempts: list[dict[str, Any]]  # critic: every judged attempt with its post → finalize
    # Who made the draft the critic judges next: "team" (the executor) or "card" (redraw_card);
    # None (the critic's reset) then a state update: a person's edit. critic reads, resets.
    draft_source: str | None
    redraw: dict[str, Any] | None  # client (command.update): {slot, prompt} → redraw_card
    # The thread's last post {title, body, tags} when a chat message follows it (run start);
    # the planner clears it for a new request. Read through `agentkit.post.effective_request`.
    previous_post: dict[str, Any] | None
    # The id of the conversation's AI message for this run's post: the writer's streamed
    # tokens' id (executor), replaced by each draft and by the post (finalize).
    post_message_id: str | None
    # LLM calls, tokens and time by role, summed over every node of every run of the thread
    # (providers.usage); each metered pipeline node adds its own → finalize (result.usage).
    usage: Annotated[dict[str, dict[str, Any]], add_usage]
