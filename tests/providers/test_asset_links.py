"""Signed image links (providers/asset_links.py): signing, checking, the secret."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from core.settings import Settings
from providers.asset_links import SIGNATURE_CHARS, AssetLinks, signature_of

ASSET = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"
KEY_A = "first-key-0123456789"
KEY_B = "second-key-0123456789"


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
def links() -> AssetLinks:
    return AssetLinks(b"a-secret-of-sixteen-bytes-or-more")


def test_a_signature_verifies_for_its_asset_only(links: AssetLinks) -> None:
    signature = links.signature(ASSET)
    assert len(signature) == SIGNATURE_CHARS
    assert links.verify(ASSET, signature)
    assert not links.verify(OTHER, signature)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s[:-1] + ("A" if s[-1] != "A" else "B"),  # one character changed
        lambda s: s[:-1],  # shortened
        lambda s: s + "A",  # lengthened
        lambda s: "",
        lambda s: "é" * SIGNATURE_CHARS,  # not ASCII
    ],
)
def test_a_tampered_signature_is_refused(links: AssetLinks, tamper: Any) -> None:
    assert not links.verify(ASSET, tamper(links.signature(ASSET)))


def test_a_malformed_asset_id_never_verifies(links: AssetLinks) -> None:
    assert not links.verify("../etc/passwd", links.signature(ASSET))
    assert not links.verify(ASSET.upper(), links.signature(ASSET.upper()))


def test_another_secret_signs_differently(links: AssetLinks) -> None:
    other = AssetLinks(b"another-secret-of-sixteen-bytes")
    assert not other.verify(ASSET, links.signature(ASSET))


@pytest.mark.parametrize(
    ("url", "signed"),
    [
        (f"/assets/{ASSET}", f"/assets/{ASSET}?sig={{sig}}"),
        (f"http://h:8000/assets/{ASSET}", f"http://h:8000/assets/{ASSET}?sig={{sig}}"),
        (f"https://h/base/assets/{ASSET}", f"https://h/base/assets/{ASSET}?sig={{sig}}"),
    ],
)
def test_sign_adds_the_signature_to_an_asset_url(links: AssetLinks, url: str, signed: str) -> None:
    result = links.sign(url)
    assert result == signed.format(sig=links.signature(ASSET))
    assert links.verify(ASSET, signature_of(result.split("?", 1)[1]))


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/picture.png",
        f"/assets/{ASSET}?sig=already",
        "/assets/not-an-id",
        f"/other/{ASSET}",
        "",
    ],
)
def test_sign_leaves_other_urls_alone(links: AssetLinks, url: str) -> None:
    assert links.sign(url) == url


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        AssetLinks(b"short")


def test_an_open_service_signs_nothing() -> None:
    assert AssetLinks.from_settings(settings()) is None
    assert AssetLinks.from_settings(settings(asset_link_secret="x" * 32)) is None


def test_the_default_secret_is_derived_from_the_keys_in_any_order() -> None:
    one = AssetLinks.from_settings(settings(auth_api_keys=[KEY_A, KEY_B]))
    same = AssetLinks.from_settings(settings(auth_api_keys=[KEY_B, KEY_A]))
    changed = AssetLinks.from_settings(settings(auth_api_keys=[KEY_A]))
    assert one is not None and same is not None and changed is not None
    assert same.verify(ASSET, one.signature(ASSET))
    assert not changed.verify(ASSET, one.signature(ASSET))
    # Not any one key itself: the signature is not an HMAC under a key.
    assert one.signature(ASSET) != AssetLinks(KEY_A.encode()).signature(ASSET)


def test_an_explicit_secret_keeps_links_across_key_changes() -> None:
    secret = "link-secret-0123456789abcdef"
    before = AssetLinks.from_settings(settings(auth_api_keys=[KEY_A], asset_link_secret=secret))
    after = AssetLinks.from_settings(settings(auth_api_keys=[KEY_B], asset_link_secret=secret))
    assert before is not None and after is not None
    assert after.verify(ASSET, before.signature(ASSET))


def test_settings_refuse_a_short_link_secret() -> None:
    with pytest.raises(ValidationError, match="ASSET_LINK_SECRET"):
        settings(asset_link_secret="too-short")
