"""The poller against the in-process devnet: the database ends up holding exactly the scenario."""
from __future__ import annotations

from collections import Counter

import psycopg
import pytest

from indexer.devnet import DevnetServer, FaultConfig, Scenario, ScenarioConfig
from indexer.records import KINDS
from indexer.replay.machine import TX_KINDS  # the tx kinds, in protocol order
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from indexer.wire.diffs import diff_to_host_json

FAST = dict(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=8)


def _small(epochs=3) -> Scenario:
    return Scenario(ScenarioConfig(seed=7, epochs=epochs, escrows_per_epoch=2, inferences_per_escrow=24))


def _tx_counts(url) -> Counter:
    with psycopg.connect(url) as c:
        return Counter({k: c.execute(f"SELECT count(*) FROM rec.{KINDS[k].table}").fetchone()[0] for k in TX_KINDS})


def _expected_counts(scn: Scenario, escrow_ids) -> Counter:
    out = Counter({k: 0 for k in TX_KINDS})
    for eid in escrow_ids:
        out.update(r["kind"] for r in scn.tx_records(eid))
    return out


def _statuses(url) -> dict:
    with psycopg.connect(url) as c:
        rows = c.execute("SELECT escrow_id, inference_id, status FROM api.inferences").fetchall()
    return {(e, int(i)): s for e, i, s in rows}


def _expected_statuses(scn: Scenario, escrow_ids) -> dict:
    return {(eid, i): s for eid in escrow_ids for i, s in scn.escrows[eid].statuses().items()}


def _snapshot(url) -> dict:
    with psycopg.connect(url) as c:
        out = {}
        for kind in KINDS.values():
            cols = ", ".join(kind.columns)
            out[kind.name] = c.execute(f"SELECT {cols} FROM rec.{kind.table} ORDER BY {', '.join(kind.key)}").fetchall()
        return out


def _policy():
    return RetryPolicy(**FAST)


def _visible(scn: Scenario, current: int) -> list[str]:
    return [e.escrow_id for e in scn.escrows.values() if e.epoch_index <= current]


def test_poll_once_matches_scenario(db_url):
    scn = _small()
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        summary = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    ids = _visible(scn, scn.epochs[-1].epoch_index)
    assert summary.escrows == len(ids)
    assert _tx_counts(db_url) == _expected_counts(scn, ids)
    assert _statuses(db_url) == _expected_statuses(scn, ids)
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM rec.escrow").fetchone()[0] == len(ids)
        assert c.execute("SELECT count(*) FROM rec.model_snapshot").fetchone()[0] > 0
        assert c.execute("SELECT count(*) FROM net.raw_response").fetchone()[0] > 0
        status = dict(c.execute("SELECT source, cursor FROM api.ingest_status").fetchall())
        payloads = c.execute("SELECT escrow_id, inference_id, response_payload FROM rec.finish_tx "
                             "WHERE response_payload IS NOT NULL").fetchall()
        truth = {(r["escrow_id"], r["inference_id"]): r["response_payload"] for eid in ids for r in scn.tx_records(eid)
                 if r["kind"] == "finish" and r.get("response_payload") is not None
                 and r["input_tokens"] == 0 and r["output_tokens"] == 0}  # the poller fetches 0/0 payloads only
        lags = dict(c.execute("SELECT source, lag_seconds FROM api.ingest_status").fetchall())
        # provenance: every record names its own line of its batch's source (the workers number a run from 1, the
        # committing thread shifts each part to where it lands: indexer.load.assemble), and within a source an
        # escrow's txs come in log order
        provenance = c.execute(" UNION ALL ".join(
            f"SELECT source_id, source_line, "
            f"{'escrow_id, diff_nonce, tx_index' if k in TX_KINDS else 'NULL, NULL::bigint, NULL::int'}"
            f" FROM rec.{KINDS[k].table}" for k in KINDS)).fetchall()
        stats = {}
        for eid, slot, *counters in c.execute("SELECT escrow_id, slot_id, missed, invalid, cost, required_validations,"
                                              " completed_validations FROM rec.host_stats ORDER BY 1, 2"):
            stats.setdefault(eid, []).append(dict(zip(("missed", "invalid", "cost", "required_validations",
                                                       "completed_validations"), counters)))
    # the hosts' own counters, as the devnet's reference machine counted them, reach rec.host_stats intact
    assert stats and all(stats[eid] == scn.escrows[eid].host_stats() for eid in stats)
    assert len({(sid, line) for sid, line, *_ in provenance}) == len(provenance)
    assert all(line >= 1 for _, line, *_ in provenance)
    logs: dict = {}
    for sid, line, escrow, nonce, index in sorted(provenance, key=lambda p: p[:2]):
        if nonce is not None:
            logs.setdefault((sid, escrow), []).append((nonce, index))
    assert logs and all(txs == sorted(txs) for txs in logs.values())
    assert truth and {(e, int(i)): p for e, i, p in payloads} == truth
    for eid in ids:
        assert status[f"escrow:{eid}"] == str(scn.escrows[eid].last_nonce)
        settled = scn.escrows[eid].epoch_index < scn.epochs[-1].epoch_index
        assert (f"escrow-final:{eid}" in status) == settled  # settled + complete: never fetched again
        assert (lags[f"escrow:{eid}"] is None) == settled
    assert lags["chain"] is not None and lags["chain"] < 60


def test_second_poll_is_a_noop(db_url):
    scn = _small()
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
        before = _snapshot(db_url)
        again = poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    assert again.loaded == 0 and again.amended == 0 and again.diffs == 0
    assert _snapshot(db_url) == before


def test_faults_give_identical_tables(db_url, second_db_url):
    scn = _small()
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    clean = _snapshot(db_url)
    # a second, faulty network with the same scenario into a fresh database
    faults = FaultConfig(seed=3, p_5xx=0.2, p_429=0.1, p_truncate=0.1, retry_after=0)
    with DevnetServer(_small(), faults=faults) as net:
        net.advance_to_last_epoch()
        # Each attempt fails with p = 0.1 + 0.9 * 0.2 + 0.72 * 0.1 = 0.352 (429, 5xx, a cut body). With the usual 8
        # attempts a request gives up with p = 0.352^8 = 2.4e-4, so one of a poll's few hundred requests did now and
        # then (its escrow waits for the next cycle, and the tables differ); which request meets a run of faults
        # depends on how the fetch threads interleave. 16 attempts: 5.7e-8 a request.
        poll_once(second_db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**{**FAST, "attempts": 16}),
                  private_hosts=True)
        injected = dict(net.faults.injected)
    assert injected["5xx"] and injected["429"] and injected["truncate"]
    assert _snapshot(second_db_url) == clean
    with psycopg.connect(second_db_url) as c:
        assert c.execute("SELECT count(*) FROM net.failure WHERE transient").fetchone()[0] > 0


def test_epochs_advance_with_pruning(db_url):
    scn = _small(epochs=5)
    first = scn.epochs[0].epoch_index
    with DevnetServer(scn) as net:
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
        for _ in range(len(scn.epochs) - 1):
            net.advance_epoch()
            poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
        assert net.devnet.pruned_epoch(first)
    ids = list(scn.escrows)
    assert _tx_counts(db_url) == _expected_counts(scn, ids)
    assert _statuses(db_url) == _expected_statuses(scn, ids)
    with psycopg.connect(db_url) as c:
        settled = c.execute("SELECT count(*) FROM rec.escrow WHERE settled").fetchone()[0]
    assert settled >= len([e for e in scn.escrows.values() if e.epoch_index < scn.epochs[-1].epoch_index - 2])


@pytest.mark.parametrize("signed_root", [True, False], ids=["post_state_root", "state_hash_only"])
def test_lying_host_is_skipped(db_url, monkeypatch, signed_root):
    """A lying member is caught by the signed check whether its build serves the signed post_state_root or, as
    builds whose DiffToJSON leaves it out (omitempty) do, only the state_hash it computed."""
    if not signed_root:
        from indexer.devnet import hostviews

        def without_root(diff, version, user_sig, state_hash):
            entry = diff_to_host_json(diff, version, user_sig, state_hash)
            entry["diff"].pop("post_state_root")
            return entry
        monkeypatch.setattr(hostviews, "diff_to_host_json", without_root)
    scn = _small(epochs=1)
    liar = next(iter(scn.escrows.values())).slots[0]
    with DevnetServer(scn, faults=FaultConfig(lying_host=liar)) as net:
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    ids = list(scn.escrows)
    assert _tx_counts(db_url) == _expected_counts(scn, ids)
    assert _statuses(db_url) == _expected_statuses(scn, ids)
    # the liar's altered diff fails the user's signature, checked over the signed root or, where the build leaves
    # that out, over the state_hash the member serves: leaving the root out does not get it past the check
    caught = "%signed check failed: user signature recovers to%"
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM net.failure WHERE source = %s AND error LIKE %s",
                         (f"host:{liar}", caught)).fetchone()[0] >= 1


def test_settled_escrows_carry_their_settlement_height(db_url):
    """The settlement event's height travels with the escrow record (rec.escrow.extra), so the restitution's SPRT
    steps follow the order the chain settled the escrows in, not their ids; so does the settled nonce."""
    scn = _small()
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), private_hosts=True)
        want = {eid: net.devnet.settle_height(esc) for eid, esc in scn.escrows.items() if net.devnet.settled(esc)}
    with psycopg.connect(db_url) as c:
        got = dict(c.execute("SELECT escrow_id, (extra ->> 'settled_height')::bigint FROM rec.escrow "
                             "WHERE extra ? 'settled_height'").fetchall())
        known = c.execute("SELECT array_agg(DISTINCT (evidence ->> 'sprt_settle_heights_known')::boolean) "
                          "FROM api.restitution_impact WHERE epoch_index < %s AND evidence ? 'sprt_settle_heights_known'",
                          (scn.epochs[-1].epoch_index - 1,)).fetchone()[0]
        nonces = dict(c.execute("SELECT escrow_id, (extra ->> 'settle_nonce')::bigint FROM rec.escrow "
                                "WHERE extra ? 'settle_nonce'").fetchall())
    assert want and got == want
    assert known == [True]  # every settled epoch's SPRT steps are ordered by recorded settlement heights
    # the settled session's nonce travels too: the chain's assigned bound per slot is taken at it
    assert nonces == {eid: scn.escrows[eid].last_nonce for eid in want}


def test_unsettled_escrows_decode_with_the_version_their_session_is_bound_to(db_url):
    """Hosts run every approved version side by side and a session binds to one of them on its first request. Here
    the hosts also run a v6 the indexer has no table for (a rollout in progress) while the sessions are bound to v5.
    An unsettled escrow has no settlement event naming its version, so the poller reads it from the escrow's shard
    detail (``version``, the runtime bind) instead of taking the newest the host runs: without that every unsettled
    escrow failed as an unknown version v6; now its v5 diffs are decoded with v5's table."""
    scn = _small(epochs=2)
    with DevnetServer(scn, host_versions=("v6", "v5")) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    ids = _visible(scn, scn.epochs[-1].epoch_index)
    unsettled = [e for e in ids if scn.escrows[e].epoch_index == scn.epochs[-1].epoch_index]
    with psycopg.connect(db_url) as c:
        versions = dict(c.execute("SELECT escrow_id, protocol_version FROM rec.escrow").fetchall())
        failures = c.execute("SELECT count(*) FROM net.failure WHERE error LIKE '%%v6%%'").fetchone()[0]
    assert unsettled and {versions.get(e) for e in unsettled} == {"v5"}
    assert failures == 0
    assert _tx_counts(db_url) == _expected_counts(scn, ids)
    assert _statuses(db_url) == _expected_statuses(scn, ids)


def test_bound_version_prefers_the_details_known_names():
    from indexer.poller.fetch import bound_version

    assert bound_version({"version": "v4", "protocol_version": "v4.1"}, "v5") == "v4.1"  # newer hosts' field first
    assert bound_version({"version": "v4"}, "v5") == "v4"
    assert bound_version({"version": "v1"}, "v5") == "v5"  # the legacy path's tag has no wire table: keep the guess
    assert bound_version({"version": "", "protocol_version": None}, "v5") == "v5"
    assert bound_version({}, "v6") == "v6"  # nothing better known: the unknown guess stays (and is reported)


def test_poll_analyses_only_the_partitions_it_grew(db_url, monkeypatch):
    """The cycle's ANALYZE covers what the cycle loaded (each kind it grew, in the epochs it wrote), never the whole
    history: ANALYZE of a partitioned parent samples every partition again, and on an archive of years of epochs
    every cycle would pay for all of them (the poller analysed every record table whole once a cycle loaded 10,000
    rows)."""
    import indexer.load.summary as summary_module
    from indexer.load.partitions import ensure_epochs

    monkeypatch.setattr(summary_module, "ANALYZE_AFTER_ROWS", 1)  # the small scenario grows every kind it writes
    with psycopg.connect(db_url, autocommit=True) as c:
        ensure_epochs(c, [900])  # an archived epoch's partitions, which this cycle writes nothing to
    scn = _small()
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(db_url, net.chain_rest_url, net.rpc_url, policy=_policy(), private_hosts=True)
    with psycopg.connect(db_url) as c:
        analysed = dict(c.execute(
            "SELECT relname, last_analyze IS NOT NULL FROM pg_stat_user_tables "
            "WHERE schemaname = 'part' AND relname LIKE 'rec\\_start\\_tx\\_e%'").fetchall())
        written = [e for (e,) in c.execute("SELECT DISTINCT epoch_index FROM rec.start_tx ORDER BY 1")]
    assert written and all(analysed[f"rec_start_tx_e{e}"] for e in written)
    assert analysed["rec_start_tx_e900"] is False
