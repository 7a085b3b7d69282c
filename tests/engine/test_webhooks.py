"""Webhook signing, URL rules, the SSRF address checks and one attempt, table by table."""

from __future__ import annotations

import ipaddress
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import outbound as guarded_http
from core.outbound import GuardedTransport, OutboundRules, address_refusal, url_refusal
from engine.errors import InvalidFields
from engine.outbound import check_outbound_url
from engine.webhook_signing import (
    MAX_SIGNATURES,
    MappingWebhookSecrets,
    sign,
    signature_header,
)
from engine.webhooks import (
    EXCERPT_CHARS,
    MAX_BACKOFF,
    Delivery,
    WebhookConfig,
    check_webhook,
    delivery_id,
    retry_delay,
    send,
)
from tests.support.docs import code_block

ROOT = Path(__file__).resolve().parents[2]
SHARED_CASES = ROOT / "../shared/cases"
#: Today's scheme: the owning key's secret over "<delivery id>.<timestamp>.<body>".
PER_KEY = json.loads((SHARED_CASES / "webhook_signatures_per_key.json").read_text())
#: The scheme before issue 33: WEBHOOK_SECRET over "<timestamp>.<body>", which it replaced.
OLD_SCHEME = json.loads((SHARED_CASES / "webhook_signatures.json").read_text())["cases"]
#: A tolerance no vector's timestamp is too old for.
FOREVER = 10**10


def readme_verify() -> Any:
    """Return `verify` from the "Webhooks" page (docs/webhooks.md), run as written."""
    namespace: dict[str, Any] = {}
    exec(code_block("webhooks", "python"), namespace)
    return namespace["verify"]


def headers_of(case: dict[str, Any]) -> dict[str, str]:
    """Return the headers a receiver got with a case's delivery."""
    return {
        "X-Atelier-Delivery": case["delivery_id"],
        "X-Atelier-Timestamp": case["timestamp"],
        "X-Atelier-Signature": case["signature"],
    }


@pytest.mark.parametrize("case", PER_KEY["cases"], ids=lambda c: c["signature"][7:15])
def test_signature_vectors(case: dict[str, str]) -> None:
    body = case["body"].encode()
    assert sign(case["secret"], case["delivery_id"], case["timestamp"], body) == case["signature"]
    verify = readme_verify()
    headers = headers_of(case)
    assert verify(case["secret"], headers, body, tolerance=FOREVER)
    assert not verify(case["secret"], headers, body + b" ", tolerance=FOREVER)
    later = {**headers, "X-Atelier-Timestamp": str(int(case["timestamp"]) + 1)}
    assert not verify(case["secret"], later, body, tolerance=FOREVER)
    assert not verify(case["secret"], headers, body)  # an old timestamp: a replay
    # Another key's secret verifies none of this key's deliveries.
    others = {c["secret"] for c in PER_KEY["cases"]} - {case["secret"]}
    assert others and not any(verify(o, headers, body, tolerance=FOREVER) for o in others)


@pytest.mark.parametrize("replay", PER_KEY["replays"], ids=lambda c: c["delivery_id"][-4:])
def test_a_delivery_replayed_under_another_id_does_not_verify(replay: dict[str, Any]) -> None:
    assert replay["verifies"] is False
    body = replay["body"].encode()
    verify = readme_verify()
    assert not verify(replay["secret"], headers_of(replay), body, tolerance=FOREVER)
    assert (
        sign(replay["secret"], replay["delivery_id"], replay["timestamp"], body)
        != (replay["signature"])
    )
    (original,) = [c for c in PER_KEY["cases"] if c["signature"] == replay["signature"]]
    assert original["delivery_id"] != replay["delivery_id"]
    assert verify(original["secret"], headers_of(original), body, tolerance=FOREVER)


@pytest.mark.parametrize("case", OLD_SCHEME, ids=lambda c: c["signature"][7:15])
def test_the_replaced_schemes_signatures_no_longer_verify(case: dict[str, str]) -> None:
    """A signature over "<timestamp>.<body>" alone verifies under no delivery id now."""
    body = case["body"].encode()
    verify = readme_verify()
    for delivery in ("", "1f0c8a2e-0000-4000-8000-000000000101", case["timestamp"]):
        headers = {**headers_of({**case, "delivery_id": delivery})}
        assert not verify(case["secret"], headers, body, tolerance=FOREVER)
        assert sign(case["secret"], delivery, case["timestamp"], body) != case["signature"]


def test_during_a_rotation_a_delivery_carries_a_signature_per_secret() -> None:
    body, verify = b'{"status":"success"}', readme_verify()
    header = signature_header(["whsec_new", "whsec_old"], "d-1", "1764147600", body)
    assert header == ",".join(
        [sign("whsec_new", "d-1", "1764147600", body), sign("whsec_old", "d-1", "1764147600", body)]
    )
    headers = {"X-Atelier-Delivery": "d-1", "X-Atelier-Timestamp": "1764147600"}
    headers["X-Atelier-Signature"] = header
    assert verify("whsec_new", headers, body, tolerance=FOREVER)
    assert verify("whsec_old", headers, body, tolerance=FOREVER)
    assert not verify("whsec_other", headers, body, tolerance=FOREVER)
    assert not verify("whsec_new", {**headers, "X-Atelier-Delivery": "d-2"}, body, FOREVER)
    # Empty and repeated secrets are skipped; no secret at all: unsigned.
    assert signature_header(["a", "", "a"], "d", "1", b"") == sign("a", "d", "1", b"")
    assert signature_header(["", ""], "d", "1", b"") is None
    many = [f"s{i}" for i in range(MAX_SIGNATURES + 3)]
    assert len((signature_header(many, "d", "1", b"") or "").split(",")) == MAX_SIGNATURES


REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "metadata"),
    ("169.254.1.1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("100.100.100.200", "metadata"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.0.8", "IETF"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.2.1", "private"),  # documentation
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fc00::1", "private"),
    ("fd00:ec2::254", "metadata"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "private"),  # documentation
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("64:ff9b:1::a00:1", "local-use NAT64"),
    ("2002:7f00:1::", "6to4 address carrying a loopback"),  # 127.0.0.1
    ("2002:a00:1::1", "6to4 address carrying a private"),  # 10.0.0.1
    ("2002:a9fe:a9fe::", "6to4 address carrying a cloud metadata"),  # 169.254.169.254
    ("fec0::1", "site-local"),
    ("2001::1", "Teredo"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("::8.8.8.8", "IPv4-compatible"),
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_non_public_addresses_are_refused_with_their_reason(address: str, why: str) -> None:
    reason = address_refusal(ipaddress.ip_address(address))
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


URLS: list[tuple[str, dict[str, Any], str | None]] = [
    ("https://hooks.example.com/atelier", {}, None),
    ("https://hooks.example.com:8443/a?b=c", {}, None),
    ("ftp://hooks.example.com/x", {}, "only http(s)"),
    ("file:///etc/passwd", {}, "only http(s)"),
    ("http://hooks.example.com/x", {}, "only https"),
    ("https:///nohost", {}, "no host"),
    ("https://user:pw@hooks.example.com/", {}, "credentials"),
    ("https://127.0.0.1/hook", {}, "loopback"),
    ("https://[::1]:9/hook", {}, "loopback"),
    ("https://[::ffff:10.1.2.3]/hook", {}, "private"),
    ("https://169.254.169.254/latest/meta-data", {}, "metadata"),
    ("https://hooks.example.com:99999/", {}, "port must be 1-65535"),
    ("https://hooks.example.com:0/", {}, "port must be 1-65535"),
    ("https://localhost/hook", {}, None),  # a name: checked when it is resolved
    ("https://other.example.com/", {"allowed_hosts": ["hooks.example.com"]}, "ALLOWED_HOSTS"),
    ("https://HOOKS.example.com/", {"allowed_hosts": ["hooks.example.com"]}, None),
    ("http://127.0.0.1:9/hook", {"allow_private": True}, None),
    ("https://bücher.example/hook", {}, None),  # sent IDNA-encoded
    ("https://xn--bcher-kva.example/hook", {}, None),
    ("https://hooks.example.com/a b?c=d e", {}, None),  # httpx quotes the path
    ("https://[2002:808:808::1]/hook", {}, None),  # 6to4 of a public address
    ("https://[2002:808:808::1]/hook", {"allowed_hosts": ["2002:808:808::1"]}, None),
    ("https://bücher.example/", {"allowed_hosts": ["bücher.example"]}, None),
    ("https://[2002:7f00:1::]/hook", {}, "6to4 address carrying a loopback"),
    ("https://[fec0::1]/hook", {}, "site-local"),
    ("https://[64:ff9b::a00:1]/hook", {}, "private"),
    ("https://[64:ff9b:1::1]/hook", {}, "NAT64"),
    ("https://[2001::5efe:a00:1]/hook", {}, "Teredo"),
    ("https://[::127.0.0.1]/hook", {}, "IPv4-compatible"),
    ("https://[fe80::1%25eth0]/hook", {"allow_private": True}, "zone"),
]

#: URLs the deliverer of older versions accepted and then could not send (issue 33),
#: or sent elsewhere than they were checked as: refused whatever the options, with
#: the rule they break.
UNSENDABLE: list[tuple[str, str]] = [
    ("https://999.1.1.1/h", "malformed (Invalid IPv4 address"),
    ("https://hooks.example.com/h\tx", "malformed (Invalid non-printable"),
    ("https://hooks.example.com/h\nx", "malformed (Invalid non-printable"),
    ("https://hooks.exa\tmple.com/h", "malformed (Invalid non-printable"),
    ("https://xn--a.com/h", "not a valid internationalized name"),
    ("https://hooks.xn--a.com/h", "not a valid internationalized name"),
    ("https://a..b.com/h", "not a valid host name"),
    ("https://.a.com/h", "not a valid host name"),
    ("https://hooks example.com/h", "not a valid host name"),
    ("https://" + "a" * 64 + ".com/h", "not a valid host name"),
    ("https://hooks.example.com./h", "ends with a dot"),
    ("https://2130706433/h", "a.b.c.d (it means 127.0.0.1)"),
    ("https://0x7f000001/h", "a.b.c.d (it means 127.0.0.1)"),
    ("https://0X7F000001/h", "a.b.c.d (it means 127.0.0.1)"),
    ("https://127.1/h", "a.b.c.d (it means 127.0.0.1)"),
    ("https://0x7f.1/h", "a.b.c.d (it means 127.0.0.1)"),
    ("https://134744072/h", "a.b.c.d (it means 8.8.8.8)"),  # public, still a disguise
    ("https://1.2.3.4.5/h", "a.b.c.d"),
    ("https://0177.0.0.1/h", "malformed (Invalid IPv4 address"),
    ("https://010.0.0.1/h", "malformed (Invalid IPv4 address"),
]


@pytest.mark.parametrize(("url", "options", "why"), URLS)
def test_url_rules(url: str, options: dict[str, Any], why: str | None) -> None:
    reason = url_refusal(url, **options)
    assert (reason is None) if why is None else (reason is not None and why in reason), reason


@pytest.mark.parametrize(("url", "why"), UNSENDABLE)
@pytest.mark.parametrize("allow_private", [False, True])
def test_a_url_the_deliverer_cannot_send_as_checked_is_refused(
    url: str, why: str, allow_private: bool
) -> None:
    reason = url_refusal(url, allow_private=allow_private)
    assert reason is not None and why in reason, reason


SENDABLE_AS_CHECKED = [url for url, options, why in URLS if why is None] + [
    "https://hooks.example.com/%00",  # an escaped NUL is path data
    "https://a-b_c.example.com:8443/x?y#z",
    "https://8.8.8.8/h",
]


@pytest.mark.parametrize("url", SENDABLE_AS_CHECKED)
async def test_a_url_the_rules_accept_is_sent_to_the_host_they_checked(url: str) -> None:
    """The rules parse as the sender does: what they accept, it sends, to that very host."""
    parsed = httpx.URL(url)
    checked = parsed.raw_host.decode()
    assert url_refusal(url, allow_private=True) is None
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[Any]:
        asked.append(host)
        return [ipaddress.ip_address("93.184.216.34")]

    seen: list[httpx.Request] = []
    inner = httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(204))  # type: ignore[func-returns-value]
    transport = GuardedTransport(allow_private=True, inner=inner, resolver=resolve)
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.post(url, content=b"{}")
    assert response.status_code == 204
    literal = guarded_http.literal_address(checked) is not None
    assert asked == ([] if literal else [checked])  # a literal address is not looked up
    (request,) = seen
    assert httpx.URL(f"https://{request.headers['host']}/").raw_host.decode() == checked
    if parsed.scheme == "https" and not literal:
        assert request.extensions["sni_hostname"] == checked


def test_a_refused_webhook_is_an_error_naming_the_field_and_the_rule() -> None:
    with pytest.raises(InvalidFields) as caught:
        check_webhook("http://127.0.0.1/hook", WebhookConfig())
    (error,) = caught.value.errors
    assert error["loc"] == ("webhook",) and "https" in error["msg"]
    assert check_webhook(None, WebhookConfig()) is None
    assert check_webhook("https://a.example/h", WebhookConfig()) == "https://a.example/h"
    with pytest.raises(InvalidFields):
        check_webhook("https://a.example/" + "x" * 3000, WebhookConfig())
    with pytest.raises(InvalidFields) as caught:
        check_webhook("https://0x7f000001/h", WebhookConfig(allow_private=True))
    (error,) = caught.value.errors
    assert error["loc"] == ("webhook",) and "a.b.c.d" in error["msg"]
    with pytest.raises(InvalidFields) as caught:
        check_webhook(["https://a.example/h"], WebhookConfig())
    assert "must be a URL string" in caught.value.errors[0]["msg"]


def test_the_outbound_check_names_the_field_it_is_given() -> None:
    rules = OutboundRules(private_setting="X_ALLOW", hosts_setting="X_HOSTS")
    with pytest.raises(InvalidFields) as caught:
        check_outbound_url("https://10.0.0.1/publish", rules, field_name="publisher.url")
    (error,) = caught.value.errors
    assert error["loc"] == ("publisher", "url") and "X_ALLOW allows it" in error["msg"]
    assert check_outbound_url("", rules, field_name="publisher.url") is None
    assert check_outbound_url("https://a.example/p", rules, field_name="p") == "https://a.example/p"


def resolving_to(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> list[str]:
    """Make the transport's resolver answer `addresses`; return the names it was asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[Any]:
        asked.append(host)
        return [ipaddress.ip_address(a) for a in addresses]

    monkeypatch.setattr(guarded_http, "resolve", resolve)
    return asked


async def test_the_transport_connects_to_the_checked_address_with_the_original_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = resolving_to(monkeypatch, "93.184.216.34")
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    transport = GuardedTransport(inner=httpx.MockTransport(answer))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.post("https://hooks.example.com:8443/in", content=b"{}")
    assert response.status_code == 204 and asked == ["hooks.example.com"]
    (request,) = seen
    assert request.url.host == "93.184.216.34" and request.url.port == 8443
    assert request.headers["host"] == "hooks.example.com:8443"
    assert request.extensions["sni_hostname"] == "hooks.example.com"


@pytest.mark.parametrize(
    "addresses", [("127.0.0.1",), ("93.184.216.34", "10.0.0.7"), ("::ffff:169.254.169.254",)]
)
async def test_a_name_resolving_to_any_refused_address_is_never_connected(
    monkeypatch: pytest.MonkeyPatch, addresses: tuple[str, ...]
) -> None:
    resolving_to(monkeypatch, *addresses)
    connected: list[httpx.Request] = []
    transport = GuardedTransport(inner=httpx.MockTransport(lambda r: connected.append(r)))  # type: ignore[arg-type, func-returns-value]
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(guarded_http.AddressRefused) as refused:
            await client.post("https://rebind.example.com/in", content=b"{}")
    assert connected == []
    message = str(refused.value)
    assert message.startswith("refused: rebind.example.com resolves to a")
    # The rule, never the resolver's answer (that would map internal DNS for the caller).
    assert not any(address in message for address in addresses)
    assert not re.search(r"\d+\.\d+\.\d+|::", message), message


async def test_a_connection_error_names_the_host_not_the_address_it_resolved_to() -> None:
    async def resolve(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address("10.9.8.7")]

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"Connect call failed ('{request.url.host}', 443)")

    transport = GuardedTransport(
        allow_private=True, inner=httpx.MockTransport(refuse), resolver=resolve
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError) as failed:
            await client.post("https://internal.example.com/in", content=b"{}")
    assert str(failed.value) == "Connect call failed ('internal.example.com', 443)"


async def test_localhost_is_refused_at_connect_time_by_the_real_resolver() -> None:
    async with httpx.AsyncClient(transport=GuardedTransport()) as client:
        with pytest.raises(guarded_http.AddressRefused, match="loopback"):
            await client.get("https://localhost:9/hook")


async def test_a_name_the_resolver_cannot_encode_is_a_connect_error() -> None:
    """The system resolver raises UnicodeError, not OSError, for some names: still a failure."""
    async with httpx.AsyncClient(transport=GuardedTransport()) as client:
        with pytest.raises(httpx.ConnectError, match="cannot resolve"):
            await client.get("https://a..b.example.com/hook")


def delivery(url: str = "https://hooks.example.com/in", owner: str = "key_a") -> Delivery:
    return Delivery(
        delivery_id("run-1", url), "run-1", url, '{"status":"success"}', 0, time.time(), owner
    )


async def attempt_against(
    answer: httpx.Response | Exception,
    config: WebhookConfig,
    url: str | None = None,
    owner: str = "key_a",
) -> Any:
    def respond(request: httpx.Request) -> httpx.Response:
        respond.request = request  # type: ignore[attr-defined]
        if isinstance(answer, Exception):
            raise answer
        return answer

    sent = delivery(url, owner) if url else delivery(owner=owner)
    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        attempt = await send(client, config, sent, 1)
    return attempt, getattr(respond, "request", None)


def received(request: httpx.Request) -> dict[str, str]:
    """Return the Atelier headers of a request as a receiver reads them (by their names)."""
    names = ("X-Atelier-Delivery", "X-Atelier-Timestamp", "X-Atelier-Signature")
    return {name: request.headers[name] for name in names if name in request.headers}


def signature_of(request: httpx.Request, secret: str) -> str:
    """Return the signature `secret` gives the request's delivery id, timestamp and body."""
    headers = request.headers
    delivery, stamp = headers["X-Atelier-Delivery"], headers["X-Atelier-Timestamp"]
    return sign(secret, delivery, stamp, request.content)


async def test_an_attempt_is_signed_and_carries_the_delivery_id() -> None:
    attempt, request = await attempt_against(httpx.Response(200), WebhookConfig(secret="s3cret"))
    assert attempt.outcome == "success" and attempt.status_code == 200
    stamp = request.headers["X-Atelier-Timestamp"]
    assert abs(int(stamp) - time.time()) < 5
    assert request.headers["X-Atelier-Delivery"] == delivery().delivery_id
    assert request.headers["X-Atelier-Signature"] == signature_of(request, "s3cret")
    assert readme_verify()("s3cret", received(request), request.content)
    _, request = await attempt_against(httpx.Response(200), WebhookConfig())
    assert "X-Atelier-Signature" not in request.headers


async def test_each_keys_deliveries_are_signed_with_its_own_secrets() -> None:
    secrets = MappingWebhookSecrets({"key_a": ["whsec_a"], "key_b": ["whsec_b2", "whsec_b1"]})
    config = WebhookConfig(secret="whsec_shared", secrets=secrets)
    _, to_a = await attempt_against(httpx.Response(200), config, owner="key_a")
    _, to_b = await attempt_against(httpx.Response(200), config, owner="key_b")
    _, to_c = await attempt_against(httpx.Response(200), config, owner="key_c")
    verify = readme_verify()
    assert to_a.headers["X-Atelier-Signature"] == signature_of(to_a, "whsec_a")
    assert verify("whsec_a", received(to_a), to_a.content)
    assert not verify("whsec_shared", received(to_a), to_a.content)
    assert not verify("whsec_b2", received(to_a), to_a.content)
    # B is rotating: both of its secrets sign, the current one first.
    assert to_b.headers["X-Atelier-Signature"] == ",".join(
        [signature_of(to_b, "whsec_b2"), signature_of(to_b, "whsec_b1")]
    )
    assert verify("whsec_b1", received(to_b), to_b.content)
    assert not verify("whsec_a", received(to_b), to_b.content)
    # C has no secret of its own (AUTH_API_KEYS, open mode): WEBHOOK_SECRET signs it.
    assert to_c.headers["X-Atelier-Signature"] == signature_of(to_c, "whsec_shared")
    _, unsigned = await attempt_against(
        httpx.Response(200), WebhookConfig(secrets=secrets), owner="key_c"
    )
    assert "X-Atelier-Signature" not in unsigned.headers


class BrokenSecrets:
    """A key table that cannot be read now."""

    async def for_owner(self, owner: str) -> Sequence[str]:
        raise ConnectionError("the key table at 10.0.0.5 is down")


async def test_an_unreadable_secret_is_a_failed_attempt_and_nothing_is_sent() -> None:
    config = WebhookConfig(secret="whsec_shared", secrets=BrokenSecrets())
    attempt, request = await attempt_against(httpx.Response(200), config)
    assert request is None  # neither unsigned nor signed with another secret
    assert attempt.outcome == "network_error"
    assert attempt.error == "signing secret unreadable (ConnectionError)"  # no internals


async def test_a_failing_answer_keeps_only_a_short_excerpt_and_redirects_are_not_followed() -> None:
    attempt, _ = await attempt_against(httpx.Response(500, text="x" * 100_000), WebhookConfig())
    assert attempt.outcome == "http_error" and attempt.error == "HTTP 500"
    assert attempt.excerpt == "x" * EXCERPT_CHARS
    moved = httpx.Response(302, headers={"Location": "http://169.254.169.254/"})
    attempt, _ = await attempt_against(moved, WebhookConfig())
    assert attempt.outcome == "http_error" and "redirects are not followed" in attempt.error


async def test_a_url_refused_by_todays_rules_is_a_refused_attempt() -> None:
    config = WebhookConfig(allowed_hosts=("elsewhere.example.com",))
    attempt, request = await attempt_against(httpx.Response(200), config)
    assert attempt.outcome == "refused" and "WEBHOOK_ALLOWED_HOSTS" in attempt.error
    assert request is None


@pytest.mark.parametrize(("url", "why"), UNSENDABLE[::4])
async def test_a_stored_url_the_rules_now_refuse_is_a_refused_attempt_naming_the_rule(
    url: str, why: str
) -> None:
    """A row an older version let through ends with its first attempt (nothing sent)."""
    attempt, request = await attempt_against(httpx.Response(200), WebhookConfig(), url)
    assert request is None and attempt.outcome == "refused"
    assert attempt.error.startswith("refused: ") and why in attempt.error


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("boom /srv/secret"), UnicodeError("label empty"), httpx.InvalidURL("bad")],
)
async def test_any_error_while_sending_is_a_network_error_attempt(failure: Exception) -> None:
    attempt, _ = await attempt_against(failure, WebhookConfig())
    assert attempt.outcome == "network_error"
    assert attempt.error == f"sending failed ({type(failure).__name__})"  # no internals


async def test_an_answer_with_nul_bytes_is_kept_in_a_form_every_backend_stores() -> None:
    attempt, _ = await attempt_against(httpx.Response(500, content=b"no\x00pe"), WebhookConfig())
    assert attempt.outcome == "http_error" and attempt.excerpt == "no\ufffdpe"


def test_backoff_doubles_with_jitter_up_to_its_bound() -> None:
    for attempts in range(1, 12):
        full = min(MAX_BACKOFF, 30 * 2 ** (attempts - 1))
        delays = [retry_delay(attempts, 30) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays)
    assert retry_delay(30, 30) <= MAX_BACKOFF


def test_a_runs_delivery_id_is_stable() -> None:
    assert delivery_id("r", "https://a/") == delivery_id("r", "https://a/")
    assert delivery_id("r", "https://a/") != delivery_id("r2", "https://a/")


class Revoked:
    """A key table where key_a was revoked (the deliverer's `recipients`)."""

    async def delivers_for(self, owner: str) -> bool:
        return owner != "key_a"


async def test_a_revoked_keys_delivery_is_refused_and_nothing_is_sent() -> None:
    """A run that ended after its key was revoked sends nothing to the key's URL."""
    config = WebhookConfig(secret="whsec_shared", recipients=Revoked())
    attempt, request = await attempt_against(httpx.Response(200), config)
    assert request is None and attempt.outcome == "refused"
    assert attempt.error == "refused: the API key that owns the run is revoked or expired"
    attempt, request = await attempt_against(httpx.Response(200), config, owner="key_b")
    assert request is not None and attempt.outcome == "success"
