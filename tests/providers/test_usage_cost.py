"""Cost per role: tokens the server reported × `LLM_PRICES`; unknown never reads zero.

The models are the factory's real `ChatOpenAI`s talking to the scripted
OpenAI-compatible server on loopback, which reports usage as OpenAI does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from core.settings import Settings
from providers.llm import OpenAIModelFactory
from providers.usage import add_usage, metering, usage_totals
from tests.support.scripted_openai import ChatRequest, Reply, ScriptedOpenAIServer, usage_of

MODELS = {"writer_agent": "m-writer", "critic": "m-critic", "planner": "m-planner"}
PRICES = {"m-writer": {"input": 2.5, "output": 10.0}, "m-critic": {"input": 0.15, "output": 0.6}}


def _reply(req: ChatRequest) -> Reply:
    return Reply.text("一篇关于茶的笔记，" * 12)


def _factory(server: ScriptedOpenAIServer, tmp_path: Path, **extra: Any) -> OpenAIModelFactory:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=tmp_path / "data",
        llm_base_url=server.base_url,
        llm_models=MODELS,
        llm_max_retries=0,
        **extra,
    )
    return OpenAIModelFactory(settings)


def _expected_cost(requests: list[ChatRequest], model: str) -> tuple[float, float]:
    price = PRICES[model]
    prompt = sum(usage_of(r, _reply(r))["prompt_tokens"] for r in requests if r.model == model)
    completion = sum(
        usage_of(r, _reply(r))["completion_tokens"] for r in requests if r.model == model
    )
    return prompt * price["input"] / 1e6, completion * price["output"] / 1e6


async def test_cost_per_role_is_tokens_times_price_and_unpriced_models_cost_unknown(
    tmp_path: Path,
) -> None:
    with ScriptedOpenAIServer(_reply) as server:
        models = _factory(server, tmp_path, llm_prices=PRICES, llm_price_currency="CNY")
        with metering() as ledger:
            await models("writer_agent").ainvoke("写一篇")  # streamed
            await models("writer_agent").ainvoke("再写一篇")
            await models("critic").ainvoke("评一评")
            await models("planner").ainvoke("计划")  # m-planner has no price
        await models.aclose()
        requests = server.requests

    usage = ledger.as_dict()
    for role, model in (("writer_agent", "m-writer"), ("critic", "m-critic")):
        expected_input, expected_output = _expected_cost(requests, model)
        cost = usage[role]["cost"]
        assert cost["currency"] == "CNY"
        assert cost["input"] == pytest.approx(expected_input) and cost["input"] > 0
        assert cost["output"] == pytest.approx(expected_output) and cost["output"] > 0
        assert cost["total"] == pytest.approx(expected_input + expected_output)
    assert usage["planner"]["prompt_tokens"] > 0  # tokens known, price not: cost unknown
    assert usage["planner"]["cost"] is None
    assert usage_totals(usage)["cost"] is None  # one role unknown: the total is unknown
    priced = {role: usage[role] for role in ("writer_agent", "critic")}
    total = usage_totals(priced)["cost"]
    assert total["total"] == pytest.approx(
        usage["writer_agent"]["cost"]["total"] + usage["critic"]["cost"]["total"]
    )


async def test_without_prices_every_cost_is_unknown_not_zero(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(_reply) as server:
        models = _factory(server, tmp_path)
        with metering() as ledger:
            await models("writer_agent").ainvoke("写")
        await models.aclose()
    usage = ledger.as_dict()
    assert usage["writer_agent"]["prompt_tokens"] > 0
    assert usage["writer_agent"]["cost"] is None
    assert usage_totals(usage)["cost"] is None


async def test_a_priced_call_without_reported_tokens_makes_the_roles_cost_unknown(
    tmp_path: Path,
) -> None:
    answers = iter([True, False])

    def respond(req: ChatRequest) -> Reply:
        return dataclasses.replace(_reply(req), report_usage=next(answers))

    with ScriptedOpenAIServer(respond) as server:
        models = _factory(server, tmp_path, llm_prices=PRICES)
        with metering() as ledger:
            await models("critic").ainvoke("一")
            await models("critic").ainvoke("二")  # no usage reported
        await models.aclose()
    critic = ledger.as_dict()["critic"]
    assert (critic["calls"], critic["metered"]) == (2, 1)
    assert critic["cost"] is None


def test_costs_add_up_across_runs_only_while_known_and_in_one_currency() -> None:
    def role(total: float, currency: str = "USD") -> dict[str, Any]:
        cost = {"input": total / 2, "output": total / 2, "total": total, "currency": currency}
        return {"calls": 1, "metered": 1, "prompt_tokens": 1, "completion_tokens": 1,
                "seconds": 0.1, "cost": cost}  # fmt: skip

    summed = add_usage({"critic": role(0.25)}, {"critic": role(0.5)})
    assert summed["critic"]["cost"]["total"] == pytest.approx(0.75)
    unknown = dict(role(0.5), cost=None)
    assert add_usage({"critic": role(0.25)}, {"critic": unknown})["critic"]["cost"] is None
    assert add_usage({"critic": role(0.25)}, {"critic": role(0.5, "CNY")})["critic"]["cost"] is None
    legacy = {k: v for k, v in role(0.5).items() if k != "cost"}  # state from before costs
    assert add_usage({"critic": legacy}, {"critic": role(0.5)})["critic"]["cost"] is None
    assert usage_totals({})["cost"] is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{not json", "LLM_PRICES must be a JSON object"),
        ("[1, 2]", "LLM_PRICES must be a JSON object"),
        ('{"m": {"input": -1, "output": 1}}', "greater than or equal to 0"),
        ('{"m": {"input": 1}}', "Field required"),
        ('{"m": {"input": 1, "output": 1, "cached": 1}}', "Extra inputs"),
    ],
)
def test_a_malformed_price_table_fails_naming_the_setting(value: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, llm_prices=value)  # type: ignore[call-arg]
    assert "llm_prices" in str(info.value) and words in str(info.value)


def test_the_price_currency_is_an_iso_code() -> None:
    with pytest.raises(ValidationError, match="llm_price_currency"):
        Settings(_env_file=None, llm_price_currency="dollars")  # type: ignore[call-arg]


async def test_metrics_count_tokens_by_model_and_only_known_costs(tmp_path: Path) -> None:
    from app.metrics import AtelierMetrics
    from providers.usage import PriceTable

    metrics = AtelierMetrics(prices=PriceTable(PRICES, "USD"))
    with ScriptedOpenAIServer(_reply) as server:
        models = _factory(server, tmp_path)
        config: Any = {"callbacks": [metrics.callback]}
        await models("writer_agent").ainvoke("写", config=config)
        await models("planner").ainvoke("计划", config=config)
        await models.aclose()
        requests = server.requests

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    writer = usage_of(requests[0], _reply(requests[0]))
    tokens = "atelier_llm_model_tokens_total"
    assert (
        sample(tokens, model="m-writer", role="writer_agent", direction="input")
        == (writer["prompt_tokens"])
    )
    assert sample(tokens, model="m-planner", role="planner", direction="output") > 0
    expected = sum(_expected_cost(requests, "m-writer"))
    cost = "atelier_llm_cost_total"
    assert sample(cost, model="m-writer", role="writer_agent", currency="USD") == pytest.approx(
        expected
    )
    assert sample(cost, model="m-planner", role="planner", currency="USD") is None
