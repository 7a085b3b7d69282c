"""The team's normal path through the real `ChatOpenAI` client against a scripted server.

`OpenAIModelFactory` builds the models exactly as in production; only the
endpoint is a scripted OpenAI-compatible server on loopback
(`tests.support.scripted_openai`). This exercises the wire format: forced and
optional tool calls, tool results sent back, structured output by function
calling, the writer's SSE token stream, and the `nostream` tags.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from core.agents import AGENTS
from core.settings import Settings
from providers.llm import OpenAIModelFactory
from tests.app.atelier_llm import team_responder
from tests.graphs.team_runs import run_team
from tests.support.fake_models import HAPPY_TAGS, HAPPY_TITLE, fake_context, happy_team
from tests.support.scripted_openai import ScriptedOpenAIServer

FORCED = (
    "CreativeBrief",
    "ReferenceAnalysis",
    "LayoutSpec",
    "ImagePlans",
    "ReviewResult",
    "EvidencePack",
)


async def test_normal_path_over_the_openai_wire(tmp_path: Path) -> None:
    team = happy_team(3)
    with ScriptedOpenAIServer(team_responder(team)) as server:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=server.base_url,
            llm_api_key="test-key",  # type: ignore[arg-type]
            llm_max_retries=0,
            llm_timeout=20,
        )
        ctx = fake_context(OpenAIModelFactory(settings), tmp_path)
        run = await run_team(None, tmp_path, ctx=ctx, image_count=3, stream_tokens=True)
        requests = server.requests

    assert run.routes == [f"route:{agent}" for agent in AGENTS]
    content = run.state["generated_content"]
    assert content["title"] == HAPPY_TITLE and content["tags"] == list(HAPPY_TAGS)
    assert len(run.state["images"]) == 3
    for image in run.state["images"]:
        with Image.open(image["path"]) as png:
            assert (png.size, png.mode) == ((1080, 1440), "RGB")

    # Structured outputs went out as forced function calls.
    forced = {r.forced_tool for r in requests if r.forced_tool}
    assert set(FORCED) - {"EvidencePack"} <= forced
    assert "search_knowledge" in forced  # the research agent's first, forced search
    # Tool results went back to the model on the next turn of each loop.
    research_turn = next(r for r in requests if "EvidencePack" in r.tools)
    assert research_turn.tool_results and research_turn.forced_tool is None
    # One image turn asked for all three images; once drawn, no further model call.
    assert len([r for r in requests if "generate_image" in r.tools]) == 1
    # Only the writer streamed, and its tokens reached the messages stream.
    writer = [r for r in requests if not r.tools]
    assert len(writer) == 1 and writer[0].stream
    assert all(not r.stream for r in requests if r.tools)
    assert {node for node, _ in run.tokens} == {"writer_agent"}
    assert len(run.tokens) > 5
    streamed = "".join(token for _, token in run.tokens)
    assert streamed.startswith(f"# {HAPPY_TITLE}")
