"""The one place chat models are constructed.

Nodes ask a `ModelFactory` for the model of their role and never build one
themselves, so tests swap the whole LLM layer by passing another factory.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langgraph.constants import TAG_NOSTREAM

from core.settings import LLM_ROLES, STREAMING_ROLES, Settings
from providers.local_llm import (
    EmbeddedModelCrashedError,
    EmbeddedModelServer,
    LlamaCppChatOpenAI,
    embedded_model_name,
)

log = logging.getLogger(__name__)

#: `owned_by` of the models a llama.cpp server lists: llama-cpp-python's
#: `llama_cpp.server` says "me", llama.cpp's own `llama-server` says "llamacpp".
LLAMA_CPP_OWNERS = frozenset({"me", "llamacpp"})
_DETECT_TIMEOUT_S = 5.0


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
    the dialect that server reads. With `llama_cpp=True` an external endpoint gets
    that dialect too (grammar-safe tool schemas, `max_tokens`, every call streamed),
    with the `LLM_*` model, budget and temperature; None reads
    `LLM_LLAMA_CPP_DIALECT` ("on" only: detection needs a request, see
    `open_model_factory`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        base_url: str | None = None,
        embedded: bool = False,
        server: EmbeddedModelServer | None = None,
        llama_cpp: bool | None = None,
    ) -> None:
        """Bind the factory to settings; `base_url` overrides `LLM_BASE_URL` (embedded model).

        Args:
            settings: The configuration.
            base_url: The endpoint (default `LLM_BASE_URL`); required with `embedded`.
            embedded: Talk to the embedded model at `base_url`.
            server: The embedded model's server, whose crashes the models report as
                such and whose health `health()` reports.
            llama_cpp: Talk to `LLM_BASE_URL` in llama.cpp's dialect (None: the setting).
        """
        if embedded and not base_url:
            raise ValueError("the embedded model needs the base_url it is served at")
        self._settings = settings
        self._base_url = base_url or settings.llm_base_url
        self._embedded_name = embedded_model_name(settings) if embedded else None
        self._server = server
        if llama_cpp is None:
            llama_cpp = settings.llm_llama_cpp_dialect == "on"
        self.llama_cpp = embedded or llama_cpp
        self._cache: dict[str, BaseChatModel] = {}

    def health(self) -> str | None:
        """Return None while the models can be called, else one line saying why not.

        Only the embedded model is watched; an external endpoint is never probed here.
        """
        return self._server.health() if self._server is not None else None

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

    def _build(self, role: str) -> BaseChatModel:
        s = self._settings
        # Local OpenAI-compatible servers ignore the key, but the client insists on one.
        api_key = s.llm_api_key.get_secret_value() if s.llm_api_key else "not-needed"
        embedded = self._embedded_name is not None
        chat_class = LlamaCppChatOpenAI if self.llama_cpp else ChatOpenAI
        max_tokens = s.local_max_tokens_for(role) if embedded else s.llm_max_tokens
        temperature = s.local_model_temperature if embedded else s.llm_temperature
        model = chat_class(
            model=self.model_name(role),
            base_url=self._base_url,
            api_key=api_key,  # type: ignore[arg-type]
            timeout=s.llm_timeout,
            max_retries=s.llm_max_retries,
            temperature=temperature,
            max_tokens=max_tokens,  # type: ignore[call-arg]
            # llama.cpp: every call streams, so an abandoned one (timeout, cancel) stops
            # generating at once; llama.cpp finishes a non-streamed request regardless.
            streaming=self.llama_cpp or role in STREAMING_ROLES,
            stream_usage=True,
            tags=role_tags(role),
            metadata={"role": role},
        )
        if isinstance(model, LlamaCppChatOpenAI) and self._server is not None:
            model.watch_server(self._server)
        return model


def model_crash(exc: BaseException) -> str | None:
    """Return the one-line reason if `exc`, or an error that caused it, is a model crash.

    Nodes that turn an LLM failure into a run's message use it to say that the
    embedded model crashed (and what to do) instead of a generic "try again".
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EmbeddedModelCrashedError):
            return str(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


async def detect_llama_cpp(base_url: str, api_key: str | None = None) -> bool:
    """Return whether the OpenAI-compatible endpoint at `base_url` is a llama.cpp server.

    Asks `GET {base_url}/models` once: llama.cpp's servers name themselves in the
    models' `owned_by` (`LLAMA_CPP_OWNERS`). Any failure counts as "not llama.cpp".
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=_DETECT_TIMEOUT_S) as client:
            response = await client.get(f"{base_url.rstrip('/')}/models", headers=headers)
        data: Any = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        log.info("could not list the models of LLM_BASE_URL; assuming it is not llama.cpp")
        return False
    owners = {m.get("owned_by") for m in data or [] if isinstance(m, dict)}
    return bool(owners & LLAMA_CPP_OWNERS)


@asynccontextmanager
async def open_model_factory(settings: Settings) -> AsyncIterator[OpenAIModelFactory]:
    """Yield the model factory for `settings`, serving the embedded model if needed.

    With `LLM_BASE_URL` set, every role talks to that endpoint, in llama.cpp's
    dialect when `LLM_LLAMA_CPP_DIALECT` says so or, on "auto", when the endpoint is
    a llama.cpp server (`detect_llama_cpp`). Without it, the embedded llama.cpp
    server runs for the block's duration and every role talks to it; it has
    answered one completion before the block starts (see
    `providers.local_llm.EmbeddedModelServer.start`).
    """
    if settings.llm_base_url:
        mode = settings.llm_llama_cpp_dialect
        llama_cpp = mode == "on"
        if mode == "auto":
            key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
            llama_cpp = await detect_llama_cpp(settings.llm_base_url, key)
            if llama_cpp:
                log.info("LLM_BASE_URL is a llama.cpp server: using its dialect")
        yield OpenAIModelFactory(settings, llama_cpp=llama_cpp)
        return
    server = EmbeddedModelServer(settings)
    base_url = await server.start()
    try:
        yield OpenAIModelFactory(settings, base_url=base_url, embedded=True, server=server)
    finally:
        await server.stop()
