"""Data values made safe for the restitution report's sinks: Markdown prose and table cells (escaped, one line,
bounded), identifiers in inline code, raw JSON in a fence longer than any backtick run, and CSV cells (text a
spreadsheet would read as a formula gets a leading apostrophe, numbers stay numbers, no cell longer than a
spreadsheet holds)."""
from __future__ import annotations

import re
from typing import Any

from indexer.reports.restitution.verdicts import one_line

MAX_CELL = 30_000  # a spreadsheet cell holds 32,767 characters; longer evidence is referred to the Markdown
ID_LIMIT = 200      # characters of an identifier (participant, escrow, inference) in the Markdown
TEXT_LIMIT = 2_000  # characters of one data text in the Markdown prose (the raw evidence block stays whole)
# CommonMark's backslash escapes: emphasis, code, links and images, raw HTML and entities (&#x202e; would decode to
# a bidi override), headings, tables, GFM strikethrough
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#~&])")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def md(text: Any, most: int = TEXT_LIMIT) -> str:
    """Text from the data, safe in Markdown prose and table cells: one line, no control or bidi characters
    (:func:`one_line`), at most ``most`` characters before escaping."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text, most))


def code(text: Any) -> str:
    """An identifier in inline code: one line, bounded, backticks in it replaced (they would end the span). A ``|``
    stays as it is here (a code span shows a backslash literally); :func:`pipe_safe` escapes it in a table cell."""
    return "`" + one_line(str(text).replace("`", "'"), ID_LIMIT) + "`"


def fenced(text: str, lang: str = "json") -> list[str]:
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return [fence + lang, text, fence]


def pipe_safe(cell: str) -> str:
    """A table cell whose every "|" is escaped: one not escaped yet (inside a code span) would end the cell, and
    GFM reads "\\|" as "|" even in code."""
    return _UNESCAPED_PIPE.sub(r"\\|", cell)


def csv_cell(value: Any) -> Any:
    """A CSV cell: numbers as they are; text that a spreadsheet would read as a formula with a leading apostrophe,
    and text longer than a cell holds cut at MAX_CELL characters with an ellipsis (a peer chose the value)."""
    if value is None:
        return ""
    if isinstance(value, str) and len(value) > MAX_CELL:
        value = value[:MAX_CELL - 1] + "…"
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
