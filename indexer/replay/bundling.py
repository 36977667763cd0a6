"""One escrow's stored evidence (:class:`indexer.replay.material.Material`) as an evidence bundle: the one way the
verification stage and ``indexer evidence`` build it, so the stage and a third party running ``python -m
indexer.verify`` on the exported file check the same bytes and decide the same way.

What the stored evidence cannot show is stated in the bundle itself, where the pure verifier
(:func:`indexer.verify.evidence.verify_bundle`) honours it: a slot whose participant's grants were read from live
values only, or not at all (``Host.grants``: a key its listed grants lack is then not checked, not failed); a stored
settlement that is unusable or missing (``settlement_missing``: the bundle carries none, the log is still checked, and
the settled check fails or is not made as the stored evidence shows); a settlement read without its raw transaction
(``tx_raw`` null: stops at replayed); the epoch's approved versions and max_nonce not captured as its own (a note).
"""
from __future__ import annotations

import base64
import binascii
import dataclasses

from indexer.replay.material import Material
from indexer.load import stored_diffs as stored
from indexer.verify import bundle as bd, settlement as st
from indexer.verify.inputs import session_inputs

NO_LOG = "no signed log captured"
_U64 = (1 << 64) - 1
_HOST_STATS = ("missed", "invalid", "cost", "required_validations", "completed_validations")


class Unusable(ValueError):
    """Stored evidence that cannot be read (the check it stops, the nonce when one applies, the reason). ``fails``:
    the evidence shows the check fails; False when it is only missing (the check is then not made)."""

    def __init__(self, check: str, nonce: int | None, reason: str, fails: bool = True):
        super().__init__(reason)
        self.check, self.nonce, self.reason, self.fails = check, nonce, reason, fails


def _signed_diffs(escrow_id: str, rows: list[tuple]) -> tuple[bd.SignedDiff, ...]:
    """The stored diffs as the verifier reads them (:func:`indexer.load.stored_diffs.signed_diff`)."""
    out = []
    for nonce, content, user_sig, _, root, state_hash in rows:
        try:
            out.append(stored.signed_diff(escrow_id, nonce, content, user_sig, root, state_hash))
        except stored.StoredDiffError as exc:
            raise Unusable("signed", nonce, f"rec.signed_diff escrow {escrow_id} nonce {nonce}: {exc}",
                           fails=exc.fails) from None
    return tuple(out)


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


def _count(value) -> int | None:
    """A params integer as the gateway writes it: a JSON number for 32-bit fields, a decimal string for 64-bit ones
    (``max_nonce`` is ``uint32`` in DevshardEscrowParams today, a string if it becomes 64-bit); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= _U64 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and int(value) <= _U64:
        return int(value)
    return None


def _settlement(m: Material) -> tuple[bd.Settlement | None, str | None]:
    """The bundle's settlement, and a note when the approved versions or max_nonce were not captured."""
    row = m.settlement
    if row is None:
        return None, None
    note = None
    params = m.params if isinstance(m.params, dict) else {}
    versions = params.get("approved_versions")
    max_nonce = _count(params.get("max_nonce"))
    if not isinstance(versions, list) or max_nonce is None:
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
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    source = extra.get("msg_source") if tx_raw is None and isinstance(extra.get("msg_source"), str) else None
    return bd.Settlement(settle_msg_bytes(row), max_nonce=max_nonce, approved_versions=names,
                         tx_hash=row.get("tx_hash"), height=row.get("height"), tx_raw=tx_raw,
                         read_from=None if source is None else note_text(source)), note


def escrow_bundle(m: Material) -> bd.Bundle:
    """``m`` as an evidence bundle (no penalties), with a note on what could not be checked; :class:`Unusable` when
    the log is missing or unreadable, the session inputs were not captured, or the stored settlement is unusable
    (:func:`stage_bundle` then leaves it out)."""
    escrow_id = m.escrow["escrow_id"]
    if not m.diffs:
        raise Unusable("none", None, NO_LOG)
    inputs = session_inputs(m.escrow, m.params if isinstance(m.params, dict) else None)
    if isinstance(inputs, str):
        raise Unusable("none", None, inputs)
    diffs = _signed_diffs(escrow_id, m.diffs)
    settlement, note = _settlement(m)
    group = tuple(bd.Host(slot, address, tuple(m.warm_keys.get(address, ())), _grants(m, address))
                  for slot, address in enumerate(inputs.slots))
    missing = None
    if settlement is None:
        missing = bd.SettlementMissing("no settlement transaction captured"
                                       + ("" if m.escrow["settled"] else " (the escrow is not settled)"))
    return bd.Bundle(escrow_id=escrow_id, protocol_version=inputs.version, creator=inputs.creator,
                     amount=inputs.balance, group=group, config=inputs.config, diffs=diffs,
                     settlement=settlement, settlement_missing=missing, notes=(note,) if note else ())


def _grants(m: Material, address: str) -> str:
    """How the participant's grants were read (bundle.GRANTS)."""
    if address not in m.captured:
        return "none"
    return "exact" if m.captured[address] else "live"


def stage_bundle(m: Material) -> bd.Bundle:
    """``m`` as an evidence bundle (no penalties); :class:`Unusable` when the log is missing or unreadable, or the
    session inputs were not captured. A stored settlement that cannot be used is left out and its reason stated
    (``settlement_missing``): the log is still checked, and the settlement's problem counts once it passed."""
    try:
        return escrow_bundle(m)
    except Unusable as exc:
        if exc.check != "settled":
            raise
        b = escrow_bundle(dataclasses.replace(m, settlement=None))
        return dataclasses.replace(b, settlement_missing=bd.SettlementMissing(note_text(exc.reason), exc.fails))


def note_text(text: str) -> str:
    """A reason as a bundle carries it (it may quote a peer's text): one printable line of at most
    :data:`indexer.verify.bundle.MAX_NOTE` characters, so the exported file always loads."""
    line = "".join(c if c.isprintable() else " " for c in text)
    return line if len(line) <= bd.MAX_NOTE else line[:bd.MAX_NOTE - 1] + "…"
