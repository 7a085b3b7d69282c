"""Webhooks: a run's end reported to a URL, at least once, from a durable outbox.

A run created with `webhook` (an http(s) URL, checked against the deployment's
rules at creation: `check_webhook`) has a delivery queued when it ends — success,
error, timeout or interrupted, a cancelled run included — by `enqueue_delivery`,
a `WebhookQueued` record change that the event log writes in the same transaction
as the run's terminal status. Its id is derived from the run and the URL, so a
run's end is queued once whatever happens around it.

The rules of a URL (`core.outbound.OutboundRules`, docs/webhooks-security.md) are
checked with the parser that sends it, so a URL accepted at creation is one the
deliverer can send; the same check runs again before each attempt.

A `Deliverer` (a task of `atelier serve` in the embedded deployment; one per
process that runs workers in scale-out) claims due deliveries from its
`DeliveryStore` under a lease — PostgreSQL with `FOR UPDATE SKIP LOCKED` — so a
delivery is never sent by two at once, POSTs the stored body (`send`) and records
the attempt: its status code, latency, outcome and error, and at most
`EXCERPT_CHARS` of a failing receiver's answer. A 2xx answer delivers. Any other
outcome is retried with exponential backoff and jitter (`retry_delay`) until
WEBHOOK_MAX_ATTEMPTS attempts or `GIVE_UP_AFTER` seconds since the run ended;
a URL refused by rule (a private address at connect time, a rule broken since
creation, a URL an older version let through) or a `410 Gone` fails the delivery
at once. Whatever goes wrong while sending is an attempt with its reason: nothing
escapes the deliverer, so every delivery ends. A stopped process's claims
run out with their lease (embedded: its restart clears them), so another deliverer,
or the same after a restart, resumes them.

Every attempt stays in the outbox; `DeliveryStore.totals` counts them, and the
deliveries by status, for `/metrics` at scrape time (`OutboxTotals`): the whole
deployment's, whichever process sent them.

Each attempt is signed with the secrets of the API key that owns the run
(`engine.webhook_signing`): `X-Atelier-Signature: sha256=<hex HMAC-SHA256 of
"<X-Atelier-Delivery>.<X-Atelier-Timestamp>.<body>">`, the timestamp being the
attempt's Unix seconds; `X-Atelier-Delivery` is the same on every attempt. A key
without a secret of its own is signed with WEBHOOK_SECRET; without that either, its
deliveries go unsigned (a warning says so at start-up). A secret that cannot be read
now is a failed attempt, retried: a delivery is never signed with another secret.

Delivered and failed deliveries, with their attempts, are pruned once older than
WEBHOOK_RETENTION_HOURS (`DeliveryStore.prune`, called by the retention sweep,
`engine.retention`); a pending one never is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, Self, runtime_checkable

import httpx

from core.outbound import AddressRefused, OutboundRules, guarded_client
from engine.outbound import check_outbound_url
from engine.records import RecordChange, RunRecord, WebhookQueued, now
from engine.serde import dumps
from engine.webhook_signing import DeliveryCheck, WebhookSecrets, secrets_of, signature_header

log = logging.getLogger(__name__)

#: Characters of a failing receiver's answer kept with its attempt.
EXCERPT_CHARS = 200
#: Bytes of a receiver's answer read at most (the rest is never read).
MAX_RESPONSE_BYTES = 64 * 1024
#: Seconds after a run's end past which a delivery is not tried again.
GIVE_UP_AFTER = 24 * 3600.0
#: Longest wait between two attempts.
MAX_BACKOFF = 6 * 3600.0
#: How one attempt went.
AttemptOutcome = Literal["success", "http_error", "network_error", "refused"]
#: Where a delivery stands (`cancelled`: its API key was revoked while it was pending).
DeliveryStatus = Literal["pending", "success", "failed", "cancelled"]

ATTEMPT_OUTCOMES: tuple[AttemptOutcome, ...] = (
    "success",
    "http_error",
    "network_error",
    "refused",
)
DELIVERY_OUTCOMES: tuple[DeliveryStatus, ...] = ("success", "failed")
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = ("pending", "success", "failed", "cancelled")


@dataclass(frozen=True)
class WebhookConfig:
    """The deployment's webhook settings (`from_settings`); the defaults are the safe ones."""

    secret: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    max_attempts: int = 10
    #: Seconds before the second attempt; each next wait doubles (with jitter).
    backoff: float = 30.0
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    #: Seconds between two looks for due deliveries.
    poll_interval: float = 1.0
    #: Seconds a claim keeps a delivery from other deliverers (longer than an attempt).
    lease_seconds: float = 60.0
    #: Deliveries sent at once by one deliverer.
    concurrency: int = 8
    #: Each API key's own signing secrets (`engine.webhook_signing`); None: every
    #: delivery is signed with `secret`.
    secrets: WebhookSecrets | None = None
    #: Whether an owner's deliveries may still go out (a revoked or expired key's may
    #: not, `KeysService.delivers_for`); None: every owner's may.
    recipients: DeliveryCheck | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> WebhookConfig:
        """Return the config of `core.settings.Settings`."""
        secret = settings.webhook_secret
        return cls(
            secret=secret.get_secret_value() if secret is not None else None,
            allowed_hosts=tuple(settings.webhook_allowed_hosts),
            allow_private=settings.webhook_allow_private,
            max_attempts=settings.webhook_max_attempts,
            backoff=settings.webhook_backoff_seconds,
            connect_timeout=settings.webhook_connect_timeout,
            read_timeout=settings.webhook_read_timeout,
        )

    @property
    def rules(self) -> OutboundRules:
        """Return the rules a webhook URL must pass."""
        return OutboundRules(allow_private=self.allow_private, allowed_hosts=self.allowed_hosts)

    def refusal(self, url: str) -> str | None:
        """Return the rule `url` breaks as far as it can be told now (None: accepted)."""
        return self.rules.refusal(url)


def check_webhook(url: Any, config: WebhookConfig, *, field_name: str = "webhook") -> str | None:
    """Return a run's (or a cron's) webhook URL once it passes the rules; None when unset.

    Raises:
        InvalidFields: The URL breaks a rule (a 422 naming `field_name` and the rule).
    """
    return check_outbound_url(url, config.rules, field_name=field_name)


def delivery_id(run_id: str, url: str) -> str:
    """Return the id of a run's delivery to a URL: the same however often it is queued."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"atelier-webhook:{run_id}:{url}"))


def delivery_body(
    run: RunRecord,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> str:
    """Return the JSON a run's webhook receives (docs/webhooks.md).

    Args:
        run: The run.
        status: Its final status.
        result: The thread's values after the run (the post), unless it failed.
        error: `{"error", "message"}` of a failed run.
    """
    return dumps(
        {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "assistant_id": run.assistant_id,
            "status": status,
            "metadata": run.metadata,
            "result": None if error is not None else result,
            "error": error,
            "created_at": run.created_at,
            "ended_at": now(),
        }
    )


class ChangeLog(Protocol):
    """Where a run's record changes are queued (an `engine.protocols.EventLog`)."""

    def record(self, change: RecordChange, *, run_id: str | None = None) -> None: ...


def queued_delivery(
    run: RunRecord,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    url: str | None = None,
) -> WebhookQueued | None:
    """Return the outbox change reporting a run's end to `url` (default: its `webhook`).

    None when there is no URL.
    """
    url = url or run.options.webhook
    if not url:
        return None
    return WebhookQueued(
        delivery_id=delivery_id(run.run_id, url),
        run_id=run.run_id,
        thread_id=run.thread_id,
        owner=run.owner,
        url=url,
        body=delivery_body(run, status=status, result=result, error=error),
    )


def enqueue_delivery(
    events: ChangeLog,
    run: RunRecord,
    *,
    status: str,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    url: str | None = None,
) -> str | None:
    """Queue the delivery of a run's end with the run's terminal status; return its id.

    Call it right after recording the run's terminal `RunStatusChange` and before the
    flush, so both commit in one transaction. `url` defaults to the run's `webhook`;
    None when there is none.
    """
    queued = queued_delivery(run, status=status, result=result, error=error, url=url)
    if queued is None:
        return None
    events.record(queued, run_id=run.run_id)
    return queued.delivery_id


# -- the outbox ----------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """A claimed delivery: what to send, and how many attempts it had."""

    delivery_id: str
    run_id: str
    url: str
    body: str
    attempts: int
    #: Unix seconds the delivery was queued (the run's end).
    queued_at: float
    #: The API key (owner id) whose secret signs it.
    owner: str = ""


@dataclass(frozen=True)
class Attempt:
    """One attempt of a delivery, as recorded."""

    number: int
    started_at: str
    outcome: AttemptOutcome
    latency_ms: float
    status_code: int | None = None
    error: str | None = None
    #: The start of a failing receiver's answer (at most `EXCERPT_CHARS`).
    excerpt: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the attempt as the API shows it."""
        return {
            "attempt": self.number,
            "started_at": self.started_at,
            "outcome": self.outcome,
            "status_code": self.status_code,
            "latency_ms": round(self.latency_ms, 1),
            "error": self.error,
            "response_excerpt": self.excerpt,
        }


class DeliveryStore(Protocol):
    """The outbox of one backend (`engine.sqlite.webhooks`, `engine.postgres.webhooks`)."""

    async def claim(self, worker: str, limit: int, lease_seconds: float) -> list[Delivery]:
        """Lease up to `limit` due pending deliveries to `worker`, oldest due first."""
        ...

    async def record(
        self, delivery: Delivery, attempt: Attempt, *, worker: str, retry_in: float | None
    ) -> bool:
        """Record an attempt and the delivery's new state; release the lease.

        The delivery succeeds when the attempt did, is due again in `retry_in`
        seconds, or (None) fails. Returns False when `worker` no longer held it.
        """
        ...

    async def release(self, worker: str) -> None:
        """Release every lease `worker` holds (it stops)."""
        ...

    async def for_run(self, run_id: str) -> list[dict[str, Any]]:
        """Return a run's deliveries, each with its attempts (the API's shape)."""
        ...

    async def totals(self) -> OutboxTotals:
        """Return how many deliveries the outbox holds by status, and attempts by outcome."""
        ...

    async def prune(self, before: datetime) -> int:
        """Delete the deliveries that ended (success, failed) before `before`, with their
        attempts; return how many. Pending deliveries are never pruned."""
        ...


@dataclass(frozen=True)
class OutboxTotals:
    """What the whole outbox holds: every process's deliveries and attempts.

    `/metrics` reports these, read from the database at scrape time, so an API
    replica shows the deliveries the workers sent (a process's own counters only
    show what it sent). Every status and outcome is a key, zero when none.
    """

    #: Deliveries by status: pending, success, failed, cancelled.
    deliveries: dict[str, int]
    #: Attempts recorded, by outcome: success, http_error, network_error, refused.
    attempts: dict[str, int]

    @classmethod
    def of(cls, deliveries: Iterable[tuple[str, int]], attempts: Iterable[tuple[str, int]]) -> Self:
        """Return the totals of (status, count) and (outcome, count) rows."""
        by_status: dict[str, int] = dict.fromkeys(DELIVERY_STATUSES, 0)
        by_status.update((str(status), int(count)) for status, count in deliveries)
        by_outcome: dict[str, int] = dict.fromkeys(ATTEMPT_OUTCOMES, 0)
        by_outcome.update((str(outcome), int(count)) for outcome, count in attempts)
        return cls(deliveries=by_status, attempts=by_outcome)


@runtime_checkable
class WebhookMetrics(Protocol):
    """What a deliverer reports (implemented by `app.metrics.AtelierMetrics`)."""

    def webhook_attempted(self, outcome: str, seconds: float) -> None: ...
    def webhook_finished(self, outcome: str) -> None: ...


def retry_delay(attempts: int, backoff: float) -> float:
    """Return the wait before the next attempt after `attempts` failed ones.

    Exponential (`backoff`, twice that, …, at most `MAX_BACKOFF`) with jitter: up to
    half of the wait is taken off at random, so receivers that failed together are
    not retried in step.
    """
    delay = min(MAX_BACKOFF, backoff * 2 ** max(0, attempts - 1))
    return delay * (0.5 + random.random() / 2)


async def send(
    client: httpx.AsyncClient, config: WebhookConfig, delivery: Delivery, number: int
) -> Attempt:
    """POST a delivery's body once, signed with its owner's secrets, and say how it went.

    Never raises: whatever fails is the attempt's outcome and reason.
    """
    started_at = now()
    started = time.monotonic()

    def attempt(
        outcome: AttemptOutcome,
        *,
        error: str | None = None,
        excerpt: str | None = None,
        **fields: Any,
    ) -> Attempt:
        latency = (time.monotonic() - started) * 1000
        return Attempt(
            number,
            started_at,
            outcome,
            latency,
            error=storable(error)[:500] if error is not None else None,
            excerpt=storable(excerpt) if excerpt is not None else None,
            **fields,
        )

    # The rules may have changed since the run began, and an older version may have
    # stored a URL they refuse: either way the delivery ends here.
    why = config.refusal(delivery.url)
    if why is not None:
        return attempt("refused", error=f"refused: {why}")
    try:  # a run that ended after its key was revoked sends nothing to the key's URL
        allowed = config.recipients is None or await config.recipients.delivers_for(delivery.owner)
    except Exception as exc:  # retry: the key's state cannot be read now
        log.warning("webhook %s: could not read its key's state", delivery.delivery_id)
        return attempt("network_error", error=f"key state unreadable ({type(exc).__name__})")
    if not allowed:
        return attempt(
            "refused", error="refused: the API key that owns the run is revoked or expired"
        )
    try:
        secrets = await secrets_of(config.secrets, delivery.owner, config.secret)
    except Exception as exc:  # never sign with another secret, nor send unsigned: retry
        log.warning("webhook %s: could not read its signing secret", delivery.delivery_id)
        return attempt("network_error", error=f"signing secret unreadable ({type(exc).__name__})")
    body = delivery.body.encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Atelier-Webhooks/1",
        "X-Atelier-Delivery": delivery.delivery_id,
        "X-Atelier-Timestamp": timestamp,
    }
    signature = signature_header(secrets, delivery.delivery_id, timestamp, body)
    if signature is not None:
        headers["X-Atelier-Signature"] = signature
    try:
        async with asyncio.timeout(config.connect_timeout + 2 * config.read_timeout):
            async with client.stream(
                "POST", delivery.url, content=body, headers=headers
            ) as response:
                answer = bytearray()
                async for chunk in response.aiter_bytes():
                    answer += chunk
                    if len(answer) >= MAX_RESPONSE_BYTES:
                        break
    except AddressRefused as exc:
        return attempt("refused", error=str(exc))
    except (TimeoutError, httpx.TimeoutException):
        return attempt("network_error", error="timed out")
    except httpx.HTTPError as exc:
        return attempt("network_error", error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # e.g. an error of the TLS or IDNA layers httpx does not wrap
        log.warning("webhook %s: sending failed", delivery.delivery_id, exc_info=True)
        return attempt("network_error", error=f"sending failed ({type(exc).__name__})")
    code = response.status_code
    if 200 <= code < 300:
        return attempt("success", status_code=code)
    excerpt = bytes(answer[: EXCERPT_CHARS * 4]).decode("utf-8", "replace")[:EXCERPT_CHARS]
    reason = f"HTTP {code}" + (" (redirects are not followed)" if 300 <= code < 400 else "")
    return attempt("http_error", status_code=code, error=reason, excerpt=excerpt or None)


def storable(text: str) -> str:
    """Return text fit for any backend's text column: NUL (PostgreSQL refuses it) replaced."""
    return text.replace("\x00", "\ufffd")


def webhook_metrics(metrics: object) -> WebhookMetrics | None:
    """Return `metrics` when it counts webhooks (an executor's metrics may not)."""
    return metrics if isinstance(metrics, WebhookMetrics) else None


class Deliverer:
    """Claims and sends due deliveries until stopped (see the module docstring)."""

    def __init__(
        self,
        store: DeliveryStore,
        config: WebhookConfig,
        metrics: WebhookMetrics | None = None,
        *,
        worker: str | None = None,
    ) -> None:
        """Deliver from `store` with `config`; `worker` names its leases (default: unique)."""
        self.store = store
        self.config = config
        self.metrics = metrics
        self.worker = worker or f"deliverer-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Start delivering in a task of this event loop."""
        if not self.config.secret:
            log.warning(
                "WEBHOOK_SECRET is not set: webhook deliveries of API keys without a "
                "signing secret of their own are sent unsigned"
            )
        self._client = guarded_client(
            allow_private=self.config.allow_private,
            connect_timeout=self.config.connect_timeout,
            read_timeout=self.config.read_timeout,
        )
        self._task = asyncio.create_task(self._loop(), name="webhook-deliverer")

    async def stop(self) -> None:
        """Stop delivering; what it held goes back to the outbox at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.store.release(self.worker)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def wake(self) -> None:
        """Look for due deliveries now rather than at the next poll."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            try:
                sent = await self.deliver_due()
            except Exception:
                log.exception("webhook deliverer: could not read the outbox")
                sent = 0
            if sent:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.poll_interval):
                    await self._wake.wait()
            self._wake.clear()

    async def deliver_due(self) -> int:
        """Claim the due deliveries (up to `concurrency`) and attempt each; return how many."""
        claimed = await self.store.claim(
            self.worker, self.config.concurrency, self.config.lease_seconds
        )
        await asyncio.gather(*(self._deliver(d) for d in claimed))
        return len(claimed)

    async def _deliver(self, delivery: Delivery) -> None:
        assert self._client is not None, "start() first"
        number = delivery.attempts + 1
        try:
            attempt = await send(self._client, self.config, delivery, number)
        except Exception as exc:  # `send` says how any failure went; this is its backstop
            log.exception("webhook %s: attempt %d failed", delivery.delivery_id, number)
            error = f"sending failed ({type(exc).__name__})"
            attempt = Attempt(number, now(), "network_error", 0.0, error=error)
        retry_in = self._retry_in(delivery, attempt)
        try:
            held = await self.store.record(delivery, attempt, worker=self.worker, retry_in=retry_in)
        except Exception:
            log.exception("webhook %s: could not record attempt %d", delivery.delivery_id, number)
            return
        if not held:
            log.warning(
                "webhook %s: its lease ran out during attempt %d", delivery.delivery_id, number
            )
        log.info(
            "webhook %s (run %s) attempt %d: %s%s",
            delivery.delivery_id,
            delivery.run_id,
            number,
            attempt.outcome,
            f" ({attempt.error})" if attempt.error else "",
        )
        if self.metrics is not None:
            self.metrics.webhook_attempted(attempt.outcome, attempt.latency_ms / 1000)
            if attempt.outcome == "success":
                self.metrics.webhook_finished("success")
            elif retry_in is None:
                self.metrics.webhook_finished("failed")

    def _retry_in(self, delivery: Delivery, attempt: Attempt) -> float | None:
        """Return the wait before the next attempt, or None: no more (delivered or failed)."""
        if attempt.outcome in ("success", "refused") or attempt.status_code == 410:
            return None
        if attempt.number >= self.config.max_attempts:
            return None
        delay = retry_delay(attempt.number, self.config.backoff)
        if time.time() + delay - delivery.queued_at > GIVE_UP_AFTER:
            return None
        return delay


def delivery_json(row: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return a delivery as the API shows it, from a store's rows (times as ISO 8601 text)."""
    return {
        "delivery_id": row["delivery_id"],
        "url": row["url"],
        "status": row["status"],
        "attempts": row["attempts"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "next_attempt_at": row["next_attempt_at"] if row["status"] == "pending" else None,
        "last_error": row["last_error"],
        "history": [
            Attempt(
                number=a["attempt"],
                started_at=a["started_at"],
                outcome=a["outcome"],
                latency_ms=a["latency_ms"],
                status_code=a["status_code"],
                error=a["error"],
                excerpt=a["excerpt"],
            ).to_json()
            for a in attempts
        ],
    }
