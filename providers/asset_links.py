"""Signed image links: `/assets/{id}?sig=…`, which a browser loads without an API key.

An `<img>` cannot send an API key, so with `AUTH_API_KEYS` set the image links a
post carries (its chat message, the MCP tool result, the A2A artifact) name the
asset and an HMAC-SHA256 of it: `sig` is the URL-safe base64 of
HMAC(secret, "atelier.asset-link.v1:" + asset_id). `app.security.AuthMiddleware`
lets a GET (or HEAD) of `/assets/{id}` through without a key when its `sig` is
the one for that id, compared in constant time; any other path, method or asset
still needs the key. The secret is `ASSET_LINK_SECRET`, else an HMAC of the sorted
`AUTH_API_KEYS` under a fixed label (the keys cannot be read back from it); without
`AUTH_API_KEYS` nothing is signed (`AssetLinks.from_settings` is None). Why links
never expire and how to revoke them: docs/security.md, "Signed image links".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import SecretStr

from core.settings import Settings
from providers.assets import is_valid_asset_id

#: The query parameter that carries a link's signature.
SIGNATURE_PARAM = "sig"
_LABEL = b"atelier.asset-link.v1:"
_DERIVE_LABEL = b"atelier.asset-link-secret.v1"
#: Length of a signature: the URL-safe base64 of 32 bytes, unpadded.
SIGNATURE_CHARS = 43
# `/assets/{id}`, relative or at the end of an absolute URL's path.
_ASSET_PATH = re.compile(r"^(?P<prefix>.*)/assets/(?P<id>[0-9a-f]{32})$")


class AssetLinks:
    """Sign and check image links with one secret."""

    def __init__(self, secret: bytes) -> None:
        """Sign with `secret` (at least 16 bytes)."""
        if len(secret) < 16:
            raise ValueError("the asset link secret must be at least 16 bytes")
        self._secret = secret

    @classmethod
    def from_settings(cls, settings: Settings) -> AssetLinks | None:
        """Return the links a deployment signs, or None when it runs open (plain links)."""
        if not settings.auth_api_keys:
            return None
        if settings.asset_link_secret is not None:
            return cls(settings.asset_link_secret.get_secret_value().encode("utf-8"))
        return cls(derived_secret(settings.auth_api_keys))

    def signature(self, asset_id: str) -> str:
        """Return the signature of an asset's link."""
        digest = hmac.new(self._secret, _LABEL + asset_id.encode("ascii"), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).decode("ascii").rstrip("=")

    def verify(self, asset_id: str, signature: str | None) -> bool:
        """Return whether `signature` is the one of this asset's link (constant time)."""
        if not signature or len(signature) != SIGNATURE_CHARS or not is_valid_asset_id(asset_id):
            return False
        expected = self.signature(asset_id).encode("ascii")
        return hmac.compare_digest(signature.encode("utf-8", "replace"), expected)

    def sign(self, url: str) -> str:
        """Return an asset's URL (relative or absolute) with its signature; others unchanged.

        A URL already carrying a query is returned as it is.
        """
        parts = urlsplit(url)
        matched = _ASSET_PATH.match(parts.path)
        if matched is None or parts.query:
            return url
        query = f"{SIGNATURE_PARAM}={self.signature(matched['id'])}"
        return urlunsplit(parts._replace(query=query))


def derived_secret(keys: Iterable[SecretStr | str]) -> bytes:
    """Return the link secret derived from a deployment's API keys (order does not matter)."""
    plain = sorted(k.get_secret_value() if isinstance(k, SecretStr) else k for k in keys)
    return hmac.new(_DERIVE_LABEL, "\n".join(plain).encode("utf-8"), hashlib.sha256).digest()


def signature_of(query_string: str) -> str | None:
    """Return the `sig` a request's query string carries, or None."""
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        if name == SIGNATURE_PARAM:
            return value
    return None


__all__ = ["SIGNATURE_PARAM", "AssetLinks", "derived_secret", "signature_of"]
