"""The team's loop bounds: declared once, resolved once, read from one place.

- Declared: `TeamLimits` names the bounds; each is the `Settings` field of the
  same name, whose default is the bound's default (`DEFAULT_LIMITS`).
- Resolved: `resolve_limits` is the one merge (defaults, then the deployment's,
  then the run's). It runs at two entries: a pipeline run's start resolves its
  team budget, fast mode included (`agentkit.run_start`), and the team's entry node
  (`graphs.team`) resolves the bounds of one team run into state `limits`.
- Read: every router and node of the team reads `limits_of(state)`, the bounds
  the team's entry wrote, so a router and the node owning its loop always agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

# typing_extensions' TypedDict: pydantic (graph JSON schemas, Studio) rejects typing's on 3.11.
from typing_extensions import TypedDict

from core.settings import Settings


class TeamLimits(TypedDict, total=False):
    """Loop bounds of one team run: the team's entry writes them, routers and nodes read them."""

    max_team_steps: int
    max_invalid_decisions: int
    max_same_agent_repeats: int
    max_research_tool_rounds: int
    max_image_tool_rounds: int
    max_supervisor_tool_rounds: int
    quality_threshold: float


#: The bounds' names: each is also the `Settings` field that configures it.
LIMIT_NAMES: tuple[str, ...] = tuple(TeamLimits.__annotations__)

#: The bounds a run gets when nothing overrides them: the settings' defaults.
DEFAULT_LIMITS: TeamLimits = cast(
    TeamLimits, {name: Settings.model_fields[name].default for name in LIMIT_NAMES}
)

#: Fast mode's team budget (PipelineInput.fast_mode): each bound at most this.
FAST_MODE_CAPS: TeamLimits = {
    "max_team_steps": 12,
    "max_research_tool_rounds": 1,
    "max_supervisor_tool_rounds": 0,
    # A choice repeated with no progress is corrected at its first repeat, not its second.
    "max_same_agent_repeats": 1,
}


def limits_from_settings(settings: Settings) -> TeamLimits:
    """Return the deployment's bounds: the settings of the same names."""
    return cast(TeamLimits, {name: getattr(settings, name) for name in LIMIT_NAMES})


def resolve_limits(*layers: Mapping[str, Any] | None) -> TeamLimits:
    """Return every bound: the defaults, overridden by each layer in turn (None skipped)."""
    merged: dict[str, Any] = dict(DEFAULT_LIMITS)
    for layer in layers:
        merged.update(layer or {})
    return cast(TeamLimits, merged)


def fast_mode_limits(limits: Mapping[str, Any]) -> TeamLimits:
    """Return `limits` tightened to fast mode's budget (`FAST_MODE_CAPS`)."""
    tightened: dict[str, Any] = dict(resolve_limits(limits))
    for name, cap in FAST_MODE_CAPS.items():
        tightened[name] = min(tightened[name], cap)
    return cast(TeamLimits, tightened)


def limits_of(state: Mapping[str, Any]) -> TeamLimits:
    """Return the loop bounds of a team run: the state's `limits` (defaults where unset).

    In a team run the entry node has written every bound; the defaults only fill
    in for a state built by hand (a router's unit test).
    """
    return resolve_limits(state.get("limits"))
