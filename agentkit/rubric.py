"""The judge's rubric, built by code from the brand preset, the platform's rules and the example.

The judge (`nodes.judge`) weighs posts against a `Rubric`, never against a rubric of
its own making: `build_rubric` lists the criteria in a fixed order — the brief, the
brand's name and voice, the audience, the terms to use and to avoid and the lengths
(the brand's, the run's constraints and the example's expectations together), the
platform, the example's reference post and judge notes, then general quality.

The platform's rules come in as data (`PlatformRules`, any JSON-able mapping) and are
shown to the judge as they are; without them, the rules today's code checks
(`current_platform_rules`, from `agentkit.checks`). A table of platform rules kept as
data drops in by passing its row. See docs/evaluate-internals.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from agentkit.checks import CODE_SHARE_MAX, MIN_ANSWER_CHARS, TAGGED_PLATFORMS, Constraints
from agentkit.expectations import Expectations
from agentkit.post import DEFAULT_PLATFORM
from prompts import judge as prompt
from prompts.common import CONSTRAINT_AVOID, CONSTRAINT_INCLUDE, CONSTRAINT_RANGE

__all__ = ["PlatformRules", "Rubric", "build_rubric", "current_platform_rules"]

#: A platform's rules as data: any JSON-able mapping, shown to the judge as it is.
PlatformRules = Mapping[str, Any]


def current_platform_rules(platform: str) -> dict[str, Any]:
    """Return the rules today's code checks hold a platform's posts to (`agentkit.checks`)."""
    return {
        "platform": platform,
        "tags_required": platform in TAGGED_PLATFORMS,
        "body_min_chars": MIN_ANSWER_CHARS,
        "code_or_json_share_max": CODE_SHARE_MAX,
    }


class Rubric(BaseModel):
    """What the judge weighs a post against."""

    platform: str = Field(description="The posts' platform.", examples=["xiaohongshu"])
    criteria: list[str] = Field(description="The criteria, most important first.")
    platform_rules: dict[str, Any] = Field(description="The platform's rules, as data.")
    reference_post: str | None = Field(
        default=None, description="An exemplar post (the example's `reference_post`)."
    )


def _terms(*lists: Iterable[str]) -> list[str]:
    """Return the distinct terms of several lists, first spelling kept (case-insensitive)."""
    seen: set[str] = set()
    terms: list[str] = []
    for items in lists:
        for term in items:
            key = term.strip().casefold()
            if key and key not in seen:
                seen.add(key)
                terms.append(term.strip())
    return terms


def _tightest(values: Iterable[int | None], *, upper: bool) -> int | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return min(known) if upper else max(known)


def _range_text(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return str(low) if low == high else f"{low}–{high}"
    return f"至少 {low}" if low is not None else f"最多 {high}"


def build_rubric(
    *,
    platform: str | None = None,
    brand: Mapping[str, Any] | None = None,
    audience: str | None = None,
    expectations: Expectations | Mapping[str, Any] | None = None,
    constraints: Constraints | Mapping[str, Any] | None = None,
    platform_rules: PlatformRules | None = None,
) -> Rubric:
    """Build the judge's rubric (see the module docstring for the order of its criteria).

    Args:
        platform: The posts' platform (None: the brand's, else the default platform).
        brand: The brand preset (`agentkit.brand.BrandPreset`) the posts were written for.
        audience: The brief's audience (None: the brand's).
        expectations: The example's expectations: its terms and caps join the brand's,
            its reference post and judge notes join the rubric.
        constraints: The run's constraints (terms, lengths, tag count).
        platform_rules: The platform's rules as data (None: `current_platform_rules`).

    Returns:
        The rubric.
    """
    brand = brand or {}
    expected = (
        expectations
        if isinstance(expectations, Expectations) or expectations is None
        else Expectations.model_validate(expectations)
    )
    rules = (
        constraints
        if isinstance(constraints, Constraints)
        else Constraints.model_validate(constraints or {})
    )
    platform = platform or brand.get("platform") or DEFAULT_PLATFORM
    audience = audience or brand.get("audience")

    criteria = [prompt.RUBRIC_FULFIL]
    if brand.get("brand_name"):
        criteria.append(prompt.RUBRIC_BRAND.format(brand_name=brand["brand_name"]))
    if brand.get("voice"):
        criteria.append(prompt.RUBRIC_VOICE.format(voice=brand["voice"]))
    if audience:
        criteria.append(prompt.RUBRIC_AUDIENCE.format(audience=audience))
    include = _terms(
        brand.get("must_include") or [],
        rules.must_include,
        expected.must_include if expected is not None else [],
    )
    if include:
        criteria.append(CONSTRAINT_INCLUDE.format(terms="、".join(include)))
    avoid = _terms(
        brand.get("must_avoid") or [],
        rules.must_avoid,
        expected.must_avoid if expected is not None else [],
    )
    if avoid:
        criteria.append(CONSTRAINT_AVOID.format(terms="、".join(avoid)))
    title_cap = expected.title_max if expected is not None else None
    body_cap = expected.body_max if expected is not None else None
    bounds = {
        "title": (
            _tightest([brand.get("title_min"), rules.title_min], upper=False),
            _tightest([brand.get("title_max"), rules.title_max, title_cap], upper=True),
        ),
        "body": (
            _tightest([brand.get("body_min"), rules.body_min], upper=False),
            _tightest([brand.get("body_max"), rules.body_max, body_cap], upper=True),
        ),
        "tag": (rules.tag_min, rules.tag_max),
    }
    for name, (low, high) in bounds.items():
        if low is not None or high is not None:
            criteria.append(CONSTRAINT_RANGE[name].format(range=_range_text(low, high)))
    criteria.append(prompt.RUBRIC_PLATFORM.format(platform=platform))
    if expected is not None and expected.reference_post:
        criteria.append(prompt.RUBRIC_REFERENCE)
    if expected is not None and expected.judge_notes:
        criteria.append(prompt.RUBRIC_NOTES.format(notes=expected.judge_notes))
    criteria.append(prompt.RUBRIC_QUALITY)
    return Rubric(
        platform=platform,
        criteria=criteria,
        platform_rules=dict(
            platform_rules if platform_rules is not None else current_platform_rules(platform)
        ),
        reference_post=expected.reference_post if expected is not None else None,
    )
