"""Check a post against its platform's rules, by code (docs/platforms.md).

The critic runs `check_platform` on every attempt (and the review agent on every
draft), next to the constraint checks of `agentkit.checks`. The rules come from the
platform table (`agentkit.platforms`); each check that runs is one `CheckResult`
whose detail names the platform and the rule, e.g. ``weibo: text 2,345 characters,
at most 2,000``.

Counting. Lengths are counted as the platform counts them (its `counting`):

- ``graphemes`` — `agentkit.checks.count_chars`, Atelier's one definition of "a
  character" (user-perceived characters; whitespace and invisible characters not
  counted);
- ``graphemes_with_spaces`` — the same clusters, whitespace counted too
  (LinkedIn counts every space and line break);
- ``x_weighted`` — X's weighted length (`x_length`).

What is measured. ``title`` and ``body`` are the post's fields. ``text`` is the post
as a platform with one text field receives it (`published_text`): the title line,
the body and the tags written as the platform writes them (Weibo ``#话题#``).

Structure is read from the body's blocks (`agentkit.post.post_blocks`): headings
(公众号), the shots of a video script with their spoken line and on-screen text
(抖音, `script_shots`), and the posts of an X thread, split on lines of ``---``
(`thread_posts`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex
from pydantic import BaseModel

from agentkit.checks import CheckResult, count_chars, normalize_tags
from agentkit.platforms import Counting, PlatformRules, platform_rules
from agentkit.post import post_blocks

__all__ = [
    "Shot",
    "check_platform",
    "length_of",
    "published_text",
    "script_shots",
    "thread_posts",
    "x_length",
]

# ---------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------

_GRAPHEME = regex.compile(r"\X")
_EMOJI = regex.compile(r"[\p{Extended_Pictographic}\p{Regional_Indicator}]")
#: X counts every URL as this many characters, whatever its length (t.co wrapping).
X_URL_WEIGHT = 23
_URL = re.compile(r"https?://[^\s，。！？、]+", re.IGNORECASE)
#: Code point ranges X weighs 1; every other code point weighs 2 (twitter-text config v3).
_X_LIGHT = ((0x0000, 0x10FF), (0x2000, 0x200D), (0x2010, 0x201F), (0x2032, 0x2037))


def _x_weight(code: int) -> int:
    return 1 if any(low <= code <= high for low, high in _X_LIGHT) else 2


def x_length(text: str) -> int:
    """Return a text's length as X counts it.

    twitter-text's configuration v3, which X documents (docs.x.com, "Counting
    characters"): the text is NFC-normalised; each URL counts 23; each emoji
    (including skin-tone and ZWJ sequences, and flags) counts 2; every other code
    point counts 1 in the ranges U+0000–U+10FF, U+2000–U+200D, U+2010–U+201F and
    U+2032–U+2037 (Latin, most punctuation) and 2 elsewhere (CJK, kana, hangul).
    Whitespace counts. A post may weigh at most 280.
    """
    text = unicodedata.normalize("NFC", text)
    total = 0
    for part_index, part in enumerate(_URL.split(text)):
        if part_index:
            total += X_URL_WEIGHT
        for cluster in _GRAPHEME.findall(part):
            if _EMOJI.search(cluster):
                total += 2
            else:
                total += sum(_x_weight(ord(ch)) for ch in cluster)
    return total


def _visible_or_space(cluster: str) -> bool:
    """Tell whether a cluster takes a place when whitespace counts (zero-width ones don't)."""
    return not all(
        unicodedata.category(ch) == "Cf" or 0xFE00 <= ord(ch) <= 0xFE0F for ch in cluster
    )


def length_of(text: str, counting: Counting = "graphemes") -> int:
    """Return a text's length under a platform's counting rule (module docstring)."""
    if counting == "x_weighted":
        return x_length(text)
    if counting == "graphemes_with_spaces":
        return sum(1 for cluster in _GRAPHEME.findall(text) if _visible_or_space(cluster))
    return count_chars(text)


# ---------------------------------------------------------------------------
# What the platform receives
# ---------------------------------------------------------------------------


def _post(content: Mapping[str, Any] | BaseModel) -> tuple[str, str, list[str]]:
    post = content.model_dump() if isinstance(content, BaseModel) else content
    title = str(post.get("title") or "").strip()
    body = str(post.get("body") or "").strip()
    return title, body, normalize_tags(post.get("tags"))


def published_text(content: Mapping[str, Any] | BaseModel, rules: PlatformRules) -> str:
    """Return the post as one text field receives it: title line, body, tags line."""
    title, body, tags = _post(content)
    tag_line = " ".join(rules.tag_text(tag) for tag in tags)
    return "\n\n".join(part for part in (title, body, tag_line) if part)


_THREAD_BREAK = re.compile(r"^\s*(?:-{3,}|—{2,}|\*{3,})\s*$", re.MULTILINE)


def thread_posts(content: Mapping[str, Any] | BaseModel, rules: PlatformRules) -> list[str]:
    """Return the posts of a thread: the body split on lines of ``---``.

    The title line opens the first post and the tags close the last one, as they
    are published. A body with no break is a thread of one post.
    """
    title, body, tags = _post(content)
    parts = [part.strip() for part in _THREAD_BREAK.split(body) if part.strip()] or [""]
    if title:
        parts[0] = f"{title}\n\n{parts[0]}".strip()
    if tags:
        parts[-1] = (parts[-1] + "\n\n" + " ".join(rules.tag_text(t) for t in tags)).strip()
    return [part for part in parts if part]


_SHOT = re.compile(r"^(?:镜头|分镜|场景|shot|scene)\s*[0-9０-９一二三四五六七八九十]+", re.I)
_LABEL = r"^\s*(?:[-*•·]\s*)?(?:\*\*)?(?:{names})(?:\*\*)?\s*[:：]\s*(?:\*\*)?\s*"
_VOICE = re.compile(_LABEL.format(names="口播|台词|旁白|配音|voice[- ]?over|vo"), re.I)
_ONSCREEN = re.compile(
    _LABEL.format(names="字幕|屏幕文字|画面文字|花字|贴纸文字|on[- ]?screen(?: text)?"), re.I
)


@dataclass
class Shot:
    """One shot of a video script: its heading, spoken lines and on-screen texts."""

    heading: str
    voice: list[str] = field(default_factory=list)
    onscreen: list[str] = field(default_factory=list)


def script_shots(body: str) -> list[Shot]:
    """Return a video script's shots, in order.

    A shot starts at a heading that names it (``## 镜头1``, ``【镜头 2】``,
    ``**Shot 3**``; read by `agentkit.post.post_blocks`); its lines labelled
    ``口播：`` / ``台词：`` / ``旁白：`` are what is said, ``字幕：`` / ``屏幕文字：`` /
    ``画面文字：`` / ``花字：`` the text on screen (a list bullet or bold around the
    label is fine). Text before the first shot is not part of any shot.
    """
    shots: list[Shot] = []
    for block in post_blocks(body):
        text = block["text"].strip()
        if block["type"] == "heading" and _SHOT.match(text):
            shots.append(Shot(heading=text))
            continue
        if not shots:
            continue
        line = text if block["type"] != "list_item" else f"- {text}"
        if (match := _VOICE.match(line)) is not None:
            shots[-1].voice.append(line[match.end() :].strip().strip("*").strip())
        elif (match := _ONSCREEN.match(line)) is not None:
            shots[-1].onscreen.append(line[match.end() :].strip().strip("*").strip())
    return shots


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------


def _chars(n: int) -> str:
    return f"{n:,} character" + ("" if n == 1 else "s")


def _bound_detail(what: str, measured: int, low: int | None, high: int | None, unit: str) -> str:
    """Return why a measure is out of bounds ("" when it is within them)."""
    subject = f"{what} {measured:,} {unit}".strip()
    if high is not None and measured > high:
        return f"{subject}, at most {high:,}"
    if low is not None and measured < low:
        return f"{subject}, at least {low:,}"
    return ""


def _expected(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return str(low) if low == high else f"{low}–{high}"
    return f"≥ {low}" if low is not None else f"≤ {high}"


def _bounds(
    name: str,
    rules: PlatformRules,
    what: str,
    measured: int,
    low: int | None,
    high: int | None,
    unit: str = "characters",
) -> CheckResult:
    shown = unit if measured != 1 else unit.rstrip("s")
    detail = _bound_detail(what, measured, low, high, shown)
    return CheckResult(
        name=name,
        passed=not detail,
        measured=measured,
        expected=f"{rules.id}: {_expected(low, high)}",
        detail=f"{rules.id}: {detail}" if detail else "",
    )


def _shot_problems(shots: list[Shot], rules: PlatformRules) -> list[str]:
    problems: list[str] = []
    if len(shots) < (rules.shots_min or 0):
        problems.append(f"{len(shots)} shots, at least {rules.shots_min}")
    for number, shot in enumerate(shots, start=1):
        if not any(shot.voice):
            problems.append(f"shot {number} has no spoken line (口播)")
        if not any(shot.onscreen):
            problems.append(f"shot {number} has no on-screen text (字幕)")
        for text in shot.onscreen:
            size = count_chars(text)
            if rules.onscreen_max is not None and size > rules.onscreen_max:
                problems.append(
                    f"shot {number} on-screen text {_chars(size)}, at most {rules.onscreen_max}"
                )
    return problems


def _thread_problems(posts: list[str], rules: PlatformRules) -> tuple[list[int], list[str]]:
    lengths = [length_of(post, rules.counting) for post in posts]
    problems: list[str] = []
    if rules.thread_posts_max is not None and len(posts) > rules.thread_posts_max:
        problems.append(f"{len(posts)} posts in the thread, at most {rules.thread_posts_max}")
    for number, size in enumerate(lengths, start=1):
        if rules.thread_post_max is not None and size > rules.thread_post_max:
            problems.append(
                f"post {number} of the thread weighs {size:,}, at most {rules.thread_post_max:,}"
            )
    return lengths, problems


def check_platform(
    content: Mapping[str, Any] | BaseModel,
    platform: str | None,
    *,
    image_count: int | None = None,
) -> list[CheckResult]:
    """Check a post against its platform's rules (module docstring).

    Checks, in this order, each only when the platform has the rule:

    * ``platform_title`` — a title, where the platform requires one;
    * ``platform_title_length`` / ``platform_body_length`` /
      ``platform_text_length`` — lengths within the platform's bounds;
    * ``platform_tag_count`` — at most ``tags_max`` distinct tags (too few is the
      prose check ``tags_present``'s finding);
    * ``platform_image_count`` — ``image_count`` within the image bounds (skipped
      when ``image_count`` is None: a draft whose images are not drawn yet);
    * ``platform_headings`` — at least ``headings_min`` headings in the body;
    * ``platform_shots`` — a video script's shots, each with a spoken line and
      on-screen text no longer than ``onscreen_max``; measured = the problems;
    * ``platform_thread`` — every post of a thread within ``thread_post_max``,
      at most ``thread_posts_max`` posts; measured = the posts' lengths.

    Args:
        content: The post, with ``title``, ``body`` and ``tags``.
        platform: The post's platform id; an unknown one has no rules (no checks).
        image_count: How many images the post carries, when known.

    Returns:
        One `CheckResult` per check that ran; each detail starts with the platform id.
    """
    rules = platform_rules(platform)
    if rules is None:
        return []
    title, body, tags = _post(content)
    count = rules.counting
    results: list[CheckResult] = []
    if rules.title == "required":
        results.append(
            CheckResult(
                name="platform_title",
                passed=bool(title),
                measured=length_of(title, count),
                expected=f"{rules.id}: a title",
                detail="" if title else f"{rules.id}: no title, and {rules.name} posts need one",
            )
        )
    if rules.title_max is not None:
        results.append(
            _bounds(
                "platform_title_length",
                rules,
                "title",
                length_of(title, count),
                None,
                rules.title_max,
            )
        )
    if rules.body_min is not None or rules.body_max is not None:
        results.append(
            _bounds(
                "platform_body_length",
                rules,
                "body",
                length_of(body, count),
                rules.body_min,
                rules.body_max,
            )
        )
    if rules.text_max is not None:
        results.append(
            _bounds(
                "platform_text_length",
                rules,
                "text (title, body and tags)",
                length_of(published_text(content, rules), count),
                None,
                rules.text_max,
            )
        )
    if rules.tags_max is not None:
        results.append(
            _bounds("platform_tag_count", rules, "", len(tags), None, rules.tags_max, "tags")
        )
    if image_count is not None and (rules.images_min is not None or rules.images_max is not None):
        results.append(
            _bounds(
                "platform_image_count",
                rules,
                "",
                image_count,
                rules.images_min,
                rules.images_max,
                "images",
            )
        )
    if rules.headings_min:
        headings = sum(1 for block in post_blocks(body) if block["type"] == "heading")
        results.append(
            _bounds("platform_headings", rules, "", headings, rules.headings_min, None, "headings")
        )
    if rules.shots_min:
        problems = _shot_problems(script_shots(body), rules)
        results.append(
            CheckResult(
                name="platform_shots",
                passed=not problems,
                measured=problems,
                expected=f"{rules.id}: ≥ {rules.shots_min} shots, each with 口播 and 字幕 "
                f"(≤ {rules.onscreen_max} characters)",
                detail=f"{rules.id}: " + "; ".join(problems) if problems else "",
            )
        )
    if rules.thread_post_max is not None:
        lengths, problems = _thread_problems(thread_posts(content, rules), rules)
        results.append(
            CheckResult(
                name="platform_thread",
                passed=not problems,
                measured=[str(n) for n in lengths],
                expected=f"{rules.id}: each post ≤ {rules.thread_post_max} "
                f"({count}), ≤ {rules.thread_posts_max} posts",
                detail=f"{rules.id}: " + "; ".join(problems) if problems else "",
            )
        )
    return results
