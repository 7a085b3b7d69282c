"""The scale-out deployment's service tests: throwaway PostgreSQL and Redis servers.

Servers come from tests/support/servers.py (started on first use); the modules need
the `scale` extra (`tests.support.servers.unless_scale_installed`).
"""

from tests.support.servers import (
    migrated_postgres_url,
    postgres_cluster,
    postgres_url,
    redis_server,
    unless_scale_installed,
)

__all__ = ["migrated_postgres_url", "postgres_cluster", "postgres_url", "redis_server"]

collect_ignore_glob = unless_scale_installed()
