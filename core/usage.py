"""One run's LLM usage, as the meter that measures it and the engine that records it share it.

It sits below both (`providers.usage.RunMeter` measures, `engine.usage` records and
sums), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunUsage:
    """One run's LLM usage (None: unknown)."""

    #: LLM calls the run made.
    calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: The calls' cost in `currency`; None unless every call was metered and priced.
    cost: float | None = None
    currency: str | None = None


__all__ = ["RunUsage"]
