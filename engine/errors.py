"""What the run engine refuses a request with: errors that carry an HTTP status, not HTTP.

The engine raises these; the HTTP app renders them (`app.errors.install_error_handlers`),
and other callers (the CLI, workers) read `message` and `field`. Nothing here imports a
web framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RunsError(Exception):
    """A request the engine refuses; `status` is the HTTP status to answer."""

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


class InvalidFields(Invalid):
    """A request whose fields break the rules, field by field (Pydantic's error shape).

    `errors` holds one entry per fault: `type`, `loc` (the field's path in the
    request body, a tuple), `msg`, and the `ctx` and `input` Pydantic adds; the
    HTTP app answers them as it answers a body that fails its model.
    """

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        """Describe the faults; `message` names each field and `field` the first."""
        message = "; ".join(f"{_dotted(e['loc'])}: {e['msg']}" for e in errors)
        super().__init__(message, field=_dotted(errors[0]["loc"]))
        self.errors = errors

    @classmethod
    def at(cls, field: str, message: str) -> InvalidFields:
        """Return the error of one field, given as a dotted body path ("command.goto")."""
        return cls([{"type": "value_error", "loc": tuple(field.split(".")), "msg": message}])


def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


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
