"""Deterministic checks for the critic's first layer (PRODUCT.md §1.3).

Everything here is plain code: no LLM, and no I/O beyond opening generated
image files to prove they exist and decode. Lengths are always measured by
`count_chars`, whose rule is the single definition of "a character" in
Atelier, and every check reports the number it measured so a verdict can be
explained to the user.

Two families:

* `check_answer` — is this a real answer at all (long enough, not a refusal,
  not an error dump, not cut off)? `answer_checks_as_results` turns its verdict
  into `CheckResult` rows.
* `check_constraints` — does the generated post meet the planner's verifiable
  constraints (`Constraints`)? One `CheckResult` per constraint that is set.
* `check_prose` — is the post prose for people: no prompt markup anywhere in
  title, body, tags or card text, a body that is not mostly code or JSON, and
  tags where the platform expects them?
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, TypedDict

import regex
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentkit.platforms import TAGGED_PLATFORMS
from agentkit.post import DEFAULT_PLATFORM
from prompts.common import find_data_markup

__all__ = [
    "CODE_SHARE_MAX",
    "MIN_ANSWER_CHARS",
    "REFUSAL_SCOPE_CHARS",
    "TAGGED_PLATFORMS",
    "AnswerCheck",
    "AnswerReason",
    "CheckResult",
    "Constraints",
    "answer_checks_as_results",
    "check_answer",
    "check_constraints",
    "check_prose",
    "code_share",
    "count_chars",
    "find_error_markers",
    "find_incomplete_markers",
    "find_refusal_phrases",
    "normalize_tags",
]

#: An answer shorter than this (by `count_chars`) is `too_short`.
MIN_ANSWER_CHARS = 20
#: Refusal phrasing only counts in answers shorter than this (by `count_chars`):
#: a long helpful answer may well open with "Sorry for the delay".
REFUSAL_SCOPE_CHARS = 80

AnswerReason = Literal["too_short", "refusal", "error_marker", "incomplete"]

# ---------------------------------------------------------------------------
# Character counting
# ---------------------------------------------------------------------------

# `\X` is the Unicode extended grapheme cluster (UAX #29), kept up to date by
# the `regex` package; hand-written segmentation gets ZWJ emoji and flags wrong.
_GRAPHEME = regex.compile(r"\X")


def _is_invisible(ch: str) -> bool:
    """Tell whether a code point takes no visible place of its own."""
    if ch.isspace():
        return True
    code = ord(ch)
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:  # variation selectors
        return True
    # Format characters: ZWSP, ZWNJ, ZWJ, word joiner, BOM, soft hyphen, bidi marks.
    return unicodedata.category(ch) == "Cf"


def count_chars(text: str) -> int:
    """Count the characters of a text the way a reader sees them.

    The rule, used for every length in Atelier (answer length, title and body
    constraints):

    1. The text is split into user-perceived characters (Unicode extended
       grapheme clusters, UAX #29). Each cluster counts 1: a CJK character, a
       Latin letter, a digit, a letter with combining accents (``e`` + U+0301),
       an emoji including skin-tone and ZWJ sequences (👨‍👩‍👧‍👦), a flag (🇨🇳).
    2. Punctuation counts 1 per mark, CJK (，。！) and ASCII (,.!) alike; an
       ellipsis written ``……`` is two marks, ``...`` is three.
    3. Whitespace is not counted: spaces, tabs, newlines, the ideographic
       space U+3000, no-break spaces.
    4. Invisible characters are not counted when they stand alone: zero-width
       space/joiner/non-joiner, word joiner, BOM, soft hyphen, variation
       selectors (inside an emoji cluster they are part of that one character).
    5. Markdown is counted as written (``**重点**`` is 6): the check measures
       the text the platform receives, and the writer is told so.

    Args:
        text: Any text.

    Returns:
        The number of counted characters (0 for an empty or blank text).
    """
    return sum(
        1 for cluster in _GRAPHEME.findall(text) if not all(_is_invisible(ch) for ch in cluster)
    )


# ---------------------------------------------------------------------------
# Answer checks
# ---------------------------------------------------------------------------

# Refusal phrasing. English words are matched whole (so "unableism" or
# "cannoted" don't count); apostrophes may be straight or curly.
_REFUSAL_EN = re.compile(
    r"(?<![a-z])(?:"
    r"sorry|apologi[sz]e|apologies|"
    r"cannot|can[’']t|can not|unable|"
    r"i\s+won[’']t|i\s+will\s+not|i[’']m\s+not\s+able|i\s+am\s+not\s+able|"
    r"as\s+an\s+ai|as\s+a\s+language\s+model"
    r")(?![a-z])",
    re.IGNORECASE,
)
_REFUSAL_ZH = re.compile(
    r"抱歉|对不起|不好意思|很遗憾|无法|不能|我不会|恕我|"
    r"作为(?:一个|一名)?\s*(?:AI|人工智能|语言模型|AI\s*助手)",
    re.IGNORECASE,
)

# Error markers, matched anywhere (a stack trace or tool error pasted into an
# answer is never content). Colons may be ASCII or full-width.
_ERROR_MARKER = re.compile(
    r"error\s*[:：]|\[\s*error\s*\]|\[\s*错误\s*\]|【\s*错误\s*】|错误\s*[:：]|"
    r"failed\s*[:：]|exception\s*[:：]|traceback \(most recent call last\)",
    re.IGNORECASE,
)

# "To be continued" markers. Words like 待续 / 未完 also occur inside ordinary
# Chinese (期待续集, 未完成), so a marker only counts where a cut-off answer puts
# it: at the very end (trailing punctuation and brackets aside), inside
# brackets anywhere (（待续）, "(continued)"), or alone on a line.
_CONTINUED = (
    r"(?:未完待续|待续|未完|待更新|待更|下回分解|下期继续|"
    r"(?<![a-z])(?:to\s+be\s+continued|to\s+be\s+cont[’']?d|tbc)(?![a-z]))"
)
# Only bracketed or on a line of its own: "(continued)", "[cont'd]", but not
# "the tradition continued." at the end of a sentence.
_CONTINUED_TAG = rf"(?:{_CONTINUED}|(?<![a-z])(?:continued|cont[’']?d)(?![a-z]))"
# English phrases no finished post contains, matched anywhere (whole words, any
# case): "To be continued: the second half covers…" announces a cut-off answer
# wherever the phrase stands, and so do "continued in part 2" / "part 2 coming
# soon" / "stay tuned for part two".
_PART = r"(?:part|chapter|episode|post|article|installment|instalment)"
_CONTINUED_EN = re.compile(
    r"(?<![a-z])(?:"
    r"to\s+be\s+continued|to\s+be\s+cont[’']?d|"
    rf"continued\s+(?:in|on)\s+(?:the\s+)?(?:next\s+{_PART}|{_PART}\s+(?:2|two|ii)|next\s+time)|"
    rf"{_PART}\s+(?:2|two|ii)\s+(?:is\s+)?coming(?:\s+soon)?|"
    rf"stay\s+tuned\s+for\s+(?:the\s+)?(?:next\s+{_PART}|{_PART}\s+(?:2|two|ii)|more)"
    r")(?![a-z])",
    re.IGNORECASE,
)
_INCOMPLETE_MARKER = re.compile(
    rf"{_CONTINUED}[\W_]*\Z"  # at the end
    rf"|[（(【\[]\s*{_CONTINUED_TAG}\s*[…。.!！]*\s*[)）】\]]"  # bracketed
    rf"|^[\W_]*{_CONTINUED_TAG}[\W_]*$",  # a line of its own
    re.IGNORECASE | re.MULTILINE,
)
# An ellipsis as the very last thing means the text trails off. One in the
# middle ("等等……其实很简单") is ordinary punctuation and is not flagged.
_TRAILING_ELLIPSIS = re.compile(r"(?:\.{3,}|…+|。{3,}|·{3,})\Z")


class AnswerCheck(TypedDict):
    """Verdict of `check_answer`."""

    valid: bool  # True when no reason applies, or when force-approved
    reasons: list[AnswerReason]  # reason codes found, in canonical order
    forced: bool  # True when approved only because the retry budget is spent


def find_refusal_phrases(text: str) -> list[str]:
    """Return the refusal phrases in a text, in order, regardless of its length."""
    found = [m.group(0) for m in _REFUSAL_EN.finditer(text)]
    found += [m.group(0) for m in _REFUSAL_ZH.finditer(text)]
    return found


def find_error_markers(text: str) -> list[str]:
    """Return the error markers in a text, in order."""
    return [m.group(0) for m in _ERROR_MARKER.finditer(text)]


def find_incomplete_markers(text: str) -> list[str]:
    """Return the "to be continued" markers of a text (see the module rules)."""
    stripped = text.strip()
    found = [m.group(0).strip() for m in _INCOMPLETE_MARKER.finditer(stripped)]
    found += [
        m.group(0)
        for m in _CONTINUED_EN.finditer(stripped)
        if not any(m.group(0).casefold() in f.casefold() for f in found)
    ]
    ellipsis = _TRAILING_ELLIPSIS.search(stripped)
    if ellipsis and not found:
        found.append(ellipsis.group(0))
    return found


def check_answer(text: str, retry_count: int = 0, max_retries: int = 2) -> AnswerCheck:
    """Check that an answer is a real, finished answer.

    Reason codes, reported in this order when several apply:

    * ``too_short`` — fewer than `MIN_ANSWER_CHARS` characters (`count_chars`).
    * ``refusal`` — refusal phrasing anywhere in an answer shorter than
      `REFUSAL_SCOPE_CHARS` characters (English: sorry, cannot, can't, unable,
      I won't, as an AI …; Chinese: 抱歉, 对不起, 无法, 不能, 我不会, 作为AI …).
      Longer answers are not scanned: an apology there is politeness.
    * ``error_marker`` — ``error:``, ``[error]``, ``[错误]``, ``错误：``,
      ``failed:``, ``exception:``, ``Traceback (most recent call last)``,
      case-insensitive, anywhere.
    * ``incomplete`` — a "to be continued" marker (待续, 未完, 未完待续,
      to be continued, TBC, (continued), 下回分解 …) at the end, in brackets,
      or on a line of its own; an English announcement of a sequel anywhere
      ("To be continued: …", "continued in part 2", "part 2 coming soon",
      "stay tuned for the next part"); or an ellipsis (``...``, ``…``) as the
      very last thing.

    Once ``retry_count >= max_retries`` the answer is force-approved so the
    critic loop ends: ``valid`` and ``forced`` are True, and ``reasons`` still
    lists what was found so the verdict stays honest about the answer.

    Args:
        text: The answer to check.
        retry_count: Retries already spent on this answer.
        max_retries: Retries allowed before force-approval.

    Returns:
        ``{"valid", "reasons", "forced"}``.
    """
    length = count_chars(text)
    reasons: list[AnswerReason] = []
    if length < MIN_ANSWER_CHARS:
        reasons.append("too_short")
    if length < REFUSAL_SCOPE_CHARS and find_refusal_phrases(text):
        reasons.append("refusal")
    if find_error_markers(text):
        reasons.append("error_marker")
    if find_incomplete_markers(text):
        reasons.append("incomplete")

    if retry_count >= max_retries:
        return {"valid": True, "reasons": reasons, "forced": True}
    return {"valid": not reasons, "reasons": reasons, "forced": False}


# ---------------------------------------------------------------------------
# Check results (shared with the critic's `critic.verdict` event)
# ---------------------------------------------------------------------------


class CheckResult(BaseModel):
    """One deterministic check, as reported in the critic's verdict."""

    name: str = Field(description="Check name.", examples=["title_length"], max_length=64)
    passed: bool = Field(description="Whether the check passed.", examples=[False])
    measured: int | str | list[str] | None = Field(
        default=None,
        description="What the code measured: a count, or the offending terms/paths.",
        examples=[14, ["最便宜"]],
    )
    expected: str | None = Field(
        default=None, description="What was required, human-readable.", examples=["15–30"]
    )
    detail: str = Field(default="", description="One-line explanation.", examples=[""])


_ANSWER_CHECK_NAMES: dict[AnswerReason, str] = {
    "too_short": "answer_length",
    "refusal": "refusal",
    "error_marker": "error_marker",
    "incomplete": "incomplete",
}


def answer_checks_as_results(check: AnswerCheck, text: str | None = None) -> list[CheckResult]:
    """Report an `AnswerCheck` as four `CheckResult` rows.

    Rows are named ``answer_length``, ``refusal``, ``error_marker`` and
    ``incomplete``. A row fails when its reason is in ``check["reasons"]``,
    also for a force-approved answer (its detail then says so); the critic
    reads ``check["forced"]`` to decide.

    Args:
        check: The verdict of `check_answer`.
        text: The checked answer; when given, rows also carry what was measured
            (the length, the phrases found).

    Returns:
        One row per answer check, in canonical order.
    """
    measured: dict[AnswerReason, int | list[str] | None] = dict.fromkeys(_ANSWER_CHECK_NAMES)
    if text is not None:
        measured["too_short"] = count_chars(text)
        measured["refusal"] = find_refusal_phrases(text) if "refusal" in check["reasons"] else []
        measured["error_marker"] = find_error_markers(text)
        measured["incomplete"] = find_incomplete_markers(text)
    expected: dict[AnswerReason, str] = {
        "too_short": f"≥ {MIN_ANSWER_CHARS}",
        "refusal": f"no refusal phrasing (answers under {REFUSAL_SCOPE_CHARS} characters)",
        "error_marker": "no error markers",
        "incomplete": "no to-be-continued markers",
    }
    results = []
    for reason, name in _ANSWER_CHECK_NAMES.items():
        failed = reason in check["reasons"]
        detail = ""
        if failed:
            detail = f"{reason} found"
            if check["forced"]:
                detail += "; force-approved at the retry limit"
        results.append(
            CheckResult(
                name=name,
                passed=not failed,
                measured=measured[reason],
                expected=expected[reason],
                detail=detail,
            )
        )
    return results


# ---------------------------------------------------------------------------
# Constraint checks
# ---------------------------------------------------------------------------


class Constraints(BaseModel):
    """The planner's verifiable constraints; every field is optional.

    Lengths are in characters as counted by `count_chars`; bounds are
    inclusive. Unknown keys are ignored so the planner's whole constraints dict
    can be passed in.
    """

    model_config = ConfigDict(extra="ignore")

    title_min: int | None = Field(default=None, ge=0, le=1000, description="Min title chars.")
    title_max: int | None = Field(default=None, ge=0, le=1000, description="Max title chars.")
    body_min: int | None = Field(default=None, ge=0, le=100_000, description="Min body chars.")
    body_max: int | None = Field(default=None, ge=0, le=100_000, description="Max body chars.")
    tag_min: int | None = Field(default=None, ge=0, le=100, description="Min distinct tags.")
    tag_max: int | None = Field(default=None, ge=0, le=100, description="Max distinct tags.")
    image_min: int | None = Field(default=None, ge=0, le=100, description="Min images.")
    image_max: int | None = Field(default=None, ge=0, le=100, description="Max images.")
    must_include: list[str] = Field(
        default_factory=list, max_length=50, description="Terms the post must contain."
    )
    must_avoid: list[str] = Field(
        default_factory=list, max_length=50, description="Terms the post must not contain."
    )

    @model_validator(mode="after")
    def _ranges_are_ordered(self) -> Self:
        # An inverted range can never pass; fail at the planner, not in the critic.
        for field in ("title", "body", "tag", "image"):
            low, high = getattr(self, f"{field}_min"), getattr(self, f"{field}_max")
            if low is not None and high is not None and low > high:
                raise ValueError(f"{field}_min ({low}) is greater than {field}_max ({high})")
        return self


def _expected_range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return str(low) if low == high else f"{low}–{high}"
    if low is not None:
        return f"≥ {low}"
    return f"≤ {high}"


def _range_check(name: str, measured: int, low: int | None, high: int | None) -> CheckResult:
    passed = (low is None or measured >= low) and (high is None or measured <= high)
    expected = _expected_range(low, high)
    detail = "" if passed else f"measured {measured}, expected {expected}"
    return CheckResult(
        name=name, passed=passed, measured=measured, expected=expected, detail=detail
    )


def normalize_tags(tags: Iterable[str] | str | None) -> list[str]:
    """Return the distinct tags of a post, in first-seen order.

    Each list item is one tag: surrounding whitespace and ``#``/``＃`` marks
    are dropped ("#平价护肤" and "平价护肤#" are the tag 平价护肤) and empty
    items are skipped. A single string is split on whitespace, commas and
    ``#``. Tags that differ only in case are the same tag (the first spelling
    is kept).

    Args:
        tags: The post's tags.

    Returns:
        Distinct tags, as first written.
    """
    if tags is None:
        return []
    items = re.split(r"[\s,，、#＃]+", tags) if isinstance(tags, str) else list(tags)
    seen: set[str] = set()
    distinct: list[str] = []
    for item in items:
        tag = str(item).strip().strip("#＃").strip()
        key = tag.casefold()
        if tag and key not in seen:
            seen.add(key)
            distinct.append(tag)
    return distinct


def _image_problem(path: Path) -> str | None:
    """Return why a path is not a usable image, or None when it is one."""
    if not path.exists():
        return "missing"
    if not path.is_file():
        return "not a file"
    try:
        with Image.open(path) as image:
            image.verify()
    except Exception as exc:  # Pillow raises many types for corrupt data
        return f"not an image ({type(exc).__name__})"
    return None


def check_constraints(
    content: Mapping[str, Any] | BaseModel,
    constraints: Constraints | Mapping[str, Any],
    image_paths: Sequence[Path | str] | None = None,
    expected_images: int | None = None,
) -> list[CheckResult]:
    """Verify a generated post against the planner's constraints.

    Checks, in this order, each only when its constraint is set:

    * ``title_length`` / ``body_length`` — `count_chars` of title / body
      within ``*_min``–``*_max`` (inclusive).
    * ``tag_count`` — distinct tags (`normalize_tags`) within the range.
    * ``image_count`` — ``len(image_paths)`` within the range and, when
      ``expected_images`` is given (the layout's planned total), equal to it.
      Runs when either is set; no paths counts as 0 images.
    * ``must_include`` — every term present (case-insensitive substring of
      title, body and tags); measured = the terms missing.
    * ``must_avoid`` — no term present (same matching); measured = the terms
      found.
    * ``image_files`` — runs whenever ``image_paths`` is given: every path
      exists, is a file and decodes as an image; measured = the bad paths.

    Args:
        content: The post, with ``title``, ``body`` and ``tags`` (missing
            fields count as empty).
        constraints: The constraints, as a model or the planner's dict.
        image_paths: Files of the generated images.
        expected_images: Number of images the layout planned.

    Returns:
        One `CheckResult` per check that ran.
    """
    rules = (
        constraints
        if isinstance(constraints, Constraints)
        else Constraints.model_validate(constraints)
    )
    post = content.model_dump() if isinstance(content, BaseModel) else content
    title = str(post.get("title") or "")
    body = str(post.get("body") or "")
    tags = normalize_tags(post.get("tags"))
    results: list[CheckResult] = []

    if rules.title_min is not None or rules.title_max is not None:
        results.append(
            _range_check("title_length", count_chars(title), rules.title_min, rules.title_max)
        )
    if rules.body_min is not None or rules.body_max is not None:
        results.append(
            _range_check("body_length", count_chars(body), rules.body_min, rules.body_max)
        )
    if rules.tag_min is not None or rules.tag_max is not None:
        results.append(_range_check("tag_count", len(tags), rules.tag_min, rules.tag_max))

    paths = [Path(p) for p in image_paths] if image_paths is not None else None
    if rules.image_min is not None or rules.image_max is not None or expected_images is not None:
        results.append(_image_count_check(len(paths or []), rules, expected_images))

    haystack = "\n".join([title, body, *tags]).casefold()
    if rules.must_include:
        missing = [t for t in rules.must_include if t.strip().casefold() not in haystack]
        results.append(
            CheckResult(
                name="must_include",
                passed=not missing,
                measured=missing,
                expected="contains: " + ", ".join(rules.must_include),
                detail=f"missing: {', '.join(missing)}" if missing else "",
            )
        )
    if rules.must_avoid:
        # Blank terms would match everything; they are planner noise, not rules.
        found = [t for t in rules.must_avoid if t.strip() and t.strip().casefold() in haystack]
        results.append(
            CheckResult(
                name="must_avoid",
                passed=not found,
                measured=found,
                expected="absent: " + ", ".join(rules.must_avoid),
                detail=f"found: {', '.join(found)}" if found else "",
            )
        )

    if paths is not None:
        problems = {str(p): why for p in paths if (why := _image_problem(p)) is not None}
        results.append(
            CheckResult(
                name="image_files",
                passed=not problems,
                measured=list(problems),
                expected="every image file exists and decodes",
                detail="; ".join(f"{p}: {why}" for p, why in problems.items()),
            )
        )
    return results


def _image_count_check(count: int, rules: Constraints, planned: int | None) -> CheckResult:
    passed = (rules.image_min is None or count >= rules.image_min) and (
        rules.image_max is None or count <= rules.image_max
    )
    parts = []
    if rules.image_min is not None or rules.image_max is not None:
        parts.append(_expected_range(rules.image_min, rules.image_max))
    if planned is not None:
        passed = passed and count == planned
        parts.append(f"{planned} planned")
    expected = ", ".join(parts)
    detail = "" if passed else f"measured {count}, expected {expected}"
    return CheckResult(
        name="image_count", passed=passed, measured=count, expected=expected, detail=detail
    )


# ---------------------------------------------------------------------------
# Prose checks
# ---------------------------------------------------------------------------

#: A body whose share of code or JSON (by `count_chars`) is above this is not a post.
CODE_SHARE_MAX = 0.5

_FENCE_LINE = re.compile(r"^\s*(?:```|~~~)")
# Lines no prose for people is made of: Python/JS statements, assignments and
# calls, JSON keys and bracket-only lines, C-like line ends, comments.
_CODE_LINE = re.compile(
    r"^\s*(?:"
    r"(?:async\s+)?def\s+\w+\s*\(|class\s+\w+\s*[(:]|"
    r"(?:import\s+[\w.]+|from\s+[\w.]+\s+import\b)|"
    r"(?:return|raise|elif|except|yield|pass|break|continue)\b[^。，！？]*$|"
    r"(?:if|for|while|with|else|try|finally)\b[^。，！？\u4e00-\u9fff]*:\s*$|"
    r"(?:function|const|let|var)\s+\w+|"
    r"[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*[-+*/]?=(?!=)\s*\S|"
    r"[A-Za-z_][\w.]*\(.*\)\s*[;:]?\s*$|"
    r"\"[^\"\n]{1,80}\"\s*:|"
    r"[\[\]{}(),;]+\s*$|"
    r".*[;{]\s*$|"
    r"(?://|/\*|\*/|#include\b)"
    r")"
)


def code_share(body: str) -> float:
    """Return the share (0–1, by `count_chars`) of a body that is code or JSON.

    A body that parses as a JSON object or array is all code. Otherwise the
    lines inside code fences (and the fences) and the lines that read as code
    (`_CODE_LINE`: statements, assignments, calls, JSON keys, bare brackets)
    count as code; blank lines count for nothing.
    """
    text = body.strip()
    if not text:
        return 0.0
    if text[0] in "[{":
        try:
            if isinstance(json.loads(text), dict | list):
                return 1.0
        except json.JSONDecodeError:
            pass
    total = code = 0
    fenced = False
    for line in text.splitlines():
        chars = count_chars(line)
        total += chars
        if _FENCE_LINE.match(line):
            fenced = not fenced
            code += chars
        elif fenced or _CODE_LINE.match(line):
            code += chars
    return code / total if total else 0.0


def check_prose(
    content: Mapping[str, Any] | BaseModel,
    *,
    card_texts: Sequence[str] = (),
    platform: str | None = None,
) -> list[CheckResult]:
    """Check that a post is prose for people, not leaked prompt, code or data.

    Checks, in this order:

    * ``data_markup`` — no prompt delimiter markup (``<<<用户请求>>>``, a stray
      ``<<<`` / ``>>>`` or its defused form; the list comes from
      `prompts.common.find_data_markup`, the module that writes the delimiters)
      in the title, body, tags or `card_texts`; measured = the markup found.
    * ``code_share`` — at most `CODE_SHARE_MAX` of the body is code or JSON
      (`code_share`); measured = the share in percent.
    * ``tags_present`` — only for `TAGGED_PLATFORMS` (the platforms whose rules
      ask for at least one tag, `agentkit.platforms`): at least one tag;
      measured = the number of distinct tags.

    Args:
        content: The post, with ``title``, ``body`` and ``tags``.
        card_texts: The text the image cards draw (headline and body of each).
        platform: The post's platform (None: `agentkit.post.DEFAULT_PLATFORM`).

    Returns:
        One `CheckResult` per check that ran.
    """
    post = content.model_dump() if isinstance(content, BaseModel) else content
    title = str(post.get("title") or "")
    body = str(post.get("body") or "")
    tags = normalize_tags(post.get("tags"))
    markup = list(
        dict.fromkeys(
            m for text in (title, body, *tags, *card_texts) for m in find_data_markup(text)
        )
    )
    results = [
        CheckResult(
            name="data_markup",
            passed=not markup,
            measured=markup,
            expected="no prompt delimiters in title, body, tags or card text",
            detail=f"prompt markup found: {', '.join(markup)}" if markup else "",
        )
    ]
    share = code_share(body)
    percent = round(share * 100)
    passed = share <= CODE_SHARE_MAX
    results.append(
        CheckResult(
            name="code_share",
            passed=passed,
            measured=percent,
            expected=f"≤ {round(CODE_SHARE_MAX * 100)}% of the body is code or JSON",
            detail="" if passed else f"{percent}% of the body is code or JSON, not prose",
        )
    )
    platform = platform or DEFAULT_PLATFORM
    if platform in TAGGED_PLATFORMS:
        results.append(
            CheckResult(
                name="tags_present",
                passed=bool(tags),
                measured=len(tags),
                expected="≥ 1 tag",
                detail="" if tags else f"no tags, and {platform} posts carry tags",
            )
        )
    return results
