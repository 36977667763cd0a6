"""Epoch finality (open → settling → final, stored in net.epoch_state and shown in api.ingest_status) and the
progress watchdog (a source ahead of a cursor that does not move)."""
from __future__ import annotations

import logging

import psycopg

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.poller import poll_once
from indexer.poller.commit import STALL_CYCLES
from indexer.sources.gonka import RetryPolicy
from tests.support.hostile import hostile_devnet, json_answer, rewrite

FAST = dict(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=4)


def _scn(epochs=3) -> Scenario:
    return Scenario(ScenarioConfig(seed=7, epochs=epochs, escrows_per_epoch=2, inferences_per_escrow=16))


def _poll(url, net, **kw):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), process=False, **kw,
                     private_hosts=True)


def _states(url) -> dict[int, tuple]:
    with psycopg.connect(url) as c:
        rows = c.execute("SELECT epoch_index, state, reason, escrows, escrows_final FROM net.epoch_state").fetchall()
        status = dict(c.execute("SELECT source, cursor FROM api.ingest_status WHERE source LIKE 'epoch:%%'"))
    for e, state, *_ in rows:
        assert status[f"epoch:{e}"] == state  # the view shows the state as the epoch's cursor
    return {e: tuple(r) for e, *r in rows}


def test_epochs_go_open_settling_final(db_url):
    scn = _scn()
    first = scn.epochs[0].epoch_index
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        now = net.devnet.current_epoch
        s1 = _poll(db_url, net)
        # stats read once: not yet known to be stable
        assert s1.epoch_states == {now - 2: "settling", now - 1: "settling", now: "open"}
        s2 = _poll(db_url, net)
        assert s2.epoch_states == {now - 2: "final", now - 1: "final", now: "open"}
        st = _states(db_url)
        assert st[now - 1] == ("final", "complete", 2, 2) and st[now][0] == "open"
        with psycopg.connect(db_url) as c:
            lag = dict(c.execute("SELECT source, lag_seconds FROM api.ingest_status WHERE source LIKE 'epoch:%%'"))
        assert lag[f"epoch:{now - 1}"] is None and lag[f"epoch:{now}"] is not None
        # a final epoch is not polled again: no request for its escrows or stats
        s3 = _poll(db_url, net)
        assert s3.escrows_skipped_final == 0 and s3.epoch_states[now - 1] == "final"
        net.advance_epoch()
        s4 = _poll(db_url, net)
        assert s4.epoch_states[now] == "settling" and s4.epoch_states[now + 1] == "open"
    assert first == now - 2


def test_epoch_pruned_while_settling_is_final_with_gaps(db_url):
    scn = _scn(epochs=5)
    with DevnetServer(scn) as net:
        start = net.devnet.current_epoch
        _poll(db_url, net)  # epoch `start` is open, its escrows captured but not settled
        for _ in range(4):  # the poller is down while the epoch settles and is pruned
            net.advance_epoch()
        _poll(db_url, net)
    st = _states(db_url)
    assert st[start][:2] == ("final", "pruned") and st[start][3] < st[start][2]
    assert st[start + 1][:2] == ("final", "missed")  # came and went while the poller was down
    assert st[start + 2][0] == "settling" and st[start + 4][0] == "open"
    with psycopg.connect(db_url) as c:
        lost = c.execute("SELECT count(*) FROM net.failure WHERE error LIKE 'epoch %% pruned before escrow was final'"
                         ).fetchone()[0]
        missed = c.execute("SELECT source FROM net.failure WHERE error LIKE 'epoch pruned before the poller saw%%'"
                           ).fetchall()
        shown = c.execute("SELECT cursor, last_error FROM api.ingest_status WHERE source = %s",
                          (f"epoch:{start + 1}",)).fetchone()
    assert lost == 2 and missed == [(f"epoch:{start + 1}",)]
    assert shown[0] == "final" and shown[1].startswith("epoch pruned before the poller saw it")


def test_watchdog_records_a_stalled_escrow(db_url):
    scn = _scn(epochs=1)
    with DevnetServer(scn, faults=FaultConfig(serve_upto=5)) as net:
        # the first cycle moves the cursors to nonce 5; each later one finds the hosts ahead and no progress
        for i in range(STALL_CYCLES + 1):
            s = _poll(db_url, net)
            assert s.escrows_stalled == (len(scn.escrows) if i >= STALL_CYCLES else 0)
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT source, cursor, last_error, stalled_cycles, source_position FROM api.ingest_status "
                         "WHERE source LIKE 'escrow:%%'").fetchall()
        failures = c.execute("SELECT count(*) FROM net.failure WHERE error LIKE 'stalled:%%'").fetchone()[0]
    assert len(rows) == len(scn.escrows)
    for source, cursor, error, stalled, position in rows:
        eid = source.split(":")[1]
        assert cursor == "5" and position == scn.escrows[eid].last_nonce
        assert stalled == STALL_CYCLES and error.startswith("stalled:")
    assert failures == len(scn.escrows)


def test_watchdog_quiet_when_progressing(db_url):
    scn = _scn(epochs=1)
    with DevnetServer(scn) as net:
        for _ in range(2):
            _poll(db_url, net)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT max(stalled_cycles) FROM api.ingest_status").fetchone()[0] == 0



def _lagging_escrow(scn, net) -> tuple[int, str]:
    """(the current epoch, one of its escrows) whose settlement the node's /tx keeps not finding (read over the
    REST only)."""
    start = net.devnet.current_epoch
    victim = next(e for e in scn.escrows if scn.escrows[e].epoch_index == start)
    net.app.options.lagging_rpc_txs = (victim,)
    return start, victim

def test_an_epoch_pruned_with_an_escrow_captured_whole_and_settled_over_rest_counts_it_captured(db_url):
    # the escrow's log is whole and its settlement stored (read over the REST: /tx still asked, so not final):
    # when the chain prunes the epoch nothing of that escrow is lost, and the epoch must not say it is
    scn = _scn(epochs=5)
    with DevnetServer(scn) as net:
        start, victim = _lagging_escrow(scn, net)
        net.advance_epoch()
        _poll(db_url, net)
        _poll(db_url, net)
        with psycopg.connect(db_url) as c:
            assert c.execute("SELECT count(*) FROM rec.settlement WHERE escrow_id = %s", (victim,)).fetchone()[0]
            assert not c.execute("SELECT count(*) FROM net.cursor WHERE source = %s AND cursor IS NOT NULL",
                                 (f"escrow-final:{victim}",)).fetchone()[0]
        for _ in range(3):
            net.advance_epoch()
        _poll(db_url, net)
    st = _states(db_url)
    assert st[start][:2] == ("final", "pruned") and st[start][3] == st[start][2]
    with psycopg.connect(db_url) as c:
        lost = c.execute("SELECT count(*) FROM net.failure WHERE error = %s",
                         (f"epoch {start} pruned before escrow was final",)).fetchone()[0]
        said = c.execute("SELECT last_error FROM api.ingest_status WHERE source = %s", (f"epoch:{start}",)).fetchone()
    assert lost == 0 and (said is None or said[0] is None)


def test_an_escrow_whose_hosts_under_report_its_nonce_is_not_counted_captured_whole(db_url):
    """The hosts report the escrow's nonce 3 short of the one its settlement names, and serve its log that far: the
    cursor reaches the tip they report, but the log the chain settled is longer. Counted captured, the truncated
    escrow would hide a gap when the epoch is pruned; the settlement's own nonce decides (and is the source position
    the watchdog compares the cursor with)."""
    scn = _scn(epochs=5)
    short = {}

    def detail(body, req):
        short["nonce"] = body["nonce"] = body["nonce"] - 3
        return body

    def diffs(body, req):
        return [d for d in body if d["diff"]["nonce"] <= short.get("nonce", 0)]

    with hostile_devnet(scn) as (net, proxy):
        start, victim = _lagging_escrow(scn, net)
        proxy.on(rf"/devshard/[^/]+/stats/shards/{victim}$", rewrite(detail))
        proxy.on(rf"/devshard/[^/]+/sessions/{victim}/diffs$", rewrite(diffs))
        net.advance_epoch()
        _poll(db_url, net)
        _poll(db_url, net)
        with psycopg.connect(db_url) as c:
            settled = c.execute("SELECT nonce, tx_raw FROM rec.settlement WHERE escrow_id = %s", (victim,)).fetchone()
            progress = c.execute("SELECT source_position, cursor_position FROM net.progress WHERE source = %s",
                                 (f"escrow:{victim}",)).fetchone()
        # the source's position is the settlement's nonce (the chain's word), not the tip the hosts report
        assert settled[1] is None and progress == (settled[0], settled[0] - 3)
        for _ in range(3):
            net.advance_epoch()
        _poll(db_url, net)
    st = _states(db_url)
    assert st[start][:2] == ("final", "pruned") and st[start][3] == st[start][2] - 1
    with psycopg.connect(db_url) as c:
        lost = c.execute("SELECT count(*) FROM net.failure WHERE source = %s AND error = %s",
                         (f"escrow:{victim}", f"epoch {start} pruned before escrow was final")).fetchone()[0]
    assert lost == 1


def test_an_escrow_pruned_after_its_log_was_captured_whole_is_final_and_said_once(db_url, caplog):
    """The chain prunes an escrow (found:false) while its epoch is still in the window, after its log was captured
    whole and its settlement read over the REST: nothing more can be read of it, so it is final. Its epoch leaves
    ``settling`` with ``reason = 'complete'`` instead of waiting to be pruned, and the escrow is not fetched (nor
    logged) again on later cycles."""
    scn = _scn(epochs=5)
    with hostile_devnet(scn) as (net, proxy):
        start, victim = _lagging_escrow(scn, net)
        net.advance_epoch()
        _poll(db_url, net)
        _poll(db_url, net)
        assert _states(db_url)[start][0] == "settling"  # the settlement's /tx is still asked
        proxy.on(rf"/devshard_escrow/{victim}$", json_answer({"found": False}))
        with caplog.at_level(logging.INFO, logger="indexer.poller.commit"):
            for _ in range(3):
                s = _poll(db_url, net)
                assert s.escrows_pruned == 0
    st = _states(db_url)
    assert st[start] == ("final", "complete", 2, 2)
    said = [r for r in caplog.records if f"escrow {victim} pruned on chain" in r.getMessage()]
    assert len(said) == 1
    with psycopg.connect(db_url) as c:
        lost = c.execute("SELECT count(*) FROM net.failure WHERE source = %s AND error LIKE %s",
                         (f"escrow:{victim}", "%pruned%")).fetchone()[0]
    assert lost == 0
