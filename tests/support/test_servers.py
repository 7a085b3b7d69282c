"""The throwaway-server helpers: a missing server skips locally, fails under CI; nginx."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.servers import SHIPPED_NGINX_CONF, missing, proxy_config


def test_a_missing_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        missing("redis-server is not installed")


def test_a_missing_server_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="redis-server"):
        missing("redis-server is not installed")


def test_the_proxy_config_is_the_shipped_one_with_only_upstreams_and_port_replaced(
    tmp_path: Path,
) -> None:
    shipped = SHIPPED_NGINX_CONF.read_text(encoding="utf-8")
    config = proxy_config(shipped, [8001, 8002], 9000, tmp_path)
    assert "api1:8000" not in config and "listen 8000;" not in config
    assert "server 127.0.0.1:8001;" in config and "server 127.0.0.1:8002;" in config
    assert "listen 127.0.0.1:9000;" in config and "daemon off;" in config
    location = shipped[shipped.index("location /") :]
    assert location in config  # every proxy option as shipped


def test_a_proxy_config_of_another_shape_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="upstream"):
        proxy_config("events {}\nhttp { server { listen 80; } }", [1], 2, tmp_path)
    with pytest.raises(ValueError, match="listen"):
        proxy_config("http { upstream a { server x:1; } }", [1], 2, tmp_path)
