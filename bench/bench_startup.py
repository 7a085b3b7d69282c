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
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.support.atelier_cli import UP, spawn_serve, stop, user_env  # noqa: E402


def one_startup(timeout: float) -> tuple[float, float]:
    """Start `atelier serve` once; return seconds to /ready 200 and to the "up" line."""
    with tempfile.TemporaryDirectory(prefix="atelier-bench-") as tmp:
        log = Path(tmp) / "serve.log"
        started = time.monotonic()
        process, url = spawn_serve(Path(tmp), user_env(Path(tmp) / "data"), log)
        ready_s: float | None = None
        try:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"atelier serve exited:\n{log.read_text()[-2000:]}")
                if time.monotonic() - started > timeout:
                    raise TimeoutError("atelier serve did not come up")
                if ready_s is None:
                    try:
                        if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                            ready_s = time.monotonic() - started
                    except httpx.HTTPError:
                        pass
                if UP in log.read_text(errors="replace"):
                    up_s = time.monotonic() - started
                    return ready_s if ready_s is not None else up_s, up_s
                time.sleep(0.05)
        finally:
            stop(process)


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
