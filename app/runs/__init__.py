"""Runs owned by the server: the run manager, its durable store and the live fan-out.

store.py       threads, runs and event logs in SQLite (group-committed frames)
hub.py         in-memory fan-out of committed frames to SSE subscribers
frames.py      LangGraph stream chunks → SSE event names and data
serde.py       JSON for the wire and the log
assistants.py  the graphs served, with their input models and stream filters
manager.py     create, execute, cancel, join and recover runs
checkpoints.py checkpointer housekeeping (settle a write a cancel left open)
"""
