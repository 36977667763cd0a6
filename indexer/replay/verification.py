"""The verification stage: each replayed escrow's log checked the way the protocol signs it, from the database.

For every escrow a replay chunk replays, the stored evidence (``rec.escrow`` for the session inputs,
``rec.signed_diff`` in nonce order, ``rec.settlement``, and the epoch's ``devshard_escrow_params`` for the approved
versions and ``max_nonce``) becomes an :class:`indexer.verify.bundle.Bundle`, the pure verifier
(:func:`indexer.verify.evidence.verify_bundle`) runs its three checks, and ``replay.escrow_verification`` gets one
row: the level reached, how many nonces passed, the first failing check, nonce and reason. The same bundle, with the
penalties' derivations added, is what ``indexer evidence`` hands out, so the stage and a third party check the same
bytes.

Host signatures are accepted from a slot's own address or from a warm key its participant granted, as captured for
the escrow's epoch (``rec.warm_key``); where an epoch has no grants captured, a failure where a signature recovered to
another key says so. Each row keeps a digest of the evidence
and the verifier version it was computed from: an escrow replayed again with the same evidence (a tx record changed,
``indexer replay --all``) is not re-checked, and a re-check with the same outcome leaves the row as it was, so a
re-run gives identical rows (``verified_at`` included).
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
from dataclasses import dataclass, field

import psycopg

from indexer.replay import verify_memo as vm
from indexer.replay.material import Material, load_material
from indexer.verify import bundle as bd, diff, proto as pb, settlement as st, signatures as sig
from indexer.verify.evidence import NOT_CHECKED, Report, verify_bundle
from indexer.verify.inputs import session_inputs
from indexer.replay.verifier import MAX_CRASHES, VERIFIER, VERIFIER_VERSION, is_older
from indexer.wire.diffs import signs_whole, user_signed_bytes

NO_LOG = "no signed log captured"
NO_ROOT = ("no signed root captured (neither post_state_root in the content nor a stored post_state_root or "
           "state_hash): the signed check is not made")
# A row whose checks raised instead of answering starts its failure with this (the escrow_verification_failed alert
# selects it), keeps no evidence digest and counts the crash (``crashes``): the next replay pass checks it again, up
# to MAX_CRASHES crashes in a row (indexer.replay.verifier).
VERIFIER_FAILED = "the verifier failed: "
COLD_ONLY = "no warm keys captured for the epoch, so only the slots' own addresses are accepted"
INEXACT = ("the participant's grants were read from live values, not as of the epoch's end, so they neither "
           "authorise nor refute the key: not checked")
NO_RAW_TX = ("settled not shown: the settlement was not read as broadcast (no raw transaction binds its message to "
             "tx {tx}), so the message checked may not be the one the chain settled")
MAX_SOURCES_TEXT = 200
MAX_FAILURE = 1000
_U64 = (1 << 64) - 1
log = logging.getLogger(__name__)
_HOST_STATS = ("missed", "invalid", "cost", "required_validations", "completed_validations")


class Unusable(ValueError):
    """Stored evidence that cannot be read (the check it stops, the nonce when one applies, the reason). ``fails``:
    the evidence shows the check fails; False when it is only missing (the check is then not made)."""

    def __init__(self, check: str, nonce: int | None, reason: str, fails: bool = True):
        super().__init__(reason)
        self.check, self.nonce, self.reason, self.fails = check, nonce, reason, fails


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


def _signed_diffs(escrow_id: str, rows: list[tuple]) -> tuple[bd.SignedDiff, ...]:
    """The stored diffs as the verifier reads them: the nonce each lists is the one inside its signed content (the
    row's own nonce when the content cannot be read, which the replay check then reports). Content served as
    ``DiffContent{nonce, txs}`` is signed with the escrow id and the signed root appended; where the serving build
    left that omitempty root out, the host's ``state_hash`` stands in, as the poller's check takes it
    (:func:`indexer.poller.decode.check_signed`): the signature decides."""
    out = []
    for nonce, content, user_sig, _, root, state_hash in rows:
        where = f"rec.signed_diff escrow {escrow_id} nonce {nonce}"
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise Unusable("signed", nonce, f"{where}: content is not base64") from None
        if not user_sig:
            raise Unusable("signed", nonce, f"{where}: no user signature captured")
        parsed = _content_of(_fields(data))
        if parsed is None or not signs_whole(parsed.escrow_id, parsed.post_state_root, parsed.sealed_inference_ids):
            signed_root = root or state_hash
            if not signed_root and parsed is not None:
                # the user signed the content with its root appended: without one the check cannot be made, and
                # evidence that is only missing is not a failure (the poller does not store such a diff)
                raise Unusable("signed", nonce, f"{where}: {NO_ROOT}", fails=False)
            data = user_signed_bytes(data, escrow_id, bytes.fromhex(signed_root or ""))  # hex: checked at load
        if parsed is not None:  # the appended fields 3 and 4 change neither the nonce nor whether the content reads
            nonce = parsed.nonce
        out.append(bd.SignedDiff(nonce, data, bytes.fromhex(user_sig)))
    return tuple(out)


def _fields(data: bytes) -> list | None:
    """The content's fields, parsed once for both questions asked of it; None when unreadable (the diff is then
    listed under the row's nonce and the checks report it)."""
    try:
        return pb.fields(data)
    except pb.ProtoError:
        return None


def _content_of(fields: list | None):
    """The parsed DiffContent of :func:`_fields`, None when it does not read as one."""
    if fields is None:
        return None
    try:
        return diff.content_of(fields)
    except (diff.DiffError, pb.ProtoError):  # e.g. a truncated packed varint in field 5: the replay names it
        return None


def _bytes(row: dict, name: str) -> bytes:
    value = row.get(name)
    return b"" if value is None else bytes.fromhex(value)


def settle_msg_bytes(row: dict) -> bytes:
    """The settlement's ``MsgSettleDevshardEscrow`` bytes: as captured, or re-encoded from its stored fields (the
    deterministic serialization, :func:`indexer.verify.settlement.encode_settle_msg`) when the bytes were not."""
    where = f"rec.settlement escrow {row['escrow_id']}"
    if row.get("msg") is not None:
        try:
            return base64.b64decode(row["msg"], validate=True)
        except (binascii.Error, ValueError):
            raise Unusable("settled", None, f"{where}: msg is not base64") from None
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    if extra.get("msg_unreadable") is not None:  # the transaction was read and carries no readable settlement
        raise Unusable("settled", None, f"{where}: the settlement transaction {row.get('tx_hash')} carries no "
                                        f"readable settlement: {extra['msg_unreadable']}")
    missing = [k for k in ("settler", "nonce", "fees", "state_root_and_protocol_version") if row.get(k) is None]
    if missing:  # null is not zero: a field not captured is not re-encoded as its default
        raise Unusable("settled", None, f"{where}: no message bytes, and not captured: {', '.join(missing)}",
                       fails=False)
    try:
        stats = row.get("host_stats") or {}
        signatures = row.get("signatures") or {}
        msg = st.SettleMsg(
            settler=row["settler"], escrow_id=int(row["escrow_id"]), state_root=_bytes(row, "state_root"),
            nonce=int(row["nonce"]), rest_hash=_bytes(row, "rest_hash"), fees=int(row["fees"]),
            version=row["state_root_and_protocol_version"],
            host_stats=[st.HostStatsEntry(int(slot), *(int(stats[slot][k]) for k in _HOST_STATS))
                        for slot in sorted(stats, key=int)],
            signatures=[st.SlotSignature(int(slot), bytes.fromhex(signatures[slot]))
                        for slot in sorted(signatures, key=int)])
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise Unusable("settled", None, f"{where}: its fields cannot be re-encoded ({exc!r})", fails=False) from None
    return st.encode_settle_msg(msg)


def _settlement(m: Material) -> tuple[bd.Settlement | None, str | None]:
    """The bundle's settlement, and a note when the approved versions or max_nonce were not captured."""
    row = m.settlement
    if row is None:
        return None, None
    note = None
    params = m.params if isinstance(m.params, dict) else {}
    versions = params.get("approved_versions")
    max_nonce = params.get("max_nonce")
    if not isinstance(versions, list) or not isinstance(max_nonce, int):
        why = m.params_gap or (f"no devshard_escrow_params with them captured for epoch "
                               f"{m.escrow['epoch_index']}")
        note = f"the approved versions and max_nonce were not checked: {why}"
        versions, max_nonce = [], _U64
    names = tuple(str(v["name"]) for v in versions if isinstance(v, dict) and v.get("name") is not None)
    tx_raw = None
    if row.get("tx_raw") is not None:
        try:
            tx_raw = base64.b64decode(row["tx_raw"], validate=True)
        except (binascii.Error, ValueError):
            raise Unusable("settled", None, f"rec.settlement escrow {row['escrow_id']}: tx_raw is not base64") \
                from None
    return bd.Settlement(settle_msg_bytes(row), max_nonce=max_nonce, approved_versions=names,
                         tx_hash=row.get("tx_hash"), height=row.get("height"), tx_raw=tx_raw), note


def escrow_bundle(m: Material) -> tuple[bd.Bundle, str | None]:
    """``m`` as an evidence bundle (no penalties) and a note on what could not be checked; :class:`Unusable` when
    the log is missing or unreadable, or the session inputs were not captured."""
    escrow_id = m.escrow["escrow_id"]
    if not m.diffs:
        raise Unusable("none", None, NO_LOG)
    inputs = session_inputs(m.escrow, m.params if isinstance(m.params, dict) else None)
    if isinstance(inputs, str):
        raise Unusable("none", None, inputs)
    diffs = _signed_diffs(escrow_id, m.diffs)
    settlement, note = _settlement(m)
    group = tuple(bd.Host(slot, address, tuple(m.warm_keys.get(address, ())))
                  for slot, address in enumerate(inputs.slots))
    return bd.Bundle(escrow_id=escrow_id, protocol_version=inputs.version, creator=inputs.creator,
                     amount=inputs.balance, group=group, config=inputs.config, diffs=diffs,
                     settlement=settlement), note


def _nonces_checked(report: Report, diffs: tuple[bd.SignedDiff, ...]) -> int:
    """The diffs that passed every check made on them: those before the failing nonce, or all of them."""
    if report.failed_step in ("signed", "replayed") and report.failure is not None:
        outcome = next(s.outcome for s in report.steps if s.name == report.failed_step)
        if outcome != NOT_CHECKED:
            return 0 if report.failed_nonce is None else sum(1 for d in diffs if d.nonce < report.failed_nonce)
    return len(diffs)


def _grant_gap(report: Report, m: Material) -> str | None:
    """Why a host signature by a key not known to be the slot's does not fail the check, or None when it does: the
    slot's participant's grants are not captured yet (mainnet hosts sign with warm keys; loading the grants re-checks
    the escrow), or were read from live values only."""
    if report.unknown_signer is None:
        return None
    participant = report.unknown_signer[0]
    if participant not in m.captured:
        return COLD_ONLY
    return None if m.captured[participant] else INEXACT


def verify_material(m: Material) -> Verification:
    """The verification row of one escrow from its stored evidence."""
    e, s = m.escrow, m.settlement or {}
    sources = ", ".join(sorted({row[3] for row in m.diffs if row[3]}))
    row = dict(escrow_id=e["escrow_id"], epoch_index=e["epoch_index"], protocol_version=e["protocol_version"],
               source_host=sources[:MAX_SOURCES_TEXT] or None, settlement_tx_hash=s.get("tx_hash"),
               settlement_height=s.get("height"))
    try:
        b, note, settle_problem = _bundle(m)
    except Unusable as exc:
        check = None if exc.check == "none" or not exc.fails else exc.check
        return Verification(level="none", nonces_checked=0, failed_check=check, failed_nonce=exc.nonce,
                            failure=exc.reason, **row)
    links = vm.chain_links((VERIFIER, e["escrow_id"], e["creator"], e["protocol_version"]), m.diffs)
    recoveries = vm.reusable(m.memo, links)
    try:
        report = verify_bundle(b, recoveries)
    except Exception as exc:  # noqa: BLE001 - served bytes are untrusted: a verifier bug must not stop the replay
        log.exception("verifying escrow %s", e["escrow_id"])
        return Verification(level="none", nonces_checked=0, failed_check=None, failed_nonce=None,
                            failure=_bounded(f"{VERIFIER_FAILED}{type(exc).__name__}: {exc}"), crashed=True, **row)
    level, failed_check, failure = report.level, None, None
    if report.failure is not None:
        outcome = next(step.outcome for step in report.steps if step.name == report.failed_step)
        # not a failure while the key may be a warm key whose grant is not captured (or not exactly): the level
        # says how far it got
        gap = _grant_gap(report, m)
        failed_check = None if outcome == NOT_CHECKED or gap else report.failed_step
        failure = report.failure if gap is None else f"{report.failure} ({gap})"
        if report.failed_step == "settled" and b.settlement is None:
            failure = "no settlement transaction captured" + ("" if e["settled"] else " (the escrow is not settled)")
            if settle_problem is not None:  # the log passed: now the stored settlement's own problem counts
                failed_check = "settled" if settle_problem.fails else None
                failure = settle_problem.reason
    if level == "settled" and b.settlement.tx_raw is None:  # its message is only as the REST rendering gave it
        level, failure = "replayed", _no_raw_tx(m.settlement)
    if note is not None and b.settlement is not None and report.level == "settled":
        failure = note if failure is None else f"{failure}; {note}"
    checked = _nonces_checked(report, b.diffs)
    return Verification(level=level, nonces_checked=checked,
                        failed_check=failed_check, failed_nonce=report.failed_nonce if failed_check else None,
                        failure=None if failure is None else _bounded(failure), **row,
                        **_kept(recoveries, links, min(checked, len(links))))


def _kept(recoveries: sig.Recoveries, links: list[bytes], prefix: int) -> dict:
    """The memo columns: the chain over the first ``prefix`` stored diffs (those that passed every check made on
    them) and the recoveries this verification asked for; none when nothing passed."""
    counts = {"recovered": recoveries.recovered, "reused": recoveries.reused}
    packed = vm.pack(recoveries.kept()) if prefix else None
    if packed is None:
        return counts
    return {"prefix_nonces": prefix, "prefix_chain": links[prefix - 1], "prefix_signers": packed[0],
            "prefix_recoveries": packed[1], **counts}


def _bundle(m: Material) -> tuple[bd.Bundle, str | None, Unusable | None]:
    """:func:`escrow_bundle`, and when only the stored settlement is unusable, the bundle without it and why: the
    log is still checked, and the settlement's problem is reported once the signed and replayed checks pass."""
    try:
        return (*escrow_bundle(m), None)
    except Unusable as exc:
        if exc.check != "settled":
            raise
        b, note = escrow_bundle(dataclasses.replace(m, settlement=None))
        return b, note, exc


def _no_raw_tx(row: dict) -> str:
    """Why a settlement with no raw transaction stops at replayed (with what the capture said of its source)."""
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    source = extra.get("msg_source")
    return NO_RAW_TX.format(tx=row.get("tx_hash") or "(hash not given)") + (f"; read from: {source}" if source else "")


def _bounded(text: str) -> str:
    """A failure as stored: reasons quote served data, so they are cut at :data:`MAX_FAILURE` characters."""
    return text if len(text) <= MAX_FAILURE else text[:MAX_FAILURE - 1] + "…"


_COLUMNS = ("escrow_id", "epoch_index", "level", "nonces_checked", "failed_check", "failed_nonce", "failure",
            "source_host", "protocol_version", "settlement_tx_hash", "settlement_height", "prefix_nonces",
            "prefix_chain", "prefix_signers", "prefix_recoveries", "evidence_digest", "verifier", "crashes")
_CONTENT = _COLUMNS[1:]
_UPSERT = f"""
INSERT INTO replay.escrow_verification AS v ({', '.join(_COLUMNS)}, verified_at)
VALUES ({', '.join(f'%({c})s' for c in _COLUMNS)}, now())
ON CONFLICT (escrow_id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in _CONTENT)},
  verified_at = excluded.verified_at
WHERE ({', '.join(f'v.{c}' for c in _CONTENT)}) IS DISTINCT FROM ({', '.join(f'excluded.{c}' for c in _CONTENT)})
"""


# The verifier's identity (VERIFIER: its version and a hash of the checks' source, indexer.replay.verifier) is stored
# in every row: a row of a lower version is checked again (replay_dirty marks them), a row of a higher one is left
# alone while its evidence is unchanged (a process on older code does not undo a newer one's work).
# What the checks read, per escrow, hashed by the server (the diffs' content never travels for an unchanged escrow).
# Each part is a row's text or 'null', so a part that is missing cannot pass for another; each diff enters as the md5
# of its row (32 characters), so the text hashed grows by 32 bytes a diff, not by the diff's content.
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
            FROM rec.warm_key w WHERE w.epoch_index = e.epoch_index AND w.participant = ANY(e.slots)), 'null'))),
  v.evidence_digest, v.verifier, v.crashes
FROM rec.escrow e LEFT JOIN replay.escrow_verification v ON v.escrow_id = e.escrow_id
WHERE e.escrow_id = ANY(%(ids)s)
"""


def verify_escrows(conn: psycopg.Connection, ids: list[str]) -> list[Verification]:
    """Verify those of the escrows ``ids`` whose evidence (or the verifier) changed since their row was written, and
    write their rows (caller's transaction). Returns the rows computed; the others are left as they were."""
    changed, crashes = {}, {}
    for eid, digest, stored, by, crashed in conn.execute(_DIGESTS, {"ids": ids}):
        if digest != stored or is_older(by, VERIFIER_VERSION):
            changed[eid], crashes[eid] = digest, crashed or 0
    if not changed:
        return []
    results = [_counted(verify_material(m), crashes[eid])
               for eid, m in load_material(conn, sorted(changed), memo=True).items()]
    with conn.cursor() as cur:
        cur.executemany(_UPSERT, [{**{c: getattr(r, c, None) for c in _COLUMNS},
                                   "evidence_digest": None if r.crashed else changed[r.escrow_id],
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
