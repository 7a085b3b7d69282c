"""LLM usage per role — calls, tokens and time — counted where every model call passes.

`providers.llm.OpenAIModelFactory` gives every model it builds a `UsageCallback`.
The callback reports each finished (or failed) call to the `UsageLedger` of the
code that is running it: `metering()` opens one for a block (the pipeline meters
each node, `graphs.pipeline`), and asyncio tasks started inside the block — the
team subgraph's nodes, concurrent tool calls — inherit it with their context.
Outside a metered block calls are not recorded here (the app's `/metrics`
counts every call on its own). `RunMeter` keeps a second ledger per run, for the
engine's record of what each run cost (`engine.usage`, the keys' spend caps).

Tokens come from the provider's answer: the message's `usage_metadata` (the
factory asks for `stream_usage`, so streamed answers carry it too), else the
`token_usage` of the response. A call whose answer carries no usage — some
servers send none, and a call that failed has none — counts as a call with its
time and *unknown* tokens: it is never given a made-up number. A role's token
sums then cover only its `metered` calls; when none of its calls was metered,
its tokens are null.

Cost: `PriceTable` (`LLM_PRICES`) prices each metered call of a priced model where
the call is made; a cost is known only when every call under it is, never zero, never
a partial sum (docs/models.md, "Cost per post").

A usage mapping, as it is kept in state and shown in the result payload (docs/api.md,
"Usage"):

```
{"<role>": {"calls": int, "metered": int, "prompt_tokens": int | None,
            "completion_tokens": int | None, "seconds": float,
            "cost": {"input": float, "output": float, "total": float,
                     "currency": str} | None}, ...}
```
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from core.usage import RunUsage

UNKNOWN_ROLE = "unknown"
MAX_TRACKED_CALLS = 10_000  # calls in flight remembered; one that never ends is forgotten
COST_DIGITS = 9  # costs are rounded to a billionth of the currency unit, float noise off
TOKENS_PER_PRICE = 1_000_000  # LLM_PRICES are per million tokens


class PriceTable:
    """What a model's tokens cost: per million prompt and completion tokens, one currency."""

    def __init__(self, prices: Mapping[str, Any] | None = None, currency: str = "USD") -> None:
        """Price the models in `prices` (model → object with `input`/`output` or a mapping)."""
        self.currency = currency
        self._prices: dict[str, tuple[float, float]] = {}
        for model, price in (prices or {}).items():
            if isinstance(price, Mapping):
                self._prices[model] = (float(price["input"]), float(price["output"]))
            else:
                self._prices[model] = (float(price.input), float(price.output))

    @classmethod
    def from_settings(cls, settings: Any) -> PriceTable:
        """Return the table of `LLM_PRICES` in `LLM_PRICE_CURRENCY`."""
        return cls(settings.llm_prices, settings.llm_price_currency)

    def cost(self, model: str | None, tokens: tuple[int, int] | None) -> tuple[float, float] | None:
        """Return (input, output) cost of `tokens` (prompt, completion) of `model`, or None.

        None when the tokens are unknown or the model has no price.
        """
        price = self._prices.get(model or "")
        if price is None or tokens is None:
            return None
        return (
            tokens[0] * price[0] / TOKENS_PER_PRICE,
            tokens[1] * price[1] / TOKENS_PER_PRICE,
        )


def cost_dict(input_cost: float, output_cost: float, currency: str) -> dict[str, Any]:
    """Return the JSON form of a cost (see the module docstring)."""
    return {
        "input": round(input_cost, COST_DIGITS),
        "output": round(output_cost, COST_DIGITS),
        "total": round(input_cost + output_cost, COST_DIGITS),
        "currency": currency,
    }


@dataclass
class RoleUsage:
    """What one role's model calls cost."""

    calls: int = 0
    metered: int = 0  # calls whose answer reported its token usage
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    priced: int = 0  # calls whose cost is known (metered, and their model has a price)
    input_cost: float = 0.0
    output_cost: float = 0.0
    currency: str = "USD"

    def as_dict(self) -> dict[str, Any]:
        """Return the JSON form; token sums are None when no call was metered.

        The cost is None unless every call was priced.
        """
        priced = self.calls > 0 and self.priced == self.calls
        return {
            "calls": self.calls,
            "metered": self.metered,
            "prompt_tokens": self.prompt_tokens if self.metered else None,
            "completion_tokens": self.completion_tokens if self.metered else None,
            "seconds": round(self.seconds, 3),
            "cost": cost_dict(self.input_cost, self.output_cost, self.currency) if priced else None,
        }


class UsageLedger:
    """The LLM usage of one metered block, by role."""

    def __init__(self, currency: str = "USD") -> None:
        """Start empty; costs are in `currency`."""
        self.currency = currency
        self.roles: dict[str, RoleUsage] = {}

    def record(
        self,
        role: str,
        seconds: float,
        tokens: tuple[int, int] | None,
        cost: tuple[float, float] | None = None,
    ) -> None:
        """Count one call of `role` that took `seconds`.

        Args:
            role: The calling role.
            seconds: How long the call took.
            tokens: (prompt, completion) tokens its answer reported, or None.
            cost: (input, output) cost of those tokens, or None when unknown.
        """
        usage = self.roles.setdefault(role, RoleUsage(currency=self.currency))
        usage.calls += 1
        usage.seconds += max(0.0, seconds)
        if tokens is not None:
            usage.metered += 1
            usage.prompt_tokens += tokens[0]
            usage.completion_tokens += tokens[1]
        if tokens is not None and cost is not None:
            usage.priced += 1
            usage.input_cost += cost[0]
            usage.output_cost += cost[1]

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Return the usage mapping (see the module docstring)."""
        return {role: usage.as_dict() for role, usage in sorted(self.roles.items())}


_LEDGER: ContextVar[UsageLedger | None] = ContextVar("atelier_usage_ledger", default=None)
#: The ledger of the whole run the code belongs to (`RunMeter`), beside its node's.
_RUN_LEDGER: ContextVar[UsageLedger | None] = ContextVar("atelier_run_ledger", default=None)


@contextmanager
def metering() -> Iterator[UsageLedger]:
    """Record the LLM calls made inside the block (and in tasks it starts) in a new ledger.

    The calls are priced, in the price table's currency, by their model's `UsageCallback`.
    """
    ledger = UsageLedger()
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def response_tokens(response: LLMResult) -> tuple[int, int] | None:
    """Return (prompt, completion) tokens a response reported, or None when it reported none."""
    found = False
    prompt = completion = 0
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
            if usage:
                found = True
                prompt += int(usage.get("input_tokens", 0) or 0)
                completion += int(usage.get("output_tokens", 0) or 0)
    if found:
        return prompt, completion
    usage = (response.llm_output or {}).get("token_usage") or {}
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return None


def call_model(metadata: Mapping[str, Any] | None, invocation: Mapping[str, Any] | None) -> str:
    """Return the model a call asked for: LangChain's `ls_model_name`, else its parameters."""
    for value in (
        (metadata or {}).get("ls_model_name"),
        (invocation or {}).get("model"),
        (invocation or {}).get("model_name"),
    ):
        if isinstance(value, str) and value:
            return value
    return ""


def call_role(metadata: Mapping[str, Any] | None, tags: Sequence[str] | None) -> str:
    """Return the role of a call: its `role` metadata, else its `role:<name>` tag."""
    role = (metadata or {}).get("role")
    if isinstance(role, str) and role:
        return role
    return next((t[5:] for t in tags or () if t.startswith("role:")), UNKNOWN_ROLE)


class UsageCallback(BaseCallbackHandler):
    """Report each model call's role, duration, tokens and cost to the running block's ledger.

    Run inline (it only adds numbers), so it sees the caller's context: the ledger
    `metering()` set for the block the call runs in. Costs come from `prices`, by the
    model each call asked for (`call_model`).
    """

    run_inline = True
    raise_error = False

    def __init__(self, prices: PriceTable | None = None) -> None:
        """Track no call yet; price calls with `prices` (none: every cost unknown)."""
        self._prices = prices or PriceTable()
        self._started: dict[UUID, tuple[str, str, float, list[UsageLedger]]] = {}

    def _start(
        self,
        run_id: UUID,
        metadata: Mapping[str, Any] | None,
        tags: Sequence[str] | None,
        invocation: Mapping[str, Any] | None,
    ) -> None:
        ledgers = [ledger for ledger in (_LEDGER.get(), _RUN_LEDGER.get()) if ledger is not None]
        if not ledgers:
            return
        if len(self._started) >= MAX_TRACKED_CALLS:
            self._started.pop(next(iter(self._started)))
        for ledger in ledgers:
            ledger.currency = self._prices.currency
        role, model = call_role(metadata, tags), call_model(metadata, invocation)
        self._started[run_id] = (role, model, time.perf_counter(), ledgers)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start timing a chat model call."""
        self._start(run_id, metadata, tags, kwargs.get("invocation_params"))

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start timing a completion model call."""
        self._start(run_id, metadata, tags, kwargs.get("invocation_params"))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a finished call with the tokens its answer reported, and their cost."""
        started = self._started.pop(run_id, None)
        if started is not None:
            role, model, start, ledgers = started
            tokens = response_tokens(response)
            cost = self._prices.cost(model, tokens)
            for ledger in ledgers:
                ledger.record(role, time.perf_counter() - start, tokens, cost)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a failed (or cancelled) call: its time, tokens unknown."""
        started = self._started.pop(run_id, None)
        if started is not None:
            role, _model, start, ledgers = started
            for ledger in ledgers:
                ledger.record(role, time.perf_counter() - start, None)


class RunReading:
    """What a `RunMeter` measured of one run so far (an `engine.UsageReading`)."""

    def __init__(self, ledger: UsageLedger) -> None:
        """Read `ledger`, the run's."""
        self._ledger = ledger

    def usage(self) -> RunUsage:
        """Return the run's calls, tokens and cost (known only when every call was priced).

        A run that made no call cost nothing (0, known); tokens are the sums over the
        metered calls, None when none was metered.
        """
        roles = list(self._ledger.roles.values())
        calls = sum(r.calls for r in roles)
        metered = sum(r.metered for r in roles)
        priced = sum(r.priced for r in roles)
        cost = sum(r.input_cost + r.output_cost for r in roles) if priced == calls else None
        return RunUsage(
            calls=calls,
            prompt_tokens=sum(r.prompt_tokens for r in roles) if metered else None,
            completion_tokens=sum(r.completion_tokens for r in roles) if metered else None,
            cost=round(cost, COST_DIGITS) if cost is not None else None,
            currency=self._ledger.currency,
        )


class RunMeter:
    """Measures each run's LLM usage for the engine (an `engine.RunMeter`).

    The engine opens `measuring()` around a run's graph; every call a model of
    `providers.llm` makes inside it (its `UsageCallback`, in tasks the graph starts
    too) is recorded in the run's ledger, with the same tokens and prices as the
    node's ledger the run's `result.usage` is summed from.
    """

    def __init__(self, currency: str = "USD") -> None:
        """Measure costs in `currency` (LLM_PRICE_CURRENCY)."""
        self.currency = currency

    @contextmanager
    def measuring(self) -> Iterator[RunReading]:
        """Record the LLM calls made inside the block (and in tasks it starts) as one run's."""
        ledger = UsageLedger(self.currency)
        token = _RUN_LEDGER.set(ledger)
        try:
            yield RunReading(ledger)
        finally:
            _RUN_LEDGER.reset(token)


def add_usage(
    left: Mapping[str, Mapping[str, Any]] | None, right: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """Reduce two usage mappings into one: per role, calls, tokens, time and cost add up.

    A token sum stays None only while no call of the role was metered on either side;
    a cost is known only while it is known on both sides, in one currency.
    """
    merged: dict[str, dict[str, Any]] = {role: dict(u) for role, u in (left or {}).items()}
    for role, usage in (right or {}).items():
        if role not in merged:
            merged[role] = dict(usage)
            continue
        merged[role] = _add_role(merged[role], usage)
    return dict(sorted(merged.items()))


def _add_role(mine: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
    for key in ("calls", "metered"):
        mine[key] = int(mine.get(key) or 0) + int(usage.get(key) or 0)
    mine["seconds"] = round(float(mine.get("seconds") or 0) + float(usage.get("seconds") or 0), 3)
    for key in ("prompt_tokens", "completion_tokens"):
        a, b = mine.get(key), usage.get(key)
        mine[key] = None if a is None and b is None else int(a or 0) + int(b or 0)
    mine["cost"] = add_costs(mine.get("cost"), usage.get("cost"))
    return mine


def add_costs(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return the sum of two costs; None when either is unknown or they differ in currency."""
    if not a or not b or a.get("currency") != b.get("currency"):
        return None
    return cost_dict(
        float(a["input"]) + float(b["input"]),
        float(a["output"]) + float(b["output"]),
        str(a["currency"]),
    )


def usage_totals(usage: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Return the sum over every role, in the same shape as one role's usage.

    The total cost is known only when every role's is (no role at all: unknown).
    """
    total: dict[str, Any] = {
        "calls": 0,
        "metered": 0,
        "prompt_tokens": None,
        "completion_tokens": None,
        "seconds": 0.0,
        "cost": None,
    }
    roles = list((usage or {}).values())
    if not roles:
        return total
    merged = {"all": {**total, **roles[0]}}
    for role_usage in roles[1:]:
        merged = add_usage(merged, {"all": role_usage})
    return merged["all"]
