"""The scale-out deployment's service tests: throwaway PostgreSQL and Redis servers.

Servers come from tests/support/servers.py (started on first use). Without the
`scale` extra these modules are not collected, except under `CI=true`, where an
import error must fail.
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
