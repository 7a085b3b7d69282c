"""The whole pipeline on the embedded model: SmolLM2-135M through llama.cpp, no network.

This is the offline default a newcomer gets (PRODUCT.md §4): the real
`llama_cpp.server` child process, the real planner, team, critic and finalize,
the SQLite vault and real PNG cards. The tiny model writes poorly and the critic
does not pass it — expected; the run must still reach `finalize` with a result
payload and at least one real image.

Bounded for CI: fast mode (one attempt, 12 team steps), one image. On a 2-core
machine shared with other work it takes about 3-4 minutes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from app.cli import LLMCallCounter, run_request
from core.settings import Settings
from providers.assets import AssetStore

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚"


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_the_embedded_model_runs_the_pipeline_to_a_post_with_an_image(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        llm_base_url=None,  # the embedded model, whatever the environment says
        data_dir=tmp_path / "data",
        max_retry_count=1,
    )
    events: list[dict[str, Any]] = []
    asked: list[Any] = []
    counter = LLMCallCounter()
    started = time.monotonic()
    result = await run_request(
        settings,
        {"request": REQUEST, "auto_confirm": True, "fast_mode": True, "image_count": 1},
        on_event=lambda event: events.append(dict(event)),
        clarify=asked.append,
        callbacks=[counter],
    )
    elapsed = time.monotonic() - started
    print(f"\nembedded pipeline: {elapsed:.0f} s, {counter.calls} LLM calls, {result['outcome']}")

    assert not asked  # auto_confirm: no question
    assert result["outcome"] in ("completed", "exhausted")
    assert result["post"]["blocks"] and result["quality"]["attempts"] == 1
    stages = [e["stage"] for e in events if e["type"] == "stage.completed"]
    assert stages[0] == "planner" and stages[-1] == "finalize" and "critic" in stages
    assert any(e["type"] == "supervisor.route" for e in events)
    assert any(e["type"] == "critic.verdict" for e in events)

    # At least one real PNG card, stored under DATA_DIR and announced as it was made.
    assert result["images"], "the run ended without an image"
    created = {e["asset_id"] for e in events if e["type"] == "asset.created"}
    store = AssetStore(settings.assets_dir)
    for image in result["images"]:
        assert image["asset_id"] in created
        path = store.path(image["asset_id"])
        assert path is not None
        with Image.open(path) as png:
            assert png.format == "PNG" and png.width > 0
    assert counter.calls > 5
