"""Shapes the network serves today, read as they are: each test pins one real wire shape (a capture in
tests/cases/fixtures/mainnet/, or the upstream source that defines it, cited) against the reader that takes it."""
from __future__ import annotations

import base64
import csv

import httpx
import pytest

from indexer.poller.settled import settlements_from
from indexer.sources.gonka import ChainRest, CometRpc, Fetcher, FetchError, RetryPolicy
from indexer.sources.gonka.chain import PREFIX, gateway_error
from indexer.wire import chain_records as cr
from indexer.wire.normalize import NormalizeError, host_epoch_stats_record
from indexer.wire.rpc import tx_search_events
from tests.support.mainnet_fixtures import FIXTURES, load, raw


def _settled_rows() -> list[dict[str, str]]:
    """The 89 real ``devshard_escrow_settled`` events of settlement_events_e272.csv (README there), one per row."""
    with open(FIXTURES / "settlement_events_e272.csv", newline="") as f:
        return list(csv.DictReader(f))


def _legacy_event(row: dict[str, str], b64: bool) -> dict:
    """The event as chains whose settle message still named its field ``version`` emit it (gonka-devshard.md §4.7:
    ``block_height, block_time, version`` instead of ``state_root_and_protocol_version``), keys and values plain
    (CometBFT ≥ 0.37) or base64 (older)."""
    pairs = {"escrow_id": row["escrow_id"], "settler": row["settler"], "total_payout": row["total_payout"],
             "fees": row["total_fees"], "remainder": row["remainder"], "block_height": row["block_height"],
             "block_time": row["block_time"], "version": row["version"]}
    enc = (lambda s: base64.b64encode(s.encode()).decode()) if b64 else (lambda s: s)
    return {"type": "devshard_escrow_settled",
            "attributes": [{"key": enc(k), "value": enc(v), "index": True} for k, v in pairs.items()]}


def _page(rows: list[dict[str, str]], b64: bool) -> dict:
    txs = [{"hash": f"{int(r['escrow_id']):064X}", "height": r["block_height"], "index": 0,
            "tx_result": {"code": 0, "events": [_legacy_event(r, b64)]}, "tx": ""} for r in rows]
    return {"jsonrpc": "2.0", "id": -1, "result": {"txs": txs, "total_count": str(len(txs))}}


def test_settlement_events_that_name_the_version_in_version_are_kept():
    rows = _settled_rows()
    assert len(rows) == 89 and {r["version"] for r in rows} == {"v1"}
    for b64 in (False, True):
        got = settlements_from(tx_search_events(_page(rows, b64), "devshard_escrow_settled"))
        assert set(got) == {r["escrow_id"] for r in rows}
        for r in rows:
            s = got[r["escrow_id"]]
            assert (s.version, s.height, s.tx_hash) == ("v1", int(r["block_height"]), f"{int(r['escrow_id']):064X}")


def test_a_settlement_event_without_a_known_version_still_gives_its_height_and_transaction():
    row = _settled_rows()[0]
    page = _page([row], False)
    attrs = page["result"]["txs"][0]["tx_result"]["events"][0]["attributes"]
    attrs[:] = [a for a in attrs if a["key"] != "version"]
    got = settlements_from(tx_search_events(page, "devshard_escrow_settled"))
    assert got[row["escrow_id"]].version == ""  # the hosts are asked which version the session is bound to
    assert got[row["escrow_id"]].height == int(row["block_height"])
    attrs.append({"key": "state_root_and_protocol_version", "value": "not-a-version", "index": True})
    assert settlements_from(tx_search_events(page, "devshard_escrow_settled"))[row["escrow_id"]].version == ""


def test_the_settlement_search_reads_legacy_events_from_a_node():
    rows = _settled_rows()[:3]

    def handler(req: httpx.Request) -> httpx.Response:
        assert req.url.path == "/tx_search"
        return httpx.Response(200, json=_page(rows, True))

    rpc = CometRpc(Fetcher(["http://rpc"], policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                           client=httpx.Client(transport=httpx.MockTransport(handler))))
    got = settlements_from(rpc.escrows_settled(4213000))
    assert sorted(got) == sorted(r["escrow_id"] for r in rows) and {s.version for s in got.values()} == {"v1"}


# --------------------------------------------------------------------------- chain REST error bodies and lists

def _chain(answers: dict[str, list], failures: list | None = None) -> tuple[ChainRest, list[str]]:
    """A ChainRest over nodes ``answers`` (host → responses in turn); what each was asked."""
    asked: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        asked.append(req.url.host)
        return answers[req.url.host].pop(0)

    fetcher = Fetcher([f"http://{n}" for n in answers], name="chain",
                      policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                      client=httpx.Client(transport=httpx.MockTransport(handler)),
                      on_failure=lambda u, e, t: (failures if failures is not None else []).append((u, e, t)))
    return ChainRest(fetcher), asked


def test_a_gateway_error_body_served_with_200_is_a_failed_read_and_the_next_node_is_asked():
    failures: list = []
    chain, asked = _chain({"proxy": [httpx.Response(200, json={"code": 14, "message": "upstream\nconnect error",
                                                               "details": []})],
                           "node": [httpx.Response(200, content=raw("excluded_participants_366.json"))]}, failures)
    excluded = cr.excluded_participants(chain.excluded_participants(366), 366)
    assert asked == ["proxy", "node"] and len(excluded) == 7
    assert [(u, e) for u, e, _ in failures] == [(
        f"http://proxy{PREFIX}/excluded_participants/366",
        f"HTTP 200 with an error body: gRPC code 14: upstream connect error (http://proxy{PREFIX}/excluded_participants/366)")]


def test_an_older_gateway_error_body_served_with_200_fails_the_read():
    chain, _ = _chain({"proxy": [httpx.Response(200, json={"error": "rpc error: code = NotFound", "code": 5})]})
    with pytest.raises(FetchError, match=r"HTTP 200 with an error body: gRPC code 5: rpc error: code = NotFound") as e:
        chain.epoch_performance_summary(366, "gonka1x")
    assert e.value.status == 200 and e.value.transient


def test_answers_that_only_look_like_error_bodies_are_data():
    assert gateway_error({"code": 0, "message": ""}) is None
    assert gateway_error({"code": True, "message": "x"}) is None
    assert gateway_error({"code": 5, "message": "x", "items": []}) is None
    assert gateway_error({"height": "0"}) is None and gateway_error([]) is None


def test_an_excluded_participants_answer_without_its_list_is_refused_not_read_as_none_excluded():
    with pytest.raises(NormalizeError, match=r"excluded_participants/366: the answer has no items list \(keys: none\)"):
        cr.excluded_participants({}, 366)
    with pytest.raises(NormalizeError, match=r"no items list \(keys: status\)"):
        cr.excluded_participants({"status": "ok"}, 366)
    assert cr.excluded_participants({"items": None}, 366) == {}  # an empty list served as null


def test_an_epoch_capture_whose_exclusions_answer_has_no_list_names_the_failed_read():
    """epoch 267 from its mainnet captures, the exclusions answered ``{}`` with 200: a failed ``excluded`` read
    (the epoch stays unfinished and the read is asked again), never an epoch read as having no exclusions."""
    from indexer.sources.gonka.snapshots import capture_epoch
    from tests.sources.test_snapshots_capture import _node

    base = _node([])

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == f"{PREFIX}/excluded_participants/267":
            return httpx.Response(200, json={})
        return base(req)

    fetcher = Fetcher("http://node", policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                      client=httpx.Client(transport=httpx.MockTransport(handler)))
    cap = capture_epoch(ChainRest(fetcher), 267, ended=True)
    excluded = [f for f in cap.failures if f.what == "excluded"]
    assert len(excluded) == 1 and "excluded_participants/267: the answer has no items list" in excluded[0].error
    assert "snapshot:267:excluded" not in cap.succeeded and not cap.complete


# --------------------------------------------------------------------------- devshard_host_epoch_stats

def _host_stats(participant, epoch="280") -> dict:
    """``{"stats": DevshardHostEpochStats, "found": true}`` with the values of a real epoch-280 row (mainnet-e272
    recent_devshard_host_stats.csv: gonka1007dch…rqv, missed 2, cost 4489710, 100/100 validations, 1 escrow)."""
    return {"stats": {"participant": participant, "epoch_index": epoch, "missed": 2, "invalid": 0, "cost": "4489710",
                      "required_validations": 100, "completed_validations": 100, "escrow_count": 1}, "found": True}


HOST = "gonka1007dchuqgdnute4qam70kmn56j2vfw38mhyrqv"


def test_host_epoch_stats_are_taken_only_for_the_participant_and_epoch_asked():
    assert host_epoch_stats_record(_host_stats(HOST), 280, HOST) == {
        "kind": "host_epoch_stats", "epoch_index": 280, "participant": HOST, "missed": 2, "invalid": 0,
        "cost": 4489710, "required_validations": 100, "completed_validations": 100, "escrow_count": 1}
    other = "gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09"
    with pytest.raises(NormalizeError, match=f"devshard_host_epoch_stats/280/{HOST}: answered for participant "
                                             f"'{other}', epoch 280"):
        host_epoch_stats_record(_host_stats(other), 280, HOST)
    with pytest.raises(NormalizeError, match="answered for participant .*, epoch 279"):
        host_epoch_stats_record(_host_stats(HOST, "279"), 280, HOST)
    with pytest.raises(NormalizeError, match="answered for participant ''"):
        host_epoch_stats_record(_host_stats(""))  # a record keyed by no participant would merge every such answer
    assert host_epoch_stats_record({"stats": None, "found": False}, 280, HOST) is None


def test_the_poller_does_not_take_another_hosts_stats_and_asks_again():
    """Epochs.host_epoch_stats over a node answering participant A's read with B's stats: a transient failure naming
    the read (the epoch stays open and the read is made again next cycle), never B's counters stored under B from
    A's read or under A."""
    from types import SimpleNamespace

    from indexer.poller.finality import Epochs

    other = "gonka10mmdjau4dnj8krs7sh7t7635ttnmq9u3vqgz09"
    chain, _ = _chain({"node": [httpx.Response(200, json=_host_stats(other))]})
    epochs = SimpleNamespace(summary=SimpleNamespace(epoch=281), g=SimpleNamespace(chain=chain),
                             _pool=SimpleNamespace(map=map))
    with pytest.raises(FetchError, match=f"answered for participant '{other}'") as e:
        Epochs.host_epoch_stats(epochs, 280, [HOST])
    assert e.value.transient and e.value.url == f"chain:devshard_host_epoch_stats/280/{HOST}"
    chain, _ = _chain({"node": [httpx.Response(200, json=_host_stats(HOST))]})
    epochs.g.chain = chain
    assert [r["participant"] for r in Epochs.host_epoch_stats(epochs, 280, [HOST])] == [HOST]


# --------------------------------------------------------------------------- epoch_performance_summary

SUMMARY_366 = "epoch_performance_summary_366_gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv.json"
PARTICIPANT_366 = "gonka1scskt6wpnjnumsah6kjphmdu87vjgvcxmn4rxv"


def test_the_reward_weight_a_newer_chain_publishes_is_kept_and_stored(db_url, conn, tmp_path):
    """The epoch-366 mainnet summary as a chain with ``participant_reward_weight`` (field 11) serves it: the weight
    is read exactly (a u64 decimal string, here past 2^53) and stored with the participant's record; the real
    capture, from before the field, gives no such weight (unknown, not 0)."""
    from tests.support.helpers import ingest, write_lines

    served = load(SUMMARY_366)
    assert cr.performance_summary(served, 366, PARTICIPANT_366).get("participant_reward_weight") is None
    served["epochPerformanceSummary"]["participant_reward_weight"] = "9007199254740993"
    got = cr.performance_summary(served, 366, PARTICIPANT_366)
    assert got["participant_reward_weight"] == 2**53 + 1
    served["epochPerformanceSummary"]["participant_reward_weight"] = "-1"
    with pytest.raises(NormalizeError, match="participant_reward_weight"):
        cr.performance_summary(served, 366, PARTICIPANT_366)
    (rec,) = cr.participant_epoch_records(366, {}, {PARTICIPANT_366: got}, {})
    ingest(db_url, write_lines(tmp_path / "p.ndjson", [rec]))
    stored = conn.execute("SELECT inference_count, extra->>'participant_reward_weight' FROM rec.participant_epoch "
                          "WHERE epoch_index = 366 AND participant = %s", (PARTICIPANT_366,)).fetchone()
    assert stored == (got["inference_count"], str(2**53 + 1))


# --------------------------------------------------------------------------- digits

@pytest.mark.parametrize("text", ["²", "-²", "１２", "٣"])
def test_numbers_with_digits_other_than_ascii_are_refused_with_the_field_named(text):
    """``str.isdigit`` is true of superscripts and other scripts' digits: ``int`` raises on "²" (a crash where a
    peer's bad number must be a named failure) and reads "１２" as 12. The chain and Go only write ASCII digits."""
    from indexer.sources.gonka.chain import served_height
    from indexer.wire.diffs import diff_header_from_host_json
    from indexer.wire.normalize import parse_i64, parse_u64
    from indexer.wire.errors import WireDecodeError

    with pytest.raises(NormalizeError, match="epoch_index"):
        parse_u64(text, "epoch_index")
    with pytest.raises(NormalizeError, match="refusal_timeout"):
        parse_i64(text, "refusal_timeout")
    with pytest.raises(NormalizeError, match="weight"):
        cr.validation_weights({"validation_weights": [{"member_address": "gonka1a", "weight": text}]})
    with pytest.raises(WireDecodeError, match="diff.nonce"):
        diff_header_from_host_json({"diff": {"nonce": text}})
    assert served_height({"Grpc-Metadata-X-Cosmos-Block-Height": text}) is None
    status = cr.participant_status({"participant": {"address": "gonka1a", "status": text}}, "gonka1a")
    assert status == text  # a value the indexer does not know, kept as given (never mapped to a status)


def test_escrow_ids_and_height_headers_with_other_digits_do_not_crash_the_poller():
    """A creation event naming escrow "²" (a peer's lie) sorts last instead of raising out of the epoch's listing; a
    height header "²" is archived as no height."""
    import threading
    from types import SimpleNamespace

    from indexer.poller.finality import Epochs
    from indexer.poller.store import Store
    from indexer.wire.rpc import TxEvent

    created = [TxEvent(5, "H", "devshard_escrow_created", {"escrow_id": e}) for e in ("12", "²", "3")]
    epochs = SimpleNamespace(g=SimpleNamespace(rpc=SimpleNamespace(escrows_created=lambda epoch: created)))
    assert Epochs.listed_ids(epochs, 408) == ["²", "3", "12"]
    store = SimpleNamespace(archive=True, _lock=threading.Lock(), archived=0, archive_budget=1 << 20,
                            unarchived=[0, 0], responses=[])
    Store.on_response(store, "http://node/x", 200, b"{}", {"x-cosmos-block-height": "²"})
    assert store.responses == [("http://node/x", 200, None, b"{}")]
