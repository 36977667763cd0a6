"""Which devshard host URLs the poller will fetch from.

A host URL comes from the chain (``participant/{addr}.inference_url``), written by the participant, so it is
untrusted: it could name the indexer's own database port, an internal file server, or a cloud metadata address, and
the poller would fetch it and archive the answer. :func:`check_host_url` refuses what cannot be a devshard host's
base URL (a scheme other than http/https, userinfo, a query or a fragment — ``http://10.0.0.5/creds.json#`` swallows
every route appended to it); :func:`vet_address`, run when a connection is opened (so a name that resolves
differently the second time is caught too), refuses loopback, private, link-local and other non-public addresses
unless the operator allows them (a devnet on loopback, a private deployment).
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from indexer.records import URL_LEN
from indexer.sources.gonka.fastclient import PermanentTransportError


class UnsafeUrl(ValueError):
    """A host URL the poller refuses to fetch from; the message names the URL (without any userinfo) and why."""


def _shown(url: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2] if "@" in parts.netloc else parts.netloc
    return f"{parts.scheme}://{netloc}{parts.path}"[:200]


def check_host_url(url: str) -> str:
    """``url`` without a trailing slash if it can be a host's base URL, else :class:`UnsafeUrl`."""
    if len(url) > URL_LEN:  # a peer's value: bounded before it is parsed, logged or fetched
        raise UnsafeUrl(f"inference_url {_shown(url)!r}: {len(url)} characters, more than the {URL_LEN} allowed")
    parts = urlsplit(url)
    shown = _shown(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrl(f"inference_url {shown!r}: scheme {parts.scheme!r} is not http or https")
    if "@" in parts.netloc:
        raise UnsafeUrl(f"inference_url {shown!r}: carries userinfo")
    if "#" in url or "?" in url:
        raise UnsafeUrl(f"inference_url {shown!r}: carries a query or fragment, which would swallow the route")
    if not parts.hostname:
        raise UnsafeUrl(f"inference_url {shown!r}: no host")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise UnsafeUrl(f"inference_url {shown!r}: {exc}") from None
    return url.rstrip("/")


def public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``ip`` is a public unicast address (IPv4-mapped IPv6 judged by its IPv4 address)."""
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
                or ip.is_unspecified)


def vet_address(host: str, port: int) -> tuple[str, int]:
    """The first public address ``host`` resolves to, as the address to connect to; a name that resolves to any
    non-public address is refused whole (:class:`PermanentTransportError`), so it cannot pick one by chance."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)  # gaierror: a transient connect error
    addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    refused = [str(a) for a in addresses if not public(a)]
    if refused or not addresses:
        raise PermanentTransportError(f"host {host!r} resolves to a non-public address ({', '.join(refused)}); "
                                      "allowed only with --allow-private-hosts")
    return str(addresses[0]), port
