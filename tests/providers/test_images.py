"""Local Pillow cards, the OpenAI-compatible provider (over MockTransport) and the factory."""

from __future__ import annotations

import asyncio
import base64
import colorsys
import io
import json
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageChops
from pydantic import SecretStr, ValidationError

from providers.assets import AssetStore
from providers.fonts import FontNotFoundError, clear_font_cache, find_cjk_font
from providers.images import (
    DEFAULT_PALETTE,
    ImageProvider,
    ImageProviderError,
    ImageRequest,
    LocalCardProvider,
    OpenAIImageProvider,
    build_image_provider,
    variant_hue,
)
from providers.images.text import wrap

PALETTE = ["#f7e6d7", "#e07a5f", "#3d405b"]
API_KEY = "sk-test-SECRET-1234567890"


@pytest.fixture(scope="module")
def provider() -> LocalCardProvider:
    return LocalCardProvider()


def _cover(title: str = "学生党平价护肤清单：百元内精华怎么选", **kw: object) -> ImageRequest:
    fields: dict[str, object] = {
        "slot": 1,
        "kind": "cover",
        "title": title,
        "text": "三款百元内精华横向对比，成分讲清楚。",
        "palette": PALETTE,
    }
    fields.update(kw)
    return ImageRequest.model_validate(fields)


def _content(**kw: object) -> ImageRequest:
    fields: dict[str, object] = {
        "slot": 2,
        "kind": "content",
        "title": "烟酰胺精华 Niacinamide serum",
        "text": "先从隔天晚上用开始，建立耐受。\nStart with 2% and patch test first, because "
        "higher concentrations can irritate sensitive skin.",
        "palette": PALETTE,
    }
    fields.update(kw)
    return ImageRequest.model_validate(fields)


def _png(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def _inked(diff: Image.Image) -> int:
    """Count pixels of a greyscale difference image that changed clearly (> 64 of 255)."""
    return sum(diff.histogram()[65:])


def _close(a: object, b: tuple[int, ...], tol: int = 3) -> bool:
    assert isinstance(a, tuple)
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


# --- local cards ------------------------------------------------------------------


@pytest.mark.parametrize("req", [_cover(), _content(), _content(kind="detail", slot=3)])
async def test_local_card_is_a_real_3x4_png_in_the_palette(
    provider: LocalCardProvider, req: ImageRequest, tmp_path: Path
) -> None:
    generated = await provider.generate(req)
    record = AssetStore(tmp_path).put(
        generated.data, generated.content_type, meta={"slot": req.slot}
    )

    assert record.path is not None
    with Image.open(record.path) as img:
        assert img.format == "PNG"
        assert img.size == (1080, 1440)
        assert img.mode == "RGB"
        rgb = img.convert("RGB")
        lo, hi = rgb.convert("L").getextrema()
        assert isinstance(lo, int) and isinstance(hi, int)
        assert hi - lo > 50, "card is a flat single colour"
        # The palette's first colour is the background at the top-left corner.
        assert _close(rgb.getpixel((2, 2)), (0xF7, 0xE6, 0xD7))
    assert (record.width, record.height, record.content_type) == (1080, 1440, "image/png")


async def test_chinese_title_renders_glyphs_not_blanks_or_boxes(
    provider: LocalCardProvider,
) -> None:
    blank = _png((await provider.generate(_cover(title=" ", text=""))).data)
    one = _png((await provider.generate(_cover(title="中文标题", text=""))).data)
    other = _png((await provider.generate(_cover(title="一二三四", text=""))).data)

    title_band = (96, 300, 984, 1100)
    drawn = ImageChops.difference(one, blank).crop(title_band).convert("L")
    assert drawn.getbbox() is not None, "no title pixels were drawn"
    assert _inked(drawn) > 5000
    # Missing glyphs would all draw the same box; different characters must differ.
    shapes = ImageChops.difference(one, other).crop(title_band).convert("L")
    assert _inked(shapes) > 2000


async def test_content_card_renders_body_text(provider: LocalCardProvider) -> None:
    empty = _png((await provider.generate(_content(text=""))).data)
    full = _png((await provider.generate(_content())).data)
    body_area = (144, 500, 936, 1300)
    diff = ImageChops.difference(full, empty).crop(body_area).convert("L")
    assert _inked(diff) > 3000


async def test_dark_palette_gets_light_title_text(provider: LocalCardProvider) -> None:
    img = _png(
        (
            await provider.generate(_cover(title="WWWW", text="", palette=["#101820", "#f2aa4c"]))
        ).data
    )
    # The brightest pixel of the title band is near white: light ink on a dark card.
    band = img.crop((96, 500, 984, 900)).convert("L")
    assert sum(band.histogram()[231:]) > 1000


async def test_the_png_holds_exactly_the_rendered_pixels(provider: LocalCardProvider) -> None:
    for req in (_content(), ImageRequest(slot=1, kind="cover", title="平价护肤", text="学生党")):
        card = await provider.generate(req)
        decoded = Image.open(io.BytesIO(card.data))
        assert decoded.format == "PNG" and decoded.mode == "RGB"
        assert decoded.tobytes() == provider.render(req).tobytes()


async def test_rendering_is_deterministic(provider: LocalCardProvider) -> None:
    first = await provider.generate(_content())
    second = await provider.generate(_content())
    assert first.data == second.data


async def test_a_redrawn_card_is_another_card_in_the_same_palette_family(
    provider: LocalCardProvider,
) -> None:
    first = await provider.generate(_content())
    assert (await provider.generate(_content().model_copy(update={"variant": 0}))).data == (
        first.data
    )  # variant 0: the cards drawn before variants existed
    redrawn = [
        await provider.generate(_content().model_copy(update={"variant": v})) for v in (1, 2)
    ]
    assert len({first.data, *(r.data for r in redrawn)}) == 3
    # The panel's colour moves with the palette's hue; its lightness stays.
    panel = [
        Image.open(io.BytesIO(c.data)).convert("RGB").getpixel((540, 700))
        for c in (first, redrawn[0])
    ]
    assert panel[0] != panel[1]
    lightness = [colorsys.rgb_to_hls(*(x / 255 for x in c))[1] for c in panel]
    assert abs(lightness[0] - lightness[1]) < 0.05
    assert [variant_hue(v) for v in range(5)] == [0, 24, -24, 48, -48]


async def test_four_cards_render_concurrently(provider: LocalCardProvider) -> None:
    requests = [_cover(slot=1)] + [_content(slot=n, title=f"第{n}页") for n in (2, 3, 4)]
    results = await asyncio.gather(*(provider.generate(r) for r in requests))
    assert len(results) == 4
    assert len({r.data for r in results}) == 4
    assert all(_png(r.data).size == (1080, 1440) for r in results)


async def test_a_card_never_draws_prompt_markup(provider: LocalCardProvider) -> None:
    # The cover a model's leaked delimiter would have headlined draws as if it were absent.
    leaked = provider.render(_cover(title="<<<用户请求>>>学生党平价护肤", text="‹‹‹x›››讲清成分"))
    clean = provider.render(_cover(title="学生党平价护肤", text="讲清成分"))
    assert ImageChops.difference(leaked.convert("RGB"), clean.convert("RGB")).getbbox() is None
    body = provider.render(_content(text="先从隔天晚上用开始。\n<<<end 帖子>>>"))
    plain = provider.render(_content(text="先从隔天晚上用开始。"))
    assert ImageChops.difference(body.convert("RGB"), plain.convert("RGB")).getbbox() is None


async def test_overlong_text_is_truncated_with_ellipsis(provider: LocalCardProvider) -> None:
    generated = await provider.generate(_content(text="很长的正文。" * 600))
    assert _png(generated.data).size == (1080, 1440)


def test_default_palette_is_used_without_one(provider: LocalCardProvider) -> None:
    img = provider.render(_content(palette=None))
    assert _close(
        img.getpixel((2, 2)), tuple(int(DEFAULT_PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    )


def test_wrap_breaks_chinese_by_width_and_english_on_spaces(provider: LocalCardProvider) -> None:
    from PIL import ImageFont

    font = ImageFont.truetype(str(provider.font_path), 40)
    chinese = wrap("学生党平价护肤清单，百元内精华怎么选才不踩雷。", font, 300)
    assert len(chinese) > 1
    assert all(font.getlength(line) <= 300 + 40 for line in chinese)
    assert "".join(chinese) == "学生党平价护肤清单，百元内精华怎么选才不踩雷。"
    assert not any(line.startswith(("，", "。")) for line in chinese)

    english = wrap("start with two percent niacinamide first", font, 300)
    assert len(english) > 1
    assert " ".join(english) == "start with two percent niacinamide first"


def test_request_validates_palette_and_slot() -> None:
    assert _cover(palette=["E07A5F", "#abc"]).palette == ["#e07a5f", "#aabbcc"]
    with pytest.raises(ValidationError):
        _cover(palette=["red"])
    with pytest.raises(ValidationError):
        _cover(slot=0)


def test_local_provider_satisfies_the_protocol(provider: LocalCardProvider) -> None:
    assert isinstance(provider, ImageProvider)
    assert provider.name == "local"


# --- fonts ---------------------------------------------------------------------------


def test_explicit_missing_font_says_how_to_fix(tmp_path: Path) -> None:
    clear_font_cache()
    with pytest.raises(FontNotFoundError) as info:
        find_cjk_font(tmp_path / "nope.ttf")
    message = str(info.value)
    assert "nope.ttf" in message
    assert "apt-get install fonts-wqy-microhei" in message
    assert "FONT_PATH" in message


def test_font_search_finds_an_installed_cjk_font() -> None:
    path = find_cjk_font()
    assert path.is_file()
    assert find_cjk_font(path) == path.resolve()


# --- OpenAI-compatible provider ---------------------------------------------------------


def _png_b64(size: tuple[int, int] = (64, 96), colour: str = "#e07a5f") -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _openai(handler: httpx.MockTransport, **kw: object) -> OpenAIImageProvider:
    options: dict[str, object] = {"backoff_base": 0.0, "transport": handler}
    options.update(kw)
    return OpenAIImageProvider("https://images.test/v1/", SecretStr(API_KEY), **options)  # type: ignore[arg-type]


async def test_openai_provider_decodes_b64_and_fits_to_the_card() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"b64_json": _png_b64()}]})

    result = await _openai(httpx.MockTransport(handler)).generate(_cover(prompt="a latte"))

    assert (result.content_type, result.width, result.height) == ("image/png", 1080, 1440)
    assert _png(result.data).size == (1080, 1440)
    request = seen[0]
    assert str(request.url) == "https://images.test/v1/images/generations"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    body = json.loads(request.content)
    assert body["model"] == "gpt-image-1"
    assert body["n"] == 1 and body["size"] == "1024x1536"
    assert "a latte" in body["prompt"] and "text" in body["prompt"]
    # gpt-image-* models reject response_format; it is sent to other models only.
    assert "response_format" not in body


async def test_openai_provider_asks_dalle_for_base64() -> None:
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"data": [{"b64_json": _png_b64()}]})

    await _openai(httpx.MockTransport(handler), model="dall-e-3").generate(_cover())
    assert bodies[0]["response_format"] == "b64_json"


async def test_openai_provider_downloads_url_without_the_key() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/images/generations"):
            return httpx.Response(200, json={"data": [{"url": "https://cdn.test/x.png"}]})
        assert "authorization" not in request.headers
        return httpx.Response(200, content=base64.b64decode(_png_b64()))

    result = await _openai(httpx.MockTransport(handler), fit_to_request=False).generate(_cover())
    assert (result.width, result.height) == (64, 96)


async def test_openai_provider_retries_a_500_then_succeeds() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(500, json={"error": {"message": "overloaded"}})
        return httpx.Response(200, json={"data": [{"b64_json": _png_b64()}]})

    result = await _openai(httpx.MockTransport(handler)).generate(_content())
    assert calls == 2
    assert result.width == 1080


async def test_openai_provider_retries_timeouts_then_gives_up() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(ImageProviderError, match="3 attempt"):
        await _openai(httpx.MockTransport(handler), max_retries=2).generate(_content())
    assert calls == 3


async def test_openai_errors_never_contain_the_api_key() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401, json={"error": {"message": f"Incorrect API key provided: {API_KEY}"}}
        )

    provider = _openai(httpx.MockTransport(handler))
    with pytest.raises(ImageProviderError) as info:
        await provider.generate(_content())
    assert API_KEY not in str(info.value)
    assert info.value.status_code == 401
    assert API_KEY not in repr(provider)


async def test_openai_rejects_non_image_payload() -> None:
    junk = base64.b64encode(b"not an image").decode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"b64_json": junk}]})

    with pytest.raises(ImageProviderError, match="not an image"):
        await _openai(httpx.MockTransport(handler)).generate(_content())


# --- factory ----------------------------------------------------------------------------


def test_factory_builds_both_providers() -> None:
    assert build_image_provider("local").name == "local"
    remote = build_image_provider(
        "OpenAI", openai_base_url="https://images.test/v1", openai_api_key=API_KEY
    )
    assert isinstance(remote, OpenAIImageProvider)


def test_factory_rejects_unknown_and_unconfigured() -> None:
    with pytest.raises(ValueError, match="'local', 'openai'"):
        build_image_provider("midjourney")
    with pytest.raises(ValueError, match="IMAGE_API_KEY"):
        build_image_provider("openai", openai_base_url="https://images.test/v1")
