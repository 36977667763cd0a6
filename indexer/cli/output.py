"""Everything the CLI prints goes through here: one stderr console, exit codes, and text that is never read as
Rich markup (file names and data may contain ``[/]``).

Rich is imported on first use only: a command that prints one plain line (most commands with nothing to do) should
not pay ~70 ms to import it."""
from __future__ import annotations

import logging
import re
import sys
from functools import cache
from typing import TYPE_CHECKING

from indexer.alerts.messages import UNSAFE

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_RUNTIME, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


@cache
def console() -> "Console":
    from rich.console import Console

    return Console(stderr=True)


def say(text: str) -> None:
    """Plain lines to stderr (no markup interpretation, no Rich import). They may quote stored data (an escrow id, a
    participant): control and invisible characters other than the line breaks of the text itself are shown as
    escapes, so no peer's escape sequence reaches the terminal."""
    sys.stderr.write(_CONTROL.sub(lambda m: m.group() if m.group() == "\n" else _shown(m.group()), text) + "\n")
    sys.stderr.flush()


# userinfo in any URL of a message (https://user:pass@node/), up to the last "@" before the host (a password may
# hold an unencoded "@"), and a libpq ``password=`` keyword or query parameter: a last guard, the clients already
# strip them
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s]*@")
_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)(?!\*\*\*)('(?:[^'\\]|\\.)*'|[^\s&]+)")


def redact_text(text: str) -> str:
    from indexer.db.url import scrub  # the passwords of the database URLs in use, in whatever form libpq quoted

    return _PASSWORD.sub(r"\1***", _USERINFO.sub(r"\1***@", scrub(text)))


# C0 and C1 control characters (an escape sequence from a peer's error text would drive the terminal), and the
# invisible ones that reorder or hide text: the alerts' set (zero-width, line and paragraph separators, bidi)
_CONTROL = UNSAFE
MESSAGE_LIMIT = 2000  # characters of one error or warning line (a peer's text inside it may be of any length)


def _shown(char: str) -> str:
    code = ord(char)
    return "\\n" if char == "\n" else f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: object, limit: int = 200) -> str:
    """Data from the database or a peer, safe on one terminal line: control and invisible characters shown as
    escapes, at most ``limit`` characters (``…`` marks a cut)."""
    flat = _CONTROL.sub(lambda m: _shown(m.group()), str(text))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


LOG_LIMIT = 4000  # characters of one log message (its traceback, when there is one, follows whole)


class LogLine(logging.Formatter):
    """Every log record as one line: a message carries peers' text (a host's error, an alert's summary, a node's
    answer), so credentials are redacted, control and invisible characters shown as escapes and the length bounded,
    whichever module logged it; a traceback still follows on its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = one_line(redact_text(record.message), LOG_LIMIT)
        return super().formatMessage(record)


# A message is one logical line: soft_wrap leaves the wrapping to the terminal, so a log file or a pipe gets it whole
# (Rich would otherwise break it at the console's width, 80 columns when stderr is not a terminal). Messages carry
# peers' text (a node's error, a file's line): credentials redacted first, then one bounded line, shown as it is
# (markup escaped, no ":emoji:" codes replaced).
def _message(text: str) -> str:
    """An error or warning as one line: credentials redacted, line breaks and tabs (a driver's multi-line error)
    folded into spaces, other control and invisible characters shown as escapes, bounded; a leading indent kept."""
    indent = text[: len(text) - len(text.lstrip(" "))]
    return indent + one_line(" ".join(redact_text(text).split()), MESSAGE_LIMIT)


def error(text: str) -> None:
    from rich.markup import escape

    console().print(f"[red]error:[/] {escape(_message(text))}", highlight=False, soft_wrap=True, emoji=False)


def warn(text: str) -> None:
    from rich.markup import escape

    console().print(f"[yellow]{escape(_message(text))}[/]", highlight=False, soft_wrap=True, emoji=False)
