"""Keep the cyclic garbage collector off the objects a server process starts with.

A full (generation 2) collection walks every tracked object of the process. In
`atelier serve` and `atelier worker` about 230,000 of them come from importing
LangChain, LangGraph, pydantic, the OpenAI SDK and Pillow, and live as long as the
process; under load each full collection walked them all again (a worker executing
150 runs at once: 24 full collections, 5.8 s of its 53 s of CPU;
`bench/bench_scale.py`). `gc.freeze()` moves them to the permanent generation,
which collections skip: the same worker spent 2.8 s. Objects created later are
collected as before. Only the commands call this (a process-wide, one-way step);
tests that build apps in their own process do not.
"""

from __future__ import annotations

import gc
import importlib

#: What a serving process imports anyway, before or while it starts.
SERVER_MODULES = (
    "app.main",
    "graphs.pipeline",
    "langchain_openai",
    "PIL.PngImagePlugin",
)
#: What a worker process imports anyway.
WORKER_MODULES = (
    "app.worker",
    "app.runs.postgres.engine",
    "graphs.pipeline",
    "langchain_openai",
    "PIL.PngImagePlugin",
)


def freeze_after_imports(modules: tuple[str, ...]) -> int:
    """Import `modules`, collect once, and freeze every object alive now.

    Returns:
        How many objects are frozen (`gc.get_freeze_count()`).
    """
    for name in modules:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
