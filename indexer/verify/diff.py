"""A served diff, checked the way a third party can: the user's signature over the exact ``DiffContent`` bytes the
host serves, then its txs decoded (with the address each host signature recovers to) for
:meth:`indexer.verify.apply.Session.apply`, whose root must equal the signed ``post_state_root``.

Messages (gonka-ai/gonka ``devshard/proto/devshard/v1/diff.proto`` @250ebdb3 and @27fd7d3d, ``tx.proto`` @1074652b):
``DiffContent{1 nonce, 2 txs (DevshardTx), 3 escrow_id, 4 post_state_root, 5 sealed_inference_ids}`` (field 5 only where
:attr:`indexer.verify.versions.Rules.diff_sealed_ids` says so: @250ebdb3 has it, the v5 @27fd7d3d does not);
``DevshardTx`` oneof 1 start, 2 confirm_start, 3 finish, 4 timeout, 5 validation, 6 validation_vote, 7 reveal_seed
(ignored upstream), 8 finalize_round, and from v5 9 force_height_sync_turn, 10 heartbeat, 11 height_ack (12, 13
reserved) and 14 error_miss (the number of the error-miss design, ``devshard/docs/proposals/error-finish-miss.md``
@325631c1). A host-signed tx is signed over its own deterministic bytes without the signature field
(``verifyProposerSig`` re-marshals the message the same way); a timeout vote over ``TimeoutVoteContent{1 escrow_id,
2 inference_id, 3 reason, 4 accept}``; an error-miss vote over ``ErrorMissVoteContent``, which holds the record's
response hash, so it is recovered in :mod:`indexer.verify.apply_txs`. A height ack's ``host_sig`` is the log plane's
and is not checked here (it never enters a root). The user signs ``DiffContent`` (``verifyDiffUserSig``) and must be
the escrow's creator. A member outside the version's table is refused as :class:`DiffError`, never skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from indexer.verify import proto as pb
from indexer.verify import signatures as sig
from indexer.verify.versions import rules_for

_I64 = 1 << 63
Recover = Callable[[bytes, bytes], str]  # (message, 65-byte signature) -> the signer's address


class DiffError(ValueError):
    """A served diff that cannot be checked (the message names the nonce, tx index and field)."""


@dataclass
class DiffContent:
    nonce: int = 0
    txs: list[bytes] = field(default_factory=list)  # each DevshardTx, exactly as served
    escrow_id: str = ""
    post_state_root: bytes = b""
    sealed_inference_ids: list[int] = field(default_factory=list)


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= _I64 else value


def _flat(data: bytes, where: str, schema: dict[int, tuple[str, str]]) -> dict:
    """One message level into {name: value} by ``schema`` {number: (name, kind)}; kinds u, i64, b, s, bool, and rep (a
    repeated message, kept as its list of raw bodies)."""
    out: dict = {}
    for number, wire, value in pb.fields(data):
        if number not in schema:
            raise DiffError(f"{where}: field {number} is not in this module's table")
        name, kind = schema[number]
        if (wire == pb.VARINT) != (kind in ("u", "i64", "bool")):
            raise DiffError(f"{where}: field {number} ({name}) has wire type {wire}")
        if kind == "s":
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                raise DiffError(f"{where}: field {number} ({name}) is not UTF-8") from None
        if kind == "rep":
            out.setdefault(name, []).append(value)
        else:
            out[name] = _int64(value) if kind == "i64" else bool(value) if kind == "bool" else value
    return out


_START = {1: ("inference_id", "u"), 2: ("prompt_hash", "b"), 3: ("model", "s"), 4: ("input_length", "u"),
          5: ("max_tokens", "u"), 6: ("started_at", "i64"), 7: ("observed_height", "u"),
          8: ("observed_block_hash", "b"), 9: ("protocol_version", "s")}
_CONFIRM = {1: ("inference_id", "u"), 2: ("executor_sig", "b"), 3: ("confirmed_at", "i64"),
            4: ("observed_height", "u"), 5: ("observed_block_hash", "b")}
_FINISH = {1: ("inference_id", "u"), 2: ("response_hash", "b"), 3: ("input_tokens", "u"), 4: ("output_tokens", "u"),
           5: ("executor_slot", "u"), 6: ("proposer_sig", "b"), 7: ("escrow_id", "s"), 8: ("observed_height", "u"),
           9: ("observed_block_hash", "b"), 10: ("served_hash", "b")}
_VALIDATION = {1: ("inference_id", "u"), 2: ("validator_slot", "u"), 3: ("valid", "bool"), 4: ("proposer_sig", "b"),
               5: ("escrow_id", "s")}
_VOTE = {1: ("inference_id", "u"), 2: ("voter_slot", "u"), 3: ("vote_valid", "bool"), 4: ("proposer_sig", "b"),
         5: ("escrow_id", "s")}
_TIMEOUT_VOTE = {1: ("voter_slot", "u"), 2: ("accept", "bool"), 3: ("signature", "b")}
_FORCE_TURN = {1: ("trigger_nonce", "u"), 2: ("end_nonce", "u"), 3: ("anchor_k", "u"), 4: ("slots_num", "u"),
               5: ("reason", "s")}
_HEARTBEAT = {1: ("turn_seq", "u"), 2: ("observed_height", "u"), 3: ("observed_block_hash", "b"), 4: ("slots_num", "u"),
              5: ("reason", "s"), 6: ("sync_vector", "rep")}
_HEIGHT_ACK = {1: ("turn_seq", "u"), 2: ("ref_nonce", "u"), 3: ("slot_id", "u"), 4: ("observed_height", "u"),
               5: ("observed_block_hash", "b"), 6: ("sync_state", "u"), 7: ("peer_seen", "b"), 8: ("host_sig", "b")}
_ERROR_MISS = {1: ("inference_id", "u"), 2: ("votes", "rep")}
_KINDS = {1: "start", 2: "confirm_start", 3: "finish", 4: "timeout", 5: "validation", 6: "validation_vote",
          7: "reveal_seed", 8: "finalize", 9: "force_height_sync_turn", 10: "heartbeat", 11: "height_ack",
          14: "error_miss"}
_PLAIN = {"start": _START, "confirm_start": _CONFIRM, "force_height_sync_turn": _FORCE_TURN, "heartbeat": _HEARTBEAT,
          "height_ack": _HEIGHT_ACK}


_CONTENT = {1: ("nonce", "u"), 2: ("txs", "rep"), 3: ("escrow_id", "s"), 4: ("post_state_root", "b"),
            5: ("sealed_inference_ids", "packed")}
_TIMEOUT = {1: ("inference_id", "u"), 2: ("reason", "u"), 3: ("votes", "rep")}
_BODIES = {**_PLAIN, "finish": _FINISH, "validation": _VALIDATION, "validation_vote": _VOTE, "timeout": _TIMEOUT,
           "error_miss": _ERROR_MISS}
_MEMBERS = {number: (kind, "msg") for number, kind in _KINDS.items()}


def _level_problem(data: bytes, schema: dict[int, tuple[str, str]], where: str,
                   rebuilt_from_fields: bool = False) -> tuple[str | None, list]:
    """Why one message level is not what Go's deterministic marshal writes (fields in number order, a singular field
    once, defaults left out, varints as short as they go, repeated scalars packed), or None; and its fields. A level
    that does not read, or holds a field outside ``schema`` or of another wire type, is left to the decoder, which
    names the problem; except, with ``rebuilt_from_fields``, a field outside ``schema``: the hosts build that
    message anew from the fields they know (``BuildDiffContent``), so such a field was never in what they check."""
    if not isinstance(data, bytes):  # a varint where a message belongs
        return None, []
    try:
        found = pb.fields(data)
    except pb.ProtoError:
        return None, []
    rebuilt, last = [], 0
    for number, wire, value in found:
        if number not in schema and rebuilt_from_fields:
            return f"{where}: field {number} is not in the message the hosts rebuild", found
        if number not in schema:
            return None, []
        name, kind = schema[number]
        if number < last:
            return f"{where}: field {number} ({name}) comes after field {last}", found
        if number == last and kind not in ("rep", "packed"):
            return f"{where}: field {number} ({name}) is given twice", found
        if number == last and kind == "packed":
            return f"{where}: field {number} ({name}) is split over several runs", found
        last = number
        if kind == "packed" and wire == pb.VARINT:
            return f"{where}: field {number} ({name}) is not packed", found
        if kind == "packed":
            try:
                ids, pos = [], 0
                while pos < len(value):
                    item, pos = pb.read_uvarint(value, pos)
                    ids.append(item)
            except pb.ProtoError:
                return None, []
            rebuilt.append(pb.f_bytes(number, b"".join(pb.uvarint(i) for i in ids)))
        elif wire == pb.VARINT:
            rebuilt.append(pb.f_uint(number, value))
        else:
            rebuilt.append(pb.f_msg(number, value) if kind in ("rep", "msg") else pb.f_bytes(number, value))
    if b"".join(rebuilt) != data:
        return f"{where}: a field at its default value is written, or a varint is longer than it needs", found
    return None, found


def noncanonical(data: bytes) -> str | None:
    """Why ``data``, a DiffContent the user signed, is not the deterministic encoding of what it says, or None. The
    hosts never check a user signature over the bytes served: they re-marshal the parsed diff deterministically and
    recover over that (gonka-ai/gonka @b87a604a ``devshard/state/start_proof.go`` ``VerifyDiffUserSig``), so a
    signature over other bytes of the same diff (a field repeated, reordered, padded) is one they refuse. Each tx and
    its member are checked the same way, down to timeout and error-miss votes."""
    problem, found = _level_problem(data, _CONTENT, "DiffContent", rebuilt_from_fields=True)
    if problem:
        return problem
    for index, tx in enumerate(v for n, _, v in found if n == 2):
        where = f"tx {index}"
        problem, members = _level_problem(tx, _MEMBERS, where)
        if problem or len(members) != 1:
            return problem
        number, _, body = members[0]
        kind = _KINDS[number]
        problem, fields = _level_problem(body, _BODIES.get(kind, {}), f"{where} ({kind})") if kind in _BODIES \
            else (None, [])
        if problem:
            return problem
        for vote in (v for n, _, v in fields if _BODIES[kind].get(n, ("", ""))[0] == "votes"):
            problem, _ = _level_problem(vote, _TIMEOUT_VOTE, f"{where} ({kind}) vote")
            if problem:
                return problem
    return None


def read_diff_content(data: bytes, version: str | None = None) -> DiffContent:
    """The served ``DiffContent``; with ``version``, a field 5 that version's proto lacks is refused."""
    return content_of(pb.fields(data), version)


def content_of(fields: list[tuple[int, int, int | bytes]], version: str | None = None) -> DiffContent:
    """:func:`read_diff_content` of the message whose fields (:func:`indexer.verify.proto.fields`) are ``fields``."""
    sealed_ids = rules_for(version).diff_sealed_ids if version is not None else True
    out = DiffContent()
    for number, wire, value in fields:
        if number == 1 and wire == pb.VARINT:
            out.nonce = value
        elif number == 2 and wire == pb.LEN:
            out.txs.append(value)
        elif number == 3 and wire == pb.LEN:
            try:
                out.escrow_id = value.decode("utf-8")
            except UnicodeDecodeError:
                raise DiffError("DiffContent: escrow_id is not UTF-8") from None
        elif number == 4 and wire == pb.LEN:
            out.post_state_root = value
        elif number == 5 and not sealed_ids:
            raise DiffError(f"DiffContent: field 5 (sealed_inference_ids) is not in the DiffContent of protocol "
                            f"version {version!r}")
        elif number == 5 and wire == pb.LEN:  # packed repeated uint64
            pos = 0
            while pos < len(value):
                item, pos = pb.read_uvarint(value, pos)
                out.sealed_inference_ids.append(item)
        elif number == 5 and wire == pb.VARINT:
            out.sealed_inference_ids.append(value)
        else:
            raise DiffError(f"DiffContent: field {number} with wire type {wire} is not in this module's table")
    return out


def user_signer(content: bytes, user_sig: bytes, creator: str, recover: Recover = sig.recover_address) -> str:
    """The address that signed the served ``DiffContent`` bytes; :class:`DiffError` unless it is ``creator`` (warm
    keys are not accepted for a user's diff). ``recover`` is :func:`indexer.verify.signatures.recover_address` or a
    memo of it (:class:`indexer.verify.signatures.Recoveries`)."""
    try:
        signer = recover(content, user_sig)
    except sig.SignatureError as exc:
        raise DiffError(f"user signature: {exc}") from None
    if signer != creator:
        raise DiffError(f"user signature recovers to {signer}, the escrow creator is {creator}")
    return signer


def check_user_signed(content: bytes, user_sig: bytes, creator: str, escrow_id: str,
                      recover: Recover = sig.recover_address, encoding: bool = True) -> None:
    """The signed check of one served diff, as the hosts make it (:class:`DiffError` with the reason): the user
    signature over ``content`` recovers to ``creator`` (:func:`user_signer`); and, with ``encoding``, the content
    names no other escrow and is the deterministic encoding of what it says (:func:`noncanonical`). The hosts rebuild
    the signed message from the parsed diff with their own escrow id before they recover it (gonka-ai/gonka
    @b87a604a ``devshard/state/start_proof.go`` ``VerifyDiffUserSig``), so a diff signed for another escrow, or in
    another encoding, fails their user-signature check. Content that does not read is left to the replay."""
    user_signer(content, user_sig, creator, recover)
    if not encoding:
        return
    problem = noncanonical(content)
    if problem is not None:
        raise DiffError(f"the user signed bytes the hosts would not take as this diff's: {problem} (they recover the "
                        f"signature over the deterministic encoding)")
    try:
        owner = read_diff_content(content).escrow_id
    except (DiffError, pb.ProtoError):
        return
    if owner and owner != escrow_id:
        raise DiffError(f"the user signed this diff for escrow {owner[:80]!r}, not {escrow_id!r} (the hosts check "
                        f"the signature over the diff with their own escrow id)")


def _signer(message: bytes, signature: bytes, where: str, recover: Recover, proposer: bool = False) -> str:
    """The address that signed; for a proposer's signature that recovers to no key, an
    :class:`indexer.verify.signatures.Unrecovered` the session refuses only where it would check it."""
    try:
        return recover(message, signature)
    except sig.SignatureError as exc:
        if proposer:
            return sig.Unrecovered(f"proposer signature: {exc}")
        raise DiffError(f"{where}: {exc}") from None


def decode_tx(data: bytes, escrow_id: str, where: str = "tx", version: str | None = None,
              recover: Recover = sig.recover_address) -> dict | None:
    """One ``DevshardTx`` as the dict :mod:`indexer.verify.apply` takes (None for an ignored reveal_seed). With
    ``version``, a member that version's rules do not have is refused."""
    members = pb.fields(data)
    if len(members) != 1 or members[0][1] != pb.LEN:
        raise DiffError(f"{where}: a DevshardTx holds exactly one member, found {[(n, w) for n, w, _ in members]}")
    number, _, body = members[0]
    kind = _KINDS.get(number)
    if kind is None:
        raise DiffError(f"{where}: DevshardTx member {number} is not in this module's table")
    if version is not None and kind != "reveal_seed" and kind not in rules_for(version).kinds:
        raise DiffError(f"{where}: DevshardTx member {number} ({kind}) is not in protocol version {version!r}")
    where = f"{where} ({kind})"
    if kind == "reveal_seed":
        return None
    if kind == "finalize":
        return {"kind": "finalize"}
    if kind in _PLAIN:
        return {"kind": kind, **_defaults(_PLAIN[kind], _flat(body, where, _PLAIN[kind]))}
    if kind == "timeout":
        return _timeout(body, escrow_id, where, recover)
    if kind == "error_miss":
        msg = _defaults(_ERROR_MISS, _flat(body, where, _ERROR_MISS))
        votes = [_defaults(_TIMEOUT_VOTE, _flat(v, where + " vote", _TIMEOUT_VOTE)) for v in msg["votes"]]
        return {"kind": kind, "inference_id": msg["inference_id"],
                "votes": [(v["voter_slot"], v["accept"], v["signature"]) for v in votes]}
    schema, builder = {"finish": (_FINISH, sig.finish_bytes), "validation": (_VALIDATION, sig.validation_bytes),
                       "validation_vote": (_VOTE, sig.validation_vote_bytes)}[kind]
    msg = _defaults(schema, _flat(body, where, schema))
    proposer_sig = msg.pop("proposer_sig")  # the rest is exactly what the proposer signed
    return {"kind": kind, **msg, "signer": _signer(builder(**msg), proposer_sig, where, recover, proposer=True)}


def _defaults(schema: dict[int, tuple[str, str]], found: dict) -> dict:
    zero = {"u": 0, "i64": 0, "bool": False, "b": b"", "s": ""}
    return {name: found.get(name, [] if kind == "rep" else zero[kind]) for name, kind in schema.values()}


def _timeout(body: bytes, escrow_id: str, where: str, recover: Recover) -> dict:
    inference_id, reason, votes = 0, 0, []
    for number, wire, value in pb.fields(body):
        if number == 1 and wire == pb.VARINT:
            inference_id = value
        elif number == 2 and wire == pb.VARINT:
            reason = value
        elif number == 3 and wire == pb.LEN:
            votes.append(_defaults(_TIMEOUT_VOTE, _flat(value, where + " vote", _TIMEOUT_VOTE)))
        else:
            raise DiffError(f"{where}: field {number} with wire type {wire} is not in this module's table")
    return {"kind": "timeout", "inference_id": inference_id, "reason": reason, "votes": [
        (v["voter_slot"], v["accept"], _signer(sig.timeout_vote_bytes(
            escrow_id=escrow_id, inference_id=inference_id, reason=reason, accept=v["accept"]), v["signature"], where,
            recover))
        for v in votes]}


def decode_txs(content: DiffContent, escrow_id: str, version: str | None = None,
               recover: Recover = sig.recover_address) -> list[dict]:
    if content.escrow_id != escrow_id:
        raise DiffError(f"nonce {content.nonce}: diff is for escrow {content.escrow_id!r}, not {escrow_id!r}")
    """The txs of ``content`` as :meth:`indexer.verify.apply.Session.apply` takes them, each with its ``tx_index``
    (its place among the served txs, an ignored reveal_seed counted, as the tx records number them)."""
    out = []
    for index, data in enumerate(content.txs):
        tx = decode_tx(data, escrow_id, f"nonce {content.nonce} tx {index}", version, recover)
        if tx is not None:
            tx["tx_index"] = index
            out.append(tx)
    return out
