"""The verification stage's memo (indexer.replay.verify_memo): a log verified again after it grew recovers only the
new signatures, and a changed byte anywhere in the verified prefix makes it recover every one again, finding the
fault at its nonce. Recoveries are counted at the secp256k1 call, on the real database."""
from __future__ import annotations

import base64

import pytest

from indexer.replay import verify_memo as vm
from indexer.replay.verification import verify_escrows
from indexer.verify import signatures as sig
from tests.support.helpers import ingest, write_lines
from tests.support.verify_records import EID, records
from tests.support.verify_records import _fork as fork  # the fixture's user-signed fork of one diff

SPLIT = 20  # the first cycle sees nonces 1..SPLIT


@pytest.fixture
def recoveries(monkeypatch):
    """How many secp256k1 recoveries ran (each call of the one function every recovery goes through)."""
    count = {"n": 0}
    real = sig.recover_pubkey

    def counting(message, signature):
        count["n"] += 1
        return real(message, signature)

    monkeypatch.setattr(sig, "recover_pubkey", counting)
    return count


def _row(conn) -> dict:
    cur = conn.execute("SELECT level, nonces_checked, failed_check, failed_nonce, failure, prefix_nonces "
                       "FROM replay.escrow_verification WHERE escrow_id = %s", (EID,))
    return dict(zip([c.name for c in cur.description], cur.fetchone()))


def _verify_again(conn) -> tuple:
    """Verify the escrow now, whatever its digest says (as a poll cycle does once its evidence changed)."""
    conn.execute("UPDATE replay.escrow_verification SET evidence_digest = NULL WHERE escrow_id = %s", (EID,))
    (result,) = verify_escrows(conn, [EID])
    conn.commit()
    return result


def _forget(conn) -> None:
    conn.execute("UPDATE replay.escrow_verification SET prefix_nonces = 0, prefix_chain = NULL, "
                 "prefix_signers = NULL, prefix_recoveries = NULL")


def _split():
    recs = records()
    early = [r for r in recs if r["kind"] not in ("signed_diff", "settlement") or
             (r["kind"] == "signed_diff" and r["nonce"] <= SPLIT)]
    return early, [r for r in recs if r not in early]


def test_a_grown_log_recovers_only_its_new_signatures(db_url, conn, tmp_path, recoveries):
    early, late = _split()
    recoveries["n"] = 0  # building the fixture's signed records recovers too: only the stage is counted
    ingest(db_url, write_lines(tmp_path / "early.ndjson", early))
    first = recoveries["n"]
    assert first > SPLIT  # every user signature of nonces 1..20 and the host signatures inside their txs
    assert _row(conn)["prefix_nonces"] == SPLIT
    ingest(db_url, write_lines(tmp_path / "late.ndjson", late))
    grown = recoveries["n"] - first
    row = _row(conn)
    assert (row["level"], row["nonces_checked"], row["failure"], row["prefix_nonces"]) == ("settled", 34, None, 34)

    # the same evidence verified from nothing: the two cycles together recovered exactly what it recovers
    _forget(conn)
    before = recoveries["n"]
    full = _verify_again(conn)
    assert full.level == "settled"  # (a signature met twice in one log is recovered once: full.reused)
    assert first + grown == recoveries["n"] - before
    # and verified again with the memo: only the settlement's host signatures (kept out of the memo) are recovered
    before = recoveries["n"]
    again = _verify_again(conn)
    assert again.level == "settled" and (again.reused, again.recovered) == (full.recovered + full.reused, 0)
    assert recoveries["n"] - before == 4


@pytest.mark.parametrize("nonce, check", [(10, "signed"), (8, "replayed")])
def test_a_byte_changed_in_the_verified_prefix_is_found_at_its_nonce(db_url, conn, tmp_path, recoveries, nonce,
                                                                      check):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", records()))
    assert _row(conn)["prefix_nonces"] == 34
    if check == "signed":  # one bit of the stored content: the user signature no longer recovers to the creator
        content = bytearray(base64.b64decode(conn.execute(
            "SELECT content FROM rec.signed_diff WHERE escrow_id = %s AND nonce = %s", (EID, nonce)).fetchone()[0]))
        content[7] ^= 0x01
        new, user_sig = base64.b64encode(bytes(content)).decode(), None
    else:  # a diff the user did sign, over a state the replay does not reach
        forked = fork(nonce)
        new, user_sig = forked["content"], forked["user_sig"]
    conn.execute("UPDATE rec.signed_diff SET content = %s, user_sig = coalesce(%s, user_sig) "
                 "WHERE escrow_id = %s AND nonce = %s", (new, user_sig, EID, nonce))
    conn.commit()
    before = recoveries["n"]
    result = _verify_again(conn)
    assert result.recovered == recoveries["n"] - before > 0
    row = _row(conn)
    assert (row["failed_check"], row["failed_nonce"], row["nonces_checked"]) == (check, nonce, nonce - 1)
    assert row["prefix_nonces"] == nonce - 1  # the memo now covers only what passed
    # nothing was taken from the first verification's memo: a verification with no memo recovers as much
    _forget(conn)
    fresh = _verify_again(conn)
    assert (fresh.recovered, fresh.reused) == (result.recovered, result.reused)
    assert _row(conn) == row


def test_the_chain_covers_every_byte_and_a_broken_memo_reuses_nothing():
    rows = [(n, f"content{n}", f"sig{n}", "host", f"root{n}", f"hash{n}") for n in range(1, 6)]
    seed = ("verifier", EID, "gonka1creator", "v4.1")
    links = vm.chain_links(seed, rows)
    assert len(set(links)) == 5
    for i, changed in enumerate([(3, "content3x", "sig3", "host", "root3", "hash3"),
                                 (3, "content3", "sig3x", "host", "root3", "hash3"),
                                 (3, "content3", "sig3", "host", None, "hash3"),
                                 (3, "content3", "sig3", "host", "root3", "hash3x"),
                                 (4, "content3", "sig3", "host", "root3", "hash3")]):
        other = vm.chain_links(seed, rows[:2] + [changed] + rows[3:])
        assert other[:2] == links[:2] and other[2] != links[2] and other[4] != links[4], i
    assert vm.chain_links(seed, [(*rows[0][:3], "another host", *rows[0][4:])]) == links[:1]  # where it came from
    assert vm.chain_links(("verifier 2", *seed[1:]), rows)[0] != links[0]

    known = {bytes([i]) * 16: f"gonka1signer{i % 2}" for i in range(3)}
    signers, entries = vm.pack(known)
    memo = vm.unpack(5, links[4], signers, entries)
    assert memo.known == known and vm.reusable(memo, links).known == known
    assert vm.reusable(memo, links[:4]).known == {}  # fewer diffs stored than the memo covers
    assert vm.reusable(vm.Memo(5, links[3], known), links).known == {}  # the chain does not match
    assert vm.unpack(5, links[4], signers, entries[:-1]) is None  # a torn entry
    assert vm.unpack(5, links[4], signers[:1], entries) is None  # an index past the signers
    assert vm.unpack(0, links[4], signers, entries) is None
