"""What every `atelier` command shares: reading the settings."""

from __future__ import annotations

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from core.settings import Settings


def settings_or_exit() -> Settings:
    """Read settings, turning a configuration error into a clear message and exit 2."""
    try:
        return Settings()
    except ValidationError as exc:
        Console(stderr=True).print(f"[red]Invalid configuration:[/red]\n{escape(str(exc))}")
        raise typer.Exit(2) from None
