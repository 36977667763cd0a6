"""Everything the CLI prints goes through here: one stderr console, exit codes, and text that is never read as
Rich markup (file names and data may contain ``[/]``)."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)
EXIT_OK, EXIT_RUNTIME, EXIT_INPUT = 0, 1, 2


def say(text: str, style: str | None = None) -> None:
    """Print plain text (no markup interpretation), optionally in one style."""
    console.print(text, style=style, markup=False, highlight=False)


def error(text: str) -> None:
    console.print(f"[red]error:[/] {escape(text)}", highlight=False)


def warn(text: str) -> None:
    console.print(f"[yellow]{escape(text)}[/]", highlight=False)
