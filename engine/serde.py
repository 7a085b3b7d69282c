"""JSON for the wire and the event log: graph values, messages, interrupts, models.

Stream chunks hold LangChain messages, Pydantic models, LangGraph `Interrupt`s
(dataclasses), tuples and datetimes. `dumps` turns any of them into compact JSON
text on one line (SSE `data:` lines must not contain a newline, and orjson never
writes one); objects it cannot describe become their `str()`, so a stream never
fails on an odd value in the state. Integers wider than 64 bits, which orjson
cannot write, are written as their decimal text (a JSON string): client input is
refused before it gets here (`app.schemas.check_json_integers`), but a graph may
still produce one (a model's output parsed as JSON, say).
"""

from __future__ import annotations

import dataclasses
import json
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


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _wide_ints_as_text(value: Any) -> Any:
    """Return plain JSON data with every integer orjson cannot write turned into text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _INT64_MIN <= value <= _UINT64_MAX else str(value)
    if isinstance(value, dict):
        return {k: _wide_ints_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_wide_ints_as_text(v) for v in value]
    return value


def dumps(obj: Any) -> str:
    """Return `obj` as compact, single-line JSON text."""
    try:
        return orjson.dumps(obj, default=_default, option=_OPTIONS).decode()
    except orjson.JSONEncodeError as exc:
        # The standard library writes integers of any size; read its text back and
        # write the wide ones as strings. Anything else it cannot write re-raises.
        try:
            plain = json.loads(json.dumps(obj, default=_default))
        except (TypeError, ValueError, RecursionError):
            raise exc from None
        return orjson.dumps(_wide_ints_as_text(plain), option=_OPTIONS).decode()


def to_jsonable(obj: Any) -> Any:
    """Return `obj` as plain JSON data (dicts, lists, strings, numbers)."""
    return orjson.loads(dumps(obj))


def loads(text: str | bytes | None) -> Any:
    """Parse JSON text (None stays None)."""
    return None if text is None else orjson.loads(text)
