"""The one place chat models are constructed.

Nodes ask a `ModelFactory` for the model of their role and never build one
themselves, so tests swap the whole LLM layer by passing another factory.
"""

from __future__ import annotations

from typing import Protocol

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langgraph.constants import TAG_NOSTREAM

from core.settings import LLM_ROLES, STREAMING_ROLES, Settings


class ModelFactory(Protocol):
    """Return the chat model a role uses."""

    def __call__(self, role: str) -> BaseChatModel: ...


def role_tags(role: str) -> list[str]:
    """Return the run tags for a role: its name, plus `nostream` unless it writes for users."""
    tags = [f"role:{role}"]
    if role not in STREAMING_ROLES:
        tags.append(TAG_NOSTREAM)
    return tags


class OpenAIModelFactory:
    """Build `ChatOpenAI` models against any OpenAI-compatible endpoint.

    One model object per role is built lazily and reused: `ChatOpenAI` holds an
    HTTP connection pool, and rebuilding it per call would throw that away.
    """

    def __init__(self, settings: Settings, *, base_url: str | None = None) -> None:
        """Bind the factory to settings; `base_url` overrides `LLM_BASE_URL` (embedded model)."""
        self._settings = settings
        self._base_url = base_url or settings.llm_base_url
        self._cache: dict[str, BaseChatModel] = {}

    def __call__(self, role: str) -> BaseChatModel:
        """Return the chat model for `role` with timeout, bounded retries and stream tags."""
        if role not in LLM_ROLES:
            raise ValueError(f"unknown LLM role {role!r}")
        model = self._cache.get(role)
        if model is None:
            model = self._build(role)
            self._cache[role] = model
        return model

    def _build(self, role: str) -> BaseChatModel:
        s = self._settings
        # Local OpenAI-compatible servers ignore the key, but the client insists on one.
        api_key = s.llm_api_key.get_secret_value() if s.llm_api_key else "not-needed"
        return ChatOpenAI(
            model=s.model_for(role),
            base_url=self._base_url,
            api_key=api_key,  # type: ignore[arg-type]
            timeout=s.llm_timeout,
            max_retries=s.llm_max_retries,
            temperature=s.llm_temperature,
            max_tokens=s.llm_max_tokens,  # type: ignore[call-arg]
            streaming=role in STREAMING_ROLES,
            stream_usage=True,
            tags=role_tags(role),
            metadata={"role": role},
        )
