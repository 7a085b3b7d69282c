"""The `atelier` input is declared once (PipelineInput); the API's strict model is derived."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, ValidationError
from typing_extensions import TypedDict

from agentkit.state import AtelierInput, PipelineInput, model_of
from graphs.assistants import ATELIER
from graphs.pipeline import build_pipeline


def test_the_model_has_the_graph_inputs_fields_in_order() -> None:
    api = AtelierInput.model_json_schema()
    assert list(api["properties"]) == list(PipelineInput.__annotations__)
    assert api["required"] == ["request"]
    assert api["additionalProperties"] is False
    # What LangGraph's servers and Studio show for the graph is the same schema.
    served = build_pipeline().get_input_jsonschema()
    assert served["properties"] == api["properties"]
    assert ATELIER.input_model is AtelierInput


def test_the_graph_gets_only_what_the_client_sent() -> None:
    sent = {"request": "写一篇笔记", "image_count": 3}
    assert AtelierInput.model_validate(sent).model_dump(mode="json", exclude_unset=True) == sent


def test_the_bounds_are_enforced_where_a_client_sends_input() -> None:
    AtelierInput.model_validate({"request": "写一篇笔记", "image_count": 9})
    for bad in (
        {"request": ""},
        {"request": "   "},
        {"request": "x" * 4001},
        {"request": "x", "platform": "Xiaohongshu!"},
        {"request": "x", "audience": "a" * 201},
        {"request": "x", "reference_images": ["0" * 32] * 10},
        {"request": "x", "reference_images": ["not-an-asset-id"]},
        {"request": "x", "reference_texts": ["t"] * 6},
        {"request": "x", "image_count": 10},
        {"request": "x", "image_count": "3"},  # strict: a number, not a string
        {"request": "x", "fast_mode": "true"},
        {"request": "x", "image_provider": "dalle"},
        {"request": "x", "tone": "warm"},  # not an input field
        {"request": "x", "constraints": {"word_max": 3}},
        {"request": "x", "constraints": {"body_min": 9, "body_max": 3}},
        {"request": "x", "constraints": {"must_include": ["词" * 6000]}},
    ):
        with pytest.raises(ValidationError):
            AtelierInput.model_validate(bad)


def test_a_key_that_is_not_required_needs_a_default() -> None:
    class Base(BaseModel):
        pass

    class Documented(TypedDict, total=False):
        name: Annotated[str, Field(default="x", description="A name.")]

    class Undocumented(TypedDict, total=False):
        name: str

    model: Any = model_of(Documented, name="M", base=Base, doc="M.")
    assert model.model_validate({}).model_dump() == {"name": "x"}
    with pytest.raises(TypeError, match="name"):
        model_of(Undocumented, name="M", base=Base, doc="M.")
