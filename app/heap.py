"""Keep the cyclic garbage collector's work in a server process small.

Two measures, both taken by the commands (`atelier serve`, `atelier worker`) once their
imports are done (`freeze_after_imports`):

**Freeze what the process starts with.** A full (generation 2) collection walks every
tracked object of the process. In `atelier serve` and `atelier worker` about 230,000
of them come from importing LangChain, LangGraph, pydantic, the OpenAI SDK and Pillow,
and live as long as the process; under load each full collection walked them all
again (a worker executing 150 runs at once: 24 full collections, 5.8 s of its 53 s of
CPU; `bench/bench_scale.py`). `gc.freeze()` moves them to the permanent generation,
which collections skip: the same worker spent 2.8 s.

**Collect the young generation less often** (`GC_THRESHOLDS`). Python collects its
youngest generation every 700 net allocations. A run's objects live across its awaits,
so with many runs in flight most of them survive a collection that comes that soon,
are promoted, and are walked again by older collections and then by full ones. Every
20,000 allocations, most are gone before a collection looks at them. Measured with
`bench/bench_scale.py`, 300 runs at once: the embedded `atelier serve` spent 14.9 s of
its 123 CPU-s in the collector (3,670 young, 333 middle and 30 full collections), 3.4 s
with these thresholds (75, 3, 0), and finished the 300 runs 11 % sooner (108.8 → 97.1 s,
two runs one after the other on a shared machine, whose speed varies by ±10 %);
a worker executing 150 runs spent 7.0 s of 54, then 2.2 s. The price: a young
collection pauses the loop for tens of milliseconds instead of one or two, about once
a second under that load, and cyclic garbage waits a little longer to be freed.

Only the commands call this (process-wide steps); tests that build apps in their own
process do not.
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
    "cli.worker",
    "engine.postgres.backend",
    "graphs.pipeline",
    "langchain_openai",
    "PIL.PngImagePlugin",
)


#: `gc.set_threshold`: net allocations between two young collections (Python: 700), and
#: the collections of a generation between two of the next (Python: 10 and 10).
GC_THRESHOLDS = (20_000, 20, 10)


def freeze_after_imports(modules: tuple[str, ...]) -> int:
    """Import `modules`, collect once, freeze every object alive now, set `GC_THRESHOLDS`.

    Returns:
        How many objects are frozen (`gc.get_freeze_count()`).
    """
    for name in modules:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return gc.get_freeze_count()
