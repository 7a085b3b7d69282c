"""A chat model that takes its time, for timeout tests (the scripted fakes answer at once)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatResult


class SlowChat(BaseChatModel):
    """Answer nothing for `delay` seconds, asynchronously, then fail loudly.

    A caller with a shorter timeout cancels it long before; a caller without one
    sees the assertion error.
    """

    delay: float = 30.0

    @property
    def _llm_type(self) -> str:
        return "slow"

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Accept tools like a real chat model (they are never called)."""
        return self.bind(tool_choice=tool_choice, **kwargs)

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("SlowChat is async only")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
        await asyncio.sleep(self.delay)
        raise AssertionError(f"SlowChat answered after {self.delay}s: the caller did not time out")
