"""Shapes the network serves today, read as they are: each test pins one real wire shape (a capture in
tests/cases/fixtures/mainnet/, or the upstream source that defines it, cited) against the reader that takes it."""
from __future__ import annotations

import base64
import csv

import httpx

from indexer.poller.settled import settlements_from
from indexer.sources.gonka import CometRpc, Fetcher, RetryPolicy
from indexer.wire.rpc import tx_search_events
from tests.support.mainnet_fixtures import FIXTURES


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
