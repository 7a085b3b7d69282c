"""`atelier serve` keeps an idle connection open longer than a client reuses one.

httpx (and so the official SDK) reuses an idle keep-alive connection for up to 5 s;
uvicorn closed idle connections after 5 s. A request sent on a connection at the
moment it turned 5 s idle, while the server's event loop ran late, was reset unread:
the client got a `ReadError`, the server logged nothing and recorded no run
(`bench/bench_scale.py`, 300 streamed runs started at once: one lost). The server now
keeps idle connections for `cli.serve.KEEP_ALIVE_SECONDS`.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.support.atelier_cli import spawn_serve, stop, user_env, wait_for_200

#: How long httpx keeps an idle connection for reuse (`httpx.Limits().keepalive_expiry`).
CLIENT_KEEPALIVE_EXPIRY = 5.0


def _get(sock: socket.socket, host: str) -> bytes:
    """Send `GET /ok` on the connection and return its whole response (b"" if closed)."""
    sock.sendall(f"GET /ok HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return data


def test_a_connection_idle_as_long_as_clients_reuse_it_still_takes_a_request(
    tmp_path: Path,
) -> None:
    env = user_env(tmp_path / "data", LLM_BASE_URL="http://127.0.0.1:9/v1", LLM_API_KEY="x")
    log = tmp_path / "serve.log"
    process, url = spawn_serve(tmp_path, env, log)
    try:
        wait_for_200(f"{url}/ok", process, log, timeout=120)
        host = url.removeprefix("http://")
        address, port = host.rsplit(":", 1)
        with socket.create_connection((address, int(port))) as sock:
            assert _get(sock, host).startswith(b"HTTP/1.1 200")
            time.sleep(CLIENT_KEEPALIVE_EXPIRY + 1)  # past httpx's expiry: it would not reuse it
            assert _get(sock, host).startswith(b"HTTP/1.1 200"), "the server closed it"
    finally:
        stop(process)
