"""The one place chat models are constructed.

Nodes ask a `ModelFactory` for the model of their role and never build one
themselves, so tests swap the whole LLM layer by passing another factory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langgraph.constants import TAG_NOSTREAM

from core.settings import LLM_ROLES, STREAMING_ROLES, Settings
from providers.local_llm import LlamaCppChatOpenAI, embedded_model_name, serve_embedded_model


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

    With `embedded=True` every role talks to the embedded llama.cpp server at
    `base_url` (see `providers.local_llm`): the model is named after the GGUF file,
    completion budgets come from `LOCAL_MODEL_MAX_TOKENS`, and requests are sent in
    the dialect that server reads.
    """

    def __init__(
        self, settings: Settings, *, base_url: str | None = None, embedded: bool = False
    ) -> None:
        """Bind the factory to settings; `base_url` overrides `LLM_BASE_URL` (embedded model)."""
        if embedded and not base_url:
            raise ValueError("the embedded model needs the base_url it is served at")
        self._settings = settings
        self._base_url = base_url or settings.llm_base_url
        self._embedded_name = embedded_model_name(settings) if embedded else None
        self._cache: dict[str, BaseChatModel] = {}

    def model_name(self, role: str) -> str:
        """Return the name of the model `role` uses (what /info shows)."""
        return self._embedded_name or self._settings.model_for(role)

    def __call__(self, role: str) -> BaseChatModel:
        """Return the chat model for `role` with timeout, bounded retries and stream tags."""
        if role not in LLM_ROLES:
            raise ValueError(f"unknown LLM role {role!r}")
        model = self._cache.get(role)
        if model is None:
            model = self._build(role)
            self._cache[role] = model
        return model

    def prepare(self) -> None:
        """Build every role's model now (blocking), so no run builds one on its event loop.

        Building a `ChatOpenAI` creates its HTTP clients, which reads package
        metadata and certificate files: servers call this at start-up, from a
        worker thread (`AtelierContext.from_settings` does).
        """
        for role in LLM_ROLES:
            self(role)

    def _build(self, role: str) -> BaseChatModel:
        s = self._settings
        # Local OpenAI-compatible servers ignore the key, but the client insists on one.
        api_key = s.llm_api_key.get_secret_value() if s.llm_api_key else "not-needed"
        embedded = self._embedded_name is not None
        chat_class = LlamaCppChatOpenAI if embedded else ChatOpenAI
        max_tokens = s.local_max_tokens_for(role) if embedded else s.llm_max_tokens
        temperature = s.local_model_temperature if embedded else s.llm_temperature
        return chat_class(
            model=self.model_name(role),
            base_url=self._base_url,
            api_key=api_key,  # type: ignore[arg-type]
            timeout=s.llm_timeout,
            max_retries=s.llm_max_retries,
            temperature=temperature,
            max_tokens=max_tokens,  # type: ignore[call-arg]
            # Embedded: every call streams, so an abandoned one (timeout, cancel) stops
            # generating at once; llama.cpp finishes a non-streamed request regardless.
            streaming=embedded or role in STREAMING_ROLES,
            stream_usage=True,
            tags=role_tags(role),
            metadata={"role": role},
        )


@asynccontextmanager
async def open_model_factory(settings: Settings) -> AsyncIterator[OpenAIModelFactory]:
    """Yield the model factory for `settings`, serving the embedded model if needed.

    With `LLM_BASE_URL` set, every role talks to that endpoint. Without it, the
    embedded llama.cpp server runs for the block's duration and every role talks
    to it (see `providers.local_llm.serve_embedded_model`).
    """
    if settings.llm_base_url:
        yield OpenAIModelFactory(settings)
        return
    async with serve_embedded_model(settings) as base_url:
        yield OpenAIModelFactory(settings, base_url=base_url, embedded=True)
