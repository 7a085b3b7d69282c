"""`python -m llama_cpp.server` that loads fine and dies with SIGSEGV when it computes.

What a llama.cpp compiled with AMX instructions does on a CPU whose kernel refuses
them (issue 10): `/v1/models` answers, the first completion kills the process. It
answers `FAKE_LLAMA_ANSWERS` chat completions first (default 0), counted across
restarts in the file `FAKE_LLAMA_COUNTER`, then every completion crashes it.
Accepts (and ignores) the real server's options; only `--port` and `--model_alias`
matter.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _answered() -> int:
    path = os.environ.get("FAKE_LLAMA_COUNTER")
    if not path or not Path(path).is_file():
        return 0
    return int(Path(path).read_text() or 0)


def _count_answer() -> None:
    path = os.environ.get("FAKE_LLAMA_COUNTER")
    if path:
        Path(path).write_text(str(_answered() + 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model_alias", default="fake.gguf")
    options, _ignored = parser.parse_known_args()
    answers = int(os.environ.get("FAKE_LLAMA_ANSWERS", "0"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file from the crash

    class Handler(BaseHTTPRequestHandler):
        def _json(self, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self.send_error(404)
                return
            model = {"id": options.model_alias, "object": "model", "owned_by": "me"}
            self._json({"object": "list", "data": [model]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if _answered() >= answers:
                print("ggml_backend_amx_mul_mat: executing tile instructions", flush=True)
                # A real invalid read, as in llama.cpp: the process dies before it answers
                # (os.kill would leave this thread time to send a reply first).
                ctypes.string_at(0)
            _count_answer()
            message = {"role": "assistant", "content": "OK"}
            self._json(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 0,
                    "model": options.model_alias,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    print(f"fake llama.cpp server on {options.host}:{options.port}", flush=True)
    ThreadingHTTPServer((options.host, options.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
