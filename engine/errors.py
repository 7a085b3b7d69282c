"""What the run engine refuses a request with: errors that carry an HTTP status, not HTTP.

The engine raises these; the HTTP app renders them (`app.errors.install_error_handlers`),
and other callers (the CLI, workers) read `message` and `field`. Nothing here imports a
web framework.
"""

from __future__ import annotations


class RunsError(Exception):
    """A request the run manager refuses; `status` is the HTTP status to answer."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        """Describe the problem in one client-safe sentence.

        Args:
            message: The sentence.
            field: The request field at fault: a body path ("command.resume") or
                "header:<name>".
        """
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(RunsError):
    """The thread, run or assistant does not exist (for this caller)."""

    status = 404


class Conflict(RunsError):
    """The request conflicts with the thread's or run's current state."""

    status = 409


class Invalid(RunsError):
    """The request is well-formed but names something that cannot be done."""

    status = 422


class Unavailable(RunsError):
    """The database takes no writes now (locked past its busy timeout, or full)."""

    status = 503


class NotReadyError(RuntimeError):
    """A readiness check's failure whose one-line message is safe to show to anyone."""


#: What a client is told when PostgreSQL did not answer (nothing of the driver's text).
DATABASE_UNAVAILABLE = (
    "The database (PostgreSQL) is unavailable right now; nothing was changed. "
    "Retry in a few seconds."
)
