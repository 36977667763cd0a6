"""The verification stage: each replayed escrow's log checked the way the protocol signs it, from the database.

For every escrow a replay chunk replays, the stored evidence (``rec.escrow`` for the session inputs,
``rec.signed_diff`` in nonce order, ``rec.settlement``, and the epoch's ``devshard_escrow_params`` for the approved
versions and ``max_nonce``) becomes an :class:`indexer.verify.bundle.Bundle`, the pure verifier
(:func:`indexer.verify.evidence.verify_bundle`) runs its three checks, and ``replay.escrow_verification`` gets one
row: the level reached, how many nonces passed, the first failing check, nonce and reason. The same bundle, with the
penalties' derivations added, is what ``indexer evidence`` hands out, so the stage and a third party check the same
bytes.

The replay and the rules read the tx records (``rec.start_tx`` … ``rec.error_miss_tx``), not the diffs, so a row's
level holds for the findings only while the records are the log's own txs: once the log reaches ``signed`` or more,
the txs the replay check decoded (no second decode, no extra recovery) are compared with the escrow's records
(:mod:`indexer.verify.txrecords`). A contradiction (a field that differs, a record of a tx the log does not have, a tx
of the log with no record) makes the level ``none`` with ``failed_check`` :data:`RECORDS`, the first contradicting
nonce and what differs, and the level the log alone reached. When the replay stopped at a nonce, records from that
nonce on are not compared (the log there is not one the protocol accepts, and the row says so already); when no
replay was made (the version's rules are not ported), every diff is decoded without recovering signatures.

Host signatures are accepted from a slot's own address or from a warm key its participant granted, as captured for
the escrow's epoch (``rec.warm_key``); a signature by another key is not checked (not failed) while the participant's
grants are not captured, or only from live values, and says so. Each row keeps a digest of the evidence (the compared
columns of the tx records included) and the verifier that computed it: an escrow replayed again with the same
evidence (``indexer replay --all``, a finish record's response payload added) is not re-checked, and a re-check with
the same outcome leaves the row as it was, so a re-run gives identical rows (``verified_at`` included).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import psycopg

from indexer.replay import verify_memo as vm
from indexer.replay.bundling import Unusable, stage_bundle
from indexer.replay.material import Material, load_material, record_columns
from indexer.replay.verifier import MAX_CRASHES, VERIFIER, VERIFIER_VERSION, is_older, retry_delay, waits
from indexer.verify import bundle as bd, signatures as sig, txrecords as txr
from indexer.verify.evidence import NOT_CHECKED, PASS, Report, verify_bundle

# A row whose checks raised instead of answering starts its failure with this (the escrow_verification_failed alert
# selects it), keeps no evidence digest, counts the crash (``crashes``) and keeps the digest it crashed on
# (``crash_digest``): a later replay pass checks it again once its ``retry_after`` has passed, up to MAX_CRASHES
# crashes in a row (indexer.replay.verifier.retry_delay).
VERIFIER_FAILED = "the verifier failed: "
# the check a row fails when the tx records the replay read contradict its verified log (indexer.verify.txrecords)
RECORDS = "records"
MAX_SOURCES_TEXT = 200
MAX_FAILURE = 1000
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verification:
    escrow_id: str
    epoch_index: int | None
    level: str
    nonces_checked: int
    failed_check: str | None
    failed_nonce: int | None
    failure: str | None
    source_host: str | None
    protocol_version: str | None
    settlement_tx_hash: str | None
    settlement_height: int | None
    crashed: bool = False  # the checks raised instead of answering (failure starts with VERIFIER_FAILED)
    crashes: int = 0  # consecutive crashed verifications of the escrow, this one included
    # the recoveries kept for the next verification (indexer.replay.verify_memo): internal, not in the api view
    prefix_nonces: int = 0
    prefix_chain: bytes | None = None
    prefix_signers: list[str] | None = None
    prefix_recoveries: bytes | None = None
    recovered: int = field(default=0, compare=False)  # secp256k1 recoveries this verification made
    reused: int = field(default=0, compare=False)  # signatures answered from the kept recoveries


def _nonces_checked(report: Report, diffs: tuple[bd.SignedDiff, ...]) -> int:
    """The diffs that passed every check made on them: those before the failing nonce, or all of them. A signature
    by a key the slot's grants may yet authorise (not checked) still stops the count at its nonce."""
    if report.failed_step in ("signed", "replayed") and report.failure is not None:
        outcome = next(s.outcome for s in report.steps if s.name == report.failed_step)
        if outcome != NOT_CHECKED or report.unknown_signer is not None:
            return 0 if report.failed_nonce is None else sum(1 for d in diffs if d.nonce < report.failed_nonce)
    return len(diffs)


def verify_material(m: Material) -> Verification:
    """The verification row of one escrow from its stored evidence: the verifier's report on its bundle
    (:func:`indexer.replay.bundling.stage_bundle`), a check not made never counted as failed."""
    e, s = m.escrow, m.settlement or {}
    sources = ", ".join(sorted({row[3] for row in m.diffs if row[3]}))
    row = dict(escrow_id=e["escrow_id"], epoch_index=e["epoch_index"], protocol_version=e["protocol_version"],
               source_host=sources[:MAX_SOURCES_TEXT] or None, settlement_tx_hash=s.get("tx_hash"),
               settlement_height=s.get("height"))
    try:
        b = stage_bundle(m)
    except Unusable as exc:
        check = None if exc.check == "none" or not exc.fails else exc.check
        return Verification(level="none", nonces_checked=0, failed_check=check, failed_nonce=exc.nonce,
                            failure=exc.reason, **row)
    links = vm.chain_links((VERIFIER, e["escrow_id"], e["creator"], e["protocol_version"]), m.diffs)
    recoveries = vm.reusable(m.memo, links)
    applied: dict[int, list[dict]] = {}
    try:
        report = verify_bundle(b, recoveries, seen=applied.__setitem__)
    except Exception as exc:  # noqa: BLE001 - served bytes are untrusted: a verifier bug must not stop the replay
        log.exception("verifying escrow %s", e["escrow_id"])
        return Verification(level="none", nonces_checked=0, failed_check=None, failed_nonce=None,
                            failure=_bounded(f"{VERIFIER_FAILED}{type(exc).__name__}: {exc}"), crashed=True, **row)
    failed_check, failure = None, report.failure
    if report.failure is not None:
        outcome = next(step.outcome for step in report.steps if step.name == report.failed_step)
        failed_check = None if outcome == NOT_CHECKED else report.failed_step
    if b.notes and report.level == "settled":
        failure = "; ".join((*([failure] if failure else []), *b.notes))
    checked = _nonces_checked(report, b.diffs)
    level, failed_nonce = report.level, report.failed_nonce if failed_check else None
    if level != "none" and m.records is not None:
        found, reason = _records_check(b, report, applied, m.records)
        if found is not None:  # the findings rest on records that are not the log's txs: none of its level
            level, failed_check, failed_nonce = "none", RECORDS, found.nonce
            failure = f"{reason} (the signed log alone reaches {report.level}{': ' + failure if failure else ''})"
        elif reason is not None:
            failure = "; ".join((*([failure] if failure else []), reason))
    return Verification(level=level, nonces_checked=checked, failed_check=failed_check, failed_nonce=failed_nonce,
                        failure=None if failure is None else _bounded(failure), **row,
                        **_kept(recoveries, links, min(checked, len(links))))


def _records_check(b: bd.Bundle, report: Report, applied: dict[int, list[dict]],
                   records: list[txr.Entry]) -> tuple[txr.Contradiction | None, str | None]:
    """(the first contradiction between the tx records and the signed log, with the reason to store; or None and
    why no comparison was made, or None twice when they agree). The log is what the replay applied: up to the nonce
    it stopped at, or every diff when it was not made (the rules of the version are not ported)."""
    replay = next(s for s in report.steps if s.name == "replayed")
    below = report.failed_nonce if report.failed_step == "replayed" else None
    unreplayed = replay.outcome != PASS and below is None
    try:
        log = txr.log_entries(b, None if unreplayed else applied)
    except ValueError as exc:
        return None, f"tx records not compared with the signed log: {exc}"
    found = txr.contradictions(log, records, below)
    if not found:
        return None, None
    more = f" ({len(found) - 1} more disagreements)" if len(found) > 1 else ""
    return found[0], f"the tx records are not the signed log's txs: {found[0].reason}{more}"


def _kept(recoveries: sig.Recoveries, links: list[bytes], prefix: int) -> dict:
    """The memo columns: the chain over the first ``prefix`` stored diffs (those that passed every check made on
    them) and the recoveries this verification asked for; none when nothing passed."""
    counts = {"recovered": recoveries.recovered, "reused": recoveries.reused}
    packed = vm.pack(recoveries.kept()) if prefix else None
    if packed is None:
        return counts
    return {"prefix_nonces": prefix, "prefix_chain": links[prefix - 1], "prefix_signers": packed[0],
            "prefix_recoveries": packed[1], **counts}


def _bounded(text: str) -> str:
    """A failure as stored: reasons quote served data, so they are cut at :data:`MAX_FAILURE` characters."""
    return text if len(text) <= MAX_FAILURE else text[:MAX_FAILURE - 1] + "…"


_COLUMNS = ("escrow_id", "epoch_index", "level", "nonces_checked", "failed_check", "failed_nonce", "failure",
            "source_host", "protocol_version", "settlement_tx_hash", "settlement_height", "prefix_nonces",
            "prefix_chain", "prefix_signers", "prefix_recoveries", "evidence_digest", "verifier", "crashes",
            "crash_digest")
_CONTENT = (*_COLUMNS[1:], "retry_after")
# retry_in: seconds until a crashed row may be checked again (indexer.replay.verifier.retry_delay), else null
_UPSERT = f"""
INSERT INTO replay.escrow_verification AS v ({', '.join(_COLUMNS)}, retry_after, verified_at)
VALUES ({', '.join(f'%({c})s' for c in _COLUMNS)},
        now() + make_interval(secs => %(retry_in)s::integer), now())
ON CONFLICT (escrow_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _CONTENT)},
  verified_at = excluded.verified_at
WHERE ({', '.join(f'v.{c}' for c in _CONTENT)}) IS DISTINCT FROM ({', '.join(f'excluded.{c}' for c in _CONTENT)})
"""


# The verifier's identity (VERIFIER: its version and a hash of the checks' source, indexer.replay.verifier) is stored
# in every row: a row of a lower version is checked again (replay_dirty marks them), a row of a higher one is left
# alone while its evidence is unchanged (a process on older code does not undo a newer one's work).
# What the checks read, per escrow, hashed by the server (the diffs' content never travels for an unchanged escrow).
# Each part is a row's text or 'null', so a part that is missing cannot pass for another; each diff and each tx record
# enters as the md5 of its row (32 characters), so the text hashed grows by 32 bytes a row, not by the row's content.
_DIGESTS = """
SELECT e.escrow_id, md5(concat_ws(E'\\n',
  row(e.epoch_index, e.slots, e.vote_threshold_factor, e.protocol_version, e.settled, e.creator, e.amount,
      e.token_price, e.create_devshard_fee, e.fee_per_nonce, e.inference_seal_grace_nonces,
      e.inference_seal_grace_seconds, e.auto_seal_every_n_nonces, e.execution_timeout)::text,
  coalesce((SELECT string_agg(md5(row(d.nonce, d.content, d.user_sig, d.source_host, d.post_state_root,
                                      d.state_hash)::text), '' ORDER BY d.nonce)
            FROM rec.signed_diff d WHERE d.escrow_id = e.escrow_id AND d.epoch_index = e.epoch_index), 'null'),
  coalesce((SELECT row(s.tx_hash, s.height, s.settler, s.state_root, s.rest_hash, s.nonce, s.fees,
                       s.state_root_and_protocol_version, s.host_stats, s.signatures, s.msg, s.tx_raw,
                       s.extra)::text
            FROM rec.settlement s WHERE s.escrow_id = e.escrow_id AND s.epoch_index = e.epoch_index), 'null'),
  coalesce((SELECT row(p.devshard_escrow_params, p.params_exact)::text FROM rec.epoch_params p
            WHERE p.epoch_index = e.epoch_index), 'null'),
  coalesce((SELECT (ep.end_height IS NOT NULL)::text FROM rec.epoch ep WHERE ep.epoch_index = e.epoch_index),
           'null'),
  coalesce((SELECT string_agg(row(w.participant, w.grantee, w.read_exact)::text, E'\\n'
                              ORDER BY w.participant, w.grantee)
            FROM rec.warm_key w WHERE w.epoch_index = e.epoch_index AND w.participant = ANY(e.slots)), 'null'),
  CASE WHEN EXISTS (SELECT 1 FROM rec.signed_diff d WHERE d.escrow_id = e.escrow_id AND d.epoch_index = e.epoch_index)
       THEN concat_ws(E'\\n', {records}) ELSE 'no log' END)),
  v.evidence_digest, v.verifier, v.crashes, v.crash_digest, v.retry_after IS NULL OR v.retry_after <= now()
FROM rec.escrow e LEFT JOIN replay.escrow_verification v ON v.escrow_id = e.escrow_id
WHERE e.escrow_id = ANY(%(ids)s)
"""


def _records_digest(kind: str) -> str:
    """The part of the digest one tx table gives: the md5 of each of the escrow's rows (the columns compared with
    the log), in key order, so a changed, added or removed record verifies the escrow again. Only an escrow with a
    signed log reads them: without one there is nothing to compare them with."""
    table, slot, columns = record_columns(kind)
    return (f"coalesce((SELECT string_agg(md5(row(t.inference_id, {slot}, {', '.join(columns)})::text), '' "
            f"ORDER BY t.inference_id, {slot}) FROM {table} t "
            f"WHERE t.escrow_id = e.escrow_id AND t.epoch_index = e.epoch_index), 'null')")


_DIGESTS = _DIGESTS.replace("{records}", ",\n  ".join(_records_digest(kind) for kind in txr.FIELDS))


def verify_escrows(conn: psycopg.Connection, ids: list[str]) -> list[Verification]:
    """Verify those of the escrows ``ids`` whose evidence (or the verifier) changed since their row was written, and
    write their rows (caller's transaction). Returns the rows computed; the others are left as they were. A row
    that crashed on the same evidence waits for its retry (indexer.replay.verifier.waits)."""
    changed, crashes = {}, {}
    for eid, digest, stored, by, crashed, crashed_on, due in conn.execute(_DIGESTS, {"ids": ids}):
        older = is_older(by, VERIFIER_VERSION)
        if (digest != stored or older) and (older or not waits(crashed or 0, due, digest == crashed_on)):
            changed[eid], crashes[eid] = digest, crashed or 0
    if not changed:
        return []
    results = [_counted(verify_material(m), crashes[eid])
               for eid, m in load_material(conn, sorted(changed), memo=True, records=True).items()]
    with conn.cursor() as cur:
        cur.executemany(_UPSERT, [{**{c: getattr(r, c, None) for c in _COLUMNS},
                                   "evidence_digest": None if r.crashed else changed[r.escrow_id],
                                   "crash_digest": changed[r.escrow_id] if r.crashed else None,
                                   "retry_in": retry_delay(r.crashes) if r.crashed else None,
                                   "verifier": VERIFIER}
                                  for r in results])
    return results


def _counted(r: Verification, crashed_before: int) -> Verification:
    """``r`` with its crash count: one more than the row's when it crashed again, else 0; the crash that ends the
    retries says so."""
    if not r.crashed:
        return r
    n = crashed_before + 1
    if n < MAX_CRASHES:
        return dataclasses.replace(r, crashes=n)
    return dataclasses.replace(r, crashes=n, failure=_bounded(
        f"{r.failure[:MAX_FAILURE - 120]} (crashed {n} times in a row: not retried until its evidence or the "
        f"verifier changes)"))
