"""A brand preset in the pipeline's input (`brand`), as a notebook passes it (PRODUCT.md §6).

The same merge a served run gets (`agentkit.brand.brand_fill` at the run's start): the
service only puts an assistant's preset in the input's `brand`. Fake models record
what each role was told.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentkit.brand import PRESET, brand_fill, preset_of, preset_with
from tests.graphs.pipeline_runs import judge_reply, models_for, run_pipeline
from tests.support.fake_models import HAPPY_BODY

USED_TERM = "营销"
BRAND = {
    "brand_name": "青禾护肤",
    "voice": "像学姐一样亲切",
    "audience": "大学生",
    "must_include": ["氨基酸"],
    "must_avoid": [USED_TERM],
    "body_max": 2000,
    "example_posts": ["一篇示范帖子"],
    "critic_pass_threshold": 0.95,
}


def test_the_brand_fills_only_what_the_input_leaves_unset() -> None:
    filled = brand_fill(
        {"brand": BRAND, "audience": "上班族", "constraints": {"body_max": 300, "tag_max": 5}}
    )
    assert "audience" not in filled  # the input's own audience wins
    assert filled["constraints"] == {
        "body_max": 300,
        "tag_max": 5,
        "must_include": ["氨基酸"],
        "must_avoid": [USED_TERM],
    }
    assert filled["reference_texts"] == ["一篇示范帖子"]
    assert brand_fill({"brand": BRAND, "reference_texts": ["mine"]}).get("reference_texts") is None
    assert brand_fill({"brand": BRAND})["audience"] == "大学生"
    assert brand_fill({"request": "x"}) == {}


def test_a_preset_is_its_context_over_its_configurable_brand_fields() -> None:
    preset = preset_of(
        {"voice": "context"}, {"configurable": {"voice": "config", "brand_name": "B", "x": 1}}
    )
    assert preset == {"voice": "context", "brand_name": "B"}
    assert preset_with(preset, {"voice": "run", "audience": None}) == {
        "voice": "run",
        "brand_name": "B",
    }
    with pytest.raises(ValidationError, match="extra"):
        PRESET.validate_python({"voice": "x", "base_url": "http://evil"})


async def test_a_notebook_run_with_a_brand_writes_and_judges_for_it(tmp_path: Path) -> None:
    assert USED_TERM in HAPPY_BODY
    models = models_for(judge_reply("passed", 0.9))
    run = await run_pipeline(models, tmp_path, brand=BRAND, auto_confirm=True, fast_mode=True)

    writer = models.calls_for("writer_agent")
    assert writer, "the writer was called"
    system = str(writer[0].messages[0].content)
    assert "青禾护肤" in system and "像学姐一样亲切" in system and USED_TERM in system
    verdict = run.state["verdict"]
    assert verdict["threshold"] == 0.95  # the brand's, not CRITIC_PASS_THRESHOLD
    avoided = next(c for c in verdict["checks"] if c["name"] == "must_avoid")
    assert avoided["passed"] is False
    assert verdict["passed"] is False
    assert run.state["audience"] == "大学生"
    judge = models.calls_for("critic")
    assert judge and "像学姐一样亲切" in str(judge[0].messages[-1].content)


async def test_without_a_brand_the_prompts_say_nothing_of_one(tmp_path: Path) -> None:
    models = models_for(judge_reply("passed", 0.9))
    run = await run_pipeline(models, tmp_path, auto_confirm=True, fast_mode=True)
    assert "品牌设定" not in str(models.calls_for("writer_agent")[0].messages[0].content)
    assert run.state["verdict"]["passed"] is True
