"""Outbound HTTP to addresses a caller named, without server-side request forgery.

`GuardedTransport` is an httpx transport that resolves a request's host itself,
checks **every** address the name resolves to (`address_refusal`: loopback,
private, link-local, CGNAT, multicast, reserved, unspecified and cloud-metadata
ranges, IPv4 and IPv6, IPv4-mapped and NAT64 IPv6 judged by their IPv4 address)
and connects to the checked address, keeping the original `Host` header and TLS
server name: no second DNS lookup happens that an attacker's resolver could answer
differently (DNS rebinding). A refused request raises `AddressRefused` before any
connection is made. Redirects are the client's business (`guarded_client` follows
none). `allow_private` lifts the address rule for trusted networks;
`url_refusal` decides what can be decided from a URL alone (its scheme, a literal
address, an allow-list of hosts).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Ranges `ipaddress` does not flag by itself, or that deserve their own name.
_NAMED_RANGES: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "a cloud metadata address"),
    ("100.100.100.200/32", "a cloud metadata address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("100.64.0.0/10", "a carrier-grade NAT (CGNAT) address"),
    ("192.0.0.0/24", "an IETF protocol assignment address"),
    ("198.18.0.0/15", "a benchmarking address"),
)
_NAMED = [(ipaddress.ip_network(net), why) for net, why in _NAMED_RANGES]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(httpx.TransportError):
    """The request's host is, or resolves to, an address the rules refuse; nothing was sent."""


def address_refusal(address: IPAddress) -> str | None:
    """Return why an address may not be connected to (None: a public address).

    IPv4-mapped (`::ffff:a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`) IPv6 addresses are
    judged by the IPv4 address they carry.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address_refusal(address.ipv4_mapped)
        if address in _NAT64:
            return address_refusal(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    for network, why in _NAMED:
        if address.version == network.version and address in network:
            return why
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "a non-public address"),
    )
    for refused, why in checks:
        if refused:
            return why
    return None


def literal_address(host: str) -> IPAddress | None:
    """Return the address a URL's host is written as, or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def url_refusal(
    url: str, *, allow_private: bool = False, allowed_hosts: Sequence[str] = ()
) -> str | None:
    """Return the rule a URL breaks, as far as it can be told without resolving it.

    http(s) only; `http` and private literal addresses only with `allow_private`;
    a host in `allowed_hosts` when that list is not empty. A host name is resolved
    and checked at connect time (`GuardedTransport`).
    """
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError as exc:
        return f"the URL is malformed ({exc})"
    if parts.scheme not in ("http", "https"):
        return "only http(s) URLs are allowed"
    if not host:
        return "the URL has no host"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed"
    if parts.scheme == "http" and not allow_private:
        return "only https URLs are allowed (WEBHOOK_ALLOW_PRIVATE allows http)"
    if allowed_hosts and host not in {h.lower() for h in allowed_hosts}:
        return f"host {host!r} is not in WEBHOOK_ALLOWED_HOSTS"
    address = literal_address(host)
    if address is not None and not allow_private:
        why = address_refusal(address)
        if why is not None:
            return f"{address} is {why} (WEBHOOK_ALLOW_PRIVATE allows it)"
    return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Return the addresses a host name resolves to (a literal address: itself)."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: dict[str, IPAddress] = {}
    for info in infos:
        text = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone
        seen.setdefault(text, ipaddress.ip_address(text))
    return list(seen.values())


class GuardedTransport(httpx.AsyncBaseTransport):
    """Connect only to checked addresses, pinned after the check (see the module docstring)."""

    def __init__(
        self, *, allow_private: bool = False, inner: httpx.AsyncBaseTransport | None = None
    ) -> None:
        """Wrap a transport (default: httpx's own, no retries) that connects to the address."""
        self.allow_private = allow_private
        self._inner = inner or httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Resolve, check every address, and send the request to the first one."""
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        try:
            addresses = await resolve(host, port)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}", request=request) from exc
        if not addresses:
            raise httpx.ConnectError(f"{host!r} resolves to no address", request=request)
        if not self.allow_private:
            for address in addresses:
                why = address_refusal(address)
                if why is not None:
                    raise AddressRefused(f"{host} resolves to {address}, {why}", request=request)
        pinned = request.url.copy_with(host=str(addresses[0]))
        request.url = pinned  # the Host header keeps the original name
        if request.url.scheme == "https" and literal_address(host) is None:
            request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._inner.aclose()


def guarded_client(
    *, allow_private: bool, connect_timeout: float, read_timeout: float
) -> httpx.AsyncClient:
    """Return a client over `GuardedTransport` that follows no redirect, with bounded time."""
    return httpx.AsyncClient(
        transport=GuardedTransport(allow_private=allow_private),
        follow_redirects=False,
        timeout=httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout),
        trust_env=False,
    )
