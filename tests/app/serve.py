"""Serve the app for `harness.ServerProcess`: `python -m tests.app.serve`.

Configuration comes from the environment (DATA_DIR, LLM_BASE_URL, …) like the real
service; `ATELIER_TEST_GRAPHS` picks the graphs (`sample`: tests/app/sample_graphs.py,
`atelier`: the real pipeline) and `ATELIER_TEST_PORT` the port on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os

import uvicorn

from app.main import create_app
from core.settings import Settings


def main() -> None:
    """Build the app and serve it until killed."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    factory = None
    if os.environ.get("ATELIER_TEST_GRAPHS", "sample") == "sample":
        from tests.app.sample_graphs import sample_assistants

        factory = sample_assistants
    app = create_app(Settings(), assistant_factory=factory)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(os.environ["ATELIER_TEST_PORT"]),
        log_level="warning",
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
