"""Knowledge notes: the house rules, decisions and references agents are reminded of.

A note is immutable once built (`frozen`): the retriever, the coordinator's
history and the repositories can share one object without copying it. A change
is a new version of the note, made by a repository's `update`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

MAX_CONTENT_CHARS = 4000
MAX_TAGS = 20
MAX_TAG_CHARS = 50
MAX_OWNER_CHARS = 128
MAX_ID_CHARS = 64
DEFAULT_OWNER = "system"
#: The namespace every run reads besides its brand's, and a new note's default.
SHARED_NAMESPACE = "shared"
MAX_NAMESPACE_CHARS = 64
#: A namespace: lower-case words joined by `-`, `_` or `.` (as `agentkit.brand` names them).
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
MAX_PRINCIPAL_CHARS = 128


class NoteType(StrEnum):
    """What a note is about; decides its weight in retrieval and its deviation severity."""

    BLOCKER = "blocker"
    NEXT_ACTION = "next_action"
    CONCLUSION = "conclusion"
    PROGRESS = "progress"
    REFERENCE = "reference"


class NoteStatus(StrEnum):
    """Where a note is in its review life cycle."""

    DRAFT = "draft"
    PENDING_USER = "pending_user"  # proposed by an agent, waiting for a person to approve
    APPROVED = "approved"
    ARCHIVED = "archived"  # kept for the record; never retrieved or injected


def new_note_id() -> str:
    """Return a fresh, URL-safe note id."""
    return f"note_{uuid.uuid4().hex}"


def utcnow() -> datetime:
    """Return the current time, timezone-aware in UTC."""
    return datetime.now(UTC)


Tag = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TAG_CHARS)
]


class KnowledgeNote(BaseModel):
    """One note of the knowledge vault.

    Build one with `KnowledgeNote.create(...)`, or from a plain dict with
    `KnowledgeNote.model_validate({...})` (or `as_note`): only `type` and
    `content` are required; a missing id is generated, owner defaults to
    "system", status to draft, version to 1 and timestamps to now.

    The default status is `draft` on purpose: a note is trusted by
    `only_approved` retrieval only after someone approves it explicitly.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "id": "note_rules_01",
                    "type": "blocker",
                    "status": "approved",
                    "content": "禁止使用绝对化用语（最、第一、顶级）",
                    "tags": ["合规", "广告法"],
                    "owner": "editor",
                    "version": 1,
                }
            ]
        },
    )

    id: str = Field(
        default_factory=new_note_id,
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=r"^[^\s/]+$",
        description="Stable identifier; no whitespace or slashes, so it fits a URL path.",
        examples=["note_rules_01"],
    )
    type: NoteType = Field(description="Kind of note; sets retrieval weight.", examples=["blocker"])
    status: NoteStatus = Field(
        default=NoteStatus.DRAFT,
        description="Review status; archived notes are never retrieved.",
        examples=["approved"],
    )
    content: str = Field(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="The note itself, in plain text.",
        examples=["禁止使用绝对化用语（最、第一、顶级）"],
    )
    tags: list[Tag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description=f"Topic labels (at most {MAX_TAGS}, each at most {MAX_TAG_CHARS} characters).",
        examples=[["合规", "广告法"]],
    )
    owner: str = Field(
        default=DEFAULT_OWNER,
        min_length=1,
        max_length=MAX_OWNER_CHARS,
        description="Who wrote the note: a user name or an agent name.",
        examples=["editor"],
    )
    namespace: str = Field(
        default=SHARED_NAMESPACE,
        min_length=1,
        max_length=MAX_NAMESPACE_CHARS,
        pattern=NAMESPACE_PATTERN,
        description="The namespace the note lives in: a brand's `knowledge_namespace`, or "
        f"{SHARED_NAMESPACE!r}, which every run reads.",
        examples=["brand-a"],
    )
    principal: str | None = Field(
        default=None,
        max_length=MAX_PRINCIPAL_CHARS,
        exclude=True,
        description="The API key's owner id that wrote the note (never serialized); None: "
        "a note every key sees (notes from before namespaces, notes seeded on the server).",
    )
    version: int = Field(
        default=1, ge=1, description="Bumped by every update (optimistic locking).", examples=[1]
    )
    created_at: datetime = Field(default_factory=utcnow, description="Creation time (UTC).")
    updated_at: datetime = Field(default_factory=utcnow, description="Last update time (UTC).")

    @field_validator("content")
    @classmethod
    def _content_not_blank(cls, value: str) -> str:
        """Reject content that is only whitespace; keep inner formatting as written."""
        if not value.strip():
            raise ValueError("content must not be blank")
        return value.strip()

    @field_validator("tags")
    @classmethod
    def _dedupe_tags(cls, value: list[str]) -> list[str]:
        """Drop repeated tags (case-insensitively), keeping the first spelling and order."""
        seen: set[str] = set()
        unique: list[str] = []
        for tag in value:
            key = tag.casefold()
            if key not in seen:
                seen.add(key)
                unique.append(tag)
        return unique

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        """Store timestamps in UTC; a naive timestamp is taken to be UTC already."""
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def export_json(self) -> str:
        """Return the note as one JSON line, with `principal` when a key wrote it.

        What `atelier notes export` writes: an import (`model_validate`) restores the
        note's key, so a key's notes never come back as notes every key sees.
        """
        data = self.model_dump(mode="json")
        if self.principal is not None:
            data["principal"] = self.principal
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def create(
        cls,
        type: NoteType | str,
        content: str,
        owner: str = DEFAULT_OWNER,
        tags: Iterable[str] | None = None,
        status: NoteStatus | str = NoteStatus.DRAFT,
        namespace: str = SHARED_NAMESPACE,
        principal: str | None = None,
    ) -> KnowledgeNote:
        """Create a new note (version 1) with a generated id.

        Args:
            type: The note type, as an enum member or its value ("blocker").
            content: The note text, at most 4000 characters.
            owner: Who wrote it.
            tags: Topic labels; duplicates are dropped.
            status: Review status; draft unless given (see the class docstring).
            namespace: The namespace it lives in (default: the shared one).
            principal: The owner id of the API key that wrote it (None: every key's).

        Returns:
            The validated note.

        Raises:
            pydantic.ValidationError: When a field breaks its bounds.
        """
        return cls.model_validate(
            {
                "type": type,
                "content": content,
                "owner": owner,
                "tags": list(tags or []),
                "status": status,
                "namespace": namespace,
                "principal": principal,
            }
        )


NoteLike = KnowledgeNote | Mapping[str, Any]
"""A note, or a dict with a note's fields (as kept in graph state or test data)."""


def visible_to(note: KnowledgeNote, principal: str | None) -> bool:
    """Return whether the key `principal` may see the note (None: no restriction).

    A key sees the notes it wrote and the notes no key wrote.
    """
    return principal is None or note.principal is None or note.principal == principal


def as_note(value: NoteLike) -> KnowledgeNote:
    """Return value as a `KnowledgeNote`, validating it when it is a mapping."""
    if isinstance(value, KnowledgeNote):
        return value
    return KnowledgeNote.model_validate(dict(value))
