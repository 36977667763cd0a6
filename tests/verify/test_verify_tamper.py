"""Tampered evidence bundles of the v4.1 release fixture (tests/verify/test_verify_bundle.py builds it): each kind is
caught at its check (signed / replayed / settled) with its nonce and a reason that names it, and what the chain or
the hosts themselves accept is not flagged. Where the chain's own code decides, the test cites it:

- user signatures: gonka-ai/gonka @1924b248 ``devshard/signing/secp256k1.go`` ``Secp256k1Verifier.RecoverAddress``
  (65 bytes, go-ethereum ``crypto.Ecrecover``: no low-s rule);
- settlement: gonka-ai/gonka @1529fbc1 ``inference-chain/x/inference/keeper/devshard_settlement.go``
  (``VerifyDevshardSettlement``: a repeated slot is an error, not a second vote; ``recoverCosmosAddress`` hands
  ``v + 27`` to dcrd's ``RecoverCompact``, whose codes 27..34 take v 0..7, 4..7 flagging a compressed key);
- the hosts' check of a diff: gonka-ai/gonka @b87a604a ``devshard/state/start_proof.go`` ``VerifyDiffUserSig``
  (the signature is recovered over the deterministic re-encoding of the parsed diff, with the session's own escrow
  id) and @bb34d444 ``devshard/state/machine.go`` ``applyValidation`` (a repeat is passed over before its signature).
The bundle document's own tampering is in tests/verify/test_verify_tamper_bundle.py.
"""
from __future__ import annotations

import dataclasses
import random
import re

import pytest

from indexer.verify import bundle as bd, proto as pb, settlement as st
from indexer.verify.evidence import FAIL, verify_bundle
from tests.support.verify_kit import HOSTS, KEYS, user_sign
from tests.verify.test_verify_bundle import ESCROW_ID, ROOTS, make_bundle, settle_msg

N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141  # the secp256k1 group order


@pytest.fixture(scope="module")
def good() -> bd.Bundle:
    return make_bundle()


def _high_s(signature: bytes) -> bytes:
    """The other valid signature of the same message and key: s -> N - s, the recovery parity flipped."""
    s = int.from_bytes(signature[32:64], "big")
    return signature[:32] + (N - s).to_bytes(32, "big") + bytes((signature[64] ^ 1,))


def _with_user_sig(good: bd.Bundle, nonce: int, change) -> bd.Bundle:
    diffs = tuple(dataclasses.replace(d, user_sig=change(d.user_sig)) if d.nonce == nonce else d for d in good.diffs)
    return dataclasses.replace(good, diffs=diffs)


def _check(report, step: str, nonce: int | None, reason: str) -> None:
    assert (report.failed_step, report.failed_nonce) == (step, nonce), report.failure
    assert re.search(reason, report.failure), report.failure
    assert dict((s.name, s.outcome) for s in report.steps)[step] == FAIL
    order = ["signed", "replayed", "settled"]
    assert report.level == (["none"] + order)[order.index(step)]


# ---- the user's signature on a diff

def test_a_malleated_high_s_user_signature_still_names_the_user_and_passes(good):
    """Ecrecover accepts a high s (secp256k1.go @1924b248 asks only for 65 bytes): the hosts took this diff, and it
    recovers to the creator over the very bytes served, so it is the user's diff."""
    report = verify_bundle(_with_user_sig(good, 6, _high_s))
    assert (report.level, report.ok) == ("settled", True), report.failure


@pytest.mark.parametrize("change, reason", [
    (lambda s: s[:64] + b"\x1b", r"recovery byte v = 27, expected 0 or 1"),
    (lambda s: s[:64] + b"\x1c", r"recovery byte v = 28, expected 0 or 1"),
    (lambda s: s[:64] + bytes((s[64] + 4,)), r"recovery byte v = [45], expected 0 or 1"),
    (lambda s: s[:64] + bytes((s[64] + 2,)), r"recovers to no key"),
    (lambda s: s[:64], r"is 64 bytes, expected 65"),
    (lambda s: s + s[-1:], r"is 66 bytes, expected 65"),
    (lambda s: b"", r"is 0 bytes, expected 65"),
])
def test_a_reencoded_or_resized_user_signature_fails_signed_at_its_nonce(good, change, reason):
    report = verify_bundle(_with_user_sig(good, 6, change))
    _check(report, "signed", 6, r"^user signature: signature " + reason)


def test_trailing_bytes_after_a_signed_diff_fail_signed_and_signed_ones_fail_the_replay(good):
    d = good.diffs[4]
    padded = dataclasses.replace(d, content=d.content + b"\x00")
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:4] + (padded,) + good.diffs[5:]))
    _check(report, "signed", 5, "user signature recovers to gonka1")
    # the user signed the padded bytes: a decoder that stopped at the message's end would take them; this one reads
    # every byte, as Go's proto.Unmarshal does (a 0 tag is an error there too)
    signed = bd.SignedDiff(5, d.content + b"\x00", user_sign(d.content + b"\x00"))
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:4] + (signed,) + good.diffs[5:]))
    _check(report, "replayed", 5, "DiffContent unreadable: field number 0 at offset")


def _resigned_content(nonce: int, parts: list[bytes]) -> bd.SignedDiff:
    content = b"".join(parts)
    return bd.SignedDiff(nonce, content, user_sign(content))


def _parts(d: bd.SignedDiff) -> list[bytes]:
    return [pb.f_uint(n, v) if w == pb.VARINT else pb.f_msg(n, v) for n, w, v in pb.fields(d.content)]


def _tx_body_changed(parts: list[bytes], change) -> list[bytes]:
    """``parts`` with the first tx's member body passed through ``change``."""
    tx = next(p for p in parts if p[0] == 0x12)
    (_, _, wrapper), = pb.fields(tx)  # the txs field: one DevshardTx
    (number, _, body), = pb.fields(wrapper)
    return [pb.f_msg(2, pb.f_msg(number, change(body))) if p is tx else p for p in parts]


def _repeat_first(body: bytes) -> bytes:
    first = pb.fields(body)[0]
    return pb.f_uint(first[0], first[2]) + body if first[1] == pb.VARINT else pb.f_msg(first[0], first[2]) + body


@pytest.mark.parametrize("kind, change, reason", [
    ("a false root after the true one", lambda p: p + [pb.f_bytes(4, bytes(32))],
     r"DiffContent: field 4 \(post_state_root\) is given twice"),
    ("a false root before the true one", lambda p: [*p[:-1], pb.f_bytes(4, bytes(32)), p[-1]],
     r"DiffContent: field 4 \(post_state_root\) is given twice"),
    ("the escrow id before the txs", lambda p: [p[0], *p[-2:-1], *p[1:-2], p[-1]],
     r"DiffContent: field 2 \(txs\) comes after field 3"),
    ("the nonce padded to two bytes", lambda p: [b"\x08\x87\x00", *p[1:]],
     r"DiffContent: a field at its default value is written, or a varint is longer than it needs"),
    ("a tx field given twice", lambda p: _tx_body_changed(p, _repeat_first),
     r"tx 0 \(validation\): field 1 \(inference_id\) is given twice"),
    # inference_id 4 (two bytes), then validator_slot 0 written out
    ("a tx field written at its default", lambda p: _tx_body_changed(p, lambda b: b[:2] + b"\x10\x00" + b[2:]),
     r"tx 0 \(validation\): a field at its default value is written"),
])
def test_a_signature_over_another_encoding_of_the_diff_fails_signed(good, kind, change, reason):
    """The hosts recover the user's signature over the deterministic encoding of the diff they parsed
    (start_proof.go @b87a604a ``VerifyDiffUserSig``), never over the bytes sent: a diff the user signed in another
    encoding (a field repeated, reordered, padded, a default written) is one they refuse, whichever value a reader
    would take from it. Nonce 7 holds two validations."""
    parts = _parts(good.diffs[6])
    assert [p[0] for p in parts] == [0x08, 0x12, 0x12, 0x1a, 0x22] and parts[-1] == pb.f_bytes(4, ROOTS[7])
    changed = _resigned_content(7, change(parts))
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:6] + (changed,) + good.diffs[7:]))
    _check(report, "signed", 7, r"^the user signed bytes the hosts would not take as this diff's: " + reason)


def test_the_deterministic_encoding_resigned_passes(good):
    parts = _parts(good.diffs[6])
    same = _resigned_content(7, parts)
    assert same.content == good.diffs[6].content
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:6] + (same,) + good.diffs[7:]))
    assert report.level == "settled", report.failure


def test_a_field_outside_diff_content_fails_signed_with_its_number(good):
    """The hosts build DiffContent anew from the diff's nonce, txs, escrow id and root before they recover the
    user's signature (BuildDiffContent, start_proof.go @b87a604a): a field 6 the user signed was never in what they
    check, so the signature is not one they take."""
    d = good.diffs[2]
    bad = _resigned_content(3, _parts(d) + [pb.f_uint(6, 1)])
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:2] + (bad,) + good.diffs[3:]))
    _check(report, "signed", 3, r"DiffContent: field 6 is not in the message the hosts rebuild")


def test_a_repeated_nonce_with_other_content_is_served_again(good):
    parts = _parts(good.diffs[7])
    other = _resigned_content(8, [*parts[:-2], pb.f_msg(2, pb.f_msg(8, b"")), *parts[-2:]])  # a finalize added
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:8] + (other,) + good.diffs[8:]))
    _check(report, "replayed", 8, "nonce 8 is served again after nonce 8")


def test_a_gap_of_several_nonces_names_the_first_missing(good):
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:9] + good.diffs[12:]))
    _check(report, "replayed", 10, "nonce 10 is missing: the next diff served is nonce 13")


# ---- the settlement's host signatures

def _with_signatures(msg: st.SettleMsg, signatures) -> bd.Bundle:
    return make_bundle(dataclasses.replace(msg, signatures=list(signatures)))


def _sig(slot: int, key_index: int | None = None, **signed) -> st.SlotSignature:
    msg = settle_msg()
    what = {"state_root": msg.state_root, "escrow_id": ESCROW_ID, "nonce": 34, **signed}
    return st.SlotSignature(slot, st.sign_state(KEYS[slot if key_index is None else key_index], what["state_root"],
                                                what["escrow_id"], what["nonce"]))


@pytest.mark.parametrize("name, change", [
    ("high s", _high_s),
    ("v + 4 (dcrd's compressed-key code)", lambda s: s[:64] + bytes((s[64] + 4,))),
])
def test_a_host_signature_the_chain_accepts_reencoded_still_counts(name, change):
    msg = settle_msg()
    resigned = [dataclasses.replace(s, signature=change(s.signature)) if s.slot_id == 2 else s for s in msg.signatures]
    report = verify_bundle(_with_signatures(msg, resigned))
    assert (report.level, report.ok) == ("settled", True), report.failure
    assert "4 slot signatures, quorum 4 of 5" in report.steps[2].detail


@pytest.mark.parametrize("change, reason", [
    (lambda s: s[:64] + b"\x1b", r"failed to recover address for slot 2: signature recovery byte v = 27: the chain's "
                                 r"compact code v \+ 27 is outside 27 \.\. 34"),
    (lambda s: s[:64], "failed to recover address for slot 2: signature is 64 bytes, expected 65"),
    (lambda s: s + b"\x00", "failed to recover address for slot 2: signature is 66 bytes, expected 65"),
])
def test_a_host_signature_the_chain_refuses_fails_settled(change, reason):
    msg = settle_msg()
    resigned = [dataclasses.replace(s, signature=change(s.signature)) if s.slot_id == 2 else s for s in msg.signatures]
    _check(verify_bundle(_with_signatures(msg, resigned)), "settled", 34, "the chain would refuse the settlement: "
           + reason)


@pytest.mark.parametrize("kind, signatures, reason", [
    # the chain stops at a repeated slot (an error, so one host cannot be counted twice by repeating its entry)
    ("one slot twice", lambda: [_sig(0), _sig(1), _sig(2), _sig(2)], "duplicate signature for slot 2"),
    ("one host's key for another slot", lambda: [_sig(0), _sig(1), _sig(2), _sig(3, key_index=0)],
     f"signature for slot 3 recovered {HOSTS[0]}, expected {HOSTS[3]}"),
    ("a slot outside the group", lambda: [_sig(0), _sig(1), _sig(2), st.SlotSignature(5, _sig(0).signature)],
     "slot_id 5 out of range"),
    ("a key outside the group", lambda: [_sig(0), _sig(1), _sig(2), _sig(3, key_index=5)],
     r"signature for slot 3 recovered gonka1\w+, expected " + HOSTS[3]),
    ("another nonce signed", lambda: [_sig(0), _sig(1), _sig(2), _sig(3, nonce=33)],
     r"signature for slot 3 recovered gonka1\w+, expected " + HOSTS[3]),
    ("another escrow signed", lambda: [_sig(0), _sig(1), _sig(2), _sig(3, escrow_id=125)],
     r"signature for slot 3 recovered gonka1\w+, expected " + HOSTS[3]),
    ("another root signed", lambda: [_sig(0), _sig(1), _sig(2), _sig(3, state_root=ROOTS[33])],
     r"signature for slot 3 recovered gonka1\w+, expected " + HOSTS[3]),
])
def test_host_signatures_that_do_not_make_a_quorum_of_the_group_fail_settled(kind, signatures, reason):
    report = verify_bundle(_with_signatures(settle_msg(), signatures()))
    _check(report, "settled", 34, "the chain would refuse the settlement: " + reason)


def test_the_quorum_counts_slots_so_a_host_holding_several_signs_for_each(good):
    """The chain counts one vote per slot (VerifyDevshardSettlement's slotVotes): a host holding two slots signs
    each with its one key and both count."""
    doubled = dataclasses.replace(good, group=(good.group[0], dataclasses.replace(good.group[1], address=HOSTS[0]),
                                               *good.group[2:]))
    msg = settle_msg()
    msg.signatures = [_sig(0), _sig(1, key_index=0), _sig(2), _sig(3)]
    data = st.encode_settle_msg(msg)
    # the replay refuses the group (slot 1's own receipts are signed by key 1): the settled check is read alone
    escrow = st.Escrow(ESCROW_ID, msg.settler, 1_000_000, tuple(h.address for h in doubled.group), 1000)
    check = st.verify_settlement(st.decode_settle_msg(data), escrow)
    assert (check.votes, check.quorum, check.signers[1]) == (4, 4, HOSTS[0])


# ---- the settlement's content against the final state

def _consistent(msg: st.SettleMsg) -> st.SettleMsg:
    """``msg`` with its root recomputed and co-signed again: what a lying settler with the hosts' keys would make."""
    msg.state_root = st.settlement_root(msg)
    msg.signatures = [st.SlotSignature(i, st.sign_state(KEYS[i], msg.state_root, ESCROW_ID, msg.nonce))
                      for i in range(4)]
    return msg


def _stats_changed(msg: st.SettleMsg) -> st.SettleMsg:
    msg.host_stats[0] = dataclasses.replace(msg.host_stats[0], cost=msg.host_stats[0].cost + 1)
    return msg


@pytest.mark.parametrize("kind, change, reason", [
    ("rest hash", lambda m: dataclasses.replace(m, rest_hash=bytes(32)), "is not the replayed settlement root"),
    ("fees", lambda m: dataclasses.replace(m, fees=m.fees + 1), "is not the replayed settlement root"),
    ("host stats", _stats_changed, "is not the replayed settlement root"),
    ("a slot's host stats left out", lambda m: dataclasses.replace(m, host_stats=m.host_stats[1:]),
     "is not the replayed settlement root"),
    ("another version", lambda m: dataclasses.replace(m, version="v4.2"),
     r"the settlement's version 'v4\.2' is not the escrow's protocol version 'v4\.1'"),
    ("an empty version", lambda m: dataclasses.replace(m, version=""),
     r"the settlement's version '' is not the escrow's protocol version 'v4\.1'"),
])
def test_a_settlement_unlike_the_final_state_fails_settled_though_signed(kind, change, reason):
    report = verify_bundle(make_bundle(_consistent(change(settle_msg()))))
    _check(report, "settled", 34, reason)


def test_a_settlement_whose_root_is_right_but_whose_parts_are_not_fails_the_chains_recomputation():
    msg = dataclasses.replace(settle_msg(), rest_hash=bytes(32))  # the replayed root kept, its preimage changed
    _check(verify_bundle(make_bundle(msg)), "settled", 34, "the chain would refuse the settlement: state_root mismatch")


@pytest.mark.parametrize("kind, member, reason", [
    ("a member that is a varint", pb.f_uint(3, 5), r"a DevshardTx holds exactly one member, found \[\(3, 0\)\]"),
    ("a vote that is a varint", pb.f_msg(4, pb.f_uint(1, 19) + pb.f_uint(3, 7)),
     r"\(timeout\) vote: field 3 .*|field 3 with wire type 0"),
])
def test_a_tx_of_the_wrong_wire_types_is_refused_by_the_replay_never_a_crash(good, kind, member, reason):
    """The encoding check reads only what it can (a message where one belongs) and leaves the rest to the decoder."""
    parts = _parts(good.diffs[2])
    bad = _resigned_content(3, [parts[0], pb.f_msg(2, member), *parts[2:]])
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:2] + (bad,) + good.diffs[3:]))
    _check(report, "replayed", 3, reason)


def _validation_sig_replaced(good: bd.Bundle, which: int, signature: bytes) -> bd.Bundle:
    """Nonce 7 (two validations of inference 4 by slot 0) with validation ``which``'s proposer_sig replaced, the
    diff signed again by the user."""
    parts = _parts(good.diffs[6])
    tx = parts[1 + which]
    (_, _, wrapper), = pb.fields(tx)
    (number, _, body), = pb.fields(wrapper)
    fields = [pb.f_bytes(n, signature) if n == 4 else pb.f_uint(n, v) if w == pb.VARINT else pb.f_bytes(n, v)
              for n, w, v in pb.fields(body)]
    parts[1 + which] = pb.f_msg(2, pb.f_msg(number, b"".join(fields)))
    return dataclasses.replace(good, diffs=good.diffs[:6] + (_resigned_content(7, parts),) + good.diffs[7:])


@pytest.mark.parametrize("signature", [bytes(64) + b"\x00", b"short", KEYS[4].sign_recoverable(b"other")])
def test_a_repeated_validation_is_passed_over_before_its_signature_as_the_hosts_do(good, signature):
    """applyValidation returns on a repeat from the same address before it verifies the proposer signature
    (gonka-ai/gonka @bb34d444 devshard/state/machine.go, "after dedup"): whatever the repeat's signature, the diff is
    one the hosts applied, and the roots agree."""
    report = verify_bundle(_validation_sig_replaced(good, 1, signature))
    assert report.level == "settled", report.failure


def test_a_validation_that_counts_with_a_signature_recovering_to_no_key_fails_the_replay(good):
    report = verify_bundle(_validation_sig_replaced(good, 0, bytes(64) + b"\x00"))
    _check(report, "replayed", 7, r"nonce 7 tx 0 \(validation\): slot 0: proposer signature: signature recovers to "
                                  r"no key")
    assert report.unknown_signer is None  # not a grant question: no listed grant could make it pass


def test_a_diff_whose_signed_nonce_is_another_names_the_nonce_the_log_lacks(good):
    """Nonce 31's content changed to say nonce 49 and signed again: the log lacks nonce 31 (the listing, which also
    says 31, is not what is wrong)."""
    parts = _parts(good.diffs[30])
    moved = dataclasses.replace(_resigned_content(31, [pb.f_uint(1, 49), *parts[1:]]), nonce=31)
    report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:30] + (moved,) + good.diffs[31:]))
    _check(report, "replayed", 31, "nonce 31 is missing: the next diff served is nonce 49")


def test_random_changes_to_signed_diffs_never_crash_and_name_the_changed_nonce(good):
    """A seeded sweep of byte changes (set, insert, delete, splice) to one diff at a time, each signed again by the
    user: every report comes back, a failure names the changed diff's nonce, and what passes is only what the hosts
    would also take (a change inside the repeated validation of nonce 7, which they pass over)."""
    rng = random.Random(20261206)
    for _ in range(250):
        k = rng.randrange(len(good.diffs))
        d, content = good.diffs[k], bytearray(good.diffs[k].content)
        at = rng.randrange(len(content) + 1)
        end = min(len(content), at + rng.randrange(3))
        content[at:end] = bytes(rng.randrange(256) for _ in range(rng.randrange(3)))
        changed = bd.SignedDiff(d.nonce, bytes(content), user_sign(bytes(content)))
        report = verify_bundle(dataclasses.replace(good, diffs=good.diffs[:k] + (changed,) + good.diffs[k + 1:]))
        if report.failed_step is not None:
            assert report.failed_step in ("signed", "replayed") and report.failed_nonce == d.nonce, report.failure
        elif bytes(content) != d.content:
            assert d.nonce == 7, bytes(content).hex()


def test_the_encoding_check_is_made_once_per_diff_not_again_inside_a_vouched_prefix(good, monkeypatch):
    """The stage's memo vouches for a prefix that passed this verifier's every check (indexer.replay.verify_memo): a
    log verified again each poll cycle does not parse its old diffs again, only the new ones."""
    from indexer.verify import diff, signatures as sig
    calls = []
    real = diff.noncanonical
    monkeypatch.setattr(diff, "noncanonical", lambda data: calls.append(data) or real(data))
    first = sig.Recoveries()
    assert verify_bundle(good, first).ok and len(calls) == 34
    calls.clear()
    assert verify_bundle(good, sig.Recoveries(first.kept(), prefix=30)).ok
    assert calls == [d.content for d in good.diffs[30:]]


def test_an_unknown_field_in_a_settlements_host_stats_is_what_the_chain_ignores():
    """ComputeDevshardHostStatsHash (devshard_settlement.go @1529fbc1) hashes fields 1-6 of each entry and gogoproto
    skips a field it does not know: the settlement the chain took with one still settles here, the field kept."""
    msg = settle_msg()
    msg.host_stats[0] = dataclasses.replace(msg.host_stats[0], unknown=[(7, pb.VARINT, 5)])
    bundle = make_bundle(msg)
    assert st.decode_settle_msg(bundle.settlement.msg).host_stats[0].unknown == [(7, pb.VARINT, 5)]
    report = verify_bundle(bundle)
    assert (report.level, report.ok) == ("settled", True), report.failure
