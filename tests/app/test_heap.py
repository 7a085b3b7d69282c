"""`app.heap`: the commands freeze what they import and collect the young generation less often."""

from __future__ import annotations

import subprocess
import sys

from tests.app.harness import REPO_ROOT

PROBE = """
import gc
from app.heap import GC_THRESHOLDS, {modules}, freeze_after_imports
assert gc.get_freeze_count() == 0
assert gc.get_threshold() == (700, 10, 10), gc.get_threshold()  # Python's own
frozen = freeze_after_imports({modules})
assert frozen == gc.get_freeze_count(), frozen
assert gc.get_threshold() == GC_THRESHOLDS == (20_000, 20, 10), gc.get_threshold()
print(frozen)
"""


def test_the_server_and_worker_imports_are_frozen_in_their_own_process() -> None:
    for modules in ("SERVER_MODULES", "WORKER_MODULES"):
        done = subprocess.run(
            [sys.executable, "-c", PROBE.format(modules=modules)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert int(done.stdout) > 100_000
