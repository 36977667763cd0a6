"""The verification stage on stored evidence that is missing or malformed, through the database: what is only missing
is not checked (never a failure), what is malformed fails with a reason saying what is wrong."""
from __future__ import annotations

import base64

from indexer.verify import proto as pb
from indexer.wire.diffs import user_signed_bytes
from tests.support.helpers import ingest, write_lines
from tests.support.verify_kit import user_sign
from tests.support.verify_records import EID, ROOTS, b64, records, signed_diff_records


def load(db_url, tmp_path, recs, name="in.ndjson"):
    return ingest(db_url, write_lines(tmp_path / name, recs))


def row(conn, eid=EID) -> dict:
    cur = conn.execute("SELECT * FROM replay.escrow_verification WHERE escrow_id = %s", (eid,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def _with_diffs(diffs: list[dict]) -> list[dict]:
    return [r for r in records() if r["kind"] != "signed_diff"] + diffs


def _served_bare(rec: dict, **changes) -> dict:
    """A stored diff as a build that serves ``DiffContent{nonce, txs}`` gives it: fields 3 and 4 cut off."""
    whole = base64.b64decode(rec["content"])
    tail = pb.f_str(3, EID) + pb.f_bytes(4, bytes.fromhex(rec["post_state_root"]))
    assert whole.endswith(tail)
    return {**rec, "content": b64(whole[:-len(tail)]), "post_state_root": None, **changes}


def test_a_diff_stored_with_no_signed_root_anywhere_is_not_checked_not_failed(db_url, conn, tmp_path):
    from indexer.load.stored_diffs import NO_ROOT

    diffs = signed_diff_records()
    diffs[6] = _served_bare(diffs[6], state_hash=None)
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failed_nonce"]) == ("none", None, 7), got["failure"]
    assert got["failure"] == f"rec.signed_diff escrow {EID} nonce 7: {NO_ROOT}"


def test_a_diff_with_neither_root_nor_user_signature_still_fails_signed(db_url, conn, tmp_path):
    diffs = signed_diff_records()
    diffs[6] = _served_bare(diffs[6], state_hash=None, user_sig=None)
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["failed_check"], got["failed_nonce"]) == ("signed", 7)
    assert got["failure"].endswith("no user signature captured")


def test_content_with_a_truncated_field_5_fails_saying_it_is_unreadable(db_url, conn, tmp_path):
    """Field 5 (sealed inference ids) with a packed varint cut short: the content is base64 and is what the user
    signed, so the signed check passes and the replay names the broken field."""
    content = bytes.fromhex("08012a0180")  # nonce 1; field 5, one byte: a varint whose continuation never comes
    signed = user_signed_bytes(content, EID, ROOTS[1])
    diffs = signed_diff_records()
    diffs[0] = {**diffs[0], "content": b64(content), "user_sig": user_sign(signed).hex()}
    load(db_url, tmp_path, _with_diffs(diffs))
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failed_nonce"]) == ("signed", "replayed", 1), got["failure"]
    assert got["failure"].startswith("DiffContent unreadable: ") and "base64" not in got["failure"]


def _warm_signed_settlement() -> tuple[list[dict], str]:
    """The fixture's records with slot 0's settlement signature made by a warm key, and that key's address."""
    import coincurve

    from indexer.verify.signatures import address_of_pubkey
    from tests.support.verify_kit import KEYS
    from tests.support.verify_records import settle_msg, settlement_record

    secret = coincurve.PrivateKey(b"\x07" * 32)
    msg = settle_msg(keys={**dict(enumerate(KEYS)), 0: secret})
    recs = [r for r in records() if r["kind"] != "settlement"] + [settlement_record(msg)]
    return recs, address_of_pubkey(secret.public_key.format(compressed=True))


def _grant(participant: str, grantee: str, exact: bool) -> dict:
    from tests.support.verify_records import EPOCH

    return {"kind": "warm_key", "epoch_index": EPOCH, "participant": participant, "grantee": grantee,
            "read_height": 900 if exact else None, "read_exact": exact}


def test_an_exact_reading_after_live_ones_decides_the_participants_grants(db_url, conn, tmp_path):
    """A cycle read slot 0's participant live (end height pruned on the node asked: none granted, or another key);
    a later one read it as of the epoch's end. The live rows stay stored (rows are never deleted, and they are under
    other grantees), but the exact reading alone is the participant's grants; a live row loaded after it with a new
    grantee neither makes it inexact nor adds that key."""
    from indexer.poller.store import Store
    from indexer.verify.evidence import INEXACT
    from tests.support.verify_kit import HOSTS
    from tests.support.verify_records import EPOCH

    recs, warm = _warm_signed_settlement()
    other = "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpzxxq27"
    load(db_url, tmp_path, recs + [_grant(HOSTS[0], "", False), _grant(HOSTS[0], other, False)])
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("replayed", None) and got["failure"].endswith(f"({INEXACT})")
    assert Store(conn, archive=False).exactly_granted(EPOCH) == set()
    load(db_url, tmp_path, [_grant(HOSTS[0], warm, True)], "exact.ndjson")
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failure"]) == ("settled", None, None)
    assert Store(conn, archive=False).exactly_granted(EPOCH) == {HOSTS[0]}  # the poller stops re-reading it live
    # the exact reading did not list `other`; a live row naming yet another key changes nothing
    load(db_url, tmp_path, [_grant(HOSTS[0], "gonka1" + "q" * 38, False)], "late-live.ndjson")
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failure"]) == ("settled", None, None)


def test_an_exact_reading_that_does_not_list_a_key_refutes_it_despite_a_live_row(db_url, conn, tmp_path):
    """Today's grants list the key, the epoch's did not (read exactly, none granted): the signature fails."""
    from tests.support.verify_kit import HOSTS

    recs, warm = _warm_signed_settlement()
    load(db_url, tmp_path, recs + [_grant(HOSTS[0], warm, False), _grant(HOSTS[0], "", True)])
    got = row(conn)
    assert (got["failed_check"], got["failed_nonce"]) == ("settled", 34), got["failure"]
    assert f"recovered {warm}" in got["failure"]


def _params(approved: str = "v4.1", exact: bool | None = False, height: int = 5000) -> dict:
    from tests.support.verify_records import EPOCH

    return {"kind": "epoch_params", "epoch_index": EPOCH, "params_height": height, "params_exact": exact,
            "devshard_escrow_params": {"approved_versions": [{"name": approved}], "max_nonce": 1000}}


def _epoch(end_height: int | None) -> dict:
    from tests.support.verify_records import EPOCH

    return {"kind": "epoch", "epoch_index": EPOCH, "start_height": 100, "end_height": end_height}


def _without_params() -> list[dict]:
    return [r for r in records() if r["kind"] != "epoch_params"]


def test_an_ended_epochs_live_params_are_not_taken_for_its_own(db_url, conn, tmp_path):
    """After the epoch ended, governance dropped v4.1 from approved_versions; the epoch's end height was pruned, so
    only today's params were read. The settlement is neither failed nor passed on them: the check is not made, and
    says why; once the params are read as of the epoch, the escrow is checked again on them."""
    load(db_url, tmp_path, [_epoch(1000), *_without_params(), _params("v5", exact=False)])
    got = row(conn)
    assert (got["level"], got["failed_check"]) == ("settled", None), got["failure"]
    assert got["failure"] == ("the approved versions and max_nonce were not checked: the devshard_escrow_params "
                              "captured for epoch 272 were read from live values after the epoch ended (at height "
                              "1000), not as of it")
    load(db_url, tmp_path, [_params("v4.1", exact=True, height=1000)], "exact.ndjson")
    got = row(conn)
    assert (got["level"], got["failed_check"], got["failure"]) == ("settled", None, None)


def test_exact_params_equal_to_the_live_ones_still_check_the_escrow_again(db_url, conn, tmp_path):
    load(db_url, tmp_path, [_epoch(1000), *_without_params(), _params(exact=False)])
    assert row(conn)["failure"].startswith("the approved versions and max_nonce were not checked")
    load(db_url, tmp_path, [_params(exact=True, height=1000)], "exact.ndjson")
    assert (row(conn)["level"], row(conn)["failure"]) == ("settled", None)


def test_live_params_stand_in_while_the_epoch_runs_and_stop_when_it_ends(db_url, conn, tmp_path):
    load(db_url, tmp_path, [_epoch(None), *_without_params(), _params(exact=False)])
    assert (row(conn)["level"], row(conn)["failure"]) == ("settled", None)
    load(db_url, tmp_path, [_epoch(1000)], "ended.ndjson")  # the end height pruned before params were read again
    got = row(conn)
    assert got["level"] == "settled" and got["failure"].startswith("the approved versions and max_nonce were not "
                                                                   "checked: the devshard_escrow_params captured")
