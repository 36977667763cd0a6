"""Version names and the rules they follow (indexer/verify/versions.py): the aliases replay the fixture of their line
with their own tag in every root, and names with no established meaning are refused."""
from __future__ import annotations

import json

import pytest

from indexer.verify import state_root as sr, versions
from tests.support.verify_kit import V5_CONFIG, VECTORS, after, script


def _root_with_tag(state: sr.State, tag: str) -> bytes:
    return sr.root_from_rest(sr.host_stats_hash(state.host_stats), sr.rest_hash(state), state.fees, state.phase, tag)


def test_v42_replays_the_v41_release_fixture_with_its_own_tag():
    roots = json.loads(VECTORS.read_text())
    old, new = after(0), after(0, "v4.2")
    assert new.rules is versions.V41
    for nonce, txs in enumerate(script(), start=1):
        assert old.apply(nonce, txs).hex() == roots[nonce]
        assert new.apply(nonce, txs) == _root_with_tag(old.state, "v4.2") != bytes.fromhex(roots[nonce])


@pytest.mark.parametrize("name", ["v5.0.0", "v5.0.1", "v5.0.12"])
def test_v5_hotfix_names_follow_the_v5_rules_and_hash_their_own_name(name):
    v5, hotfix = after(0, "v5", config=V5_CONFIG), after(0, name, config=V5_CONFIG)
    assert hotfix.rules is versions.V5 and versions.composition(name) == (True, True)
    for nonce, txs in enumerate(script()[:12], start=1):
        v5.apply(nonce, txs)
        assert hotfix.apply(nonce, txs) == _root_with_tag(v5.state, name)


@pytest.mark.parametrize("name", ["v5.1.0", "v5.0", "v5.0.01", "v4.3", "v6", "V5", " v5", "v5.0.1-rc1"])
def test_names_without_an_established_meaning_are_refused(name):
    with pytest.raises(sr.UnsupportedVersion, match=f"session rules of protocol version '{name}' are not ported"):
        versions.rules_for(name)
    with pytest.raises(sr.UnsupportedVersion, match=f"composition of protocol version '{name}' is not established"):
        versions.composition(name)


def test_the_ported_names_are_listed_in_refusals():
    assert versions.ported_names() == "v1, v4.1, v5, v4.2, v5.0.N"
    assert versions.line_of("v4.2") == "v4.1" and versions.line_of("v5.0.7") == "v5" and versions.line_of("v1") == "v1"


@pytest.mark.parametrize("name, why", [
    ("v2", "v2 is the compiled default name of builds whose composition was a compile-time constant"),
    ("v3", "no machine.go or seal.go of the v3 release line is identified"),
    ("v4", "no machine.go or seal.go of the v4 release line is identified"),
])
def test_the_earlier_versions_are_refused_saying_why(name, why):
    with pytest.raises(sr.UnsupportedVersion, match=f"protocol version '{name}' are not ported: {why}"):
        versions.rules_for(name)
