"""COPY text-format rows, built while a batch is typed (so the database thread only streams bytes).

Column order of every row: source_line, the kind's columns, extra, source_id. The typed staging tables and the
direct COPY into rec.* tables both use it. Format rules: PostgreSQL COPY text (tab-separated, \\N for null,
backslash escapes), arrays as `{"a","b"}` literals.
"""
from __future__ import annotations

from indexer.records import BOOL, HEX, I64, ID, KINDS, OBJ, REASON, STR, STRS, TS, U32, U64, U64N, VOTES, Kind


def text(value: str) -> str:
    # four scans for the characters to escape cost far less than escaping (an identifier or a model name rarely holds
    # one: 0.2 µs against 3 µs for a 34-character model name). A stored response payload always does (its JSON
    # escapes quotes): four C-level replaces, the backslash first, take 1.6 µs for a 400-character vLLM error body
    # where str.translate takes 36 µs (it builds the result character by character through a dict)
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def array(values: list[str]) -> str:
    items = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return text("{" + ",".join(items) + "}")


_FORMAT = {  # expression formatting a non-null value v
    ID: "text(v)", STR: "text(v)", HEX: "v", REASON: "v", VOTES: "text(v)",
    U64: "str(v)", U64N: "str(v)", I64: "str(v)", U32: "str(v)",
    BOOL: "('t' if v else 'f')", STRS: "array(v)", TS: "v.isoformat()", OBJ: "text(v)",
}


def _compile(kind: Kind):
    """A function (row tuple with the line number first, source_id) -> one COPY line (str, newline included)."""
    parts = ["str(r[0])"]
    for i, f in enumerate(kind.fields, start=1):
        expr = _FORMAT[f.type].replace("v", f"r[{i}]")
        parts.append(f"({expr} if r[{i}] is not None else NULL)" if not f.required else expr)
    n = len(kind.fields) + 1
    parts.append(f"(text(r[{n}]) if r[{n}] is not None else NULL)")  # extra (JSON text)
    parts.append("sid")
    src = f"def fmt(r, sid):\n    return '\\t'.join(({', '.join(parts)},)) + '\\n'\n"
    scope = {"text": text, "array": array, "NULL": "\\N"}
    exec(src, scope)  # noqa: S102 - generated from the static field table in kinds.py
    return scope["fmt"]


FORMATTERS = {name: _compile(kind) for name, kind in KINDS.items()}
