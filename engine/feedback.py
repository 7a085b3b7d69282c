"""Feedback on runs: what a person thought of a run's post (a key, a score, a comment).

A feedback entry belongs to a run and to the API key that owns the run: only that
key adds feedback to the run or reads it (another key gets 404, as for every owned
resource). Each `POST /runs/{run_id}/feedback` appends one entry; nothing is
overwritten, so a run may carry several opinions, on several keys, read back oldest
first (`GET /runs/{run_id}/feedback`). A run keeps at most `MAX_FEEDBACK_PER_RUN`
entries, and its feedback goes with it when the run (or its thread) is deleted.

Decisions the issue left open:

* `key` is a short identifier (`FEEDBACK_KEY_PATTERN`: `quality`, `published`, …),
  free for the client to choose; the console sends `quality`.
* `score` is a number (finite, |score| ≤ `MAX_SCORE`) and required: feedback is
  counted and averaged per key (`/metrics`). A boolean is accepted and stored as 1
  (true) or 0 (false), so `published: true` averages to the share published; the
  console's thumbs up and down are 1 and 0.
* `comment` is optional text of at most `MAX_COMMENT_CHARS` characters.
* Feedback is listed on its own route, not in the run record, so reading runs costs
  nothing more.

Stored in both backends: the `run_feedback` table of `atelier.db`
(`engine.sqlite.feedback`) and of PostgreSQL (`engine.postgres.feedback`, schema
migration "run feedback").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

#: A feedback key: a lower-case identifier.
FEEDBACK_KEY_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
#: Largest |score|.
MAX_SCORE = 1_000_000.0
#: Longest comment, in characters.
MAX_COMMENT_CHARS = 4000
#: Most feedback entries one run keeps; one more is refused (409).
MAX_FEEDBACK_PER_RUN = 100


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """One person's opinion of one run."""

    feedback_id: str
    run_id: str
    thread_id: str
    #: The API key that owns the run (and so wrote this).
    owner: str
    key: str
    score: float
    comment: str | None
    created_at: str

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form the HTTP API answers (the owner is not shown)."""
        record = asdict(self)
        record.pop("owner")
        return record


class FeedbackRepository(Protocol):
    """Where feedback entries are kept (one table per backend)."""

    async def add(self, feedback: FeedbackRecord, *, limit: int) -> bool:
        """Store `feedback` unless its run already has `limit` entries; return whether stored."""
        ...

    async def for_run(self, run_id: str) -> list[FeedbackRecord]:
        """Return a run's feedback, oldest first."""
        ...
