"""The settlement transaction of a devnet escrow, built as the gateway broadcasts it and served as the chain does.

The hosts co-sign ``StateSignatureContent`` of the final, settlement-phase root (their warm keys; the chain accepts
a warm key through the participant's authz grant). The user puts at least the quorum ``2·n/3 + 1`` of slot
signatures into a ``MsgSettleDevshardEscrow`` (field layout: :mod:`indexer.verify.settlement`) with the final
nonce, rest hash, per-slot host stats, fees and version, wraps it in a signed cosmos-sdk ``TxRaw``
(``proto/cosmos/tx/v1beta1/tx.proto``: TxBody, AuthInfo, SignDoc, SIGN_MODE_DIRECT) and the transaction hash is
sha256 of those bytes. :func:`tx_json` is the ``GET /cosmos/tx/v1beta1/txs/{hash}`` answer (``GetTxResponse``:
``tx`` and ``tx_response`` whose ``tx`` is the same transaction as an ``Any``); CometBFT's ``tx_search`` and ``tx``
carry the raw bytes base64-encoded.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from indexer.devnet.keys import Keyring
from indexer.verify import proto as pb, settlement as st, signatures as sig, state_root as sr

CHAIN_ID = "gonka-devnet"
PUBKEY_TYPE = "/cosmos.crypto.secp256k1.PubKey"
TX_TYPE = "/cosmos.tx.v1beta1.Tx"
SIGN_MODE_DIRECT = 1
FEE_DENOM = "ngonka"
GAS_LIMIT = 200_000


@dataclass(frozen=True)
class SettlementTx:
    msg: st.SettleMsg
    msg_bytes: bytes
    body: bytes
    auth_info: bytes
    signature: bytes  # the user's 64-byte r ‖ s over the SignDoc
    raw: bytes  # TxRaw
    hash: str
    height: int
    sequence: int

    def b64(self) -> str:
        return base64.b64encode(self.raw).decode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def settle_msg(esc: Any, keys: Keyring, session: Any) -> st.SettleMsg:
    """The user's settlement of ``esc`` from its replayed final ``session`` (phase settlement)."""
    s, nonce, root = session.state, session.latest_nonce, session.root()
    sigs = [st.SlotSignature(slot, keys.sign_as_host(addr, _state_bytes(root, esc.escrow_id, nonce)))
            for slot, addr in enumerate(esc.slots)]
    stats = [st.HostStatsEntry(slot, h.missed, h.invalid, h.cost, h.required_validations, h.completed_validations)
             for slot, h in sorted(s.host_stats.items())]
    return st.SettleMsg(settler=esc.creator, escrow_id=int(esc.escrow_id), state_root=root, nonce=nonce,
                        rest_hash=sr.rest_hash(s), host_stats=stats, signatures=sigs, fees=s.fees,
                        version=esc.protocol_version)


def _state_bytes(root: bytes, escrow_id: str, nonce: int) -> bytes:
    return sig.state_signature_bytes(state_root=root, escrow_id=escrow_id, nonce=nonce)


def build_tx(msg: st.SettleMsg, keys: Keyring, height: int, sequence: int) -> SettlementTx:
    """The signed transaction carrying ``msg``, broadcast by the escrow creator at ``height``."""
    msg_bytes = st.encode_settle_msg(msg)
    body = pb.f_msg(1, pb.f_str(1, st.SETTLE_TYPE_URL) + pb.f_bytes(2, msg_bytes))
    pubkey = keys.public_key(msg.settler)
    signer_info = pb.concat((pb.f_msg(1, pb.f_str(1, PUBKEY_TYPE) + pb.f_bytes(2, pb.f_bytes(1, pubkey))),
                             pb.f_msg(2, pb.f_msg(1, pb.f_uint(1, SIGN_MODE_DIRECT))), pb.f_uint(3, sequence)))
    fee = pb.f_msg(1, pb.f_str(1, FEE_DENOM) + pb.f_str(2, "0")) + pb.f_uint(2, GAS_LIMIT)
    auth_info = pb.f_msg(1, signer_info) + pb.f_msg(2, fee)
    sign_doc = pb.concat((pb.f_bytes(1, body), pb.f_bytes(2, auth_info), pb.f_str(3, CHAIN_ID), pb.f_uint(4, 0)))
    signature = keys.sign(msg.settler, sign_doc)[:64]  # cosmos-sdk secp256k1 signatures are r ‖ s (low s)
    raw = pb.concat((pb.f_bytes(1, body), pb.f_bytes(2, auth_info), pb.f_bytes(3, signature)))
    return SettlementTx(msg, msg_bytes, body, auth_info, signature, raw, st.tx_hash(raw), height, sequence)


def msg_json(m: st.SettleMsg) -> dict[str, Any]:
    """The message as the gateway's JSON encodes it (proto3 JSON: 64-bit integers as strings, bytes as base64;
    which counters are 64-bit follows F10's host epoch stats: counts are numbers, cost a string)."""
    return {"@type": st.SETTLE_TYPE_URL, "settler": m.settler, "escrow_id": str(m.escrow_id),
            "state_root": b64(m.state_root), "nonce": str(m.nonce), "rest_hash": b64(m.rest_hash),
            "host_stats": [{"slot_id": h.slot_id, "missed": h.missed, "invalid": h.invalid, "cost": str(h.cost),
                            "required_validations": h.required_validations,
                            "completed_validations": h.completed_validations} for h in m.host_stats],
            "signatures": [{"slot_id": s.slot_id, "signature": b64(s.signature)} for s in m.signatures],
            "fees": str(m.fees), "version": m.version}


def _tx_body_json(t: SettlementTx, keys: Keyring) -> dict[str, Any]:
    return {"body": {"messages": [msg_json(t.msg)], "memo": "", "timeout_height": "0", "extension_options": [],
                     "non_critical_extension_options": []},
            "auth_info": {"signer_infos": [{"public_key": {"@type": PUBKEY_TYPE,
                                                           "key": b64(keys.public_key(t.msg.settler))},
                                            "mode_info": {"single": {"mode": "SIGN_MODE_DIRECT"}},
                                            "sequence": str(t.sequence)}],
                          "fee": {"amount": [{"denom": FEE_DENOM, "amount": "0"}], "gas_limit": str(GAS_LIMIT),
                                  "payer": "", "granter": ""}, "tip": None},
            "signatures": [b64(t.signature)]}


def tx_json(t: SettlementTx, keys: Keyring, events: list[dict[str, Any]], timestamp: str) -> dict[str, Any]:
    """``GetTxResponse`` of the settlement."""
    tx = _tx_body_json(t, keys)
    return {"tx": tx, "tx_response": {
        "height": str(t.height), "txhash": t.hash, "codespace": "", "code": 0, "data": "", "raw_log": "", "logs": [],
        "info": "", "gas_wanted": str(GAS_LIMIT), "gas_used": "120000", "tx": {"@type": TX_TYPE, **tx},
        "timestamp": timestamp, "events": events}}


def signatures_at(keys: Keyring, esc: Any, root: bytes, nonce: int) -> dict[str, str]:
    """``GET …/sessions/{id}/signatures?nonce=N``: every slot's co-signature of the root at ``nonce``."""
    return {str(slot): b64(keys.sign_as_host(addr, _state_bytes(root, esc.escrow_id, nonce)))
            for slot, addr in enumerate(esc.slots)}

