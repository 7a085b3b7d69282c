"""`atelier keys`: make, list and revoke managed API keys on the deployment's database.

    atelier keys create --name "Client B" --role member [--expires-at 2027-01-01] [--quota crons=50]
    atelier keys list [--all] [--json]
    atelier keys revoke KEY_ID
    atelier keys rotate-webhook-secret KEY_ID

They work on the database the settings name — `DATA_DIR/atelier.db` (embedded; a
running `atelier serve` may keep it open) or `DATABASE_URL` (scale-out) — through the
engine's keys service (`engine.open_keys`), so a change is in the audit trail (actor
`cli`) and a running server sees it within a second. A key's secret and its webhook
secret are printed once, by `create`; the database keeps the secret's hash only.
Managed keys are checked only by a keyed service (AUTH_API_KEYS set). See docs/keys.md.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.common import settings_or_exit
from engine import CLI, KEY_ROLES, KeyRecord, KeysService, RunsError, open_keys, utc_now

app = typer.Typer(help="Make, list and revoke managed API keys.", no_args_is_help=True)

T = TypeVar("T")


def _run(work: Callable[[KeysService], Awaitable[T]]) -> T:
    """Run `work` on the deployment's keys; a refusal is a message and exit 1."""
    settings = settings_or_exit()
    err = Console(stderr=True)

    async def opened() -> T:
        async with open_keys(settings) as keys:
            return await work(keys)

    try:
        return asyncio.run(opened())
    except RunsError as exc:
        err.print(f"[red]{escape(exc.message)}[/red]")
        raise typer.Exit(1) from None
    except ImportError:
        err.print("[red]The scale-out backend is not installed[/red]: pip install 'atelier[scale]'")
        raise typer.Exit(1) from None


def _quotas(values: list[str]) -> dict[str, Any]:
    """Parse `name=value` quotas (`null` or `none`: unlimited)."""
    quotas: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{item!r}: write a quota as name=number (or name=null)")
        if raw.strip().lower() in ("null", "none"):
            quotas[name.strip()] = None
            continue
        try:
            number = float(raw)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: {raw!r} is not a number") from None
        quotas[name.strip()] = int(number) if number.is_integer() else number
    return quotas


def _expiry(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _row(record: KeyRecord) -> dict[str, Any]:
    return {
        "key_id": record.key_id,
        "name": record.name,
        "role": record.role,
        "state": record.state(utc_now()),
        "prefix": record.prefix,
        "quotas": record.quotas,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "last_used_at": record.last_used_at,
        "revoked_at": record.revoked_at,
    }


@app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="What the key is for (a person, a client).")],
    role: Annotated[
        str, typer.Option(help=f"One of {', '.join(KEY_ROLES)}.", show_default=True)
    ] = "member",
    expires_at: Annotated[
        str | None, typer.Option(help="ISO 8601 date or time after which it stops working.")
    ] = None,
    quota: Annotated[
        list[str] | None,
        typer.Option(help="A quota over the default, name=number or name=null; repeatable."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Make a key and print its secret and webhook secret, this once."""
    quotas = _quotas(quota or [])
    expiry = _expiry(expires_at)
    made = _run(
        lambda keys: keys.create(name=name, role=role, expires_at=expiry, quotas=quotas, actor=CLI)
    )
    if as_json:
        print(
            json.dumps(
                {**_row(made.record), "key": made.secret, "webhook_secret": made.webhook_secret}
            )
        )
        return
    out = Console()
    out.print(
        f"Made key [bold]{escape(made.record.key_id)}[/] ({escape(made.record.name)}, {role})"
    )
    out.print("Its secret, shown this once (send it as 'Authorization: Bearer <key>'):")
    out.print(made.secret, markup=False, highlight=False, soft_wrap=True)
    out.print("Its webhook signing secret, shown this once:")
    out.print(made.webhook_secret, markup=False, highlight=False, soft_wrap=True)


@app.command("list")
def keys_list(
    include_revoked: Annotated[
        bool, typer.Option("--all/--active", help="Also list revoked keys (default) or not.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List the keys, newest first, without their secrets."""
    found = _run(lambda keys: keys.search(include_revoked=include_revoked, limit=10_000))
    if as_json:
        for record in found:
            print(json.dumps(_row(record)))
        return
    table = Table("key id", "name", "role", "state", "prefix", "expires", "last used")
    for record in found:
        row = _row(record)
        table.add_row(
            *(
                escape(str(row[name] or "—"))
                for name in (
                    "key_id",
                    "name",
                    "role",
                    "state",
                    "prefix",
                    "expires_at",
                    "last_used_at",
                )
            )
        )
    Console().print(table)


@app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (key_…).")]) -> None:
    """Revoke a key: refused from now on; its crons pause, its pending deliveries are cancelled."""
    revoked = _run(lambda keys: keys.revoke(key_id, actor=CLI))
    Console().print(
        f"Revoked {escape(key_id)}: {revoked.crons_paused} cron(s) paused, "
        f"{revoked.deliveries_cancelled} pending delivery(ies) cancelled"
    )


@app.command("rotate-webhook-secret")
def keys_rotate_webhook_secret(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_…).")],
) -> None:
    """Give a key a new webhook signing secret and print it, this once."""
    record, secret = _run(lambda keys: keys.rotate_webhook_secret(key_id, actor=CLI))
    out = Console()
    out.print(
        f"New webhook secret of {escape(key_id)} (the previous one signs until "
        f"{escape(str(record.previous_secret_until))}):"
    )
    out.print(secret, markup=False, highlight=False, soft_wrap=True)
