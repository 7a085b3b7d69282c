"""Writer-only streaming is declared once (core.settings.STREAMING_ROLES) and read everywhere."""

from __future__ import annotations

from core.settings import LLM_ROLES, STREAMING_ROLES
from graphs.assistants import writer_tokens_only
from providers.llm import role_tags, streams_to_users


def test_only_the_streaming_roles_reach_users() -> None:
    assert {"writer_agent"} == STREAMING_ROLES
    for role in LLM_ROLES:
        metadata = {"tags": ["seq:step:1", *role_tags(role)], "langgraph_node": role}
        assert streams_to_users(metadata) is (role in STREAMING_ROLES), role
        assert ("nostream" in role_tags(role)) is (role not in STREAMING_ROLES), role
    # A message with no role tag (a node returning a message itself) stays off the stream.
    assert not streams_to_users({"langgraph_node": "writer_agent"})
    assert not streams_to_users({"tags": None})


def test_the_service_filters_tokens_with_the_same_rule() -> None:
    assert writer_tokens_only is streams_to_users
