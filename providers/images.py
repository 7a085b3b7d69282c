"""Image providers: draw a post's images locally with Pillow or ask an images API.

`LocalCardProvider` needs no network and no model: it renders real 3:4 PNG
cards (a cover, or a heading + body card) in the post's palette with a
CJK-capable font. `OpenAIImageProvider` calls any OpenAI-compatible
`/images/generations` endpoint. Both implement `ImageProvider`; the image
agent gets one from `build_image_provider` and stores the bytes in the
`AssetStore`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import colorsys
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import httpx
from PIL import Image, ImageDraw, ImageFilter, ImageFont, ImageOps, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from prompts.common import strip_data_markup
from providers.fonts import find_cjk_font

CARD_WIDTH = 1080
CARD_HEIGHT = 1440

DEFAULT_PALETTE: tuple[str, ...] = ("#f7e6d7", "#f2c4ad", "#e07a5f", "#81b29a", "#3d405b")
"""Warm default: cream, peach, terracotta, sage, ink — used when a request has no palette."""

IMAGE_PROVIDERS: tuple[str, ...] = ("local", "openai")
"""Names `build_image_provider` accepts."""

ImageKind = Literal["cover", "content", "detail"]

_HEX_RE = re.compile(r"^#?(?:[0-9a-fA-F]{6}|[0-9a-fA-F]{3})$")


# --- contract -------------------------------------------------------------------


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


# --- colour ---------------------------------------------------------------------

RGB = tuple[int, int, int]

_DARK_INK: RGB = (31, 33, 41)
_LIGHT_INK: RGB = (255, 255, 255)


def _rgb(hex_colour: str) -> RGB:
    digits = hex_colour.lstrip("#")
    return (int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16))


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    """Return the colour `t` of the way from `a` to `b`."""
    return (
        round(a[0] + (b[0] - a[0]) * t),
        round(a[1] + (b[1] - a[1]) * t),
        round(a[2] + (b[2] - a[2]) * t),
    )


def _luminance(c: RGB) -> float:
    """Return WCAG relative luminance (0 black … 1 white)."""

    def channel(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2])


def _contrast(a: RGB, b: RGB) -> float:
    """Return the WCAG contrast ratio of two colours (1 … 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _ink_for(surface: RGB) -> RGB:
    """Return dark or white text, whichever reads better on `surface`."""
    return (
        _DARK_INK if _contrast(_DARK_INK, surface) >= _contrast(_LIGHT_INK, surface) else _LIGHT_INK
    )


def _chroma(c: RGB) -> float:
    """Return colourfulness 0–1 (max − min channel); unlike HLS saturation, pastels score low."""
    return (max(c) - min(c)) / 255


@dataclass(frozen=True)
class _Scheme:
    """Colour roles derived from a palette."""

    bg: RGB  # top of the background gradient: the palette's first colour
    bg2: RGB  # bottom of the gradient: the first colour nudged toward the second
    accent: RGB  # badges, rules, highlight: the most vivid, most distinct colour
    accent2: RGB  # soft background shapes: a colourful tone near the background's lightness


def _hue_shift(c: RGB, degrees: float) -> RGB:
    """Return `c` with its hue turned by `degrees`, lightness and saturation kept."""
    h, lightness, saturation = colorsys.rgb_to_hls(*(x / 255 for x in c))
    r, g, b = colorsys.hls_to_rgb((h + degrees / 360) % 1.0, lightness, saturation)
    return (round(r * 255), round(g * 255), round(b * 255))


def variant_hue(variant: int) -> float:
    """Return the hue turn of a card's redraw: 0, then +24°, -24°, +48°, -48°, … degrees."""
    step = (variant + 1) // 2
    return 24.0 * step * (1 if variant % 2 else -1)


def _scheme(palette: list[str] | None, variant: int = 0) -> _Scheme:
    """Assign roles to a palette; a reference image's palette is ordered by frequency.

    A redrawn card (`variant` > 0) turns every colour's hue a little (`variant_hue`):
    the same palette family, visibly another card.
    """
    colours = [_rgb(c) for c in (palette or DEFAULT_PALETTE)]
    if variant:
        colours = [_hue_shift(c, variant_hue(variant)) for c in colours]
    bg = colours[0]
    rest = colours[1:]
    if not rest:
        # One colour: derive a shade so the card still has contrast and depth.
        shade = _mix(bg, (0, 0, 0), 0.35) if _luminance(bg) > 0.35 else _mix(bg, (255,) * 3, 0.45)
        rest = [shade]

    def vividness(c: RGB) -> float:
        distance = sum((x - y) ** 2 for x, y in zip(c, bg, strict=True)) ** 0.5 / 441.7
        return 0.5 * _chroma(c) + 0.5 * distance

    ranked = sorted(rest, key=vividness, reverse=True)
    accent = ranked[0]
    others = ranked[1:]
    if others:
        # Background shapes should tint, not stain: favour colourful tones close
        # to the background's lightness over, say, a dark text colour.
        bg_lum = _luminance(bg)
        accent2 = max(others, key=lambda c: _chroma(c) - abs(_luminance(c) - bg_lum))
    else:
        accent2 = _mix(accent, bg, 0.5)
    return _Scheme(bg=bg, bg2=_mix(bg, rest[0], 0.3), accent=accent, accent2=accent2)


# --- text -----------------------------------------------------------------------

# CJK fonts carry no colour emoji; drawing them would leave empty boxes.
_EMOJI_RE = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U00002b00-\U00002bff"
    "\U0001f1e6-\U0001f1ff\ufe0f\u200d\u20e3]"
)
# A Latin word (kept whole, with trailing punctuation), a run of spaces, or one character.
_TOKEN_RE = re.compile(r"[0-9A-Za-zÀ-ɏ][0-9A-Za-zÀ-ɏ'’\-_.,:;!?%/&@#+]*|[ \t]+|.")
# Characters that must not start a line (CJK kinsoku + Latin closing punctuation).
_NO_LINE_START = frozenset("，。、；：！？）」』》〉】〕…,.;:!?)]}%”’·～")
_ELLIPSIS = "…"


def _clean_text(text: str) -> str:
    """Drop emoji, light Markdown and prompt markup so the card shows plain, drawable text.

    Prompt delimiters (``<<<用户请求>>>``, `prompts.common.strip_data_markup`) that a
    model leaked into a title or section are never drawn: a card is for people.
    """
    text = strip_data_markup(text)
    text = _EMOJI_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = []
    for raw in text.split("\n"):
        line = re.sub(r"^\s{0,3}(#{1,6}|>)\s*", "", raw)
        line = re.sub(r"^\s*[-*+]\s+", "• ", line)
        line = line.replace("**", "").replace("__", "").replace("`", "")
        lines.append(re.sub(r"[ \t]+", " ", line).strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _wrap(paragraph: str, font: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Wrap one paragraph to `width` pixels.

    Chinese has no spaces, so every CJK character is a break opportunity;
    Latin words break only at spaces (or by character when one word is wider
    than the line). Closing punctuation never starts a line: the previous
    character moves down with it.
    """
    pending = list(reversed(_TOKEN_RE.findall(paragraph)))
    lines: list[str] = []
    current: list[str] = []
    while pending:
        token = pending.pop()
        if token.isspace():
            if current:
                current.append(" ")
            continue
        if font.getlength(token) > width and len(token) > 1:
            pending.extend(reversed(list(token)))  # an over-long word: break it anywhere
            continue
        if not current or font.getlength("".join(current) + token) <= width:
            current.append(token)
            continue
        carried: list[str] = []
        words = [t for t in current if not t.isspace()]
        if token in _NO_LINE_START and len(words) > 1:
            carried = [current.pop()]
        lines.append("".join(current).rstrip())
        current = [*carried, token]
    if current:
        lines.append("".join(current).rstrip())
    return lines


def _ellipsize(line: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    """Return `line` shortened to end with "…" within `width` pixels."""
    text = line.rstrip(" ，。、；：,.;:")
    while text and font.getlength(text + _ELLIPSIS) > width:
        text = text[:-1].rstrip(" ，。、；：,.;:")
    return text + _ELLIPSIS


@dataclass(frozen=True)
class _Line:
    text: str
    gap_before: float  # extra space above the line (paragraph spacing), in pixels


@dataclass(frozen=True)
class _TextBlock:
    font: ImageFont.FreeTypeFont
    size: int
    lines: list[_Line]
    line_height: float

    @property
    def height(self) -> float:
        return sum(line.gap_before for line in self.lines) + len(self.lines) * self.line_height


class _Fonts:
    """FreeType faces of one font file by size, for one render (never shared across threads)."""

    def __init__(self, path: Path, index: int) -> None:
        self._path = path
        self._index = index
        self._faces: dict[int, ImageFont.FreeTypeFont] = {}

    def get(self, size: int) -> ImageFont.FreeTypeFont:
        face = self._faces.get(size)
        if face is None:
            face = ImageFont.truetype(str(self._path), size=size, index=self._index)
            self._faces[size] = face
        return face


def _layout_text(
    text: str,
    fonts: _Fonts,
    *,
    sizes: range,
    width: float,
    max_height: float,
    max_lines: int,
    line_spacing: float,
    paragraph_gap: float = 0.0,
) -> _TextBlock:
    """Lay out `text` at the largest size that fits; truncate with "…" at the smallest."""
    paragraphs = [p for p in text.split("\n") if p.strip()]
    block: _TextBlock | None = None
    for size in sizes:
        font = fonts.get(size)
        lines: list[_Line] = []
        for index, paragraph in enumerate(paragraphs):
            # Consecutive list items sit closer than paragraphs.
            is_item = paragraph.startswith("• ") and paragraphs[index - 1].startswith("• ")
            gap = size * paragraph_gap * (0.4 if is_item else 1.0) if index else 0.0
            for n, wrapped in enumerate(_wrap(paragraph, font, width)):
                lines.append(_Line(wrapped, gap if n == 0 else 0.0))
        block = _TextBlock(font, size, lines, size * line_spacing)
        if len(lines) <= max_lines and block.height <= max_height:
            return block
    assert block is not None, "sizes must not be empty"
    # Smallest size still overflows: keep what fits and mark the cut.
    kept: list[_Line] = []
    used = 0.0
    for line in block.lines:
        needed = line.gap_before + block.line_height
        if len(kept) >= max_lines or used + needed > max_height:
            break
        kept.append(line)
        used += needed
    if kept:
        last = kept[-1]
        kept[-1] = _Line(_ellipsize(last.text, block.font, width), last.gap_before)
    return _TextBlock(block.font, block.size, kept, block.line_height)


# --- local cards ----------------------------------------------------------------


class LocalCardProvider:
    """Render 3:4 PNG cards with Pillow: no network, no model, deterministic.

    A cover card shows the big centred title with a marker highlight, a rule
    and a short subtitle; content and detail cards show a heading and wrapped
    body text on a light panel. The palette's first colour is the background
    (its top-left pixel is exactly that colour); text colour is picked for
    contrast. Rendering runs in a worker thread, so cards render concurrently.
    """

    name = "local"

    def __init__(self, font_path: str | Path | None = None) -> None:
        """Resolve the CJK font now, so a missing font fails at startup, not mid-run.

        Raises:
            FontNotFoundError: No CJK-capable font (see `find_cjk_font`).
        """
        self.font_path = find_cjk_font(font_path)
        self._face_index = _chinese_face_index(self.font_path)

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        """Render the card for `req` as PNG."""
        return await asyncio.to_thread(self.render_png, req)

    def render_png(self, req: ImageRequest) -> GeneratedImage:
        """Render the card for `req` as PNG in the calling thread."""
        image = self.render(req)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=6)
        return GeneratedImage(
            data=buffer.getvalue(), content_type="image/png", width=req.width, height=req.height
        )

    def render(self, req: ImageRequest) -> Image.Image:
        """Render the card for `req` as an RGB Pillow image."""
        fonts = _Fonts(self.font_path, self._face_index)
        scheme = _scheme(req.palette, req.variant)
        background = _background(req, scheme)
        if req.kind == "cover":
            return _draw_cover(background, req, scheme, fonts)
        return _draw_content(background, req, scheme, fonts)


def _chinese_face_index(path: Path) -> int:
    """Pick the Simplified Chinese face of a font collection (Noto CJK ships JP first)."""
    if path.suffix.lower() not in (".ttc", ".otc"):
        return 0
    for index in range(10):
        try:
            family = ImageFont.truetype(str(path), size=12, index=index).getname()[0] or ""
        except OSError:
            break
        if family.endswith((" SC", " GB")) or "Hei" in family:
            return index
    return 0


def _seed(req: ImageRequest, salt: str) -> float:
    """Return a stable number in [0, 1) for decoration placement.

    Seeded by slot, kind and variant only, so the background of a card does not
    change with its text but does with a redraw (and the process-randomised
    `hash()` is never used). Variant 0 keeps the seeds cards had before variants.
    """
    variant = f":{req.variant}" if req.variant else ""
    digest = hashlib.sha256(f"{req.slot}:{req.kind}:{salt}{variant}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def _background(req: ImageRequest, scheme: _Scheme) -> Image.Image:
    """Paint the vertical gradient and the soft blurred shapes."""
    w, h = req.width, req.height
    top = Image.new("RGBA", (w, h), (*scheme.bg, 255))
    bottom = Image.new("RGBA", (w, h), (*scheme.bg2, 255))
    mask = Image.linear_gradient("L").resize((w, h), Image.Resampling.BICUBIC)
    canvas = Image.composite(bottom, top, mask)

    # Shapes are drawn and blurred at quarter scale: smooth, and ~16x cheaper.
    qw, qh = max(w // 4, 1), max(h // 4, 1)
    # A redrawn card (variant > 0) moves its shapes further and, every other time,
    # mirrors them: visibly another card with the same text.
    jitter = (_seed(req, "a") - 0.5) * (0.4 if req.variant else 0.12)
    mirrored = req.variant % 2 == 1
    blobs: list[tuple[float, float, float, RGB, int]] = [
        (0.95 + jitter, 0.06 - jitter / 2, 0.36, scheme.accent, 120),
    ]
    if req.kind == "cover":
        blobs.append((0.02 - jitter, 0.93 + jitter / 2, 0.42, scheme.accent2, 110))
        blobs.append((0.88 + jitter, 0.82, 0.16, scheme.accent, 70))
    else:
        blobs.append((0.0 + jitter, 1.0, 0.30, scheme.accent2, 90))
    if mirrored:
        blobs = [(1 - cx, cy, r, colour, alpha) for cx, cy, r, colour, alpha in blobs]
    for cx, cy, r, colour, alpha in blobs:
        # Each blob gets its own layer whose transparent pixels already carry its
        # colour: Pillow blurs RGBA unpremultiplied, so a shared transparent-black
        # layer would bleed dark halos into the edges.
        layer = Image.new("RGBA", (qw, qh), (*colour, 0))
        x, y, rad = cx * qw, cy * qh, r * qw
        ImageDraw.Draw(layer).ellipse((x - rad, y - rad, x + rad, y + rad), fill=(*colour, alpha))
        layer = layer.filter(ImageFilter.GaussianBlur(radius=qw / 18))
        canvas = Image.alpha_composite(canvas, layer.resize((w, h), Image.Resampling.BICUBIC))
    return canvas


def _bold(size: int) -> int:
    """Return the stroke width that fakes a bold weight (CJK fonts often ship one weight)."""
    return max(1, round(size / 64))


def _draw_badge(
    draw: ImageDraw.ImageDraw, fonts: _Fonts, x: float, y: float, s: float, label: str, bg: RGB
) -> float:
    """Draw a pill badge with `label` at (x, y); return its right edge."""
    font = fonts.get(round(30 * s))
    pad_x, height = 26 * s, 60 * s
    right = x + font.getlength(label) + 2 * pad_x
    draw.rounded_rectangle((x, y, right, y + height), radius=height / 2, fill=(*bg, 255))
    ink = _ink_for(bg)
    draw.text(
        ((x + right) / 2, y + height / 2),
        label,
        font=font,
        fill=(*ink, 255),
        anchor="mm",
        stroke_width=1,
        stroke_fill=(*ink, 255),
    )
    return right


def _draw_cover(
    background: Image.Image, req: ImageRequest, scheme: _Scheme, fonts: _Fonts
) -> Image.Image:
    """Draw a cover: slot badge, big centred title with a marker highlight, rule, subtitle."""
    # Draw on RGB: ImageDraw blends translucent fills only onto RGB images
    # (onto RGBA it would overwrite the alpha instead).
    canvas = background.convert("RGB")
    w, h = canvas.size
    s = w / CARD_WIDTH
    margin = 96 * s
    draw = ImageDraw.Draw(canvas, "RGBA")
    _draw_badge(draw, fonts, margin, margin, s, f"{req.slot:02d}", scheme.accent)

    surface = _mix(scheme.bg, scheme.bg2, 0.45)
    ink = _ink_for(surface)
    muted = _mix(ink, surface, 0.3)
    text_width = w - 2 * margin

    title = _layout_text(
        _clean_text(req.title).replace("\n", " "),
        fonts,
        sizes=range(round(132 * s), round(68 * s) - 1, -max(1, round(4 * s))),
        width=text_width,
        max_height=h * 0.46,
        max_lines=5,
        line_spacing=1.22,
    )
    subtitle = _layout_text(
        _clean_text(req.text),
        fonts,
        sizes=range(round(42 * s), round(34 * s) - 1, -max(1, round(2 * s))),
        width=text_width * 0.86,
        max_height=h * 0.16,
        max_lines=3,
        line_spacing=1.6,
    )
    rule_gap, rule_h = 56 * s, 10 * s
    block_h = title.height
    if subtitle.lines:
        block_h += 2 * rule_gap + rule_h + subtitle.height
    top = max((h - block_h) / 2 - h * 0.03, margin + 120 * s)

    # Title: centred lines; the last line gets a translucent marker underneath.
    y = top
    for index, line in enumerate(title.lines):
        centre_y = y + title.line_height / 2
        if index == len(title.lines) - 1:
            half = title.font.getlength(line.text) / 2
            draw.rounded_rectangle(
                (
                    w / 2 - half - 14 * s,
                    centre_y + title.size * 0.08,
                    w / 2 + half + 14 * s,
                    centre_y + title.size * 0.46,
                ),
                radius=8 * s,
                fill=(*scheme.accent, 110),
            )
        draw.text(
            (w / 2, centre_y),
            line.text,
            font=title.font,
            fill=(*ink, 255),
            anchor="mm",
            stroke_width=_bold(title.size),
            stroke_fill=(*ink, 255),
        )
        y += title.line_height

    if subtitle.lines:
        y += rule_gap
        draw.rounded_rectangle(
            (w / 2 - 40 * s, y, w / 2 + 40 * s, y + rule_h), radius=rule_h / 2, fill=scheme.accent
        )
        y += rule_h + rule_gap
        for line in subtitle.lines:
            draw.text(
                (w / 2, y + line.gap_before + subtitle.line_height / 2),
                line.text,
                font=subtitle.font,
                fill=(*muted, 255),
                anchor="mm",
            )
            y += line.gap_before + subtitle.line_height

    # A small dot grid anchors the lower right corner.
    dot = 5 * s
    for row in range(3):
        for col in range(5):
            cx = w - margin - col * 28 * s
            cy = h - margin - row * 28 * s
            draw.ellipse((cx - dot, cy - dot, cx + dot, cy + dot), fill=(*ink, 60))
    return canvas


def _draw_content(
    background: Image.Image, req: ImageRequest, scheme: _Scheme, fonts: _Fonts
) -> Image.Image:
    """Draw a content/detail card: badge and rule, then heading and body on a light panel."""
    w, h = background.size
    s = w / CARD_WIDTH
    margin = 72 * s
    header_y = 84 * s
    panel = (margin, 200 * s, w - margin, h - 110 * s)
    panel_fill = _mix((255, 255, 255), scheme.bg, 0.08)

    # Soft shadow under the panel, blurred at quarter scale on a layer that
    # carries the shadow colour (no dark halo from unpremultiplied blur).
    shadow_colour = _mix(scheme.bg2, (0, 0, 0), 0.6)
    shadow = Image.new("RGBA", (max(w // 4, 1), max(h // 4, 1)), (*shadow_colour, 0))
    ImageDraw.Draw(shadow).rounded_rectangle(
        tuple(v / 4 for v in (panel[0], panel[1] + 14 * s, panel[2], panel[3] + 14 * s)),
        radius=12 * s,
        fill=(*shadow_colour, 60),
    )
    shadow = shadow.filter(ImageFilter.GaussianBlur(radius=8 * s))
    canvas = Image.alpha_composite(
        background, shadow.resize((w, h), Image.Resampling.BICUBIC)
    ).convert("RGB")

    draw = ImageDraw.Draw(canvas, "RGBA")
    right = _draw_badge(draw, fonts, margin, header_y, s, f"{req.slot:02d}", scheme.accent)
    header_ink = _ink_for(scheme.bg)
    draw.line(
        (right + 24 * s, header_y + 30 * s, w - margin, header_y + 30 * s),
        fill=(*header_ink, 60),
        width=max(1, round(3 * s)),
    )
    # A light panel keeps body text readable whatever the palette.
    draw.rounded_rectangle(panel, radius=44 * s, fill=(*panel_fill, 255))

    ink = _ink_for(panel_fill)
    body_ink = _mix(ink, panel_fill, 0.18)
    pad = 72 * s
    inner_left, inner_width = panel[0] + pad, panel[2] - panel[0] - 2 * pad
    y = panel[1] + pad
    bottom = panel[3] - pad

    heading = _layout_text(
        _clean_text(req.title).replace("\n", " "),
        fonts,
        sizes=range(round(68 * s), round(48 * s) - 1, -max(1, round(2 * s))),
        width=inner_width,
        max_height=(bottom - y) * 0.35,
        max_lines=3,
        line_spacing=1.3,
    )
    for line in heading.lines:
        draw.text(
            (inner_left, y + heading.line_height / 2),
            line.text,
            font=heading.font,
            fill=(*ink, 255),
            anchor="lm",
            stroke_width=_bold(heading.size),
            stroke_fill=(*ink, 255),
        )
        y += heading.line_height
    if heading.lines:
        y += 24 * s
        draw.rounded_rectangle(
            (inner_left, y, inner_left + 88 * s, y + 10 * s), radius=5 * s, fill=scheme.accent
        )
        y += 10 * s + 48 * s

    body = _layout_text(
        _clean_text(req.text),
        fonts,
        sizes=range(round(42 * s), round(30 * s) - 1, -max(1, round(2 * s))),
        width=inner_width,
        max_height=bottom - y,
        max_lines=40,
        line_spacing=1.75,
        paragraph_gap=0.7,
    )
    for line in body.lines:
        y += line.gap_before
        draw.text(
            (inner_left, y + body.line_height / 2),
            line.text,
            font=body.font,
            fill=(*body_ink, 255),
            anchor="lm",
        )
        y += body.line_height
    return canvas


# --- images API -----------------------------------------------------------------

_NO_TEXT = (
    "Do not render any text, letters, numbers, captions, logos or watermarks in the image; "
    "the post adds its own text."
)
_MAX_DOWNLOAD_BYTES = 32 * 1024 * 1024
_MAX_RETRY_AFTER_S = 30.0
_CONTENT_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


class OpenAIImageProvider:
    """Generate images with an OpenAI-compatible `/images/generations` endpoint.

    Retries 429, 5xx, timeouts and connection errors up to `max_retries`
    times with exponential backoff (honouring a numeric `Retry-After`), then
    raises `ImageProviderError`. Errors never contain the API key. With
    `fit_to_request` (default) the result is centre-cropped and resized to
    the request's size (3:4 cards) and re-encoded as PNG.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: SecretStr | str | None,
        *,
        model: str = "gpt-image-1",
        size: str = "1024x1536",
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff_base: float = 1.0,
        fit_to_request: bool = True,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Configure the endpoint.

        Args:
            base_url: API root, e.g. "https://api.openai.com/v1".
            api_key: Bearer token; None sends no Authorization header.
            model: Images model name.
            size: Requested size "WxH".
            timeout: Seconds per HTTP request.
            max_retries: Retries after the first attempt for retryable failures.
            backoff_base: First backoff delay in seconds (doubles per retry).
            fit_to_request: Crop/resize the result to the request's width × height.
            client: A client to use (not closed here); tests inject one.
            transport: A transport for the per-call client when `client` is None.
        """
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if isinstance(api_key, SecretStr | None) else SecretStr(api_key)
        self.model = model
        self.size = size
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = max(0.0, backoff_base)
        self.fit_to_request = fit_to_request
        self._client = client
        self._transport = transport

    def __repr__(self) -> str:
        """Describe the provider without its key."""
        return f"OpenAIImageProvider(base_url={self.base_url!r}, model={self.model!r})"

    def build_prompt(self, req: ImageRequest) -> str:
        """Return the prompt sent to the API: the visual brief, palette, format, and no text."""
        parts = [req.prompt.strip() or req.title.strip() or "An aesthetic lifestyle photo."]
        if req.kind == "cover":
            parts.append("Vertical cover image for a social media post, one clear focal subject.")
        else:
            parts.append("Vertical illustrative image for a social media post.")
        if req.title.strip():
            parts.append(f"Topic: {req.title.strip()}.")
        if req.palette:
            parts.append(f"Colour palette: {', '.join(req.palette)}.")
        parts.append(_NO_TEXT)
        return "\n".join(parts)[:4000]

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        """Generate the image for `req`.

        Raises:
            ImageProviderError: The API failed after retries, rejected the
                request, or returned something that is not an image.
        """
        if self._client is not None:
            return await self._generate(self._client, req)
        timeout = httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))
        async with httpx.AsyncClient(transport=self._transport, timeout=timeout) as client:
            return await self._generate(client, req)

    async def _generate(self, client: httpx.AsyncClient, req: ImageRequest) -> GeneratedImage:
        payload: dict[str, object] = {
            "model": self.model,
            "prompt": self.build_prompt(req),
            "size": self.size,
            "n": 1,
        }
        # gpt-image-* always answer base64 and reject `response_format` with a 400;
        # DALL·E and most compatible servers need it to return base64 instead of a URL.
        if not self.model.startswith("gpt-image"):
            payload["response_format"] = "b64_json"
        headers = {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"

        url = f"{self.base_url}/images/generations"
        attempts = self.max_retries + 1
        failure = "no attempt made"
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                response = await client.post(url, json=payload, headers=headers)
            except httpx.TimeoutException:
                failure = "request timed out"
            except httpx.TransportError as exc:
                failure = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if status < 400:
                    data = await self._extract(client, response)
                    return await asyncio.to_thread(self._finish, data, req)
                detail = self._redact(_error_detail(response))
                if status != 429 and status < 500:
                    raise ImageProviderError(
                        f"images API rejected the request: HTTP {status}: {detail}",
                        status_code=status,
                    )
                failure = f"HTTP {status}: {detail}"
                retry_after = _retry_after(response)
            if attempt + 1 < attempts:
                delay = self.backoff_base * 2**attempt
                if retry_after is not None:
                    delay = max(delay, retry_after)
                await asyncio.sleep(min(delay, _MAX_RETRY_AFTER_S))
        raise ImageProviderError(f"images API failed after {attempts} attempt(s): {failure}")

    async def _extract(self, client: httpx.AsyncClient, response: httpx.Response) -> bytes:
        """Return the image bytes of a success response (inline base64 or a URL to fetch)."""
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ImageProviderError("images API answered without data[0]") from exc
        if isinstance(item, dict) and item.get("b64_json"):
            try:
                return base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError, TypeError) as exc:
                raise ImageProviderError("images API returned invalid base64") from exc
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            # Fetched without the Authorization header: the URL may be a CDN's.
            try:
                download = await client.get(item["url"])
            except httpx.HTTPError as exc:
                raise ImageProviderError(
                    f"could not download the generated image ({type(exc).__name__})"
                ) from exc
            if download.status_code >= 400:
                raise ImageProviderError(
                    f"could not download the generated image: HTTP {download.status_code}",
                    status_code=download.status_code,
                )
            if len(download.content) > _MAX_DOWNLOAD_BYTES:
                raise ImageProviderError("generated image download is too large")
            return download.content
        raise ImageProviderError("images API answered with neither b64_json nor url")

    def _finish(self, data: bytes, req: ImageRequest) -> GeneratedImage:
        """Check the bytes are an image and, if asked, fit them to the request's size."""
        try:
            with Image.open(io.BytesIO(data)) as probe:
                probe.verify()
            with Image.open(io.BytesIO(data)) as img:
                fmt = img.format or ""
                if not self.fit_to_request:
                    if fmt not in _CONTENT_TYPES:
                        raise ImageProviderError(f"images API returned unsupported format {fmt!r}")
                    return GeneratedImage(
                        data=data,
                        content_type=_CONTENT_TYPES[fmt],
                        width=img.width,
                        height=img.height,
                    )
                fitted = ImageOps.fit(
                    img.convert("RGB"), (req.width, req.height), Image.Resampling.LANCZOS
                )
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
            raise ImageProviderError("images API returned data that is not an image") from exc
        buffer = io.BytesIO()
        fitted.save(buffer, format="PNG", compress_level=6)
        return GeneratedImage(
            data=buffer.getvalue(), content_type="image/png", width=req.width, height=req.height
        )

    def _redact(self, text: str) -> str:
        """Remove the API key from text that may echo it (some servers quote the key)."""
        if self._api_key is not None:
            secret = self._api_key.get_secret_value()
            if secret:
                text = text.replace(secret, "***")
        return text


def _error_detail(response: httpx.Response) -> str:
    """Return the API's error message, shortened, for logs."""
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    except ValueError:
        message = None
    text = message if isinstance(message, str) and message else response.text
    return " ".join(text.split())[:300] or response.reason_phrase


def _retry_after(response: httpx.Response) -> float | None:
    """Return a numeric `Retry-After` in seconds, if the server sent one."""
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


# --- factory --------------------------------------------------------------------


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
) -> ImageProvider:
    """Return the image provider called `name` ("local" or "openai").

    Raises:
        ValueError: Unknown name, or "openai" without a base URL or API key.
        FontNotFoundError: "local" and no CJK-capable font is available.
    """
    key = name.strip().lower()
    if key == "local":
        return LocalCardProvider(font_path=font_path)
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
        )
    allowed = ", ".join(repr(p) for p in IMAGE_PROVIDERS)
    raise ValueError(f"unknown image provider {name!r}; allowed: {allowed}")
