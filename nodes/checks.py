"""The critic's deterministic answer check, as PRODUCT.md §6 names it (`nodes.checks`).

The checks are domain rules that the planner, the review agent, the critic and the
input models share, so they live in `agentkit.checks`; this module is the public
address of `check_answer` for tests, notebooks and other services.
"""

from __future__ import annotations

from agentkit.checks import AnswerCheck, check_answer

__all__ = ["AnswerCheck", "check_answer"]
