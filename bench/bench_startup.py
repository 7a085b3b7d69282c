"""Benchmark start-up: time from `atelier serve` to "Atelier is up" on the embedded model.

    .venv/bin/python bench/bench_startup.py [--startups 3]

Each start-up is a fresh `atelier serve` (the console script of this interpreter)
with no `LLM_*`/`LOCAL_MODEL_*` variable, a fresh DATA_DIR and no .env: the path
`./dev up` takes. It starts the real llama.cpp child with SmolLM2-135M, waits for
`/v1/models`, makes the self-test completion, opens the stores, and only then
prints "Atelier is up". Measured per start-up: seconds to the first 200 from
`/ready` and to the "Atelier is up" line; then the median of each.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.app.harness import HOST, free_port  # noqa: E402

ATELIER = Path(sys.executable).with_name("atelier")
UP = "Atelier is up"


def one_startup(timeout: float) -> tuple[float, float]:
    """Start `atelier serve` once; return seconds to /ready 200 and to the "up" line."""
    with tempfile.TemporaryDirectory(prefix="atelier-bench-") as tmp:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "LOCAL_MODEL_"))}
        env.update(DATA_DIR=str(Path(tmp) / "data"), AUTH_API_KEYS="", COLUMNS="200")
        log = Path(tmp) / "serve.log"
        started = time.monotonic()
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(ATELIER), "serve", "--host", HOST, "--port", str(port)],
                cwd=tmp,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        ready_s: float | None = None
        try:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"atelier serve exited:\n{log.read_text()[-2000:]}")
                if time.monotonic() - started > timeout:
                    raise TimeoutError("atelier serve did not come up")
                if ready_s is None:
                    try:
                        url = f"http://{HOST}:{port}/ready"
                        if httpx.get(url, timeout=2).status_code == 200:
                            ready_s = time.monotonic() - started
                    except httpx.HTTPError:
                        pass
                if UP in log.read_text(errors="replace"):
                    up_s = time.monotonic() - started
                    return ready_s if ready_s is not None else up_s, up_s
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main() -> None:
    """Run the start-ups and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--startups", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    args, _others = parser.parse_known_args()  # ./dev bench passes every script the same args
    readies, ups = [], []
    for i in range(1, args.startups + 1):
        ready_s, up_s = one_startup(args.timeout)
        readies.append(ready_s)
        ups.append(up_s)
        print(f"start-up {i}: /ready 200 after {ready_s:.2f} s, '{UP}' after {up_s:.2f} s")
    print(
        f"embedded model start-up (self-test included), median of {args.startups}: "
        f"/ready {statistics.median(readies):.2f} s, '{UP}' {statistics.median(ups):.2f} s"
    )


if __name__ == "__main__":
    main()
