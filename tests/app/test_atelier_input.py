"""The API's `input` (AtelierInput) is the pipeline's input (PipelineInput), field by field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from app.schemas import AtelierInput
from graphs.pipeline import build_pipeline
from studio.state import PipelineInput

#: Schema keys that only document a field (the API's additions), not its type or bounds.
_DOCS = {"title", "description", "examples", "default"}


def _shape(schema: Any) -> Any:
    """Return a JSON schema without its documentation keys, recursively."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in _DOCS}
    if isinstance(schema, list):
        return [_shape(item) for item in schema]
    return schema


def test_the_same_fields_with_the_same_types_and_bounds() -> None:
    api = AtelierInput.model_json_schema()
    graph = TypeAdapter(PipelineInput).json_schema()
    assert list(api["properties"]) == list(graph["properties"])
    assert api["required"] == graph["required"] == ["request"]
    for name, schema in graph["properties"].items():
        assert _shape(api["properties"][name]) == _shape(schema), name
    # What LangGraph's servers and Studio show for the graph is that same schema.
    served = build_pipeline().get_input_jsonschema()["properties"]
    assert {name: _shape(s) for name, s in served.items()} == {
        name: _shape(s) for name, s in graph["properties"].items()
    }


def test_the_bounds_are_enforced_where_a_client_sends_input() -> None:
    AtelierInput.model_validate({"request": "写一篇笔记", "image_count": 9})
    for bad in (
        {"request": ""},
        {"request": "x" * 4001},
        {"request": "x", "platform": "Xiaohongshu!"},
        {"request": "x", "audience": "a" * 201},
        {"request": "x", "reference_images": ["0" * 32] * 10},
        {"request": "x", "reference_images": ["not-an-asset-id"]},
        {"request": "x", "reference_texts": ["t"] * 6},
        {"request": "x", "image_count": 10},
        {"request": "x", "image_count": "3"},  # strict: a number, not a string
        {"request": "x", "image_provider": "dalle"},
    ):
        with pytest.raises(ValidationError):
            AtelierInput.model_validate(bad)
