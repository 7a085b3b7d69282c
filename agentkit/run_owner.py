"""Whose run this is and which vault namespaces it reads: the scope of a run's knowledge.

The run engine puts the owner id of the API key that started a run into the run's
config (`core.run_config.OWNER_KEY`); the agents read it with `run_owner()`:
`nodes.rag` and the `search_knowledge` tool retrieve that key's notes and the notes
no key wrote.

A run reads the notes of two namespaces: its brand's `knowledge_namespace`
(`state["brand"]`, when the run was started with a preset naming one) and the
shared one (`knowledge.notes.SHARED_NAMESPACE`), never another brand's.

A graph run outside the service (a notebook, `langgraph dev`) has no owner: it
reads only the notes no key wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from core.run_config import OWNER_KEY, run_owner
from knowledge.notes import SHARED_NAMESPACE

__all__ = ["NO_OWNER", "OWNER_KEY", "knowledge_namespaces", "note_principal", "run_owner"]

#: What `principal=` gets for a run without an owner: no key's id, so only owner-less notes.
NO_OWNER = ""


def note_principal(config: RunnableConfig | None = None) -> str:
    """Return what a run passes as a note repository's `principal`: its owner, or no key."""
    return run_owner(config) or NO_OWNER


def knowledge_namespaces(state: Mapping[str, Any]) -> list[str]:
    """Return the vault namespaces a run reads: its brand's (if any), then the shared one."""
    brand = state.get("brand") or {}
    named = brand.get("knowledge_namespace") if isinstance(brand, Mapping) else None
    if isinstance(named, str) and named and named != SHARED_NAMESPACE:
        return [named, SHARED_NAMESPACE]
    return [SHARED_NAMESPACE]
