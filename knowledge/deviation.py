"""Detect injected notes that the team's actions ignored (PRODUCT.md §3, critic layer 2).

What an ignored note does to a run: docs/knowledge.md.

When is a note "addressed"? The actions' text (every action's `content`,
flattened when it is structured, e.g. a brief's constraints) is folded with
`segment.normalize`, and a note counts as addressed when either

1. its whole content (ignoring whitespace) occurs in that text, or
2. at least `coverage_threshold` (default 60 %) of its keywords occur in it.

A note's keywords are the jieba words of its *core*: the content with
bracketed asides removed, because "禁止使用绝对化用语（最、第一、顶级）" is about
绝对化用语 and the bracket only gives examples — a post that happens to say
"第一" has not thereby dealt with the rule. From the words, one-character
tokens, punctuation and `STOPWORDS` are dropped. The stopwords include the
directive and polarity verbs (禁止 / 避免 / 不要 / 使用 / must / avoid …), so
"避免绝对化用语" and "不使用绝对化用语" both address that blocker: a rule phrased
differently is still the same rule. Whether the output *obeys* a prohibition is
not decided here; the critic's deterministic must-avoid check does that.

With no actions (or only empty ones) every note is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from knowledge.notes import KnowledgeNote, NoteLike, NoteType, as_note
from knowledge.segment import cut, normalize

DEFAULT_COVERAGE_THRESHOLD = 0.6
MESSAGE_SNIPPET_CHARS = 80

# Bracketed asides, matched after NFKC (which turns "（）" into "()").
_ASIDE_RE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|【[^【】]*】|〔[^〔〕]*〕|「[^「」]*」")
_WHITESPACE_RE = re.compile(r"\s+")

# Words that say how to treat a topic, not what the topic is, plus function words.
STOPWORDS: frozenset[str] = frozenset(
    {
        # Chinese directives, polarity and function words
        "禁止", "避免", "不要", "不能", "不得", "不可", "不准", "切勿", "严禁", "杜绝",
        "必须", "需要", "应该", "应当", "务必", "一定", "尽量", "确保", "保证", "请",
        "使用", "采用", "用到", "进行", "注意", "要求", "可以", "允许", "以及", "或者",
        "还是", "并且", "而且", "如果", "因为", "所以", "这个", "那个", "这些", "那些",
        "一个", "一些", "我们", "你们", "他们", "它们", "时候", "的话", "相关", "问题",
        # English
        "the", "and", "for", "with", "from", "that", "this", "these", "those", "into",
        "are", "was", "were", "been", "be", "is", "of", "to", "in", "on", "at", "by",
        "or", "an", "as", "it", "its", "not", "no", "never", "don", "do", "does",
        "must", "should", "shall", "always", "avoid", "use", "using", "used", "please",
        "make", "sure", "ensure", "any", "all",
    }
)  # fmt: skip


class AlertType(StrEnum):
    """What the pipeline should do about a deviation."""

    REPLAN_REQUIRED = "replan_required"  # an ignored blocker: go back to the planner
    WARNING = "warning"  # feed back to the next attempt


class AlertSeverity(StrEnum):
    """How serious the deviation is; follows the most important ignored note type."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class DeviationAlert(BaseModel):
    """Injected notes that nothing in the agents' actions addressed."""

    model_config = ConfigDict(frozen=True)

    alert_type: AlertType = Field(description="replan_required or warning.")
    severity: AlertSeverity = Field(description="high, medium or low.")
    ignored_notes: list[KnowledgeNote] = Field(description="The ignored notes, in input order.")
    reason: str = Field(description="One line saying why the alert fired.")
    message: str = Field(description="Feedback for the next attempt, quoting the ignored notes.")

    @property
    def ignored_ids(self) -> list[str]:
        """Return the ids of the ignored notes."""
        return [note.id for note in self.ignored_notes]


def action_text(agent_actions: Iterable[Mapping[str, Any] | str]) -> str:
    """Flatten agent actions into one normalised text to search notes in.

    An action is a string or a mapping whose `content` is text or any nested
    structure of dicts and lists; a mapping without `content` contributes all
    its values except `type`.
    """
    parts: list[str] = []
    for action in agent_actions:
        if isinstance(action, Mapping):
            if "content" in action:
                parts.extend(_strings(action["content"]))
            else:
                parts.extend(_strings({k: v for k, v in action.items() if k != "type"}))
        else:
            parts.extend(_strings(action))
    return normalize("\n".join(p for p in parts if p.strip()))


def _strings(value: Any) -> Iterator[str]:
    """Yield the string leaves of a nested structure (keys of mappings included)."""
    if value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, Iterable):
        for item in value:
            yield from _strings(item)
    else:
        yield str(value)


def note_keywords(content: str) -> list[str]:
    """Return the distinct keywords that stand for a note's content.

    Keywords come from the core (bracketed asides removed); when the core has
    none, from the whole content.
    """
    text = normalize(content)
    core = _ASIDE_RE.sub(" ", text)
    return _keywords(core) or _keywords(text)


def _keywords(text: str) -> list[str]:
    """Return the distinct content words of text: no stopwords, no 1-character tokens."""
    return list(dict.fromkeys(w for w in cut(text) if len(w) > 1 and w not in STOPWORDS))


class DeviationDetector:
    """Decide which injected notes the agents ignored; pure and synchronous."""

    def __init__(self, coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD) -> None:
        """Create a detector.

        Args:
            coverage_threshold: Share of a note's keywords (0 < t <= 1) the actions must
                mention for the note to count as addressed.
        """
        if not 0 < coverage_threshold <= 1:
            raise ValueError("coverage_threshold must be in (0, 1]")
        self.coverage_threshold = coverage_threshold

    def is_addressed(self, note: KnowledgeNote, text: str) -> bool:
        """Return whether the (normalised) action text addresses the note."""
        if not text:
            return False
        content = normalize(note.content)
        if _WHITESPACE_RE.sub("", content) in _WHITESPACE_RE.sub("", text):
            return True
        keywords = note_keywords(note.content)
        if not keywords:
            return False
        hits = sum(1 for word in keywords if word in text)
        return hits / len(keywords) >= self.coverage_threshold

    def detect_deviation(
        self,
        injected_notes: Iterable[NoteLike],
        agent_actions: Iterable[Mapping[str, Any] | str],
    ) -> DeviationAlert | None:
        """Return an alert for the injected notes no action addressed, or None.

        Args:
            injected_notes: The notes the team was given (models or dicts).
            agent_actions: What the team did: `{"type": ..., "content": ...}` mappings
                (content may be structured) or plain strings.

        Returns:
            None when every note was addressed (or there were none); otherwise an
            alert whose severity follows the most important ignored type: blocker →
            REPLAN_REQUIRED/HIGH, next_action → WARNING/MEDIUM, others → WARNING/LOW.
        """
        notes = [as_note(n) for n in injected_notes]
        text = action_text(agent_actions)
        ignored = [note for note in notes if not self.is_addressed(note, text)]
        if not ignored:
            return None

        types = {note.type for note in ignored}
        if NoteType.BLOCKER in types:
            alert_type, severity, kind = (
                AlertType.REPLAN_REQUIRED,
                AlertSeverity.HIGH,
                NoteType.BLOCKER,
            )
        elif NoteType.NEXT_ACTION in types:
            alert_type, severity, kind = (
                AlertType.WARNING,
                AlertSeverity.MEDIUM,
                NoteType.NEXT_ACTION,
            )
        else:
            alert_type, severity, kind = AlertType.WARNING, AlertSeverity.LOW, None

        if kind is None:
            reason = f"{len(ignored)} injected note(s) not addressed by the actions"
        else:
            count = sum(1 for note in ignored if note.type is kind)
            reason = f"{count} {kind.value} note(s) not addressed by the actions"
        if not text:
            reason += " (no actions were recorded)"
        quoted = "; ".join(
            f"[{note.type.value} {note.id}] {_snippet(note.content)}" for note in ignored
        )
        return DeviationAlert(
            alert_type=alert_type,
            severity=severity,
            ignored_notes=ignored,
            reason=reason,
            message=f"These knowledge notes were not addressed: {quoted}",
        )


def _snippet(content: str) -> str:
    """Shorten content for a one-line message."""
    flat = _WHITESPACE_RE.sub(" ", content).strip()
    if len(flat) <= MESSAGE_SNIPPET_CHARS:
        return flat
    return flat[: MESSAGE_SNIPPET_CHARS - 1] + "…"
