"""Pure routing functions of the pipeline (PRODUCT.md §1.1).

Like `agentkit.routing` for the team, these are functions of the state alone, so
each rule is unit-tested table by table, and the critic calls `route_from_critic`
on its own update to announce in `critic.verdict` exactly where the graph goes.

Counters are written by the node that owns the loop and read here under the
same name: `attempt` (critic: attempts judged so far) against `max_attempts`
(planner: 1 + MAX_RETRY_COUNT). Replans are bounded by the critic, which only
sets `verdict["replan"]` while replans are left (`replans` < `max_replans`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from core.events import VerdictLabel

PLANNED_ACTIONS = ("create_post", "revise_post")
#: The critic's label for a verdict decided without the judge on clean code checks.
NOT_JUDGED: VerdictLabel = "not_judged"
#: Attempt sources that are revisions of a finished post (`nodes.critic.draft_source`).
REVISIONS = ("edit", "card")


def route_after_planner(state: Mapping[str, Any]) -> Literal["rag", "finalize"]:
    """Go to retrieval when the planner has a usable intent, else straight to finalize.

    Finalize explains why: `failure` set (the planner's LLM failed) → outcome
    failed; intent action `unknown` (or missing) → outcome needs_clarification.
    """
    if state.get("failure"):
        return "finalize"
    intent = state.get("intent") or {}
    return "rag" if intent.get("action") in PLANNED_ACTIONS else "finalize"


def route_after_rag(state: Mapping[str, Any]) -> Literal["executor", "adapter"]:
    """Send the attempt to the team, or to the writer's adapter when the run adapts a post.

    A run whose input carries `adapt_from` (`agentkit.adaptation`) rewrites that post
    for its platform: no team, no new images.
    """
    source = state.get("adapt_from")
    return "adapter" if isinstance(source, Mapping) and source.get("body") else "executor"


def attempts_left(state: Mapping[str, Any]) -> int:
    """Return how many attempts remain after the ones already judged."""
    return max(0, int(state.get("max_attempts") or 1) - int(state.get("attempt") or 0))


def route_from_critic(state: Mapping[str, Any]) -> Literal["finalize", "rag", "planner"]:
    """Decide where the run goes after the critic's verdict.

    In order: a failed executor, a passing verdict or a `not_judged` one (every
    code check passed and the judge was unavailable: nothing for another attempt
    to fix, see `nodes.critic`) → finalize; a revision (a person's edit, a redrawn
    card: verdict `source` in `REVISIONS`) → finalize, whatever the verdict, for a
    team attempt would overwrite it; no attempts left → finalize
    (exhausted: the best attempt is published); an ignored blocker note with a
    replan left (`verdict["replan"]`) → planner; otherwise → rag, for another
    attempt with the verdict as feedback.
    """
    verdict = state.get("verdict") or {}
    if state.get("failure") or verdict.get("passed") or verdict.get("verdict") == NOT_JUDGED:
        return "finalize"
    if verdict.get("source") in REVISIONS:
        return "finalize"
    if attempts_left(state) == 0:
        return "finalize"
    if verdict.get("replan"):
        return "planner"
    return "rag"


def route_after_finalize(state: Mapping[str, Any]) -> Literal["redraw_card", "__end__"]:
    """End the run, unless a client asked for one card again (`redraw`, see `nodes.redraw_card`).

    Finalize clears `redraw` when it runs, so only a state update made *as* finalize
    (`POST /threads/{t}/state` with `as_node: "finalize"`) leads here to the redraw;
    a stale request of a redraw that failed never redraws after a later run.
    """
    return "redraw_card" if state.get("redraw") else "__end__"
