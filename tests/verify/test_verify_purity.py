"""indexer.verify is the part a third party runs on its own: it must import only the standard library, coincurve,
protobuf and itself, never the database, poller or load code."""
from __future__ import annotations

import ast
import subprocess
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


def test_the_standalone_verifier_loads_no_database_or_poller_code():
    """Importing the bundle reader, the checks and the CLI (``python -m indexer.verify``) loads only the standard
    library, coincurve (with its secp256k1 binding) and indexer.verify."""
    for name in ("bundle.py", "evidence.py", "__main__.py"):
        assert (PACKAGE / name).is_file(), name
    probe = ("import sys; before = set(sys.modules); "
             "import indexer.verify.__main__, indexer.verify.bundle, indexer.verify.evidence; "
             "print('\\n'.join(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parents[1], capture_output=True, text=True,
                          timeout=60, check=True)
    foreign = [m for m in done.stdout.split() if m.split(".")[0] not in sys.stdlib_module_names
               and m.split(".")[0] not in ("coincurve", "_libsecp256k1", "_cffi_backend")
               and m != "indexer" and not m.startswith("indexer.verify")]
    assert not foreign, foreign
    assert "indexer.verify.__main__" in done.stdout.split()
