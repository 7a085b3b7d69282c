"""The team's loop bounds: declared once, resolved once at the team's entry, read from state."""

from __future__ import annotations

from pathlib import Path

from agentkit.limits import (
    DEFAULT_LIMITS,
    FAST_MODE_CAPS,
    LIMIT_NAMES,
    fast_mode_limits,
    limits_from_settings,
    limits_of,
    resolve_limits,
)
from core.settings import Settings
from graphs.team import team_recursion_limit
from tests.graphs.team_runs import run_team
from tests.support.fake_models import FakeModels, decision, fake_context, happy_team


def test_every_bound_is_a_setting_and_defaults_to_it() -> None:
    assert set(LIMIT_NAMES) <= set(Settings.model_fields)
    assert {name: Settings.model_fields[name].default for name in LIMIT_NAMES} == DEFAULT_LIMITS
    assert DEFAULT_LIMITS["max_team_steps"] == 24 and DEFAULT_LIMITS["quality_threshold"] == 0.6
    settings = Settings(_env_file=None, max_team_steps=30, quality_threshold=0.8)  # type: ignore[call-arg]
    assert limits_from_settings(settings) == {
        **DEFAULT_LIMITS,
        "max_team_steps": 30,
        "quality_threshold": 0.8,
    }


def test_later_layers_win_and_unset_bounds_keep_their_defaults() -> None:
    assert resolve_limits() == DEFAULT_LIMITS
    assert resolve_limits({"max_team_steps": 5}, None, {"max_team_steps": 7})["max_team_steps"] == 7
    assert limits_of({}) == DEFAULT_LIMITS
    assert limits_of({"limits": {"max_image_tool_rounds": 2}})["max_image_tool_rounds"] == 2


def test_fast_mode_only_tightens() -> None:
    assert fast_mode_limits(DEFAULT_LIMITS) == {**DEFAULT_LIMITS, **FAST_MODE_CAPS}
    small = {"max_team_steps": 6, "max_research_tool_rounds": 0, "max_same_agent_repeats": 1}
    assert fast_mode_limits(small)["max_team_steps"] == 6
    assert fast_mode_limits(small)["max_research_tool_rounds"] == 0


async def test_the_contexts_bounds_reach_routers_and_nodes(tmp_path: Path) -> None:
    # A supervisor that never gets past END-without-a-body: only the step cap ends it.
    models = FakeModels({**happy_team(1), "supervisor": decision("END")})
    ctx = fake_context(models, tmp_path, limits={"max_team_steps": 5})
    run = await run_team(models, tmp_path, ctx=ctx, image_count=1, config={"recursion_limit": 200})
    assert run.state["limits"] == {**DEFAULT_LIMITS, "max_team_steps": 5}
    assert run.state["team_step"] == 5
    assert run.fallbacks[-1][1:] == ("__end__", "cap")


async def test_the_inputs_bounds_win_over_the_contexts(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(1), "supervisor": decision("END")})
    ctx = fake_context(models, tmp_path, limits={"max_team_steps": 5, "max_invalid_decisions": 1})
    limits = {"max_team_steps": 6}
    run = await run_team(
        models,
        tmp_path,
        ctx=ctx,
        image_count=1,
        limits=limits,
        config={"recursion_limit": team_recursion_limit(limits)},
    )
    assert run.state["limits"]["max_team_steps"] == 6
    assert run.state["limits"]["max_invalid_decisions"] == 1  # the context's, not the default
    assert run.state["team_step"] == 6
