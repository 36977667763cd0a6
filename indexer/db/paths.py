"""Where the schema's files live: inside the package, so any install (editable, wheel, pipx) finds them."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
SQL_DIR = PACKAGE_DIR / "sql"
MIGRATIONS_DIR = PACKAGE_DIR / "migrations"
