"""The check of an outbound URL a caller gave: a webhook, a publisher, an MCP server.

`check_outbound_url` turns `core.outbound.OutboundRules.refusal` into the engine's
`InvalidFields`, which the HTTP API answers 422 naming the field and the rule. Call
it when the URL is given, so that nothing is stored that the sender would refuse;
the sender checks it again with the same rules before each call (the rules may
have changed in between). The rules: docs/webhooks-security.md.
"""

from __future__ import annotations

from typing import Any

from core.outbound import OutboundRules
from engine.errors import InvalidFields


def check_outbound_url(value: Any, rules: OutboundRules, *, field_name: str) -> str | None:
    """Return a URL a caller gave once it passes the rules; None when it is unset.

    Args:
        value: The field's value as given (None or "" mean unset).
        rules: The deployment's rules for outbound calls.
        field_name: The field's dotted path in the request body, named in the error.

    Raises:
        InvalidFields: The value is not a string, or the URL breaks a rule.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidFields.at(field_name, f"{field_name} must be a URL string")
    why = rules.refusal(value)
    if why is not None:
        raise InvalidFields.at(field_name, f"{field_name} is refused: {why}")
    return value
