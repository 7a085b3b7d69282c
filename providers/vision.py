"""Measure a reference image: size, orientation, dominant colours, brightness.

The reference intelligence agent feeds these numbers to the writer and the
image planner, and the local card provider paints with the palette, so posts
pick up the look of the user's reference images without a vision model.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Literal

from PIL import Image, ImageStat, UnidentifiedImageError
from pydantic import BaseModel, Field

PALETTE_SIZE = 5
"""Dominant colours reported per image."""

# Pixels are counted on a thumbnail: dominant colours do not need full resolution.
_SAMPLE_SIZE = (160, 160)
# Within this ratio of 1.0 an image counts as square.
_SQUARE_TOLERANCE = 0.03

Orientation = Literal["portrait", "landscape", "square"]


class ImageAnalysis(BaseModel):
    """What a reference image looks like, in numbers an LLM and a renderer can use."""

    width: int = Field(ge=1, description="Width in pixels.", examples=[1080])
    height: int = Field(ge=1, description="Height in pixels.", examples=[1440])
    aspect: float = Field(gt=0, description="Width divided by height.", examples=[0.75])
    orientation: Orientation = Field(
        description="portrait (taller), landscape (wider) or square.", examples=["portrait"]
    )
    palette: list[str] = Field(
        description="Up to 5 dominant colours as #rrggbb, most frequent first.",
        examples=[["#f6e3d4", "#e07a5f", "#3d405b"]],
    )
    brightness: float = Field(
        ge=0, le=1, description="Mean perceived luminance, 0 black to 1 white.", examples=[0.72]
    )
    mode: str = Field(description="Pillow mode of the source image.", examples=["RGB"])


def analyze_image(source: str | Path | bytes) -> ImageAnalysis:
    """Analyze an image file or encoded image bytes.

    Transparent images are flattened onto white first, which is how they show
    on a light page, so transparent pixels do not count as black.

    Args:
        source: A file path, or the encoded bytes of an image.

    Returns:
        The image's size, orientation, palette, brightness and mode.

    Raises:
        ValueError: The source is not a readable image.
        FileNotFoundError: The path does not exist.
    """
    stream: io.BytesIO | Path = io.BytesIO(source) if isinstance(source, bytes) else Path(source)
    try:
        with Image.open(stream) as img:
            width, height = img.size
            mode = img.mode
            # JPEG can decode straight at a reduced scale: far cheaper for big photos.
            img.draft("RGB", _SAMPLE_SIZE)
            sample = _flatten(img)
            sample.thumbnail(_SAMPLE_SIZE)
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise ValueError("not a readable image") from exc
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ValueError(f"not a readable image: {exc}") from exc

    aspect = width / height
    if abs(aspect - 1.0) <= _SQUARE_TOLERANCE:
        orientation: Orientation = "square"
    else:
        orientation = "portrait" if aspect < 1.0 else "landscape"

    brightness = ImageStat.Stat(sample.convert("L")).mean[0] / 255.0
    return ImageAnalysis(
        width=width,
        height=height,
        aspect=round(aspect, 4),
        orientation=orientation,
        palette=dominant_colors(sample, PALETTE_SIZE),
        brightness=round(min(max(brightness, 0.0), 1.0), 4),
        mode=mode,
    )


def dominant_colors(img: Image.Image, count: int = PALETTE_SIZE) -> list[str]:
    """Return up to `count` dominant colours of an RGB image as #rrggbb, most frequent first.

    Median-cut quantization groups similar pixels; the groups are ordered by
    how many pixels they hold. Fewer colours come back when the image has fewer.
    """
    quantized = img.convert("RGB").quantize(colors=count, method=Image.Quantize.MEDIANCUT)
    flat_palette = quantized.getpalette() or []
    counts = quantized.getcolors(maxcolors=256) or []
    colours: list[str] = []
    # Sort by pixel count (desc), then index, so ties come out in a stable order.
    # On a "P" image each colour entry is (count, palette index).
    entries = [(count, index) for count, index in counts if isinstance(index, int)]
    for _, index in sorted(entries, key=lambda item: (-item[0], item[1])):
        r, g, b = flat_palette[index * 3 : index * 3 + 3]
        hex_colour = f"#{r:02x}{g:02x}{b:02x}"
        if hex_colour not in colours:
            colours.append(hex_colour)
    return colours[:count]


def _flatten(img: Image.Image) -> Image.Image:
    """Return an RGB copy of `img`, compositing any transparency onto white."""
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")
