"""Advertising-law words, checked by code (docs/platforms.md).

China's Advertising Law forbids absolute claims (最, 第一, 国家级, 顶级 …), false
guarantees (100%), medical claims outside medical ads and guaranteed returns; some
platforms forbid more on their own (小红书: leading users off the platform; 公众号:
induced sharing). The word lists are data, `agentkit/rules/ad_law.toml`, with the
articles they apply and how they are matched (its header); this module loads them
once and

- finds the words in a post (`find_violations`): literal terms and patterns, minus
  the uses an allow-list marks as no claim (`最近`, `最后`, `第一步`, `最多两次`);
- reports them as the critic's checks (`check_compliance`): ``ad_law`` for the
  law, ``platform_terms`` for the platform's own list, each failing row naming the
  word and the rule: ``「最好」 — 广告法第九条 禁用绝对化用语``;
- tells the writer the lists, compactly (`writer_rules`).

A one-character pattern match (the `最` of `最温和`) is reported with the word that
follows it, found by jieba (`knowledge.segment.cut`), so people read the claim, not a
lone character.
"""

from __future__ import annotations

import tomllib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentkit.checks import CheckResult, normalize_tags
from knowledge.segment import cut
from prompts import platforms as prompt

#: Where the word lists are.
DATA_FILE = Path(__file__).resolve().parent / "rules" / "ad_law.toml"
#: How many characters after a one-character match jieba reads to find the word.
_WORD_WINDOW = 6


class WordRule(BaseModel):
    """One rule of the word lists: what it forbids, under which article, and its words."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="The rule's id.", examples=["absolute"])
    law: str = Field(description="The article or platform rule.", examples=["广告法第九条"])
    label: str = Field(description="What it forbids.", examples=["禁用绝对化用语"])
    terms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    platform: str | None = Field(default=None, description="Set for a platform's own rule.")
    source: str = ""

    @field_validator("patterns", "allow")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                regex.compile(pattern)  # a broken pattern fails at load, not in a run
            except regex.error as exc:
                raise ValueError(f"pattern {pattern!r}: {exc}") from None
        return value

    @property
    def reads(self) -> str:
        """Return how a reported word's rule reads: ``广告法第九条 禁用绝对化用语``."""
        return f"{self.law} {self.label}"


@dataclass(frozen=True)
class Violation:
    """A forbidden word found in a post, with the rule that forbids it."""

    word: str
    rule: WordRule

    def __str__(self) -> str:
        return f"「{self.word}」 — {self.rule.reads}"


@dataclass(frozen=True)
class _Compiled:
    rule: WordRule
    terms: tuple[str, ...]  # folded
    patterns: tuple[regex.Pattern[str], ...]
    allow: tuple[regex.Pattern[str], ...]


def _fold(text: str) -> str:
    """Fold for matching: full-width forms to ASCII (NFKC), letters to lower case.

    `str.lower` keeps the length of the NFKC text (casefold would not: ß → ss), so
    a match's position in the folded text is its position in the NFKC text, which
    is what a reported word is cut from.
    """
    return unicodedata.normalize("NFKC", text).lower()


def load_rules(path: Path = DATA_FILE) -> tuple[tuple[WordRule, ...], tuple[WordRule, ...]]:
    """Read the law's rules and the platforms' own rules from a word-list file."""
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    law = tuple(WordRule.model_validate(item) for item in data.get("rules") or [])
    platforms = tuple(WordRule.model_validate(item) for item in data.get("platform_rules") or [])
    if not law:
        raise ValueError(f"{path.name}: no [[rules]]")
    if any(rule.platform is None for rule in platforms):
        raise ValueError(f"{path.name}: every [[platform_rules]] names its platform")
    return law, platforms


def _compile(rule: WordRule) -> _Compiled:
    return _Compiled(
        rule=rule,
        terms=tuple(dict.fromkeys(_fold(t) for t in rule.terms if t.strip())),
        patterns=tuple(regex.compile(p, regex.MULTILINE) for p in rule.patterns),
        allow=tuple(regex.compile(p, regex.MULTILINE) for p in rule.allow),
    )


@cache
def _rules() -> tuple[tuple[_Compiled, ...], tuple[_Compiled, ...]]:
    law, platforms = load_rules()
    return tuple(map(_compile, law)), tuple(map(_compile, platforms))


def law_rules() -> tuple[WordRule, ...]:
    """Return the advertising law's rules, in the data file's order."""
    return tuple(c.rule for c in _rules()[0])


def platform_word_rules(platform: str | None) -> tuple[WordRule, ...]:
    """Return a platform's own word rules (none for most platforms)."""
    return tuple(c.rule for c in _rules()[1] if c.rule.platform == platform)


def _spans(compiled: _Compiled, text: str) -> Iterable[tuple[int, int]]:
    for term in compiled.terms:
        start = text.find(term)
        while start != -1:
            yield start, start + len(term)
            start = text.find(term, start + 1)
    for pattern in compiled.patterns:
        for match in pattern.finditer(text):
            if match.end() > match.start():
                yield match.start(), match.end()


def _reported(text: str, start: int, end: int) -> str:
    """Return the word to report for a match: a lone character gets the word after it."""
    word = text[start:end]
    if end - start == 1:
        following = cut(text[end : end + _WORD_WINDOW])
        if following and text.startswith(following[0], end):
            word += following[0]
    return word


def _find(compiled: Sequence[_Compiled], text: str) -> list[Violation]:
    shown = unicodedata.normalize("NFKC", text)
    folded = _fold(text)
    found: list[tuple[int, int, Violation]] = []
    for rule in compiled:
        allowed = [m.span() for pattern in rule.allow for m in pattern.finditer(folded)]
        for start, end in _spans(rule, folded):
            if any(a <= start and end <= b for a, b in allowed):
                continue
            found.append((start, end, Violation(_reported(shown, start, end), rule.rule)))
    # Longest first, so a match inside a longer one (最 in 最好, 第一 in 全网第一) is
    # the longer word's, reported once.
    found.sort(key=lambda item: (item[0], -(item[1] - item[0])))
    kept: list[tuple[int, int, Violation]] = []
    for start, end, violation in found:
        if any(a <= start and end <= b for a, b, _ in kept):
            continue
        kept.append((start, end, violation))
    unique: dict[tuple[str, str], Violation] = {}
    for _, _, violation in kept:
        unique.setdefault((violation.word, violation.rule.id), violation)
    return list(unique.values())


def find_violations(texts: Iterable[str], platform: str | None = None) -> list[Violation]:
    """Return the forbidden words in some texts: the law's, then the platform's own.

    Each text is searched on its own (a title and a body do not run together into a
    word). A word is reported once per rule, in the order it first appears.
    """
    law, platforms = _rules()
    own = [c for c in platforms if c.rule.platform == platform]
    found: dict[tuple[str, str], Violation] = {}
    for text in texts:
        for violation in [*_find(law, text), *_find(own, text)]:
            found.setdefault((violation.word, violation.rule.id), violation)
    return list(found.values())


def _post_texts(content: Mapping[str, Any] | BaseModel, card_texts: Sequence[str]) -> list[str]:
    post = content.model_dump() if isinstance(content, BaseModel) else content
    return [
        str(post.get("title") or ""),
        str(post.get("body") or ""),
        *normalize_tags(post.get("tags")),
        *(str(t) for t in card_texts),
    ]


def check_compliance(
    content: Mapping[str, Any] | BaseModel,
    platform: str | None = None,
    *,
    card_texts: Sequence[str] = (),
) -> list[CheckResult]:
    """Check a post's title, body, tags and card text for forbidden words.

    Checks:

    * ``ad_law`` — no word the advertising law's lists forbid; measured = the words
      found, detail = each word with its rule (``「最好」 — 广告法第九条 禁用绝对化用语``);
    * ``platform_terms`` — only for a platform with its own list: none of its words;
      the detail starts with the platform id.

    Args:
        content: The post, with ``title``, ``body`` and ``tags``.
        platform: The post's platform id.
        card_texts: The text the image cards draw.

    Returns:
        One `CheckResult` per check that ran.
    """
    violations = find_violations(_post_texts(content, card_texts), platform)
    law = [v for v in violations if v.rule.platform is None]
    results = [
        CheckResult(
            name="ad_law",
            passed=not law,
            measured=[v.word for v in law],
            expected="no word the advertising law forbids in ads",
            detail="; ".join(map(str, law)),
        )
    ]
    if platform_word_rules(platform):
        own = [v for v in violations if v.rule.platform is not None]
        results.append(
            CheckResult(
                name="platform_terms",
                passed=not own,
                measured=[v.word for v in own],
                expected=f"{platform}: none of the platform's forbidden words",
                detail=f"{platform}: " + "; ".join(map(str, own)) if own else "",
            )
        )
    return results


#: Allowed uses shown to the writer, so it does not avoid plain words for nothing.
_ALLOWED_EXAMPLES = "最近、最后、最终、第一步、第一次、每周最多两次、最好先做皮试"


def writer_rules(platform: str | None = None) -> str:
    """Return the writer's prompt lines on the forbidden words, rule by rule."""
    rules = [*law_rules(), *platform_word_rules(platform)]
    lines = [prompt.COMPLIANCE_HEADER]
    for rule in rules:
        # A family the patterns cover is named once, not word by word.
        any_most = any(p.startswith("最") for p in rule.patterns)
        any_first = "第一" in rule.patterns
        words = [
            term
            for term in rule.terms
            if not (any_most and term.startswith("最")) and not (any_first and "第一" in term)
        ]
        if any_first:
            words.insert(0, "排名的“第一”（销量第一、第一品牌）")
        if any_most:
            words.insert(0, "任何“最X”（最好、最佳、最低价…）")
        if any("100" in p for p in rule.patterns):
            words.insert(0, "100%")
        lines.append(
            prompt.COMPLIANCE_RULE.format(label=rule.label, law=rule.law, words="、".join(words))
        )
    lines.append(prompt.COMPLIANCE_ALLOWED.format(examples=_ALLOWED_EXAMPLES))
    return "\n".join(lines)
