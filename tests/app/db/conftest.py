"""Throwaway PostgreSQL and Redis servers for the scale-out backend's tests."""

from tests.support.servers import postgres_cluster, postgres_url, redis_server

__all__ = ["postgres_cluster", "postgres_url", "redis_server"]
