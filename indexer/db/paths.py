"""Where the schema's files live: sql/ and migrations/ at the top of the checkout (an editable install reads them
there), installed inside the package by the build (setup.py), so a wheel, pipx or any other install finds them."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _schema_dir(name: str) -> Path:
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PACKAGE_DIR.parent / name


SQL_DIR = _schema_dir("sql")
MIGRATIONS_DIR = _schema_dir("migrations")
