"""The campaign planner's state and the rule that keeps a calendar's topics distinct.

The campaign planner (`graphs.campaign_planner`, docs/platforms.md) turns one brief
into as many distinct topics as a campaign has posts. Its input is
`CampaignPlanInput` (the strict model `CampaignPlanRequest` validates a run's
input with); its working state `CampaignPlanState` says who writes each field.

Distinct, by code (`similarity`, `near_duplicate_of`): two topics are compared by
the character bigrams of their topic and angle together (NFKC, case-folded,
punctuation and spaces dropped), as the Jaccard index of the two bigram sets. At
`NEAR_DUPLICATE` (0.5) or more they are near-duplicates: "学生党平价护肤指南" and
"学生党平价护肤攻略" share 6 of 10 bigrams (0.6); "平价面霜｜成分解析" and
"平价面霜｜一周实测" share 3 of 11 (0.27): one topic from two angles is two posts.
Bigrams need no dictionary, so Chinese, English and mixed topics are compared alike.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Annotated, Any, NotRequired, Required

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from typing_extensions import TypedDict

from agentkit.brand import BrandPreset
from agentkit.platforms import PlatformId
from agentkit.state import model_of
from providers.usage import add_usage

#: Topics at least this similar (bigram Jaccard of topic + angle) are near-duplicates.
NEAR_DUPLICATE = 0.5
#: Rounds (LLM calls) the planner may take to fill the calendar.
MAX_PLAN_ROUNDS = 4
#: The most posts one plan may have.
MAX_PLAN_POSTS = 60

BriefText = Annotated[str, StringConstraints(min_length=1, max_length=4000)]
AvoidTopic = Annotated[str, StringConstraints(min_length=1, max_length=300)]


class CampaignPlanInput(TypedDict, total=False):
    """What a caller passes in: the brief, how many posts, where they go, what to avoid."""

    brief: Required[
        Annotated[
            BriefText,
            Field(
                description="The campaign's brief, in the client's words (1–4000 characters).",
                examples=["秋季护肤新品上市：三周内讲清楚成分、用法和真实体验，面向大学生"],
            ),
        ]
    ]
    posts: Required[
        Annotated[
            int,
            Field(ge=1, le=MAX_PLAN_POSTS, description="How many topics (posts) to plan."),
        ]
    ]
    platforms: Required[
        Annotated[
            list[PlatformId],
            Field(
                min_length=1,
                max_length=7,
                description="The platforms the posts go to; a topic's first platform is one.",
                examples=[["xiaohongshu", "weibo"]],
            ),
        ]
    ]
    brand: Annotated[
        BrandPreset | None,
        Field(default=None, description="The brand preset the campaign writes for."),
    ]
    avoid: Annotated[
        list[AvoidTopic],
        Field(
            default_factory=list,
            max_length=200,
            description="Topics the plan already has or must not repeat (when adding or "
            "replanning); new topics are kept distinct from them.",
        ),
    ]


class _PlanInputRules(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("platforms", check_fields=False)
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("platforms must not repeat a platform")
        return value

    @field_validator("brief", check_fields=False)
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("brief must not be blank")
        return value


#: A campaign planner run's input, strictly: unknown keys and coerced types are refused.
CampaignPlanRequest = model_of(
    CampaignPlanInput,
    name="CampaignPlanRequest",
    base=_PlanInputRules,
    doc="The input of a campaign planner run (docs/platforms.md).",
)


class PlannedItem(TypedDict):
    """One accepted topic of the plan."""

    index: int  # 1-based, in the order topics were accepted
    topic: str
    angle: str
    key_points: list[str]
    first_platform: str  # one of the campaign's platforms


class RejectedItem(TypedDict):
    """An answer the planner did not take, and why (shown to the model next round)."""

    round: int
    topic: str  # what the model wrote ("" when it wrote no text)
    reason: str


class CampaignPlanOutput(TypedDict, total=False):
    """What crosses back to the caller."""

    # finish → the caller: {outcome: completed | failed, items, message, rounds, rejected}
    result: dict[str, Any]


class CampaignPlanState(CampaignPlanInput, CampaignPlanOutput, total=False):
    """Working state of the campaign planner graph."""

    accepted: list[PlannedItem]  # campaign_planner: the distinct topics so far → router, finish
    rejected: list[RejectedItem]  # campaign_planner: every answer not taken → prompt, finish
    rounds: int  # campaign_planner: LLM rounds so far → route_campaign_plan (bound)
    failure: dict[str, Any] | None  # campaign_planner: the model failed → router, finish
    usage: NotRequired[Annotated[dict[str, dict[str, Any]], add_usage]]  # metered nodes


def _bigrams(text: str) -> set[str]:
    folded = "".join(
        ch
        for ch in unicodedata.normalize("NFKC", text).casefold()
        if ch.isalnum()  # letters, digits and CJK characters; no spaces or punctuation
    )
    if len(folded) < 2:
        return {folded} if folded else set()
    return {folded[i : i + 2] for i in range(len(folded) - 1)}


def similarity(a: str, b: str) -> float:
    """Return how alike two topics read: the Jaccard index of their character bigrams (0–1)."""
    left, right = _bigrams(a), _bigrams(b)
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def near_duplicate_of(text: str, others: Iterable[str]) -> tuple[str, float] | None:
    """Return the first of `others` that `text` nearly duplicates, with the score; else None."""
    for other in others:
        score = similarity(text, other)
        if score >= NEAR_DUPLICATE:
            return other, score
    return None
