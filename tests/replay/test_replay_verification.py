"""The verification stage through the database: the v4.1 release fixture loaded as NDJSON records (escrow, txs,
signed diffs, settlement, the epoch's escrow params) reaches ``settled`` in api.escrow_verification, and each kind of
fault in the records is caught at its check and nonce (tests/support/verify_records.py)."""
from __future__ import annotations

import psycopg
import pytest

from indexer.replay.run import mark_all_dirty, replay_dirty
from indexer.replay.bundling import NO_LOG
from indexer.verify.evidence import COLD_ONLY, INEXACT
from tests.support.helpers import ingest, write_lines
from tests.support.verify_records import (EID, HEIGHT, SOURCE, TAMPERS, epoch_params_record, escrow_record, records,
                                          settlement_record, signed_diff_records, tampered, tx_records)

COLUMNS = ("escrow_id, epoch_index, level, nonces_checked, failed_check, failed_nonce, failure, source_host, "
           "protocol_version, settlement_tx_hash, settlement_height, verified_at")


def load(db_url, tmp_path, recs, name="in.ndjson"):
    return ingest(db_url, write_lines(tmp_path / name, recs))


def verification(conn, eid=EID) -> dict:
    cur = conn.execute(f"SELECT {COLUMNS} FROM api.escrow_verification WHERE escrow_id = %s", (eid,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def stored(url, run_time: bool = True) -> list[dict]:
    """Every verification row (without verified_at unless ``run_time``)."""
    with psycopg.connect(url) as c:
        cur = c.execute("SELECT * FROM replay.escrow_verification ORDER BY escrow_id")
        names = [col.name for col in cur.description]
        return [{k: v for k, v in zip(names, row) if run_time or k != "verified_at"} for row in cur]


def test_the_fixture_reaches_settled_with_every_nonce_checked(db_url, conn, tmp_path):
    load(db_url, tmp_path, records())
    row = verification(conn)
    settlement = settlement_record()
    assert {k: v for k, v in row.items() if k != "verified_at"} == {
        "escrow_id": EID, "epoch_index": 272, "level": "settled", "nonces_checked": 34, "failed_check": None,
        "failed_nonce": None, "failure": None, "source_host": SOURCE, "protocol_version": "v4.1",
        "settlement_tx_hash": settlement["tx_hash"], "settlement_height": HEIGHT}
    assert row["verified_at"] is not None
    # the replay ran beside it on the same records
    assert conn.execute("SELECT tx_count FROM replay.escrow WHERE escrow_id = %s", (EID,)).fetchone()[0] > 0


@pytest.mark.parametrize("kind", sorted(TAMPERS))
def test_each_fault_is_caught_at_its_check_and_nonce(db_url, conn, tmp_path, kind):
    check, nonce, reason = TAMPERS[kind]
    load(db_url, tmp_path, tampered(kind))
    row = verification(conn)
    if kind == "forged host signature":
        # with no grants captured for the epoch, the forging key may be the host's warm key: not failed, not settled
        assert (row["level"], row["failed_check"]) == ("replayed", None) and row["failure"].endswith(f"({COLD_ONLY})")
        from tests.support.verify_kit import HOSTS
        from tests.support.verify_records import EPOCH
        grant = {"kind": "warm_key", "epoch_index": EPOCH, "participant": HOSTS[0], "read_height": 900,
                 "read_exact": True, "grantee": "gonka1qyqszqgpqyqszqgpqyqszqgpqyqszqgpzxxq27"}  # another key
        load(db_url, tmp_path, [grant], "grants.ndjson")
        row = verification(conn)
    order = ["signed", "replayed", "settled"]
    assert (row["failed_check"], row["failed_nonce"]) == (check, nonce), row["failure"]
    assert reason in row["failure"], row["failure"]
    assert row["level"] == (["none"] + order)[order.index(check)]
    # the nonces before the failing one passed; a settlement fault leaves every nonce checked
    assert row["nonces_checked"] == (34 if check == "settled" else nonce - 1)
    assert COLD_ONLY not in row["failure"]


def test_a_rerun_leaves_identical_rows_and_worker_processes_write_the_same(db_url, conn, tmp_path):
    load(db_url, tmp_path, records())
    first = stored(db_url)
    mark_all_dirty(conn)
    conn.commit()
    assert replay_dirty(conn).verified == 0  # replayed again, the same evidence: not re-checked
    assert stored(db_url) == first  # verified_at included
    conn.execute("DELETE FROM replay.escrow_verification")
    mark_all_dirty(conn)
    assert replay_dirty(conn, url=db_url, workers=2).verified == 1
    assert stored(db_url, run_time=False) == [{k: v for k, v in r.items() if k != "verified_at"} for r in first]


def test_changed_evidence_or_verifier_is_checked_again(db_url, conn, tmp_path, monkeypatch):
    from indexer.replay import verification as stage

    load(db_url, tmp_path, records())
    digest = conn.execute("SELECT evidence_digest FROM replay.escrow_verification").fetchone()[0]
    # the same diff from a host whose name sorts first: it names the diff now (indexer.load.samekey)
    load(db_url, tmp_path, [{**signed_diff_records()[0], "source_host": "http://host-0.example"}], "b.ndjson")
    row = verification(conn)
    assert row["source_host"] == f"http://host-0.example, {SOURCE}" and row["level"] == "settled"
    assert conn.execute("SELECT evidence_digest FROM replay.escrow_verification").fetchone()[0] != digest
    monkeypatch.setattr(stage, "VERIFIER_VERSION", stage.VERIFIER_VERSION + 1)  # a fix, its version raised
    monkeypatch.setattr(stage, "VERIFIER", stage.VERIFIER.replace("verifier ", "verifier 1", 1))
    mark_all_dirty(conn)
    conn.commit()
    assert replay_dirty(conn).verified == 1


def test_export_then_ingest_into_a_fresh_database_gives_the_same_rows(db_url, second_db_url, tmp_path):
    from indexer.load.export import export_records

    load(db_url, tmp_path, records())
    export_records(db_url, str(tmp_path / "out.ndjson"))
    ingest(second_db_url, tmp_path / "out.ndjson")
    first = stored(db_url, run_time=False)
    assert first and stored(second_db_url, run_time=False) == first  # the evidence digest included
    assert first[0]["level"] == "settled"


def _without(kind):
    return [r for r in records() if r["kind"] != kind]


@pytest.mark.parametrize("name, recs, want", [
    ("no signed log", lambda: _without("signed_diff"),
     {"level": "none", "nonces_checked": 0, "failed_check": None, "failure": NO_LOG}),
    ("unported version", lambda: [escrow_record(protocol_version="v3"), *_without("escrow")[:-1]],
     {"level": "signed", "nonces_checked": 34, "failed_check": None,
      "failure": "protocol version 'v3' is not supported by this verifier"}),
    ("v5 without its execution timeout", lambda: [escrow_record(protocol_version="v5"), *_without("escrow")[:-1]],
     {"level": "signed", "nonces_checked": 34, "failed_check": None,
      "failure": "not checkable by this verifier: the v5 rules seal a Finished record after seal_grace_seconds + "
                 "execution_timeout"}),
    ("no settlement", lambda: [escrow_record(settled=False), *_without("escrow")[:-1]],
     {"level": "replayed", "nonces_checked": 34, "failed_check": None,
      "failure": "no settlement transaction captured (the escrow is not settled)"}),
    ("settlement fields without its bytes", lambda: [*_without("settlement"), settlement_record(with_msg=False)],
     {"level": "replayed", "nonces_checked": 34, "failed_check": None,
      "failure": "settled not shown: the settlement was not read as broadcast"}),
    ("no escrow params", lambda: _without("epoch_params"),
     {"level": "settled", "nonces_checked": 34, "failed_check": None,
      "failure": "the approved versions and max_nonce were not checked: no devshard_escrow_params with them "
                 "captured for epoch 272"}),
    ("session config not captured", lambda: [escrow_record(token_price=None, creator=None), *_without("escrow")],
     {"level": "none", "nonces_checked": 0, "failed_check": None,
      "failure": f"escrow {EID}: not captured: creator, token_price"}),
    ("content not base64", lambda: [*_without("signed_diff"), *signed_diff_records()[:4],
                                    {**signed_diff_records()[4], "content": "%%%"}],
     {"level": "none", "nonces_checked": 0, "failed_check": "signed", "failed_nonce": 5,
      "failure": f"rec.signed_diff escrow {EID} nonce 5: content is not base64"}),
    ("no user signature", lambda: [*_without("signed_diff"), {**signed_diff_records()[0], "user_sig": None}],
     {"level": "none", "failed_check": "signed", "failed_nonce": 1,
      "failure": f"rec.signed_diff escrow {EID} nonce 1: no user signature captured"}),
])
def test_what_stops_verification_short_is_stated(db_url, conn, tmp_path, name, recs, want):
    load(db_url, tmp_path, recs())
    row = verification(conn)
    got = {k: row[k] for k in want}
    failure = want.pop("failure")
    assert {k: v for k, v in got.items() if k != "failure"} == want
    assert (failure is None and row["failure"] is None) or failure in row["failure"], row["failure"]


def test_a_verifier_failure_is_recorded_and_the_replay_goes_on(db_url, conn, tmp_path, monkeypatch):
    from indexer.replay import verification as stage

    def broken(bundle, recoveries=None, seen=None):
        raise IndexError("x" * 5000)  # what a verifier bug on some served bytes would raise

    monkeypatch.setattr(stage, "verify_bundle", broken)
    load(db_url, tmp_path, records())
    row = verification(conn)
    assert (row["level"], row["failed_check"]) == ("none", None)
    assert row["failure"].startswith("the verifier failed: IndexError: xxx") and len(row["failure"]) == 1000
    assert conn.execute("SELECT tx_count FROM replay.escrow WHERE escrow_id = %s", (EID,)).fetchone()[0] > 0


def test_a_warm_key_signature_counts_once_its_grant_is_captured(db_url, conn, tmp_path):
    """Hosts sign with warm keys (mainnet epoch 272): slot 0's settlement signature made with a key its participant
    granted fails until rec.warm_key holds the grant; loading the grant alone re-marks the epoch's escrows. A grant
    read from live values (read_exact false) leaves the signature not checked; read as of the epoch's end, the next
    replay settles the escrow."""
    import coincurve

    from indexer.verify.signatures import address_of_pubkey
    from tests.support.verify_kit import HOSTS, KEYS
    from tests.support.verify_records import EPOCH, settle_msg

    warm_secret = coincurve.PrivateKey(b"\x07" * 32)
    warm = address_of_pubkey(warm_secret.public_key.format(compressed=True))
    msg = settle_msg(keys={**dict(enumerate(KEYS)), 0: warm_secret})
    recs = [r for r in records() if r["kind"] != "settlement"] + [settlement_record(msg)]
    load(db_url, tmp_path, recs)
    row = verification(conn)
    assert (row["level"], row["failed_check"]) == ("replayed", None) and row["failure"].endswith(f"({COLD_ONLY})")
    grant = {"kind": "warm_key", "epoch_index": EPOCH, "participant": HOSTS[0], "grantee": warm, "read_exact": False}
    load(db_url, tmp_path, [grant], "live.ndjson")
    row = verification(conn)
    assert (row["level"], row["failed_check"]) == ("replayed", None) and row["failure"].endswith(f"({INEXACT})")
    load(db_url, tmp_path, [{**grant, "read_exact": True, "read_height": 900}], "grants.ndjson")
    assert conn.execute("SELECT count(*) FROM replay.dirty_escrow").fetchone()[0] == 0  # replayed by the ingest
    row = verification(conn)
    assert (row["level"], row["failed_check"], row["failure"]) == ("settled", None, None)


def _served_without_root(rec: dict, state_hash: str | None = None) -> dict:
    """A fixture diff as builds whose DiffToJSON serves ``DiffContent{nonce, txs}`` and leave the omitempty signed
    root out: the content without fields 3 and 4, no post_state_root, the host's state_hash beside it."""
    import base64

    from indexer.verify import proto as pb
    whole = base64.b64decode(rec["content"])
    tail = pb.f_str(3, EID) + pb.f_bytes(4, bytes.fromhex(rec["post_state_root"]))
    assert whole.endswith(tail)
    served = base64.b64encode(whole[:-len(tail)]).decode()
    return {**rec, "content": served, "post_state_root": None, "state_hash": state_hash or rec["state_hash"]}


def test_a_log_stored_without_its_signed_roots_is_checked_over_the_hosts_state_hash(db_url, second_db_url, conn,
                                                                                   tmp_path):
    bare = [_served_without_root(r) for r in signed_diff_records()]
    load(db_url, tmp_path, [*_without("signed_diff"), *bare])
    assert (verification(conn)["level"], verification(conn)["failed_check"]) == ("settled", None)
    # a state_hash that is not the root the user signed fails the signature at its nonce, never passes unchecked
    bare[6] = _served_without_root(signed_diff_records()[6], state_hash="ab" * 32)
    load(second_db_url, tmp_path, [*_without("signed_diff"), *bare], "lie.ndjson")
    with psycopg.connect(second_db_url) as c:
        row = verification(c)
    assert (row["failed_check"], row["failed_nonce"], row["level"]) == ("signed", 7, "none"), row["failure"]
    # loaded after the record the creator signed, it does not replace it (indexer.load.signed_conflicts)
    load(db_url, tmp_path, bare[6:7], "lie_later.ndjson")
    assert (verification(conn)["level"], verification(conn)["failed_check"]) == ("settled", None)
    assert "not stored: its user signature does not pass" in conn.execute(
        "SELECT reason FROM rec.quarantine").fetchone()[0]


def test_escrow_params_with_max_nonce_as_a_decimal_string_are_checked(db_url, conn, tmp_path):
    """The gateway writes a 64-bit params field as a decimal string: such a max_nonce is the same limit, and the
    approved versions and the nonce are checked against it, not left unchecked."""
    params = epoch_params_record()
    params["devshard_escrow_params"] = {**params["devshard_escrow_params"], "max_nonce": "1000"}
    load(db_url, tmp_path, [r if r["kind"] != "epoch_params" else params for r in records()])
    row = verification(conn)
    assert (row["level"], row["failure"]) == ("settled", None)
    params["devshard_escrow_params"]["max_nonce"] = "1"  # below the settled nonce: the chain would refuse it
    load(db_url, tmp_path, [params], name="params.ndjson")
    row = verification(conn)
    assert row["level"] != "settled" and "nonce" in row["failure"] and "exceeds maximum 1" in row["failure"], row
