"""The block typer: the bulk tx kinds typed a block at a time in C (_typer.c, beside this module), for the file load's
workers and the poller's decode workers (indexer.poller.decode) alike.

Why C: with the Struct decoder (indexer.load.typed.structs) a start or finish line still cost ~4 µs of Python glue
around ~0.7 µs of decoding (the tuple, the render call, the row tuple, the batch fold), and the typing workers
took ~6 CPU-s of a 978k-line file on a 2-core machine whose other core the server's COPY needs. No library types
NDJSON into COPY text with these checks, so the common case is done in C: a line it can take costs no Python
object, and every other line goes through the Python paths unchanged (``fallback``), which stay the definition of
what a line means. tests/load/test_typer.py holds the C rows to the Python paths' rows line by line.

The extension is optional (setup.py builds it with ``optional=True``): without it, ``type_block`` is None and the
load types every line with the Python paths, which give the same rows. ``INDEXER_IMPL`` chooses: ``auto`` (the
default: C when built), ``c`` (C or an ImportError naming the fix) or ``python``. ``IMPL`` is the path in use.

The kinds and their fields come from indexer.records (the same table the Python paths are generated from).
"""
from __future__ import annotations

import importlib
import logging
import re
from types import ModuleType

from indexer.load.typed.structs import STRUCT_KINDS
from indexer.records import BOOL, HEX, I64, ID, KINDS, STR, U32, U64
from indexer.settings import typing_impl

CHOICES = ("auto", "c", "python")


def choose(choice: str, load=lambda: importlib.import_module("indexer.load.typed._typer")) -> ModuleType | None:
    """The C module for an ``INDEXER_IMPL`` value, or None for the Python paths. ``load`` imports the extension."""
    choice = choice.strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"INDEXER_IMPL={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "python":
        return None
    try:
        return load()
    except ImportError as exc:
        if choice == "c":
            raise ImportError(f"INDEXER_IMPL=c but the C block typer (indexer.load.typed._typer) is not built ({exc}): "
                              "reinstall with a C compiler and the Python headers, or set INDEXER_IMPL=python "
                              "or auto") from exc
        return None


_TYPE_CODES = {ID: 1, U64: 2, I64: 3, U32: 4, BOOL: 5, STR: 6, HEX: 7}  # as in _typer.c


def _spec(name: str) -> tuple:
    kind = KINDS[name]
    at = {f.name: i for i, f in enumerate(kind.fields)}
    assert kind.scope == "escrow" and kind.key[0] == "escrow_id" and len(kind.key) in (2, 3)
    assert all(f.type in _TYPE_CODES for f in kind.fields)
    assert len(kind.slot_fields) <= 1 and all(kind.field(k).type in (U32, U64) for k in kind.key[1:])
    refusal = ((at["input_tokens"], at["output_tokens"], at["response_payload"]) if name == "finish"
               else (-1, -1, -1))
    # a string past its bound (in bytes here: at least its characters) is declined; the Python paths name it
    return (name, tuple((f.name, _TYPE_CODES[f.type], f.required, f.max_len or 0) for f in kind.fields),
            at["escrow_id"], at[kind.key[1]], at[kind.key[2]] if len(kind.key) == 3 else -1,
            at[kind.slot_fields[0]] if kind.slot_fields else -1, refusal)


_ROW_HEAD = re.compile(rb"[0-9]{1,18}\t")  # a row's line number (as _typer.c reads it) and the tab after it


def shift_rows_python(copy: bytes, offset: int, sid: bytes) -> bytes:
    """``shift_rows`` without the extension, byte for byte: placeholder rows ("line \\t columns … \\t 0 \\n")
    renumbered by ``offset`` and given the source id ``sid``; ValueError at the first row that is not one."""
    out, at, end = [], 0, len(copy)
    while at < end:
        nl = copy.find(b"\n", at)
        head = _ROW_HEAD.match(copy, at, nl) if nl >= 0 else None
        if head is None or nl - head.end() < 1 or copy[nl - 2:nl] != b"\t0":
            raise ValueError(f"shift_rows: not a placeholder row at byte {at}")
        out += (b"%d" % (int(copy[at:head.end() - 1]) + offset), copy[head.end() - 1:nl - 1], sid, b"\n")
        at = nl + 1
    return b"".join(out)


TYPER_KINDS = frozenset(STRUCT_KINDS)
_typer = choose(typing_impl())
if _typer is not None:
    try:
        _typer.configure([_spec(name) for name in STRUCT_KINDS])
    except (TypeError, ValueError) as exc:  # built from an older _typer.c (a checkout updated, not reinstalled)
        if typing_impl().strip().lower() == "c":
            raise ImportError(f"INDEXER_IMPL=c but the C block typer was built from another version of _typer.c "
                              f"({exc}): rebuild it (make venv, or pip install -e .)") from exc
        logging.getLogger(__name__).warning("the C block typer was built from another version of _typer.c (%s): "
                                            "typing in Python until it is rebuilt (make venv)", exc)
        _typer = None
IMPL = "python" if _typer is None else "c"
# type_block(block, first_line, resume_after, sid, fallback), or None: then every line takes the Python paths
type_block = None if _typer is None else _typer.type_block
# a typed part's rows renumbered and given their source (indexer.load.assemble)
shift_rows = shift_rows_python if _typer is None else _typer.shift_rows
