"""The image agent: one call per missing plan, whatever the model asks for."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage

from agentkit.tools import image_request, post_sections
from nodes.image_agent import _calls_for, collect_images
from tests.graphs.team_runs import run_team
from tests.support.fake_models import FakeModels, happy_team, tool_calls

PLANS = [
    {"slot": 1, "type": "cover", "desc": "封面", "prompt": "封面画面"},
    {"slot": 2, "type": "content", "desc": "要点", "prompt": "要点画面"},
    {"slot": 3, "type": "content", "desc": "细节", "prompt": "细节画面"},
]


def test_the_models_calls_are_kept_and_missing_plans_are_filled_in() -> None:
    reply = tool_calls(
        [
            ("generate_image", {"slot": 2, "prompt": "模型润色的画面"}),
            ("generate_image", {"slot": 2, "prompt": "重复的"}),  # second call for a slot
            ("generate_image", {"slot": 7, "prompt": "没有这个计划"}),  # unknown slot
            ("search_knowledge", {"query": "x"}),  # not an image tool
        ]
    )
    calls = _calls_for(reply, PLANS, round_no=1)
    assert [(c["args"]["slot"], c["args"]["prompt"]) for c in calls] == [
        (1, "封面画面"),
        (2, "模型润色的画面"),
        (3, "细节画面"),
    ]
    assert len({c["id"] for c in calls}) == 3


def test_no_call_at_all_draws_every_plan_from_its_own_prompt() -> None:
    calls = _calls_for(AIMessage(content="好的，我来画。"), PLANS[1:], round_no=2)
    assert [c["args"] for c in calls] == [
        {"slot": 2, "prompt": "要点画面"},
        {"slot": 3, "prompt": "细节画面"},
    ]


async def test_a_model_that_never_calls_tools_still_gets_every_image(tmp_path: Path) -> None:
    models = FakeModels({**happy_team(3), "image_agent": "我会为每张图调用工具。"})
    run = await run_team(models, tmp_path, image_count=3)
    assert [i["slot"] for i in run.state["images"]] == [1, 2, 3]
    assert run.state["images_complete"] is True
    assert models.count("image_agent") == 1  # one round drew all three


async def test_too_few_calls_are_completed_in_the_same_round(tmp_path: Path) -> None:
    one = tool_calls([("generate_image", {"slot": 2, "prompt": "只画第二张"})])
    models = FakeModels({**happy_team(3), "image_agent": one})
    run = await run_team(models, tmp_path, image_count=3)
    assert len(run.state["images"]) == 3
    prompts = {e["slot"]: e for e in run.of_type("asset.created")}
    assert sorted(prompts) == [1, 2, 3]
    stored = run.ctx.assets.get(run.state["images"][1]["asset_id"])
    assert stored is not None and stored.prompt == "只画第二张"


def test_collect_images_keeps_only_current_plans() -> None:
    state = {
        "image_plans": PLANS[:2],
        "images": [{"slot": 1, "asset_id": "a"}, {"slot": 5, "asset_id": "old"}],
    }
    assert [i["slot"] for i in collect_images(state)] == [1]  # type: ignore[arg-type]


def test_cards_take_their_text_from_the_post() -> None:
    state = {
        "creative_brief": {"topic": "平价护肤", "goal": "讲清成分"},
        "generated_content": {"title": "学生党护肤", "body": "## 洁面\n氨基酸\n\n## 防晒\n每天涂"},
        "reference_analyses": {"palette": ["#112233", "not-a-colour", "#abcdef"]},
    }
    cover = image_request(PLANS[0], state)
    assert (cover.kind, cover.title, cover.text) == ("cover", "学生党护肤", "讲清成分")
    assert cover.palette == ["#112233", "#abcdef"]
    card = image_request(PLANS[2], state, prompt="润色后")
    assert (card.title, card.text, card.prompt) == ("防晒", "每天涂", "润色后")
    assert post_sections(state) == [("洁面", "氨基酸"), ("防晒", "每天涂")]
