"""`atelier worker`: a process that executes runs of the shared queue, and nothing else.

It opens the engine as an API replica does (`app.composition.open_product`, role
`worker`: the same PostgreSQL and Redis, services, graphs, webhooks and tracing) and
runs one worker claiming up to `concurrency` runs at once. SIGTERM or SIGINT stop it
gracefully:
no more claims, the runs in flight are stopped at their last checkpoint and handed
back to the queue, where another worker resumes them.

A worker has no HTTP API, so its metrics (claim latency, lease losses, resumes, the
runs and LLM calls it executed) are not in any replica's `/metrics`. With
WORKER_METRICS_PORT it serves them itself, in the Prometheus text format at
`http://WORKER_METRICS_HOST:PORT/metrics` (prometheus_client's own server, in a
thread), for Prometheus to scrape each worker as it scrapes each replica.

With CRON_SCHEDULER on (the default) a worker also runs the cron scheduler (its
executor is the queue's, so a tick's run is recorded pending and claimed by
whichever worker is free). A tick is claimed in the
database (`FOR UPDATE SKIP LOCKED`), so it fires once whatever the number of
replicas and workers running the scheduler: a deployment of workers only, or with
API replicas that set CRON_SCHEDULER=off, still fires every cron.

With an OTLP endpoint set (docs/tracing.md) it traces the runs it executes, each
continuing the trace the API replica that recorded it started (`engine.tracing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Annotated

import typer
from prometheus_client import start_http_server
from rich.console import Console

from app.composition import open_product
from app.metrics import AtelierMetrics
from cli.common import settings_or_exit
from core.settings import Settings
from engine import AssistantFactory, WebhookSecrets
from providers.usage import PriceTable

log = logging.getLogger(__name__)


async def serve_worker(
    settings: Settings,
    concurrency: int,
    *,
    stop: asyncio.Event | None = None,
    assistant_factory: AssistantFactory | None = None,
    webhook_secrets: WebhookSecrets | None = None,
) -> None:
    """Run a worker until `stop` is set (or SIGTERM/SIGINT arrive).

    `assistant_factory` builds the assistants it executes runs of (default: what the
    API replicas serve, `app.composition`); `webhook_secrets` holds the API keys' own
    signing secrets of the deliveries it sends (default: none, WEBHOOK_SECRET).
    """
    if settings.database_url is None:
        raise ValueError("atelier worker needs DATABASE_URL (the shared queue)")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    metrics = AtelierMetrics(prices=PriceTable.from_settings(settings))  # costs by LLM_PRICES
    async with contextlib.AsyncExitStack() as stack:
        if settings.worker_metrics_port is not None:
            server, _thread = start_http_server(
                settings.worker_metrics_port,
                addr=settings.worker_metrics_host,
                registry=metrics.registry,
            )
            stack.callback(server.server_close)
            stack.callback(server.shutdown)
            log.info(
                "worker metrics at http://%s:%d/metrics",
                settings.worker_metrics_host,
                settings.worker_metrics_port,
            )
        engine = await stack.enter_async_context(
            open_product(
                settings,
                role="worker",
                metrics=metrics,
                assistant_factory=assistant_factory,
                concurrency=concurrency,
                webhook_secrets=webhook_secrets,
            )
        )
        (worker,) = engine.workers
        owner = getattr(worker, "owner", "?")
        if settings.cron_scheduler:
            log.info("worker %s runs the cron scheduler", owner)
        log.info("worker %s ready", owner)
        await stop.wait()
        log.info("worker %s stopping", owner)


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1000,
            help="Runs executed at once (RUN_WORKER_CONCURRENCY, default 64).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve this worker's Prometheus metrics at /metrics on this port "
            "(WORKER_METRICS_PORT; interface: WORKER_METRICS_HOST, default 127.0.0.1).",
        ),
    ] = None,
) -> None:
    """Execute runs of the shared queue (DATABASE_URL) until SIGTERM; no HTTP API."""
    if metrics_port is not None:
        os.environ["WORKER_METRICS_PORT"] = str(metrics_port)  # read by Settings
    settings = settings_or_exit()
    if settings.database_url is None:
        Console(stderr=True).print(
            "[red]DATABASE_URL is not set[/red]: the embedded mode executes runs in "
            "`atelier serve`; a worker needs the shared PostgreSQL queue"
        )
        raise typer.Exit(2)
    from app.heap import WORKER_MODULES, freeze_after_imports

    freeze_after_imports(WORKER_MODULES)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # The event loop `atelier serve` runs on too (uvicorn's "auto" loop picks uvloop,
    # which `uvicorn[standard]` installs): a worker spends most of its CPU in the loop's
    # I/O, streaming LLM replies and writing frames. The stdlib loop where it is absent.
    run = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    run(serve_worker(settings, concurrency or settings.run_worker_concurrency))
