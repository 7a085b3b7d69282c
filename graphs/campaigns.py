"""Atelier's campaign hooks: what the engine's campaigns mean here (docs/campaigns.md).

The engine stores campaigns, drives their runs and publishes their posts
(`engine.campaigns`); this module tells it, as `AtelierCampaigns`
(`engine.CampaignHooks`, built by `app.composition`):

- which assistant plans — `campaign_planner` (`graphs.campaign_planner`), given the
  brief, the number of posts, the platforms, the writing assistant's brand preset
  and the topics to avoid (`plan_input`), and how its result becomes topics
  (`read_plan`);
- which assistants write — the `atelier` graph (the built-in assistant or a brand
  preset of it), for the platforms of the rules table (`check_campaign`);
- how an item becomes a run's input (`write_input`): its first platform's post is
  written from the brief, topic, angle and key points (and, after a rejection, the
  reason: the writer reads the request); each other platform's is adapted from it
  (`adapt_from`, `agentkit.adaptation`); every run is `auto_confirm`;
- how a run's values become a platform's post (`read_post`): title, plain-text
  body, tags and images of the published attempt, passed when the run's outcome is
  `completed` (every check of its platform passed), else the failing checks named;
- how a post is handed to a publisher (`publish_fields`): `title`, `body`, `tags`,
  `image_urls` (absolute, signed when API keys are on, so they load without a key),
  `platform` and `topic`;
- when two topics are too alike (`topic_conflict`, `agentkit.campaign_plan`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentkit.brand import preset_of
from agentkit.campaign_plan import MAX_PLAN_POSTS, near_duplicate_of
from agentkit.chat import image_link
from agentkit.platforms import PLATFORMS
from engine import Assistant, CampaignItem, CampaignRecord, InvalidFields
from providers.asset_links import AssetLinks
from providers.assets import is_valid_asset_id

#: The assistant that plans campaigns.
PLANNER = "campaign_planner"
#: The graph whose assistants write a campaign's posts.
WRITER_GRAPH = "atelier"
#: Characters of a run's request (`agentkit.state.RequestText`).
MAX_REQUEST_CHARS = 4000
#: Failing checks named in a post's reason at most.
REASON_CHECKS = 5


@dataclass(frozen=True)
class PlanResult:
    """What a planner run produced (an `engine.campaigns.PlanOutcome`)."""

    items: list[dict[str, Any]]
    message: str
    complete: bool


@dataclass(frozen=True)
class PostResult:
    """What a post's run produced (an `engine.campaigns.PostOutcome`)."""

    post: dict[str, Any] | None
    passed: bool
    reason: str | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)


def _block_line(block: Mapping[str, Any]) -> str:
    text = str(block.get("text") or "").strip()
    return f"- {text}" if block.get("type") == "list_item" else text


def plain_body(blocks: Sequence[Mapping[str, Any]]) -> str:
    """Return a post's body blocks as the plain text a platform receives (no Markdown)."""
    return "\n\n".join(line for line in map(_block_line, blocks) if line)


def _mapping(value: Any) -> Mapping[str, Any]:
    """Return a value a model's run wrote when it is an object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _failing(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    checks = _list(_mapping(result.get("quality")).get("checks"))
    return [dict(c) for c in checks if isinstance(c, Mapping) and not c.get("passed")]


class AtelierCampaigns:
    """Atelier's `engine.CampaignHooks` (see the module docstring)."""

    planner = PLANNER

    def __init__(self, links: AssetLinks | None = None) -> None:
        """Sign image links with `links` (None: the service runs open, links stay plain)."""
        self._links = links

    def check_campaign(self, writer: Assistant, platforms: Sequence[str]) -> None:
        """Check that `writer` writes posts and every platform is one of the rules table."""
        if writer.graph_id != WRITER_GRAPH:
            raise InvalidFields.at(
                "assistant_id",
                f"a campaign is written by an assistant of the {WRITER_GRAPH} graph "
                f"({WRITER_GRAPH} or a brand preset of it), not of {writer.graph_id}",
            )
        seen: set[str] = set()
        for index, platform in enumerate(platforms):
            if platform not in PLATFORMS:
                raise InvalidFields.at(
                    f"platforms.{index}", f"a platform id: one of {', '.join(PLATFORMS)}"
                )
            if platform in seen:
                raise InvalidFields.at(f"platforms.{index}", "platforms must not repeat")
            seen.add(platform)

    def plan_input(
        self,
        campaign: CampaignRecord,
        *,
        count: int,
        avoid: Sequence[str],
        writer: Assistant,
    ) -> dict[str, Any]:
        """Return the planner's input: the brief, `count` topics, platforms, brand, avoid."""
        record = writer.record
        brand = preset_of(record.context, record.config) if record is not None else {}
        planned: dict[str, Any] = {
            "brief": campaign.brief,
            "posts": max(1, min(count, MAX_PLAN_POSTS)),
            "platforms": list(campaign.platforms),
            "avoid": [topic[:300] for topic in avoid if topic.strip()][-200:],
        }
        if brand:
            planned["brand"] = brand
        return planned

    def read_plan(self, values: Mapping[str, Any] | None) -> PlanResult:
        """Return the planner's topics and its message (none when it wrote no result)."""
        result = _mapping(_mapping(values).get("result"))
        items = [
            {
                "topic": str(item.get("topic") or ""),
                "angle": str(item.get("angle") or ""),
                "key_points": [str(p) for p in _list(item.get("key_points"))],
                "first_platform": str(item.get("first_platform") or ""),
            }
            for item in _list(result.get("items"))
            if isinstance(item, Mapping) and item.get("topic")
        ]
        message = str(result.get("message") or "The planner wrote no plan.")
        return PlanResult(items, message, result.get("outcome") == "completed")

    def write_input(
        self,
        campaign: CampaignRecord,
        item: CampaignItem,
        platform: str,
        source: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """Return an `atelier` run's input: the item's post for `platform` (see the module)."""
        name = PLATFORMS[platform].name
        reason = f"\n\n上一版被退回，修改意见：{item.reason}" if item.reason else ""
        if source is None:
            points = "\n".join(f"- {p}" for p in item.key_points)
            about = f"本篇选题：{item.topic}\n切入角度：{item.angle}" + (
                f"\n要点：\n{points}" if points else ""
            )
            room = MAX_REQUEST_CHARS - len(about) - len(reason) - 40
            request = f"为{name}写一篇帖子。活动简报：{campaign.brief[: max(room, 200)]}"
            text = f"{request}\n\n{about}{reason}"
            return {"request": text[:MAX_REQUEST_CHARS], "platform": platform, "auto_confirm": True}
        adapted: dict[str, Any] = {
            "platform": item.platforms[0],
            "title": str(source.get("title") or "")[:200],
            "body": str(source.get("markdown") or source.get("body") or " ")[:20_000],
            "tags": [str(t)[:50] for t in source.get("tags") or [] if str(t)][:30],
            "images": [i for i in source.get("images") or [] if is_valid_asset_id(str(i))][:9],
        }
        text = f"把这篇帖子改编成{name}的帖子，选题：{item.topic}{reason}"
        return {
            "request": text[:MAX_REQUEST_CHARS],
            "platform": platform,
            "auto_confirm": True,
            "adapt_from": adapted,
        }

    def read_post(self, values: Mapping[str, Any] | None, platform: str) -> PostResult:
        """Return the published attempt's post, and whether it passed its platform's checks."""
        values = _mapping(values)
        result = _mapping(values.get("result"))
        shown = _mapping(result.get("post"))
        blocks = [b for b in _list(shown.get("blocks")) if isinstance(b, Mapping)]
        failing = _failing(result)
        if not shown.get("title") and not blocks:
            reason = str(result.get("message") or "the run wrote no post")
            return PostResult(None, False, reason, failing)
        content = _mapping(values.get("generated_content"))
        post = {
            "title": str(shown.get("title") or ""),
            "body": plain_body(blocks),
            "markdown": str(content.get("body") or plain_body(blocks)),
            "tags": [str(t) for t in _list(shown.get("tags"))],
            "images": [
                str(i.get("asset_id"))
                for i in _list(result.get("images"))
                if isinstance(i, Mapping) and is_valid_asset_id(str(i.get("asset_id") or ""))
            ],
            "verdict": _mapping(result.get("quality")).get("verdict"),
            "checks": failing,
        }
        if result.get("outcome") == "completed":
            return PostResult(post, True, None, failing)
        named = [f"{c.get('name')}: {c.get('detail') or ''}".strip() for c in failing]
        reason = "; ".join(named[:REASON_CHECKS]) or str(result.get("message") or "")
        return PostResult(post, False, reason or "the post did not pass its checks", failing)

    def publish_fields(
        self, campaign: CampaignRecord, item: CampaignItem, platform: str, post: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the post as a publisher gets it (image URLs absolute and loadable)."""
        images = [str(i) for i in post.get("images") or []]
        return {
            "title": str(post.get("title") or ""),
            "body": str(post.get("body") or ""),
            "tags": [str(t) for t in post.get("tags") or []],
            "image_urls": [
                image_link(f"/assets/{i}", campaign.base_url, self._links) for i in images
            ],
            "platform": platform,
            "topic": item.topic,
        }

    def topic_conflict(self, topic: str, others: Sequence[str]) -> str | None:
        """Return the topic of `others` that `topic` nearly repeats (bigram Jaccard), or None."""
        found = near_duplicate_of(topic, others)
        return found[0] if found is not None else None


__all__ = ["PLANNER", "AtelierCampaigns", "PlanResult", "PostResult", "plain_body"]
