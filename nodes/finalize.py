"""Finalize (GenUI): assemble the result payload a frontend renders (PRODUCT.md §2.5).

Every run ends here — after a passing attempt, when retries are exhausted, when
the planner could not tell what was wanted, and when an LLM failed — and
`result` always says which:

```
{
  "outcome": "completed" | "exhausted" | "needs_clarification" | "failed",
  "message": str,                     # one line for the user: what happened, what to do
  "post": {"title": str, "blocks": [{"type": "heading"|"text"|"list_item", "text": str}],
           "tags": [str]},            # empty when no attempt produced a post
  "images": [{"asset_id", "url", "slot", "alt"}],
  "quality": {"verdict", "score", "threshold", "judge", "dimensions", "checks",
              "exhausted", "attempts"},   # of the published attempt; attempts = how many ran
  "attempts": [{"attempt", "verdict", "score", "feedback", "source"}],
  "revision": "edit" | "card" | None,
  "usage": {"roles": {role: {...}}, "total": {...}},
  "ui": [{"component": name, "props": {...}}, ...],
}
```

`quality.score` (and each attempt's `score`) is the judge's score, or null when
no judge gave one: `quality.verdict` is then `not_judged` (or a failing
verdict of the code checks) and `quality.judge` is `unavailable`.

Outcome `completed` means the run ended on purpose with a post nothing found
wrong: either the judge passed it (verdict `passed`, with its score), or the
judge was unavailable and every code check passed (verdict `not_judged`, score
null — see `nodes.critic`). The message says which; a not-judged post is never
called passed.

Which attempt is published: completed → the last attempt; exhausted →
the best one (`agentkit.post.best_attempt`: fewest failing checks, then highest
score); failed → the best earlier attempt if there was one, else none. A
revision is the exception: when the last attempt is a person's edit or a redrawn
card (`source` `edit` / `card`), it is published whatever its score — the person
asked for that version, and an older attempt that scored higher is not what they
edited; the verdict and the message say what still fails. `result.revision` names
the kind of revision (None for a team attempt).

When the published attempt is not the state's latest draft (an earlier attempt
won), finalize writes its post, body blocks, images and image plans back to the
state, so an edit or a card redraw that follows starts from the post the user sees.

`usage` is the LLM usage of the thread's runs so far by role (`providers.usage`:
calls, metered calls, prompt and completion tokens — null when no call reported
them —, seconds in calls, and `cost` {input, output, total, currency} from
`LLM_PRICES` — null unless every call was metered and priced), with `total` over
all roles (its cost null unless every role's is known): the post's cost.

`ui` lists components in display order, each `{"component": name, "props":
{...}}`, so a frontend maps names to widgets without knowing the graph:

- ``PostCard`` — props ``{title, blocks, tags, platform, cover}`` (cover: the
  first image or None); present when there is a post;
- ``ImageGallery`` — props ``{images}``; present when there are images;
- ``QualityReport`` — props ``{verdict, score, threshold, judge, exhausted,
  dimensions, checks, attempts}`` (attempts: the per-attempt list); present
  when at least one attempt was judged;
- ``ActionPanel`` — props ``{outcome, message, actions: [{id, label}]}``;
  always present, last. Action ids: copy, regenerate, accept, retry,
  edit_request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from agentkit.chat import base_url_of, post_message_update, post_text
from agentkit.context import AtelierContext, context_of
from agentkit.pipeline_routing import NOT_JUDGED, REVISIONS
from agentkit.post import best_attempt, post_blocks, post_platform
from agentkit.state import Outcome, PipelineState
from core.events import stage_events
from providers.usage import usage_totals

ACTIONS: dict[str, list[dict[str, str]]] = {
    "completed": [
        {"id": "copy", "label": "复制全文"},
        {"id": "regenerate", "label": "重新生成"},
    ],
    "exhausted": [
        {"id": "accept", "label": "就用这一版"},
        {"id": "retry", "label": "再试一次"},
        {"id": "edit_request", "label": "修改需求"},
    ],
    "needs_clarification": [{"id": "edit_request", "label": "补充需求后重试"}],
    "failed": [{"id": "retry", "label": "重试"}],
}
UNKNOWN_INTENT_MESSAGE = "没能理解你想要什么内容。请说明主题、写给谁看、想达到什么目的后再试。"


def _image(image: Mapping[str, Any]) -> dict[str, Any]:
    asset_id = str(image.get("asset_id") or "")
    return {
        "asset_id": asset_id,
        "url": image.get("url") or f"/assets/{asset_id}",
        "slot": image.get("slot"),
        "alt": image.get("alt") or "",
    }


def _outcome(state: Mapping[str, Any]) -> Outcome:
    if state.get("failure"):
        return "failed"
    intent = state.get("intent") or {}
    if intent.get("action") not in ("create_post", "revise_post"):
        return "needs_clarification"
    verdict = state.get("verdict") or {}
    done = verdict.get("passed") or verdict.get("verdict") == NOT_JUDGED
    return "completed" if done else "exhausted"


def _published(state: Mapping[str, Any], outcome: Outcome) -> Mapping[str, Any] | None:
    attempts = list(state.get("attempts") or [])
    if outcome == "completed":
        return attempts[-1] if attempts else None
    if outcome in ("exhausted", "failed"):
        last = attempts[-1] if attempts else None
        if last is not None and last.get("source") in REVISIONS and last.get("post"):
            return last  # the person's version, not an older one that scored higher
        return best_attempt(attempts)
    return None


def _message(
    state: Mapping[str, Any], outcome: Outcome, chosen: Mapping[str, Any] | None, threshold: float
) -> str:
    ran = len(state.get("attempts") or [])
    if outcome == "failed":
        return str((state.get("failure") or {}).get("message") or "生成失败，请重试。")
    if outcome == "needs_clarification":
        return str((state.get("intent") or {}).get("message") or "") or UNKNOWN_INTENT_MESSAGE
    assert chosen is not None
    score = chosen.get("score")
    scored = f"得分 {float(score):.2f}" if score is not None else "未评审"
    if outcome == "completed" and chosen.get("verdict") == NOT_JUDGED:
        return (
            f"已完成：第 {chosen['attempt']} 次尝试通过了程序检查，但评审模型没有给出评审"
            "（未评审，无得分），请确认后使用。"
        )
    if outcome == "completed":
        return f"已完成：第 {chosen['attempt']} 次尝试通过质检（{scored}）。"
    if chosen.get("source") in REVISIONS:
        return (
            f"修改后的版本（第 {chosen['attempt']} 次）未达到质检标准（{scored}，阈值 "
            f"{threshold:.2f}）。已按你的修改发布，请按评审意见再改或确认后使用。"
        )
    return (
        f"尝试了 {ran} 次仍未达到质检标准（阈值 {threshold:.2f}）。"
        f"下面是最好的一版（第 {chosen['attempt']} 次，{scored}），请确认后使用。"
    )


def build_result(state: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """Assemble the §2.5 payload from the pipeline state (see the module docstring)."""
    outcome = _outcome(state)
    chosen = _published(state, outcome)
    if outcome == "exhausted" and chosen is None:
        # No attempt produced a post at all: nothing to publish, say so plainly.
        outcome = "failed"
    attempts = list(state.get("attempts") or [])
    post_source = (chosen or {}).get("post") or {}
    post = {
        "title": str(post_source.get("title") or ""),
        "blocks": post_blocks(str(post_source.get("body") or "")),
        "tags": [str(t) for t in post_source.get("tags") or []],
    }
    images = [_image(img) for img in (chosen or {}).get("images") or []]
    exhausted = outcome == "exhausted"
    quality = {
        "verdict": (chosen or {}).get("verdict"),
        "score": (chosen or {}).get("score"),
        "threshold": threshold,
        "judge": (chosen or {}).get("judge"),
        "dimensions": dict((chosen or {}).get("dimensions") or {}),
        "checks": list((chosen or {}).get("checks") or []),
        "exhausted": exhausted,
        "attempts": len(attempts),
    }
    history = [
        {
            "attempt": a["attempt"],
            "verdict": a.get("verdict"),
            "score": a.get("score"),
            "feedback": a.get("feedback") or "",
            "source": a.get("source") or "team",
        }
        for a in attempts
    ]
    message = _message(state, outcome, chosen, threshold)
    if outcome == "failed" and chosen is not None:
        message += f"（下面是此前最好的一版：第 {chosen['attempt']} 次。）"

    ui: list[dict[str, Any]] = []
    if post["title"] or post["blocks"]:
        ui.append(
            {
                "component": "PostCard",
                "props": {
                    **post,
                    "platform": post_platform(state),
                    "cover": images[0] if images else None,
                },
            }
        )
    if images:
        ui.append({"component": "ImageGallery", "props": {"images": images}})
    if attempts:
        ui.append(
            {
                "component": "QualityReport",
                "props": {**quality, "attempts": history},
            }
        )
    ui.append(
        {
            "component": "ActionPanel",
            "props": {"outcome": outcome, "message": message, "actions": ACTIONS[outcome]},
        }
    )
    return {
        "outcome": outcome,
        "message": message,
        "post": post,
        "images": images,
        "quality": quality,
        "attempts": history,
        "revision": (chosen or {}).get("source")
        if (chosen or {}).get("source") in REVISIONS
        else None,
        "usage": {
            "roles": dict(state.get("usage") or {}),
            "total": usage_totals(state.get("usage")),
        },
        "ui": ui,
    }


def published_artefacts(state: Mapping[str, Any]) -> dict[str, Any]:
    """Return the state update that makes the published attempt the state's draft again.

    Empty when the published attempt is the latest (the state already holds it) or
    nothing was published (see the module docstring).
    """
    attempts = list(state.get("attempts") or [])
    chosen = _published(state, _outcome(state))
    if chosen is None or chosen is (attempts[-1] if attempts else None):
        return {}
    update: dict[str, Any] = {
        "generated_content": dict(chosen["post"]),
        "body_blocks": list(chosen.get("body_blocks") or []),
        "images": list(chosen.get("images") or []),
        "generated_image_asset_ids": [i["asset_id"] for i in chosen.get("images") or []],
    }
    if chosen.get("image_plans"):
        update["image_plans"] = list(chosen["image_plans"])
    return update


async def finalize(
    state: PipelineState, runtime: Runtime[AtelierContext], config: RunnableConfig
) -> dict[str, Any]:
    """Write the run's result payload, and show it in the conversation.

    The post replaces the run's draft message in place (`agentkit.chat`): same id,
    its text now the published post with absolute image URLs (the server's base
    URL from the run's config), signed when API keys are on (`ctx.asset_links`);
    a run without a post says why in a new message.
    """
    ctx = context_of(runtime)
    with stage_events(runtime.stream_writer, "finalize", int(state.get("attempt") or 0)):
        result = build_result(state, ctx.critic_pass_threshold)
        text = post_text(result, base_url_of(config), ctx.asset_links)
        shown = post_message_update(text, None, state.get("post_message_id"))
        # `redraw` cleared: a card redraw runs only when asked for after this (see
        # agentkit.pipeline_routing.route_after_finalize).
        return {"result": result, "redraw": None, **published_artefacts(state), **shown}
