"""The run engine's names are the official SDK's (`langgraph_sdk.schema`), declared once."""

from __future__ import annotations

from typing import get_args

import langgraph_sdk.schema as sdk

from app.schemas import RunCreate, RunOut, ThreadPrune, ThreadTTLIn
from engine import records


def test_status_strategy_and_cancel_names_are_the_sdks() -> None:
    for name in ("RunStatus", "ThreadStatus", "MultitaskStrategy", "CancelAction"):
        ours, theirs = getattr(records, name), getattr(sdk, name)
        assert set(get_args(ours)) == set(get_args(theirs)), name
    # A TTL's strategies are the SDK's prune strategies.
    assert set(records.TTL_STRATEGIES) == set(get_args(sdk.PruneStrategy))


def test_the_api_models_use_the_same_names() -> None:
    assert RunOut.model_fields["status"].annotation == records.RunStatus
    assert RunOut.model_fields["multitask_strategy"].annotation == records.MultitaskStrategy
    assert RunCreate.model_fields["multitask_strategy"].annotation == records.MultitaskStrategy
    assert ThreadTTLIn.model_fields["strategy"].annotation == records.TtlStrategy
    assert ThreadPrune.model_fields["strategy"].annotation == records.TtlStrategy
