"""The poller's epoch snapshots through the devnet: the epoch's own parameters (as of the epoch, or live and marked
inexact where the node pruned the height), participants, the settlement window from the real epoch_info shape,
failed model reads made visible, and epochs without escrows reaching final."""
from __future__ import annotations

import logging
import re
from decimal import Decimal
from urllib.parse import unquote

import psycopg
import pytest

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.devnet.epochviews import end_height
from indexer.devnet.models import MINIMAX
from indexer.poller import poll_once
from indexer.poller.cycle import PRUNING_WINDOW
from indexer.sources.gonka import RetryPolicy

FAST = dict(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3)


def _scn(epochs=3, escrows=2) -> Scenario:
    return Scenario(ScenarioConfig(seed=7, epochs=epochs, escrows_per_epoch=escrows, inferences_per_escrow=16))


def _poll(url, net):
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), process=True, private_hosts=True)


def test_epoch_params_exact_where_served_live_where_pruned(db_url):
    scn = _scn()
    with DevnetServer(scn) as net:
        now = net.advance_to_last_epoch().devnet.current_epoch  # 410: 409 ended within the node's retained state, 408's end height is pruned
        _poll(db_url, net)
        latest = net.devnet.latest_height()
        ends = {e: end_height(net.devnet, e) for e in (now - 2, now - 1)}
    with psycopg.connect(db_url) as c:
        rows = {r[0]: r[1:] for r in c.execute(
            "SELECT epoch_index, start_height, end_height, binom_test_p0, false_positive_rate, "
            "bad_participant_invalidation_rate, invalidation_h_threshold, params_exact, params_height, total_weight, "
            "validation_params ->> 'logprobs_mode' FROM api.epochs ORDER BY 1")}
    start = {e.epoch_index: e.start_height for e in scn.epochs}
    # the epoch's own snapshot: 4 and 0.1 for the epochs that started before the governance change, 40 and 0.18
    # after it, whatever the live params say
    assert rows[now - 2][:7] == (start[now - 2], ends[now - 2], Decimal("0.1"), Decimal("0.05"), Decimal("0.1"),
                                 Decimal("4"), False)
    assert rows[now - 2][7] == latest  # live values stood in: read at the tip
    assert rows[now - 1][:8] == (start[now - 1], ends[now - 1], Decimal("0.1"), Decimal("0.05"), Decimal("0.1"),
                                 Decimal("4"), True, ends[now - 1])
    assert rows[now][5] == Decimal("40") and rows[now][1] is None  # running: no end height yet
    assert rows[now][6] is False and rows[now][9] == "processed_logprobs"
    assert all(r[8] == sum(100000 + 37000 * h.index for h in scn.hosts) for r in rows.values())


def test_participant_epochs_for_ended_epochs(db_url):
    scn = _scn()
    with DevnetServer(scn) as net:
        now = net.advance_to_last_epoch().devnet.current_epoch
        _poll(db_url, net)
        stats = net.scenario.host_epoch_stats(now - 1)
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT epoch_index, participant, weight, confirmation_weight, missed_requests, "
                         "invalidated_inferences, excluded_reason, excluded_height FROM rec.participant_epoch "
                         "ORDER BY 1, 2").fetchall()
    assert {r[0] for r in rows} == {now - 2, now - 1}  # not the running epoch
    by = {(r[0], r[1]): r for r in rows if r[0] == now - 1}
    assert len(by) == len(scn.hosts)
    for h in scn.hosts:
        r = by[(now - 1, h.address)]
        assert r[2:4] == (100000 + 37000 * h.index, 90000 + 37000 * h.index)
        assert r[4:6] == (stats.get(h.address, {}).get("missed", 0), stats.get(h.address, {}).get("invalid", 0))
    worst = max(stats.items(), key=lambda kv: (kv[1]["invalid"], kv[0]))
    if worst[1]["invalid"]:
        assert by[(now - 1, worst[0])][6] == "statistical_invalidations"


def test_window_start_comes_from_the_real_epoch_info_shape(db_url):
    scn = _scn()
    with DevnetServer(scn) as net:
        now = net.advance_to_last_epoch().devnet.current_epoch
        _poll(db_url, net)
        start = scn.epoch_start(now)[0]
    with psycopg.connect(db_url) as c:
        urls = [unquote(u) for (u,) in c.execute("SELECT url FROM net.raw_response WHERE url LIKE '%%tx_search%%'")]
    heights = {int(m.group(1)) for u in urls if (m := re.search(r"tx\.height>=(\d+)", u))}
    assert heights == {start - (PRUNING_WINDOW + 1) * scn.config.blocks_per_epoch}


def test_failed_model_read_is_visible_then_resolved(db_url, caplog):
    scn = _scn(epochs=2)
    with DevnetServer(scn) as net:
        now = net.advance_to_last_epoch().devnet.current_epoch
        net.app.options.failing_models = (MINIMAX,)
        with caplog.at_level(logging.WARNING, logger="indexer.poller.finality"):
            _poll(db_url, net)
        assert any(MINIMAX in r.getMessage() and "chain read failed" in r.getMessage() for r in caplog.records)
        with psycopg.connect(db_url) as c:
            limits = c.execute("SELECT epoch_index, governance_limit, limit_unknown_reason FROM api.model_limits "
                               "WHERE model_id = %s ORDER BY 1", (MINIMAX,)).fetchall()
            status = c.execute("SELECT source, last_error, epoch_index, model_id, host FROM api.ingest_status "
                               "WHERE model_id = %s ORDER BY epoch_index", (MINIMAX,)).fetchall()
            states = dict(c.execute("SELECT epoch_index, state FROM api.epochs"))
        assert [e for e, *_ in limits] == [now - 1, now]  # a row per epoch, never an absent one
        for _, limit, reason in limits:
            assert limit is None and reason.startswith("model snapshot read failed: HTTP 500")
        assert [(s[0], s[2], s[3]) for s in status] == [(f"snapshot:{e}:model:{MINIMAX}", e, MINIMAX)
                                                        for e in (now - 1, now)]
        assert all(s[1] and s[4] and s[4].startswith("127.0.0.1:") for s in status)
        net.app.options.failing_models = ()
        _poll(db_url, net)
        _poll(db_url, net)
    assert states[now - 1] == "settling"  # not final while a snapshot read is failing
    with psycopg.connect(db_url) as c:
        limits = c.execute("SELECT governance_limit, limit_unknown_reason FROM api.model_limits WHERE model_id = %s",
                           (MINIMAX,)).fetchall()
        errors = c.execute("SELECT count(*) FROM api.ingest_status WHERE source LIKE 'snapshot:%%' "
                           "AND last_error IS NOT NULL").fetchone()[0]
        state = c.execute("SELECT state FROM api.epochs WHERE epoch_index = %s", (now - 1,)).fetchone()[0]
    assert limits and all(lim == 180000 and reason is None for lim, reason in limits)
    assert errors == 0 and state == "final"


def test_epoch_without_escrows_becomes_final(db_url):
    scn = _scn(epochs=2, escrows=0)
    with DevnetServer(scn) as net:
        now = net.advance_to_last_epoch().devnet.current_epoch
        _poll(db_url, net)
        first = _states(db_url)
        _poll(db_url, net)
        second = _states(db_url)
    assert first[now - 1] == "settling" and second[now - 1] == "final"
    assert second[now] == "open"


def _states(url) -> dict[int, str]:
    with psycopg.connect(url) as c:
        return dict(c.execute("SELECT epoch_index, state FROM api.epochs WHERE state IS NOT NULL"))


def test_snapshot_reads_run_beside_the_escrows(db_url):
    """An epoch's snapshot (dozens of chain reads an epoch) is read on a thread of its own while the escrows are
    fetched and committed, and loaded after them: slow group-data reads hold back no escrow. Every escrow source
    of the cycle is registered before the first snapshot source (before, the snapshots came first)."""
    scn = _scn()
    slow = FaultConfig(p_delay=1.0, delay_seconds=0.05, paths=("/chain-api/productscience/inference/inference/"
                                                                "epoch_group_data",))
    with DevnetServer(scn, faults=slow) as net:
        net.advance_to_last_epoch()
        summary = _poll(db_url, net)
        assert net.faults.injected["delay"] > 0
    assert summary.escrows == len(scn.escrows) and len(summary.epochs) == 3
    with psycopg.connect(db_url) as c:
        ids = c.execute("SELECT uri LIKE 'chain:epoch_group_data/%%', min(source_id), max(source_id) FROM rec.source "
                        "WHERE uri LIKE 'chain:epoch_group_data/%%' OR uri LIKE 'devshard:escrow/%%' GROUP BY 1"
                        ).fetchall()
        epochs = c.execute("SELECT count(*) FROM api.epochs WHERE params_height IS NOT NULL").fetchone()[0]
    spans = {is_snapshot: (lo, hi) for is_snapshot, lo, hi in ids}
    assert spans[False][1] < spans[True][0]
    assert epochs == 3  # and every snapshot loaded


def test_a_snapshot_read_that_breaks_fails_the_cycle_after_its_escrows(db_url, monkeypatch):
    """An unexpected error in a snapshot's reads (not a failed chain read, which is recorded and retried) ends the
    cycle with that error, once the escrows fetched beside it are committed; the next cycle starts from there."""
    from indexer.poller.finality import Epochs

    scn = _scn()
    real = Epochs.capture

    def capture(self, epoch):
        if epoch == scn.epochs[-1].epoch_index:
            raise RuntimeError("snapshot reader broke")
        return real(self, epoch)

    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        monkeypatch.setattr(Epochs, "capture", capture)
        with pytest.raises(RuntimeError, match="snapshot reader broke"):
            _poll(db_url, net)
        with psycopg.connect(db_url) as c:
            cursors = c.execute("SELECT count(*) FROM net.cursor WHERE source LIKE 'escrow:%%' "
                                "AND cursor IS NOT NULL").fetchone()[0]
            chain = c.execute("SELECT last_error FROM net.cursor WHERE source = 'chain'").fetchone()[0]
        assert cursors == len(scn.escrows)  # the escrows fetched beside the broken read are in
        assert chain == "RuntimeError: snapshot reader broke"  # on api.ingest_status's chain row
        monkeypatch.setattr(Epochs, "capture", real)
        assert _poll(db_url, net).escrows_failed == 0
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM api.epochs WHERE params_height IS NOT NULL").fetchone()[0] == 3
