"""JSON for the wire and the event log: graph values, messages, interrupts, models.

Stream chunks hold LangChain messages, Pydantic models, LangGraph `Interrupt`s
(dataclasses), tuples and datetimes. `dumps` turns any of them into compact JSON
text on one line (SSE `data:` lines must not contain a newline, and orjson never
writes one); objects it cannot describe become their `str()`, so a stream never
fails on an odd value in the state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from typing import Any

import orjson
from pydantic import BaseModel

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):  # messages are Pydantic models too
        return obj.model_dump(mode="json", by_alias=True)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Interrupt(value, id, response_schema=None): drop empty optional fields.
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return {k: v for k, v in fields.items() if v is not None or k == "value"}
    if isinstance(obj, set | frozenset):
        return list(obj)
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, Mapping):
        return dict(obj)
    return str(obj)


def dumps(obj: Any) -> str:
    """Return `obj` as compact, single-line JSON text."""
    return orjson.dumps(obj, default=_default, option=_OPTIONS).decode()


def to_jsonable(obj: Any) -> Any:
    """Return `obj` as plain JSON data (dicts, lists, strings, numbers)."""
    return orjson.loads(dumps(obj))


def loads(text: str | bytes | None) -> Any:
    """Parse JSON text (None stays None)."""
    return None if text is None else orjson.loads(text)
