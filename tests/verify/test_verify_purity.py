"""indexer.verify is the part a third party runs on its own: it must import only the standard library, coincurve,
protobuf and itself, never the database, poller or load code."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "indexer" / "verify"
ALLOWED = {"coincurve", "google"}


def test_verify_imports_only_stdlib_coincurve_and_itself():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                if name.startswith("indexer.verify") or top in ALLOWED or top in sys.stdlib_module_names \
                        or top == "__future__":
                    continue
                bad.append(f"{path.name}:{node.lineno}: {name}")
    assert not bad, bad
    assert len(list(PACKAGE.glob("*.py"))) >= 3
