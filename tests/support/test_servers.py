"""The throwaway-server helpers: a missing server skips locally and fails under CI."""

from __future__ import annotations

import pytest

from tests.support.servers import missing


def test_a_missing_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        missing("redis-server is not installed")


def test_a_missing_server_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="redis-server"):
        missing("redis-server is not installed")
