"""Evidence bundles of the v4.1 release fixture (tests/support/verify_kit.py: 34 signed diffs, the upstream roots,
a settlement co-signed by a quorum of the fixture's host keys) verify to ``settled`` through verify_bundle and the
standalone ``python -m indexer.verify``; each kind of tampering is caught at its check with the right nonce."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import coincurve
import pytest

from indexer.verify import bundle as bd, proto as pb, settlement as st
from indexer.verify.evidence import FAIL, NOT_CHECKED, PASS, verify_bundle
from tests.support.verify_kit import (CONFIG, HOSTS, KEYS, USER, VECTORS, after, diff_content, script, user_sign,
                                      wire_tx)

ESCROW_ID = 124
ROOT = Path(__file__).resolve().parents[2]
ROOTS = [bytes.fromhex(r) for r in json.loads(VECTORS.read_text())]


def signed_diff(nonce: int, txs: list[dict], key=None) -> bd.SignedDiff:
    content = diff_content(nonce, [wire_tx(t, str(ESCROW_ID)) for t in txs], ROOTS[nonce], str(ESCROW_ID))
    return bd.SignedDiff(nonce, content, user_sign(content, key))


def settle_msg(slots=(0, 1, 2, 3), keys=KEYS, fees_delta: int = 0) -> st.SettleMsg:
    s = after(34)
    stats = [st.HostStatsEntry(slot, h.missed, h.invalid, h.cost, h.required_validations, h.completed_validations)
             for slot, h in sorted(s.state.host_stats.items())]
    msg = st.SettleMsg(settler=USER, escrow_id=ESCROW_ID, state_root=s.root(), nonce=34,
                       rest_hash=st.sr.rest_hash(s.state), host_stats=stats, fees=s.state.fees + fees_delta,
                       version="v4.1")
    msg.state_root = st.settlement_root(msg)
    msg.signatures = [st.SlotSignature(i, st.sign_state(keys[i], msg.state_root, ESCROW_ID, 34)) for i in slots]
    return msg


PENALTY = bd.Penalty(rule="context_length_refusal", inference_id=19, status="timed_out",
                     numbers={"input_length": 100, "max_tokens": 50, "governance_limit": 4096},
                     sum=("input_length", "max_tokens"), compare="<=", against="governance_limit", holds=True,
                     limit_source={"parameter": "max_context_length", "epoch": 272, "height": 1_234_567,
                                   "source": "snapshot"})


def make_bundle(msg: st.SettleMsg | None = None, **changes) -> bd.Bundle:
    """The fixture's bundle: its settlement as broadcast (a raw transaction carrying it, and that one's hash)."""
    data = st.encode_settle_msg(msg or settle_msg())
    raw = _tx_raw((st.SETTLE_TYPE_URL, data))
    settlement = bd.Settlement(data, max_nonce=1000, approved_versions=("v4.1",), tx_hash=st.tx_hash(raw), height=777,
                               tx_raw=raw)
    base = bd.Bundle(escrow_id=str(ESCROW_ID), protocol_version="v4.1", creator=USER, amount=1_000_000,
                     group=tuple(bd.Host(i, a) for i, a in enumerate(HOSTS)), config=CONFIG,
                     diffs=tuple(signed_diff(n, txs) for n, txs in enumerate(script(), start=1)),
                     settlement=settlement, penalties=(PENALTY,))
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def good() -> bd.Bundle:
    return make_bundle()


def cli(tmp_path, document: str | bytes, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "bundle.json"
    path.write_bytes(document.encode() if isinstance(document, str) else document)
    return subprocess.run([sys.executable, "-m", "indexer.verify", str(path), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def outcomes(report) -> list[tuple[str, str]]:
    return [(s.name, s.outcome) for s in report.steps]


def test_the_fixture_bundle_verifies_to_settled(good, tmp_path):
    report = verify_bundle(good)
    assert outcomes(report) == [("signed", PASS), ("replayed", PASS), ("settled", PASS), ("penalty", PASS)]
    assert (report.level, report.ok, report.failure) == ("settled", True, None)
    assert "4 slot signatures, quorum 4 of 5" in report.steps[2].detail
    assert report.steps[3].detail.startswith("context_length_refusal: inference 19 timed_out; input_length 100 + "
                                             "max_tokens 50 = 150 <= governance_limit 4096 is true")
    assert bd.parse_bundle(good.to_json().encode()) == good

    done = cli(tmp_path, good.to_json())
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [["signed", "PASS"], ["replayed", "PASS"],
                                                        ["settled", "PASS"], ["penalty", "PASS"], ["level", "SETTLED"]]
    as_json = json.loads(cli(tmp_path, good.to_json(), "--json").stdout)
    assert (as_json["level"], as_json["ok"], len(as_json["steps"])) == ("settled", True, 4)


def _flip_tx_bit(d: bd.SignedDiff) -> bd.SignedDiff:
    content = bytearray(d.content)
    content[7] ^= 0x01  # nonce field, tx key and length, finish key and length, inference_id key: its value
    return dataclasses.replace(d, content=bytes(content))


def _fork(nonce: int) -> bd.SignedDiff:
    txs = [dict(t, max_tokens=60) if t["kind"] == "start" else t for t in script()[nonce - 1]]
    return signed_diff(nonce, txs)  # the user signs an altered start over the original root


def _replace(diffs, nonce, new):
    return tuple(new if d.nonce == nonce else d for d in diffs)


def _tamper(good: bd.Bundle, kind: str) -> bd.Bundle:
    diffs = good.diffs
    if kind == "flipped bit":
        return dataclasses.replace(good, diffs=_replace(diffs, 10, _flip_tx_bit(diffs[9])))
    if kind == "dropped diff":
        return dataclasses.replace(good, diffs=diffs[:11] + diffs[12:])
    if kind == "swapped diffs":
        return dataclasses.replace(good, diffs=diffs[:14] + (diffs[15], diffs[14]) + diffs[16:])
    if kind == "repeated diff":
        return dataclasses.replace(good, diffs=diffs[:5] + (diffs[4],) + diffs[5:])
    if kind == "fork signed by the user":
        return dataclasses.replace(good, diffs=_replace(diffs, 8, _fork(8)))
    if kind == "creator mismatch":
        return dataclasses.replace(good, creator=HOSTS[0])
    if kind == "forged host signature":
        return make_bundle(settle_msg(keys=[coincurve.PrivateKey.from_int(99), *KEYS[1:]]))
    if kind == "missing host signature":
        return make_bundle(settle_msg(slots=(0, 1, 3)))
    if kind == "settlement root mismatch":
        return make_bundle(settle_msg(fees_delta=1))  # internally consistent and signed, but not the replayed state
    if kind == "settlement for another escrow":
        return make_bundle(dataclasses.replace(settle_msg(), escrow_id=125))
    if kind == "settlement at another nonce":
        return make_bundle(msg=None, diffs=diffs[:33])
    raise AssertionError(kind)


@pytest.mark.parametrize("kind, step, nonce, reason", [
    ("flipped bit", "signed", 10, "user signature recovers to gonka1.*, the escrow creator is"),
    ("creator mismatch", "signed", 1, "the escrow creator is " + HOSTS[0]),
    ("dropped diff", "replayed", 12, "nonce 12 is missing: the next diff served is nonce 13"),
    ("swapped diffs", "replayed", 15, "nonce 15 is served after nonce 16: the diffs are out of order"),
    ("repeated diff", "replayed", 5, "nonce 5 is served again after nonce 5"),
    ("fork signed by the user", "replayed", 8, "recomputed post_state_root [0-9a-f]{64}, the diff signs"),
    ("forged host signature", "settled", 34, "would refuse the settlement: signature for slot 0 recovered gonka1"),
    ("missing host signature", "settled", 34, "insufficient quorum: 3 slot votes, need 4"),
    ("settlement root mismatch", "settled", 34, "the settlement root [0-9a-f]{64} is not the replayed settlement"),
    ("settlement for another escrow", "settled", 34, "the settlement is for escrow 125, the diffs for '124'"),
    ("settlement at another nonce", "settled", 34, "the settlement is at nonce 34, the diffs end at nonce 33"),
])
def test_each_tampering_is_caught_at_its_check_and_nonce(good, kind, step, nonce, reason):
    report = verify_bundle(_tamper(good, kind))
    assert (report.failed_step, report.failed_nonce) == (step, nonce), report.failure
    assert re.search(reason, report.failure), report.failure
    order = ["signed", "replayed", "settled"]
    assert report.level == (["none"] + order)[order.index(step)]
    failed = dict(outcomes(report))
    assert failed[step] == FAIL
    assert all(failed[later] == NOT_CHECKED for later in order[order.index(step) + 1:])
    assert not report.ok


def test_a_tampered_bundle_fails_in_the_cli_with_the_reason(good, tmp_path):
    done = cli(tmp_path, _tamper(good, "dropped diff").to_json())
    assert done.returncode == 1
    assert "replayed  FAIL        nonce 12: nonce 12 is missing" in done.stdout
    assert done.stdout.splitlines()[-1] == "level     SIGNED"


def test_a_warm_key_settles_for_its_slot_only_when_the_group_grants_it(good):
    warm = coincurve.PrivateKey.from_int(77)
    msg = settle_msg(keys=[warm, *KEYS[1:]])
    assert verify_bundle(make_bundle(msg)).failed_step == "settled"
    address = st.sig.address_of_pubkey(warm.public_key.format())
    group = (bd.Host(0, HOSTS[0], (address,)), *good.group[1:])
    assert verify_bundle(make_bundle(msg, group=group)).level == "settled"


def test_an_unported_version_stops_at_signed_with_the_reason(good, tmp_path):
    report = verify_bundle(dataclasses.replace(good, protocol_version="v6"))
    assert outcomes(report) == [("signed", PASS), ("replayed", NOT_CHECKED), ("settled", NOT_CHECKED),
                                ("penalty", NOT_CHECKED)]
    assert report.level == "signed" and "'v6' is not supported by this verifier" in report.failure
    assert cli(tmp_path, dataclasses.replace(good, protocol_version="v6").to_json()).returncode == 1
    v2 = verify_bundle(dataclasses.replace(good, protocol_version="v2"))
    assert v2.level == "signed" and "v2 is the compiled default name of builds" in v2.failure


def test_a_v5_bundle_must_state_the_execution_timeout(good):
    report = verify_bundle(dataclasses.replace(good, protocol_version="v5"))
    assert outcomes(report)[:2] == [("signed", PASS), ("replayed", NOT_CHECKED)] and report.level == "signed"
    assert report.failure == "not checkable by this verifier: the v5 rules seal a Finished record after " \
                             "seal_grace_seconds + execution_timeout: the session's execution_timeout must be stated"


def test_without_a_settlement_the_level_is_replayed_and_the_penalty_still_checked(good):
    report = verify_bundle(dataclasses.replace(good, settlement=None))
    assert outcomes(report) == [("signed", PASS), ("replayed", PASS), ("settled", NOT_CHECKED), ("penalty", PASS)]
    assert (report.level, report.ok) == ("replayed", False)


@pytest.mark.parametrize("change, reason", [
    ({"holds": False}, "= 150 <= governance_limit 4096 is true, the bundle says false"),
    ({"compare": ">", "holds": True}, "= 150 > governance_limit 4096 is false, the bundle says true"),
    ({"status": "finished"}, "inference 19 is timed_out in the replayed state, the bundle says finished"),
    ({"numbers": {**PENALTY.numbers, "max_tokens": 10}}, "max_tokens is 50 in the replayed record, the bundle says 10"),
    ({"inference_id": 99}, "inference 99 is not in the replayed state"),
])
def test_a_penalty_derivation_that_does_not_hold_fails(good, tmp_path, change, reason):
    bad = dataclasses.replace(good, penalties=(dataclasses.replace(PENALTY, **change),))
    report = verify_bundle(bad)
    assert report.level == "settled" and not report.ok
    assert report.steps[-1].outcome == FAIL and reason in report.steps[-1].detail
    assert cli(tmp_path, bad.to_json()).returncode == 1


def _doc(good, **changes) -> str:
    doc = json.loads(good.to_json())
    for path, value in changes.items():
        target, *keys = path.split("__")
        node = doc
        for k in [target, *keys][:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = [target, *keys][-1]
        if value is KeyError:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return json.dumps(doc)


@pytest.mark.parametrize("make, message", [
    (lambda g: b"{not json", "bundle.json: not a JSON document"),
    (lambda g: b"\xff\xfe", "bundle.json: not a JSON document"),
    (lambda g: "[]", "format 'list' is not 'devshard-evidence/1'"),
    (lambda g: _doc(g, format="devshard-evidence/2"), "format 'devshard-evidence/2' is not 'devshard-evidence/1'"),
    (lambda g: _doc(g, creator=KeyError), "$: missing key 'creator'"),
    (lambda g: _doc(g, extra=1), "$: unknown key 'extra'"),
    (lambda g: _doc(g, amount=1.5), "non-integer number '1.5'"),
    (lambda g: _doc(g, amount=-1), "amount: integer outside 0 .. 2^64-1"),
    (lambda g: _doc(g, amount=True), "amount: expected an integer, found bool"),
    (lambda g: _doc(g, diffs__3__content="%%%"), "diffs[3].content: not valid base64"),
    (lambda g: _doc(g, diffs__0=[]), "diffs[0]: expected an object, found list"),
    (lambda g: _doc(g, group__1__slot=4), "group[1].slot: slots must be listed in order"),
    (lambda g: _doc(g, escrow_id="12\n4"), "escrow_id: a string of at most 256 printable characters"),
    (lambda g: _doc(g, config__token_price=KeyError), "config: missing key 'token_price'"),
    (lambda g: _doc(g, settlement__msg=5), "settlement.msg: expected base64 text, found int"),
    (lambda g: _doc(g, penalties__0__sum=["prompt"]), "penalties[0].sum[0]: 'prompt' is not one of the numbers"),
    (lambda g: _doc(g, penalties__0__compare="=<"), "penalties[0].compare: one of <=, <"),
    (lambda g: _doc(g, penalties__0__holds="yes"), "penalties[0].holds: expected true or false"),
    (lambda g: _doc(g, penalties__0__limit_source={"epoch": "x"}), "limit_source.epoch: expected an integer"),
])
def test_an_unusable_bundle_exits_2_with_one_line(good, tmp_path, make, message):
    done = cli(tmp_path, make(good))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr


def test_a_missing_or_oversized_file_is_unusable_input(tmp_path, monkeypatch, good):
    done = subprocess.run([sys.executable, "-m", "indexer.verify", str(tmp_path / "absent.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "absent.json: cannot read: No such file or directory" in done.stderr
    path = tmp_path / "big.json"
    path.write_text(good.to_json())
    monkeypatch.setattr(bd, "MAX_BUNDLE_BYTES", 1000)
    with pytest.raises(bd.BundleError, match=r"big.json: \d+ bytes, more than the 1000 a bundle may have"):
        bd.load_bundle(str(path))
    with pytest.raises(bd.BundleError, match="bundle: 1001 bytes, more than the 1000"):
        bd.parse_bundle(b" " * 1001)


def _resigned(nonce: int, content: bytes) -> bd.SignedDiff:
    return bd.SignedDiff(nonce, content, user_sign(content))


@pytest.mark.parametrize("kind, step, nonce, reason", [
    ("create fee above the amount", "replayed", None, "the session cannot open: create devshard fee 2000000 exceeds"),
    ("unreadable content", "replayed", 3, "DiffContent unreadable: truncated varint"),
    ("listed under another nonce", "replayed", 5, "the bundle lists this diff as nonce 99, its signed content says 5"),
    # the hosts rebuild the signed message with their own escrow id (start_proof.go @b87a604a VerifyDiffUserSig)
    ("diff for another escrow", "signed", 1, "the user signed this diff for escrow '999', not '124'"),
    ("refused tx", "replayed", 2, r"refused by the session rules: nonce 2 tx 0 \(finish\): finish needs Started"),
    ("unreadable settlement", "settled", None, "MsgSettleDevshardEscrow unreadable: truncated varint"),
    ("settled before settlement phase", "settled", 28, "the final state is in phase 0, not settlement"),
])
def test_other_failures_are_reported_at_their_check(good, kind, step, nonce, reason):
    diffs = good.diffs
    if kind == "create fee above the amount":
        bad = dataclasses.replace(good, config=dataclasses.replace(CONFIG, create_fee=2_000_000))
    elif kind == "unreadable content":
        bad = dataclasses.replace(good, diffs=_replace(diffs, 3, _resigned(3, b"\x08")))
    elif kind == "listed under another nonce":
        bad = dataclasses.replace(good, diffs=_replace(diffs, 5, dataclasses.replace(diffs[4], nonce=99)))
    elif kind == "diff for another escrow":
        content = diff_content(1, [wire_tx(t, "999") for t in script()[0]], ROOTS[1], "999")
        bad = dataclasses.replace(good, diffs=_replace(diffs, 1, _resigned(1, content)))
    elif kind == "refused tx":
        content = diff_content(2, [wire_tx(script()[2][0], "124")], ROOTS[2], "124")
        bad = dataclasses.replace(good, diffs=_replace(diffs, 2, _resigned(2, content)))
    elif kind == "unreadable settlement":
        bad = dataclasses.replace(good, settlement=dataclasses.replace(good.settlement, msg=b"\x10\xff"))
    else:
        bad = make_bundle(dataclasses.replace(settle_msg(), nonce=28), diffs=diffs[:28])
    report = verify_bundle(bad)
    assert (report.failed_step, report.failed_nonce) == (step, nonce), report.failure
    assert re.search(reason, report.failure), report.failure
    assert dict(outcomes(report))[step] == FAIL


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(group=d["group"] * 2), "group: more than 5 entries"),
    (lambda d: d["group"][0].update(warm_keys=[7]), "group[0].warm_keys[0]: expected a string, found int"),
    (lambda d: d["settlement"].update(approved_versions="v4.1"), "approved_versions: expected a list, found str"),
    (lambda d: d["penalties"][0].update(numbers=[1]), "penalties[0].numbers: expected an object of at most 64"),
    (lambda d: d["penalties"][0].update(sum=[]), "penalties[0].sum: names at least one number"),
    (lambda d: d["penalties"][0].update(against="limit"), "penalties[0].against: 'limit' is not one of the numbers"),
    (lambda d: d["penalties"][0]["limit_source"].update(url="x"), "limit_source: unknown key 'url'"),
    (lambda d: d.update(creator="g" * 257), "creator: a string of at most 256 printable characters"),
    (lambda d: d["group"][0].update(grants="maybe"), "group[0].grants: one of exact, live, none is expected"),
    (lambda d: d.update(settlement_missing={"reason": "x", "fails": False}), "settlement_missing: given beside a "
                                                                             "settlement"),
    (lambda d: d.update(settlement=None, settlement_missing={"reason": "x", "fails": "no"}),
     "settlement_missing.fails: expected true or false"),
    (lambda d: d.update(settlement=None, settlement_missing={"reason": "x"}),
     "settlement_missing: missing key 'fails'"),
    (lambda d: d.update(notes=["n" * 2001]), "notes[0]: a string of at most 2000 printable characters"),
    (lambda d: d["settlement"].update(read_from=3), "settlement.read_from: expected a string, found int"),
])
def test_loader_refusals_name_the_path(good, monkeypatch, mutate, message):
    monkeypatch.setattr(bd, "MAX_SLOTS", 5)
    doc = json.loads(good.to_json())
    mutate(doc)
    with pytest.raises(bd.BundleError, match=re.escape(message)):
        bd.parse_bundle(json.dumps(doc).encode(), "b.json")
    with pytest.raises(bd.BundleError, match="non-integer number 'NaN'"):
        bd.parse_bundle(good.to_json().replace('"amount": 1000000', '"amount": NaN').encode())


def test_terminal_lines_escape_control_characters_and_are_bounded():
    from indexer.verify.__main__ import MAX_LINE, terminal_safe
    assert terminal_safe("a\x1b[31mb\nc") == "a\\x1b[31mb\\nc"
    long = terminal_safe("x" * 5000)
    assert len(long) == MAX_LINE and long.endswith("…")


def _tx_raw(*messages: tuple[str, bytes]) -> bytes:
    body = b"".join(pb.f_msg(1, pb.f_str(1, url) + pb.f_bytes(2, value)) for url, value in messages)
    return pb.f_bytes(1, body + pb.f_str(2, "memo")) + pb.f_bytes(2, b"auth-info") + pb.f_bytes(3, b"signature")


def test_a_raw_transaction_binds_the_settlement_to_its_hash(good):
    raw = _tx_raw(("/cosmos.bank.v1beta1.MsgSend", b"x"), (st.SETTLE_TYPE_URL, good.settlement.msg))
    digest = hashlib.sha256(raw).hexdigest().upper()
    bound = dataclasses.replace(good, settlement=dataclasses.replace(good.settlement, tx_raw=raw, tx_hash=digest))
    report = verify_bundle(bound)
    assert report.ok and f"tx {digest} (hash of the raw transaction, which carries this message)" in \
        report.steps[2].detail
    assert bd.parse_bundle(bound.to_json().encode()) == bound


def test_a_settlement_without_its_raw_transaction_stops_at_replayed(good, tmp_path):
    """Every check of the message passes, but nothing binds it to the transaction the chain settled: not checked,
    as the indexer's verification stage says of a settlement read over REST."""
    rest = dataclasses.replace(good.settlement, tx_raw=None, read_from="rest: /cosmos/tx/v1beta1/txs")
    report = verify_bundle(dataclasses.replace(good, settlement=rest))
    assert outcomes(report)[2] == ("settled", NOT_CHECKED) and report.level == "replayed"
    assert report.failure == (f"settled not shown: the settlement was not read as broadcast (no raw transaction "
                              f"binds its message to tx {rest.tx_hash}), so the message checked may not be the one "
                              f"the chain settled; read from: rest: /cosmos/tx/v1beta1/txs")
    document = dataclasses.replace(good, settlement=rest).to_json()
    assert bd.parse_bundle(document.encode()).settlement == rest
    assert cli(tmp_path, document).returncode == 1


@pytest.mark.parametrize("raw, tx_hash, reason", [
    (lambda m: _tx_raw((st.SETTLE_TYPE_URL, m)), "00" * 32, "the raw transaction hashes to [0-9A-F]{64}, the bundle"),
    (lambda m: _tx_raw((st.SETTLE_TYPE_URL, m + b"\x00")), None, "carries 1 settlement message\\(s\\), none of them"),
    (lambda m: _tx_raw(("/inference.inference.MsgStartInference", m)), None, "carries 0 settlement message"),
    (lambda m: b"\x0a\x05ab", None, "the raw settlement transaction is unreadable: field 1 at offset 0: length 5"),
    (lambda m: pb.f_bytes(2, b"auth"), None, "unreadable: TxRaw: expected one body_bytes field, found 0"),
    (lambda m: pb.f_bytes(1, pb.f_uint(1, 3)), None, "unreadable: TxBody field 1: wire type 0, expected 2"),
])
def test_a_raw_transaction_that_does_not_carry_the_settlement_fails(good, raw, tx_hash, reason):
    settlement = dataclasses.replace(good.settlement, tx_raw=raw(good.settlement.msg), tx_hash=tx_hash)
    report = verify_bundle(dataclasses.replace(good, settlement=settlement))
    assert report.failed_step == "settled" and re.search(reason, report.failure), report.failure


def test_a_v5_bundle_carries_its_execution_timeout_and_is_replayed_under_the_v5_rules(good):
    b = dataclasses.replace(good, protocol_version="v5", config=dataclasses.replace(good.config, execution_timeout=0))
    document = b.to_json()
    assert '"execution_timeout": 0' in document and bd.parse_bundle(document.encode()) == b
    assert '"execution_timeout"' not in good.to_json()
    report = verify_bundle(b)  # the fixture signs v4.1 roots: under v5 the first root already differs
    assert (report.level, report.failed_step, report.failed_nonce) == ("signed", "replayed", 1)
    assert "recomputed post_state_root" in report.failure


def test_a_stamped_v5_start_stops_at_signed_saying_what_is_missing(good):
    body = pb.concat((pb.f_uint(1, 1), pb.f_bytes(2, b"prompt"), pb.f_str(3, "llama"), pb.f_uint(4, 100),
                      pb.f_uint(5, 50), pb.f_uint(6, 1000), pb.f_uint(7, 4242), pb.f_bytes(8, b"\x11" * 32)))
    content = diff_content(1, [pb.f_msg(1, body)], bytes(32), str(ESCROW_ID))
    b = dataclasses.replace(good, protocol_version="v5", config=dataclasses.replace(good.config, execution_timeout=0),
                            diffs=(bd.SignedDiff(1, content, user_sign(content)),), settlement=None, penalties=())
    report = verify_bundle(b)
    assert outcomes(report)[:2] == [("signed", PASS), ("replayed", NOT_CHECKED)]
    assert report.failed_nonce == 1 and report.failure.startswith(
        "not checkable by this verifier: inference 1 carries a block-height stamp (started_at_height 4242")


def test_a_config_without_a_known_seal_grace_round_trips_and_is_not_checkable(good):
    """An escrow that published inference_seal_grace_nonces 0 (its build's default, not known here) exports a
    bundle without the field; the bundle loads, and its replay under sealing rules is not checked, never failed."""
    b = dataclasses.replace(good, config=dataclasses.replace(good.config, seal_grace_nonces=None))
    document = b.to_json()
    assert '"seal_grace_nonces"' not in document and '"seal_grace_nonces"' in good.to_json()
    assert bd.parse_bundle(document.encode()) == b
    report = verify_bundle(b)
    replayed = next(s for s in report.steps if s.name == "replayed")
    assert (report.level, replayed.outcome) == ("signed", NOT_CHECKED)
    assert "inference_seal_grace_nonces is 0" in replayed.detail


def test_what_the_author_could_not_check_is_honoured_and_never_a_pass(good, tmp_path):
    """The bundle states what its stored evidence could not show (indexer.replay.bundling): a slot whose grants were
    read live only or not at all leaves a signature by another key not checked; a stored settlement that was
    unusable is failed or not checked as stated; notes are printed. None of them can make a bundle pass."""
    warm = coincurve.PrivateKey.from_int(77)
    msg = settle_msg(keys=[warm, *KEYS[1:]])
    for grants, gap in (("live", "read from live values"), ("none", "only the slots' own addresses")):
        group = (bd.Host(0, HOSTS[0], (), grants), *good.group[1:])
        report = verify_bundle(make_bundle(msg, group=group))
        assert (report.level, outcomes(report)[2]) == ("replayed", ("settled", NOT_CHECKED)), report.failure
        assert gap in report.failure
        assert bd.parse_bundle(make_bundle(msg, group=group).to_json().encode()).group == group
    assert outcomes(verify_bundle(make_bundle(msg)))[2] == ("settled", FAIL)  # the epoch's own grants refute it
    for fails, outcome in ((True, FAIL), (False, NOT_CHECKED)):
        b = dataclasses.replace(good, settlement=None, notes=("approved versions not checked",),
                                settlement_missing=bd.SettlementMissing("stored settlement unreadable", fails))
        assert bd.parse_bundle(b.to_json().encode()) == b
        report = verify_bundle(b)
        assert outcomes(report)[2] == ("settled", outcome) and report.failure == "stored settlement unreadable"
        done = cli(tmp_path, b.to_json())
        assert done.returncode == 1 and "note      approved versions not checked" in done.stdout
