"""Adapting a finished post for another platform: the input that asks for it (docs/platforms.md).

A campaign writes each item's post for its first platform, then adapts it for every
other platform as a run of its own: an `atelier` run whose input carries
``adapt_from`` (`AdaptFrom`: the source post's platform, title, body, tags and
images) and whose ``platform`` is the target. Such a run plans as usual (the
source post is part of the request every agent reads, `agentkit.post.
effective_request`; no clarification question is asked), but instead of the team
the writer rewrites the post under the target platform's rules
(`nodes.writer_agent.adapt_post`), reusing the source's images where the target
takes images (`reused_images`), and the critic checks the adapted post under the
target's rules. Without ``adapt_from`` nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Required

from pydantic import ConfigDict, Field, StringConstraints
from typing_extensions import TypedDict

from agentkit.platforms import PlatformId, PlatformRules
from providers.assets import ASSET_ID_LENGTH

SourceAssetId = Annotated[str, StringConstraints(pattern=rf"^[0-9a-f]{{{ASSET_ID_LENGTH}}}$")]
SourceTag = Annotated[str, StringConstraints(min_length=1, max_length=50)]


class AdaptFrom(TypedDict, total=False):
    """The post to adapt: as it was written for its own platform."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    platform: Required[
        Annotated[PlatformId, Field(description="The platform the post was written for.")]
    ]
    title: Annotated[
        str,
        StringConstraints(max_length=200),
        Field(description="Its title.", examples=["学生党平价护肤：3步搞定"]),
    ]
    body: Required[
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=20_000),
            Field(description="Its body, as written (Markdown).", examples=["预算有限也能……"]),
        ]
    ]
    tags: Annotated[list[SourceTag], Field(max_length=30, description="Its tags, without # marks.")]
    images: Annotated[
        list[SourceAssetId],
        Field(max_length=9, description="Its images' asset ids, in order (the cover first)."),
    ]


def reused_images(source: Mapping[str, Any] | None, rules: PlatformRules | None) -> list[str]:
    """Return the source's image ids the target platform takes: none, or up to its maximum."""
    ids = [str(i) for i in (source or {}).get("images") or []]
    if rules is None or not rules.takes_images:
        return []
    return ids if rules.images_max is None else ids[: rules.images_max]
