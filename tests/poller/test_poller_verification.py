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
