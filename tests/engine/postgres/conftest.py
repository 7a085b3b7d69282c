"""Throwaway PostgreSQL and Redis servers, for the tests here that need them (started lazily).

Every module here imports psycopg or redis (the `scale` extra): see
`tests.support.servers.unless_scale_installed`.
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
