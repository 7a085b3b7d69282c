"""`atelier eval`: run an experiment on the embedded engine and print its summary.

    atelier eval DATASET --arm atelier --arm <preset>[@version] [--repetitions N]

DATASET is a dataset's id (`atelier datasets list`) or a JSONL file of examples, which
becomes a new dataset first. Each `--arm` is `[NAME=]ASSISTANT[@VERSION]`: `atelier`,
or a preset (an assistant created with `POST /assistants`) at a version (`@3` or `@v3`;
default its latest). The experiment runs in this process, as ordinary runs of the
engine on DATA_DIR (`app.composition.open_product`, role `run`; advanced by
`ExperimentsService.drive`); Ctrl-C cancels it. The summary is a table (rich) per arm:
code-check pass rate, wins/ties/losses, win rate with its 95 % interval, critic score,
cost and time per post, LLM calls; `--json` prints the experiment as
`GET /experiments/{id}` answers it. See docs/evaluate.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.common import settings_or_exit
from cli.datasets import fail, import_file, run_or_exit
from cli.run import cli_owner, open_embedded_engine
from engine import (
    DEFAULT_CONCURRENCY,
    MAX_CONCURRENCY,
    MAX_REPETITIONS,
    Arm,
    Engine,
    ExperimentRecord,
)

#: `[NAME=]ASSISTANT[@VERSION]`.
ARM = re.compile(
    r"^(?:(?P<name>[^=@\s]{1,64})=)?(?P<assistant>[^=@\s]{1,128})(?:@v?(?P<version>\d{1,7}))?$"
)


def parse_arm(text: str) -> Arm:
    """Return the arm `[NAME=]ASSISTANT[@VERSION]` names.

    Raises:
        typer.BadParameter: The text is not of that form.
    """
    match = ARM.match(text.strip())
    if match is None:
        raise typer.BadParameter(f"{text!r} is not [NAME=]ASSISTANT[@VERSION]")
    version = match["version"]
    return Arm(
        name=match["name"] or "",
        assistant_id=match["assistant"],
        version=int(version) if version else None,
    )


def _share(rate: Any, low: Any, high: Any) -> str:
    if rate is None:
        return "–"
    return f"{rate:.0%} [{low:.0%}–{high:.0%}]"


def _number(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_table(detail: dict[str, Any]) -> Table:
    """Return the summary per arm of an experiment (`GET /experiments/{id}`) as a table."""
    table = Table(title=f"experiment {detail['experiment_id']} · {detail['status']}")
    for column in (
        "arm",
        "assistant",
        "runs",
        "pass rate [95%]",
        "W/T/L",
        "win rate [95%]",
        "critic",
        "cost/post",
        "s/post",
        "LLM calls",
    ):
        table.add_column(column, justify="left" if column in ("arm", "assistant") else "right")
    for arm in detail["summary"]["arms"]:
        version = f"@v{arm['version']}" if arm["version"] is not None else ""
        table.add_row(
            escape(arm["name"]),
            escape(f"{arm['assistant_id']}{version}"),
            str(arm["runs"]),
            _share(arm["pass_rate"], arm["pass_rate_low"], arm["pass_rate_high"]),
            f"{arm['wins']}/{arm['ties']}/{arm['losses']}",
            _share(arm["win_rate"], arm["win_rate_low"], arm["win_rate_high"]),
            _number(arm["critic_score"]),
            _number(arm["cost_per_post"], 6),
            _number(arm["seconds_per_post"], 1),
            str(arm["calls"]),
        )
    return table


async def evaluate(
    engine: Engine,
    owner: str,
    dataset: str,
    arms: list[Arm],
    *,
    repetitions: int,
    concurrency: int,
    examples: str | None = None,
    progress: Console | None = None,
) -> dict[str, Any]:
    """Run an experiment of `dataset` on `arms` to its end.

    Args:
        engine: The embedded engine.
        owner: The CLI's owner (`cli.run.cli_owner`).
        dataset: A dataset's id, or the name of the dataset `examples` makes.
        arms: What to compare.
        repetitions: Runs of each example on each arm.
        concurrency: Runs in flight at once.
        examples: A JSONL text of examples: a new dataset named `dataset` is made of it.
        progress: Where to print how far it got.

    Returns:
        The experiment with its summary and its first results (`ExperimentsService.detail`).

    Raises:
        RunsError: The dataset, an arm or a bound was refused.
    """
    dataset_id = dataset
    if examples is not None:
        record, _added = await import_file(engine, owner, examples, name=dataset, dataset_id=None)
        dataset_id = record.dataset_id
    experiment = await engine.experiments.create(
        owner,
        dataset_id=dataset_id,
        arms=arms,
        repetitions=repetitions,
        max_concurrency=concurrency,
    )
    seen: list[tuple[int, int]] = []

    def report(now: ExperimentRecord) -> None:
        done = (now.runs_done, now.pairs_done)
        if progress is not None and done not in seen[-1:]:
            progress.print(f"runs {done[0]}/{now.runs_total} · judged {done[1]}/{now.pairs_total}")
            seen.append(done)

    experiment_id = experiment.experiment_id
    await engine.experiments.drive(owner, experiment_id, on_pass=report)
    return await engine.experiments.detail(owner, experiment_id)


def eval_command(
    dataset: Annotated[
        str, typer.Argument(metavar="DATASET", help="A dataset id, or a JSONL file of examples.")
    ],
    arm: Annotated[
        list[str],
        typer.Option(
            "--arm",
            metavar="[NAME=]ASSISTANT[@VERSION]",
            help="An assistant to compare (give two or more): atelier, or a preset id "
            "at a version.",
        ),
    ],
    repetitions: Annotated[
        int, typer.Option(min=1, max=MAX_REPETITIONS, help="Runs of each example on each arm.")
    ] = 1,
    concurrency: Annotated[
        int, typer.Option(min=1, max=MAX_CONCURRENCY, help="Runs in flight at once.")
    ] = DEFAULT_CONCURRENCY,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the experiment (summary and results) as JSON.")
    ] = False,
) -> None:
    """Compare assistants on a dataset: run it on each, check and judge the posts in pairs."""
    arms = [parse_arm(text) for text in arm]
    if len(arms) < 2:
        raise fail("give two or more --arm", code=2)
    path = Path(dataset)
    if dataset.endswith((".jsonl", ".ndjson")) and not path.is_file():
        raise fail(f"{dataset}: no such file", code=2)
    examples = path.read_text(encoding="utf-8") if path.is_file() else None
    settings = settings_or_exit()
    progress = None if json_output else Console(stderr=True)

    async def main() -> dict[str, Any]:
        async with open_embedded_engine(settings) as engine:
            return await evaluate(
                engine,
                cli_owner(settings),
                path.stem if examples is not None else dataset,
                arms,
                repetitions=repetitions,
                concurrency=concurrency,
                examples=examples,
                progress=progress,
            )

    detail = run_or_exit(main())
    if json_output:
        typer.echo(json.dumps(detail, ensure_ascii=False))
    else:
        Console().print(summary_table(detail))
        if detail["error"]:
            Console(stderr=True).print(f"[red]{escape(detail['error'])}[/red]")
    if detail["status"] != "success":
        raise typer.Exit(1)
