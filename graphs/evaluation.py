"""Atelier's side of evaluations: the hooks the engine's evaluation services call.

The engine runs datasets, experiments and online evaluation without knowing what a
post is (`engine.experiments.EvaluationHooks`); `AtelierEvaluation` tells it:

- examples are inputs of the `atelier` assistant, with `agentkit.expectations.Expectations`;
  an experiment's runs never stop to ask (`auto_confirm`, unless the example says so);
- an arm's models per role go into its runs' config (`configurable.models`), which the
  model factory reads (`providers.llm.run_models`);
- a finished run's post is its `result.post`, checked by `agentkit.expectations.check_post`
  (the critic's checks, the run's constraints and the example's expectations); its
  critic score is `result.quality.score`, its cost and calls `result.usage.total`;
- the judges are the hidden assistants `pairwise_judge` and `post_judge`
  (`graphs.judge`, declared in `graphs.assistants.INTERNAL_ASSISTANTS`): they read the
  run's input as the brief, its brand preset for the rubric, and the posts.

See docs/evaluate.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agentkit.chat import chat_request
from agentkit.expectations import Expectations, FinishedPost, check_post, run_constraints
from core.settings import LLM_ROLES
from engine import PairOutcome, PostJudgement, PostOutcome
from providers.usage import usage_totals

#: A model name an arm may give a role (what an OpenAI-compatible endpoint names).
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
#: The input keys an example keeps of a past run's input (its brief, not its brand,
#: which is the arm's, nor its conversation).
BRIEF_KEYS = (
    "request",
    "platform",
    "audience",
    "constraints",
    "reference_images",
    "reference_texts",
    "layout_preference",
    "image_provider",
    "image_count",
    "fast_mode",
    "auto_confirm",
)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _post_of(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return a run's finished post (`result.post`), or None when it wrote none (or junk)."""
    post = _mapping(_mapping(_mapping(values).get("result")).get("post"))
    try:
        finished = FinishedPost.model_validate(post) if post else None
    except ValidationError:
        return None
    if finished is None or not (finished.title.strip() or finished.body_text.strip()):
        return None
    return dict(post)


def _number(value: Any) -> float | None:
    """Return a finite number as a float, None for anything else (junk, NaN, infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cost(usage: Any) -> tuple[float | None, int, int | None, int | None]:
    """Return a usage total's cost, calls and tokens (unknown where it holds junk)."""
    total = _mapping(usage)
    cost = _mapping(total.get("cost")).get("total")  # {"input", "output", "total", "currency"}
    return (
        _number(cost),
        _count(total.get("calls")) or 0,
        _count(total.get("prompt_tokens")),
        _count(total.get("completion_tokens")),
    )


def _judge_usage(usage: Any) -> Any:
    """Return the total of a judge's usage by role (`providers.usage`), or None for junk."""
    if not isinstance(usage, Mapping) or not all(isinstance(u, Mapping) for u in usage.values()):
        return None
    return usage_totals(usage)


class AtelierEvaluation:
    """The hooks of Atelier's evaluations (see the module docstring)."""

    example_assistant = "atelier"
    pairwise_judge = "pairwise_judge"
    post_judge = "post_judge"

    def check_expectations(self, expectations: Any) -> dict[str, Any]:
        """Return an example's expectations as stored (only the fields given).

        Raises:
            pydantic.ValidationError: They break `Expectations`' rules.
        """
        return Expectations.model_validate(expectations).model_dump(
            mode="json", exclude_defaults=True
        )

    def check_models(self, models: Mapping[str, str]) -> dict[str, str]:
        """Return an arm's models per role.

        Raises:
            ValueError: An unknown role or a malformed model name.
        """
        for role, name in models.items():
            if role not in LLM_ROLES:
                raise ValueError(f"unknown LLM role {role!r}; roles: {', '.join(LLM_ROLES)}")
            if not isinstance(name, str) or not MODEL_NAME.match(name):
                raise ValueError(
                    f"the model of {role!r} must be a model name (letters, digits and "
                    "._:/@+-, at most 128 characters)"
                )
        return dict(models)

    def arm_config(self, models: Mapping[str, str]) -> dict[str, Any]:
        """Return the run config that makes every role of `models` use its model."""
        return {"configurable": {"models": dict(models)}} if models else {}

    def example_of(self, run_input: Mapping[str, Any]) -> dict[str, Any] | None:
        """Return the brief of a past run's input (its request, platform, constraints, …)."""
        given = _mapping(run_input)
        example = {key: given[key] for key in BRIEF_KEYS if key in given}
        if "request" not in example:
            request = chat_request(given.get("messages"))
            if not request:
                return None
            example["request"] = request
        return example

    def run_input(self, example_input: Mapping[str, Any]) -> dict[str, Any]:
        """Return the example's input, never stopping to ask unless it says so.

        Nobody answers the planner's clarification question in an experiment, so
        `auto_confirm` is on unless the example sets it.
        """
        return {"auto_confirm": True, **example_input}

    def score_post(
        self, run_input: Any, values: Mapping[str, Any] | None, expectations: Any
    ) -> PostOutcome:
        """Read a run's post, check it, and read its critic score and cost."""
        result = _mapping(_mapping(values).get("result"))
        cost, calls, prompt, completion = _cost(_mapping(result.get("usage")).get("total"))
        outcome = result.get("outcome")
        post = _post_of(values)
        if post is None:
            return PostOutcome(
                post=None,
                passed=False,
                failing=["no_post"],
                cost=cost,
                calls=calls,
                prompt_tokens=prompt,
                completion_tokens=completion,
                outcome=outcome,
            )
        given = _mapping(run_input)
        brand = given.get("brand")
        checks = check_post(
            post,
            expectations,
            platform=given.get("platform") or _mapping(brand).get("platform"),
            constraints=run_constraints(given, brand),
        )
        score = _mapping(result.get("quality")).get("score")
        return PostOutcome(
            post=post,
            passed=checks.passed,
            failing=checks.failing,
            critic_score=_number(score),
            cost=cost,
            calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            outcome=outcome,
        )

    def pair_input(
        self,
        run_input: Any,
        expectations: Any,
        post_a: Mapping[str, Any],
        post_b: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Return the pairwise judge's input: the brief, its brand, expectations, two posts."""
        given = _mapping(run_input)
        return {
            "brief": dict(given),
            "brand": given.get("brand"),
            "expectations": expectations,
            "post_a": dict(post_a),
            "post_b": dict(post_b),
        }

    def pair_outcome(self, values: Mapping[str, Any] | None) -> PairOutcome:
        """Read the pairwise judge's verdict; no answer is a tie, unavailable."""
        answer = _mapping(values)
        winner = answer.get("winner")
        cost, calls, _prompt, _completion = _cost(_judge_usage(answer.get("usage")))
        if winner not in ("a", "b", "tie"):
            return PairOutcome(winner="tie", unavailable=True, cost=cost, calls=calls)
        orders = [
            {
                "order": order.get("order"),
                "answer": order.get("answer"),
                "preferred": order.get("preferred"),
                "reasons": order.get("reasons"),
            }
            for order in answer.get("orders") or []
            if isinstance(order, Mapping)
        ]
        return PairOutcome(
            winner=winner,
            agreed=bool(answer.get("agreed")),
            unavailable=bool(answer.get("unavailable")),
            orders=orders,
            cost=cost,
            calls=calls,
        )

    def post_judge_input(
        self, run_input: Any, values: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Return the post judge's input for a finished run, or None without a post."""
        post = _post_of(values)
        given = _mapping(run_input)
        if post is None or not isinstance(given.get("request"), str):
            return None
        return {"brief": dict(given), "brand": given.get("brand"), "post": post}

    def post_judgement(self, values: Mapping[str, Any] | None) -> PostJudgement:
        """Read the post judge's verdict and the feedback entry it made."""
        answer = _mapping(values)
        cost, _calls, _prompt, _completion = _cost(_judge_usage(answer.get("usage")))
        score = _number(answer.get("score"))
        feedback = answer.get("feedback")
        if answer.get("status") != "ok" or score is None:
            return PostJudgement(score=None, passed=None, feedback=None, cost=cost)
        return PostJudgement(
            score=score,
            passed=bool(answer.get("passed")),
            feedback=dict(feedback) if isinstance(feedback, Mapping) else None,
            cost=cost,
        )


__all__ = ["BRIEF_KEYS", "AtelierEvaluation"]
