"""Inputs, states and outputs of the judge's graphs (`graphs.judge`).

Two graphs, one role (`judge`):

- the **pairwise judge** takes a brief and two finished posts, `post_a` and `post_b`,
  and answers which is better — `a`, `b` or `tie` — after judging the pair twice with
  the order swapped (`PairwiseJudgeInput` → `PairwiseJudgeOutput`);
- the **post judge** scores one finished post on an absolute rubric: a score 0–1,
  pass/fail at a threshold, reasons, and the run feedback entry (key `judge`) an online
  evaluation records (`PostJudgeInput` → `PostJudgeOutput`).

The inputs are Pydantic models: the graphs' first node validates a run's input with
them (a bad input fails the run with pydantic's message naming the field), and they
are the input models an assistant of these graphs would publish. Each state field
says who writes it and who reads it. See docs/evaluate-internals.md.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# typing_extensions' TypedDict: pydantic (graph JSON schemas, Studio) rejects typing's on 3.11.
from typing_extensions import TypedDict

from agentkit.brand import BrandPreset
from agentkit.checks import Constraints
from agentkit.expectations import Expectations, FinishedPost
from agentkit.state import AudienceText, PlatformName, RequestText
from providers.usage import add_usage

#: Which post is shown as "1": `ab` shows post a first, `ba` shows post b first.
Order = Literal["ab", "ba"]
ORDERS: tuple[Order, ...] = ("ab", "ba")
#: What the judge answers in one order: post "1", post "2", or neither.
Answer = Literal["1", "2", "tie"]
#: Which post of the pair won: a's, b's, or neither.
Winner = Literal["a", "b", "tie"]
#: How one order (or one absolute judgement) ended: answered, or no usable answer.
JudgeStatus = Literal["ok", "unavailable"]

#: Attempts per order (and per absolute judgement) a caller may allow at most, and the default.
MAX_JUDGE_ATTEMPTS = 3
DEFAULT_JUDGE_ATTEMPTS = 2
#: The feedback key of the post judge's verdict on a run (people's thumbs are `quality`).
FEEDBACK_KEY = "judge"


class JudgeBrief(BaseModel):
    """What the posts were written for: the example's brief.

    A run's whole input may be passed: the keys the judge does not read (images,
    reference texts, messages, …) are ignored.
    """

    model_config = ConfigDict(extra="ignore")

    request: RequestText = Field(
        description="The request the posts answer.", examples=["写一篇小红书笔记：平价护肤"]
    )
    platform: PlatformName | None = Field(
        default=None,
        description="The posts' platform (unset: the brand's, else xiaohongshu).",
        examples=["xiaohongshu"],
    )
    audience: AudienceText | None = Field(
        default=None, description="Who the posts are for (unset: the brand's).", examples=["大学生"]
    )
    constraints: Constraints | None = Field(
        default=None, description="The run's verifiable constraints (terms, lengths)."
    )


class JudgeInput(BaseModel):
    """What both judges read besides the posts."""

    model_config = ConfigDict(extra="forbid")

    brief: JudgeBrief = Field(description="The brief the posts were written for.")
    brand: BrandPreset | None = Field(
        default=None,
        description="The brand preset the rubric is built from (voice, audience, terms, "
        "lengths). When the arms compared carry different presets, the caller passes the "
        "one the comparison is about.",
    )
    expectations: Expectations | None = Field(
        default=None, description="The example's expectations (terms, caps, reference, notes)."
    )
    platform_rules: dict[str, Any] | None = Field(
        default=None,
        max_length=100,
        description="The platform's rules as data (unset: the rules today's checks hold).",
        examples=[{"title_max": 20, "tags_required": True}],
    )
    max_attempts: int = Field(
        default=DEFAULT_JUDGE_ATTEMPTS,
        ge=1,
        le=MAX_JUDGE_ATTEMPTS,
        description="Judge calls per order (per post for the post judge) before an "
        "unusable answer makes it unavailable.",
        examples=[2],
    )


class PairwiseJudgeInput(JudgeInput):
    """The pairwise judge's input: the brief and two finished posts."""

    post_a: FinishedPost = Field(description="One post (the pipeline's `result.post`).")
    post_b: FinishedPost = Field(description="The other post.")


class PostJudgeInput(JudgeInput):
    """The post judge's input: the brief, one finished post and the pass threshold."""

    post: FinishedPost = Field(description="The post (the pipeline's `result.post`).")
    threshold: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Score a post needs to pass (unset: the brand's critic_pass_threshold, "
        "else CRITIC_PASS_THRESHOLD).",
        examples=[0.7],
    )


class OrderVerdict(TypedDict):
    """What the judge said in one order of a pair."""

    order: Order  # which post was shown as "1"
    status: JudgeStatus
    answer: Answer | None  # None when unavailable
    preferred: Winner | None  # the answer mapped back to a / b / tie (decide_pair)
    reasons: str
    attempts: int  # judge calls made in this order
    problems: list[str]  # why each unusable answer was unusable, in order


class PairwiseState(TypedDict, total=False):
    """Working state of the pairwise judge."""

    # The input (`PairwiseJudgeInput`): the caller → prepare_pair, which validates it.
    brief: dict[str, Any]
    brand: dict[str, Any] | None
    expectations: dict[str, Any] | None
    platform_rules: dict[str, Any] | None
    max_attempts: int
    post_a: dict[str, Any]
    post_b: dict[str, Any]
    rubric: dict[str, Any]  # prepare_pair → each order's judge (`agentkit.rubric.Rubric`)
    post_a_text: str  # prepare_pair: post a as the judge reads it → the orders' fan-out
    post_b_text: str  # prepare_pair: post b → the orders' fan-out
    verdicts: Annotated[list[OrderVerdict], operator.add]  # each order's judge → decide_pair
    orders: list[OrderVerdict]  # decide_pair: both verdicts, mapped back to a / b → the caller
    winner: Winner  # decide_pair → the caller
    agreed: bool  # decide_pair: both orders preferred the same post (or both a tie)
    unavailable: bool  # decide_pair: an order had no usable answer (the pair is a tie)
    usage: Annotated[dict[str, Any], add_usage]  # every node → the caller (cost by role)


class OrderState(TypedDict, total=False):
    """Working state of one order's judge (a subgraph; only `verdicts` and `usage` go back)."""

    order: Order  # the fan-out: which post is "1" (the judge's prompt never says)
    brief: dict[str, Any]  # the fan-out → judge_pair_order
    rubric: dict[str, Any]  # the fan-out → judge_pair_order
    post_1: str  # the fan-out: the post shown first
    post_2: str  # the fan-out: the post shown second
    max_attempts: int  # the fan-out → route_order_judge
    attempts: int  # judge_pair_order: calls made → route_order_judge
    problems: list[str]  # judge_pair_order: why answers were unusable → its retry prompt
    verdicts: list[OrderVerdict]  # judge_pair_order, once decided → route_order_judge, parent
    usage: Annotated[dict[str, Any], add_usage]  # judge_pair_order → the parent


class OrderOutput(TypedDict, total=False):
    """What one order's judge hands back to the pairwise judge."""

    verdicts: list[OrderVerdict]
    usage: dict[str, Any]


class PairwiseJudgeOutput(TypedDict, total=False):
    """The pairwise judge's answer."""

    winner: Winner  # a, b, or tie (the orders disagreed, or one was unavailable)
    agreed: bool
    unavailable: bool
    orders: list[OrderVerdict]  # both orders, each with its answer and reasons
    usage: dict[str, Any]  # the judge's LLM usage (`providers.usage`)


class PostJudgeState(TypedDict, total=False):
    """Working state of the post judge."""

    # The input (`PostJudgeInput`): the caller → prepare_post, which validates it.
    brief: dict[str, Any]
    brand: dict[str, Any] | None
    expectations: dict[str, Any] | None
    platform_rules: dict[str, Any] | None
    max_attempts: int  # → route_post_judge
    post: dict[str, Any]
    threshold: float  # prepare_post resolves it (input, brand, settings) → judge_post
    rubric: dict[str, Any]  # prepare_post → judge_post
    post_text: str  # prepare_post: the post as the judge reads it → judge_post
    attempts: int  # judge_post: calls made → route_post_judge
    problems: list[str]  # judge_post: why answers were unusable → its retry prompt
    status: JudgeStatus  # judge_post, once decided → route_post_judge, the caller
    score: float | None  # judge_post: the judge's score, None when unavailable
    passed: bool | None  # judge_post: score ≥ threshold, None when unavailable
    reasons: str  # judge_post
    feedback: dict[str, Any] | None  # judge_post: the run feedback entry (key `judge`)
    usage: Annotated[dict[str, Any], add_usage]  # every node → the caller


class PostJudgeOutput(TypedDict, total=False):
    """The post judge's answer."""

    status: JudgeStatus
    score: float | None
    passed: bool | None
    threshold: float
    reasons: str
    attempts: int
    problems: list[str]
    # {"key": "judge", "score": float, "comment": str}, as POST /runs/{id}/feedback
    # takes it; None when unavailable (no score is recorded that no judge gave).
    feedback: dict[str, Any] | None
    usage: dict[str, Any]
