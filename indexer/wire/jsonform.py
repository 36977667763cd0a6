"""The JSON convention of the reference fixtures F4–F9 for decoded protobuf messages.

Protocol messages have no canonical JSON form, so we fix one (as §4 suggests): proto field names,
bytes as lowercase hex, enums by name, integers as JSON numbers. ``from_json`` also accepts enum
numbers and is the inverse of ``to_json``, which lets tests start from the fixtures verbatim.
Unknown fields render as ``[[number, wire_type, int-or-hex], …]``.
"""

from __future__ import annotations

from typing import Any, Mapping

from indexer.wire.errors import WireEncodeError
from indexer.wire.protobuf import LEN, UNKNOWN_KEY
from indexer.wire.schemas import Field, Schema


def _value_to_json(schema: Schema, f: Field, value: Any) -> Any:
    if f.type == "bytes":
        return bytes(value).hex()
    if f.type == "enum":
        return schema.enums.get(f.enum or "", {}).get(value, value)
    if f.type == "message":
        return None if value is None else to_json(schema, f.message or "", value)
    return value


def to_json(schema: Schema, message: str, value: Mapping[str, Any]) -> dict[str, Any]:
    mt = schema.messages[message]
    out: dict[str, Any] = {}
    for name, v in value.items():
        if name == UNKNOWN_KEY:
            out[name] = [[n, wt, raw.hex() if wt == LEN else raw] for n, wt, raw in v]
            continue
        f = mt.by_name[name]
        out[name] = [_value_to_json(schema, f, x) for x in v] if f.repeated else _value_to_json(schema, f, v)
    return out


def _value_from_json(schema: Schema, f: Field, value: Any) -> Any:
    if f.type == "bytes":
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise WireEncodeError(f"{f.name}: not a hex string: {value!r}") from None
    if f.type == "enum" and isinstance(value, str):
        by_name = {n: k for k, n in schema.enums.get(f.enum or "", {}).items()}
        if value not in by_name:
            raise WireEncodeError(f"{f.name}: unknown enum name {value!r}")
        return by_name[value]
    if f.type == "message":
        return None if value is None else from_json(schema, f.message or "", value)
    return value


def from_json(schema: Schema, message: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    mt = schema.messages[message]
    out: dict[str, Any] = {}
    for name, v in obj.items():
        if name == UNKNOWN_KEY:
            out[name] = [(n, wt, bytes.fromhex(raw) if wt == LEN else raw) for n, wt, raw in v]
            continue
        f = mt.by_name.get(name)
        if f is None:
            raise WireEncodeError(f"{message}: field {name!r} not in schema {schema.version}")
        out[name] = [_value_from_json(schema, f, x) for x in v] if f.repeated else _value_from_json(schema, f, v)
    return out
