"""Deterministic protobuf encoding of the few flat messages the proofs hash, written out by field number.

Go's ``proto.MarshalOptions{Deterministic: true}`` of a proto3 message writes fields in number order and leaves out
every field at its default (0, false, empty string or bytes); repeated and nested fields are length-delimited. These
helpers do exactly that for the scalar kinds the signed messages use, so the bytes are those the signer hashed."""
from __future__ import annotations

from typing import Iterable

VARINT, LEN = 0, 2


class ProtoError(ValueError):
    """Bytes that are not the protobuf this module expects (the message names the field and offset)."""


_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))  # every one-byte varint: field keys and small counts


def uvarint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0 or value >= 1 << 64:
        raise ProtoError(f"varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return uvarint(number << 3 | wire_type)


# the keys of fields 1..31 made once: every root and signed message writes them for each field
_VARINT_KEYS = tuple(key(n, VARINT) if n else b"" for n in range(32))
_LEN_KEYS = tuple(key(n, LEN) if n else b"" for n in range(32))


def f_uint(number: int, value: int) -> bytes:
    """uint64/uint32/bool field; int64 takes its two's complement (a negative time is 10 bytes, as in Go)."""
    if not value:
        return b""
    if value < 0:
        value += 1 << 64
    return (_VARINT_KEYS[number] if 0 < number < 32 else key(number, VARINT)) + (
        _ONE_BYTE[value] if 0 <= value < 0x80 else uvarint(value))


def f_bool(number: int, value: bool) -> bytes:
    return f_uint(number, 1 if value else 0)


def f_bytes(number: int, value: bytes) -> bytes:
    if not value:
        return b""
    size = len(value)
    return (_LEN_KEYS[number] if 0 < number < 32 else key(number, LEN)) + (
        _ONE_BYTE[size] if size < 0x80 else uvarint(size)) + value


def f_str(number: int, value: str) -> bytes:
    return f_bytes(number, value.encode("utf-8"))


def f_msg(number: int, body: bytes) -> bytes:
    """A nested message field; written even when its body is empty (a set sub-message is present on the wire)."""
    size = len(body)
    return (_LEN_KEYS[number] if 0 < number < 32 else key(number, LEN)) + (
        _ONE_BYTE[size] if size < 0x80 else uvarint(size)) + body


def concat(parts: Iterable[bytes]) -> bytes:
    return b"".join(parts)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ProtoError(f"truncated varint at offset {pos}")
        b = data[pos]
        pos += 1
        if shift == 63 and b > 1:  # the 10th byte holds bit 63 alone (Go's binary.Uvarint: overflow)
            raise ProtoError(f"varint longer than 10 bytes at offset {pos}" if b & 0x80 else
                             f"varint overflows 64 bits at offset {pos - 1}")
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """Every (field number, wire type, value) of one message level, in wire order. Only varint and length-delimited
    fields are accepted: the messages read here have no fixed-width fields, so anything else is an error."""
    out: list[tuple[int, int, int | bytes]] = []
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        # one-byte varints (keys of fields 1..15, small values and lengths) are read inline: the common case
        if data[pos] < 0x80:
            tag, pos = data[pos], pos + 1
        else:
            tag, pos = read_uvarint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtoError(f"field number 0 at offset {start}")
        if wire == VARINT:
            if pos < end and data[pos] < 0x80:
                value, pos = data[pos], pos + 1
            else:
                value, pos = read_uvarint(data, pos)
            out.append((number, wire, value))
        elif wire == LEN:
            if pos < end and data[pos] < 0x80:
                size, pos = data[pos], pos + 1
            else:
                size, pos = read_uvarint(data, pos)
            if pos + size > end:
                raise ProtoError(f"field {number} at offset {start}: length {size} runs past the end ({len(data)})")
            out.append((number, wire, data[pos:pos + size]))
            pos += size
        else:
            raise ProtoError(f"field {number} at offset {start}: unsupported wire type {wire}")
    return out
