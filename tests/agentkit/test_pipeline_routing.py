"""Routing of the pipeline (agentkit.pipeline_routing), table by table."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit.pipeline_routing import (
    attempts_left,
    route_after_finalize,
    route_after_planner,
    route_from_critic,
)

CREATE = {"action": "create_post"}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"intent": CREATE}, "rag"),
        ({"intent": {"action": "revise_post"}}, "rag"),
        ({"intent": {"action": "unknown"}}, "finalize"),
        ({"intent": None}, "finalize"),
        ({}, "finalize"),
        ({"intent": CREATE, "failure": {"stage": "planner", "message": "x"}}, "finalize"),
    ],
)
def test_route_after_planner(state: dict[str, Any], expected: str) -> None:
    assert route_after_planner(state) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        # passed → finalize, whatever is left
        ({"attempt": 1, "max_attempts": 4, "verdict": {"passed": True}}, "finalize"),
        # failed with attempts left → retry from rag
        ({"attempt": 1, "max_attempts": 4, "verdict": {"passed": False}}, "rag"),
        ({"attempt": 3, "max_attempts": 4, "verdict": {"passed": False}}, "rag"),
        # exhausted → finalize (the critic wrote attempt, the router reads attempt)
        ({"attempt": 4, "max_attempts": 4, "verdict": {"passed": False}}, "finalize"),
        ({"attempt": 5, "max_attempts": 4, "verdict": {"passed": False}}, "finalize"),
        # replan while attempts are left → planner
        (
            {"attempt": 1, "max_attempts": 4, "verdict": {"passed": False, "replan": True}},
            "planner",
        ),
        # replan asked on the last attempt → finalize (attempts bound the loop first)
        (
            {"attempt": 4, "max_attempts": 4, "verdict": {"passed": False, "replan": True}},
            "finalize",
        ),
        # the executor failed → finalize
        ({"attempt": 1, "max_attempts": 4, "verdict": {}, "failure": {"m": 1}}, "finalize"),
        # fast mode: one attempt only
        ({"attempt": 1, "max_attempts": 1, "verdict": {"passed": False}}, "finalize"),
        # a revision (a person's edit, a redrawn card) → finalize, attempts left or not
        ({"attempt": 2, "max_attempts": 4, "verdict": {"source": "edit"}}, "finalize"),
        ({"attempt": 2, "max_attempts": 4, "verdict": {"source": "card"}}, "finalize"),
        ({"attempt": 2, "max_attempts": 4, "verdict": {"source": "team"}}, "rag"),
        # a team that stopped for lack of progress → finalize: the same plan drifts again
        (
            {"attempt": 1, "max_attempts": 4, "verdict": {"passed": False}, "stalled": "3 steps"},
            "finalize",
        ),
        ({"attempt": 1, "max_attempts": 4, "verdict": {"passed": False}, "stalled": None}, "rag"),
    ],
)
def test_route_from_critic(state: dict[str, Any], expected: str) -> None:
    assert route_from_critic(state) == expected


def test_attempts_left_defaults_to_one_attempt() -> None:
    assert attempts_left({}) == 1
    assert attempts_left({"attempt": 2, "max_attempts": 4}) == 2
    assert attempts_left({"attempt": 9, "max_attempts": 4}) == 0


def test_route_after_finalize_redraws_only_when_a_card_is_asked_for() -> None:
    assert route_after_finalize({}) == "__end__"
    assert route_after_finalize({"redraw": None}) == "__end__"
    assert route_after_finalize({"redraw": {"slot": 2}}) == "redraw_card"
