"""`agentkit.common.tool_spec`: schemas converted once, the request unchanged."""

from __future__ import annotations

from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI

from agentkit.common import tool_spec
from agentkit.tools import search_knowledge
from nodes.research_evidence_agent import EvidencePack
from nodes.supervisor import SupervisorDecision


def payload_tools(tools: list[object], choice: str | None = None) -> object:
    model = ChatOpenAI(model="m", api_key="k", base_url="http://127.0.0.1:9/v1")  # type: ignore[arg-type]
    bound = model.bind_tools(tools, tool_choice=choice)  # type: ignore[arg-type]
    return model._get_request_payload([("human", "hi")], **bound.kwargs)  # type: ignore[attr-defined]


def test_a_schema_is_converted_once_and_binds_the_same_request() -> None:
    for tool in (SupervisorDecision, EvidencePack, search_knowledge):
        spec = tool_spec(tool)
        assert tool_spec(tool) is spec
        assert spec == convert_to_openai_tool(tool)
    classes = payload_tools([SupervisorDecision, search_knowledge], "SupervisorDecision")
    specs = payload_tools(
        [tool_spec(SupervisorDecision), tool_spec(search_knowledge)], "SupervisorDecision"
    )
    assert specs == classes
