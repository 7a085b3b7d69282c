"""The image provider contract: what the image agent asks for and what a provider returns.

`ImageRequest` is one image of a post; `ImageProvider` is anything that turns
one into `GeneratedImage` bytes; `ImageProviderError` is how a provider says it
could not, with a message safe to log.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

CARD_WIDTH = 1080
CARD_HEIGHT = 1440

DEFAULT_PALETTE: tuple[str, ...] = ("#f7e6d7", "#f2c4ad", "#e07a5f", "#81b29a", "#3d405b")
"""Warm default: cream, peach, terracotta, sage, ink — used when a request has no palette."""


ImageKind = Literal["cover", "content", "detail"]

_HEX_RE = re.compile(r"^#?(?:[0-9a-fA-F]{6}|[0-9a-fA-F]{3})$")


class ImageRequest(BaseModel):
    """One image of a post, as the image agent asks for it."""

    slot: int = Field(ge=1, le=99, description="Position of the image in the post.", examples=[1])
    kind: ImageKind = Field(
        default="content", description="cover, content or detail card.", examples=["cover"]
    )
    title: str = Field(
        default="",
        max_length=200,
        description="Card heading (the post title on a cover).",
        examples=["学生党平价护肤清单"],
    )
    text: str = Field(
        default="",
        max_length=4000,
        description="Card body text (a subtitle on a cover).",
        examples=["三款百元内精华，成分讲清楚"],
    )
    prompt: str = Field(
        default="",
        max_length=4000,
        description="Visual description for generative providers.",
        examples=["flat lay of skincare bottles on a pastel desk, soft daylight"],
    )
    palette: list[str] | None = Field(
        default=None,
        max_length=8,
        description="Colours as #rrggbb, background first; None uses a warm default.",
        examples=[["#f7e6d7", "#e07a5f", "#3d405b"]],
    )
    variant: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="0 for a card's first drawing, n for its n-th redraw: the local cards turn "
        "the palette's hue a little and arrange their background anew for each variant "
        "(generative providers draw anew anyway).",
    )
    width: int = Field(default=CARD_WIDTH, ge=256, le=4096, description="Width in pixels.")
    height: int = Field(default=CARD_HEIGHT, ge=256, le=4096, description="Height in pixels.")

    @field_validator("palette")
    @classmethod
    def _normalise_palette(cls, value: list[str] | None) -> list[str] | None:
        """Accept #rgb / #rrggbb (with or without #) and store lower-case #rrggbb."""
        if value is None:
            return None
        normalised = []
        for colour in value:
            if not isinstance(colour, str) or not _HEX_RE.match(colour.strip()):
                raise ValueError(f"palette colour {colour!r} is not a hex colour like #e07a5f")
            digits = colour.strip().lstrip("#").lower()
            if len(digits) == 3:
                digits = "".join(c * 2 for c in digits)
            normalised.append(f"#{digits}")
        return normalised or None


class GeneratedImage(BaseModel):
    """Encoded image bytes a provider produced."""

    model_config = ConfigDict(frozen=True)

    data: bytes = Field(description="Encoded image bytes.", repr=False)
    content_type: str = Field(description="MIME type of `data`.", examples=["image/png"])
    width: int = Field(ge=1, description="Width in pixels.")
    height: int = Field(ge=1, description="Height in pixels.")


@runtime_checkable
class ImageProvider(Protocol):
    """Something that turns an `ImageRequest` into image bytes."""

    name: str

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        """Produce the image for `req`."""
        ...


class ImageProviderError(RuntimeError):
    """An image could not be produced; the message is safe to log (no secrets)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        """Record the message and, when the API answered, its HTTP status."""
        super().__init__(message)
        self.status_code = status_code
