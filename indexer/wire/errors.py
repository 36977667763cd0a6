"""Errors of the wire layer (a module of their own so the tables and the protobuf bridge can both raise them), and
the bound every peer-given value of a chain or host answer is held to before it becomes a record."""

from __future__ import annotations

from typing import Any


class WireDecodeError(ValueError):
    """Bytes that are not a valid encoding of the expected message (truncated, bad tag, bad UTF-8...)."""


class WireEncodeError(ValueError):
    """A message dict that cannot be encoded (out-of-range integer, wrong Python type)."""


class NormalizeError(ValueError):
    """Input JSON or decoded data that cannot be mapped (wrong types, mixed escrows, a value past its bound)."""


def bounded(value: Any, what: str, limit: int, items: int | None = None) -> Any:
    """``value`` when within its bound (indexer.records.BOUNDS): a string of at most ``limit`` characters, or a list
    of at most ``items`` such strings; else NormalizeError saying which. Other types are left to the load's check."""
    if isinstance(value, list):
        if items is not None and len(value) > items:
            raise NormalizeError(f"{what}: {len(value)} entries, more than the {items} allowed")
        return [bounded(v, f"{what}[{i}]", limit) for i, v in enumerate(value)]
    if isinstance(value, str) and len(value) > limit:
        raise NormalizeError(f"{what}: {len(value)} characters, more than the {limit} allowed")
    return value
