"""State of the executor team (PRODUCT.md §1.2).

Each field says who writes it and who reads it. Artefact fields are written by
exactly one agent; control fields (counters, logs) are written by the node that
owns the loop and read by the router of that loop under the same name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Required

from pydantic import Field, StringConstraints

# typing_extensions' TypedDict: pydantic (graph JSON schemas, Studio) rejects typing's on 3.11.
from typing_extensions import TypedDict

from core.settings import ImageProviderName
from providers.assets import ASSET_ID_LENGTH
from providers.usage import add_usage
from studio.limits import TeamLimits

# The pipeline's input fields: each type and its bounds, declared once. The HTTP API's
# `input` (`app.schemas.AtelierInput`) is built from these same types and adds what only
# a client needs (descriptions, examples, defaults, strict parsing); a test ties the
# two field by field (tests/app/test_atelier_input.py).
RequestText = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
PlatformName = Annotated[
    str, StringConstraints(min_length=1, max_length=40, pattern=r"^[a-z0-9_-]+$")
]
AudienceText = Annotated[str, StringConstraints(max_length=200)]
AssetId = Annotated[str, StringConstraints(pattern=rf"^[0-9a-f]{{{ASSET_ID_LENGTH}}}$")]
ReferenceImages = Annotated[list[AssetId], Field(max_length=9)]
ReferenceTexts = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=4000)]], Field(max_length=5)
]
LayoutPreference = Literal["balanced", "image_heavy", "text_heavy"]
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
    # node resolves them (studio.limits); routers and nodes read them (limits_of).
    limits: TeamLimits


class TeamOutput(TypedDict, total=False):
    """The artefacts that cross back to the caller."""

    creative_brief: dict[str, Any] | None  # brief_compiler_agent → all agents
    evidence_pack: dict[str, Any] | None  # research_evidence_agent → writer, review
    body_blocks: list[dict[str, Any]]  # research_evidence_agent → writer, layout, image cards
    reference_analyses: dict[str, Any] | None  # reference_intelligence_agent → image, writer
    layout_spec: dict[str, Any] | None  # layout_planner_agent → image_planner_agent
    image_plans: list[dict[str, Any]]  # image_planner_agent → image_agent
    generated_content: dict[str, Any] | None  # writer_agent {title, body, tags} → review, critic
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
    agent_errors: NotRequired[list[str]]  # agents whose output could not be parsed, for the prompt
    # Agents routing stopped sending work to in this team run: capped after being chosen
    # again and again without progress. supervisor writes it; the routers and the
    # supervisor's stage table and suggestion read it (studio.routing.given_up).
    given_up: list[str]
    # Agents routing capped in this team run (chosen again and again without progress);
    # a re-pick of one whose artefact is present is redirected at once. supervisor writes
    # it, resolve_route reads it (studio.routing.capped).
    capped: list[str]
    # Roles whose model answered an optional tool offer in prose (small local models never
    # choose a tool unforced); supervisor / research / image agents write and read it, and
    # skip the offer on later turns instead of paying for another prose answer.
    no_optional_tools: list[str]


# ---------------------------------------------------------------------------
# Pipeline (PRODUCT.md §1.1): planner → rag → executor → critic → finalize
# ---------------------------------------------------------------------------

Outcome = Literal["completed", "exhausted", "needs_clarification", "failed"]


class PipelineInput(TypedDict, total=False):
    """What a client passes in (PRODUCT.md §2.6); read-only once the run starts.

    `fast_mode` trades quality for time: one attempt (no critic retries) and a
    smaller team budget (at most 12 supervisor decisions, one research tool round,
    no supervisor look-ups, an agent re-chosen without progress corrected at its first
    repeat). The critic still judges the single attempt.
    """

    request: Required[RequestText]  # the user's request; planner, rag, executor, critic
    platform: PlatformName  # target platform, default "xiaohongshu"; planner → intent, team
    audience: AudienceText | None  # who the post is for, if the user said; planner, clarity
    constraints: dict[str, Any] | None  # user's verifiable constraints (`Constraints`); planner
    reference_images: ReferenceImages  # uploaded asset ids; executor → reference agent
    reference_texts: ReferenceTexts  # example posts to imitate; executor → reference agent
    layout_preference: LayoutPreference  # executor → layout
    image_provider: ImageProviderName | None  # None: the default; executor → image tool
    image_count: ImageCount | None  # images wanted; planner merges it into the constraints
    fast_mode: bool  # one attempt and a smaller team budget (see above); run start
    auto_confirm: bool  # never ask a clarification question; planner


class PipelineOutput(TypedDict, total=False):
    """What crosses back to the client: the result payload of PRODUCT.md §2.5."""

    result: dict[str, Any]  # finalize → the caller (see nodes.finalize for the shape)


class PipelineState(PipelineInput, PipelineOutput, TeamOutput, total=False):
    """Working state of the pipeline; the TeamOutput fields hold the latest attempt.

    "run start" is `studio.run_start`, which also resets the per-run counters and
    history below when a new run enters the pipeline.
    """

    session_id: str  # run start: thread id (or a run-scoped id) → rag, critic (coordinator key)
    clarity: dict[str, Any] | None  # planner: {score, dimensions, missing} → finalize, events
    clarification: dict[str, Any] | None  # planner after a question: {choice, details} → planner
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
    # LLM calls, tokens and time by role, summed over every node of every run of the thread
    # (providers.usage); each metered pipeline node adds its own → finalize (result.usage).
    usage: Annotated[dict[str, dict[str, Any]], add_usage]
