"""The knowledge vault over HTTP (PRODUCT.md §3).

    POST  /knowledge/notes                  create a note (201, Location header)
    GET   /knowledge/notes                  list: filters type, status, tag; limit/offset
    POST  /knowledge/notes/search           rank notes for a query, with scores
    GET   /knowledge/notes/{note_id}        one note
    PATCH /knowledge/notes/{note_id}        change fields; `expected_version` required
    POST  /knowledge/notes/{note_id}/archive

Updates are optimistic: a PATCH names the version it was based on and gets 409, with
the current version, when someone else updated the note first; every successful
change bumps `version`. Archiving keeps the note readable here but takes it out of
search and retrieval; it is the vault's delete (notes stay for the record).

Every note lives in a namespace (`namespace`: a brand's `knowledge_namespace`, or
"shared", the default, which every run reads besides its brand's) and belongs to
the API key that wrote it: a key reads, searches and changes its own notes and reads
the notes no key wrote (those written before namespaces, imported with `atelier notes
import`, and notes seeded on the server), never another key's, which answer 404 as if
they did not exist. A run retrieves its owner's notes (and the owner-less ones) in its
brand's namespace and in "shared" only (`nodes.rag`). Note ids stay unique over the
whole vault: an id another key took answers 409. A new note's `owner` (who wrote it,
a person or an agent name) defaults to the caller's owner id.

Shared knowledge is the admins': a note no key wrote, and any note in the "shared"
namespace, is written (created in, changed, archived, moved in or out) by admin keys
only; a member gets 403 naming the rule. Each such write is in the audit trail
(`note.create`, `note.update`, `note.archive`). See docs/keys.md.
"""

from __future__ import annotations

import builtins
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from app.access import READ, WRITE, Access, refusal
from app.deps import AuditDep, CallerDep, NotesDep, PrincipalDep
from app.schemas import DIGITS_ONLY
from app.security import Caller
from knowledge.notes import (
    MAX_CONTENT_CHARS,
    MAX_ID_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_OWNER_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    NAMESPACE_PATTERN,
    SHARED_NAMESPACE,
    KnowledgeNote,
    NoteStatus,
    NoteType,
)
from knowledge.repository import (
    MAX_PAGE,
    DuplicateNoteError,
    NoteNotFoundError,
    NoteRepository,
    VersionConflictError,
)

router = APIRouter(prefix="/knowledge/notes", tags=["knowledge"])

MAX_LIST_LIMIT = 200
MAX_OFFSET = 1_000_000
MAX_QUERY_CHARS = 500
MAX_SEARCH_LIMIT = 50
MAX_SEARCH_NAMESPACES = 20
_ID_PATTERN = r"^[^\s/]+$"

Tag = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TAG_CHARS)
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Content = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CONTENT_CHARS)]
Owner = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_OWNER_CHARS)
]
Namespace = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN),
]
NoteId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="Id of the note.",
        examples=["note_rules_01"],
    ),
]

_CONTENT_DOC = f"The note itself, plain text, 1-{MAX_CONTENT_CHARS} characters, not blank."
_TAGS_DOC = (
    f"Topic labels: at most {MAX_TAGS}, each 1-{MAX_TAG_CHARS} characters; repeats are dropped."
)
_OWNER_DOC = f"Who wrote the note: a user or agent name, 1-{MAX_OWNER_CHARS} characters."
_NAMESPACE_DOC = (
    "The namespace of the note: lower-case letters, digits, '-', '_' and '.', starting "
    f"with a letter or digit, at most {MAX_NAMESPACE_CHARS} characters; a brand's "
    f"`knowledge_namespace`, or {SHARED_NAMESPACE!r}, which every run reads."
)


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("content must not be blank")
    return value


class NoteCreate(BaseModel):
    """A new note."""

    model_config = ConfigDict(extra="forbid")

    type: NoteType = Field(
        description="Kind of note; sets its retrieval weight.", examples=["blocker"]
    )
    content: Content = Field(
        description=_CONTENT_DOC, examples=["禁止使用绝对化用语（最、第一、顶级）"]
    )
    tags: Tags = Field(default_factory=list, description=_TAGS_DOC, examples=[["合规", "广告法"]])
    status: NoteStatus = Field(
        default=NoteStatus.DRAFT,
        description="Review status; only approved notes are trusted by approved-only retrieval.",
        examples=["approved"],
    )
    owner: Owner | None = Field(
        default=None,
        description=_OWNER_DOC + " Default: the caller's owner id.",
        examples=["editor"],
    )
    namespace: Namespace = Field(
        default=SHARED_NAMESPACE, description=_NAMESPACE_DOC, examples=["brand-a"]
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=_ID_PATTERN,
        description="Id to give the note, without spaces or slashes (default: generated); "
        "409 when it is taken.",
        examples=["note_rules_01"],
    )

    _content_not_blank = field_validator("content")(_not_blank)


class NoteUpdate(BaseModel):
    """Changes to a note, based on the version the client last read."""

    model_config = ConfigDict(extra="forbid")

    expected_version: StrictInt = Field(
        ge=1,
        le=2**31,
        description="The version these changes are based on; 409 when the note has moved on.",
        examples=[1],
    )
    type: NoteType | None = Field(default=None, description="New kind.", examples=["conclusion"])
    content: Content | None = Field(
        default=None, description=_CONTENT_DOC, examples=["标题不超过 20 个字"]
    )
    tags: Tags | None = Field(default=None, description=_TAGS_DOC, examples=[["标题"]])
    status: NoteStatus | None = Field(
        default=None, description="New status.", examples=["approved"]
    )
    owner: Owner | None = Field(default=None, description=_OWNER_DOC, examples=["editor"])
    namespace: Namespace | None = Field(
        default=None, description="Move the note: " + _NAMESPACE_DOC, examples=["brand-b"]
    )

    _content_not_blank = field_validator("content")(_not_blank)

    @model_validator(mode="after")
    def _changes_something(self) -> NoteUpdate:
        if not self.changes():
            raise ValueError(
                "give at least one of type, content, tags, status, owner, namespace to change"
            )
        return self

    def changes(self) -> dict[str, Any]:
        """Return the fields to change (those given and not null)."""
        return {
            key: value
            for key, value in self.model_dump(exclude={"expected_version"}).items()
            if value is not None
        }


class NoteArchive(BaseModel):
    """Optional precondition of an archive."""

    model_config = ConfigDict(extra="forbid")

    expected_version: StrictInt | None = Field(
        default=None,
        ge=1,
        le=2**31,
        description="Archive only if the note is still at this version (else 409).",
        examples=[2],
    )


class NotePage(BaseModel):
    """A page of notes in insertion order."""

    items: list[KnowledgeNote] = Field(description="The notes of this page.")
    total: int = Field(
        ge=0, description="Notes matching the filters, over all pages.", examples=[42]
    )
    limit: int = Field(ge=1, description="Page size asked for.", examples=[50])
    offset: int = Field(ge=0, description="Notes skipped before this page.", examples=[0])


class SearchRequest(BaseModel):
    """A vault search."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description="What to look for; Chinese text is segmented (no spaces needed).",
        examples=["小红书 标题 绝对化用语"],
    )
    limit: StrictInt = Field(
        default=6, ge=1, le=MAX_SEARCH_LIMIT, description="Most notes to return.", examples=[6]
    )
    only_approved: StrictBool = Field(
        default=False, description="Return approved notes only.", examples=[True]
    )
    namespaces: list[Namespace] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SEARCH_NAMESPACES,
        description="Search only these namespaces (default: every namespace the caller "
        "has notes in). A run searches its brand's and 'shared'.",
        examples=[["brand-a", "shared"]],
    )

    @model_validator(mode="after")
    def _query_not_blank(self) -> SearchRequest:
        if not self.query.strip():
            raise ValueError("query must not be blank")
        return self


class ScoredNote(BaseModel):
    """A note and how well it matches the query."""

    score: float = Field(
        ge=0, le=1, description="Relevance × type weight, normalised to 0-1.", examples=[0.8]
    )
    note: KnowledgeNote


class SearchResponse(BaseModel):
    """Notes ranked for a query, best first (archived notes never appear)."""

    query: str = Field(description="The query searched.", examples=["绝对化用语"])
    total_found: int = Field(
        ge=0, description="Notes with a non-zero score, before the limit.", examples=[3]
    )
    items: list[ScoredNote] = Field(description="Best first.")


_SHARED_ONLY_ADMINS = (
    "Shared knowledge (notes no key wrote, and the 'shared' namespace) is written by "
    "admin keys only; this key's role is {role}. Write to a namespace of your own "
    "(e.g. your brand's knowledge_namespace)."
)


def is_shared(note: KnowledgeNote) -> bool:
    """Return whether a note is shared knowledge: no key wrote it, or it is in "shared"."""
    return note.principal is None or note.namespace == SHARED_NAMESPACE


def require_shared_writer(caller: Caller) -> None:
    """Refuse a write to shared knowledge (403 naming the rule) unless `caller` is an admin."""
    if refusal(caller, Access.ADMIN) is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, _SHARED_ONLY_ADMINS.format(role=caller.role))


async def _shared_note(
    notes: NoteRepository, note_id: str, caller: Caller, moves_to: str | None = None
) -> KnowledgeNote | None:
    """Return the note when a write to it touches shared knowledge (and the caller may).

    Raises:
        HTTPException: 404 when the caller cannot see the note; 403 when it is shared
            knowledge (or `moves_to` is "shared") and the caller is not an admin.
    """
    current = await notes.get(note_id, principal=caller.owner)
    if current is None:
        raise _not_found(note_id)
    if is_shared(current) or moves_to == SHARED_NAMESPACE:
        require_shared_writer(caller)
        return current
    return None


def _not_found(note_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"Note {note_id!r} not found.")


def _invalid(exc: ValidationError) -> RequestValidationError:
    """Report a note the vault refused (its own bounds) as a 422 on the request body."""
    errors = [{**error, "loc": ("body", *error.get("loc", ()))} for error in exc.errors()]
    return RequestValidationError(errors)


def _conflict(exc: VersionConflictError) -> HTTPException:
    return HTTPException(
        status.HTTP_409_CONFLICT,
        {
            "message": f"Note {exc.note_id!r} is at version {exc.actual}, not "
            f"{exc.expected}: read it again and re-apply your change.",
            "note_id": exc.note_id,
            "expected_version": exc.expected,
            "current_version": exc.actual,
        },
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=KnowledgeNote,
    summary="Create a note",
    responses={
        409: {"description": "The given id is taken."},
        403: {"description": "The 'shared' namespace, and the caller is not an admin key."},
    },
    dependencies=[WRITE],
)
async def create_note(
    body: NoteCreate, notes: NotesDep, caller: CallerDep, audit: AuditDep, response: Response
) -> KnowledgeNote:
    """Store a new note at version 1 (in "shared": admin keys only)."""
    shared = body.namespace == SHARED_NAMESPACE
    if shared:
        require_shared_writer(caller)
    owner = caller.owner
    data = body.model_dump(exclude_none=True)
    data.setdefault("owner", owner)
    data["principal"] = owner
    try:
        note = KnowledgeNote.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc) from None
    try:
        await notes.add(note)
    except DuplicateNoteError:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"A note with id {note.id!r} already exists."
        ) from None
    if shared:
        await audit.record(
            caller.actor,
            "note.create",
            subject=owner,
            target=note.id,
            details={"namespace": note.namespace, "type": note.type.value},
        )
    # A note id may be any text without spaces or slashes (Chinese included); a
    # header holds Latin-1 at most, so the path is percent-encoded (RFC 3986).
    response.headers["Location"] = f"/knowledge/notes/{quote(note.id, safe='')}"
    return note


@router.get("", response_model=NotePage, summary="List notes", dependencies=[READ])
async def list_notes(
    notes: NotesDep,
    principal: PrincipalDep,
    namespace: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_NAMESPACE_CHARS,
            pattern=NAMESPACE_PATTERN,
            description="Only notes in this namespace.",
        ),
    ] = None,
    type: Annotated[NoteType | None, Query(description="Only notes of this type.")] = None,
    status_: Annotated[
        NoteStatus | None, Query(alias="status", description="Only notes with this status.")
    ] = None,
    tag: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TAG_CHARS,
            description="Only notes with this tag (case-insensitive).",
        ),
    ] = None,
    limit: Annotated[
        int, Field(ge=1, le=MAX_LIST_LIMIT), DIGITS_ONLY, Query(description="Page size.")
    ] = 50,
    offset: Annotated[
        int, Field(ge=0, le=MAX_OFFSET), DIGITS_ONLY, Query(description="Notes to skip.")
    ] = 0,
) -> NotePage:
    """Return a page of the caller's notes in insertion order, archived ones included."""
    scope: dict[str, Any] = {
        "namespaces": None if namespace is None else [namespace],
        "principal": principal,
    }
    if tag is None:
        items = await notes.list(type=type, status=status_, limit=limit, offset=offset, **scope)
        total = await notes.count(type=type, status=status_, **scope)
    else:
        tagged = await _with_tag(notes, tag, type, status_, scope)
        items, total = tagged[offset : offset + limit], len(tagged)
    return NotePage(items=items, total=total, limit=limit, offset=offset)


async def _with_tag(
    notes: NoteRepository,
    tag: str,
    type: NoteType | None,
    status_: NoteStatus | None,
    scope: dict[str, Any],
) -> builtins.list[KnowledgeNote]:
    """Return every note carrying `tag`, scanning the vault page by page.

    The repositories filter by type and status only; the vault holds hundreds of
    notes, so the tag is matched here rather than in SQL over JSON.
    """
    wanted = tag.strip().casefold()
    found: builtins.list[KnowledgeNote] = []
    offset = 0
    while True:
        page = await notes.list(type=type, status=status_, limit=MAX_PAGE, offset=offset, **scope)
        found.extend(n for n in page if any(t.casefold() == wanted for t in n.tags))
        if len(page) < MAX_PAGE:
            return found
        offset += MAX_PAGE


@router.post("/search", response_model=SearchResponse, summary="Search notes", dependencies=[READ])
async def search_notes(
    body: SearchRequest, notes: NotesDep, principal: PrincipalDep
) -> SearchResponse:
    """Rank the caller's non-archived notes for a query with the vault retriever."""
    result = await notes.search(
        body.query,
        limit=body.limit,
        only_approved=body.only_approved,
        namespaces=body.namespaces,
        principal=principal,
    )
    items = [ScoredNote(score=result.scores.get(n.id, 0.0), note=n) for n in result.notes]
    return SearchResponse(query=body.query, total_found=result.total_found, items=items)


@router.get(
    "/{note_id}",
    response_model=KnowledgeNote,
    summary="Get a note",
    responses={404: {"description": "No note has this id."}},
    dependencies=[READ],
)
async def get_note(note_id: NoteId, notes: NotesDep, principal: PrincipalDep) -> KnowledgeNote:
    """Return one note, archived or not."""
    note = await notes.get(note_id, principal=principal)
    if note is None:
        raise _not_found(note_id)
    return note


@router.patch(
    "/{note_id}",
    response_model=KnowledgeNote,
    summary="Update a note",
    responses={
        404: {"description": "No note has this id."},
        409: {"description": "The note is no longer at `expected_version`."},
        403: {"description": "Shared knowledge, and the caller is not an admin key."},
    },
    dependencies=[WRITE],
)
async def update_note(
    note_id: NoteId, body: NoteUpdate, notes: NotesDep, caller: CallerDep, audit: AuditDep
) -> KnowledgeNote:
    """Change fields of a note and bump its version, if it is still at `expected_version`.

    Shared knowledge (a note no key wrote, or in "shared", or moved there) is changed
    by admin keys only.
    """
    changes = body.changes()
    shared = await _shared_note(notes, note_id, caller, moves_to=changes.get("namespace"))
    try:
        updated = await notes.update(
            note_id, expected_version=body.expected_version, principal=caller.owner, **changes
        )
        if shared is not None:
            details: dict[str, Any] = {"fields": sorted(changes), "version": updated.version}
            if updated.namespace != shared.namespace:
                details["moved"] = {"from": shared.namespace, "to": updated.namespace}
            await audit.record(
                caller.actor,
                "note.update",
                subject=shared.principal,
                target=note_id,
                details=details,
            )
        return updated
    except NoteNotFoundError:
        raise _not_found(note_id) from None
    except VersionConflictError as exc:
        raise _conflict(exc) from None
    except ValidationError as exc:
        raise _invalid(exc) from None


@router.post(
    "/{note_id}/archive",
    response_model=KnowledgeNote,
    summary="Archive a note",
    responses={
        404: {"description": "No note has this id."},
        409: {"description": "The note is no longer at `expected_version`."},
        403: {"description": "Shared knowledge, and the caller is not an admin key."},
    },
    dependencies=[WRITE],
)
async def archive_note(
    note_id: NoteId,
    notes: NotesDep,
    caller: CallerDep,
    audit: AuditDep,
    body: NoteArchive | None = None,
) -> KnowledgeNote:
    """Set a note's status to archived (a new version); it leaves search and retrieval.

    Shared knowledge is archived by admin keys only.
    """
    expected = body.expected_version if body else None
    shared = await _shared_note(notes, note_id, caller)
    try:
        archived = await notes.archive(note_id, expected_version=expected, principal=caller.owner)
        if shared is not None:
            await audit.record(
                caller.actor,
                "note.archive",
                subject=shared.principal,
                target=note_id,
                details={"namespace": archived.namespace, "version": archived.version},
            )
        return archived
    except NoteNotFoundError:
        raise _not_found(note_id) from None
    except VersionConflictError as exc:
        raise _conflict(exc) from None
