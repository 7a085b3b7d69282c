"""The `atelier` command line: one module per command, assembled here.

    atelier serve [--host H] [--port P] [--reload] [--workers N]     cli/serve.py
    atelier worker [--concurrency N]                                  cli/worker.py
    atelier run "写一篇小红书笔记：…" [--auto-confirm] [--json] …        cli/run.py
    atelier run --resume RUN_ID [--auto-confirm] [--json]             cli/run.py
    atelier notes import notes.jsonl | export [notes.jsonl]           cli/notes.py
    atelier datasets import briefs.jsonl | export ID [out.jsonl] | list  cli/datasets.py
    atelier eval DATASET --arm atelier --arm <preset>[@version]       cli/eval.py
    atelier db upgrade                                                cli/db.py
    atelier keys create|list|revoke|rotate-webhook-secret             cli/keys.py

What `run` prints follows the request's language, in the words of `app.texts`
(beside `app.names`, the names of ids the console shows too).
"""

from __future__ import annotations

import typer

from cli import datasets, db, keys, notes, serve, worker
from cli import eval as eval_command
from cli import run as run_command

cli = typer.Typer(
    name="atelier",
    help="Atelier, a multi-agent content studio: serve it, run a request, manage notes and keys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
cli.command()(serve.serve)
cli.command()(worker.worker)
cli.command()(run_command.run)
cli.command("eval")(eval_command.eval_command)
cli.add_typer(datasets.app, name="datasets")
cli.add_typer(notes.app, name="notes")
cli.add_typer(db.app, name="db")
cli.add_typer(keys.app, name="keys")


def main() -> None:
    """Run the `atelier` command line (the console script's entry point)."""
    cli()


if __name__ == "__main__":  # `python -m cli.main ...`, as the `atelier` script
    main()
