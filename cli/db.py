"""`atelier db`: the PostgreSQL schema of the scale-out deployment."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console
from rich.markup import escape

from cli.common import settings_or_exit
from engine import upgrade_schema

app = typer.Typer(help="The PostgreSQL schema of the scale-out deployment.", no_args_is_help=True)


@app.command("upgrade")
def db_upgrade() -> None:
    """Apply the schema migrations DATABASE_URL lacks and print its version (idempotent)."""
    settings = settings_or_exit()
    err = Console(stderr=True)
    if settings.database_url is None:
        err.print(
            "[red]DATABASE_URL is not set[/red]: the embedded SQLite database needs no upgrade"
        )
        raise typer.Exit(2)
    try:
        version = asyncio.run(upgrade_schema(settings.database_url.get_secret_value()))
    except ImportError:
        err.print("[red]The scale-out backend is not installed[/red]: pip install 'atelier[scale]'")
        raise typer.Exit(1) from None
    except Exception as exc:  # a database that cannot be reached or refuses the schema
        err.print(
            f"[red]Schema upgrade failed:[/red] {escape(type(exc).__name__)}: {escape(str(exc))}"
        )
        raise typer.Exit(1) from None
    Console().print(f"Database schema at version {version}")
