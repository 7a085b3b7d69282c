"""Annotated dependency aliases shared by every route module.

The caller's identity is `PrincipalDep` (authenticated by `app.security`).
Long-lived services are created once in the app's lifespan (`app.main`) and kept
on `app.state` under the names below; routes reach them only through these
aliases, so a test can build an app with other services and every route follows.

    app.state.settings   Settings           the service's configuration
    app.state.notes      NoteRepository     the knowledge vault (SQLite in DATA_DIR, or PostgreSQL)
    app.state.assets     AssetStore         generated and uploaded images
    app.state.context    AtelierContext     what graph runs get as `context=`
    app.state.runs       RunManager         the run engine's one door: threads, runs,
                                            assistants, streams (engine/manager.py)
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security

from agentkit.context import AtelierContext
from app.security import get_principal
from core.settings import Settings
from engine.manager import RunManager
from knowledge.repository import NoteRepository
from providers.assets import AssetStore


def get_settings(request: Request) -> Settings:
    """Return the app's settings."""
    return request.app.state.settings


def get_notes(request: Request) -> NoteRepository:
    """Return the knowledge vault."""
    return request.app.state.notes


def get_assets(request: Request) -> AssetStore:
    """Return the asset store."""
    return request.app.state.assets


def get_context(request: Request) -> AtelierContext:
    """Return the graph runtime context."""
    return request.app.state.context


SettingsDep = Annotated[Settings, Depends(get_settings)]
NotesDep = Annotated[NoteRepository, Depends(get_notes)]
AssetsDep = Annotated[AssetStore, Depends(get_assets)]
ContextDep = Annotated[AtelierContext, Depends(get_context)]


def get_runs(request: Request) -> RunManager:
    """Return the run manager (threads, runs, assistants and streams)."""
    manager: RunManager = request.app.state.runs
    return manager


RunsDep = Annotated[RunManager, Depends(get_runs)]


PrincipalDep = Annotated[str, Security(get_principal)]
"""The caller's owner id: `key_<24 hex>` per API key, or `anonymous` when open."""
