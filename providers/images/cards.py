"""The local card renderer: 3:4 PNG cards drawn with Pillow, no network and no model."""

from __future__ import annotations

import asyncio
import functools
import hashlib
from pathlib import Path

import imagecodecs
import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from providers.fonts import find_cjk_font
from providers.images.colour import RGB, Scheme, ink_for, mix, scheme_for
from providers.images.contract import CARD_WIDTH, GeneratedImage, ImageRequest
from providers.images.gate import DrawGate, local_concurrency
from providers.images.text import (
    Fonts,
    chinese_face_index,
    clean_text,
    layout_text,
)

_PNG_COMPRESS_LEVEL = 3
"""zlib level of the card PNGs, a trade of size for CPU (bench/bench_cards.py).

~95-130 KB a card; higher levels make files a little smaller and cost more time.
"""


def encode_png(image: Image.Image) -> bytes:
    """Encode an RGB card as PNG with libpng (imagecodecs): every row filtered `Up`.

    Encoding was the largest cost of a card. Pillow's encoder tries every PNG
    filter on every row and keeps the best, which cost ~33 ms of a 1080×1440 card
    at level 3; one fixed filter costs ~9 ms. `Up` suits these cards (vertical
    gradients, flat panels, text): the files are within a few percent of Pillow's
    at the same zlib level (bench/bench_cards.py). The pixels are the same: PNG is
    lossless.
    """
    encoded = imagecodecs.png_encode(
        np.asarray(image), level=_PNG_COMPRESS_LEVEL, filter=imagecodecs.PNG.FILTER.UP
    )
    return encoded if isinstance(encoded, bytes) else bytes(encoded)  # typed bytes | bytearray


class LocalCardProvider:
    """Render 3:4 PNG cards with Pillow: no network, no model, deterministic.

    A cover card shows the big centred title with a marker highlight, a rule
    and a short subtitle; content and detail cards show a heading and wrapped
    body text on a light panel. The palette's first colour is the background
    (its top-left pixel is exactly that colour); text colour is picked for
    contrast. Rendering runs in a worker thread, so cards render concurrently,
    at most `concurrency` at once (default: the cores this process may use —
    rendering is CPU-bound, more threads only queue on them).
    """

    name = "local"

    def __init__(self, font_path: str | Path | None = None, *, concurrency: int = 0) -> None:
        """Resolve the CJK font now, so a missing font fails at startup, not mid-run.

        Args:
            font_path: A CJK-capable font (None: search the system).
            concurrency: Cards rendered at once; 0 for the cores this process may use.

        Raises:
            FontNotFoundError: No CJK-capable font (see `find_cjk_font`).
        """
        self.font_path = find_cjk_font(font_path)
        self._fonts = Fonts(self.font_path, chinese_face_index(self.font_path))
        self.gate = DrawGate(concurrency or local_concurrency())

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        """Render the card for `req` as PNG, waiting for a free slot of the bound."""
        async with self.gate.slot():
            return await asyncio.to_thread(self.render_png, req)

    def render_png(self, req: ImageRequest) -> GeneratedImage:
        """Render the card for `req` as PNG in the calling thread."""
        return GeneratedImage(
            data=encode_png(self.render(req)),
            content_type="image/png",
            width=req.width,
            height=req.height,
        )

    def render(self, req: ImageRequest) -> Image.Image:
        """Render the card for `req` as an RGB Pillow image."""
        scheme = scheme_for(req.palette, req.variant)
        canvas = _background(req, scheme)
        if req.kind == "cover":
            return _draw_cover(canvas, req, scheme, self._fonts)
        return _draw_content(canvas, req, scheme, self._fonts)


def _seed(slot: int, kind: str, salt: str, variant: int = 0) -> float:
    """Return a stable number in [0, 1) for decoration placement.

    Seeded by slot, kind and variant only, so the background of a card does not
    change with its text but does with a redraw (and the process-randomised
    `hash()` is never used). Variant 0 keeps the seeds cards had before variants.
    """
    suffix = f":{variant}" if variant else ""
    digest = hashlib.sha256(f"{slot}:{kind}:{salt}{suffix}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def _panel(w: int, h: int) -> tuple[float, float, float, float]:
    """Return the box of a content card's light panel (left, top, right, bottom)."""
    s = w / CARD_WIDTH
    margin = 72 * s
    return (margin, 200 * s, w - margin, h - 110 * s)


def _background(req: ImageRequest, scheme: Scheme) -> Image.Image:
    """Return the card's full-size RGB background, ready to draw on."""
    return _backdrop(req.slot, req.kind, req.variant, scheme, req.width, req.height).resize(
        (req.width, req.height), Image.Resampling.BILINEAR
    )


@functools.lru_cache(maxsize=32)
def _backdrop(slot: int, kind: str, variant: int, scheme: Scheme, w: int, h: int) -> Image.Image:
    """Paint the vertical gradient, the soft blurred shapes and, under a panel, its shadow.

    Everything here is smooth, so it is composed at quarter scale and enlarged
    once by `_background`: ~5x cheaper than composing full-size layers, and
    within a few levels per channel of it. Text and sharp shapes are drawn
    afterwards at full size. The result depends on the palette, slot, kind and
    variant only, so it is cached (32 × ~0.4 MB at most): runs with the same palette,
    such as every run without reference images, paint each backdrop once. The
    cached image is shared: never draw on it.
    """
    qw, qh = max(w // 4, 1), max(h // 4, 1)
    top = Image.new("RGBA", (qw, qh), (*scheme.bg, 255))
    bottom = Image.new("RGBA", (qw, qh), (*scheme.bg2, 255))
    mask = Image.linear_gradient("L").resize((qw, qh), Image.Resampling.BICUBIC)
    canvas = Image.composite(bottom, top, mask)

    # A redrawn card (variant > 0) moves its shapes further and, every other time,
    # mirrors them: visibly another card with the same text.
    jitter = (_seed(slot, kind, "a", variant) - 0.5) * (0.4 if variant else 0.12)
    blobs: list[tuple[float, float, float, RGB, int]] = [
        (0.95 + jitter, 0.06 - jitter / 2, 0.36, scheme.accent, 120),
    ]
    if kind == "cover":
        blobs.append((0.02 - jitter, 0.93 + jitter / 2, 0.42, scheme.accent2, 110))
        blobs.append((0.88 + jitter, 0.82, 0.16, scheme.accent, 70))
    else:
        blobs.append((0.0 + jitter, 1.0, 0.30, scheme.accent2, 90))
    if variant % 2 == 1:
        blobs = [(1 - cx, cy, r, colour, alpha) for cx, cy, r, colour, alpha in blobs]
    for cx, cy, r, colour, alpha in blobs:
        # Each blob gets its own layer whose transparent pixels already carry its
        # colour: Pillow blurs RGBA unpremultiplied, so a shared transparent-black
        # layer would bleed dark halos into the edges.
        layer = Image.new("RGBA", (qw, qh), (*colour, 0))
        x, y, rad = cx * qw, cy * qh, r * qw
        ImageDraw.Draw(layer).ellipse((x - rad, y - rad, x + rad, y + rad), fill=(*colour, alpha))
        layer = layer.filter(ImageFilter.GaussianBlur(radius=qw / 18))
        canvas = Image.alpha_composite(canvas, layer)

    if kind != "cover":
        # Soft shadow under the panel, on a layer that carries the shadow colour
        # (no dark halo from unpremultiplied blur).
        s = w / CARD_WIDTH
        left, panel_top, right, panel_bottom = _panel(w, h)
        shadow_colour = mix(scheme.bg2, (0, 0, 0), 0.6)
        shadow = Image.new("RGBA", (qw, qh), (*shadow_colour, 0))
        ImageDraw.Draw(shadow).rounded_rectangle(
            tuple(v / 4 for v in (left, panel_top + 14 * s, right, panel_bottom + 14 * s)),
            radius=12 * s,
            fill=(*shadow_colour, 60),
        )
        shadow = shadow.filter(ImageFilter.GaussianBlur(radius=8 * s))
        canvas = Image.alpha_composite(canvas, shadow)

    # Cards are drawn on RGB: ImageDraw blends translucent fills only onto RGB
    # images (onto RGBA it would overwrite the alpha instead).
    return canvas.convert("RGB")


def _bold(size: int) -> int:
    """Return the stroke width that fakes a bold weight (CJK fonts often ship one weight)."""
    return max(1, round(size / 64))


def _draw_badge(
    draw: ImageDraw.ImageDraw, fonts: Fonts, x: float, y: float, s: float, label: str, bg: RGB
) -> float:
    """Draw a pill badge with `label` at (x, y); return its right edge."""
    font = fonts.get(round(30 * s))
    pad_x, height = 26 * s, 60 * s
    right = x + font.getlength(label) + 2 * pad_x
    draw.rounded_rectangle((x, y, right, y + height), radius=height / 2, fill=(*bg, 255))
    ink = ink_for(bg)
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
    canvas: Image.Image, req: ImageRequest, scheme: Scheme, fonts: Fonts
) -> Image.Image:
    """Draw a cover onto its background: slot badge, centred title with a marker, rule, subtitle."""
    w, h = canvas.size
    s = w / CARD_WIDTH
    margin = 96 * s
    draw = ImageDraw.Draw(canvas, "RGBA")
    _draw_badge(draw, fonts, margin, margin, s, f"{req.slot:02d}", scheme.accent)

    surface = mix(scheme.bg, scheme.bg2, 0.45)
    ink = ink_for(surface)
    muted = mix(ink, surface, 0.3)
    text_width = w - 2 * margin

    title = layout_text(
        clean_text(req.title).replace("\n", " "),
        fonts,
        sizes=range(round(132 * s), round(68 * s) - 1, -max(1, round(4 * s))),
        width=text_width,
        max_height=h * 0.46,
        max_lines=5,
        line_spacing=1.22,
    )
    subtitle = layout_text(
        clean_text(req.text),
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
    canvas: Image.Image, req: ImageRequest, scheme: Scheme, fonts: Fonts
) -> Image.Image:
    """Draw a content/detail card onto its background: badge, rule, heading and body on a panel."""
    w, h = canvas.size
    s = w / CARD_WIDTH
    margin = 72 * s
    header_y = 84 * s
    panel = _panel(w, h)
    panel_fill = mix((255, 255, 255), scheme.bg, 0.08)

    draw = ImageDraw.Draw(canvas, "RGBA")
    right = _draw_badge(draw, fonts, margin, header_y, s, f"{req.slot:02d}", scheme.accent)
    header_ink = ink_for(scheme.bg)
    draw.line(
        (right + 24 * s, header_y + 30 * s, w - margin, header_y + 30 * s),
        fill=(*header_ink, 60),
        width=max(1, round(3 * s)),
    )
    # A light panel keeps body text readable whatever the palette. It is opaque,
    # so it is filled without the per-pixel blending of the "RGBA" draw (~5x faster).
    ImageDraw.Draw(canvas).rounded_rectangle(panel, radius=44 * s, fill=panel_fill)

    ink = ink_for(panel_fill)
    body_ink = mix(ink, panel_fill, 0.18)
    pad = 72 * s
    inner_left, inner_width = panel[0] + pad, panel[2] - panel[0] - 2 * pad
    y = panel[1] + pad
    bottom = panel[3] - pad

    heading = layout_text(
        clean_text(req.title).replace("\n", " "),
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

    body = layout_text(
        clean_text(req.text),
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
