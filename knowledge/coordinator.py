"""Per-thread bookkeeping of which notes were injected and which were ignored.

The coordinator joins the retriever (rag injects notes) and the detector (the
critic checks them) under one session id — the LangGraph thread id — and keeps
the history a UI or a metric can show.

It lives in memory and is bounded: at most `max_sessions` sessions (the least
recently used one is dropped first) and `max_history` records per history
(oldest dropped). Totals in the summary keep counting past the history cap.
All methods are synchronous and take a lock, so they are atomic both for
asyncio tasks (they never await) and for threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from knowledge.deviation import DeviationAlert, DeviationDetector
from knowledge.notes import KnowledgeNote, NoteLike, as_note, utcnow
from knowledge.retriever import LimitPerType, RetrievalResult, VaultRetriever

DEFAULT_MAX_SESSIONS = 1024
DEFAULT_MAX_HISTORY = 100


class InjectionRecord(BaseModel):
    """One retrieval whose notes were put into a session's context."""

    model_config = ConfigDict(frozen=True)

    query: str = Field(description="The retrieval query.")
    notes: list[KnowledgeNote] = Field(description="The injected notes, best first.")
    scores: dict[str, float] = Field(description="Note id → score.")
    total_found: int = Field(ge=0, description="Matches before limits.")
    at: datetime = Field(default_factory=utcnow, description="When it happened (UTC).")

    @property
    def note_ids(self) -> list[str]:
        """Return the injected note ids, in order."""
        return [note.id for note in self.notes]


class DeviationRecord(BaseModel):
    """One deviation check that raised an alert."""

    model_config = ConfigDict(frozen=True)

    alert: DeviationAlert = Field(description="The alert raised.")
    checked_ids: list[str] = Field(description="Ids of every note that was checked.")
    at: datetime = Field(default_factory=utcnow, description="When it happened (UTC).")


class SessionSummary(TypedDict):
    """Counters of one session."""

    total_injections: int  # inject_notes calls
    total_notes_injected: int  # notes over all injections
    total_deviations: int  # checks that raised an alert
    deviation_rate: float  # total_deviations / deviation checks, 0.0 before any check


@dataclass
class _Session:
    """Mutable state of one session; only touched under the coordinator's lock."""

    injections: deque[InjectionRecord]
    deviations: deque[DeviationRecord]
    total_injections: int = 0
    total_notes_injected: int = 0
    total_checks: int = 0
    total_deviations: int = 0
    last_injected: list[KnowledgeNote] = field(default_factory=list)


class KnowledgeCoordinator:
    """Inject notes per session and check later whether the team honoured them."""

    def __init__(
        self,
        max_injection: int = 6,
        retriever: VaultRetriever | None = None,
        detector: DeviationDetector | None = None,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_history: int = DEFAULT_MAX_HISTORY,
    ) -> None:
        """Create a coordinator.

        Args:
            max_injection: At most this many notes per injection.
            retriever: Ranks notes; a default `VaultRetriever` when None.
            detector: Finds ignored notes; a default `DeviationDetector` when None.
            max_sessions: Sessions kept before the least recently used is dropped.
            max_history: Records kept per history list of a session.
        """
        if max_injection < 0:
            raise ValueError("max_injection must be >= 0")
        if max_sessions < 1 or max_history < 1:
            raise ValueError("max_sessions and max_history must be >= 1")
        self.max_injection = max_injection
        self.retriever = retriever or VaultRetriever(default_max_total=max_injection)
        self.detector = detector or DeviationDetector()
        self.max_sessions = max_sessions
        self.max_history = max_history
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()

    def inject(
        self,
        session_id: str,
        query: str,
        notes: Iterable[NoteLike],
        limit_per_type: LimitPerType | None = None,
        only_approved: bool = False,
    ) -> RetrievalResult:
        """Retrieve notes for the query, record the injection and return the full result.

        Every call is recorded, also one that found nothing, so the history shows
        each retrieval the session made. The injected notes become the default
        set for the next `check_deviation`.
        """
        result = self.retriever.fetch(
            query,
            notes,
            limit_per_type=limit_per_type,
            max_total=self.max_injection,
            only_approved=only_approved,
        )
        record = InjectionRecord(
            query=query,
            notes=result.notes,
            scores=result.scores,
            total_found=result.total_found,
        )
        with self._lock:
            session = self._session(session_id)
            session.injections.append(record)
            session.total_injections += 1
            session.total_notes_injected += len(result.notes)
            session.last_injected = list(result.notes)
        return result

    def inject_notes(
        self,
        session_id: str,
        query: str,
        notes: Iterable[NoteLike],
        limit_per_type: LimitPerType | None = None,
        only_approved: bool = False,
    ) -> list[KnowledgeNote]:
        """Retrieve and record notes for the query; return the injected notes, best first."""
        return self.inject(session_id, query, notes, limit_per_type, only_approved).notes

    def check_deviation(
        self,
        session_id: str,
        agent_actions: Iterable[Mapping[str, Any] | str],
        injected_notes: Iterable[NoteLike] | None = None,
    ) -> DeviationAlert | None:
        """Check whether the actions addressed the injected notes; record any alert.

        Args:
            session_id: The session (thread id).
            agent_actions: What the team did (see `DeviationDetector.detect_deviation`).
            injected_notes: The notes to check; the session's latest injection when None.

        Returns:
            The alert, or None when every note was addressed or there was nothing to
            check. Only a check with at least one note counts toward `deviation_rate`.
        """
        if injected_notes is not None:
            notes = [as_note(n) for n in injected_notes]
        else:
            with self._lock:
                existing = self._sessions.get(session_id)
                notes = list(existing.last_injected) if existing else []
        if not notes:
            return None
        alert = self.detector.detect_deviation(notes, agent_actions)
        with self._lock:
            session = self._session(session_id)
            session.total_checks += 1
            if alert is not None:
                session.total_deviations += 1
                session.deviations.append(
                    DeviationRecord(alert=alert, checked_ids=[n.id for n in notes])
                )
        return alert

    def get_injection_history(self, session_id: str) -> list[InjectionRecord]:
        """Return the session's injections, oldest first (empty for an unknown session)."""
        with self._lock:
            session = self._peek(session_id)
            return list(session.injections) if session else []

    def get_deviation_history(self, session_id: str) -> list[DeviationRecord]:
        """Return the session's alerts, oldest first (empty for an unknown session)."""
        with self._lock:
            session = self._peek(session_id)
            return list(session.deviations) if session else []

    def get_session_summary(self, session_id: str) -> SessionSummary:
        """Return the session's counters.

        `deviation_rate` is alerts per deviation check (not per injection), rounded
        to 4 decimals: it answers "how often did the team ignore its notes".
        """
        with self._lock:
            session = self._peek(session_id)
            if session is None:
                return SessionSummary(
                    total_injections=0,
                    total_notes_injected=0,
                    total_deviations=0,
                    deviation_rate=0.0,
                )
            rate = session.total_deviations / session.total_checks if session.total_checks else 0.0
            return SessionSummary(
                total_injections=session.total_injections,
                total_notes_injected=session.total_notes_injected,
                total_deviations=session.total_deviations,
                deviation_rate=round(rate, 4),
            )

    def clear_session(self, session_id: str) -> bool:
        """Forget a session; return whether it existed."""
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    def _peek(self, session_id: str) -> _Session | None:
        """Return an existing session, marking it recently used; never creates one."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def _session(self, session_id: str) -> _Session:
        """Return the session, creating it (and evicting the LRU one) when needed."""
        if not session_id:
            raise ValueError("session_id must not be empty")
        session = self._peek(session_id)
        if session is None:
            session = _Session(
                injections=deque(maxlen=self.max_history),
                deviations=deque(maxlen=self.max_history),
            )
            self._sessions[session_id] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return session
