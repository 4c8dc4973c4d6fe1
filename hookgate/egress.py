"""The egress policy: which addresses Hookgate may call out to (agent pushes and any other outbound client).

Refused: loopback, link-local, private (RFC 1918), CGNAT, unique-local, unspecified, multicast and reserved
addresses, in IPv4 and IPv6 (IPv4-mapped, -translated and -compatible, NAT64 (well-known and local-use), 6to4 and
Teredo forms count as the IPv4 address inside), unless
an operator allows a range with ``HOOKGATE_AGENT_ALLOW_CIDRS``; the gateway's own public host; the
gateway's own ``/hooks/`` (allowed ranges or not: a push there would feed the gateway its own tasks); and
credentials in a URL. A URL is checked when an agent is saved (:meth:`Policy.check_url`, resolving its
name) and again on every connection (:meth:`Policy.connector`: the check runs on the address the socket is
about to connect to, so a DNS answer that changes later, DNS rebinding, cannot get round it). Errors::

    EgressRefused          code ``agent_url_forbidden`` (or ``agent_url_unresolvable``) and a message
     └── ConnectRefused    an OSError too: what the connector raises for a refused address
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import posixpath
import re
import socket
from collections.abc import AsyncIterator, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import aiohttp
import yarl

from hookgate.errors import HookgateError
from hookgate.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

FORBIDDEN_NETWORKS: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
))
#: Names and addresses that mean "this machine" when they are the bind host or an agent URL's host.
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1", "0.0.0.0", "::", ""})
FORBIDDEN = "agent_url_forbidden"
UNRESOLVABLE = "agent_url_unresolvable"
#: What a refused push records as its error (no address, no port: the tenant learns nothing it did not send).
CONNECT_REFUSED_TEXT = "egress_forbidden: the agent URL points at an address Hookgate does not call"
RESOLVE_TIMEOUT_S = 5.0
#: IPv6 ranges whose last 32 bits are an IPv4 address: IPv4-mapped, IPv4-translated, IPv4-compatible (``::a.b.c.d``,
#: ``::`` and ``::1`` among them, refused either way), well-known NAT64 and local-use NAT64 (RFC 8215, read as the
#: /96 layout its operators carve out of it).
_LAST_32_BITS: tuple[ipaddress.IPv6Network, ...] = tuple(ipaddress.IPv6Network(n) for n in (
    "::ffff:0:0/96", "::ffff:0:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48",
))


class EgressRefused(HookgateError):
    """An outbound URL the policy refuses; ``code`` and ``message`` are safe to show to the caller."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class ConnectRefused(EgressRefused, OSError):
    """A connection the policy refused at connect time."""

    def __init__(self) -> None:
        EgressRefused.__init__(self, "egress_forbidden", CONNECT_REFUSED_TEXT)


def _refused(why: str) -> EgressRefused:
    return EgressRefused(FORBIDDEN, f"{why}; an operator can allow private ranges with HOOKGATE_AGENT_ALLOW_CIDRS")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, translated, compatible, NAT64, 6to4, Teredo), or None.

    A Teredo address stands for its client (the address the packets reach), not for its server.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if any(ip in net for net in _LAST_32_BITS):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.teredo is not None:
        return ip.teredo[1]
    return ip.sixtofour


def parse_ip(text: str) -> IPAddress | None:
    """An address from a URL host or a sockaddr (brackets and a zone id dropped), or None for a name."""
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    return None


def _host(url: SplitResult) -> str:
    return (url.hostname or "").rstrip(".").lower()


def _port(url: SplitResult) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def path_under(url: str, prefix: str) -> bool:
    """Whether ``url``'s path reaches ``prefix`` as a router sees it: the one check at save and at connect time.

    The forms tried: the path as aiohttp sends it (yarl decodes unreserved escapes and removes dot segments)
    and as uvicorn decodes it for Starlette, which is what our own router matches; and, for a proxy that
    normalises more, each level of percent-decoding with and without slashes merged, a backslash read as ``/``,
    ``;params`` dropped and dot segments removed. Case is ignored (a proxy may be case-insensitive).
    """
    folded = prefix.lower()
    return any((form.lower() + "/").startswith(folded) for form in _path_forms(url))


def _path_forms(url: str) -> Iterator[str]:
    """The forms of ``url``'s path :func:`path_under` compares (see there)."""
    with contextlib.suppress(ValueError):  # a URL yarl refuses is never sent: nothing to compare
        sent = yarl.URL(url).raw_path
        yield unquote(sent)
    current = urlsplit(url).path
    while True:
        yield current
        yield normalised_path(current)
        decoded = unquote(current)
        if decoded == current:  # each decoding that changes the text shortens it: this ends
            return
        current = decoded


def normalised_path(path: str) -> str:
    """``path`` with a backslash read as ``/``, empty segments and ``;params`` dropped, dot segments removed."""
    segments = (s.split(";", 1)[0] for s in re.split(r"[/\\]+", path))
    return posixpath.normpath("/" + "/".join(s for s in segments if s))


def redact(url: str | None) -> str | None:
    """``url`` without the credentials of its user-info part (for answers and logs)."""
    if url is None:
        return None
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@", r"\1***@", url)


@dataclass(frozen=True)
class Endpoint:
    """Where the gateway itself answers: host names, a port, and the path of its webhook ingress there."""

    names: frozenset[str]
    port: int
    hooks: str


@dataclass
class Attempt:
    """One outbound request under way: the gateway endpoints its path is aimed at, and what was refused."""

    own_ports: frozenset[int] = frozenset()
    own_addresses: frozenset[IPAddress] = frozenset()
    refused: bool = False


_ATTEMPT: ContextVar[Attempt | None] = ContextVar("hookgate_egress_attempt", default=None)


@dataclass(frozen=True)
class Policy:
    """The egress rules of one process, from its settings."""

    allow: tuple[IPNetwork, ...] = ()
    public_host: str = ""
    own: tuple[Endpoint, ...] = field(default_factory=tuple)
    #: The public host when it is an address (not this machine's): refused in any spelling of it.
    public_ip: IPAddress | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Policy:
        """Allowed ranges from ``HOOKGATE_AGENT_ALLOW_CIDRS``; the gateway's endpoints from its URL and bind."""
        public = urlsplit(settings.public_url)
        bind = settings.host.strip("[]").lower()
        own = (
            Endpoint(_names(_host(public)), _port(public), _hooks_under(public.path)),
            Endpoint(_names(bind), settings.port, "/hooks/"),
        )
        allow = tuple(ipaddress.ip_network(c, strict=False) for c in settings.agent_allow_cidrs or ())
        public_ip = parse_ip(_host(public))
        if public_ip is not None:
            public_ip = embedded_ipv4(public_ip) or public_ip
        return cls(allow=allow, public_host=_host(public), own=own,
                   public_ip=None if _is_local(public_ip) else public_ip)

    def is_public_ip(self, ip: IPAddress) -> bool:
        """Whether ``ip`` is the public host's address (when HOOKGATE_PUBLIC_URL names one), however spelt."""
        return self.public_ip is not None and (embedded_ipv4(ip) or ip) == self.public_ip

    def address_allowed(self, ip: IPAddress) -> bool:
        """Whether the policy lets a connection go to ``ip``."""
        candidates = {ip, embedded_ipv4(ip)} - {None}
        if any(c in net for c in candidates for net in self.allow):
            return True
        return not any(c in net for c in candidates for net in FORBIDDEN_NETWORKS)

    def _own_ports(self, url: str) -> frozenset[int]:
        """The gateway ports whose webhook ingress this URL's path falls under."""
        port = _port(urlsplit(url))
        return frozenset(e.port for e in self.own if e.port == port and path_under(url, e.hooks))

    def check_syntax(self, url: str) -> SplitResult:
        """The checks that need no DNS: scheme, the public host, the gateway's hooks by name."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (raises on a port out of range)
        except ValueError:
            raise _refused("the agent URL is not a valid http(s) URL") from None
        if parts.scheme not in ("http", "https") or not _host(parts):
            raise _refused("the agent URL is not a valid http(s) URL")
        host = _host(parts)
        if host == self.public_host and host not in LOCAL_NAMES and not _is_local(parse_ip(host)):
            raise _refused("the agent URL points at this gateway")
        ports = self._own_ports(url)
        if any(host in e.names for e in self.own if e.port in ports):
            raise _refused("the agent URL points at this gateway's webhook ingress")
        return parts

    async def check_url(self, url: str) -> None:
        """Every check of an agent URL being saved, resolving its host; raises EgressRefused.

        Credentials in the URL are refused here only: an older row that has them is still pushed to.
        """
        parts = self.check_syntax(url)
        if "@" in parts.netloc:
            raise _refused("credentials in the agent URL are not allowed (the agent verifies our signature)")
        addresses = await resolve(_host(parts), _port(parts))
        if not addresses:
            raise EgressRefused(UNRESOLVABLE, "the agent URL's host name does not resolve")
        if any(self.is_public_ip(ip) for ip in addresses):
            raise _refused("the agent URL points at this gateway")
        if not all(self.address_allowed(ip) for ip in addresses):
            raise _refused("the agent URL's host is or resolves to a loopback, private, link-local or "
                           "otherwise internal address")
        if self._own_ports(url) and _any_gateway(addresses, await self._own_addresses()):
            raise _refused("the agent URL points at this gateway's webhook ingress")

    async def _own_addresses(self) -> frozenset[IPAddress]:
        """What the gateway's own host names resolve to (this machine's addresses are told by their kind)."""
        found: set[IPAddress] = set()
        for endpoint in self.own:
            for name in endpoint.names - LOCAL_NAMES:
                found |= set(await resolve(name, endpoint.port))
        return frozenset(found)

    @contextlib.asynccontextmanager
    async def attempt(self, url: str) -> AsyncIterator[Attempt]:
        """Wrap one outbound request to ``url``: the connector checks its sockets against it.

        Yields the :class:`Attempt`; ``refused`` is true afterwards if the policy refused a connection.
        Raises EgressRefused before any connection when the URL itself is refused.
        """
        self.check_syntax(url)
        ports = self._own_ports(url)
        attempt = Attempt(own_ports=ports, own_addresses=await self._own_addresses() if ports else frozenset())
        token = _ATTEMPT.set(attempt)
        try:
            yield attempt
        finally:
            _ATTEMPT.reset(token)

    def connector(self, **kwargs: Any) -> aiohttp.TCPConnector:
        """An aiohttp connector that opens a socket only to an address the policy allows."""
        return aiohttp.TCPConnector(socket_factory=self._socket, **kwargs)

    def _socket(self, addr_info: tuple[Any, ...]) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        ip, port = parse_ip(str(sockaddr[0])), int(sockaddr[1])
        attempt = _ATTEMPT.get()
        if ip is None or not self.address_allowed(ip) or self.is_public_ip(ip) or _to_gateway(attempt, ip, port):
            if attempt is not None:
                attempt.refused = True
            raise ConnectRefused()
        return socket.socket(family, type_, proto)


def _hooks_under(base: str) -> str:
    """The ingress path under the public URL's path, normalised as the paths compared with it are."""
    return normalised_path(unquote(base)).rstrip("/") + "/hooks/"


def _names(host: str) -> frozenset[str]:
    """A host and its equivalents: every name of this machine when it is one of them."""
    return LOCAL_NAMES if host in LOCAL_NAMES or _is_local(parse_ip(host)) else frozenset({host})


def _is_local(ip: IPAddress | None) -> bool:
    """Whether ``ip`` means this machine (loopback or unspecified, in any of its spellings)."""
    forms = () if ip is None else (ip, embedded_ipv4(ip))
    return any(a is not None and (a.is_loopback or a.is_unspecified) for a in forms)


def _any_gateway(addresses: Iterable[IPAddress], own: frozenset[IPAddress]) -> bool:
    """Whether any address reaches the gateway: one of this machine's, or one its own names resolve to."""
    return any(_is_local(ip) or ip in own for ip in addresses)


def _to_gateway(attempt: Attempt | None, ip: IPAddress, port: int) -> bool:
    return attempt is not None and port in attempt.own_ports and _any_gateway([ip], attempt.own_addresses)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to (itself if it is an address); empty if it does not resolve."""
    literal = parse_ip(host)
    if literal is not None:
        return [literal]
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
    except (OSError, UnicodeError, TimeoutError):
        return []
    return _unique(parse_ip(str(info[4][0])) for info in infos)


def _unique(found: Iterable[IPAddress | None]) -> list[IPAddress]:
    return list(dict.fromkeys(ip for ip in found if ip is not None))
