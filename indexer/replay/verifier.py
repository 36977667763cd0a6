"""Which verifier wrote a verification row, and the rows an older one wrote.

The identity is a hash of the source of the checks (every module of :mod:`indexer.verify`; the stage,
:mod:`indexer.replay.verification`, what it reads, :mod:`indexer.replay.material`, and the recoveries it keeps,
:mod:`indexer.replay.verify_memo`) with the protocol versions whose session rules are ported: any change to what
the checks accept (a fix in apply.py, a version ported) gives another identity without anyone bumping a number. Each
row stores the identity it was computed with (``replay.escrow_verification.verifier``), and every replay pass first
marks the escrows whose row another identity wrote, as the rules stage does for rows of older rule versions
(:func:`indexer.rules.run.mark_stale_versions`): final escrows, never replayed otherwise, are checked again too.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

from indexer.db.marks import ESCROW_MARK
from indexer.verify.versions import ported_names

_STAGE = [Path(__file__).with_name(name) for name in ("verification.py", "material.py", "verify_memo.py")]
_CHECKS = Path(__file__).resolve().parents[1] / "verify"


def verifier_identity() -> str:
    """``verification <16 hex of sha256 over the checks' source>; session rules <ported versions>``."""
    h = hashlib.sha256()
    for path in [*sorted(_CHECKS.glob("*.py")), *_STAGE]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"verification {h.hexdigest()[:16]}; session rules {ported_names()}"


VERIFIER = verifier_identity()

# the stale rows are found by the verifier index (two ranges: ``<>`` cannot use it), among escrows still recorded
_STALE = f"""
INSERT INTO replay.dirty_escrow (escrow_id)
SELECT v.escrow_id FROM replay.escrow_verification v
WHERE (v.verifier IS NULL OR v.verifier < %(verifier)s OR v.verifier > %(verifier)s)
  AND EXISTS (SELECT 1 FROM rec.escrow e WHERE e.escrow_id = v.escrow_id)
ORDER BY 1
ON CONFLICT {ESCROW_MARK}
"""


def mark_stale_verifications(conn: psycopg.Connection, verifier: str | None = None) -> int:
    """Mark for the replay every escrow whose verification row another verifier wrote; returns how many."""
    return conn.execute(_STALE, {"verifier": verifier or VERIFIER}).rowcount
