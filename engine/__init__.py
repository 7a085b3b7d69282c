"""Runs owned by the server: the run engine, its storage and the live fan-out.

records.py     threads, runs, frames and the SDK's names for their statuses
protocols.py   the storage seams: ThreadRepository, RunRepository, EventLog, LiveFrames
group_commit.py the group-committed event log both backends share
sqlite/        their SQLite implementation (the embedded default, one file in DATA_DIR)
postgres/      their PostgreSQL implementation (DATABASE_URL): the runs table as the
               queue, leases with fencing, workers, live frames over Redis
hub.py         in-memory fan-out of committed frames to SSE subscribers (LiveFrames)
frames.py      LangGraph stream chunks → SSE event names and data
serde.py       JSON for the wire and the log
assistants.py  the graphs served, with their input models and stream filters
manager.py     create, execute, cancel, join and recover runs
checkpoints.py every write to LangGraph's checkpoint tables outside the saver
"""
