"""Which host URLs the poller fetches from (indexer.sources.gonka.urls): a participant writes its inference_url, so
it is refused unless it is a plain http(s) base URL on a public address (or the operator allows private ones)."""
from __future__ import annotations

import ipaddress

import pytest

from indexer.sources.gonka.fastclient import PermanentTransportError
from indexer.sources.gonka.urls import UnsafeUrl, check_host_url, public, vet_address


@pytest.mark.parametrize("url, why", [
    ("file:///etc/passwd", "scheme 'file'"),
    ("gopher://h.example/", "scheme 'gopher'"),
    ("http://u:p@h.example", "userinfo"),
    ("http://h.example/creds.json#", "query or fragment"),
    ("http://h.example/x?a=", "query or fragment"),
    ("http:///nohost", "no host"),
    ("http://h.example:99999", "Port out of range"),
])
def test_refused_urls_say_why(url, why):
    with pytest.raises(UnsafeUrl, match=why) as err:
        check_host_url(url)
    assert ":p@" not in str(err.value)  # userinfo never shown


def test_a_plain_base_url_is_kept():
    assert check_host_url("https://h.example:8443/devshard-host/") == "https://h.example:8443/devshard-host"


@pytest.mark.parametrize("ip, ok", [("8.8.8.8", True), ("2606:4700::1111", True), ("127.0.0.1", False),
                                    ("10.1.2.3", False), ("192.168.0.1", False), ("169.254.169.254", False),
                                    ("::1", False), ("fe80::1", False), ("::ffff:127.0.0.1", False),
                                    ("0.0.0.0", False), ("224.0.0.1", False)])
def test_public_addresses(ip, ok):
    assert public(ipaddress.ip_address(ip)) is ok


def test_a_name_resolving_to_loopback_is_refused_at_connect_time():
    with pytest.raises(PermanentTransportError, match="non-public address"):
        vet_address("localhost", 80)
    assert vet_address("8.8.8.8", 443) == ("8.8.8.8", 443)
