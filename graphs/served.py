"""The graphs and start-up that `langgraph.json` names, for LangGraph's own server.

`langgraph dev` (the in-memory LangGraph server, which is also how Studio opens
a project) and the LangGraph Platform serve `atelier`, `team` and `campaign_planner`
from here:

- `atelier`, `team` and `campaign_planner` are the compiled graphs, with
  `context_schema=RunOptions`:
  that server sends each run's `context` as JSON (at least `{}`), and LangGraph
  builds the schema from it, which a context of live services could not survive.
- `app` is the server's start-up (`http.app` in `langgraph.json`; it adds no
  route): it opens the services `atelier serve` opens, from the same settings
  (`Settings()`: the environment and `.env`) — the knowledge vault in
  `DATA_DIR/atelier.db`, the model factory (the embedded model when `LLM_BASE_URL`
  is unset), the asset store and the image providers — and binds them for the
  server's lifetime (`agentkit.context.bind_services`). Runs, threads and
  checkpoints are the server's own, not `atelier serve`'s.

Everything blocking (reading `.env`, the font lookup, jieba's dictionary) runs in
a worker thread at start-up, so no run makes a blocking call on the event loop:
`langgraph dev` fails a run that does, unless started with `--allow-blocking`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from agentkit.context import AtelierContext, RunOptions, bind_services
from agentkit.services import open_services
from core.settings import Settings
from graphs.campaign_planner import build_campaign_planner
from graphs.pipeline import build_pipeline
from graphs.team import build_team

atelier = build_pipeline(context_schema=RunOptions)
team = build_team(context_schema=RunOptions)
campaign_planner = build_campaign_planner(context_schema=RunOptions)


@asynccontextmanager
async def served_services(settings: Settings) -> AsyncIterator[AtelierContext]:
    """Open the services `settings` name, bind them inside the block, then close them.

    The same services `atelier serve` opens at start-up (`app.main.lifespan`);
    the blocking parts run in worker threads.
    """
    async with open_services(settings) as context:
        with bind_services(context):
            yield context


@asynccontextmanager
async def lifespan(_app: Starlette) -> AsyncIterator[None]:
    """The server's start-up and shutdown: `served_services(Settings())`."""
    settings = await asyncio.to_thread(Settings)  # reads `.env`
    async with served_services(settings):
        yield


app = Starlette(lifespan=lifespan)
