"""Errors of the wire layer (a module of their own so the tables and the protobuf bridge can both raise them)."""

from __future__ import annotations


class WireDecodeError(ValueError):
    """Bytes that are not a valid encoding of the expected message (truncated, bad tag, bad UTF-8...)."""


class WireEncodeError(ValueError):
    """A message dict that cannot be encoded (out-of-range integer, wrong Python type)."""
