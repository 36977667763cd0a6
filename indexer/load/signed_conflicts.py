"""Two ``signed_diff`` records of one diff (escrow, nonce) that carry different evidence: which one is stored does
not depend on the order they are loaded in.

A signed diff is evidence only when its user signature recovers to the escrow's creator, and any later source is
untrusted: a record that fails the check must not replace one that passes it (the escrow would drop to level none),
nor be kept because it came first. So when a batch brings a record whose content, user signature or roots differ from
the stored record of its key, or from another line of the batch with that key, the records are read as the signed
check reads them (:func:`indexer.load.stored_diffs.signed_diff`): those with the same signed message and signature are
one piece of evidence (a stored root the content repeats, or a host name, is amended as usual). Of two or more,
one is kept:

1. those the creator signed, when the escrow's creator is loaded and any of them passes;
2. of the candidates left (all of them when none passes, or when the creator is not loaded yet, so no signature can
   be checked), the one whose signed message and signature sort first: an arbitrary order, but the same whichever
   record is loaded first.

A choice made while the creator was not loaded is provisional: when the escrow record comes, the lines that lost
that way are read back from the quarantine and the choice is made again with the signature (:func:`recheck_stored`),
so diffs loaded before their escrow end as if the escrow had come first.

A line of the batch that is not kept is quarantined with a one-line reason naming its file and line, the escrow and
nonce, why it lost and which record was kept; a stored record that is not kept is replaced by the upsert, which
writes its previous content to ``rec.amendment``, and is quarantined under its own file and line (as a line that
came after the kept one would be), and a warning names it. Only the batches that meet such a conflict
pay for the recoveries (one per distinct record); a batch of new keys never gets here.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson
import psycopg

from indexer.load.samekey import SIGNED_EVIDENCE, record_json
from indexer.load.typed import printable
from indexer.records import KINDS
from indexer.load.stored_diffs import StoredDiffError, creator_signed, signed_diff as stored_diff

SIGNED = SIGNED_EVIDENCE
MAX_REASON = 600
log = logging.getLogger(__name__)

_COLUMNS = ", ".join(SIGNED)
# the staged lines of every key whose records differ: from the stored one (a join on the key, within the partition),
# or from another line of the batch (grouped); one pass each over the stage, no pairwise comparison
_CONFLICTS = f"""
WITH conflict AS (
  SELECT s.escrow_id, s.nonce FROM pg_temp.stage_signed_diff s
  JOIN rec.signed_diff t ON t.escrow_id = s.escrow_id AND t.nonce = s.nonce AND t.epoch_index = s.epoch_index
  WHERE ({', '.join('t.' + c for c in SIGNED)}) IS DISTINCT FROM ({', '.join('s.' + c for c in SIGNED)})
  UNION
  SELECT escrow_id, nonce FROM pg_temp.stage_signed_diff GROUP BY escrow_id, nonce
  HAVING count(DISTINCT ({_COLUMNS})) > 1
)
SELECT s.line, s.escrow_id, s.nonce, {', '.join('s.' + c for c in SIGNED)}
FROM pg_temp.stage_signed_diff s JOIN conflict c ON c.escrow_id = s.escrow_id AND c.nonce = s.nonce
ORDER BY s.line
"""
_STORED = f"""
SELECT t.escrow_id, t.nonce, {', '.join('t.' + c for c in SIGNED)}, t.source_line, r.uri, t.source_id,
       {record_json(KINDS['signed_diff'], 't.')}::text
FROM rec.signed_diff t LEFT JOIN rec.source r ON r.source_id = t.source_id
JOIN unnest(%s::text[], %s::bigint[]) k(escrow_id, nonce) ON k.escrow_id = t.escrow_id AND k.nonce = t.nonce
"""


@dataclass
class _Evidence:
    """The records of one key that carry the same evidence: the same signed message and user signature (records
    that differ only where the signature does not reach, e.g. a stored root the content repeats, are one)."""
    key: tuple  # (signed message, user signature) as bytes; for a record they cannot be formed from, its columns
    signed: tuple  # the SIGNED columns of one of its records
    where: str  # the file and line of one of its records (the stored one's when it is stored)
    lines: list[int]  # the batch's lines that carry it
    stored: bool = False
    row: tuple | None = None  # stored: (source_id, source_line, record as JSON); read back: (source_id, line, record)


def resolve(conn: psycopg.Connection, source_id: int,
            source_lines: Callable[[], Iterable[tuple[int, bytes]]]) -> list[tuple]:
    """Settle the conflicts of the staged signed_diff batch (caller's transaction): the lines not kept are deleted
    from the stage and returned as quarantine tuples (source_id, line, kind, reason, raw), with a stored record
    that a line of the batch replaces (under the stored record's own source and line)."""
    staged = conn.execute(_CONFLICTS).fetchall()
    if not staged:
        return []
    uri = conn.execute("SELECT uri FROM rec.source WHERE source_id = %s", (source_id,)).fetchone()[0]
    keys: dict[tuple, list[_Evidence]] = {}
    for line, escrow_id, nonce, *signed in staged:
        _add(keys.setdefault((escrow_id, nonce), []), escrow_id, tuple(signed), f"{uri}:{line}", line)
    for escrow_id, nonce, *signed, where, row in _stored(conn, sorted(keys)):
        _add(keys[(escrow_id, nonce)], escrow_id, tuple(signed), where, None, row)
    creators = _creators(conn, [k[0] for k in keys])
    reasons: dict[int, str] = {}
    replaced: list[tuple] = []
    for (escrow_id, nonce), candidates in keys.items():
        if len(candidates) < 2:
            continue
        creator = creators.get(escrow_id)
        kept, failures = _decide(escrow_id, creator, candidates)
        kept_at = ("the stored record from " if kept.stored else "the record at ") + kept.where
        for c in candidates:
            if c is kept:
                continue
            why = _why(creator, failures.get(id(c)))
            for line in c.lines:
                reasons[line] = _one_line(f"{uri}:{line}: signed_diff escrow {escrow_id} nonce {nonce} not stored: "
                                          f"{why}; kept {kept_at}")
            if c.stored:
                log.warning("signed_diff escrow %s nonce %s: the stored record from %s is replaced by the one at %s "
                            "(%s)", escrow_id, nonce, c.where, kept.where, why)
                replaced.append(_displaced(c, escrow_id, nonce, why, kept_at))
    if reasons:
        conn.execute("DELETE FROM pg_temp.stage_signed_diff WHERE line = ANY(%s)", (sorted(reasons),))
    return replaced + [(source_id, line, "signed_diff", reasons[line], printable(raw))
                       for line, raw in source_lines() if line in reasons]


def _stored(conn: psycopg.Connection, pairs: list[tuple]) -> list[tuple]:
    """(escrow_id, nonce, *SIGNED, where, row) of the stored records of the (escrow_id, nonce) pairs."""
    out = []
    for escrow_id, nonce, *rest in conn.execute(_STORED, ([k[0] for k in pairs], [k[1] for k in pairs])):
        *signed, source_line, stored_uri, stored_source, raw = rest
        out.append((escrow_id, nonce, *signed, f"{stored_uri or 'an unnamed source'}:{source_line}",
                    (stored_source, source_line, raw)))
    return out


def _creators(conn: psycopg.Connection, escrow_ids: list[str]) -> dict[str, str | None]:
    return dict(conn.execute("SELECT escrow_id, creator FROM rec.escrow WHERE escrow_id = ANY(%s)",
                             (sorted(set(escrow_ids)),)).fetchall())


def _displaced(c: _Evidence, escrow_id: str, nonce: int, why: str, kept_at: str) -> tuple:
    """The quarantine tuple of a stored record that another one replaces: under the file and line it came from,
    with its record as the raw line, as if it had come after the kept one."""
    source, line, raw = c.row
    return (source, line, "signed_diff", _one_line(f"{c.where}: signed_diff escrow {escrow_id} nonce {nonce} was "
                                                   f"stored, then replaced: {why}; kept {kept_at}"), raw)


def _key(escrow_id: str, signed: tuple) -> tuple:
    """What tells two records' evidence apart: their signed message and user signature."""
    try:
        d = stored_diff(escrow_id, 0, *signed)
        return d.content, d.user_sig
    except StoredDiffError:  # no signed message: its own columns tell it apart (and it never passes)
        return b"\xff" + repr(signed).encode("utf-8"), b""


def _add(candidates: list[_Evidence], escrow_id: str, signed: tuple, where: str, line: int | None,
         row: tuple | None = None) -> None:
    """Add a line of the batch (``line``) or the stored record (``line`` None, its ``row``) to its key's
    candidates."""
    key = _key(escrow_id, signed)
    same = next((c for c in candidates if c.key == key), None)
    if same is None:
        candidates.append(_Evidence(key, signed, where, [] if line is None else [line], stored=line is None, row=row))
    elif line is None:
        same.stored, same.where, same.row = True, where, row
    else:
        same.lines.append(line)


def _decide(escrow_id: str, creator: str | None, candidates: list[_Evidence]) -> tuple[_Evidence, dict]:
    """The evidence kept of two or more for one diff, and each candidate's signed-check failure (when the creator
    is known)."""
    failures = {id(c): creator_signed(escrow_id, creator, *c.signed) for c in candidates} if creator else {}
    passing = [c for c in candidates if creator and failures[id(c)] is None]
    return min(passing or candidates, key=lambda c: c.key), failures


# the open quarantine rows of lines that lost while their escrow's creator was not loaded (the reason _why gives)
UNCHECKED = "the escrow's creator is not loaded, so no signature could be checked"
_UNCHECKED = """
SELECT q.source_id, q.line, q.raw, s.uri FROM rec.quarantine q JOIN rec.source s USING (source_id)
WHERE q.resolved_at IS NULL AND q.kind = 'signed_diff' AND strpos(q.reason, %(marker)s) > 0
ORDER BY q.source_id, q.line
"""
# the stored record replaced by a line read back from the quarantine, its previous content kept as history
_REPLACE = """
WITH old AS (
  SELECT to_jsonb(t) - 'epoch_index' AS previous FROM rec.signed_diff t
  WHERE t.escrow_id = %(escrow_id)s AND t.nonce = %(nonce)s
), history AS (
  INSERT INTO rec.amendment (kind, record_key, previous, source_id, line)
  SELECT 'signed_diff', jsonb_build_array(%(escrow_id)s::text, %(nonce)s::bigint), previous, %(source_id)s, %(line)s
  FROM old
)
UPDATE rec.signed_diff SET (content, user_sig, post_state_root, state_hash, source_host, extra, source_id, source_line,
                            revision, amended_at) =
  (%(content)s, %(user_sig)s, %(post_state_root)s, %(state_hash)s, %(source_host)s, %(extra)s, %(source_id)s,
   %(line)s, revision + 1, now())
WHERE escrow_id = %(escrow_id)s AND nonce = %(nonce)s
"""
_RESOLVE = """
UPDATE rec.quarantine q SET resolved_at = now(), resolved_source_id = e.source_id, resolved_line = e.source_line
FROM rec.escrow e WHERE e.escrow_id = %(escrow_id)s AND q.source_id = %(source_id)s AND q.line = %(line)s
"""


def recheck_stored(conn: psycopg.Connection, escrow_ids: list[str]) -> list[str]:
    """After escrow records were written (caller's transaction): the diffs of those escrows whose records were
    chosen between while the creator was not loaded are chosen between again, with the signature. A line read back
    from the quarantine that wins replaces the stored record (history in rec.amendment; its quarantine row is marked
    resolved by the escrow's line) and the stored one is quarantined under its own file and line. Returns the
    escrows whose stored diffs changed (for the caller to mark). One query while no such line is open."""
    wanted, waiting = set(escrow_ids), {}
    for source_id, line, raw, uri in conn.execute(_UNCHECKED, {"marker": UNCHECKED}).fetchall():
        rec = _record(raw)
        if rec is not None and rec["escrow_id"] in wanted:
            waiting.setdefault((rec["escrow_id"], rec["nonce"]), []).append((source_id, line, rec, f"{uri}:{line}"))
    if not waiting:
        return []
    creators = _creators(conn, [k[0] for k in waiting])
    stored = {(r[0], r[1]): r for r in _stored(conn, sorted(waiting))}
    changed = []
    for (escrow_id, nonce), lost in sorted(waiting.items()):
        creator = creators.get(escrow_id)
        if not creator or (escrow_id, nonce) not in stored:
            continue
        _, _, *signed, where, row = stored[(escrow_id, nonce)]
        candidates: list[_Evidence] = []
        _add(candidates, escrow_id, tuple(signed), where, None, row)
        for source_id, line, rec, at in lost:
            c = _Evidence(_key(escrow_id, tuple(rec.get(f) for f in SIGNED)), tuple(rec.get(f) for f in SIGNED), at,
                          [], row=(source_id, line, rec))
            if all(c.key != other.key for other in candidates):
                candidates.append(c)
        kept, failures = _decide(escrow_id, creator, candidates)
        if kept.stored:
            continue
        old = next(c for c in candidates if c.stored)
        why = _why(creator, failures.get(id(old)))
        source_id, line, rec = kept.row
        log.warning("signed_diff escrow %s nonce %s: the stored record from %s is replaced by the one at %s, "
                    "chosen again now that its escrow's creator is loaded (%s)", escrow_id, nonce, old.where,
                    kept.where, why)
        extra = {k: v for k, v in rec.items() if k != "kind" and k not in KINDS["signed_diff"].columns}
        conn.execute(_REPLACE, {"escrow_id": escrow_id, "nonce": nonce, "source_id": source_id, "line": line,
                                "source_host": rec.get("source_host"), "extra": orjson.dumps(extra).decode() if extra
                                else None, **{f: rec.get(f) for f in SIGNED}})
        conn.execute(_RESOLVE, {"escrow_id": escrow_id, "source_id": source_id, "line": line})
        conn.execute("INSERT INTO rec.quarantine (source_id, line, kind, reason, raw) VALUES (%s, %s, %s, %s, %s) "
                     "ON CONFLICT (source_id, line) DO NOTHING", _displaced(old, escrow_id, nonce, why,
                                                                            "the record at " + kept.where))
        changed.append(escrow_id)
    return changed


def _record(raw: str | None) -> dict | None:
    """A quarantined signed_diff line read back: the record, with its key as the loader types it, or None."""
    try:
        rec = orjson.loads(raw or "")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("escrow_id"), (str, int)):
        return None
    try:
        nonce = int(rec.get("nonce"))
    except (TypeError, ValueError):
        return None
    if not all(rec.get(f) is None or isinstance(rec.get(f), str) for f in (*SIGNED, "source_host")):
        return None
    return {**rec, "escrow_id": str(rec["escrow_id"]), "nonce": nonce}


def _why(creator: str | None, failure: str | None) -> str:
    """Why a record was not kept."""
    if creator is None:
        return (f"{UNCHECKED}: of records whose signed bytes differ, the one whose bytes sort first is kept")
    if failure is not None:
        return f"its user signature does not pass ({failure})"
    return "the creator signed both: of records whose signed bytes differ, the one whose bytes sort first is kept"


def _one_line(text: str) -> str:
    """A reason as stored: on one line (it quotes peer data) and at most :data:`MAX_REASON` characters."""
    flat = " ".join(printable(text.encode("utf-8", "replace")).split())
    return flat if len(flat) <= MAX_REASON else flat[:MAX_REASON - 1] + "…"
