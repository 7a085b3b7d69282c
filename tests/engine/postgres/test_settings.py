"""DATABASE_URL and REDIS_URL: unset is the embedded mode; a bad value stops the start."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.settings import Settings


def _settings(**values: str) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_unset_or_empty_means_the_embedded_mode() -> None:
    assert _settings().database_url is None and _settings().redis_url is None
    assert _settings(database_url="", redis_url=" ").database_url is None


def test_urls_are_secrets_with_the_right_scheme() -> None:
    settings = _settings(
        database_url="postgresql://atelier:s3cret@db:5432/atelier", redis_url="redis://redis:6379/0"
    )
    assert settings.database_url is not None and settings.redis_url is not None
    assert settings.database_url.get_secret_value().endswith("@db:5432/atelier")
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"database_url": "mysql://db/atelier"}, "database_url"),
        ({"database_url": "postgres://db/a", "redis_url": "http://redis"}, "redis_url"),
        ({"redis_url": "redis://redis:6379/0"}, "DATABASE_URL is not"),
    ],
)
def test_bad_values_are_refused_without_echoing_them(values: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        _settings(**values)
    assert message in str(refused.value)
    assert all(value not in str(refused.value) for value in values.values())
