"""What an evaluation example expects of its post, and the code checks of a finished post.

An example of an evaluation dataset may carry `Expectations`: terms the post must use
or avoid and length caps, checked by code here, and a `reference_post` and
`judge_notes`, which code does not check: the judge's rubric shows them
(`agentkit.rubric`).

`check_post` checks a finished post — the pipeline's `result.post` (`FinishedPost`:
title, blocks, tags) — the way the critic checks a draft (`agentkit.checks`: a real
answer, prose for people, the run's constraints) and then against the example's
expectations, and returns every check by name with an overall pass. See
docs/evaluate-internals.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agentkit.brand import BodyLength, TitleLength, brand_fill
from agentkit.checks import (
    CheckResult,
    Constraints,
    answer_checks_as_results,
    check_answer,
    check_constraints,
    check_prose,
)

__all__ = [
    "EXPECTATION_PREFIX",
    "Expectations",
    "FinishedPost",
    "PostBlock",
    "PostChecks",
    "check_post",
    "run_constraints",
]

#: The prefix of the checks an example's expectations add (`expectations.must_include`),
#: so they never share a name with the critic's own checks of the run's constraints.
EXPECTATION_PREFIX = "expectations."

#: One term an expected post must use or avoid (surrounding blanks dropped, never empty).
ExpectedTerm = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=50)]


class Expectations(BaseModel):
    """What an example's post is expected to be; every field is optional."""

    model_config = ConfigDict(extra="forbid")

    must_include: list[ExpectedTerm] = Field(
        default_factory=list,
        max_length=50,
        description="Terms the post must contain (title, body or tags; case-insensitive).",
        examples=[["氨基酸洁面"]],
    )
    must_avoid: list[ExpectedTerm] = Field(
        default_factory=list,
        max_length=50,
        description="Terms the post must not contain (same matching).",
        examples=[["最便宜"]],
    )
    title_max: TitleLength | None = Field(
        default=None,
        description="Most title characters (counted as `agentkit.checks.count_chars` counts).",
        examples=[20],
    )
    body_max: BodyLength | None = Field(
        default=None,
        description="Most body characters (counted as `agentkit.checks.count_chars` counts).",
        examples=[1000],
    )
    reference_post: Annotated[str, StringConstraints(min_length=1, max_length=4000)] | None = Field(
        default=None,
        description="A post as good as the one wanted: not checked by code, shown to the "
        "judge as an exemplar.",
        examples=["# 学生党护肤三步走\n\n早晚氨基酸洁面……\n\n#平价护肤"],
    )
    judge_notes: Annotated[str, StringConstraints(min_length=1, max_length=2000)] | None = Field(
        default=None,
        description="What the judge should weigh besides the brand and the platform: rubric "
        "text, not checked by code.",
        examples=["成分要讲清楚作用，不要只列名字。"],
    )


class PostBlock(BaseModel):
    """One display block of a finished post (`nodes.finalize.post_blocks`)."""

    # A block kind added later (a script's shot, say) is read as text rather than refused.
    model_config = ConfigDict(extra="ignore")

    type: str = Field(
        default="text",
        max_length=32,
        pattern=r"^[a-z_]+$",
        description="heading, text or list_item.",
        examples=["heading"],
    )
    text: str = Field(default="", max_length=20_000, description="The block's text.")


class FinishedPost(BaseModel):
    """A finished post as the pipeline's `result.post` gives it: a title, blocks and tags.

    A post written as one `body` (a draft's `generated_content`) is accepted too;
    the body then wins over the blocks. Keys the result may carry besides these
    are ignored, so a result's post is passed on as it is.
    """

    model_config = ConfigDict(extra="ignore")

    title: str = Field(default="", max_length=1000, description="The title.", examples=["标题"])
    blocks: list[PostBlock] = Field(
        default_factory=list, max_length=2000, description="The body's display blocks."
    )
    body: str | None = Field(
        default=None, max_length=100_000, description="The body as one text (instead of blocks)."
    )
    tags: list[Annotated[str, StringConstraints(max_length=100)]] = Field(
        default_factory=list, max_length=100, description="The tags.", examples=[["平价护肤"]]
    )

    @property
    def body_text(self) -> str:
        """Return the body: `body` when given, else the blocks' texts, one per line.

        The blocks carry no Markdown (finalize took the `#`, `-` and `**` marks
        off), so a length counted here can be a few characters under the
        critic's count of the draft, which counts Markdown as written.
        """
        if self.body is not None:
            return self.body
        return "\n".join(block.text for block in self.blocks)

    def content(self) -> dict[str, Any]:
        """Return the post as the checks read a draft: {title, body, tags}."""
        return {"title": self.title, "body": self.body_text, "tags": list(self.tags)}

    def markdown(self) -> str:
        """Return the post as one Markdown text (what the judge reads)."""
        if self.body is not None:
            lines = [self.body.strip()]
        else:
            lines = [_block_markdown(block) for block in self.blocks if block.text.strip()]
        parts = [f"# {self.title.strip()}" if self.title.strip() else "", "\n\n".join(lines)]
        if self.tags:
            parts.append(" ".join(f"#{tag}" for tag in self.tags))
        return "\n\n".join(part for part in parts if part)


def _block_markdown(block: PostBlock) -> str:
    if block.type == "heading":
        return f"## {block.text.strip()}"
    if block.type == "list_item":
        return f"- {block.text.strip()}"
    return block.text.strip()


class PostChecks(BaseModel):
    """The code checks of one finished post: each by name, and whether all passed."""

    checks: list[CheckResult] = Field(description="Every check that ran, in order.")
    passed: bool = Field(description="Whether every check passed.", examples=[True])

    @property
    def failing(self) -> list[str]:
        """Return the names of the checks that failed."""
        return [check.name for check in self.checks if not check.passed]


def run_constraints(
    run_input: Mapping[str, Any], brand: Mapping[str, Any] | None = None
) -> Constraints:
    """Return the constraints a run starts with: its input's, filled by its brand preset.

    The same merge the pipeline makes (`agentkit.brand.brand_fill`): a term list or
    length the input sets stays, the preset fills the rest.
    """
    values = {**run_input, "brand": brand if brand is not None else run_input.get("brand")}
    filled = brand_fill(values).get("constraints", values.get("constraints"))
    return Constraints.model_validate(filled or {})


def check_post(
    post: FinishedPost | Mapping[str, Any],
    expectations: Expectations | Mapping[str, Any] | None = None,
    *,
    platform: str | None = None,
    constraints: Constraints | Mapping[str, Any] | None = None,
) -> PostChecks:
    """Check a finished post as the critic does, then against an example's expectations.

    Checks, in this order:

    * the critic's answer checks on the body (`answer_length`, `refusal`,
      `error_marker`, `incomplete`) and prose checks (`data_markup`, `code_share`,
      `tags_present` on platforms whose posts carry tags);
    * the run's `constraints` (`title_length`, `body_length`, `tag_count`,
      `must_include`, `must_avoid`), each only when set. Image bounds are left out:
      images are not part of the post, and the run's critic counted them;
    * the expectations, named with `EXPECTATION_PREFIX`: `expectations.title_length`,
      `expectations.body_length`, `expectations.must_include`,
      `expectations.must_avoid`, each only when set.

    Args:
        post: The post (`result.post`, or a mapping with title/blocks/tags or body).
        expectations: The example's expectations.
        platform: The post's platform (None: the default platform).
        constraints: The run's constraints (see `run_constraints`).

    Returns:
        The checks and whether all passed.

    Raises:
        pydantic.ValidationError: The post, the expectations or the constraints are
            malformed (the message names the field).
    """
    finished = post if isinstance(post, FinishedPost) else FinishedPost.model_validate(post)
    content = finished.content()
    body = content["body"]
    checks = answer_checks_as_results(check_answer(body), body)
    checks += check_prose(content, platform=platform)
    if constraints is not None:
        rules = (
            constraints
            if isinstance(constraints, Constraints)
            else Constraints.model_validate(constraints)
        )
        rules = rules.model_copy(update={"image_min": None, "image_max": None})
        checks += check_constraints(content, rules)
    if expectations is not None:
        expected = (
            expectations
            if isinstance(expectations, Expectations)
            else Expectations.model_validate(expectations)
        )
        rules = Constraints(
            title_max=expected.title_max,
            body_max=expected.body_max,
            must_include=expected.must_include,
            must_avoid=expected.must_avoid,
        )
        checks += [
            check.model_copy(update={"name": EXPECTATION_PREFIX + check.name})
            for check in check_constraints(content, rules)
        ]
    return PostChecks(checks=checks, passed=all(check.passed for check in checks))
