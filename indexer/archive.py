"""`indexer archive --before EPOCH --to DIR`: old epochs out to compressed NDJSON, then out of the database.

Per epoch, in order: its records are written as `epoch-<E>.ndjson.gz` (the normalized NDJSON `indexer ingest` reads
back to the same rows, as `indexer export` writes it) to a temporary name, fsynced, renamed, and entered in
`manifest.json` (records per kind, a revision sum per kind, sha256), itself replaced atomically. Only then, in one
transaction per epoch that first locks the record tables against writers and checks that the epoch's records
still match the manifest, its partitions are dropped and its rows in the unpartitioned tables deleted. A rerun
after a crash anywhere finishes the job: a listed epoch whose file is intact and whose records have not changed
is not written again, and an epoch already dropped has nothing left to list.

Replay results and rule findings are not archived: `ingest` of the files replays and re-evaluates them. Reading a
listed file back is a restore: a record stored after the file was written (an amendment that came later) is newer,
and its archived version is not applied but quarantined with the reason (verify_archived).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from indexer.load.export import write_records
from indexer.load.partitions import EPOCH_PARTITIONS, ROUTED, ensure_epochs
from indexer.records import KINDS, LOAD_ORDER
from indexer.settings import ConfigError
from indexer.sources.ndjson import InputError

MANIFEST = "manifest.json"
RETRIES = 3  # an epoch whose records change between its file and its drop is written again, up to this often

_UNROUTED = [k for k in KINDS.values() if k.name not in ROUTED]  # record tables not partitioned by epoch
_EPOCH_TABLES = sorted({f"rec.{k.table}" for k in KINDS.values()} | {"rec.escrow_epoch"})
_PARTITIONS = """
SELECT n.nspname, c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('rec', 'replay', 'rules') ORDER BY 1, 2
"""
# Rows of an epoch outside its partitions: the unpartitioned record tables and the small derived ones. Replay and
# rules rows keyed by escrow go by the registry (rec.escrow_epoch), so they are deleted before it.
_DELETE = [
    *(f"DELETE FROM {t} WHERE escrow_id IN (SELECT escrow_id FROM rec.escrow_epoch WHERE epoch_index = %(e)s)"
      for t in ("replay.vote", "replay.rejected_tx", "replay.slot_stats", "replay.dirty_escrow",
                "rules.refusal_parse")),
    *(f"DELETE FROM {t} WHERE epoch_index = %(e)s"
      for t in ("replay.escrow", "rules.escrow_limit", "rules.model_limit", "rules.suspect",
                "rules.dirty_epoch", "rules.dirty_escrow",  # the marks in their one order (indexer.db.lockorder)
                *(f"rec.{k.table}" for k in _UNROUTED),
                "rec.escrow_epoch")),
]


class NotFinal(ConfigError):
    """Epochs the poller has not seen final: their records may still change."""


@dataclass
class ArchiveSummary:
    written: list[int] = field(default_factory=list)   # epochs whose file this run wrote
    kept: list[int] = field(default_factory=list)      # epochs whose file from an earlier run was intact
    dropped: list[int] = field(default_factory=list)
    records: int = 0
    seconds: float = 0.0
    damaged: list[str] = field(default_factory=list)   # listed files gone or not as written (check_files)


def epoch_file(epoch: int) -> str:
    return f"epoch-{epoch:06d}.ndjson.gz"


_FINGERPRINT = " UNION ALL ".join(
    f"SELECT '{name}', count(*), coalesce(sum(revision), 0) FROM rec.{KINDS[name].table} WHERE epoch_index = %(e)s"
    for name in LOAD_ORDER)


def _fingerprint(conn: psycopg.Connection, epoch: int) -> dict[str, list[int]]:
    """Records and the sum of their revisions per kind: a new record changes the count, an amendment the sum.
    One statement for every kind."""
    rows = {name: [count, int(revisions)] for name, count, revisions in conn.execute(_FINGERPRINT, {"e": epoch})}
    return {name: rows[name] for name in LOAD_ORDER}


def candidate_epochs(conn: psycopg.Connection, before: int) -> list[int]:
    """Epochs below `before` with records or partitions."""
    sources = " UNION ".join(f"SELECT epoch_index FROM rec.{k.table}" for k in _UNROUTED)
    rows = conn.execute(f"SELECT epoch_index FROM ({sources} UNION SELECT epoch_index FROM rec.escrow_epoch) s "
                        "WHERE epoch_index >= 0 AND epoch_index < %s", (before,)).fetchall()
    epochs = {r[0] for r in rows}
    epochs.update(r[0] for r in conn.execute(f"SELECT epoch_index FROM ({EPOCH_PARTITIONS}) p WHERE epoch_index < %s",
                                             (before,)))
    return sorted(epochs)


def archive(url: str, before: int, out_dir: str, *, force: bool = False) -> ArchiveSummary:
    start, summary = time.perf_counter(), ArchiveSummary()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out)
    with psycopg.connect(url) as conn:
        epochs = candidate_epochs(conn, before)
        if not force:
            final = {r[0] for r in conn.execute("SELECT epoch_index FROM net.epoch_state WHERE state = 'final' "
                                                "AND epoch_index = ANY(%s)", (epochs,))}
            if pending := [e for e in epochs if e not in final]:
                raise NotFinal(f"epochs not final in net.epoch_state: {', '.join(map(str, pending))} (the chain "
                               "may still change them; --force archives them anyway)")
        conn.commit()
        for epoch in epochs:
            for _ in range(RETRIES):
                written = _write_epoch(conn, out, manifest, epoch)
                if _drop_epoch(conn, epoch, manifest["epochs"][str(epoch)]["fingerprint"]):
                    break
            else:
                raise RuntimeError(f"epoch {epoch}: its records kept changing while being archived "
                                   f"({RETRIES} attempts); is a loader still writing it?")
            (summary.written if written else summary.kept).append(epoch)
            summary.dropped.append(epoch)
            summary.records += sum(manifest["epochs"][str(epoch)]["records"].values())
    summary.damaged = check_files(out, manifest)
    summary.seconds = time.perf_counter() - start
    return summary


def check_files(out: Path, manifest: dict) -> list[str]:
    """Every file the manifest lists that is missing or whose size is not the one written (cheap: no re-hash;
    `ingest` checks the sha256 of an archived file it reads: verify_archived). One line each."""
    problems = []
    for epoch, entry in sorted(manifest["epochs"].items(), key=lambda item: int(item[0])):
        path = out / entry["file"]
        records = sum(entry["records"].values())
        if not path.exists():
            problems.append(f"{path.name} (epoch {epoch}, {records} records): missing")
        elif path.stat().st_size != entry["bytes"]:
            problems.append(f"{path.name} (epoch {epoch}, {records} records): {path.stat().st_size} bytes, "
                            f"{entry['bytes']} written")
    return problems


def verify_archived(name: str) -> str | None:
    """When ``name`` is a file that an archive manifest beside it lists, its sha256 must be the one written: a
    changed or damaged archive file is bad input, named, before any of it loads. (Costs one more read of such a
    file; files no manifest lists are not read.) Returns when the file was written (UTC, ISO 8601) for an archived
    file, None for any other: loading it is a restore, which never applies an archived record over one stored
    after that time (indexer.load.ingest.ingest_file)."""
    path = Path(name)
    if name == "-" or not (path.parent / MANIFEST).is_file():
        return None
    manifest = _read_manifest(path.parent)
    entry = next((e for e in manifest["epochs"].values() if e.get("file") == path.name), None)
    if entry is None:
        return None
    digest = _sha256(path)
    if entry["sha256"] != digest:
        raise InputError(f"{name}: sha256 {digest} differs from the {entry['sha256']} that {path.parent / MANIFEST} "
                         "recorded: the archived file was changed or damaged since it was written")
    return entry.get("written_at")


def _write_epoch(conn: psycopg.Connection, out: Path, manifest: dict, epoch: int) -> bool:
    """Write the epoch's file and manifest entry unless an intact one describes its current records. Rows of the
    epoch in a DEFAULT partition (no partition existed when they came) are moved into its partition first."""
    ensure_epochs(conn, [epoch])
    fingerprint = _fingerprint(conn, epoch)
    conn.commit()
    entry = manifest["epochs"].get(str(epoch))
    path = out / epoch_file(epoch)
    if entry and entry["fingerprint"] == fingerprint and path.exists() and _sha256(path) == entry["sha256"]:
        return False
    tmp = path.with_name(path.name + ".tmp")
    digest = hashlib.sha256()
    with open(tmp, "wb") as raw:
        hashing = _Hashing(raw, digest)
        with gzip.GzipFile(fileobj=hashing, mode="wb", mtime=0) as gz:  # mtime 0: same records, same bytes
            with conn.transaction():  # one snapshot for the whole epoch
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                fingerprint = _fingerprint(conn, epoch)
                counts = write_records(conn, gz, (epoch, epoch))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, path)
    _fsync_dir(out)
    manifest["epochs"][str(epoch)] = {"file": path.name, "sha256": digest.hexdigest(), "bytes": path.stat().st_size,
                                      "records": counts, "fingerprint": fingerprint,
                                      "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write_manifest(out, manifest)
    return True


def _drop_epoch(conn: psycopg.Connection, epoch: int, fingerprint: dict) -> bool:
    """Drop the epoch's partitions and delete its other rows in one transaction, provided its records are still
    the ones in the file (writers wait on the SHARE locks meanwhile). False: they changed; write it again."""
    with conn.transaction():
        conn.execute(f"LOCK TABLE {', '.join(_EPOCH_TABLES)} IN SHARE MODE")
        if _fingerprint(conn, epoch) != fingerprint:
            return False
        for schema, table in conn.execute(_PARTITIONS).fetchall():
            conn.execute(f'DROP TABLE IF EXISTS part."{schema}_{table}_e{epoch}"')
        for statement in _DELETE:
            conn.execute(statement, {"e": epoch})
    return True


class _Hashing:
    """A write-only file that hashes what passes through (the compressed bytes, as they reach the disk)."""

    def __init__(self, raw, digest) -> None:
        self.raw, self.digest = raw, digest

    def write(self, data) -> int:
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.exists():
        return {"format": 1, "epochs": {}}
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path}: not a readable archive manifest ({exc})") from None
    if manifest.get("format") != 1 or not isinstance(manifest.get("epochs"), dict):
        raise ConfigError(f"{path}: not an indexer archive manifest (format 1)")
    return manifest


def _write_manifest(out: Path, manifest: dict) -> None:
    tmp = out / (MANIFEST + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out / MANIFEST)
    _fsync_dir(out)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
