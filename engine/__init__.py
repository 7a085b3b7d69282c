"""Runs owned by the server: the run engine, its storage and the live fan-out.

records.py      threads, runs, frames and the SDK's names for their statuses
protocols.py    the seams: the storage (ThreadRepository, RunRepository, EventLog,
                LiveFrames), RunExecutor, CheckpointHousekeeping and RunBackend
group_commit.py the group-committed event log both backends share
sqlite/         the embedded backend (one file in DATA_DIR): its storage, checkpoint
                housekeeping, and `backend.open_sqlite_backend`
postgres/       the scale-out backend (DATABASE_URL, REDIS_URL): its pools, schema and
                Redis client, the runs table as the queue, leases with fencing,
                workers, live frames over Redis, and `backend.open_postgres_backend`
hub.py          in-memory fan-out of committed frames to SSE subscribers (LiveFrames)
frames.py       LangGraph stream chunks → SSE event names and data
serde.py        JSON for the wire and the log
assistants.py   the graphs served, with their input models and stream filters
execution.py    one run's execution (graph → frames → outcome), which executors share
executor.py     the in-process executor: a task per run
manager.py      create, execute, cancel, join and recover runs
checkpoints.py  checkpoint housekeeping through the saver's own API

Everything here outside sqlite/ and postgres/ is backend-neutral: it imports
no backend and no database driver.
"""
