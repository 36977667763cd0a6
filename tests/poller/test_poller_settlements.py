"""Settlement capture by the poller: each settled escrow's transaction read from the node (devnet, PostgreSQL), a
transaction no node serves yet left pending and read on a later cycle, and one never read recorded as lost when
the chain prunes the escrow."""
from __future__ import annotations

import base64
import hashlib

import psycopg
import pytest

from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from indexer.verify import settlement as st

FAST = dict(backoff_base=0.0005, backoff_max=0.002, timeout=5.0, attempts=2)


@pytest.fixture(scope="module")
def scn() -> Scenario:  # v4.1: the devnet settles with real transactions where the session rules are ported
    return Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=2, inferences_per_escrow=12,
                                   protocol_version="v4.1"))


def _poll(url, net):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), decode_workers=0,
                     private_hosts=True)


def _settlements(url) -> dict[str, tuple]:
    with psycopg.connect(url) as c:
        rows = c.execute("SELECT escrow_id, tx_hash, height, msg, tx_raw, state_root, nonce, signatures, extra "
                         "FROM rec.settlement").fetchall()
    return {r[0]: r[1:] for r in rows}


def _final(url, escrow_id) -> bool:
    with psycopg.connect(url) as c:
        return c.execute("SELECT count(*) FROM net.cursor WHERE source = %s AND cursor IS NOT NULL",
                         (f"escrow-final:{escrow_id}",)).fetchone()[0] == 1


def _errors(url, escrow_id) -> list[str]:
    with psycopg.connect(url) as c:
        return [e for (e,) in c.execute("SELECT error FROM api.source_errors WHERE source = %s ORDER BY id",
                                        (f"escrow:{escrow_id}",))]


def test_each_settled_escrow_has_its_transaction_as_broadcast(db_url, scn):
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        _poll(db_url, net)
        settled = [e for e in scn.epochs[0].escrows]
        want = {e.escrow_id: scn.settlement(e, net.devnet.settle_height(e)) for e in settled}
    got = _settlements(db_url)
    assert set(got) == set(want)
    for eid, tx in want.items():
        tx_hash, height, msg, tx_raw, root, nonce, signatures, extra = got[eid]
        raw = base64.b64decode(tx_raw)
        assert raw == tx.raw and hashlib.sha256(raw).hexdigest() == tx_hash == tx.hash.lower()
        assert base64.b64decode(msg) == tx.msg_bytes and st.settle_msgs_in_tx(raw) == [tx.msg_bytes]
        assert (height, root, nonce) == (tx.height, tx.msg.state_root.hex(), tx.msg.nonce)
        assert signatures == {str(s.slot_id): s.signature.hex() for s in tx.msg.signatures}
        assert extra["msg_source"] == "tx" and _final(db_url, eid)


def test_a_transaction_no_node_serves_stays_pending_and_is_read_later(db_url, scn):
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.missing_settlement_txs = (victim.escrow_id,)
        _poll(db_url, net)
        assert victim.escrow_id not in _settlements(db_url) and not _final(db_url, victim.escrow_id)
        assert _final(db_url, scn.epochs[0].escrows[1].escrow_id)
        errors = _errors(db_url, victim.escrow_id)
        assert any("not read: RPC /tx: HTTP 500" in e and "not found" in e and
                   "REST /cosmos/tx/v1beta1/txs: HTTP 404" in e for e in errors), errors
        net.app.options.missing_settlement_txs = ()
        _poll(db_url, net)  # the next cycle reads it
        assert victim.escrow_id in _settlements(db_url) and _final(db_url, victim.escrow_id)


def test_a_settlement_read_over_rest_only_is_read_again_over_rpc(db_url, scn):
    """RPC /tx fails for one cycle: the REST reading is stored (re-encoded, no tx_raw) but the escrow is not final,
    and the next cycle's /tx answer replaces it with the transaction as broadcast."""
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.failing_rpc_txs = (victim.escrow_id,)
        _poll(db_url, net)
        _, _, _, tx_raw, _, _, _, extra = _settlements(db_url)[victim.escrow_id]
        assert tx_raw is None and extra["msg_source"].startswith("msg re-encoded from the REST JSON")
        assert "tx_pruned" not in extra and not _final(db_url, victim.escrow_id)
        assert _final(db_url, scn.epochs[0].escrows[1].escrow_id)
        net.app.options.failing_rpc_txs = ()
        _poll(db_url, net)
        tx = scn.settlement(victim, net.devnet.settle_height(victim))
    _, _, msg, tx_raw, _, _, _, extra = _settlements(db_url)[victim.escrow_id]
    assert base64.b64decode(tx_raw) == tx.raw and base64.b64decode(msg) == tx.msg_bytes
    assert extra == {"msg_source": "tx"} and _final(db_url, victim.escrow_id)


def test_a_settlement_no_rpc_node_keeps_is_kept_from_rest_and_says_so(db_url, scn):
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.pruned_rpc_txs = (victim.escrow_id,)
        _poll(db_url, net)
    _, _, _, tx_raw, _, _, _, extra = _settlements(db_url)[victim.escrow_id]
    assert tx_raw is None and extra["msg_source"].startswith("msg re-encoded from the REST JSON")
    assert extra["tx_pruned"].startswith("every RPC node answered /tx not found") and _final(db_url, victim.escrow_id)


def test_a_transaction_never_read_is_recorded_lost_when_the_chain_prunes_the_escrow(db_url, scn):
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.missing_settlement_txs = (victim.escrow_id,)
        _poll(db_url, net)
        net.devnet.prune_escrow(victim.escrow_id)
        _poll(db_url, net)
    assert victim.escrow_id not in _settlements(db_url)
    with psycopg.connect(db_url) as c:
        last = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                         (f"escrow:{victim.escrow_id}",)).fetchone()[0]
    assert "pruned before its log was final" in last and "its settlement transaction was never read, and is lost" \
        in last


def test_a_read_transaction_without_a_settlement_message_is_kept_with_the_reason(db_url):
    """The devnet's escrows of a version whose session rules are not ported (v4) settle with a stand-in body: read,
    its bytes checked against the hash, and kept final with the reason, not asked again every cycle."""
    scn5 = Scenario(ScenarioConfig(seed=11, epochs=2, escrows_per_epoch=1, inferences_per_escrow=8,
                                   protocol_version="v4"))
    with DevnetServer(scn5) as net:
        net.advance_to_last_epoch()
        _poll(db_url, net)
    (eid, (tx_hash, _, msg, tx_raw, root, _, _, extra)), = _settlements(db_url).items()
    assert msg is None and root is None and hashlib.sha256(base64.b64decode(tx_raw)).hexdigest() == tx_hash
    assert extra["msg_unreadable"].startswith("field ") and _final(db_url, eid)


def _revisions(url, escrow_id) -> tuple:
    """(the settlement's revision, its amendments, its escrow's replay revision)"""
    with psycopg.connect(url) as c:
        rev = c.execute("SELECT revision FROM rec.settlement WHERE escrow_id = %s", (escrow_id,)).fetchone()[0]
        amended = c.execute("SELECT count(*) FROM rec.amendment WHERE kind = 'settlement' AND record_key ->> 0 = %s",
                            (escrow_id,)).fetchone()[0]
    return rev, amended


def test_a_rest_reading_is_not_amended_by_each_new_rpc_error_and_waits_for_a_lagging_index(db_url, scn):
    """/tx fails (5xx) on one cycle, and answers not found on the next though the node keeps the block (its tx
    index lags): the REST record is the same both times (no amendment, no new revision: its escrow is not replayed
    again), the RPC's reasons are in the failure log, and the escrow stays open until /tx serves the transaction."""
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.failing_rpc_txs = (victim.escrow_id,)
        _poll(db_url, net)
        first = _settlements(db_url)[victim.escrow_id]
        net.app.options.failing_rpc_txs, net.app.options.lagging_rpc_txs = (), (victim.escrow_id,)
        _poll(db_url, net)
        _poll(db_url, net)
        assert _settlements(db_url)[victim.escrow_id] == first and _revisions(db_url, victim.escrow_id) == (1, 0)
        assert first[3] is None and "tx_pruned" not in first[7] and not _final(db_url, victim.escrow_id)
        with psycopg.connect(db_url) as c:
            told = [e for (e,) in c.execute("SELECT error FROM api.source_errors WHERE error LIKE %s ORDER BY id",
                                            (f"%escrow {victim.escrow_id} read over REST only%",))]
        assert any("simulated failure of a tx read" in e for e in told) and any("not found" in e for e in told)
        net.app.options.lagging_rpc_txs = ()
        _poll(db_url, net)
        tx = scn.settlement(victim, net.devnet.settle_height(victim))
    assert base64.b64decode(_settlements(db_url)[victim.escrow_id][3]) == tx.raw and _final(db_url, victim.escrow_id)


def test_an_escrow_pruned_with_its_log_whole_and_a_rest_settlement_is_not_reported_lost(db_url, scn):
    victim = scn.epochs[0].escrows[0]
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        net.app.options.lagging_rpc_txs = (victim.escrow_id,)
        _poll(db_url, net)
        assert victim.escrow_id in _settlements(db_url) and not _final(db_url, victim.escrow_id)
        net.devnet.prune_escrow(victim.escrow_id)
        _poll(db_url, net)
    with psycopg.connect(db_url) as c:
        last = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s",
                         (f"escrow:{victim.escrow_id}",)).fetchone()
        pruned = c.execute("SELECT count(*) FROM api.source_errors WHERE source = %s AND error LIKE 'pruned%%'",
                           (f"escrow:{victim.escrow_id}",)).fetchone()[0]
    assert (last is None or last[0] is None) and pruned == 0
