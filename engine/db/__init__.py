"""PostgreSQL and Redis for the scale-out deployment (`DATABASE_URL`, `REDIS_URL`).

With `DATABASE_URL` unset none of this is imported: the embedded default keeps every
record in SQLite in `DATA_DIR`. With it set:

- `engine.db.pool`        the psycopg connection pools and LangGraph's `AsyncPostgresSaver`;
- `engine.db.migrations`  the versioned schema, applied by `atelier db upgrade` and at start;
- `engine.db.redis`       the Redis client, a reconnecting subscription, and a readiness ping.

The modules import psycopg and redis (the `scale` extra) at the top, so import them
only when the settings ask for the scale-out backend.
"""
