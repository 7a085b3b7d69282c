"""Throwaway PostgreSQL and Redis servers, for the tests here that need them (started lazily).

Every module here imports psycopg or redis (the `scale` extra). Without them the
modules are not collected, so a machine set up without the extra skips them — except
under `CI=true`, where `./dev test` installs the extra and an import error must fail.
"""

import importlib.util
import os

from tests.support.servers import (
    migrated_postgres_url,
    postgres_cluster,
    postgres_url,
    redis_server,
)

__all__ = ["migrated_postgres_url", "postgres_cluster", "postgres_url", "redis_server"]

_INSTALLED = all(importlib.util.find_spec(name) for name in ("psycopg", "psycopg_pool", "redis"))
collect_ignore_glob = [] if _INSTALLED or os.environ.get("CI") == "true" else ["test_*.py"]
