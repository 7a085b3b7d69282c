"""Errors the service answers, and how every one of them is rendered.

Every error is JSON of one shape, `{"detail": ..., "error": "<code>", "message":
"<one sentence>"}`. `detail` is what FastAPI and LangGraph Platform clients read (a
string, or the list of field errors for a 422); `message` is always a string, and
the first key `langgraph-sdk` reads for its exception text. An unexpected exception
becomes a 500 with an error id that is also in the server log; no traceback,
exception text or submitted value reaches a client.

`RunsError` and its subclasses are what the run engine refuses a request with;
`install_error_handlers(app)` (called by `app.main.create_app`) renders them, HTTP
exceptions, validation errors and unexpected exceptions in that shape.
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
