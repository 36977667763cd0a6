"""The block typer: the bulk tx kinds typed a block at a time in C (indexer/load/_typer.c), for the file load's
workers and the poller's decode workers (indexer.poller.decode) alike.

Why C: with the Struct decoder (indexer.load.structs) a start or finish line costs ~4 µs of Python glue around
~0.7 µs of decoding (the tuple, the render call, the row tuple, the batch fold), ~6 CPU-s of typing for a
978k-line file on a 2-core machine whose other core the server's COPY needs. No library types
NDJSON into COPY text with these checks, so the common case is done in C: a line it can take costs no Python
object, and every other line goes through the Python paths unchanged (``fallback``), which stay the definition of
what a line means. tests/test_typer.py holds the C rows to the Python paths' rows line by line.

The kinds and their fields come from indexer.records (the same table the Python paths are generated from).
"""
from __future__ import annotations

from indexer.load import _typer
from indexer.load.structs import STRUCT_KINDS
from indexer.records import BOOL, HEX, I64, ID, KINDS, STR, U32, U64

_TYPE_CODES = {ID: 1, U64: 2, I64: 3, U32: 4, BOOL: 5, STR: 6, HEX: 7}  # as in _typer.c


def _spec(name: str) -> tuple:
    kind = KINDS[name]
    at = {f.name: i for i, f in enumerate(kind.fields)}
    assert kind.scope == "escrow" and kind.key[0] == "escrow_id" and len(kind.key) in (2, 3)
    assert all(f.type in _TYPE_CODES for f in kind.fields)
    assert len(kind.slot_fields) <= 1 and all(kind.field(k).type in (U32, U64) for k in kind.key[1:])
    refusal = ((at["input_tokens"], at["output_tokens"], at["response_payload"]) if name == "finish"
               else (-1, -1, -1))
    return (name, tuple((f.name, _TYPE_CODES[f.type], f.required) for f in kind.fields),
            at["escrow_id"], at[kind.key[1]], at[kind.key[2]] if len(kind.key) == 3 else -1,
            at[kind.slot_fields[0]] if kind.slot_fields else -1, refusal)


TYPER_KINDS = frozenset(STRUCT_KINDS)
_typer.configure([_spec(name) for name in STRUCT_KINDS])
type_block = _typer.type_block
shift_rows = _typer.shift_rows  # a typed part's rows renumbered and given their source (indexer.load.assemble)
