"""The judge (role `judge`): compares two posts blind, or scores one, against a rubric code built.

Independent of the critic, which judges a draft inside its own run, the judge reads
finished posts for evaluation (`graphs.judge`):

- **Pairwise** (`judge_pair_order`, one order of a pair): the brief, the rubric
  (`agentkit.rubric`), the platform's rules, the example's reference post, and the two
  posts as "1" and "2" — never which arm wrote which: the prompt holds no arm and no
  a/b, only the order's two texts. It answers `PairwiseVerdict` (`1`, `2` or `tie`,
  with reasons). The graph judges every pair twice with the order swapped, and
  `decide_pair` keeps a winner only when both orders prefer the same post
  (`combine_orders`); anything else is a tie. A judge that always answers the same
  position therefore gives only ties, and one that prefers a post by its content wins
  it the pair.
- **Absolute** (`judge_post`): one post, the same rubric, `PostScore` (0–1 with
  reasons); code, not the model, says pass or fail at the threshold, and words the run
  feedback entry (key `judge`) an online evaluation records.

An unusable answer — no tool call (prose, a refusal, nothing), a malformed tool call,
a `winner` that is not 1/2/tie, a score that is not a number, blank reasons — or a
call that fails or outlasts `ctx.critic_timeout` costs one attempt; the node records
why (`problems`, shown to the judge when asked again) and the graph's router asks
again until `max_attempts` calls were made. Then that order (or that post) is
`unavailable`: a pair with an unavailable order is a tie, marked `unavailable`, and
an unavailable post judgement has no score and no feedback — no score is reported
that no judge gave.

The brief, the rubric, the reference post and the posts are untrusted text: they
reach the prompt only in data blocks, never as instructions. See
docs/evaluate-internals.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationError,
)

from agentkit.checks import find_refusal_phrases
from agentkit.common import UNIT_SCORE, clipped, tool_spec
from agentkit.context import AtelierContext, context_of
from agentkit.judge_state import (
    FEEDBACK_KEY,
    ORDERS,
    Answer,
    OrderState,
    OrderVerdict,
    PairwiseJudgeInput,
    PairwiseState,
    PostJudgeInput,
    PostJudgeState,
    Winner,
)
from agentkit.rubric import Rubric, build_rubric
from prompts import judge as prompt
from prompts.common import data_block, system_prompt
from providers.llm import model_crash

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Longest reasons kept (a longer answer is cut, not thrown away).
MAX_REASONS_CHARS = 2000
#: Longest feedback comment (the feedback API's bound, `engine.feedback.MAX_COMMENT_CHARS`).
MAX_FEEDBACK_COMMENT_CHARS = 4000


def _answer(value: Any) -> Any:
    """Read a winner leniently: the numbers 1 and 2, any case and blanks around "tie"."""
    if isinstance(value, int) and not isinstance(value, bool) and value in (1, 2):
        return str(value)
    if isinstance(value, str):
        return value.strip().casefold()
    return value


def _not_blank(value: str) -> str:
    """Refuse reasons that say nothing: an answer comes with its reasons."""
    value = value.strip()
    if not value:
        raise ValueError("reasons must not be blank")
    return value


Reasons = Annotated[
    str,
    clipped(MAX_REASONS_CHARS),
    AfterValidator(_not_blank),
    StringConstraints(min_length=1, max_length=MAX_REASONS_CHARS),
]


class PairwiseVerdict(BaseModel):
    """Say which post better meets the rubric: 1, 2 or tie, with the reasons."""

    winner: Annotated[Answer, BeforeValidator(_answer)] = Field(
        description="1: post 1 is better; 2: post 2 is better; tie: neither is."
    )
    reasons: Reasons = Field(description="The differences that decide it, concretely.")


def _on_a_scale(value: Any) -> Any:
    """Refuse a score on no scale the critic's reading knows (below 0, above 100).

    `agentkit.common.UnitScore` reads 0–1, 0–10 and 0–100 and clamps the rest; a
    judge's -3 or 250 is no score on any of them, and clamped it would be recorded
    as a verdict.
    """
    if isinstance(value, bool):
        raise ValueError("score must be a number")
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip().rstrip("%"))
        except ValueError:
            return value
    if isinstance(number, int | float) and not 0 <= number <= 100:
        raise ValueError("score must be 0–1 (or on a 0–10 or 0–100 scale)")
    return value


#: A judge's score: read as `UnitScore` (7 on a 1–10 habit is 0.7), but never clamped.
#: (The bound comes first so the tool's JSON schema says minimum 0, maximum 1.)
JudgeScore = Annotated[float, Field(ge=0, le=1), UNIT_SCORE, BeforeValidator(_on_a_scale)]


class PostScore(BaseModel):
    """Score the post against the rubric, 0–1, with the reasons."""

    score: JudgeScore = Field(description="Overall score 0–1.")
    reasons: Reasons = Field(description="What earned and what cost points, concretely.")


# ---------------------------------------------------------------------------
# Asking
# ---------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content
            if isinstance(part, str | dict)
        )
    return ""


def read_answer(schema: type[M], result: Any) -> tuple[M | None, str | None]:
    """Return the answer a structured call gave, or None and why it is unusable.

    Args:
        schema: The answer's model (`PairwiseVerdict`, `PostScore`).
        result: What `with_structured_output(..., include_raw=True)` returned.

    Returns:
        (answer, None), or (None, a one-line reason that echoes no answer text).
    """
    if not isinstance(result, Mapping):
        return None, f"no {schema.__name__} call"
    parsed = result.get("parsed")
    if isinstance(parsed, Mapping):
        try:
            return schema.model_validate(parsed), None
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in error['loc']) or schema.__name__}: {error['msg']}"
                for error in exc.errors()[:3]
            ]
            return None, "invalid answer: " + "; ".join(problems)
    raw = result.get("raw")
    if result.get("parsing_error") is not None or getattr(raw, "invalid_tool_calls", None):
        return None, f"malformed {schema.__name__} call"
    text = _text(getattr(raw, "content", "")).strip()
    if not text:
        return None, "empty answer"
    if find_refusal_phrases(text):
        return None, f"refused in prose instead of calling {schema.__name__}"
    return None, f"answered in prose instead of calling {schema.__name__}"


async def ask(
    model: BaseChatModel, schema: type[M], messages: Sequence[BaseMessage], seconds: float
) -> tuple[M | None, str | None]:
    """Ask for one `schema` answer by forced tool calling, within `seconds`.

    Returns:
        (answer, None), or (None, why there is none): an unusable answer
        (`read_answer`), a timeout, or a failed call (the client already retried it).
    """
    runnable = model.with_structured_output(
        tool_spec(schema), method="function_calling", include_raw=True
    )
    try:
        async with asyncio.timeout(seconds):
            result = await runnable.ainvoke(list(messages))
    except GraphBubbleUp:
        raise
    except TimeoutError:
        log.warning("the judge gave no answer within %.1fs", seconds)
        return None, f"no answer within {seconds:g} s"
    except Exception as exc:
        log.warning("the judge's call failed", exc_info=True)
        crash = model_crash(exc)
        return None, f"the model crashed: {crash}" if crash else "the model call failed"
    answer, problem = read_answer(schema, result)
    if problem is not None:
        log.warning("unusable %s answer: %s", schema.__name__, problem)
    return answer, problem


def _common_blocks(brief: Mapping[str, Any], rubric: Rubric) -> list[str]:
    shown = {k: brief.get(k) for k in ("request", "platform", "audience") if brief.get(k)}
    blocks = [
        data_block("任务简报", shown),
        data_block("评判标准", rubric.criteria),
        data_block("平台规则", rubric.platform_rules),
    ]
    if rubric.reference_post:
        blocks.append(data_block("参考帖子", rubric.reference_post))
    return blocks


def _retry_note(problems: Sequence[str], tool: str) -> str:
    return "\n\n" + prompt.RETRY.format(problem=problems[-1], tool=tool) if problems else ""


def pairwise_messages(state: OrderState) -> list[BaseMessage]:
    """Build one order's prompt: the brief, the rubric, the rules, the reference, posts 1 and 2."""
    rubric = Rubric.model_validate(state["rubric"])
    blocks = [
        *_common_blocks(state["brief"], rubric),
        data_block("帖子1", state["post_1"]),
        data_block("帖子2", state["post_2"]),
    ]
    task = prompt.PAIRWISE_TASK.format(context="\n\n".join(blocks))
    task += _retry_note(state.get("problems") or [], PairwiseVerdict.__name__)
    return [
        SystemMessage(system_prompt(prompt.PAIRWISE_SYSTEM.format(platform=rubric.platform))),
        HumanMessage(task),
    ]


def post_messages(state: PostJudgeState) -> list[BaseMessage]:
    """Build the post judge's prompt: the brief, the rubric, the rules, the reference, the post."""
    rubric = Rubric.model_validate(state["rubric"])
    blocks = [*_common_blocks(state["brief"], rubric), data_block("帖子", state["post_text"])]
    task = prompt.POST_TASK.format(context="\n\n".join(blocks))
    task += _retry_note(state.get("problems") or [], PostScore.__name__)
    return [
        SystemMessage(system_prompt(prompt.POST_SYSTEM.format(platform=rubric.platform))),
        HumanMessage(task),
    ]


# ---------------------------------------------------------------------------
# Pairwise
# ---------------------------------------------------------------------------


def _rubric_of(checked: PairwiseJudgeInput | PostJudgeInput) -> Rubric:
    brief = checked.brief
    return build_rubric(
        platform=brief.platform,
        brand=checked.brand,
        audience=brief.audience,
        expectations=checked.expectations,
        constraints=brief.constraints,
        platform_rules=checked.platform_rules,
    )


def _inputs(state: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """Return the input fields present in `state` (unset ones take the model's default)."""
    return {name: state[name] for name in fields if state.get(name) is not None}


async def prepare_pair(state: PairwiseState) -> dict[str, Any]:
    """Validate the input and build the rubric and the two posts' texts.

    Raises:
        pydantic.ValidationError: The input is malformed (the message names the field).
    """
    checked = PairwiseJudgeInput.model_validate(
        _inputs(state, list(PairwiseJudgeInput.model_fields))
    )
    return {
        **checked.model_dump(mode="json"),
        "rubric": _rubric_of(checked).model_dump(mode="json"),
        "post_a_text": checked.post_a.markdown(),
        "post_b_text": checked.post_b.markdown(),
    }


async def judge_pair_order(state: OrderState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Ask the judge once which of posts 1 and 2 is better; decide the order when done.

    Writes `attempts` and `problems` every time, and `verdicts` (this order's
    verdict) once there is an answer or the last attempt was unusable.
    """
    ctx = context_of(runtime)
    attempts = int(state.get("attempts") or 0) + 1
    answer, problem = await ask(
        ctx.models("judge"), PairwiseVerdict, pairwise_messages(state), ctx.critic_timeout
    )
    problems = list(state.get("problems") or [])
    if answer is not None:
        verdict = OrderVerdict(
            order=state["order"],
            status="ok",
            answer=answer.winner,
            preferred=None,
            reasons=answer.reasons,
            attempts=attempts,
            problems=problems,
        )
        return {"attempts": attempts, "verdicts": [verdict]}
    problems.append(problem or "unusable answer")
    update: dict[str, Any] = {"attempts": attempts, "problems": problems}
    if attempts >= int(state.get("max_attempts") or 1):
        update["verdicts"] = [
            OrderVerdict(
                order=state["order"],
                status="unavailable",
                answer=None,
                preferred=None,
                reasons="",
                attempts=attempts,
                problems=problems,
            )
        ]
    return update


#: Which post an answer prefers, by order: in `ba`, post 1 is post b.
_PREFERRED: dict[tuple[str, str], Winner] = {
    ("ab", "1"): "a",
    ("ab", "2"): "b",
    ("ba", "1"): "b",
    ("ba", "2"): "a",
    ("ab", "tie"): "tie",
    ("ba", "tie"): "tie",
}


def combine_orders(orders: Sequence[OrderVerdict]) -> dict[str, Any]:
    """Decide a pair from its two orders: a winner only when both orders prefer the same post.

    Returns:
        {winner, agreed, unavailable, orders}: `winner` is `a` or `b` when both orders
        prefer that post, `tie` when both say tie, when they disagree (position bias
        looks like this) or when an order is unavailable (`unavailable` then True);
        `agreed` says whether both orders gave the same answer about the posts.

    Raises:
        ValueError: `orders` is not one verdict per order.
    """
    by_order = {verdict["order"]: verdict for verdict in orders}
    if len(orders) != len(ORDERS) or set(by_order) != set(ORDERS):
        raise ValueError(f"a pair needs one verdict per order {ORDERS}, got {sorted(by_order)}")
    decided: list[OrderVerdict] = []
    for order in ORDERS:
        verdict = by_order[order]
        answer = verdict["answer"] if verdict["status"] == "ok" else None
        preferred = _PREFERRED.get((order, answer)) if answer is not None else None
        decided.append({**verdict, "preferred": preferred})
    first, second = decided[0]["preferred"], decided[1]["preferred"]
    unavailable = first is None or second is None
    agreed = not unavailable and first == second
    winner: Winner = first if agreed and first is not None else "tie"
    return {"winner": winner, "agreed": agreed, "unavailable": unavailable, "orders": decided}


async def decide_pair(state: PairwiseState) -> dict[str, Any]:
    """Decide the pair from the verdicts of its two orders (`combine_orders`)."""
    return combine_orders(state.get("verdicts") or [])


# ---------------------------------------------------------------------------
# Absolute
# ---------------------------------------------------------------------------


async def prepare_post(state: PostJudgeState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Validate the input, resolve the threshold, build the rubric and the post's text.

    The threshold is the input's, else the brand's `critic_pass_threshold`, else the
    deployment's (`ctx.critic_pass_threshold`).

    Raises:
        pydantic.ValidationError: The input is malformed (the message names the field).
    """
    checked = PostJudgeInput.model_validate(_inputs(state, list(PostJudgeInput.model_fields)))
    threshold = checked.threshold
    if threshold is None:
        threshold = (checked.brand or {}).get("critic_pass_threshold")
    if threshold is None:
        threshold = context_of(runtime).critic_pass_threshold
    return {
        **checked.model_dump(mode="json"),
        "threshold": float(threshold),
        "rubric": _rubric_of(checked).model_dump(mode="json"),
        "post_text": checked.post.markdown(),
    }


def feedback_entry(score: float, passed: bool, threshold: float, reasons: str) -> dict[str, Any]:
    """Return the run feedback entry of a judged post: key `judge`, the score, pass/fail why."""
    verdict = "pass" if passed else "fail"
    comment = f"{verdict} (threshold {threshold:g}): {reasons}"
    return {
        "key": FEEDBACK_KEY,
        "score": score,
        "comment": comment[:MAX_FEEDBACK_COMMENT_CHARS],
    }


async def judge_post(state: PostJudgeState, runtime: Runtime[AtelierContext]) -> dict[str, Any]:
    """Ask the judge once to score the post; decide when there is a score or no attempt left."""
    ctx = context_of(runtime)
    attempts = int(state.get("attempts") or 0) + 1
    answer, problem = await ask(
        ctx.models("judge"), PostScore, post_messages(state), ctx.critic_timeout
    )
    problems = list(state.get("problems") or [])
    if answer is not None:
        threshold = float(state["threshold"])
        score = round(answer.score, 4)
        passed = score >= threshold
        return {
            "attempts": attempts,
            "status": "ok",
            "score": score,
            "passed": passed,
            "reasons": answer.reasons,
            "feedback": feedback_entry(score, passed, threshold, answer.reasons),
        }
    problems.append(problem or "unusable answer")
    update: dict[str, Any] = {"attempts": attempts, "problems": problems}
    if attempts >= int(state.get("max_attempts") or 1):
        update.update(status="unavailable", score=None, passed=None, reasons="", feedback=None)
    return update
