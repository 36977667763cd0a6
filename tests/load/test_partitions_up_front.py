"""The partitions of every epoch a file's escrow records name are made before its first batch (indexer.sources.epochs,
read with the digest), not in the middle of the load where a creation waits for the replay that follows it."""
from __future__ import annotations

import gzip

import psycopg

from indexer.load.ingest import ingest_paths
from indexer.sources import epochs as scan_module
from indexer.sources.epochs import EpochScan
from indexer.sources.ndjson import open_input
from indexer.synth import generate
from tests.support.helpers import write_lines


def _scan(data: bytes, chunk: int, max_line: int = 1 << 20) -> frozenset[int] | None:
    scan = EpochScan(max_line)
    for at in range(0, len(data), chunk):
        scan.feed(data[at:at + chunk])
    return scan.epochs()


def test_the_scan_finds_escrow_epochs_across_chunk_boundaries():
    data = (b'{"kind":"epoch","epoch_index":9}\n'
            b'{"escrow_id":"a","kind" : "escrow","epoch_index": 12,"slots":[]}\n'
            b'{"kind":"start_tx","escrow_id":"a","epoch_index":77}\n'
            b'{"epoch_index":13,"kind":"escrow","escrow_id":"b"}\n'
            b'{"kind":"escrow","escrow_id":"c","epoch_index":99999999999999999999}\n'
            b'{"kind":"escrow","escrow_id":"d","epoch_index":14}')  # the last line has no newline
    for chunk in (1, 2, 3, 7, 16, 64, len(data)):
        assert _scan(data, chunk) == {12, 13, 14}, chunk


def test_a_line_past_the_loaders_limit_is_skipped_not_held():
    """The loader quarantines a line past its limit unread; the scan does not hold such a line either (it held
    all of it, however long, before looking for its end)."""
    long_line = b'{"kind":"escrow","epoch_index":21,"pad":"' + b"x" * 5000 + b'"}\n'
    data = (b'{"kind":"escrow","epoch_index":20}\n' + long_line + b'{"kind":"escrow","epoch_index":22}\n'
            + long_line.rstrip(b"\n"))  # a long last line without a newline too
    for chunk in (1, 7, 64, 1000, 4096):
        scan = EpochScan(1000)
        for at in range(0, len(data), chunk):
            scan.feed(data[at:at + chunk])
            assert len(scan._open) <= 1000 + chunk, chunk
        assert scan.epochs() == {20, 22}, chunk
    # a line of exactly the limit is still read
    exact = b'{"kind":"escrow","epoch_index":23,"pad":"'
    exact += b"y" * (1000 - len(exact) - 2) + b'"}'
    assert len(exact) == 1000 and _scan(exact + b"\n", 7, 1000) == {23} and _scan(exact, 7, 1000) == {23}


def test_a_file_naming_too_many_epochs_gets_none_up_front(monkeypatch):
    monkeypatch.setattr(scan_module, "MAX_EPOCHS", 3)
    lines = b"".join(b'{"kind":"escrow","epoch_index":%d}\n' % e for e in range(4))
    assert _scan(lines, 10) is None
    assert _scan(lines[:lines.index(b'{"kind":"escrow","epoch_index":3}')], 10) == {0, 1, 2}


def test_a_gzip_file_is_not_scanned(tmp_path):
    plain = write_lines(tmp_path / "g.ndjson", generate(seed=2, escrows=2, inferences=5, epochs=2))
    packed = tmp_path / "g.ndjson.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert open_input(str(packed)).epochs is None
    assert open_input(str(plain)).epochs


def _partitions(conn, epochs) -> dict[int, bool]:
    return {e: conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"part.rec_start_tx_e{e}",)).fetchone()[0]
            for e in epochs}


def test_every_epochs_partitions_exist_before_the_first_batch(db_url, tmp_path):
    path = write_lines(tmp_path / "p.ndjson", generate(seed=7, escrows=3, inferences=20, epochs=3))
    epochs = sorted(open_input(str(path)).epochs)
    assert len(epochs) == 3
    seen = []
    with psycopg.connect(db_url, autocommit=True) as other:
        def batch(lines, escrows):
            if not seen:
                seen.append(_partitions(other, epochs))
        ingest_paths(db_url, [str(path)], batch_lines=50, on_batch=batch)
        with_rows = [r[0] for r in other.execute("SELECT DISTINCT epoch_index FROM rec.start_tx ORDER BY 1")]
    assert seen == [{e: True for e in epochs}]
    assert with_rows == epochs  # and the rows are in them, none in the default partition
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM part.rec_start_tx_default").fetchone()[0] == 0
