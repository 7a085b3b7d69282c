"""Throwaway PostgreSQL and Redis servers, for the tests here that need them (started lazily)."""

from tests.support.servers import (
    migrated_postgres_url,
    postgres_cluster,
    postgres_url,
    redis_server,
)

__all__ = ["migrated_postgres_url", "postgres_cluster", "postgres_url", "redis_server"]
