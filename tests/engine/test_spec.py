"""The typed run request (engine/spec.py): built once per adapter, stored as the Platform's kwargs.

A row written before `RunOptions` existed loads; a spec's fingerprint tells a retry from
another request; and, over the source: every adapter builds its `RunSpec` in one
function of its own, and no module of the engine reads a run option by string key.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.records import run_from_row
from engine.spec import RunOptions, RunSpec

ROOT = Path(__file__).resolve().parents[2]
#: Where adapters live (the cron scheduler and the campaigns' driver are the engine's own).
ADAPTER_PACKAGES = ("app", "cli", "engine")
#: The one function of each adapter that builds the engine's run request.
SPEC_BUILDERS = {
    "app/a2a.py:run_spec",
    "app/mcp.py:run_spec",
    "app/routes/runs.py:run_spec",
    "cli/run.py:run_spec",
    "engine/services/campaign_driver.py:campaign_spec",
    "engine/services/crons.py:cron_spec",
    "engine/services/evaluation.py:judge_spec",
    "engine/services/experiment_pass.py:experiment_spec",
}
#: The one module that reads a stored run request's keys (the rows' JSON).
STORED_JSON = "engine/spec.py"
#: Run options the engine must read off the typed value, never out of a dict by key:
#: a request's options. Left out are names other records use for their own fields,
#: which the engine reads as they are written: LangGraph's payloads (`config`,
#: `checkpoint`) and the rows and labels the engine keeps (`graph_id`), and the
#: trace context only the engine writes.
OPTION_KEYS = frozenset(
    {f.name for f in dataclasses.fields(RunOptions)}
    - {"config", "checkpoint", "graph_id", "trace_context"}
)

#: The `kwargs` a run of the HTTP API stored before the typed request existed.
OLD_HTTP_KWARGS = {
    "input": {"request": "写一篇笔记", "auto_confirm": True},
    "command": None,
    "stream_mode": ["custom", "values"],
    "stream_subgraphs": True,
    "stream_resumable": False,
    "on_disconnect": "cancel",
    "config": {"configurable": {"base_url": "http://127.0.0.1:8000/"}, "tags": ["t"]},
    "checkpoint": {"checkpoint_id": "c1", "checkpoint_ns": ""},
    "interrupt_before": ["writer"],
    "durability": "sync",
    "webhook": "https://example.com/hook",
    "graph_id": "atelier",
    "trace_context": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
}


def _row(kwargs: str) -> dict[str, object]:
    return {
        "run_id": "r",
        "thread_id": "t",
        "owner": "o",
        "assistant_id": "preset-1",
        "status": "success",
        "created_at": "2025-01-01T00:00:00+00:00",
        "updated_at": "2025-01-01T00:00:00+00:00",
        "finished_at": None,
        "metadata": "{}",
        "kwargs": kwargs,
        "multitask_strategy": "reject",
        "attempt": 1,
        "cancel_reason": None,
        "error": None,
        "idempotency_key": None,
        "request_hash": None,
    }


def test_a_row_written_with_todays_kwargs_loads_and_answers_them_unchanged() -> None:
    import json

    run = run_from_row(_row(json.dumps(OLD_HTTP_KWARGS)))
    options = run.options
    assert options.stream_mode == ("custom", "values") and options.stream_subgraphs
    assert options.on_disconnect == "cancel" and options.durability == "sync"
    assert options.interrupt_before == ["writer"] and options.webhook == OLD_HTTP_KWARGS["webhook"]
    assert run.graph_id == "atelier"  # a created assistant's run runs its graph
    assert run.to_json()["kwargs"] == OLD_HTTP_KWARGS


def test_a_row_of_an_older_adapter_takes_the_defaults() -> None:
    # What an MCP tool call stored: no command, no stream options, no on_disconnect.
    run = run_from_row(_row('{"input": {"request": "x"}, "stream_mode": ["custom"], "config": {}}'))
    assert run.options == RunOptions(input={"request": "x"}, stream_mode=("custom",))
    assert run.graph_id == "preset-1"
    assert RunOptions.from_json({"unknown": 1, "stream_mode": "values"}) == RunOptions()


def test_the_fingerprint_tells_a_retry_from_another_request() -> None:
    spec = RunSpec(assistant_id="atelier", owner="o", input={"request": "a"})
    retry = dataclasses.replace(spec, base_url="http://proxy/", trace_headers={"traceparent": "x"})
    assert spec.fingerprint() == retry.fingerprint()
    for other in (
        dataclasses.replace(spec, input={"request": "b"}),
        dataclasses.replace(spec, thread_id="t"),
        dataclasses.replace(spec, assistant_id="team"),
        dataclasses.replace(spec, webhook="https://example.com/h"),
        dataclasses.replace(spec, metadata={"k": 1}),
    ):
        assert other.fingerprint() != spec.fingerprint()


# -- over the source ------------------------------------------------------------------


def _sources(packages: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _spec_calls(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    """Yield each `RunSpec(...)` call with the name of the function it is in."""

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            inside = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inside = child.name
            if isinstance(child, ast.Call):
                func = child.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name == "RunSpec":
                    yield where, child
            yield from visit(child, inside)

    yield from visit(tree, "<module>")


def test_each_adapter_builds_its_run_spec_in_one_function() -> None:
    builders: set[str] = set()
    unpacked: list[str] = []
    for path, tree in _sources(ADAPTER_PACKAGES):
        for function, call in _spec_calls(tree):
            builders.add(f"{path}:{function}")
            if call.args or any(k.arg is None for k in call.keywords):
                unpacked.append(f"{path}:{function}")  # positional, or **a dict
    print("RunSpec builders:", *sorted(builders), sep="\n  ")
    assert builders == SPEC_BUILDERS
    assert not unpacked, f"name every field of a RunSpec (no **dict): {unpacked}"
    per_module = [p.split(":")[0] for p in builders]
    assert len(per_module) == len(set(per_module)), "one builder per adapter"


def _string_key_reads(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Yield (line, key) of each read of a run option by string key."""
    for node in ast.walk(tree):
        key: object = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
            if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
                key = node.left.value
        elif isinstance(node, ast.Attribute) and node.attr == "kwargs":
            yield node.lineno, ".kwargs"  # the untyped options of old
        if isinstance(key, str) and key in OPTION_KEYS:
            yield node.lineno, key


def test_the_engine_reads_no_run_option_by_string_key() -> None:
    found = [
        f"{path}:{line} reads {key!r}"
        for path, tree in _sources(("engine",))
        if path != STORED_JSON
        for line, key in _string_key_reads(tree)
    ]
    assert not found, "read the typed RunOptions instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'run.kwargs.get("stream_mode")',
        'options["webhook"]',
        'payload.pop("durability", None)',
        '"on_completion" in kwargs',
        "run.kwargs",
    ],
)
def test_the_key_check_sees_each_way_of_reading(source: str) -> None:
    assert list(_string_key_reads(ast.parse(source)))
