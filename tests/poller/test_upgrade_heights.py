"""Upgrade heights from the chain's applied upgrade plans (indexer.poller.upgrades) and the version in force that
api.epochs shows from them, on real PostgreSQL with a node answering like cosmos-sdk's x/upgrade (no sockets)."""
from __future__ import annotations

import httpx

from indexer.poller.upgrades import resolve_upgrade_heights
from indexer.sources.gonka import Fetcher, RetryPolicy
from indexer.sources.gonka.chain import ChainRest
from tests.support.rules_kit import load

APPLIED = {"v0.2.2": 100, "v0.2.3": 200, "v0.2.4": 300, "v0.2.5": 400, "v0.2.6": 500}


def _chain(seen: list) -> ChainRest:
    def handler(req: httpx.Request) -> httpx.Response:
        name = req.url.path.rsplit("/", 1)[1]
        seen.append(name)
        if name == "v0.2.7":
            return httpx.Response(200, json={"plan": "no height field"})  # a malformed answer
        if name == "v0.2.8":
            return httpx.Response(500, json={"code": 13, "message": "internal", "details": []})
        return httpx.Response(200, json={"height": str(APPLIED.get(name, 0))})  # "0": not applied (yet)
    return ChainRest(Fetcher("http://node", policy=RetryPolicy(attempts=1, sleep=lambda s: None),
                             client=httpx.Client(transport=httpx.MockTransport(handler))))


def test_heights_from_applied_plans(db_url, tmp_path, conn):
    conn.execute("UPDATE chain.upgrade SET height = 450, source = 'operator' WHERE chain_version = 'v0.2.6'")
    seen, failures = [], []
    found = resolve_upgrade_heights(_chain(seen), conn, lambda *f: failures.append(f))
    assert found == [("v0.2.2", 100), ("v0.2.3", 200), ("v0.2.4", 300), ("v0.2.5", 400)]
    assert "v0.2.6" not in seen and "(genesis)" not in seen  # an operator's height is kept, genesis never asked
    rows = {v: (h, src) for v, h, src in conn.execute("SELECT chain_version, height, source FROM chain.upgrade")}
    assert rows["v0.2.2"] == (100, "chain: /cosmos/upgrade/v1beta1/applied_plan/v0.2.2")
    assert rows["v0.2.6"][1] == "operator" and rows["v0.2.9"][0] is None
    reasons = {f[0]: f[2] for f in failures}
    assert set(reasons) == {"upgrade:v0.2.7", "upgrade:v0.2.8"}
    assert reasons["upgrade:v0.2.7"] == "applied_plan/v0.2.7: no height in the answer"
    assert "HTTP 500" in reasons["upgrade:v0.2.8"]
    # asked again, only what is still unknown is requested
    seen.clear()
    resolve_upgrade_heights(_chain(seen), conn, lambda *f: None)
    assert "v0.2.2" not in seen and "v0.2.7" in seen


def test_epochs_show_the_version_in_force(db_url, tmp_path, conn):
    load(db_url, tmp_path, [{"kind": "epoch", "epoch_index": 3, "start_height": 250, "end_height": 260}])
    before = conn.execute("SELECT chain_version, chain_version_source FROM api.epochs WHERE epoch_index = 3").fetchone()
    assert before == (None, "assumed_newest")
    for version in ("v0.2.2", "v0.2.3"):
        conn.execute("UPDATE chain.upgrade SET height = %s WHERE chain_version = %s",
                     (APPLIED[version], version))
    conn.execute("UPDATE chain.upgrade SET height = 100000 WHERE height IS NULL")  # every later one is known
    row = conn.execute("SELECT chain_version, chain_version_source FROM api.epochs WHERE epoch_index = 3").fetchone()
    assert row[0] == "v0.2.3" and row[1] != "assumed_newest"
