"""The knowledge vault: notes, retrieval, deviation detection and storage (PRODUCT.md §3)."""

from knowledge.coordinator import (
    DeviationRecord,
    InjectionRecord,
    KnowledgeCoordinator,
    SessionSummary,
)
from knowledge.deviation import AlertSeverity, AlertType, DeviationAlert, DeviationDetector
from knowledge.notes import KnowledgeNote, NoteLike, NoteStatus, NoteType, as_note
from knowledge.repository import (
    DuplicateNoteError,
    InMemoryNoteRepository,
    NoteNotFoundError,
    NoteRepository,
    SqliteNoteRepository,
    VersionConflictError,
)
from knowledge.retriever import TYPE_WEIGHTS, RetrievalResult, VaultRetriever

__all__ = [
    "TYPE_WEIGHTS",
    "AlertSeverity",
    "AlertType",
    "DeviationAlert",
    "DeviationDetector",
    "DeviationRecord",
    "DuplicateNoteError",
    "InMemoryNoteRepository",
    "InjectionRecord",
    "KnowledgeCoordinator",
    "KnowledgeNote",
    "NoteLike",
    "NoteNotFoundError",
    "NoteRepository",
    "NoteStatus",
    "NoteType",
    "RetrievalResult",
    "SessionSummary",
    "SqliteNoteRepository",
    "VaultRetriever",
    "VersionConflictError",
    "as_note",
]
