"""Whose run this is: the owner key the run engine writes into a run's config.

The run engine puts the owner id of the API key that started a run into the run's
config (`configurable[OWNER_KEY]`, after the client's own `configurable`, so no
client can set it; its name starts with `__`, so LangGraph copies it into no
checkpoint's metadata). Whatever a run calls reads it back with `run_owner()`: the
engine's Store scopes the run's `runtime.store` to it, the agents their knowledge
(`agentkit.run_owner`). A graph run outside the service (a notebook, `langgraph dev`)
has no owner.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config

#: The run config's `configurable` key holding the owner id of the run's API key.
OWNER_KEY = "__atelier_owner"


def run_owner(config: RunnableConfig | None = None) -> str | None:
    """Return the owner id of the current run's API key, or None outside the service.

    Args:
        config: The run's config; by default the current one (`langgraph.config.get_config`).
    """
    if config is None:
        try:
            config = get_config()
        except RuntimeError:  # not inside a runnable
            return None
    owner = (config.get("configurable") or {}).get(OWNER_KEY)
    return owner if isinstance(owner, str) and owner else None
