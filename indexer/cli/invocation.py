"""How the user can run this same `indexer` again, for the hints the commands print: a PATH lookup of `indexer`
fails after `make demo` (the script is in .venv/bin, which is not on PATH), so the hint names the script itself."""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def self_command(argv0: str | None = None, executable: str | None = None) -> str:
    """The command that runs this indexer, quoted for a POSIX shell: `indexer` when PATH finds this very script,
    else the script's path (relative when under the current directory), or `<python> -m indexer` when run as a
    module."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    script = Path(argv0)
    if not argv0 or script.name in ("__main__.py", "-c", "-m"):
        return f"{_shown(executable or sys.executable)} -m indexer"
    here = os.path.abspath(argv0)
    found = shutil.which(script.name)
    if found and os.path.realpath(found) == os.path.realpath(here):
        return shlex.quote(script.name)
    return _shown(here)


def _shown(path: str) -> str:
    """`path` relative to the current directory when it lies under it (./ kept so the shell does not search PATH),
    else absolute; symlinks are kept (a venv's python is a link that must stay the venv's)."""
    path = os.path.abspath(path)
    cwd = os.getcwd()
    if path.startswith(cwd.rstrip("/") + "/"):
        rel = os.path.relpath(path, cwd)
        path = rel if "/" in rel else f"./{rel}"
    return shlex.quote(path)
