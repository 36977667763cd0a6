"""The same records, delivered in another order or split another way, give the same rows in every `api` view.

One rich record set is loaded by `indexer ingest` (in process) into fresh databases in several orders and splits,
and every `api` view is compared row for row with one load of the set in escrow order. The set: synthetic escrows
of two epochs in the adversarial mix with a share of their txs perturbed (replay rejections), the epochs'
parameters, participant outcomes and warm keys, partial records that a later record of the same key completes (a
Finish without its payload, an escrow without its settlement flag), earlier readings (an escrow not yet settled, an
epoch's live parameters beside its exact ones), second txs of a key at a higher nonce (the same-
key rule quarantines them), and the release fixture's signed, settled escrow with two altered diffs (the creator's
signature decides; one sorts before the genuine bytes, one after) and some diffs served again by a second host.

Orders: escrows interleaved; every line shuffled with the epoch-level records last (settlement before the log,
Finish before Start, a completing record before the partial one); split into several commands (inside escrows; the
partial records apart from their completions, either first; the signed log before its escrow; the epoch-level
records last); small batches; the same file twice; every line twice in one file; two commands of overlapping
halves at once; and export, then ingest into a fresh database."""
from __future__ import annotations

import random
import threading
from pathlib import Path

import psycopg
import pytest

from indexer.cli import main
from indexer.db.scratch import scratch_database
from indexer.synth import generate, perturb
from tests.support.api_views import api_rows, dirty_marks, interleaved
from tests.support.helpers import write_lines
from tests.support.verify_records import _flip as flipped, records as signed_escrow

# what differs between two loads of the same records by design: when a stage ran (every timestamp column), which
# file and line a row came from (a quarantined line's source, line and reason, which names the kept record's file
# and line; a source's cursor and digest), the alert bookkeeping (alerts are evaluated by `indexer alerts`, not by
# ingest) and the source registry and its errors (one row per file read)
SKIP_VIEWS = {"alerts", "alert_deliveries", "source_errors", "ingest_status", "quarantine"}
SKIP_COLUMNS = {"source", "source_digest", "cursor", "line", "reason", "resolved_by", "id", "lag_seconds",
                "source_position"}
BATCH = 40


def _records() -> list[dict]:
    """The record set (module docstring), in escrow order but for the partial and second records at the end."""
    rng = random.Random(3)
    out = list(perturb(generate(seed=13, escrows=5, inferences=24, epochs=2, mix="adversarial"), 0.1, seed=5))
    epochs = sorted({r["epoch_index"] for r in out if r["kind"] == "escrow"})
    hosts = sorted({a for r in out if r["kind"] == "escrow" for a in r["slots"]})
    for epoch in epochs:
        out.append({"kind": "epoch_params", "epoch_index": epoch, "params_height": 100, "params_exact": True,
                    "total_weight": 1000,
                    "validation_params": {"binom_test_p0": {"value": "10", "exponent": -2},
                                          "false_positive_rate": {"value": "5", "exponent": -2}},
                    "devshard_escrow_params": {"approved_versions": [{"name": "v5"}], "max_nonce": 1000}})
        out += [{"kind": "participant_epoch", "epoch_index": epoch, "participant": h, "weight": 100 + i,
                 "confirmation_weight": 90 + i, "inference_count": 50} for i, h in enumerate(hosts)]
        out.append({"kind": "warm_key", "epoch_index": epoch, "participant": hosts[0], "grantee": "gonka1warm"})
    # partial records a later one completes: a refusal's Finish first served without its payload, an escrow first
    # read without its settlement flag
    partial = []
    for r in out:
        if r["kind"] == "finish" and "response_payload" in r and rng.random() < 0.5:
            partial.append({k: v for k, v in r.items() if k != "response_payload"})
        elif r["kind"] == "escrow" and rng.random() < 0.5:
            partial.append({k: v for k, v in r.items() if k not in ("settled", "validation_rate")})
    # earlier readings: an escrow before its settlement, an epoch's live parameters (the exact reading stays)
    partial += [dict(r, settled=False) for r in out if r["kind"] == "escrow" and rng.random() < 0.5]
    partial += [dict(r, params_exact=False, params_height=500, validation_params={"binom_test_p0": "0.5"})
                for r in out if r["kind"] == "epoch_params"]
    # a second tx of one key at a higher nonce (the lower one stays, whichever is loaded first)
    txs = [r for r in out if r["kind"] in ("start", "finish", "timeout", "validation")]
    later = [dict(r, diff_nonce=r["diff_nonce"] + 7) for r in rng.sample(txs, 8)]
    # a signed diff whose signed bytes differ from the served one's (the creator's signature decides)
    fixture = signed_escrow()
    # (nonce 1's altered bytes sort before the genuine ones, nonce 10's after)
    forged = [flipped(r) for r in fixture if r["kind"] == "signed_diff" and r["nonce"] in (1, 10)]
    # the same diffs served by a second host
    other_host = [dict(r, source_host="http://host-b.example:8080") for r in fixture
                  if r["kind"] == "signed_diff" and r["nonce"] % 3 == 0]
    return out + partial + later + fixture + forged + other_host


def _escrow_order(records: list[dict]) -> list[dict]:
    """Epoch-level records first, then every escrow's records together (a partial record after its completion)."""
    head = [r for r in records if "escrow_id" not in r]
    by_escrow: dict[str, list[dict]] = {}
    for r in records:
        if "escrow_id" in r:
            by_escrow.setdefault(r["escrow_id"], []).append(r)
    return head + [r for e in by_escrow for r in by_escrow[e]]


EPOCH_LEVEL = ("epoch", "model_snapshot", "epoch_params", "participant_epoch", "warm_key")


def _shuffled(records: list[dict]) -> list[dict]:
    """Every escrow's lines in a random order (settlement before the log, Finish before Start, a completing record
    before the partial one), the epoch-level snapshots last."""
    body = [r for r in records if r["kind"] not in EPOCH_LEVEL]
    random.Random(17).shuffle(body)
    return body + [r for r in records if r["kind"] in EPOCH_LEVEL]


def ingest_cli(url: str, *paths: Path, batch: int = BATCH) -> int:
    """`indexer ingest` of the files, in batches of ``batch`` lines (so a record and its amendment, or a tx and its
    escrow, meet in different batches of one command)."""
    return main(["--database-url", url, "ingest", "--no-progress", "--allow-quarantine", "--batch-lines", str(batch),
                 *map(str, paths)])


def views(url: str) -> dict[str, list]:
    """Every api view's rows (as text, sorted) but the skipped views and columns, the open quarantine, and how many
    dirty marks are left (none, after a command)."""
    with psycopg.connect(url) as c:
        out = api_rows(c, SKIP_VIEWS, SKIP_COLUMNS)
        # the open quarantine by what was quarantined: the file and line it was in differs by the split, a line
        # that repeats a quarantined one is quarantined again at its own place (so distinct records), and a row a
        # later record resolved is the history of a load that met the records in that order
        out["quarantine"] = sorted(c.execute(
            "SELECT DISTINCT kind, raw::jsonb::text FROM rec.quarantine WHERE resolved_at IS NULL").fetchall())
        out["marks"] = dirty_marks(c)
    return out


def diff(a: dict, b: dict) -> dict:
    """The views that differ, with a few rows found only on each side (empty lists: the same rows, other counts)."""
    out = {}
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            sa, sb = set(a.get(k, [])), set(b.get(k, []))
            out[k] = {"only_ref": sorted(sa - sb)[:4], "only_got": sorted(sb - sa)[:4]}
    return out


@pytest.fixture(scope="module")
def recs():
    return _records()


@pytest.fixture(scope="module")
def reference(pg_admin_url, template_db, tmp_path_factory, recs):
    """The views of one load of the whole set in escrow order."""
    path = write_lines(tmp_path_factory.mktemp("ref") / "ref.ndjson", _escrow_order(recs))
    with scratch_database(pg_admin_url, "indexer_ref", template=template_db) as url:
        assert ingest_cli(url, path) == 0
        ref = views(url)
    assert ref["marks"] == [(0,), (0,), (0,)] and ref["inferences"] and ref["quarantine"]
    return ref


def _split(order: list[dict], *cuts: float) -> list[list[dict]]:
    at = [0, *(int(len(order) * c) for c in cuts), len(order)]
    return [order[a:b] for a, b in zip(at, at[1:])]


def _partials_apart(recs: list[dict], partial_first: bool) -> list[list[dict]]:
    """The partial records (a Finish without the payload another record of its tx carries, an escrow without the
    settlement flag another record of it carries) in one command, everything else in another."""
    complete = {(r["kind"], r["escrow_id"], r.get("inference_id")) for r in recs
                if (r["kind"] == "finish" and "response_payload" in r) or (r["kind"] == "escrow" and "settled" in r)}
    partial = [r for r in recs if (r["kind"] in ("finish", "escrow") and (r["kind"], r["escrow_id"],
               r.get("inference_id")) in complete and "response_payload" not in r and "settled" not in r)]
    assert partial
    ids = {id(r) for r in partial}
    rest = [r for r in recs if id(r) not in ids]
    return [partial, rest] if partial_first else [rest, partial]


SEQUENTIAL = {
    "interleaved": lambda r: [interleaved(r)],
    "shuffled": lambda r: [_shuffled(r)],
    "split in three inside escrows": lambda r: _split(_escrow_order(r), 0.31, 0.67),
    "shuffled split in four": lambda r: _split(_shuffled(r), 0.2, 0.45, 0.8),
    "partial records first, completions in a later command": lambda r: _partials_apart(r, True),
    "completions first, partial records in a later command": lambda r: _partials_apart(r, False),
    "epoch-level records in a last command": lambda r: [[x for x in r if x["kind"] not in EPOCH_LEVEL],
                                                        [x for x in r if x["kind"] in EPOCH_LEVEL]],
    "the signed log before its escrow": lambda r: [[x for x in r if x["kind"] == "signed_diff"],
                                                   [x for x in r if x["kind"] != "signed_diff"]],
    "interleaved in batches of 7": lambda r: [interleaved(r)],
    "the same file twice": lambda r: [_escrow_order(r), _escrow_order(r)],
    "every line twice in one file": lambda r: [[x for x in interleaved(r) for _ in (0, 1)]],
}


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_orders_and_splits_give_the_same_views(pg_admin_url, template_db, tmp_path, recs, reference, name):
    files = [write_lines(tmp_path / f"part{i}.ndjson", part) for i, part in enumerate(SEQUENTIAL[name](recs))]
    with scratch_database(pg_admin_url, "indexer_t", template=template_db) as url:
        for path in files:
            assert ingest_cli(url, path, batch=7 if "batches of 7" in name else BATCH) == 0
        got = views(url)
    assert diff(reference, got) == {}


def test_two_concurrent_commands_of_overlapping_halves(pg_admin_url, template_db, tmp_path, recs, reference):
    order = interleaved(recs)
    third = len(order) // 3
    halves = [write_lines(tmp_path / "a.ndjson", order[: 2 * third]), write_lines(tmp_path / "b.ndjson", order[third:])]
    barrier, codes = threading.Barrier(2), {}

    def run(path):
        barrier.wait(timeout=60)
        codes[path.name] = ingest_cli(url, path)

    with scratch_database(pg_admin_url, "indexer_t", template=template_db) as url:
        threads = [threading.Thread(target=run, args=(p,)) for p in halves]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert codes == {"a.ndjson": 0, "b.ndjson": 0}
        got = views(url)
    assert diff(reference, got) == {}


def _cli(url: str, *argv: str) -> int:
    return main(["--database-url", url, *argv])


@pytest.mark.parametrize("way", ["export", "archive"])
def test_export_or_archive_then_ingest_into_a_fresh_database(pg_admin_url, template_db, tmp_path, recs, reference,
                                                              way):
    """`indexer export FILE`, or `indexer archive` of every epoch (--force: no epoch is final without a poller),
    read back by `indexer ingest` into a fresh database."""
    with scratch_database(pg_admin_url, "indexer_t", template=template_db) as url:
        assert ingest_cli(url, write_lines(tmp_path / "all.ndjson", _shuffled(recs))) == 0
        if way == "export":
            assert _cli(url, "export", str(tmp_path / "export.ndjson")) == 0
            files = [tmp_path / "export.ndjson"]
        else:
            last = max(r["epoch_index"] for r in recs if "epoch_index" in r)
            assert _cli(url, "archive", "--before", str(last + 1), "--to", str(tmp_path / "archive"), "--force") == 0
            files = sorted((tmp_path / "archive").glob("epoch-*.ndjson.gz"))
            assert len(files) == 3
    with scratch_database(pg_admin_url, "indexer_t2", template=template_db) as url:
        assert ingest_cli(url, *files) == 0
        got = views(url)
    # the quarantine is not records: it is not exported (only the lines that did load come back)
    assert diff({**reference, "quarantine": []}, got) == {}
