"""Everything the CLI prints goes through here: one stderr console, exit codes, and text that is never read as
Rich markup (file names and data may contain ``[/]``)."""
from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)
EXIT_OK, EXIT_RUNTIME, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def say(text: str, style: str | None = None) -> None:
    """Print plain text (no markup interpretation), optionally in one style."""
    console.print(text, style=style, markup=False, highlight=False)


# userinfo in any URL of a message (https://user:pass@node/): a last guard, the clients already strip it
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact_text(text: str) -> str:
    return _USERINFO.sub(r"\1***@", text)


def error(text: str) -> None:
    console.print(f"[red]error:[/] {escape(redact_text(text))}", highlight=False)


def warn(text: str) -> None:
    console.print(f"[yellow]{escape(text)}[/]", highlight=False)
