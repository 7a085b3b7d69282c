"""Image providers: draw a post's images locally with Pillow or ask an images API.

`LocalCardProvider` needs no network and no model: it renders real 3:4 PNG
cards (a cover, or a heading + body card) in the post's palette with a
CJK-capable font. `OpenAIImageProvider` calls any OpenAI-compatible
`/images/generations` endpoint. Both implement `ImageProvider`; the image
agent gets one from `build_image_provider` and stores the bytes in the
`AssetStore`.

The package's parts, one concern a module: `contract` (request, result,
protocol, error), `colour` (palette roles and contrast), `text` (CJK layout),
`cards` (the local renderer), `openai_client` (the images API) and `gate`
(how many images one provider draws at once). Callers
import from `providers.images`.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from pydantic import SecretStr

from core.settings import IMAGE_PROVIDERS
from providers.images.cards import LocalCardProvider
from providers.images.colour import variant_hue
from providers.images.contract import (
    CARD_HEIGHT,
    CARD_WIDTH,
    DEFAULT_PALETTE,
    GeneratedImage,
    ImageKind,
    ImageProvider,
    ImageProviderError,
    ImageRequest,
)
from providers.images.openai_client import OpenAIImageProvider

__all__ = [
    "CARD_HEIGHT",
    "CARD_WIDTH",
    "DEFAULT_PALETTE",
    "IMAGE_PROVIDERS",
    "GeneratedImage",
    "ImageKind",
    "ImageProvider",
    "ImageProviderError",
    "ImageRequest",
    "LocalCardProvider",
    "OpenAIImageProvider",
    "build_image_provider",
    "variant_hue",
]


def build_image_provider(
    name: str,
    *,
    font_path: str | Path | None = None,
    openai_base_url: str | None = None,
    openai_api_key: SecretStr | str | None = None,
    openai_model: str = "gpt-image-1",
    openai_size: str = "1024x1536",
    timeout: float = 60.0,
    max_retries: int = 2,
    client: httpx.AsyncClient | None = None,
    concurrency: int = 4,
    local_concurrency: int = 0,
) -> ImageProvider:
    """Return the image provider called `name` ("local" or "openai").

    `concurrency` bounds the images API's requests in flight (`IMAGE_CONCURRENCY`),
    `local_concurrency` the local cards rendered at once (0: the cores this process
    may use); see `providers.images.gate`.

    Raises:
        ValueError: Unknown name, or "openai" without a base URL or API key.
        FontNotFoundError: "local" and no CJK-capable font is available.
    """
    key = name.strip().lower()
    if key == "local":
        return LocalCardProvider(font_path=font_path, concurrency=local_concurrency)
    if key == "openai":
        secret = (
            openai_api_key.get_secret_value()
            if isinstance(openai_api_key, SecretStr)
            else openai_api_key
        )
        if not openai_base_url or not secret:
            raise ValueError(
                "image provider 'openai' needs IMAGE_API_BASE_URL and IMAGE_API_KEY; "
                "set both or use IMAGE_PROVIDER=local"
            )
        return OpenAIImageProvider(
            openai_base_url,
            openai_api_key,
            model=openai_model,
            size=openai_size,
            timeout=timeout,
            max_retries=max_retries,
            client=client,
            concurrency=concurrency,
        )
    allowed = ", ".join(repr(p) for p in IMAGE_PROVIDERS)
    raise ValueError(f"unknown image provider {name!r}; allowed: {allowed}")
