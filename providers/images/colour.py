"""Colour helpers of the local cards: hex parsing, mixing, WCAG contrast and palette roles."""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

from providers.images.contract import DEFAULT_PALETTE

RGB = tuple[int, int, int]

_DARK_INK: RGB = (31, 33, 41)
_LIGHT_INK: RGB = (255, 255, 255)


def hex_to_rgb(hex_colour: str) -> RGB:
    digits = hex_colour.lstrip("#")
    return (int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16))


def mix(a: RGB, b: RGB, t: float) -> RGB:
    """Return the colour `t` of the way from `a` to `b`."""
    return (
        round(a[0] + (b[0] - a[0]) * t),
        round(a[1] + (b[1] - a[1]) * t),
        round(a[2] + (b[2] - a[2]) * t),
    )


def luminance(c: RGB) -> float:
    """Return WCAG relative luminance (0 black … 1 white)."""

    def channel(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c[0]) + 0.7152 * channel(c[1]) + 0.0722 * channel(c[2])


def contrast(a: RGB, b: RGB) -> float:
    """Return the WCAG contrast ratio of two colours (1 … 21)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def ink_for(surface: RGB) -> RGB:
    """Return dark or white text, whichever reads better on `surface`."""
    return (
        _DARK_INK if contrast(_DARK_INK, surface) >= contrast(_LIGHT_INK, surface) else _LIGHT_INK
    )


def chroma(c: RGB) -> float:
    """Return colourfulness 0–1 (max − min channel); unlike HLS saturation, pastels score low."""
    return (max(c) - min(c)) / 255


@dataclass(frozen=True)
class Scheme:
    """Colour roles derived from a palette."""

    bg: RGB  # top of the background gradient: the palette's first colour
    bg2: RGB  # bottom of the gradient: the first colour nudged toward the second
    accent: RGB  # badges, rules, highlight: the most vivid, most distinct colour
    accent2: RGB  # soft background shapes: a colourful tone near the background's lightness


def hue_shift(c: RGB, degrees: float) -> RGB:
    """Return `c` with its hue turned by `degrees`, lightness and saturation kept."""
    h, lightness, saturation = colorsys.rgb_to_hls(*(x / 255 for x in c))
    r, g, b = colorsys.hls_to_rgb((h + degrees / 360) % 1.0, lightness, saturation)
    return (round(r * 255), round(g * 255), round(b * 255))


def variant_hue(variant: int) -> float:
    """Return the hue turn of a card's redraw: 0, then +24°, -24°, +48°, -48°, … degrees."""
    step = (variant + 1) // 2
    return 24.0 * step * (1 if variant % 2 else -1)


def scheme_for(palette: list[str] | None, variant: int = 0) -> Scheme:
    """Assign roles to a palette; a reference image's palette is ordered by frequency.

    A redrawn card (`variant` > 0) turns every colour's hue a little (`variant_hue`):
    the same palette family, visibly another card.
    """
    colours = [hex_to_rgb(c) for c in (palette or DEFAULT_PALETTE)]
    if variant:
        colours = [hue_shift(c, variant_hue(variant)) for c in colours]
    bg = colours[0]
    rest = colours[1:]
    if not rest:
        # One colour: derive a shade so the card still has contrast and depth.
        shade = mix(bg, (0, 0, 0), 0.35) if luminance(bg) > 0.35 else mix(bg, (255,) * 3, 0.45)
        rest = [shade]

    def vividness(c: RGB) -> float:
        distance = sum((x - y) ** 2 for x, y in zip(c, bg, strict=True)) ** 0.5 / 441.7
        return 0.5 * chroma(c) + 0.5 * distance

    ranked = sorted(rest, key=vividness, reverse=True)
    accent = ranked[0]
    others = ranked[1:]
    if others:
        # Background shapes should tint, not stain: favour colourful tones close
        # to the background's lightness over, say, a dark text colour.
        bg_lum = luminance(bg)
        accent2 = max(others, key=lambda c: chroma(c) - abs(luminance(c) - bg_lum))
    else:
        accent2 = mix(accent, bg, 0.5)
    return Scheme(bg=bg, bg2=mix(bg, rest[0], 0.3), accent=accent, accent2=accent2)
