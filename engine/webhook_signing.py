"""Webhook signatures: each delivery signed with its owner's own secret (docs/webhooks.md).

`X-Atelier-Signature` is `sha256=` and the hex HMAC-SHA256, keyed with the signing
secret of the API key that owns the run, of `"<X-Atelier-Delivery>.<X-Atelier-Timestamp>.<body>"`:
the delivery id is inside the signature, so a captured delivery replayed under
another id does not verify, and one tenant's secret verifies only its own deliveries.

Where the secrets come from is not the engine's business: the engine's opener
receives a `WebhookSecrets` (the product's key table; `MappingWebhookSecrets` in
memory), which answers a key's secrets, the current one first. While a rotated
secret's overlap window runs it answers both, and a delivery then carries one
signature per secret, comma-separated (`sha256=<new>,sha256=<old>`): a receiver
accepts the delivery when any of them verifies with the secret it holds. A key with
no secret of its own (`AUTH_API_KEYS`, open mode) is signed with WEBHOOK_SECRET;
without that, its deliveries go unsigned.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Protocol

#: What every signature starts with.
SIGNATURE_PREFIX = "sha256="
#: Signatures one delivery carries at most (a rotation's overlap needs two).
MAX_SIGNATURES = 4


class WebhookSecrets(Protocol):
    """Where the engine finds an API key's webhook signing secrets."""

    async def for_owner(self, owner: str) -> Sequence[str]:
        """Return the secrets of the key whose owner id is `owner`, the current one first.

        Empty when the key has none of its own (it is signed with WEBHOOK_SECRET).
        """
        ...


class DeliveryCheck(Protocol):
    """Whether the deliveries of an owner's runs may still be sent."""

    async def delivers_for(self, owner: str) -> bool:
        """Return False for an owner whose API key was revoked or has expired."""
        ...


class MappingWebhookSecrets:
    """Secrets held in memory, by owner id (a deployment whose keys come from settings)."""

    def __init__(self, secrets: Mapping[str, Sequence[str]] | None = None) -> None:
        """Answer `secrets[owner]` (nothing for an owner it does not name)."""
        self._secrets = {owner: tuple(values) for owner, values in (secrets or {}).items()}

    async def for_owner(self, owner: str) -> Sequence[str]:
        """Return the owner's secrets, the current one first (empty: none of its own)."""
        return self._secrets.get(owner, ())


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """Return one signature of a delivery's attempt sent at `timestamp` (Unix seconds)."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(
    secrets: Sequence[str], delivery_id: str, timestamp: str, body: bytes
) -> str | None:
    """Return the `X-Atelier-Signature` value: one signature per secret, comma-separated.

    None without a secret (the delivery goes unsigned). Empty and repeated secrets
    are skipped; at most `MAX_SIGNATURES`, the first ones.
    """
    distinct = list(dict.fromkeys(secret for secret in secrets if secret))[:MAX_SIGNATURES]
    if not distinct:
        return None
    return ",".join(sign(secret, delivery_id, timestamp, body) for secret in distinct)


async def secrets_of(lookup: WebhookSecrets | None, owner: str, fallback: str | None) -> list[str]:
    """Return the secrets a delivery of `owner` is signed with: its own, else `fallback`.

    Raises:
        Exception: Whatever the lookup raises (the secret cannot be read now).
    """
    own = list(await lookup.for_owner(owner)) if lookup is not None else []
    own = [secret for secret in own if secret]
    if own:
        return own
    return [fallback] if fallback else []


__all__ = [
    "MAX_SIGNATURES",
    "SIGNATURE_PREFIX",
    "DeliveryCheck",
    "MappingWebhookSecrets",
    "WebhookSecrets",
    "secrets_of",
    "sign",
    "signature_header",
]
