"""Suite-wide collection order: the slowest module first.

`./dev test` runs the suite in two pytest-xdist processes, handing out one module at a
time in collection order. The end-to-end runs on the real embedded model
(`tests/e2e`, 10–15 minutes beside the other process) go first, so the other process works through
everything else meanwhile instead of both waiting on them at the end.
"""

from __future__ import annotations

import pytest

SLOWEST_FIRST = ("tests/e2e/",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the slowest modules' tests to the front, keeping every other order."""
    items.sort(key=lambda item: not item.nodeid.startswith(SLOWEST_FIRST))
