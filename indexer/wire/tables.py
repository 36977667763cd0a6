"""The shape of a protocol version's wire tables: fields and message types, as plain data (indexer.wire.schemas
holds the tables themselves; indexer.wire.protobuf builds message classes from them)."""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Mapping


@dataclass(frozen=True)
class Field:
    name: str
    number: int
    type: str  # uint64 | uint32 | int64 | int32 | bool | enum | string | bytes | message
    repeated: bool = False
    message: str | None = None  # message type name when type == "message"
    enum: str | None = None  # enum name when type == "enum"


@dataclass(frozen=True)
class MessageType:
    name: str
    fields: tuple[Field, ...]
    oneof: bool = False  # all fields are members of one oneof named "tx" (DevshardTx)
    by_number: Mapping[int, Field] = dc_field(init=False, repr=False, compare=False)
    by_name: Mapping[str, Field] = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_number", {f.number: f for f in self.fields})
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
