"""The fuzz job of CI: schemathesis against a real server, open and keyed (issue 11).

A bounded run of `tests.app.fuzz` (examples, coverage and fuzzing phases, a few
examples per operation, fixed seed): it fails on any 5xx, undocumented status,
response body or content type unlike the document, or 405 without the right
`Allow`. The acceptance run (all phases, 30 examples per operation) is the same
module with bigger numbers; see its docstring.
"""

from __future__ import annotations

import pytest

from tests.app.fuzz import UNHANDLED, fuzz

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = 8
PHASES = "examples,coverage,fuzzing"


@pytest.mark.parametrize("keyed", [False, True], ids=["open", "keyed"])
def test_schemathesis_finds_no_5xx_and_no_mismatch_with_the_document(keyed: bool) -> None:
    result = fuzz(keyed=keyed, examples=EXAMPLES, phases=PHASES, timeout=600)

    assert result.returncode == 0, result.output[-8000:]
    assert "passed" in result.output  # it did test something
    assert UNHANDLED not in result.server_log, "the server answered a 500"
