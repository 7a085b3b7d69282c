"""The team's routing functions, as PRODUCT.md §6 names them (`graphs.routing`).

They are pure functions over state and live in the layer the agents share
(`agentkit.routing`), because the supervisor and the review agent use them as well
as the wiring; this module is their public address for tests and notebooks.
"""

from __future__ import annotations

from agentkit.routing import (
    check_basic_preconditions,
    quality_fallback,
    route_from_supervisor,
    should_continue_image,
    should_continue_research,
    should_continue_review,
    should_continue_supervisor,
)

__all__ = [
    "check_basic_preconditions",
    "quality_fallback",
    "route_from_supervisor",
    "should_continue_image",
    "should_continue_research",
    "should_continue_review",
    "should_continue_supervisor",
]
