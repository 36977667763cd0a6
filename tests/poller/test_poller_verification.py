"""Every devnet escrow reaches `settled` through the whole pipeline: the poller captures each diff as served, the
settlement transaction and the epoch's warm keys; the replay's verification stage checks them the way the protocol
signs them; a lying member's log is never the one verified."""
from __future__ import annotations

import psycopg
import pytest

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy

FAST = dict(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3)


@pytest.mark.parametrize("version", ["v5", "v4.1"])
def test_every_settled_devnet_escrow_is_verified_to_settled(db_url, version):
    scn = Scenario(ScenarioConfig(seed=11, epochs=3, escrows_per_epoch=2, inferences_per_escrow=20,
                                  protocol_version=version))
    liar = next(iter(scn.escrows.values())).slots[0]
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar)) as net:
        # an archive node: the ended epochs' grants are read as of their end heights (a node that pruned them gives
        # today's grants only, which leave warm-key signatures not checked)
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), private_hosts=True)
    with psycopg.connect(db_url) as c:
        rows = c.execute("""SELECT v.escrow_id, v.level, v.failed_check, v.failure, v.nonces_checked, v.source_host,
                                   (SELECT count(*) FROM rec.signed_diff d WHERE d.escrow_id = v.escrow_id)
                            FROM api.escrow_verification v JOIN rec.escrow e USING (escrow_id)
                            WHERE e.settled ORDER BY 1""").fetchall()
        grants = c.execute("SELECT count(*) FROM rec.warm_key WHERE grantee <> '' AND read_exact").fetchone()[0]
        alerts = c.execute("SELECT count(*) FROM api.escrow_verification WHERE failed_check IS NOT NULL").fetchone()
    assert rows and grants > 0
    for escrow_id, level, failed, failure, checked, source, diffs in rows:
        assert (level, failed, failure) == ("settled", None, None), (escrow_id, failure)
        assert checked == diffs > 0 and liar not in (source or "")
    assert alerts == (0,)  # nothing failed: the running epoch's escrows wait for their settlement, they do not fail


def test_grants_read_at_an_epochs_end_are_kept_when_a_later_capture_reads_live_ones(db_url):
    """The poller captures each ended epoch every cycle until it is final; once the node has pruned the epoch's end
    height only today's grants can be read, and they do not replace those read as of the epoch's end."""
    scn = Scenario(ScenarioConfig(seed=11, epochs=3, escrows_per_epoch=1, inferences_per_escrow=5))
    with DevnetServer(scn) as net:  # the devnet keeps one epoch's worth of state
        for step in range(4):
            poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), private_hosts=True)
            if step < 3:
                net.advance_epoch()
    with psycopg.connect(db_url) as c:
        by_epoch = dict(c.execute("SELECT epoch_index, array_agg(DISTINCT read_exact) FROM rec.warm_key "
                                  "GROUP BY 1").fetchall())
        levels = {r[0] for r in c.execute("SELECT level FROM api.escrow_verification v JOIN rec.escrow e "
                                          "USING (escrow_id) WHERE e.settled")}
    assert len(by_epoch) == 3 and all(v == [True] for v in by_epoch.values()), by_epoch
    assert levels == {"settled"}


def test_the_pollers_records_agree_with_its_signed_log_and_a_changed_one_is_caught(db_url, tmp_path):
    """The poller writes each escrow's tx records and signed diffs from the same served diffs, so the comparison of
    records with the log (indexer.verify.txrecords) passes on them; one record changed afterwards is caught."""
    from tests.support.helpers import ingest, write_lines

    scn = Scenario(ScenarioConfig(seed=11, epochs=3, escrows_per_epoch=1, inferences_per_escrow=8,
                                  protocol_version="v5"))
    with DevnetServer(scn) as net:
        net.app.options.state_retain_blocks = 10**9
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), private_hosts=True)
    query = ("SELECT v.escrow_id, v.level, v.failed_check, v.failed_nonce FROM api.escrow_verification v "
             "JOIN rec.escrow e USING (escrow_id) WHERE e.settled ORDER BY 1 LIMIT 1")
    with psycopg.connect(db_url) as c:
        escrow_id, level, failed, _ = c.execute(query).fetchone()
        assert (level, failed) == ("settled", None)
        inference, nonce, index, slot, tokens = c.execute(
            "SELECT inference_id, diff_nonce, tx_index, executor_slot, output_tokens FROM rec.finish_tx "
            "WHERE escrow_id = %s ORDER BY diff_nonce LIMIT 1", (escrow_id,)).fetchone()
        finish = dict(zip(("input_tokens", "response_hash"), c.execute(
            "SELECT input_tokens, response_hash FROM rec.finish_tx WHERE escrow_id = %s AND inference_id = %s",
            (escrow_id, inference)).fetchone()))
    changed = {"kind": "finish", "escrow_id": escrow_id, "inference_id": inference, "diff_nonce": nonce,
               "tx_index": index, "executor_slot": slot, "output_tokens": tokens + 1, **finish}
    ingest(db_url, write_lines(tmp_path / "changed.ndjson", [changed]))
    with psycopg.connect(db_url) as c:
        assert c.execute(query).fetchone() == (escrow_id, "none", "records", nonce)
