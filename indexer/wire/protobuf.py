"""The wire tables as real protobuf message classes, parsed and serialized by the official ``protobuf`` package.

Each protocol version's table (:mod:`indexer.wire.schemas`) becomes one ``FileDescriptorProto`` in a descriptor pool
of its own (the versions share message names), and ``message_factory`` builds its classes once. Parsing is the
library's (upb); it keeps fields a table does not know — an unknown number, or a known number with another wire type
(a field that moved) — as unknown fields and serializes them again byte for byte after the known fields.

Two forms are offered:

* message objects (:func:`message_class`), read directly by the normalizer on the poller's hot path;
* plain dicts keyed by field name (:func:`decode_message` / :func:`encode_message`), for the devnet, the tests and
  the JSON form: proto3 defaults filled in for every known field, a oneof carrying only its set member, and unknown
  fields under ``_unknown`` as ``(number, wire_type, value)`` tuples (int for varint/fixed, bytes for
  length-delimited) that the encoder emits again.

Malformed bytes raise :class:`WireDecodeError`; the library only says "corrupt", so on that (rare) path a short scan
of the bytes names the offset and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from indexer.wire.errors import WireDecodeError, WireEncodeError
from indexer.wire.tables import Field, MessageType

__all__ = ["WireDecodeError", "WireEncodeError", "Field", "MessageType", "Schema", "UNKNOWN_KEY", "VARINT", "I64",
           "LEN", "I32", "decode_message", "encode_message", "message_class", "unknown_fields", "with_defaults",
           "encode_varint", "decode_varint", "PACKAGE"]

VARINT, I64, LEN, I32 = 0, 1, 2, 5
UNKNOWN_KEY = "_unknown"
PACKAGE = "devshard.v1"

_U64 = (1 << 64) - 1
_FDP = descriptor_pb2.FieldDescriptorProto
_PROTO_TYPES = {
    "uint64": _FDP.TYPE_UINT64, "uint32": _FDP.TYPE_UINT32, "int64": _FDP.TYPE_INT64, "int32": _FDP.TYPE_INT32,
    "bool": _FDP.TYPE_BOOL, "enum": _FDP.TYPE_ENUM, "string": _FDP.TYPE_STRING, "bytes": _FDP.TYPE_BYTES,
    "message": _FDP.TYPE_MESSAGE,
}
_VARINT_TYPES = frozenset({"uint64", "uint32", "int64", "int32", "bool", "enum"})
_RANGES = {"uint64": (0, _U64), "uint32": (0, (1 << 32) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
           "int32": (-(1 << 31), (1 << 31) - 1), "enum": (-(1 << 31), (1 << 31) - 1)}

# --------------------------------------------------------------------------- message classes


def file_descriptor(schema: Schema) -> descriptor_pb2.FileDescriptorProto:
    """One version's table as a proto3 file descriptor (package ``devshard.v1``, as the chain's protos)."""
    fd = descriptor_pb2.FileDescriptorProto(name=f"devshard_indexer/{schema.version}/devshard.proto",
                                            package=PACKAGE, syntax="proto3")
    for enum_name, values in schema.enums.items():
        enum = fd.enum_type.add(name=enum_name)
        for number, value_name in sorted(values.items()):
            enum.value.add(name=value_name, number=number)
    for mt in schema.messages.values():
        msg = fd.message_type.add(name=mt.name)
        if mt.oneof:
            msg.oneof_decl.add(name="tx")
        for f in mt.fields:
            fp = msg.field.add(name=f.name, number=f.number, type=_PROTO_TYPES[f.type],
                               label=_FDP.LABEL_REPEATED if f.repeated else _FDP.LABEL_OPTIONAL)
            if f.type == "message":
                fp.type_name = f".{PACKAGE}.{f.message}"
            elif f.type == "enum":
                fp.type_name = f".{PACKAGE}.{f.enum}"
            if mt.oneof:
                fp.oneof_index = 0
    return fd


_CLASSES: dict[int, tuple[Schema, dict[str, Any]]] = {}


def _classes(schema: Schema) -> dict[str, Any]:
    entry = _CLASSES.get(id(schema))
    if entry is None or entry[0] is not schema:
        pool = descriptor_pool.DescriptorPool()  # one pool per version: the versions share message names
        pool.Add(file_descriptor(schema))
        classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
                   for name in schema.messages}
        entry = _CLASSES[id(schema)] = (schema, classes)
    return entry[1]


def message_class(schema: Schema, message: str) -> Any:
    """The message class of ``message`` in ``schema``'s version."""
    try:
        return _classes(schema)[message]
    except KeyError:
        raise KeyError(f"message {message!r} not in schema {schema.version}") from None


def _message_type(schema: Schema, message: str) -> MessageType:
    try:
        return schema.messages[message]
    except KeyError:
        raise KeyError(f"message {message!r} not in schema {schema.version}") from None


# --------------------------------------------------------------------------- varints (unknown fields, diagnostics)


def encode_varint(value: int) -> bytes:
    if value < 0 or value > _U64:
        raise WireEncodeError(f"varint out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
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


def _encode_unknown(items: Any) -> bytes:
    out = bytearray()
    for number, wire_type, value in items or ():
        out += encode_varint((number << 3) | wire_type)
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


def _diagnose(schema: Schema, message: str, data: bytes) -> str | None:
    """Why the library refused ``data`` as ``message``: the first problem found, or None. A fault inside an element
    of a repeated message field names the element (``in txs[3]: …``)."""
    mt = schema.messages.get(message)
    pos, n = 0, len(data)
    seen: dict[int, int] = {}  # repeated message field number -> elements read so far
    try:
        while pos < n:
            start = pos
            key, pos = decode_varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if number == 0:
                return f"field number 0 at offset {start} in {message}"
            if wire_type == VARINT:
                _, pos = decode_varint(data, pos)
            elif wire_type in (I64, I32):
                size = 8 if wire_type == I64 else 4
                if size > n - pos:
                    return f"truncated fixed{size * 8} field {number} at offset {pos}"
                pos += size
            elif wire_type == LEN:
                size, pos = decode_varint(data, pos)
                if size > n - pos:
                    return f"truncated length-delimited field {number} at offset {pos}: needs {size} bytes, " \
                           f"{n - pos} left"
                payload, pos = data[pos:pos + size], pos + size
                f = mt.by_number.get(number) if mt else None
                if f is not None and f.type == "string":
                    try:
                        payload.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        return f"field {f.name}: invalid UTF-8 ({exc.reason})"
                elif f is not None and f.type == "message":
                    inner = _diagnose(schema, f.message or "", payload)
                    index = seen[number] = seen.get(number, -1) + 1
                    if inner:
                        return f"in {f.name}[{index}]: {inner}" if f.repeated else f"in {f.name}: {inner}"
                elif f is not None and f.type in _VARINT_TYPES:  # packed repeated scalars
                    p = 0
                    while p < len(payload):
                        _, p = decode_varint(payload, p)
            else:  # groups (3/4) are proto2-only and never used by devshard; 6/7 do not exist
                return f"unsupported wire type {wire_type} for field {number} at offset {start}"
    except WireDecodeError as exc:
        return str(exc)
    return None


def parse(schema: Schema, message: str, data: bytes) -> Any:
    """``data`` parsed as a ``message`` object of ``schema``'s version; malformed bytes raise WireDecodeError."""
    try:
        return message_class(schema, message).FromString(data)
    except DecodeError as exc:
        raise WireDecodeError(_diagnose(schema, message, bytes(data)) or f"malformed {message}: {exc}") from None


# --------------------------------------------------------------------------- dict form


def unknown_fields(msg: Any) -> list[tuple[int, int, int | bytes]]:
    """The unknown fields of a parsed message, in wire order, as ``(number, wire_type, value)``."""
    out = []
    for item in UnknownFieldSet(msg):
        if item.wire_type not in (VARINT, I64, LEN, I32):
            raise WireDecodeError(f"unsupported wire type {item.wire_type} for field {item.field_number}")
        out.append((item.field_number, item.wire_type, item.data))
    return out


def to_dict(schema: Schema, message: str, msg: Any) -> dict[str, Any]:
    """A parsed message object as the dict form (defaults filled in, ``_unknown`` when there are unknown fields)."""
    mt = _message_type(schema, message)
    out: dict[str, Any] = {}
    if mt.oneof:
        member = msg.WhichOneof("tx")
        if member is not None:
            out[member] = to_dict(schema, mt.by_name[member].message or "", getattr(msg, member))
    else:
        for f in mt.fields:
            value = getattr(msg, f.name)
            if f.type == "message":
                if f.repeated:
                    out[f.name] = [to_dict(schema, f.message or "", item) for item in value]
                else:
                    out[f.name] = to_dict(schema, f.message or "", value) if msg.HasField(f.name) else None
            else:
                out[f.name] = list(value) if f.repeated else value
    unknown = unknown_fields(msg)
    if unknown:
        out[UNKNOWN_KEY] = unknown
    return out


def decode_message(schema: Schema, message: str, data: bytes) -> dict[str, Any]:
    return to_dict(schema, message, parse(schema, message, data))


def _check_scalar(message: str, f: Field, value: Any) -> None:
    # the library would coerce a bool into an int field; the tables are stricter, as the Go types are
    if f.type == "bool":
        ok = isinstance(value, bool)
    elif f.type == "string":
        ok = isinstance(value, str)
    elif f.type == "bytes":
        ok = isinstance(value, (bytes, bytearray))
    else:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not _RANGES[f.type][0] <= value <= _RANGES[f.type][1]:
            raise WireEncodeError(f"{message}.{f.name}: {value} out of {f.type} range")
    if not ok:
        raise WireEncodeError(f"{message}.{f.name}: expected {f.type}, got {type(value).__name__}")


def _fill(schema: Schema, message: str, msg: Any, value: Mapping[str, Any]) -> None:
    mt = _message_type(schema, message)
    if not isinstance(value, Mapping):
        raise WireEncodeError(f"{message}: expected a mapping, got {type(value).__name__}")
    extra = set(value) - set(mt.by_name) - {UNKNOWN_KEY}
    if extra:
        raise WireEncodeError(f"{message}: unknown field name(s) {sorted(extra)}")
    if mt.oneof and len([n for n in value if n != UNKNOWN_KEY and value[n] is not None]) > 1:
        raise WireEncodeError(f"{message}: more than one oneof member set")
    for name, v in value.items():
        if name == UNKNOWN_KEY or v is None:
            continue
        f = mt.by_name[name]
        if f.type == "message":
            if f.repeated:
                target = getattr(msg, name)
                for item in v:
                    _fill(schema, f.message or "", target.add(), item)
            else:
                sub = getattr(msg, name)
                sub.SetInParent()  # an empty member is still set: its presence is the data
                _fill(schema, f.message or "", sub, v)
        elif f.repeated:
            items = list(v)
            for item in items:
                _check_scalar(message, f, item)
            getattr(msg, name).extend(items)
        else:
            _check_scalar(message, f, v)
            setattr(msg, name, bytes(v) if isinstance(v, bytearray) else v)
    raw_unknown = _encode_unknown(value.get(UNKNOWN_KEY))
    if raw_unknown:  # fields the table does not know stay unknown when merged back, and serialize after the known
        msg.MergeFromString(raw_unknown)


def encode_message(schema: Schema, message: str, value: Mapping[str, Any]) -> bytes:
    """Deterministic encoding by the library: known fields in field-number order, then the preserved unknown ones."""
    msg = message_class(schema, message)()
    _fill(schema, message, msg, value)
    return msg.SerializeToString()


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


@dataclass(frozen=True)
class Schema:
    """All message and enum tables of one protocol version, and the proto commits they were checked against."""

    version: str
    messages: Mapping[str, MessageType]
    enums: Mapping[str, Mapping[int, str]]
    source: str = ""

    def decode(self, message: str, data: bytes) -> dict[str, Any]:
        return decode_message(self, message, data)

    def encode(self, message: str, value: Mapping[str, Any]) -> bytes:
        return encode_message(self, message, value)

    def cls(self, message: str) -> Any:
        """The protobuf message class of ``message`` in this version (built once from this table)."""
        return message_class(self, message)
