"""Reference image analysis: size, orientation, palette, brightness."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from providers.vision import analyze_image


def _encode(img: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt)
    return buffer.getvalue()


def _close(hex_colour: str, rgb: tuple[int, int, int], tol: int = 12) -> bool:
    got = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tol for a, b in zip(got, rgb, strict=True))


def test_palette_orders_known_colours_by_area(tmp_path: Path) -> None:
    img = Image.new("RGB", (300, 400), (224, 122, 95))  # terracotta: most of the image
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, 299, 99), fill=(61, 64, 91))  # navy: top quarter
    draw.rectangle((0, 350, 299, 399), fill=(242, 204, 143))  # sand: bottom eighth
    path = tmp_path / "ref.png"
    img.save(path)

    analysis = analyze_image(path)

    assert (analysis.width, analysis.height) == (300, 400)
    assert analysis.aspect == pytest.approx(0.75)
    assert analysis.orientation == "portrait"
    assert 3 <= len(analysis.palette) <= 5
    assert _close(analysis.palette[0], (224, 122, 95))
    assert _close(analysis.palette[1], (61, 64, 91))
    assert _close(analysis.palette[2], (242, 204, 143))
    assert all(len(c) == 7 and c.startswith("#") for c in analysis.palette)


@pytest.mark.parametrize(
    ("size", "orientation"),
    [((400, 300), "landscape"), ((300, 300), "square"), ((300, 400), "portrait")],
)
def test_orientation(size: tuple[int, int], orientation: str) -> None:
    assert analyze_image(_encode(Image.new("RGB", size, "white"))).orientation == orientation


def test_brightness_spans_black_to_white() -> None:
    assert analyze_image(_encode(Image.new("RGB", (50, 50), "black"))).brightness == 0.0
    assert analyze_image(_encode(Image.new("RGB", (50, 50), "white"))).brightness == 1.0


@pytest.mark.parametrize("mode", ["RGBA", "P", "L", "LA", "CMYK"])
def test_robust_to_modes(mode: str) -> None:
    img = Image.new("RGB", (64, 48), (200, 30, 30)).convert(mode)
    fmt = "JPEG" if mode == "CMYK" else "PNG"
    analysis = analyze_image(_encode(img, fmt))
    assert analysis.mode == mode
    assert analysis.orientation == "landscape"
    assert analysis.palette


def test_transparent_pixels_count_as_white() -> None:
    analysis = analyze_image(_encode(Image.new("RGBA", (40, 40), (0, 0, 0, 0))))
    assert analysis.palette == ["#ffffff"]
    assert analysis.brightness == 1.0


def test_non_image_raises_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a readable image"):
        analyze_image(b"definitely not an image")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not a readable image"):
        analyze_image(text)
