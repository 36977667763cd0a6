"""Small builders shared by DB tests: write records to NDJSON and ingest them through the real pipeline."""
from __future__ import annotations

from pathlib import Path

import orjson
import psycopg

from indexer.downstream import process_changes
from indexer.load.ingest import ingest_paths
from indexer.replay.run import replay_dirty


def write_lines(path: Path, records) -> Path:
    with open(path, "wb") as fh:
        for rec in records:
            fh.write(rec if isinstance(rec, bytes) else orjson.dumps(rec))
            fh.write(b"\n")
    return path


def ingest(url: str, path: Path, rules: bool = False, **kw):
    """Load, replay, and (rules=True) run the rules stage on the dirty epochs, as `indexer ingest` does."""
    summary = ingest_paths(url, [str(path)], **kw)
    with psycopg.connect(url) as c:
        if rules:
            process_changes(c, url)
        else:
            replay_dirty(c)
    return summary


def escrow(escrow_id="1971", slots=None, factor=50, epoch=408, model="deepseek-ai/DeepSeek-V4-Flash-0731", **kw):
    if slots is None:  # the reference scenario: A=0-3, B=4-5, C=6-8, D=9-10, E=11-15
        slots = ["gonka1hostA"] * 4 + ["gonka1hostB"] * 2 + ["gonka1hostC"] * 3 + ["gonka1hostD"] * 2 + \
                ["gonka1hostE"] * 5
    return {"kind": "escrow", "escrow_id": escrow_id, "epoch_index": epoch, "model_id": model, "slots": slots,
            "vote_threshold_factor": factor, **kw}


def tx(kind, inference_id, nonce, escrow_id="1971", **fields):
    return {"kind": kind, "escrow_id": escrow_id, "inference_id": inference_id, "diff_nonce": nonce, **fields}


LOAD_TIMES = {"loaded_at", "amended_at", "replayed_at", "marked_at", "quarantined_at", "first_seen_at",
              "last_loaded_at", "completed_at"}
# when a stage ran, not what it found: two runs over the same records differ here by design, whatever a test excludes
RUN_TIMES = {"verified_at"}


def db_state(url: str, exclude: set[str] = LOAD_TIMES, tables: list[str] | None = None) -> dict[str, list]:
    """Every rec.* and replay.* table (or the named ones), rows sorted, without the excluded (load-time) columns."""
    out = {}
    with psycopg.connect(url) as c:
        if tables is None:
            tables = [r[0] for r in c.execute(
                "SELECT table_schema || '.' || table_name FROM information_schema.tables "
                "WHERE table_schema IN ('rec', 'replay') AND table_type = 'BASE TABLE' ORDER BY 1")]
        for t in tables:
            cols = [r[0] for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema || '.' || table_name = %s "
                "ORDER BY ordinal_position", (t,)) if r[0] not in exclude | RUN_TIMES]
            order = ", ".join(str(i + 1) for i in range(len(cols)))
            out[t] = c.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY {order}").fetchall() if cols else []
    return out


def table_snapshot(url: str, tables: list[str]) -> dict[str, list]:
    """The named tables without load-time and provenance columns, for identical-state comparisons."""
    return db_state(url, {"loaded_at", "amended_at", "source_id", "source_line", "revision", "replayed_at",
                          "marked_at"}, tables)


def ingest_expecting_quarantine(url: str, path: Path, conn, lines: list[bytes], want: dict[int, tuple[str, ...]]):
    """Write ``lines``, ingest them, and assert that exactly the lines in ``want`` were quarantined, each with a
    reason containing every fragment given for it."""
    path.write_bytes(b"\n".join(lines) + b"\n")
    summary = ingest(url, path)
    assert summary.quarantined == len(want)
    got = dict(conn.execute("SELECT line, reason FROM api.quarantine").fetchall())
    assert sorted(got) == sorted(want)
    wrong = {n: got[n] for n, fragments in want.items() if not all(f in got[n] for f in fragments)}
    assert not wrong, wrong


def set_verification(conn, escrow_id: str, level: str, check: str | None = None, nonce: int | None = None,
                     failure: str | None = None, *, epoch: int | None = None, nonces: int = 5,
                     source_host: str | None = None) -> None:
    """Write one escrow's ``replay.escrow_verification`` row by hand (upserted), for the tests of what reads it: the
    stage that writes it needs signed logs these tests do not carry."""
    conn.execute("INSERT INTO replay.escrow_verification (escrow_id, epoch_index, level, nonces_checked, failed_check,"
                 " failed_nonce, failure, source_host) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                 "ON CONFLICT (escrow_id) DO UPDATE SET level = excluded.level, failed_check = excluded.failed_check,"
                 " failed_nonce = excluded.failed_nonce, failure = excluded.failure",
                 (escrow_id, epoch, level, nonces, check, nonce, failure, source_host))
