"""Tx records as NDJSON lines written straight from the parsed ``DevshardTx`` messages: the poller's hot path.

:func:`indexer.wire.normalize.tx_record` builds a record dict and :func:`~indexer.wire.normalize.dumps_record_bytes`
serializes it, ~6 µs a tx between them (~24 for a timeout's or an error miss's, with their vote lists). The poller
only needs the line, so for the seven kinds of records a log is made of (start, confirm_start, finish, validation,
validation_vote, timeout, error_miss) :class:`TxLines` writes it from a byte template instead, ~2.5 µs. A template
is not a second definition of the record: it must give, byte for byte, what ``dumps_record_bytes(tx_record(…))``
gives (key order, orjson's escaping of the model name, lowercase hex), and tests/wire/test_wire_versions.py checks that
over random messages of every kind and version. Everything else (a timeout without a reason word, heartbeats and
the other txs that make no record, unknown members, txs given as dicts) goes through ``tx_record``.
"""
from __future__ import annotations

from binascii import hexlify
from collections import Counter
from typing import Any, Callable

import orjson

from indexer.wire.diffs import Signed
from indexer.wire.normalize import TIMEOUT_REASONS, dumps_record_bytes, tx_record

_BOOL = (b"false", b"true")
_REASON_TEXT = {number: word.encode() for number, word in TIMEOUT_REASONS.items()}


def _hex_or_null(value: bytes) -> bytes:
    return b'"%s"' % hexlify(value) if value else b"null"


def _votes(votes: Any) -> bytes:
    """A vote list as tx_record's ``_votes`` gives it to orjson: ``[{"voter_slot":N,"accept":B},…]``."""
    return b"[" + b",".join([b'{"voter_slot":%d,"accept":%s}' % (v.voter_slot, _BOOL[v.accept]) for v in votes]) + b"]"


def _template(escrow_id: bytes, version: bytes, kind: bytes, slot_key: bytes | None, body: bytes) -> bytes:
    """One kind's line with its constant parts filled in (tx_record's key order: kind, escrow_id, inference_id, the
    slot key of validations and votes, diff_nonce, tx_index, protocol_version, then the kind's fields); what is left
    are ``%`` places for inference_id, [slot,] nonce, index and ``body``'s own."""
    escrow_id, version = escrow_id.replace(b"%", b"%%"), version.replace(b"%", b"%%")  # JSON text, not places
    slot = b'"%s":%%d,' % slot_key if slot_key else b""
    return (b'{"kind":"%s","escrow_id":%s,"inference_id":%%d,%s"diff_nonce":%%d,"tx_index":%%d,"protocol_version":%s,'
            % (kind, escrow_id, slot, version)) + body + b"}"


class TxLines:
    """The lines of one escrow's txs under one protocol version, appended to ``lines``; a record the caller wants as
    a dict instead (a finish whose message ``hold`` is true for: a refusal whose payload comes later) goes to
    ``held`` at its line's position, which gets an empty line. ``other`` counts the txs that make no record, by
    name."""

    def __init__(self, escrow_id: str, protocol_version: str,
                 hold: Callable[[Any], bool] | None = None) -> None:
        self.escrow_id, self.version = escrow_id, protocol_version
        self.lines: list[bytes] = []
        self.held: list[tuple[int, dict[str, Any]]] = []
        self.other: Counter = Counter()
        self._hold = hold
        e, pv = orjson.dumps(escrow_id), orjson.dumps(protocol_version)
        self._start = _template(e, pv, b"start", None, b'"prompt_hash":"%s","model":%s,"input_length":%d,'
                                b'"max_tokens":%d,"started_at":%d')
        self._confirm = _template(e, pv, b"confirm_start", None, b'"confirmed_at":%d')
        self._finish = _template(e, pv, b"finish", None, b'"executor_slot":%d,"input_tokens":%d,"output_tokens":%d,'
                                 b'"response_hash":"%s"%s')
        self._validation = _template(e, pv, b"validation", b"validator_slot", b'"valid":%s')
        self._vote = _template(e, pv, b"validation_vote", b"voter_slot", b'"vote_valid":%s')
        self._timeout = _template(e, pv, b"timeout", None, b'"reason":"%s","votes":%s')
        self._error_miss = _template(e, pv, b"error_miss", None, b'"votes":%s')
        # the content is strict base64 (checked by the decode), so it needs no JSON escaping
        self._signed = (b'{"kind":"signed_diff","escrow_id":%s,' % e.replace(b"%", b"%%")
                        + b'"nonce":%d,"content":"%s","user_sig":%s,"post_state_root":%s,"state_hash":%s,'
                          b'"source_host":%s}')

    def diff(self, nonce: int, txs: Any) -> int:
        """Append the records of one diff's txs (message objects, in order); return how many txs it had."""
        out = self.lines
        index = -1
        for index, tx in enumerate(txs):
            name = tx.WhichOneof("tx")
            if name == "start_inference":
                m = tx.start_inference
                out.append(self._start % (m.inference_id, nonce, index, hexlify(m.prompt_hash), orjson.dumps(m.model),
                                          m.input_length, m.max_tokens, m.started_at))
            elif name == "validation":
                m = tx.validation
                out.append(self._validation % (m.inference_id, m.validator_slot, nonce, index, _BOOL[m.valid]))
            elif name == "finish_inference":
                m = tx.finish_inference
                if self._hold is not None and self._hold(m):
                    rec, _ = tx_record(self.escrow_id, nonce, index, tx, self.version)
                    self.held.append((len(out), rec))
                    out.append(b"")
                    continue
                served = getattr(m, "served_hash", b"")  # newer protos only, as tx_record reads it
                out.append(self._finish % (m.inference_id, nonce, index, m.executor_slot, m.input_tokens,
                                           m.output_tokens, hexlify(m.response_hash),
                                           b',"served_hash":"%s"' % hexlify(served) if served else b""))
            elif name == "confirm_start":
                m = tx.confirm_start
                out.append(self._confirm % (m.inference_id, nonce, index, m.confirmed_at))
            elif name == "validation_vote":
                m = tx.validation_vote
                out.append(self._vote % (m.inference_id, m.voter_slot, nonce, index, _BOOL[m.vote_valid]))
            elif name == "timeout_inference" and (reason := _REASON_TEXT.get(tx.timeout_inference.reason)):
                m = tx.timeout_inference  # an unspecified reason (or v3–v4.1's ERROR) makes no record: tx_record
                out.append(self._timeout % (m.inference_id, nonce, index, reason, _votes(m.votes)))
            elif name == "error_miss":
                m = tx.error_miss
                out.append(self._error_miss % (m.inference_id, nonce, index, _votes(m.votes)))
            else:
                self._record(nonce, index, tx)
        return index + 1

    def signed(self, nonce: int, signed: Signed, source_host: str | None) -> None:
        """Append the ``signed_diff`` line of one served diff: ``dumps_record_bytes(signed_diff_record(…))`` byte for
        byte (tests/wire/test_wire_versions.py checks it)."""
        self.lines.append(self._signed % (
            nonce, signed.content.encode("ascii"), _hex_or_null(signed.user_sig),
            _hex_or_null(signed.post_state_root), _hex_or_null(signed.state_hash),
            b"null" if source_host is None else orjson.dumps(source_host)))

    def _record(self, nonce: int, index: int, tx: Any) -> None:
        rec, name = tx_record(self.escrow_id, nonce, index, tx, self.version)
        if rec is None:
            self.other[name] += 1
        else:
            self.lines.append(dumps_record_bytes(rec))
