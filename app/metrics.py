"""Prometheus metrics of one app: runs, nodes, LLM calls, SSE subscribers, retries.

Each app owns an `AtelierMetrics` with its own `CollectorRegistry` (kept as
`app.state.metrics`; routes reach it with `MetricsDep`), so two apps in one process,
as in tests, never share counters. `GET /metrics` (app/routes/ops.py) serves it in
the Prometheus text format.

What the engine calls (every method is cheap and never raises on a
well-formed call):

    metrics.run_started()                      a run was accepted (active runs +1)
    metrics.run_finished(status, seconds)      it ended: success, error, timeout or
                                               interrupted (active runs -1); seconds
                                               from start to end
    metrics.node_finished(node, seconds)       a graph node ran (only for nodes the
                                               callback handler cannot see)
    metrics.retry(kind, role)                  a retry happened: "critic", "replan", "llm"
    metrics.observe_event(event)               every `custom`-mode pipeline event: a
                                               critic.verdict sending the run back to
                                               rag / planner counts as a critic retry /
                                               replan
    metrics.feedback_recorded(key, score)      a feedback entry was stored (its count and
                                               mean score by key: atelier_feedback_score)
    metrics.sse_subscribed() / sse_unsubscribed()
    with metrics.sse_subscription(): ...       the same as a context manager
    config["callbacks"] = [metrics.callback]   per run: LLM calls, tokens and
                                               durations by role, LLM retries that
                                               LangChain sees, and node durations
    metrics.llm_retry(role)                    the OpenAI client retried an HTTP attempt
    metrics.llm_failure(role, reason)          an HTTP attempt failed (both called by
                                               `providers.llm.CountingTransport`; the
                                               app hands the metrics to the model factory)

`metrics.callback` is one `MetricsCallbackHandler` shared by every run (it keys what
it tracks by LangChain run id). It learns a call's role from `metadata["role"]` or
a `role:<name>` tag, both set by `providers.llm.OpenAIModelFactory`; a model built
elsewhere counts as role "unknown". Token counts come from the message's
`usage_metadata` (the factory asks for `stream_usage`), else from the provider's
`token_usage`; a call whose answer carries neither counts in
`atelier_llm_calls_without_usage_total{role}` (its tokens are unknown, not zero —
the embedded llama.cpp server may send none). The same calls, per run and by role,
are in each result's `usage` (`providers.usage`). Reported tokens are also counted by
model in `atelier_llm_model_tokens_total{model,role,direction}`, and, for a model that
`LLM_PRICES` prices, their cost in `atelier_llm_cost_total{model,role,currency}` (a
call of an unpriced model, or with unknown tokens, adds no cost: unknown is not
zero). LLM retries are counted where they happen, in
`atelier_retries_total{kind="llm",role=...}`: a model call tagged `retry:attempt:N`
by `with_retry` (not one merely inside a retried chain), the `on_retry` callback of
legacy LLM wrappers, and every retry the OpenAI client makes underneath
(`LLM_MAX_RETRIES`: 429s, 5xx, timeouts, lost connections), which its HTTP transport
reports. Each failed HTTP attempt counts in `atelier_llm_failures_total{role,reason}`
(reason: rate_limited, server_error, client_error, timeout, connection); a call that
fails for good also counts as `atelier_llm_calls_total{outcome="error"}`. Critic
retries and replans carry role `critic`, whose verdict sends the run back.

Node durations are measured by the same handler from LangGraph's own callbacks: a
chain whose run name equals its `langgraph_node` metadata is a node's task, so
every node of the pipeline and of the team subgraph is timed (label `node`). Do
not also call `node_finished` for those, or they count twice.

Label values are bounded: statuses, retry kinds and roles come from fixed sets
(anything else becomes "other"); node names come from the compiled graphs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, FastAPI, Request
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from core.settings import LLM_ROLES
from engine import ATTEMPT_OUTCOMES, DELIVERY_OUTCOMES, RUN_STATUSES, OutboxTotals
from providers.usage import UNKNOWN_ROLE, PriceTable, call_model, call_role, response_tokens

RETRY_KINDS: tuple[str, ...] = ("critic", "replan", "llm")
FAILURE_REASONS: tuple[str, ...] = (
    "rate_limited",
    "server_error",
    "client_error",
    "timeout",
    "connection",
)
OTHER = "other"
MAX_NODE_LABEL_CHARS = 64
MAX_FEEDBACK_KEYS = 32  # feedback keys are the clients' choice: the label set stays bounded
MAX_MODEL_LABEL_CHARS = 200  # what LLM_MODEL(S) allow; model names come from the settings
MAX_TRACKED_CALLS = 10_000  # in-flight calls/nodes remembered; a call that never ends is dropped

_RETRY_TAG = "retry:attempt:"  # what `Runnable.with_retry` tags attempts after the first with

_RUN_BUCKETS = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
_NODE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)


class AtelierMetrics:
    """The service's Prometheus metrics, in a registry of their own."""

    def __init__(
        self, registry: CollectorRegistry | None = None, prices: PriceTable | None = None
    ) -> None:
        """Create every metric in `registry` (a new one by default); price calls with `prices`."""
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.prices = prices or PriceTable()
        r = self.registry
        self.runs_started = Counter("atelier_runs_started", "Runs accepted.", registry=r)
        self.runs = Counter(
            "atelier_runs", "Runs finished, by final status.", ["status"], registry=r
        )
        self.active_runs = Gauge("atelier_active_runs", "Runs pending or running.", registry=r)
        self.run_duration = Histogram(
            "atelier_run_duration_seconds",
            "Wall time of a run from start to end, by final status.",
            ["status"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.node_duration = Histogram(
            "atelier_node_duration_seconds",
            "Wall time of one graph node's task, by node.",
            ["node"],
            buckets=_NODE_BUCKETS,
            registry=r,
        )
        self.llm_calls = Counter(
            "atelier_llm_calls",
            "LLM calls by role and outcome (ok, error).",
            ["role", "outcome"],
            registry=r,
        )
        self.llm_tokens = Counter(
            "atelier_llm_tokens",
            "LLM tokens by role and direction (input, output).",
            ["role", "direction"],
            registry=r,
        )
        self.llm_model_tokens = Counter(
            "atelier_llm_model_tokens",
            "LLM tokens by model, role and direction (input, output).",
            ["model", "role", "direction"],
            registry=r,
        )
        self.llm_cost = Counter(
            "atelier_llm_cost",
            "Cost of LLM calls by model, role and currency (LLM_PRICES): only calls whose "
            "tokens were reported and whose model has a price; the others are not counted.",
            ["model", "role", "currency"],
            registry=r,
        )
        self.feedback = Summary(
            "atelier_feedback_score",
            "Feedback on runs by key (POST /runs/{run_id}/feedback): _count entries and _sum "
            "of their scores, so _sum / _count is the mean score. The first "
            f"{MAX_FEEDBACK_KEYS} keys this process sees are labelled; later ones count as "
            '"other".',
            ["key"],
            registry=r,
        )
        self._feedback_keys: set[str] = set()
        self.llm_unmetered = Counter(
            "atelier_llm_calls_without_usage",
            "Finished LLM calls whose answer reported no token usage, by role: their tokens "
            "are missing from atelier_llm_tokens_total (never estimated).",
            ["role"],
            registry=r,
        )
        self.llm_duration = Histogram(
            "atelier_llm_call_duration_seconds",
            "Wall time of one LLM call, by role.",
            ["role"],
            buckets=_LLM_BUCKETS,
            registry=r,
        )
        self.sse_subscribers = Gauge(
            "atelier_sse_subscribers", "Open SSE streams of run events.", registry=r
        )
        self.retries = Counter(
            "atelier_retries",
            "Retries by kind (critic: back to rag, replan: back to planner, llm: a model "
            "call or HTTP attempt again) and role.",
            ["kind", "role"],
            registry=r,
        )
        self.llm_failures = Counter(
            "atelier_llm_failures",
            "Failed HTTP attempts of LLM calls (retried or not), by role and reason.",
            ["role", "reason"],
            registry=r,
        )
        # The scale-out deployment's queue (DATABASE_URL); zero in the embedded mode.
        self.queue_depth = Gauge(
            "atelier_queue_depth", "Runs pending in the shared queue (read at scrape).", registry=r
        )
        self.claim_latency = Histogram(
            "atelier_claim_duration_seconds",
            "Wall time of a worker's successful claim of a pending run.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.lease_losses = Counter(
            "atelier_lease_losses",
            "Runs a worker of this process stopped because another worker holds them now.",
            registry=r,
        )
        self.resumes = Counter(
            "atelier_runs_resumed",
            "Runs a worker of this process claimed again after an earlier attempt stopped.",
            registry=r,
        )
        self.redis_fallbacks = Counter(
            "atelier_redis_fallbacks",
            "Times this process's SSE followers re-read PostgreSQL because Redis dropped, "
            "lagged or is not configured.",
            registry=r,
        )
        self.webhook_attempts = Counter(
            "atelier_webhook_attempts",
            "Webhook delivery attempts of this process, by outcome (success, http_error, "
            "network_error, refused).",
            ["outcome"],
            registry=r,
        )
        self.webhook_attempt_duration = Histogram(
            "atelier_webhook_attempt_duration_seconds",
            "Wall time of one webhook delivery attempt.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.webhook_deliveries = Counter(
            "atelier_webhook_deliveries",
            "Webhook deliveries this process finished, by outcome (success; failed: out of "
            "attempts or time, or refused by rule).",
            ["outcome"],
            registry=r,
        )
        # The whole deployment's outbox, read from the database at each scrape
        # (`read_outbox`): in scale-out the workers send the deliveries, and these
        # show them on every API replica's /metrics.
        self.webhook_outbox_deliveries = Gauge(
            "atelier_webhook_outbox_deliveries",
            "Webhook deliveries in the outbox, every process's, by status (pending, success, "
            "failed, cancelled; read from the database at scrape).",
            ["status"],
            registry=r,
        )
        self.webhook_outbox_attempts = Gauge(
            "atelier_webhook_outbox_attempts",
            "Webhook delivery attempts recorded in the outbox, every process's, by outcome "
            "(read from the database at scrape).",
            ["outcome"],
            registry=r,
        )
        # Every label value shows from the start, so a dashboard sees zeros, not gaps.
        for status in RUN_STATUSES:
            self.runs.labels(status=status)
        self.retries.labels(kind="critic", role="critic")
        self.retries.labels(kind="replan", role="critic")
        for role in LLM_ROLES:
            self.retries.labels(kind="llm", role=role)
            for reason in FAILURE_REASONS:
                self.llm_failures.labels(role=role, reason=reason)
        for outcome in ATTEMPT_OUTCOMES:
            self.webhook_attempts.labels(outcome=outcome)
        for finished in DELIVERY_OUTCOMES:
            self.webhook_deliveries.labels(outcome=finished)
        self.read_outbox(OutboxTotals.of((), ()))
        self.callback = MetricsCallbackHandler(self)

    # --- runs -----------------------------------------------------------------

    def run_started(self) -> None:
        """Count a run accepted by the engine; it is active until `run_finished`."""
        self.runs_started.inc()
        self.active_runs.inc()

    def run_finished(self, status: str, seconds: float) -> None:
        """Count a run that ended with `status`, after `seconds` of wall time."""
        label = status if status in RUN_STATUSES else OTHER
        self.runs.labels(status=label).inc()
        self.active_runs.dec()
        self.run_duration.labels(status=label).observe(max(0.0, seconds))

    def run_left(self) -> None:
        """A run this process stopped executing without an outcome (left for recovery)."""
        self.active_runs.dec()

    def webhook_attempted(self, outcome: str, seconds: float) -> None:
        """Count a webhook delivery attempt and its wall time."""
        self.webhook_attempts.labels(outcome=outcome).inc()
        self.webhook_attempt_duration.observe(max(0.0, seconds))

    def webhook_finished(self, outcome: str) -> None:
        """Count a webhook delivery that succeeded or failed for good."""
        self.webhook_deliveries.labels(outcome=outcome).inc()

    def read_outbox(self, totals: OutboxTotals) -> None:
        """Set the outbox gauges to what the database holds now."""
        for status, count in totals.deliveries.items():
            self.webhook_outbox_deliveries.labels(status=status).set(count)
        for outcome, count in totals.attempts.items():
            self.webhook_outbox_attempts.labels(outcome=outcome).set(count)

    def run_claimed(self, seconds: float) -> None:
        """Record how long a worker's successful claim took."""
        self.claim_latency.observe(max(0.0, seconds))

    def run_resumed(self) -> None:
        """Count a run claimed again after an earlier attempt stopped."""
        self.resumes.inc()

    def lease_lost(self) -> None:
        """Count a run stopped here because another worker holds its lease now."""
        self.lease_losses.inc()

    def redis_fallback(self) -> None:
        """Count followers sent back to PostgreSQL (Redis dropped, lagged or is absent)."""
        self.redis_fallbacks.inc()

    def node_finished(self, node: str, seconds: float) -> None:
        """Record the wall time of one node's task."""
        self.node_duration.labels(node=_node_label(node)).observe(max(0.0, seconds))

    def retry(self, kind: str, role: str = UNKNOWN_ROLE) -> None:
        """Count a retry of a kind in `RETRY_KINDS` ("critic", "replan", "llm") by a role."""
        self.retries.labels(
            kind=kind if kind in RETRY_KINDS else OTHER, role=_role_label(role)
        ).inc()

    def llm_retry(self, role: str) -> None:
        """Count an HTTP attempt the OpenAI client made again for `role`'s model."""
        self.retry("llm", role)

    def llm_failure(self, role: str, reason: str) -> None:
        """Count a failed HTTP attempt of `role`'s model (`FAILURE_REASONS`)."""
        self.llm_failures.labels(
            role=_role_label(role), reason=reason if reason in FAILURE_REASONS else OTHER
        ).inc()

    def observe_event(self, event: Mapping[str, Any]) -> None:
        """Learn from a pipeline event (custom stream mode): critic retries and replans."""
        if event.get("type") != "critic.verdict":
            return
        next_step = event.get("next")
        if next_step == "rag":
            self.retry("critic", "critic")
        elif next_step == "planner":
            self.retry("replan", "critic")

    # --- SSE ------------------------------------------------------------------

    def feedback_recorded(self, key: str, score: float) -> None:
        """Count one feedback entry and its score under its key (bounded: see the metric)."""
        if key not in self._feedback_keys and len(self._feedback_keys) < MAX_FEEDBACK_KEYS:
            self._feedback_keys.add(key)
        label = key if key in self._feedback_keys else OTHER
        self.feedback.labels(key=label).observe(score)

    def sse_subscribed(self) -> None:
        """Count an SSE stream that started sending a run's events."""
        self.sse_subscribers.inc()

    def sse_unsubscribed(self) -> None:
        """Count an SSE stream that ended (finished, disconnected or cancelled)."""
        self.sse_subscribers.dec()

    @contextmanager
    def sse_subscription(self) -> Iterator[None]:
        """Count an SSE subscriber for the duration of the block."""
        self.sse_subscribed()
        try:
            yield
        finally:
            self.sse_unsubscribed()

    # --- exposition -------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """Return the metrics in the Prometheus text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsCallbackHandler(BaseCallbackHandler):
    """Count LLM calls, tokens and retries by role, and time graph nodes, from callbacks.

    A synchronous handler run inline: it only updates counters, so it never blocks the
    event loop, and it works the same under `invoke` and `ainvoke`.
    """

    run_inline = True
    raise_error = False

    def __init__(self, metrics: AtelierMetrics) -> None:
        """Report into `metrics`."""
        self._metrics = metrics
        self._llm_runs: dict[UUID, tuple[str, float]] = {}  # run id → (role, start)
        self._llm_models: dict[UUID, tuple[str, float]] = {}  # run id → (model, start)
        self._node_runs: dict[UUID, tuple[str, float]] = {}  # run id → (node, start)
        self._retried_chains: dict[UUID, tuple[str, float]] = {}  # chains in a retry attempt

    # --- LLM calls --------------------------------------------------------------

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
        """Remember the role, model and start time of a chat model call."""
        role = role_of(metadata, tags)
        _remember(self._llm_runs, run_id, role)
        _remember(self._llm_models, run_id, _model_label(metadata, kwargs))
        self._count_llm_retry(role, tags, kwargs.get("parent_run_id"))

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
        """Remember the role, model and start time of a completion model call."""
        role = role_of(metadata, tags)
        _remember(self._llm_runs, run_id, role)
        _remember(self._llm_models, run_id, _model_label(metadata, kwargs))
        self._count_llm_retry(role, tags, kwargs.get("parent_run_id"))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Count a finished call, its tokens, their cost and its duration."""
        role, started = self._llm_runs.pop(run_id, (UNKNOWN_ROLE, None))
        model = self._llm_models.pop(run_id, (OTHER, 0.0))[0]
        m = self._metrics
        m.llm_calls.labels(role=role, outcome="ok").inc()
        if started is not None:
            m.llm_duration.labels(role=role).observe(time.perf_counter() - started)
        tokens = response_tokens(response)
        if tokens is None:
            m.llm_unmetered.labels(role=role).inc()
        input_tokens, output_tokens = tokens or (0, 0)
        if input_tokens:
            m.llm_tokens.labels(role=role, direction="input").inc(input_tokens)
        if output_tokens:
            m.llm_tokens.labels(role=role, direction="output").inc(output_tokens)
        self._count_model_usage(model, role, tokens)

    def _count_model_usage(self, model: str, role: str, tokens: tuple[int, int] | None) -> None:
        """Count a finished call's tokens by model, and their cost when it is known."""
        if tokens is None:
            return
        m = self._metrics
        for direction, count in zip(("input", "output"), tokens, strict=True):
            if count:
                m.llm_model_tokens.labels(model=model, role=role, direction=direction).inc(count)
        cost = m.prices.cost(model, tokens)
        if cost is not None:
            m.llm_cost.labels(model=model, role=role, currency=m.prices.currency).inc(sum(cost))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Count a failed (or cancelled) call."""
        role, started = self._llm_runs.pop(run_id, (UNKNOWN_ROLE, None))
        self._llm_models.pop(run_id, None)
        self._metrics.llm_calls.labels(role=role, outcome="error").inc()
        if started is not None:
            self._metrics.llm_duration.labels(role=role).observe(time.perf_counter() - started)

    def on_retry(self, retry_state: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Count a retry reported by a legacy LLM wrapper's retry decorator."""
        role = self._llm_runs.get(run_id, (UNKNOWN_ROLE, 0.0))[0]
        self._metrics.retry("llm", role)

    def _count_llm_retry(
        self, role: str, tags: Sequence[str] | None, parent_run_id: UUID | None
    ) -> None:
        """Count a model call that is a `with_retry` attempt after the first."""
        if parent_run_id in self._retried_chains:
            return  # the whole chain around the call is being retried, not the call
        if any(tag.startswith(_RETRY_TAG) for tag in tags or ()):
            self._metrics.retry("llm", role)

    # --- graph nodes --------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Start timing a chain that is a LangGraph node's task."""
        tags = kwargs.get("tags") or ()
        parent = kwargs.get("parent_run_id")
        if parent in self._retried_chains or any(t.startswith(_RETRY_TAG) for t in tags):
            _remember(self._retried_chains, run_id, "")
        node = (metadata or {}).get("langgraph_node")
        if isinstance(node, str) and kwargs.get("name") == node and not node.startswith("__"):
            _remember(self._node_runs, run_id, node)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a node's duration when its task ends."""
        self._end_node(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a node's duration when its task fails, is interrupted or cancelled."""
        self._end_node(run_id)

    def _end_node(self, run_id: UUID) -> None:
        self._retried_chains.pop(run_id, None)
        entry = self._node_runs.pop(run_id, None)
        if entry is not None:
            node, started = entry
            self._metrics.node_finished(node, time.perf_counter() - started)


def _remember(table: dict[UUID, tuple[str, float]], run_id: UUID, label: str) -> None:
    """Record a start time, forgetting the oldest entry when too many never ended."""
    if len(table) >= MAX_TRACKED_CALLS:
        table.pop(next(iter(table)))
    table[run_id] = (label, time.perf_counter())


def role_of(metadata: Mapping[str, Any] | None, tags: Sequence[str] | None) -> str:
    """Return the metric label of a call's LLM role (`providers.usage.call_role`), bounded."""
    return _role_label(call_role(metadata, tags))


def _role_label(role: str) -> str:
    return role if role in LLM_ROLES or role == UNKNOWN_ROLE else OTHER


def _model_label(metadata: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    """Return the metric label of a call's model: configured names, bounded in length."""
    model = call_model(metadata, kwargs.get("invocation_params"))
    return model[:MAX_MODEL_LABEL_CHARS] if model else OTHER


def _node_label(node: str) -> str:
    return node[:MAX_NODE_LABEL_CHARS] if node else OTHER


def install_metrics(app: FastAPI) -> AtelierMetrics:
    """Give `app` its metrics (as `app.state.metrics`) and return them.

    Costs are priced with the app's settings (`app.state.settings`), when it has them.
    """
    settings = getattr(app.state, "settings", None)
    prices = PriceTable.from_settings(settings) if settings is not None else None
    metrics = AtelierMetrics(prices=prices)
    app.state.metrics = metrics
    return metrics


def get_metrics(request: Request) -> AtelierMetrics:
    """Return the app's metrics."""
    metrics: AtelierMetrics = request.app.state.metrics
    return metrics


MetricsDep = Annotated[AtelierMetrics, Depends(get_metrics)]
