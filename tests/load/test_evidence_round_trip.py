"""What verification needs survives export → ingest and archive → ingest: the signed_diff and settlement records the
poller captured from the devnet (served content strings, signatures, roots, serving hosts; settlement transactions
as broadcast, or kept with the reason they carry no settlement) come back identical, extra fields included."""
from __future__ import annotations

import base64
import hashlib

import psycopg
import pytest

from indexer.archive import archive
from indexer.devnet import DevnetServer, Scenario, ScenarioConfig
from indexer.load.export import export_records
from indexer.poller import poll_once
from indexer.records import KINDS
from indexer.sources.gonka import RetryPolicy
from tests.support.helpers import ingest

EVIDENCE = ("signed_diff", "settlement")


def _polled(url: str, version: str) -> None:
    scn = Scenario(ScenarioConfig(seed=13, epochs=2, escrows_per_epoch=2, inferences_per_escrow=10,
                                  protocol_version=version))
    with DevnetServer(scn) as net:
        net.advance_to_last_epoch()
        poll_once(url, net.chain_rest_url, net.rpc_url, decode_workers=0, private_hosts=True,
                  policy=RetryPolicy(backoff_base=0.001, backoff_max=0.01, timeout=5.0, attempts=3))


def _evidence(url: str) -> dict[str, list]:
    with psycopg.connect(url) as c:
        return {k: c.execute(f"SELECT {', '.join(KINDS[k].columns + ['extra'])} FROM rec.{KINDS[k].table} "
                             f"ORDER BY {', '.join(KINDS[k].key)}").fetchall() for k in EVIDENCE}


@pytest.mark.parametrize("version", ["v4.1", "v5"])
def test_export_then_ingest_keeps_the_evidence_identical(db_url, second_db_url, tmp_path, version):
    _polled(db_url, version)
    before = _evidence(db_url)
    assert before["signed_diff"] and before["settlement"]
    settled = before["settlement"][0]
    raw = base64.b64decode(settled[KINDS["settlement"].columns.index("tx_raw")])
    assert hashlib.sha256(raw).hexdigest() == settled[KINDS["settlement"].columns.index("tx_hash")]
    assert settled[KINDS["settlement"].columns.index("msg")]  # the message read from the raw transaction
    export_records(db_url, str(tmp_path / "out.ndjson"))
    summary = ingest(second_db_url, tmp_path / "out.ndjson")
    assert summary.quarantined == 0 and summary.amended == 0
    assert _evidence(second_db_url) == before


def test_archive_then_ingest_restores_the_evidence(db_url, tmp_path):
    _polled(db_url, "v4.1")
    before = _evidence(db_url)
    with psycopg.connect(db_url) as c:
        last = c.execute("SELECT max(epoch_index) FROM rec.escrow").fetchone()[0]
    summary = archive(db_url, last + 1, str(tmp_path / "arch"), force=True)
    assert summary.dropped
    assert _evidence(db_url) == {k: [] for k in EVIDENCE}
    for path in sorted((tmp_path / "arch").glob("epoch-*.ndjson.gz")):
        ingest(db_url, path)
    assert _evidence(db_url) == before
