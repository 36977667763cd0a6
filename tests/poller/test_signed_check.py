"""The decode processes' signed check (indexer.poller.decode.check_signed) on a devnet escrow's served log, without
a database: it is a recovery of each user signature, compared with the escrow's creator, and not a verification
against the creator's key, which would be cheaper (bench/poller_decode_bench.py) but would take a signature whose
recovery byte was changed: that signature still verifies against the creator's key, while its recovery, the
chain's own check (Ecrecover), names another key."""
from __future__ import annotations

import base64

import coincurve
import pytest
from coincurve.ecdsa import cdata_to_der, deserialize_recoverable, recoverable_convert

from indexer.devnet import Scenario, ScenarioConfig
from indexer.poller.decode import LogRejected, check_signed, decode_entries
from indexer.verify import proto as pb
from indexer.wire.diffs import diff_contents_from_host_json, diff_to_host_json


@pytest.fixture(scope="module")
def served():
    """(escrow id, version, creator, the host JSON entries of its log) of one devnet escrow."""
    scn = Scenario(ScenarioConfig(seed=11, epochs=1, escrows_per_epoch=1, inferences_per_escrow=8))
    version = scn.config.protocol_version
    (eid, esc), = scn.escrows.items()
    entries = [diff_to_host_json(d, version, sig, root) for d, sig, root in scn.host_diff_log(esc)]
    assert len(entries) >= 3
    return eid, version, esc.creator, entries


def _with_recovery_byte_flipped(entry: dict) -> dict:
    sig = bytearray(base64.b64decode(entry["diff"]["user_sig"]))
    sig[64] ^= 1
    return {**entry, "diff": {**entry["diff"], "user_sig": base64.b64encode(bytes(sig)).decode()}}


def test_a_log_the_creator_signed_passes(served):
    eid, version, creator, entries = served
    check_signed(eid, creator, diff_contents_from_host_json(entries, version, eid))
    assert decode_entries(eid, version, entries, False, "member", creator).count > 0


def test_a_flipped_recovery_byte_fails_though_the_signature_verifies_against_the_creator(served):
    eid, version, creator, entries = served
    bad_at = 2
    forged = [*entries[:bad_at], _with_recovery_byte_flipped(entries[bad_at]), *entries[bad_at + 1:]]
    contents = diff_contents_from_host_json(forged, version, eid)
    nonce, _, _, signed = contents[bad_at]
    # the creator's key, recovered from an untouched diff of the same log
    _, _, _, good = contents[0]
    key = coincurve.PublicKey.from_signature_and_message(good.user_sig, good.signed_bytes(eid))
    der = cdata_to_der(recoverable_convert(deserialize_recoverable(signed.user_sig)))
    assert key.verify(der, signed.signed_bytes(eid))  # a verification alone would take it
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: user signature "
                                          rf"recovers to gonka1\w+, the escrow creator is {creator}$"):
        check_signed(eid, creator, contents)
    with pytest.raises(LogRejected, match=rf"nonce {nonce}: signed check failed"):
        decode_entries(eid, version, forged, False, "member", creator)


def _without(entry: dict, *names: str) -> dict:
    diff = {k: v for k, v in entry["diff"].items() if k not in names}
    return {**entry, "diff": diff}


def _one_tx_dropped(entry: dict) -> dict:
    """The entry with its DiffContent's last tx left out: what a lying member serves in place of the log."""
    parts = pb.fields(base64.b64decode(entry["diff"]["txs"]))
    last = max(i for i, (number, _, _) in enumerate(parts) if number == 2)
    kept = [pb.f_uint(n, v) if wire == 0 else pb.f_bytes(n, v) for i, (n, wire, v) in enumerate(parts) if i != last]
    return {**entry, "diff": {**entry["diff"], "txs": base64.b64encode(b"".join(kept)).decode()}}


def test_a_log_served_without_its_signed_roots_is_checked_over_the_hosts_state_hash(served):
    eid, version, creator, entries = served
    bare = [_without(e, "post_state_root") for e in entries]
    assert all(e["state_hash"] for e in bare)
    check_signed(eid, creator, diff_contents_from_host_json(bare, version, eid))


def test_leaving_the_root_or_the_signature_out_does_not_take_a_diff_past_the_check(served):
    eid, version, creator, entries = served
    with_txs = next(i for i, e in enumerate(entries) if sum(n == 2 for n, _, _ in
                                                            pb.fields(base64.b64decode(e["diff"]["txs"]))) > 1)
    nonce = entries[with_txs]["diff"]["nonce"]
    # altered txs, the signed root left out, the member's true state_hash kept
    lie = [*entries[:with_txs], _without(_one_tx_dropped(entries[with_txs]), "post_state_root"), *entries[with_txs + 1:]]
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: user signature "
                                          rf"recovers to gonka1\w+, the escrow creator is {creator}$"):
        check_signed(eid, creator, diff_contents_from_host_json(lie, version, eid))
    unsigned = [*entries[:with_txs], _without(entries[with_txs], "user_sig"), *entries[with_txs + 1:]]
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: user signature: "):
        check_signed(eid, creator, diff_contents_from_host_json(unsigned, version, eid))


def test_a_diff_served_with_neither_root_is_refused_as_such(served):
    """The signed root left out and no state_hash either: the check cannot be made, and the log is not stored (the
    verification stage reports such a stored diff as not checked, indexer.load.stored_diffs.NO_ROOT)."""
    eid, version, creator, entries = served
    bare = {k: v for k, v in _without(entries[1], "post_state_root").items() if k != "state_hash"}
    nonce = entries[1]["diff"]["nonce"]
    with pytest.raises(LogRejected, match=rf"^escrow {eid} nonce {nonce}: signed check failed: no signed root served"):
        check_signed(eid, creator, diff_contents_from_host_json([entries[0], bare, *entries[2:]], version, eid))
