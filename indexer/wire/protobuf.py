"""A small hand-written protobuf wire-format codec, driven by field tables.

Why hand-written: the devshard .proto files are not vendored, field numbers drift between protocol
versions, and we must keep unknown fields instead of dropping them (a newer host may send fields
that an older table does not know). Only what devshard messages use is supported: varint scalars
(uint64/uint32/int64/int32/bool/enum), length-delimited (string/bytes/message, packed repeated
scalars), and fixed64/fixed32 which are only ever skipped into ``_unknown``.

Decoded messages are plain dicts keyed by proto field name. Proto3 defaults are filled in for every
known scalar/repeated field so consumers never need ``.get`` fallbacks; a oneof message (``DevshardTx``)
only carries the member that was set. Fields that the table does not know, or that arrive with an
unexpected wire type (a moved field number), are kept verbatim under ``_unknown`` as
``(field_number, wire_type, value)`` tuples (value: int for varint/fixed, bytes for length-delimited)
and are re-emitted by the encoder, so decode→encode is lossless.

Every malformed input raises :class:`WireDecodeError`; the decoder always advances, so it cannot hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Any, Mapping

VARINT, I64, LEN, I32 = 0, 1, 2, 5
UNKNOWN_KEY = "_unknown"

_U64 = (1 << 64) - 1
_VARINT_TYPES = frozenset({"uint64", "uint32", "int64", "int32", "bool", "enum"})
_LEN_TYPES = frozenset({"string", "bytes", "message"})
_RANGES = {
    "uint64": (0, _U64),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "enum": (-(1 << 31), (1 << 31) - 1),
}


class WireDecodeError(ValueError):
    """Bytes that are not a valid encoding of the expected message (truncated, bad tag, bad UTF-8...)."""


class WireEncodeError(ValueError):
    """A message dict that cannot be encoded (out-of-range integer, wrong Python type)."""


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    type: str  # one of _VARINT_TYPES | _LEN_TYPES
    repeated: bool = False
    message: str | None = None  # message type name when type == "message"
    enum: str | None = None  # enum name (for JSON rendering) when type == "enum"

    @property
    def wire_type(self) -> int:
        return VARINT if self.type in _VARINT_TYPES else LEN


@dataclass(frozen=True)
class MessageType:
    name: str
    fields: tuple[Field, ...]
    oneof: bool = False  # all fields are members of one oneof (DevshardTx)
    by_number: Mapping[int, Field] = dc_field(init=False, repr=False, compare=False)
    by_name: Mapping[str, Field] = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_number", {f.number: f for f in self.fields})
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})


@dataclass(frozen=True)
class Schema:
    """All message and enum tables of one protocol version."""

    version: str
    messages: Mapping[str, MessageType]
    enums: Mapping[str, Mapping[int, str]]

    def decode(self, message: str, data: bytes) -> dict[str, Any]:
        return decode_message(self, message, data)

    def encode(self, message: str, value: Mapping[str, Any]) -> bytes:
        return encode_message(self, message, value)


# --------------------------------------------------------------------------- primitives


def encode_varint(value: int) -> bytes:
    if value < 0 or value > _U64:
        raise WireEncodeError(f"varint out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Return (value, new_pos). At most 10 bytes, as the spec allows; more means garbage."""
    result = 0
    for i in range(10):
        if pos + i >= len(data):
            raise WireDecodeError(f"truncated varint at offset {pos}")
        byte = data[pos + i]
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return result & _U64, pos + i + 1
    raise WireDecodeError(f"varint longer than 10 bytes at offset {pos}")


def _tag(number: int, wire_type: int) -> bytes:
    return encode_varint((number << 3) | wire_type)


def _len_prefixed(number: int, payload: bytes) -> bytes:
    return _tag(number, LEN) + encode_varint(len(payload)) + payload


def _take(data: bytes, pos: int, size: int, what: str) -> tuple[bytes, int]:
    if size > len(data) - pos:
        raise WireDecodeError(f"truncated {what} at offset {pos}: needs {size} bytes, {len(data) - pos} left")
    return data[pos : pos + size], pos + size


# --------------------------------------------------------------------------- encoding


def _scalar_to_varint(f: Field, value: Any) -> int:
    if f.type == "bool":
        if not isinstance(value, bool):
            raise WireEncodeError(f"{f.name}: expected bool, got {type(value).__name__}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireEncodeError(f"{f.name}: expected int, got {type(value).__name__}")
    lo, hi = _RANGES[f.type]
    if not lo <= value <= hi:
        raise WireEncodeError(f"{f.name}: {value} out of {f.type} range")
    return value & _U64  # negative int64/int32/enum use 10-byte two's complement, as protobuf does


def _encode_len_value(schema: Schema, f: Field, value: Any) -> bytes:
    if f.type == "string":
        if not isinstance(value, str):
            raise WireEncodeError(f"{f.name}: expected str, got {type(value).__name__}")
        return value.encode("utf-8")
    if f.type == "bytes":
        if not isinstance(value, (bytes, bytearray)):
            raise WireEncodeError(f"{f.name}: expected bytes, got {type(value).__name__}")
        return bytes(value)
    return encode_message(schema, f.message or "", value)


def _is_default(f: Field, value: Any) -> bool:
    if f.type == "message":
        return value is None
    if f.type == "string":
        return value == ""
    if f.type == "bytes":
        return value == b""
    if f.type == "bool":
        return value is False
    return isinstance(value, int) and not isinstance(value, bool) and value == 0


def _encode_field(schema: Schema, f: Field, value: Any, in_oneof: bool) -> bytes:
    if f.repeated:
        items = list(value or [])
        if not items:
            return b""
        if f.type in _VARINT_TYPES:  # proto3 packs repeated scalars
            packed = b"".join(encode_varint(_scalar_to_varint(f, v)) for v in items)
            return _len_prefixed(f.number, packed)
        return b"".join(_len_prefixed(f.number, _encode_len_value(schema, f, v)) for v in items)
    # proto3 omits default scalars; a oneof member is emitted even when empty (its presence is the data)
    if not in_oneof and _is_default(f, value):
        return b""
    if value is None:
        return b""
    if f.type in _VARINT_TYPES:
        return _tag(f.number, VARINT) + encode_varint(_scalar_to_varint(f, value))
    return _len_prefixed(f.number, _encode_len_value(schema, f, value))


def _encode_unknown(items: Any) -> bytes:
    out = bytearray()
    for number, wire_type, value in items or ():
        out += _tag(number, wire_type)
        if wire_type == VARINT:
            out += encode_varint(value)
        elif wire_type == I64:
            out += int(value).to_bytes(8, "little")
        elif wire_type == I32:
            out += int(value).to_bytes(4, "little")
        elif wire_type == LEN:
            out += encode_varint(len(value)) + bytes(value)
        else:
            raise WireEncodeError(f"cannot re-encode unknown wire type {wire_type}")
    return bytes(out)


def encode_message(schema: Schema, message: str, value: Mapping[str, Any]) -> bytes:
    """Deterministic encoding: known fields in field-number order, then preserved unknown fields."""
    mt = _message_type(schema, message)
    if not isinstance(value, Mapping):
        raise WireEncodeError(f"{message}: expected a mapping, got {type(value).__name__}")
    extra = set(value) - set(mt.by_name) - {UNKNOWN_KEY}
    if extra:
        raise WireEncodeError(f"{message}: unknown field name(s) {sorted(extra)}")
    if mt.oneof and len([n for n in value if n != UNKNOWN_KEY and value[n] is not None]) > 1:
        raise WireEncodeError(f"{message}: more than one oneof member set")
    out = bytearray()
    for f in sorted(mt.fields, key=lambda fld: fld.number):
        if f.name in value:
            out += _encode_field(schema, f, value[f.name], mt.oneof)
    out += _encode_unknown(value.get(UNKNOWN_KEY))
    return bytes(out)


# --------------------------------------------------------------------------- decoding


def _message_type(schema: Schema, message: str) -> MessageType:
    try:
        return schema.messages[message]
    except KeyError:
        raise KeyError(f"message {message!r} not in schema {schema.version}") from None


def _read_raw(data: bytes, pos: int, wire_type: int, number: int) -> tuple[int | bytes, int]:
    """Read one field value of any supported wire type (used for known and unknown fields alike)."""
    if wire_type == VARINT:
        return decode_varint(data, pos)
    if wire_type == I64:
        raw, pos = _take(data, pos, 8, f"fixed64 field {number}")
        return int.from_bytes(raw, "little"), pos
    if wire_type == I32:
        raw, pos = _take(data, pos, 4, f"fixed32 field {number}")
        return int.from_bytes(raw, "little"), pos
    if wire_type == LEN:
        size, pos = decode_varint(data, pos)
        return _take(data, pos, size, f"length-delimited field {number}")
    # groups (3/4) are proto2-only and never used by devshard; 6/7 do not exist
    raise WireDecodeError(f"unsupported wire type {wire_type} for field {number} at offset {pos}")


def _varint_to_scalar(f: Field, raw: int) -> Any:
    if f.type == "bool":
        return raw != 0
    if f.type == "uint32":
        return raw & 0xFFFFFFFF  # protobuf truncates oversized uint32 varints
    if f.type in ("int64", "int32", "enum"):
        value = raw - (1 << 64) if raw >> 63 else raw
        return value if f.type == "int64" else ((value + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return raw


def _decode_packed(f: Field, payload: bytes) -> list[Any]:
    values, pos = [], 0
    while pos < len(payload):
        raw, pos = decode_varint(payload, pos)
        values.append(_varint_to_scalar(f, raw))
    return values


def _defaults(mt: MessageType) -> dict[str, Any]:
    if mt.oneof:
        return {}
    out: dict[str, Any] = {}
    for f in mt.fields:
        if f.repeated:
            out[f.name] = []
        elif f.type == "message":
            out[f.name] = None
        else:
            out[f.name] = {"string": "", "bytes": b"", "bool": False}.get(f.type, 0)
    return out


def _store(result: dict[str, Any], mt: MessageType, f: Field, value: Any) -> None:
    if f.repeated:
        result.setdefault(f.name, [])
        result[f.name].extend(value if isinstance(value, list) else [value])
        return
    if mt.oneof:  # setting one member clears the others, as protobuf does
        for other in mt.fields:
            result.pop(other.name, None)
    result[f.name] = value  # last one wins for singular fields


# The decoder's hot loop works from a per-message plan (field number → name, kind, wire type, defaults) built
# once per (schema, message); it reads one-byte varints and lengths inline. Semantics are those of the field
# tables: the plan is only a cache of them.
_K_RAW, _K_SCALAR, _K_BYTES, _K_STRING, _K_MESSAGE = range(5)


@dataclass
class _Plan:
    schema: Schema
    mt: MessageType
    by_number: dict[int, list]  # number → [field, kind, wire type, plan of a message field (filled lazily)]
    defaults: dict[str, Any]
    repeated: tuple[str, ...]


def _plan(schema: Schema, message: str) -> _Plan:
    plans = schema.__dict__.get("_plans")
    if plans is None:
        plans = {}
        object.__setattr__(schema, "_plans", plans)  # a cache beside the frozen tables
    plan = plans.get(message)
    if plan is not None:
        return plan
    mt = _message_type(schema, message)
    by_number = {}
    for f in mt.fields:
        if f.type in _VARINT_TYPES:
            kind = _K_RAW if f.type == "uint64" else _K_SCALAR
        else:
            kind = {"bytes": _K_BYTES, "string": _K_STRING}.get(f.type, _K_MESSAGE)
        by_number[f.number] = [f, kind, f.wire_type, None]
    defaults = _defaults(mt)
    repeated = tuple(n for n, v in defaults.items() if isinstance(v, list))
    plan = _Plan(schema, mt, by_number, defaults, repeated)
    plans[message] = plan
    return plan


def decode_message(schema: Schema, message: str, data: bytes) -> dict[str, Any]:
    return _decode(_plan(schema, message), data)


def _decode(plan: _Plan, data: bytes) -> dict[str, Any]:
    mt = plan.mt
    message = mt.name
    if type(data) is not bytes:
        data = bytes(data)
    result = plan.defaults.copy()
    for name in plan.repeated:
        result[name] = []
    by_number = plan.by_number
    unknown: list[tuple[int, int, int | bytes]] = []
    pos, n = 0, len(data)
    while pos < n:
        start = pos
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireDecodeError(f"field number 0 at offset {start} in {message}")
        if wire_type == VARINT:
            if pos < n and data[pos] < 0x80:
                raw: int | bytes = data[pos]
                pos += 1
            else:
                raw, pos = decode_varint(data, pos)
        elif wire_type == LEN:
            if pos < n and data[pos] < 0x80:
                size = data[pos]
                pos += 1
            else:
                size, pos = decode_varint(data, pos)
            if size > n - pos:
                raise WireDecodeError(f"truncated length-delimited field {number} at offset {pos}: needs {size} "
                                      f"bytes, {n - pos} left")
            raw = data[pos:pos + size]
            pos += size
        else:
            raw, pos = _read_raw(data, pos, wire_type, number)
        entry = by_number.get(number)
        if entry is not None:
            f, kind, field_wire, sub = entry
            if wire_type == field_wire:
                if kind == _K_RAW:
                    value = raw
                elif kind == _K_SCALAR:
                    value = _varint_to_scalar(f, raw)  # type: ignore[arg-type]
                elif kind == _K_BYTES:
                    value = raw
                elif kind == _K_STRING:
                    try:
                        value = raw.decode("utf-8")  # type: ignore[union-attr]
                    except UnicodeDecodeError as exc:
                        raise WireDecodeError(f"field {f.name}: invalid UTF-8 ({exc.reason})") from None
                else:
                    if sub is None:
                        sub = entry[3] = _plan(plan.schema, f.message or "")
                    try:
                        value = _decode(sub, raw)  # type: ignore[arg-type]
                    except WireDecodeError as exc:
                        raise WireDecodeError(f"in {f.name}: {exc}") from None
                if mt.oneof:
                    if f.repeated:
                        _store(result, mt, f, value)
                    else:  # setting one member clears the others, as protobuf does (only members are in result)
                        result.clear()
                        result[f.name] = value
                elif f.repeated:
                    result[f.name].append(value)
                else:
                    result[f.name] = value  # last one wins for singular fields
                continue
            if f.repeated and f.type in _VARINT_TYPES and wire_type == LEN:
                _store(result, mt, f, _decode_packed(f, raw))  # type: ignore[arg-type]
                continue
        # unknown number, or a known number with another wire type (a field that moved): keep it
        unknown.append((number, wire_type, raw))
    if unknown:
        result[UNKNOWN_KEY] = unknown
    return result


def with_defaults(schema: Schema, message: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """The dict that decode(encode(value)) returns: proto3 defaults filled in, recursively."""
    mt = _message_type(schema, message)
    out = _defaults(mt)
    for name, v in value.items():
        f = mt.by_name.get(name)
        if f is None or f.type != "message" or v is None:
            out[name] = list(v) if f is not None and f.repeated else v
        elif f.repeated:
            out[name] = [with_defaults(schema, f.message or "", item) for item in v]
        else:
            out[name] = with_defaults(schema, f.message or "", v)
    return out

