"""Outbound HTTP to addresses a caller named, without server-side request forgery.

Two halves, one set of rules (the page: docs/webhooks-security.md):

* `OutboundRules.refusal` (and `url_refusal`) decides what can be decided from a
  URL alone, **with the parser that sends it**: httpx's URL parsing and IDNA
  encoding, and the resolver's view of numeric hosts (`inet_aton` reads
  `2130706433`, `0x7f000001`, `127.1` and `0177.0.0.1` as 127.0.0.1, so any number
  but a plain `a.b.c.d` is refused). A URL it accepts is one the transport can
  send; a caller checks it when the URL is given (a 422) and again before sending.
* `GuardedTransport` is an httpx transport that resolves a request's host itself,
  checks **every** address the name resolves to (`address_refusal`: loopback,
  private, link-local, CGNAT, multicast, reserved, unspecified, site-local, Teredo,
  cloud-metadata ranges; IPv4-mapped, NAT64 and 6to4 IPv6 judged by the IPv4
  address they carry) and connects to the checked address, keeping the original
  `Host` header and TLS server name: no second DNS lookup happens that an
  attacker's resolver could answer differently (DNS rebinding). A refused request
  raises `AddressRefused` before any connection is made; its message names the
  rule, never the address the name resolved to (that would map internal DNS for
  whoever named the host). Each request gets its own connection, so a TLS
  connection whose certificate was checked for one host name is never reused for
  another name on the same address. Redirects are the client's business
  (`guarded_client` follows none).

`allow_private` lifts the address rule (and allows `http`) for trusted networks.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Resolves a host name and port to its addresses (`resolve`; tests inject their own).
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

#: Longest URL accepted.
MAX_URL_CHARS = 2048

#: Ranges `ipaddress` does not flag by itself, or that deserve their own name.
_NAMED_RANGES: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "a cloud metadata address"),
    ("100.100.100.200/32", "a cloud metadata address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("100.64.0.0/10", "a carrier-grade NAT (CGNAT) address"),
    ("192.0.0.0/24", "an IETF protocol assignment address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("fec0::/10", "a site-local address"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("2001::/32", "a Teredo address"),
)
_NAMED = [(ipaddress.ip_network(net), why) for net, why in _NAMED_RANGES]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: A host name's label once IDNA-encoded: letters, digits, `-` and `_`, 1-63 of them.
_LABEL = re.compile(r"^[a-z0-9_-]{1,63}$")
#: A last label that makes a host a number to the resolver (decimal, or hex with 0x).
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


class AddressRefused(httpx.TransportError):
    """The request's host is, or resolves to, an address the rules refuse; nothing was sent."""


def address_refusal(address: IPAddress) -> str | None:
    """Return why an address may not be connected to (None: a public address).

    IPv4-mapped (`::ffff:a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4
    (`2002:AABB:CCDD::`) IPv6 addresses are judged by the IPv4 address they carry;
    IPv4-compatible ones (`::a.b.c.d`, deprecated) are refused.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address_refusal(address.ipv4_mapped)
        if address in _NAT64:
            return address_refusal(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None:
            why = address_refusal(address.sixtofour)
            if why is not None:
                return f"a 6to4 address carrying {why}"
        if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: nor ::1
            return "an IPv4-compatible address"
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
    """Return the address a URL's host is written as (a.b.c.d or IPv6), or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def host_refusal(host: str) -> str | None:
    """Return why an (IDNA-encoded) host name or IPv4 spelling cannot be sent to, or None.

    A host whose last label is a number is an IPv4 address to the resolver
    (`inet_aton`): only the plain `a.b.c.d` spelling is accepted, so that what is
    checked is what is connected to. A name must be one DNS can hold.
    """
    if ":" in host:  # an IPv6 literal: httpx has checked its form
        return "IPv6 zone identifiers are not allowed" if "%" in host else None
    if literal_address(host) is not None:
        return None
    labels = host.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        try:
            meaning = f" (it means {ipaddress.IPv4Address(socket.inet_aton(host))})"
        except OSError:
            meaning = ""
        return (
            f"host {host!r} is a number but not an IPv4 address written as four decimal "
            f"numbers a.b.c.d{meaning}"
        )
    if host.endswith("."):
        return f"host {host!r} ends with a dot"
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        return (
            f"host {host!r} is not a valid host name (labels of 1-63 letters, digits, "
            "'-' or '_', separated by single dots)"
        )
    for label in labels:
        if label.startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                return f"host {host!r} is not a valid internationalized name"
    return None


@dataclass(frozen=True)
class OutboundRules:
    """Which URLs a deployment lets the service call (the defaults are the safe ones).

    `refusal` is the one check of a URL a caller gave: when it is given and again
    before it is called (the rules may have changed in between).
    """

    #: Allow `http` and non-public addresses (trusted networks, tests).
    allow_private: bool = False
    #: When not empty, the only host names (or literal addresses) allowed.
    allowed_hosts: tuple[str, ...] = ()
    #: The settings named in refusals, so a refusal says what would lift it.
    private_setting: str = "WEBHOOK_ALLOW_PRIVATE"
    hosts_setting: str = "WEBHOOK_ALLOWED_HOSTS"

    def refusal(self, url: str) -> str | None:
        """Return the rule `url` breaks, as far as it can be told without resolving it.

        http(s) only, no credentials, a port of 1-65535; `http` and non-public
        literal addresses only with `allow_private`; a host in `allowed_hosts` when
        that list is not empty. A host name is resolved and checked at connect time
        (`GuardedTransport`).
        """
        if len(url) > MAX_URL_CHARS:
            return f"the URL is longer than {MAX_URL_CHARS} characters"
        try:
            parsed = httpx.URL(url)
            parsed.host  # noqa: B018 - the client decodes an IDNA host so: idna's errors
        except httpx.InvalidURL as exc:
            return f"the URL is malformed ({str(exc)[:200]})"
        except ValueError:  # idna's errors: a host that is no valid IDNA name
            return "the URL is malformed (its host is not a valid internationalized name)"
        if parsed.scheme not in ("http", "https"):
            return "only http(s) URLs are allowed"
        host = parsed.raw_host.decode("ascii").lower()
        if not host:
            return "the URL has no host"
        if parsed.userinfo:
            return "credentials in the URL are not allowed"
        if parsed.scheme == "http" and not self.allow_private:
            return f"only https URLs are allowed ({self.private_setting} allows http)"
        if parsed.port is not None and not 1 <= parsed.port <= 65535:
            return "the port must be 1-65535"
        why = host_refusal(host)
        if why is not None:
            return why
        if self.allowed_hosts and not _listed(host, parsed.host, self.allowed_hosts):
            return f"host {host!r} is not in {self.hosts_setting}"
        address = literal_address(host)
        if address is not None and not self.allow_private:
            why = address_refusal(address)
            if why is not None:
                return f"{address} is {why} ({self.private_setting} allows it)"
        return None


def _listed(host: str, shown: str, allowed: Sequence[str]) -> bool:
    """Whether a host, IDNA-encoded or as written, is in an allow-list (any case)."""
    names = {name.lower().strip("[]") for name in allowed}
    return host in names or shown.lower() in names


def url_refusal(
    url: str, *, allow_private: bool = False, allowed_hosts: Sequence[str] = ()
) -> str | None:
    """Return the rule a URL breaks under the webhook settings' names (`OutboundRules`)."""
    rules = OutboundRules(allow_private=allow_private, allowed_hosts=tuple(allowed_hosts))
    return rules.refusal(url)


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
        self,
        *,
        allow_private: bool = False,
        inner: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
    ) -> None:
        """Wrap a transport that connects to the address (default: httpx's own, see below).

        The default inner transport makes no retries and keeps no idle connection, so
        every request has its own connection, TLS handshake and certificate check: one
        pooled by address could carry another host name's request. `resolver`
        defaults to `resolve`.
        """
        self.allow_private = allow_private
        self._resolver = resolver
        self._inner = inner or httpx.AsyncHTTPTransport(
            retries=0, limits=httpx.Limits(max_keepalive_connections=0)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Resolve, check every address, and send the request to the first one."""
        # The name as sent (IDNA-encoded by httpx) is the one resolved and verified.
        host = request.url.raw_host.decode("ascii")
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        literal = literal_address(host)
        resolver = self._resolver or resolve
        try:
            addresses = [literal] if literal is not None else await resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}", request=request) from exc
        if not addresses:
            raise httpx.ConnectError(f"{host!r} resolves to no address", request=request)
        if not self.allow_private:
            for address in addresses:
                why = address_refusal(address)
                if why is not None:
                    raise AddressRefused(f"refused: {host} resolves to {why}", request=request)
        pinned = str(addresses[0])
        request.url = request.url.copy_with(host=pinned)  # the Host header keeps the name
        if request.url.scheme == "https" and literal is None:
            request.extensions = {**request.extensions, "sni_hostname": host}
        try:
            return await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            # The connection's errors name the pinned address; say the host instead.
            message = str(exc).replace(pinned, host) if pinned != host else str(exc)
            raise type(exc)(message, request=request) from exc

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._inner.aclose()


def guarded_client(
    *, allow_private: bool, connect_timeout: float, read_timeout: float
) -> httpx.AsyncClient:
    """Return a client over `GuardedTransport` that follows no redirect, with bounded time.

    Certificates are checked against certifi's CAs, or `SSL_CERT_FILE` /
    `SSL_CERT_DIR` when set (httpx's transport reads them).
    """
    return httpx.AsyncClient(
        transport=GuardedTransport(allow_private=allow_private),
        follow_redirects=False,
        timeout=httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout),
        trust_env=False,
    )
