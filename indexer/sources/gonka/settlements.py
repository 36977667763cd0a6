"""An escrow's settlement transaction, read while a node keeps its block, as a ``settlement`` record.

The root, rest hash, host stats, host signatures, nonce, fees and version of a settlement survive only in the
transaction's body (gonka-devshard.md §4.8): the ``devshard_escrow_settled`` event names the transaction, this
module reads it. Preferred: CometBFT ``/tx?hash=0x…``, whose ``result.tx`` is the broadcast ``TxRaw``; its sha256
must be the hash the event named (a node that answers other bytes is a lying node: recorded, and the next one
asked), and :func:`indexer.verify.settlement.settle_msgs_in_tx` gives the ``MsgSettleDevshardEscrow`` bytes exactly
as signed. Fallback: cosmos-sdk REST ``/cosmos/tx/v1beta1/txs/{hash}``, whose JSON is a rendering of the message:
its bytes are re-encoded (:func:`indexer.verify.settlement.encode_settle_msg`), ``tx_raw`` stays null and the
record's ``msg_source`` says so (a field the encoder does not know is named there: the re-encoding lacks it).

``msg_source`` (kept in rec.settlement.extra) is ``tx`` for a message read from the TxRaw, else that sentence, the
same on every read (why the RPC did not serve it is logged as a failure, not stored in the record: a record that
changed with each RPC error would be amended, and its escrow replayed, on every cycle). A REST record is not final
while an RPC node may still serve the transaction: the poller asks /tx again on later cycles (a transient failure,
a lying node, or a not found from a node that still keeps the block: a tx index that lags, a load balancer's node
behind the others), and keeps the REST record for good only once every RPC node answers not found and its status
shows the block pruned there (its earliest kept block past the settlement's height), said in ``tx_pruned``
(:func:`is_final`).
"""
from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from indexer.sources.gonka.chain import ChainRest
from indexer.sources.gonka.http import FetchError
from indexer.sources.gonka.rpc import CometRpc
from indexer.verify import proto as pb
from indexer.verify import settlement as st
from indexer.wire.normalize import NormalizeError, parse_u64
from indexer.wire.rpc import tx_answer

_READ_ERRORS = (FetchError, NormalizeError, pb.ProtoError, ValueError, TypeError, KeyError)


class SettlementLie(FetchError):
    """A node's answer that cannot be the named transaction (other bytes, another height)."""


def read_settlement(rpc: CometRpc, chain: ChainRest, escrow_id: str, tx_hash: str,
                    height: int | None) -> dict[str, Any]:
    """The ``settlement`` record of ``escrow_id`` from its transaction ``tx_hash`` (hex) at ``height``: from the RPC,
    else from the REST. A FetchError (transient: a later cycle asks again) names both reasons when neither serves
    it. A REST record is the same on every cycle whatever the RPC answered (its ``msg_source`` is fixed), so a
    changing RPC error neither amends it nor marks its escrow for replay: why the RPC did not serve it goes to the
    RPC Fetcher's failure log (net.failure). It is final (:func:`is_final`) only when the block is shown pruned at
    every RPC node (:func:`_pruned_everywhere`); otherwise /tx is asked again on later cycles."""
    try:
        return _from_rpc(rpc, escrow_id, tx_hash, height)
    except _READ_ERRORS as exc:
        rpc_error = exc
    rpc_reason = f"RPC /tx: {rpc_error}"
    try:
        rec = _from_rest(chain, escrow_id, tx_hash, height)
    except _READ_ERRORS as exc:
        raise FetchError(f"escrow:{escrow_id}", f"settlement tx {tx_hash} not read: {rpc_reason}; "
                         f"REST /cosmos/tx/v1beta1/txs: {exc}", transient=True) from None
    proof = _pruned_everywhere(rpc, rpc_error, height) if isinstance(rpc_error, TxNotFound) else None
    if proof is None:
        rpc.http.report(FetchError(getattr(rpc_error, "url", "") or f"escrow:{escrow_id}",
                                    f"settlement tx {tx_hash.upper()} of escrow {escrow_id} read over REST only "
                                    f"(re-encoded, no tx_raw; /tx asked again next cycle): {rpc_reason}"[:2000],
                                    transient=True))
    else:
        rec[TX_PRUNED] = (f"every RPC node answered /tx not found and keeps no block at height {height} ({proof}): "
                          "this re-encoding is kept and the transaction is not asked for again")
    return rec


# In rec.settlement.extra of a REST record: no RPC node has the transaction, so no later cycle can read it there.
TX_PRUNED = "tx_pruned"
# The msg_source of a REST record: the same on every read of the transaction (the RPC's reasons are logged apart)
REST_SOURCE = ("msg re-encoded from the REST JSON of /cosmos/tx/v1beta1/txs/{tx}, not the signed bytes; tx_raw not "
               "available (no RPC node served /tx)")


class TxNotFound(FetchError):
    """Every RPC node answered /tx not found: ``nodes``, the base URLs that said so."""

    def __init__(self, url: str, message: str, nodes: list[str]) -> None:
        super().__init__(url, message, transient=False, expected=True)
        self.nodes = nodes


def is_final(rec: dict[str, Any]) -> bool:
    """Whether a settlement record is the last the chain can give: read over /tx (its bytes hash-checked), or
    re-encoded from the REST when no RPC node keeps the transaction's block any more."""
    return rec.get("tx_raw") is not None or TX_PRUNED in rec


def _pruned_everywhere(rpc: CometRpc, missing: TxNotFound, height: int | None) -> str | None:
    """What shows the transaction's block pruned at every node that answered /tx not found (each node's earliest
    kept block, CometBFT ``status``, past ``height``), or None when that is not shown: the height is unknown, a node
    keeps the block (its tx index lags: it may serve the transaction on a later cycle; a load balancer's nodes
    may differ), or a node's status could not be read. A not found alone is never taken as pruned."""
    if height is None:
        return None
    said = []
    for node in missing.nodes:
        try:
            earliest = rpc.earliest_height(node)
        except (FetchError, NormalizeError):
            return None
        if earliest <= height:
            return None
        said.append(f"{node}: earliest block {earliest}")
    return "; ".join(said) or None


def _from_rpc(rpc: CometRpc, escrow_id: str, tx_hash: str, height: int | None) -> dict[str, Any]:
    """Each RPC node in turn until one serves the named transaction. Raises :class:`TxNotFound` when every node
    answered not found, else the one node's error or one naming every node's."""
    http = rpc.http
    failures: list[FetchError] = []
    said_not_found: list[str] = []
    for node in http.urls():
        try:
            try:
                answer = tx_answer(rpc.tx(tx_hash, node))
            except (NormalizeError, ValueError, TypeError, KeyError) as exc:
                raise SettlementLie(f"{node}/tx", f"unreadable /tx answer for {tx_hash.upper()}: {exc}") from None
            computed = st.tx_hash(answer.tx_raw)
            if computed != tx_hash.upper():
                raise SettlementLie(f"{node}/tx", f"the TxRaw served for {tx_hash.upper()} hashes to {computed}")
            if height is not None and answer.height != height:
                raise SettlementLie(f"{node}/tx", f"tx {tx_hash.upper()} served at height {answer.height}, the "
                                    f"settlement event is at height {height}")
        except SettlementLie as exc:
            failures.append(exc)
            http.distrust(node, exc)  # a lying node: the next one is asked first from now on
            continue
        except FetchError as exc:
            # not got (pruned, or not indexed: another node may keep older blocks), or failing (recorded by the
            # Fetcher): the next node is asked
            failures.append(exc)
            if exc.expected:
                said_not_found.append(node)
            http.demote(node)
            continue
        http.prefer(node)
        if answer.code != 0:
            raise ValueError(f"tx {tx_hash.upper()} failed on chain (code {answer.code}) ({node}/tx)")
        try:
            msg = _ours(escrow_id, st.settle_msgs_in_tx(answer.tx_raw))
        except (pb.ProtoError, ValueError) as exc:
            # the bytes are the named transaction's (its hash is checked), so reading again cannot change them: the
            # transaction is kept with the reason, and the settled check fails on it
            return unreadable_record(escrow_id, tx_hash, answer.height, answer.tx_raw, str(exc))
        return settlement_record(escrow_id, tx_hash, answer.height, msg, answer.tx_raw, "tx")
    if all(f.expected for f in failures):
        only = failures[0] if len(failures) == 1 else None
        message = str(only).removesuffix(f" ({only.url})") if only else "; ".join(str(f) for f in failures)
        raise TxNotFound(failures[-1].url, message, said_not_found)
    if len(failures) == 1:
        raise failures[0]
    raise FetchError(failures[-1].url, "; ".join(str(f) for f in failures), transient=True)


def _ours(escrow_id: str, messages: list[bytes]) -> bytes:
    mine = [m for m in messages if str(st.decode_settle_msg(m).escrow_id) == escrow_id]
    if len(mine) != 1:
        raise ValueError(f"the transaction carries {len(mine)} MsgSettleDevshardEscrow for escrow {escrow_id} "
                         f"(of {len(messages)} settlement messages), expected one")
    return mine[0]


def unreadable_record(escrow_id: str, tx_hash: str, height: int, tx_raw: bytes, reason: str) -> dict[str, Any]:
    """The record of a settlement transaction that was read (its bytes hash to the event's hash) but carries no
    readable settlement of this escrow: the transaction and the reason (``msg_unreadable``, kept in
    rec.settlement.extra), every message field null."""
    return {"kind": "settlement", "escrow_id": escrow_id, "tx_hash": tx_hash.lower(), "height": height,
            "msg": None, "tx_raw": base64.b64encode(tx_raw).decode("ascii"), "msg_source": "tx",
            "msg_unreadable": reason[:2000]}


def settlement_record(escrow_id: str, tx_hash: str, height: int | None, msg: bytes, tx_raw: bytes | None,
                      msg_source: str | None = None) -> dict[str, Any]:
    """The record of a settlement message ``msg`` (serialized ``MsgSettleDevshardEscrow``): its fields decoded, the
    message itself and the ``TxRaw`` carrying it base64 (interface.md §2, kind ``settlement``)."""
    m = st.decode_settle_msg(msg)
    rec: dict[str, Any] = {
        "kind": "settlement", "escrow_id": escrow_id, "tx_hash": tx_hash.lower(), "height": height,
        "settler": m.settler, "state_root": m.state_root.hex() or None, "rest_hash": m.rest_hash.hex() or None,
        "nonce": m.nonce, "fees": m.fees, "state_root_and_protocol_version": m.version,
        "host_stats": {str(h.slot_id): {"missed": h.missed, "invalid": h.invalid, "cost": h.cost,
                                        "required_validations": h.required_validations,
                                        "completed_validations": h.completed_validations} for h in m.host_stats},
        "signatures": {str(s.slot_id): s.signature.hex() for s in m.signatures},
        "msg": base64.b64encode(msg).decode("ascii"),
        "tx_raw": None if tx_raw is None else base64.b64encode(tx_raw).decode("ascii"),
    }
    if msg_source:
        rec["msg_source"] = msg_source  # not a field of the kind: kept in rec.settlement.extra
    return rec


# ---- the REST fallback: the message as JSON (grpc-gateway: u64 as strings, bytes as base64)

_MSG_KEYS = {"@type", "settler", "escrow_id", "state_root", "nonce", "rest_hash", "host_stats", "signatures", "fees",
             "version", "state_root_and_protocol_version"}
_STAT_KEYS = ("slot_id", "missed", "invalid", "cost", "required_validations", "completed_validations")


def _from_rest(chain: ChainRest, escrow_id: str, tx_hash: str, height: int | None) -> dict[str, Any]:
    data, url = chain.tx(tx_hash)
    try:
        return _rest_record(data, escrow_id, tx_hash, height)
    except _READ_ERRORS as exc:
        raise ValueError(f"{exc} ({url})") from None


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def _array(value: Any, what: str) -> list[Any]:
    """A JSON array (absent or null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected an array, got {type(value).__name__}")
    return value


def _rest_record(data: Any, escrow_id: str, tx_hash: str, height: int | None) -> dict[str, Any]:
    resp = _object(_object(data, "answer").get("tx_response"), "tx_response")
    if str(resp.get("txhash", "")).upper() != tx_hash.upper():
        raise ValueError(f"the answer is for tx {resp.get('txhash')!r}, not {tx_hash.upper()}")
    served = parse_u64(resp.get("height"), "tx_response.height")
    if height is not None and served != height:
        raise ValueError(f"tx served at height {served}, the settlement event is at height {height}")
    if parse_u64(resp.get("code") or 0, "tx_response.code") != 0:
        raise ValueError(f"tx {tx_hash.upper()} failed on chain (code {resp.get('code')})")
    body = _object(_object(data.get("tx") or {}, "tx").get("body") or {}, "tx.body")
    messages = _array(body.get("messages"), "tx.body.messages")
    found = [m for m in messages if isinstance(m, Mapping) and m.get("@type") == st.SETTLE_TYPE_URL
             and str(m.get("escrow_id")) == escrow_id]
    if len(found) != 1:
        raise ValueError(f"the transaction carries {len(found)} MsgSettleDevshardEscrow for escrow {escrow_id}, "
                         "expected one")
    msg, unknown = _encode_json_msg(found[0])
    note = REST_SOURCE.format(tx=tx_hash.upper())
    if unknown:
        note += f"; fields left out of the re-encoding: {', '.join(sorted(unknown))}"
    return settlement_record(escrow_id, tx_hash, served, msg, None, note[:2000])


def _bytes(value: Any, what: str) -> bytes:
    if value in (None, ""):
        return b""
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a base64 string")
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: not strict base64") from None


def _encode_json_msg(m: Mapping[str, Any]) -> tuple[bytes, set[str]]:
    """The deterministic bytes of a ``MsgSettleDevshardEscrow`` given as JSON, and the keys it could not encode."""
    unknown = {k for k in m if k not in _MSG_KEYS}
    stats = []
    for i, h in enumerate(_array(m.get("host_stats"), "host_stats")):
        h = _object(h, f"host_stats[{i}]")
        unknown |= {f"host_stats.{k}" for k in h if k not in _STAT_KEYS}
        stats.append(st.HostStatsEntry(**{k: parse_u64(h.get(k) or 0, f"host_stats[{i}].{k}") for k in _STAT_KEYS}))
    sigs = []
    for i, s in enumerate(_array(m.get("signatures"), "signatures")):
        s = _object(s, f"signatures[{i}]")
        unknown |= {f"signatures.{k}" for k in s if k not in ("slot_id", "signature")}
        sigs.append(st.SlotSignature(parse_u64(s.get("slot_id") or 0, f"signatures[{i}].slot_id"),
                                     _bytes(s.get("signature"), f"signatures[{i}].signature")))
    version = m.get("version", m.get("state_root_and_protocol_version")) or ""
    if not isinstance(version, str) or not isinstance(m.get("settler", ""), str):
        raise ValueError("settler and version must be strings")
    msg = st.SettleMsg(settler=m.get("settler") or "", escrow_id=parse_u64(m.get("escrow_id"), "escrow_id"),
                       state_root=_bytes(m.get("state_root"), "state_root"),
                       nonce=parse_u64(m.get("nonce") or 0, "nonce"), rest_hash=_bytes(m.get("rest_hash"), "rest_hash"),
                       host_stats=stats, signatures=sigs, fees=parse_u64(m.get("fees") or 0, "fees"), version=version)
    return st.encode_settle_msg(msg), unknown
