"""Typing loaded lines: each NDJSON line checked against its kind (indexer.records) and rendered as a COPY text row,
or quarantined with a reason naming the field. The prepare stage (indexer.load.prepare) uses only what this module
exports; the tiers behind it, cheapest first:

* ``native`` — the C block typer (``_typer.c``): the bulk tx kinds' plain lines, a block at a time, no Python object
  a line. Optional: ``IMPL`` says whether it is in use (``INDEXER_IMPL``: auto, c, python).
* ``structs`` — msgspec Structs for the same kinds: a line C declined (a non-ASCII model name, say).
* ``fastpath`` — generated per-kind checks and renders of a parsed line, for every kind.
* ``coerce`` + ``copytext`` — the general path: field by field, with the precise reason for a bad field.

Each tier renders exactly what the general path renders (tests/load/test_typer.py, test_fastpath.py,
test_typing_impl.py).
What each earns, in µs a line of a synthetic mainnet log (bench/typing_bench.py): C 0.8, the Python paths 4.0,
without the Struct decoder 4.7, the general path alone 8.0.
"""
from indexer.load.typed.copytext import text as copy_text
from indexer.load.typed.lines import line_typer, printable, slot_offenders
from indexer.load.typed.native import IMPL, TYPER_KINDS, shift_rows, type_block
from indexer.load.typed.structs import typed_line

__all__ = ["IMPL", "TYPER_KINDS", "copy_text", "line_typer", "printable", "shift_rows", "slot_offenders",
           "type_block", "typed_line"]
