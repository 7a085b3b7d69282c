"""The evaluation judge is a model role like every other: settable, defaulted, tagged, bounded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.settings import LLM_ROLES, Settings
from providers.llm import OpenAIModelFactory, role_tags


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, llm_base_url="http://127.0.0.1:9/v1", **values)  # type: ignore[call-arg]


def test_llm_models_sets_the_judges_model_and_it_falls_back_to_the_default() -> None:
    assert "judge" in LLM_ROLES
    assert (
        settings(llm_model="base", llm_models='{"judge": "strict-judge"}').model_for("judge")
        == "strict-judge"
    )
    assert settings(llm_model="base").model_for("judge") == "base"
    assert settings(local_model_max_tokens='{"judge": 800}').local_max_tokens_for("judge") == 800
    with pytest.raises(ValidationError, match="unknown roles"):
        settings(llm_models='{"judges": "typo"}')


async def test_the_factory_serves_the_judge_with_timeout_retries_and_no_stream() -> None:
    config = settings(llm_models={"judge": "strict-judge"}, llm_timeout=12, llm_max_retries=1)
    factory = OpenAIModelFactory(config)
    try:
        model = factory("judge")
        assert factory("judge") is model  # built once, reused
        assert factory.model_name("judge") == "strict-judge"
        assert model.tags == role_tags("judge") == ["role:judge", "nostream"]
        assert (model.metadata or {})["role"] == "judge"
        assert getattr(model, "request_timeout", None) == 12
        assert getattr(model, "max_retries", None) == 1
        assert getattr(model, "streaming", None) is False
    finally:
        await factory.aclose()
