"""The one place chat models are constructed.

Nodes ask a `ModelFactory` for the model of their role and never build one
themselves, so tests swap the whole LLM layer by passing another factory.

Every HTTP attempt the OpenAI client makes goes through a transport of ours
(`CountingTransport`), one per role, which tells an `AttemptObserver` (the app's
metrics) about each retry and each failed attempt. The OpenAI SDK retries 429s,
5xx answers, timeouts and connection errors itself (`LLM_MAX_RETRIES`), below
LangChain, where no callback sees them; the transport sees every attempt, and
the SDK numbers them in its `x-stainless-retry-count` request header. A deliberate
deviation: these clients replace langchain-openai's default ones, so its TCP
keep-alive socket options (`LANGCHAIN_OPENAI_TCP_*`) do not apply; `LLM_TIMEOUT`
still bounds every attempt, and the run timeout every run.

A run may use another model for a role than the deployment's: its config's
`configurable.models` (`{role: model name}`, what an experiment's arm sets, see
docs/evaluate.md) is read by `run_models` when a node asks for its role's model.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, Protocol

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langgraph.config import get_config
from langgraph.constants import TAG_NOSTREAM

from core.settings import LLM_ROLES, STREAMING_ROLES, Settings
from providers.local_llm import (
    EmbeddedModelCrashedError,
    EmbeddedModelServer,
    LlamaCppChatOpenAI,
    embedded_model_name,
)
from providers.usage import PriceTable, UsageCallback

log = logging.getLogger(__name__)

#: `owned_by` of the models a llama.cpp server lists: llama-cpp-python's
#: `llama_cpp.server` says "me", llama.cpp's own `llama-server` says "llamacpp".
LLAMA_CPP_OWNERS = frozenset({"me", "llamacpp"})
_DETECT_TIMEOUT_S = 5.0


#: Distinct models per role a factory builds for runs' `configurable.models`, at most.
MAX_RUN_MODELS = 64


def run_models() -> Mapping[str, str]:
    """Return the models per role the current run's config names (`configurable.models`).

    Empty outside a run, or when the run names none.
    """
    try:
        config = get_config()
    except RuntimeError:  # not inside a runnable's execution
        return {}
    models = (config.get("configurable") or {}).get("models")
    return models if isinstance(models, Mapping) else {}


class ModelFactory(Protocol):
    """Return the chat model a role uses."""

    def __call__(self, role: str) -> BaseChatModel: ...


def role_tags(role: str) -> list[str]:
    """Return the run tags for a role: its name, plus `nostream` unless it writes for users."""
    tags = [f"role:{role}"]
    if role not in STREAMING_ROLES:
        tags.append(TAG_NOSTREAM)
    return tags


#: The tags of the roles whose tokens reach users (`STREAMING_ROLES`, see `role_tags`).
_STREAMING_TAGS = frozenset(role_tags(role)[0] for role in STREAMING_ROLES)


def streams_to_users(metadata: Mapping[str, Any]) -> bool:
    """Tell whether a `messages` chunk belongs on a user's token stream, from its metadata.

    Only the `STREAMING_ROLES` (the writer) write for users. `role_tags` marks every
    other role `nostream`, which LangGraph honours for tokens; this check also keeps
    off the stream whole messages LangGraph emits when a node returns one (a
    supervisor's tool call, say). The HTTP service filters every run's `messages`
    frames with it, so clients (the console included) get the writer's tokens only.
    """
    return not _STREAMING_TAGS.isdisjoint(metadata.get("tags") or ())


FailureReason = Literal["rate_limited", "server_error", "client_error", "timeout", "connection"]
#: The request header in which the OpenAI SDK numbers an attempt (0: the first).
RETRY_COUNT_HEADER = "x-stainless-retry-count"


class AttemptObserver(Protocol):
    """Told about every HTTP attempt of a role's model that is a retry or failed."""

    def llm_retry(self, role: str) -> None:
        """Count an attempt after the first of one call (the client retried)."""

    def llm_failure(self, role: str, reason: FailureReason) -> None:
        """Count an attempt that failed (an error status, a timeout, a lost connection)."""


def failure_reason(status_code: int) -> FailureReason | None:
    """Return how an answer with this status failed, or None when it did not."""
    if status_code == 429:
        return "rate_limited"
    if status_code >= 500:
        return "server_error"
    if status_code >= 400:
        return "client_error"
    return None


class _Attempts:
    """What both transports do around one attempt."""

    def __init__(self, role: str, observer: AttemptObserver) -> None:
        self.role = role
        self.observer = observer

    def started(self, request: httpx.Request) -> None:
        retry = request.headers.get(RETRY_COUNT_HEADER, "0")
        if retry.isdigit() and int(retry) > 0:
            self.observer.llm_retry(self.role)

    def answered(self, response: httpx.Response) -> None:
        reason = failure_reason(response.status_code)
        if reason is not None:
            self.observer.llm_failure(self.role, reason)

    def failed(self, error: httpx.TransportError) -> None:
        timeout = isinstance(error, httpx.TimeoutException)
        self.observer.llm_failure(self.role, "timeout" if timeout else "connection")


class CountingTransport(httpx.AsyncBaseTransport):
    """An async httpx transport that reports retries and failed attempts of one role."""

    def __init__(
        self, role: str, observer: AttemptObserver, inner: httpx.AsyncBaseTransport
    ) -> None:
        """Report for `role` to `observer`; send through `inner`."""
        self._attempts = _Attempts(role, observer)
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one attempt and report it."""
        self._attempts.started(request)
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            self._attempts.failed(exc)
            raise
        self._attempts.answered(response)
        return response

    async def aclose(self) -> None:
        """Close the inner transport's connections."""
        await self._inner.aclose()


class SyncCountingTransport(httpx.BaseTransport):
    """The synchronous twin of `CountingTransport` (for `invoke`)."""

    def __init__(self, role: str, observer: AttemptObserver, inner: httpx.BaseTransport) -> None:
        """Report for `role` to `observer`; send through `inner`."""
        self._attempts = _Attempts(role, observer)
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send one attempt and report it."""
        self._attempts.started(request)
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError as exc:
            self._attempts.failed(exc)
            raise
        self._attempts.answered(response)
        return response

    def close(self) -> None:
        """Close the inner transport's connections."""
        self._inner.close()


#: Connection pool of each role's client (the OpenAI SDK's own default).
_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)


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

    With an `observer`, each role's model gets HTTP clients of its own whose
    transport reports retries and failed attempts (`CountingTransport`); close them
    with `aclose()`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        base_url: str | None = None,
        embedded: bool = False,
        server: EmbeddedModelServer | None = None,
        llama_cpp: bool | None = None,
        observer: AttemptObserver | None = None,
    ) -> None:
        """Bind the factory to settings; `base_url` overrides `LLM_BASE_URL` (embedded model).

        Args:
            settings: The configuration.
            base_url: The endpoint (default `LLM_BASE_URL`); required with `embedded`.
            embedded: Talk to the embedded model at `base_url`.
            server: The embedded model's server, whose crashes the models report as
                such and whose health `health()` reports.
            llama_cpp: Talk to `LLM_BASE_URL` in llama.cpp's dialect (None: the setting).
            observer: Told about every retried and failed HTTP attempt, by role.
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
        self._observer = observer
        # Every call's usage and cost, to the ledger of the node making it.
        self._usage = UsageCallback(PriceTable.from_settings(settings))
        self._cache: dict[str, BaseChatModel] = {}
        self._clients: list[httpx.Client | httpx.AsyncClient] = []

    def health(self) -> str | None:
        """Return None while the models can be called, else one line saying why not.

        Only the embedded model is watched; an external endpoint is never probed here.
        """
        return self._server.health() if self._server is not None else None

    def model_name(self, role: str) -> str:
        """Return the name of the model `role` uses (what /info shows)."""
        return self._embedded_name or self._settings.model_for(role)

    def __call__(self, role: str) -> BaseChatModel:
        """Return the chat model for `role` with timeout, bounded retries and stream tags.

        Inside a run whose config names a model for the role (`run_models`), that
        model on the same endpoint; the embedded model serves one model only.

        Raises:
            ValueError: An unknown role, or more distinct run models than `MAX_RUN_MODELS`.
        """
        if role not in LLM_ROLES:
            raise ValueError(f"unknown LLM role {role!r}")
        name = run_models().get(role) if self._embedded_name is None else None
        key = role if not isinstance(name, str) else f"{role}@{name}"
        model = self._cache.get(key)
        if model is None:
            if key != role and sum(1 for k in self._cache if k != k.split("@")[0]) >= (
                MAX_RUN_MODELS
            ):
                raise ValueError(f"runs asked for more than {MAX_RUN_MODELS} other models")
            model = self._build(role, name if isinstance(name, str) else None)
            self._cache[key] = model
        return model

    def prepare(self) -> None:
        """Build every role's model now (blocking), so no run builds one on its event loop.

        Building a `ChatOpenAI` creates its HTTP clients, which reads package
        metadata and certificate files: servers call this at start-up, from a
        worker thread (`agentkit.services.build_context` does).
        """
        for role in LLM_ROLES:
            self(role)

    def _build(self, role: str, name: str | None = None) -> BaseChatModel:
        s = self._settings
        # Local OpenAI-compatible servers ignore the key, but the client insists on one.
        api_key = s.llm_api_key.get_secret_value() if s.llm_api_key else "not-needed"
        embedded = self._embedded_name is not None
        chat_class = LlamaCppChatOpenAI if self.llama_cpp else ChatOpenAI
        max_tokens = s.local_max_tokens_for(role) if embedded else s.llm_max_tokens
        temperature = s.local_model_temperature if embedded else s.llm_temperature
        model = chat_class(
            model=name or self.model_name(role),
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
            callbacks=[self._usage],
            **self._http_clients(role),
        )
        if isinstance(model, LlamaCppChatOpenAI) and self._server is not None:
            model.watch_server(self._server)
        return model

    def _http_clients(self, role: str) -> dict[str, Any]:
        """Return HTTP clients of `role`'s model's own, closed with the factory.

        Never langchain-openai's process-wide default clients: those are cached by base
        URL and bound to the event loop that first used them, so a second loop (a test,
        a restarted server) reaching the same URL fails with "Event loop is closed".
        With an observer, the transports count retries and failed attempts.
        """
        sync_transport: httpx.BaseTransport = httpx.HTTPTransport(limits=_LIMITS)
        async_transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(limits=_LIMITS)
        if self._observer is not None:
            sync_transport = SyncCountingTransport(role, self._observer, sync_transport)
            async_transport = CountingTransport(role, self._observer, async_transport)
        timeout = httpx.Timeout(self._settings.llm_timeout)
        sync_client = httpx.Client(transport=sync_transport, timeout=timeout, follow_redirects=True)
        async_client = httpx.AsyncClient(
            transport=async_transport, timeout=timeout, follow_redirects=True
        )
        self._clients += [sync_client, async_client]
        return {"http_client": sync_client, "http_async_client": async_client}

    async def aclose(self) -> None:
        """Close the HTTP clients built for the roles' models."""
        clients, self._clients = self._clients, []
        for client in clients:
            if isinstance(client, httpx.AsyncClient):
                await client.aclose()
            else:
                client.close()


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
async def open_model_factory(
    settings: Settings, *, observer: AttemptObserver | None = None
) -> AsyncIterator[OpenAIModelFactory]:
    """Yield the model factory for `settings`, serving the embedded model if needed.

    With `LLM_BASE_URL` set, every role talks to that endpoint, in llama.cpp's
    dialect when `LLM_LLAMA_CPP_DIALECT` says so or, on "auto", when the endpoint is
    a llama.cpp server (`detect_llama_cpp`). Without it, the embedded llama.cpp
    server runs for the block's duration and every role talks to it; it has
    answered one completion before the block starts (see
    `providers.local_llm.EmbeddedModelServer.start`). `observer` is told about
    every retried and failed HTTP attempt, by role.
    """
    if settings.llm_base_url:
        mode = settings.llm_llama_cpp_dialect
        llama_cpp = mode == "on"
        if mode == "auto":
            key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
            llama_cpp = await detect_llama_cpp(settings.llm_base_url, key)
            if llama_cpp:
                log.info("LLM_BASE_URL is a llama.cpp server: using its dialect")
        factory = OpenAIModelFactory(settings, llama_cpp=llama_cpp, observer=observer)
        try:
            yield factory
        finally:
            await factory.aclose()
        return
    server = EmbeddedModelServer(settings)
    base_url = await server.start()
    try:
        factory = OpenAIModelFactory(
            settings, base_url=base_url, embedded=True, server=server, observer=observer
        )
        try:
            yield factory
        finally:
            await factory.aclose()
    finally:
        await server.stop()
