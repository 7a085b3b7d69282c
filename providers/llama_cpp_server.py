"""llama-cpp-python's server, with the token usage of streamed answers reported.

Run as `python -m providers.llama_cpp_server <llama_cpp.server arguments>`; the
embedded model is served this way (`providers.local_llm.server_command`).

Why it exists: llama-cpp-python's server (0.3.x) reports `usage` only in
*non-streamed* answers. Its streamed chat chunks are converted from text-completion
chunks that never carry usage, and it ignores `stream_options.include_usage`
(its request model has no such field). Atelier streams every embedded call — an
abandoned non-streamed call keeps the server busy to `max_tokens`, see
docs/models.md — so without this every role's tokens read unknown.

What it changes, and nothing else: a streamed chat completion ends with one more
chunk, `{"choices": [], "usage": {...}}`, the final usage chunk OpenAI (and
llama.cpp's own `llama-server`) send when a client asks for
`stream_options.include_usage`, which `ChatOpenAI(stream_usage=True)` reads into
the message's `usage_metadata`. The counts are the library's own: the prompt is the
token list `Llama.generate` is given (the chat template applied and tokenized by
llama.cpp), the completion the tokens it yielded that the completion kept (an
end-of-generation token is not part of it) — the numbers a non-streamed answer
reports. Requests are served one at a time (the server holds its model lock for
a whole stream), so one count per model instance is enough.

An external `llama_cpp.server` behind `LLM_BASE_URL` is not changed by this: its
streamed calls stay without usage, and their tokens read unknown (never zero).
"""

from __future__ import annotations

import functools
import logging
import runpy
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_COUNT_ATTRIBUTE = "_atelier_token_counts"


def count_generated_tokens(generate: Callable[..., Iterator[int]]) -> Callable[..., Iterator[int]]:
    """Wrap `Llama.generate` so the instance adds up [prompt, completion] token counts.

    A chat format that completes more than once for one answer adds every completion.
    """
    import llama_cpp

    @functools.wraps(generate)
    def counted(self: Any, tokens: Any, *args: Any, **kwargs: Any) -> Iterator[int]:
        counts = getattr(self, _COUNT_ATTRIBUTE, None) or [0, 0]
        setattr(self, _COUNT_ATTRIBUTE, counts)
        counts[0] += len(tokens)
        for token in generate(self, tokens, *args, **kwargs):
            if not llama_cpp.llama_vocab_is_eog(self._model.vocab, token):
                counts[1] += 1
            yield token

    return counted


def end_streams_with_usage(create: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap `Llama.create_chat_completion` so a streamed answer ends with a usage chunk."""

    @functools.wraps(create)
    def create_chat_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        setattr(self, _COUNT_ATTRIBUTE, None)  # counted afresh for each answer
        result = create(self, *args, **kwargs)
        if not kwargs.get("stream"):
            return result
        return _with_usage_chunk(self, result)

    return create_chat_completion


def _with_usage_chunk(llama: Any, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    last: dict[str, Any] | None = None
    for chunk in chunks:
        last = chunk
        yield chunk
    counts = getattr(llama, _COUNT_ATTRIBUTE, None)
    if last is None or counts is None:
        return
    prompt, completion = counts
    yield {
        "id": last.get("id"),
        "object": "chat.completion.chunk",
        "created": last.get("created", int(time.time())),
        "model": last.get("model"),
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def install() -> None:
    """Patch `llama_cpp.Llama` so streamed chat completions report their usage.

    A `llama_cpp` package without `Llama` (not llama-cpp-python), or a release
    without what the counting reads, is left as it is: its streamed answers then
    carry no usage, and their tokens read unknown, as before.
    """
    try:
        import llama_cpp
        from llama_cpp import Llama as llama
    except ImportError:
        return
    if not hasattr(llama_cpp, "llama_vocab_is_eog"):
        log.warning("llama-cpp-python %s: streamed answers report no usage", llama_cpp.__version__)
        return
    if not hasattr(llama.generate, "__wrapped__"):
        llama.generate = count_generated_tokens(llama.generate)  # type: ignore[method-assign,assignment]
        llama.create_chat_completion = end_streams_with_usage(  # type: ignore[method-assign]
            llama.create_chat_completion
        )


def main() -> None:
    """Serve like `python -m llama_cpp.server`, streamed usage included."""
    install()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
