"""Six `indexer ingest` processes at once, each on some kinds of one data set (escrows apart from their txs, the
epoch-level records apart from both), all exit 0 and leave every api view as one load of the whole set does, with
no dirty mark left. Each loads while the others replay and evaluate: their batches, replay chunks and rules claims
meet on the same escrows, epochs and partitioned parents (indexer.db.lockorder). The exact interleavings are the
deterministic tests beside the stages' code (tests/replay/test_replay_lock_order.py,
tests/rules/test_rules_lock_order.py); this one runs the whole commands."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from indexer.db.scratch import scratch_database
from indexer.synth import generate
from tests.support.api_views import api_rows, dirty_marks
from tests.support.helpers import write_lines
from tests.support.verify_records import records

ROOT = Path(__file__).resolve().parents[2]
BATCH_LINES = 25
# one group a process, as a tester split a demo export (kinds not named go to the last group)
GROUPS = [("start",), ("finish",), ("escrow",), ("signed_diff", "settlement"),
          ("confirm_start", "validation", "validation_vote", "timeout", "error_miss")]
# what differs between two loads of the same records: when and from which file they were loaded
SKIP_VIEWS = {"alerts", "alert_deliveries", "source_errors", "chain_versions", "chain_version_overrides"}
SKIP_COLUMNS = {"source", "cursor", "source_digest", "source_key", "id", "lag_seconds", "source_position"}


def _records() -> list[dict]:
    """Synthetic escrows of two epochs with their epochs' params and warm-key grants (what verification reads,
    so a change re-marks the epoch's escrows), and the release fixture's escrow with its signed log."""
    out = list(generate(seed=11, escrows=8, inferences=30, epochs=2))
    for epoch in sorted({r["epoch_index"] for r in out if r["kind"] == "escrow"}):
        out.append({"kind": "epoch_params", "epoch_index": epoch, "params_height": 100, "params_exact": False,
                    "devshard_escrow_params": {"approved_versions": [{"name": "v5"}], "max_nonce": 1000}})
        out.append({"kind": "warm_key", "epoch_index": epoch, "participant": "gonka1hostA", "grantee": "gonka1warm"})
    return out + list(records())


def _files(tmp_path: Path) -> tuple[Path, list[Path]]:
    recs = _records()
    groups: list[list[dict]] = [[] for _ in range(len(GROUPS) + 1)]
    for rec in recs:
        groups[next((i for i, kinds in enumerate(GROUPS) if rec["kind"] in kinds), len(GROUPS))].append(rec)
    return (write_lines(tmp_path / "all.ndjson", recs),
            [write_lines(tmp_path / f"group{i}.ndjson", group) for i, group in enumerate(groups)])


def _ingest(url: str, path: Path, *options: str) -> subprocess.Popen:
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    return subprocess.Popen([sys.executable, "-m", "indexer", "--database-url", url, "ingest", "--no-progress",
                             "--allow-quarantine", *options, str(path)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _views(url: str) -> dict[str, list]:
    with psycopg.connect(url) as c:
        return {**api_rows(c, SKIP_VIEWS, SKIP_COLUMNS), "marks": dirty_marks(c)}


def test_six_concurrent_ingests_of_split_files_end_as_one_load(pg_admin_url, template_db, tmp_path):
    whole, parts = _files(tmp_path)
    with scratch_database(pg_admin_url, "indexer_one", template=template_db) as url:
        one = _ingest(url, whole)
        assert one.wait(300) == 0, one.stderr.read()
        reference = _views(url)
    assert reference["marks"] == [(0,), (0,), (0,)] and reference["inferences"]
    with scratch_database(pg_admin_url, "indexer_six", template=template_db) as url:
        # small batches: each process's marks spread over its whole load, among the others' replays and claims
        procs = [_ingest(url, part, "--batch-lines", str(BATCH_LINES)) for part in parts]
        failed = [(part.name, proc.stderr.read()) for part, proc in zip(parts, procs) if proc.wait(300) != 0]
        assert failed == []
        got = _views(url)
    assert got == reference
