"""Benchmark the executor team's normal path on scripted fake models.

    .venv/bin/python bench/bench_team.py [--runs 10] [--images 3]

The team graph (`graphs.team.build_team`) runs the normal path of
`tests.support.fake_models.happy_team` — brief → research (one knowledge
search) → reference → layout → image planner → writer → image (one
`generate_image` call per plan) → review → END — with models that answer at
once, so the figures are the graph's own cost: LangGraph, the nodes, prompts,
the asset store and the image renderer.

Printed: the route events of one run, then the wall time per run (median, min,
max) with the real local card renderer (1080×1440 PNG cards, drawn
concurrently) and with a stub renderer (a 1×1 PNG), which isolates the cost of
drawing the cards.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from providers.images import GeneratedImage, ImageRequest  # noqa: E402
from tests.graphs.team_runs import run_team  # noqa: E402
from tests.support.fake_models import FakeModels, fake_context, happy_team  # noqa: E402


class StubProvider:
    """Return a 1×1 PNG per request (distinct per slot), skipping the card renderer."""

    name = "local"

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        buffer = io.BytesIO()
        Image.new("RGB", (1, 1), (req.slot, 0, 0)).save(buffer, format="PNG")
        return GeneratedImage(data=buffer.getvalue(), content_type="image/png", width=1, height=1)


async def one_run(images: int, stub: bool) -> tuple[float, list[str]]:
    """Run the team once in a fresh data directory; return (seconds, route events)."""
    with tempfile.TemporaryDirectory() as root:
        models = FakeModels(happy_team(images))
        overrides: dict[str, Any] = {"image_providers": {"local": StubProvider()}} if stub else {}
        ctx = fake_context(models, Path(root), **overrides)
        start = time.perf_counter()
        run = await run_team(models, Path(root), ctx=ctx, image_count=images)
        elapsed = time.perf_counter() - start
        assert len(run.state["images"]) == images, "the run did not draw every image"
        return elapsed, run.routes


def _report(label: str, times: list[float]) -> None:
    ms = [t * 1000 for t in times]
    print(
        f"{label:<28} median {statistics.median(ms):7.1f} ms   "
        f"min {min(ms):7.1f} ms   max {max(ms):7.1f} ms   ({len(ms)} runs)"
    )


async def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per variant")
    parser.add_argument("--images", type=int, default=3, help="images per post (1–9)")
    args = parser.parse_args()

    await one_run(args.images, stub=True)  # warm-up: imports, fonts, jieba
    _, routes = await one_run(args.images, stub=False)
    print("routes of the normal path:")
    for event in routes:
        print(f"  {event}")
    for label, stub in (("team, local card renderer", False), ("team, stub renderer", True)):
        times = [(await one_run(args.images, stub))[0] for _ in range(args.runs)]
        _report(f"{label}:", times)


if __name__ == "__main__":
    asyncio.run(main())
