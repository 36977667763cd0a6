"""Which verifier wrote a verification row, and the rows an older one wrote.

A verifier is named by :data:`VERIFIER_VERSION`, a number raised by hand with every change to what the checks accept,
and by a hash of the source the checks run (every module of :mod:`indexer.verify`; the stage,
:mod:`indexer.replay.verification`, what it reads, :mod:`indexer.replay.material`, the bundle it builds,
:mod:`indexer.replay.bundling`, the recoveries it keeps,
:mod:`indexer.replay.verify_memo`, :mod:`indexer.wire.diffs`, whose ``signs_whole`` and ``user_signed_bytes``
decide which bytes the signed check verifies, and :mod:`indexer.load.stored_diffs`, which applies them to a stored
record) with the protocol versions whose session rules are ported. A test pins
the hash to the version (tests/replay/test_verifier_version.py), so the source cannot change without the number
being raised.

Each row stores the identity it was computed with (``replay.escrow_verification.verifier``), and every replay pass
first marks the escrows whose row a LOWER version wrote (final escrows, never replayed otherwise, included), as the
rules stage does for rows of older rule versions (:func:`indexer.rules.run.mark_stale_versions`). A process on older
code never marks, nor re-checks unchanged evidence of, a row a newer verifier wrote: two processes on different code
(``indexer run`` not yet restarted beside a newer ``indexer ingest``) do not re-mark each other's rows for ever.

A row whose verification crashed (``crashes`` > 0, no evidence digest) is marked again by a later pass once its
``retry_after`` has passed (:func:`retry_delay`: the wait doubles with each crash in a row), up to :data:`MAX_CRASHES`
crashes on the row; past that it stays visibly "the verifier failed" until its evidence or the verifier changes. An
escrow replayed for another reason with the evidence it crashed on (``crash_digest``) waits the same way.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

from indexer.db.marks import ESCROW_MARK
from indexer.verify.versions import ported_names

VERIFIER_VERSION = 4  # raise it with every change to the files below (the pin test says when)
MAX_CRASHES = 5
RETRY_BASE_SECONDS = 300  # the wait after a first crash; doubled for each further crash in a row

_INDEXER = Path(__file__).resolve().parents[1]
_STAGE = [Path(__file__).with_name(name)
          for name in ("verification.py", "bundling.py", "material.py", "verify_memo.py")]
_WIRE = [_INDEXER / "wire" / "diffs.py", _INDEXER / "load" / "stored_diffs.py"]
_CHECKS = _INDEXER / "verify"


def source_digest() -> str:
    """16 hex of a sha256 over the checks' source, file by file in a fixed order."""
    h = hashlib.sha256()
    for path in [*sorted(_CHECKS.glob("*.py")), *_STAGE, *_WIRE]:
        h.update(path.parent.name.encode() + b"/" + path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def version_floor(version: int) -> str:
    """The lowest identity of ``version``: every identity of a lower version (or of the format before versions,
    ``verification <hash>; …``) sorts below it, bytewise and in the usual collations (letters and digits decide
    before the spaces and punctuation do)."""
    if not 0 <= version < 10**6:
        raise ValueError(f"verifier version {version} outside 0 .. 999999")
    return f"verifier {version:06d};"


def identity(version: int, digest: str) -> str:
    """``verifier <version, 6 digits>; verification <digest>; session rules <ported versions>``."""
    return f"{version_floor(version)} verification {digest}; session rules {ported_names()}"


def is_older(stored: str | None, version: int) -> bool:
    """Whether a row's stored identity is of a verifier version lower than ``version`` (None: written before
    identities were stored)."""
    return stored is None or stored < version_floor(version)


SOURCE_DIGEST = source_digest()
VERIFIER = identity(VERIFIER_VERSION, SOURCE_DIGEST)

def retry_delay(crashes: int) -> int | None:
    """Seconds a verification that crashed ``crashes`` times in a row waits before it is tried again: 5, 10, 20, 40
    minutes; None once the crashes reached :data:`MAX_CRASHES` (no more retries on the same evidence)."""
    if crashes < 1 or crashes >= MAX_CRASHES:
        return None
    return RETRY_BASE_SECONDS * 2 ** (crashes - 1)


def waits(crashes: int, retry_due: bool | None, same_evidence: bool) -> bool:
    """Whether a crashed row is left alone although its escrow was replayed: the evidence is the one it crashed on,
    and its retry is not due yet (``retry_due`` False) or will not come (the crashes reached MAX_CRASHES)."""
    if not crashes or not same_evidence:
        return False
    return crashes >= MAX_CRASHES or retry_due is False


# the stale rows are found by the verifier index (one range), among escrows still recorded; crashed rows by the
# crash count (few rows), once their retry is due
_STALE = f"""
INSERT INTO replay.dirty_escrow (escrow_id)
SELECT v.escrow_id FROM replay.escrow_verification v
WHERE (v.verifier IS NULL OR v.verifier < %(floor)s
       OR (v.crashes BETWEEN 1 AND %(max_crashes)s - 1 AND v.evidence_digest IS NULL
           AND (v.retry_after IS NULL OR v.retry_after <= now())))
  AND EXISTS (SELECT 1 FROM rec.escrow e WHERE e.escrow_id = v.escrow_id)
ORDER BY 1
ON CONFLICT {ESCROW_MARK}
"""


def mark_stale_verifications(conn: psycopg.Connection, version: int | None = None) -> int:
    """Mark for the replay every escrow whose verification row a lower verifier version wrote, or whose verification
    crashed fewer than :data:`MAX_CRASHES` times in a row and whose retry is due; returns how many."""
    floor = version_floor(VERIFIER_VERSION if version is None else version)
    return conn.execute(_STALE, {"floor": floor, "max_crashes": MAX_CRASHES}).rowcount
