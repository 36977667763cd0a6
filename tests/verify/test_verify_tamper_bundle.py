"""The evidence bundle as a document, tampered (tests/verify/test_verify_bundle.py builds the v4.1 fixture's bundle): a
key given twice, an unknown key at any level, huge or mistyped numbers, a missing piece are refused naming the
JSON path, and an edit to any one field fails verification unless the field is one the bundle only states (printed
as stated); the standalone verifier says each in one line."""
from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

from indexer.verify import bundle as bd
from indexer.verify.evidence import verify_bundle
from tests.verify.test_verify_bundle import cli, make_bundle, settle_msg
from tests.verify.test_verify_tamper import _consistent


@pytest.fixture(scope="module")
def good() -> bd.Bundle:
    return make_bundle()


def _doc(good) -> dict:
    return json.loads(good.to_json())


def test_a_key_given_twice_is_refused_wherever_it_is(good):
    text = good.to_json()
    twice = text.replace('"amount": 1000000', '"amount": 1, "amount": 1000000', 1)
    with pytest.raises(bd.BundleError, match=r"^b\.json: key 'amount' appears twice in one object$"):
        bd.parse_bundle(twice.encode(), "b.json")
    nested = text.replace('"create_fee": ', '"create_fee": 5, "create_fee": ', 1)
    with pytest.raises(bd.BundleError, match="key 'create_fee' appears twice"):
        bd.parse_bundle(nested.encode(), "b.json")


@pytest.mark.parametrize("where", ["$", "group[0]", "config", "diffs[3]", "settlement", "penalties[0]",
                                   "penalties[0].limit_source"])
def test_an_unknown_key_at_any_level_is_refused_with_its_path(good, where):
    doc = _doc(good)
    target = {"$": doc, "group[0]": doc["group"][0], "config": doc["config"], "diffs[3]": doc["diffs"][3],
              "settlement": doc["settlement"], "penalties[0]": doc["penalties"][0],
              "penalties[0].limit_source": doc["penalties"][0]["limit_source"]}[where]
    target["verified"] = True
    with pytest.raises(bd.BundleError, match=re.escape(f"b.json: {where}: unknown key 'verified'")):
        bd.parse_bundle(json.dumps(doc).encode(), "b.json")


@pytest.mark.parametrize("value, message", [
    (str(1 << 64), "amount: integer outside 0 .. 2^64-1"),
    ("-1", "amount: integer outside 0 .. 2^64-1"),
    ("9" * 5000, "b.json: not a JSON document (Exceeds the limit"),
    ("1e6", "non-integer number '1e6'"),
    ('"1000000"', "amount: expected an integer, found str"),
    ("true", "amount: expected an integer, found bool"),
])
def test_huge_or_mistyped_numbers_are_refused(good, value, message):
    text = good.to_json().replace('"amount": 1000000', f'"amount": {value}', 1)
    with pytest.raises(bd.BundleError, match=re.escape(message)):
        bd.parse_bundle(text.encode(), "b.json")


@pytest.mark.parametrize("path", [("escrow_id",), ("creator",), ("amount",), ("group",), ("config",), ("diffs",),
                                  ("protocol_version",), ("group", 0, "address"), ("config", "token_price"),
                                  ("diffs", 0, "user_sig"), ("settlement", "msg"), ("settlement", "max_nonce")])
def test_a_missing_piece_is_refused_naming_it(good, path):
    doc = _doc(good)
    target = doc
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    with pytest.raises(bd.BundleError, match=re.escape(f"missing key {path[-1]!r}")):
        bd.parse_bundle(json.dumps(doc).encode(), "b.json")


# what a bundle states and no check can refute (printed as stated, never shown): the block height, the chain's
# max_nonce, a seal timer this log never reaches, and a penalty's limit as governance set it, with its source
STATED = {("settlement", "height"), ("settlement", "max_nonce"), ("config", "seal_grace_seconds"),
          ("penalties", 0, "numbers", "governance_limit"), ("penalties", 0, "rule"),
          *((("penalties", 0, "limit_source", k)) for k in ("parameter", "epoch", "height", "source"))}


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path, value


def _edited(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str) and value:
        try:
            data = bytearray(bd.base64.b64decode(value, validate=True))
        except ValueError:
            return value + "x"
        data[len(data) // 2] ^= 1
        return bd.base64.b64encode(bytes(data)).decode()
    return None


def test_an_edit_to_any_one_field_fails_or_is_a_field_the_bundle_only_states(good):
    doc = _doc(good)
    passed = set()
    for path, value in _leaves(doc):
        new = _edited(value)
        if new is None:
            continue
        edited = copy.deepcopy(doc)
        target = edited
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = new
        try:
            report = verify_bundle(bd.parse_bundle(json.dumps(edited).encode(), "b.json"))
        except bd.BundleError:
            continue  # refused as a document: not believed either
        if report.ok:
            passed.add(path)
    assert passed == STATED
    detail = verify_bundle(good).steps[2].detail
    assert detail.endswith("at height 777 (as stated)"), detail


def test_the_standalone_verifier_names_each_kind_in_one_line(good, tmp_path):
    twice = good.to_json().replace('"amount": 1000000', '"amount": 1, "amount": 1000000', 1)
    done = cli(tmp_path, twice)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"error: {tmp_path / 'bundle.json'}: key 'amount' appears twice in one object"]
    done = cli(tmp_path, make_bundle(_consistent(dataclasses.replace(settle_msg(), version="v4.2"))).to_json())
    assert done.returncode == 1
    assert ("settled   FAIL        nonce 34: the settlement's version 'v4.2' is not the escrow's protocol version "
            "'v4.1'") in done.stdout, done.stdout
    done = cli(tmp_path, good.to_json())
    assert done.returncode == 0 and "at height 777 (as stated)" in done.stdout, done.stdout


@pytest.mark.parametrize("version", ["", "v4.1 ", "V4.1", "v9"])
def test_an_empty_or_unknown_protocol_version_is_not_replayed_and_says_why(good, version):
    """The version string picks the rules and is hashed into every root: one this verifier has not ported (an empty
    one, a near miss) is never replayed under another's rules, and never reported as passing."""
    report = verify_bundle(dataclasses.replace(good, protocol_version=version))
    assert [(s.name, s.outcome) for s in report.steps][:3] == [("signed", "pass"), ("replayed", "not-checked"),
                                                                ("settled", "not-checked")]
    assert (report.level, report.ok) == ("signed", False)
    assert report.failure.startswith(f"protocol version {version!r} is not supported by this verifier")


@pytest.mark.parametrize("change", ["dropped", "added"])
def test_a_group_with_a_slot_dropped_or_added_fails_the_replay_at_the_first_nonce(good, change):
    """A smaller group would lower the quorum: the slots are bound into every root (host stats and warm keys per
    slot), so the replay fails before any settlement is counted."""
    group = good.group[:4] if change == "dropped" else good.group + (dataclasses.replace(good.group[0], slot=5),)
    report = verify_bundle(dataclasses.replace(good, group=group))
    assert (report.failed_step, report.failed_nonce, report.level) == ("replayed", 1, "signed"), report.failure
    assert re.match(r"recomputed post_state_root [0-9a-f]{64}, the diff signs [0-9a-f]{64}$", report.failure)
