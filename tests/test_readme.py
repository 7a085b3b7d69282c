"""The README stays true: its graph drawing and event reference match the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from core.events import PipelineEvent
from graphs.pipeline import build_pipeline

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_the_readme_shows_the_pipeline_as_the_graph_draws_itself() -> None:
    blocks = re.findall(r"```mermaid\n(.*?)```", README, flags=re.DOTALL)
    drawing = build_pipeline().get_graph(xray=1).draw_mermaid()
    assert [block.strip() for block in blocks] == [drawing.strip()], (
        "README's mermaid block is stale: paste "
        "build_pipeline().get_graph(xray=1).draw_mermaid() into it"
    )


def test_the_event_reference_lists_every_pipeline_event() -> None:
    union = get_args(PipelineEvent)[0]
    types = {model.model_fields["type"].default for model in get_args(union)}
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z]+)` \|", README, flags=re.MULTILINE))
    assert documented == types
