"""The code's shape, checked: no import cycles (top-level and function-level imports alike), each package imports
only the layers below it (the data flow sources → load → replay → rules → api), every CLI option has a help line,
every environment variable is documented in the README, and the test tree mirrors the package."""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from indexer.cli.parser import build_parser
from indexer.settings import VARIABLES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "indexer"

# Lowest first. A module may import its own layer and the layers below it, never above.
LAYERS = [
    {"workers", "settings", "interval_jobs"},
    {"db", "migrations"},
    {"records"},
    {"wire"},
    {"verify"},  # pure proof checks (signatures, state roots, settlement): no database, poller or load code
    {"sources"},
    {"refusals"},
    {"load", "archive"},  # archive: the load format out to files (docs/partitioning.md)
    {"replay"},
    {"rules"},
    {"downstream"},
    {"alerts"},
    {"poller", "devnet", "observe", "synth"},
    {"reports"},
    {"cli", "__main__"},
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every indexer module that ``module`` imports anywhere in its body, resolved to a known module."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name.startswith("indexer") and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        deps = _imports(module, path, modules)
        # a package's __init__ importing its own submodules, and a submodule importing its package, are not edges
        graph[module] = {d for d in deps if not d.startswith(module + ".") and not module.startswith(d + ".")}
    return graph


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep] if dep in stack else [node, dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_packages_import_only_lower_layers():
    def layer(module: str) -> int:
        top = module.split(".")[1] if module.count(".") else "__init__"
        assert top in LAYER_OF, f"{module}: add its package {top!r} to LAYERS in this test"
        return LAYER_OF[top]

    wrong = [f"{m} -> {d}" for m, deps in _graph().items() if m != "indexer" for d in deps
             if d != "indexer" and layer(d) > layer(m)]
    assert wrong == [], "imports against the data flow: " + ", ".join(sorted(wrong))


def _all_actions(parser: argparse.ArgumentParser, prefix: str = "indexer"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_actions(sub, f"{prefix} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield prefix, action


def test_every_option_has_a_help_line():
    missing = [f"{where} {'/'.join(a.option_strings) or a.dest}" for where, a in _all_actions(build_parser())
               if not a.help or (a.help == argparse.SUPPRESS and "--database-url" not in a.option_strings)]
    assert missing == []


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_every_environment_variable_is_documented(name):
    assert f"`{name}`" in (ROOT / "README.md").read_text(), f"README must document {name}"


def test_no_module_reads_the_environment_but_settings():
    readers = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
               if "os.environ" in p.read_text() or "getenv(" in p.read_text()]
    assert readers == ["indexer/settings.py"]


def test_the_schema_files_are_read_from_the_top_level_folders_in_a_checkout():
    """sql/ and migrations/ sit at the top of the checkout (the wheel carries them inside the package:
    tests/test_packaging.py); an editable install and a plain checkout read them there."""
    from indexer.db.paths import MIGRATIONS_DIR, SQL_DIR

    assert (SQL_DIR, MIGRATIONS_DIR) == (ROOT / "sql", ROOT / "migrations")
    assert not (PACKAGE / "sql").exists() and not (PACKAGE / "migrations").exists()


# The test tree mirrors the package: the tests of indexer/<package>/ in tests/<package>/, the shared kits in
# tests/support/, data in tests/cases/; tests/ itself holds conftest.py, the tests of top-level modules
# (indexer/<module>.py) and the checks of the whole project listed here.
WHOLE_PROJECT = {
    "test_bench", "test_deploy", "test_docs", "test_hermetic", "test_interface", "test_layout", "test_makefile",
    "test_messages", "test_packaging", "test_safe_extract", "test_slow_marks", "test_smoke_db",
}


def _misplaced(tests: Path, package: Path) -> list[str]:
    """Every file of the test tree ``tests`` that is not where the layout above puts it, with the reason."""
    packages = {p.parent.name for p in package.glob("*/*.py") if p.parent.name != "__pycache__"}
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}

    def names(stem: str, among: set[str]) -> str | None:
        rest = stem[len("test_"):]
        return next((n for n in sorted(among, key=len, reverse=True) if rest == n or rest.startswith(n + "_")), None)

    wrong = []
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if folder.name not in packages | {"support", "cases"}:
            wrong.append(f"tests/{folder.name}/: no package indexer/{folder.name}/ (tests of a package go in "
                         "tests/<package>/, kits in tests/support/, data in tests/cases/)")
        elif folder.name != "cases" and not (folder / "__init__.py").is_file():
            wrong.append(f"tests/{folder.name}/: add an empty __init__.py (unique module names)")
    if not (tests / "__init__.py").is_file():
        wrong.append("tests/: add an empty __init__.py")
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        where, name = rel.parts[:-1], rel.name
        if "__pycache__" in where or (where and where[0] == "cases") or name == "__init__.py":
            continue
        shown = "tests/" + rel.as_posix()
        if not name.startswith("test_"):
            if where != ("support",) and not (where == () and name == "conftest.py"):
                wrong.append(f"{shown}: a shared kit belongs in tests/support/")
            continue
        pkg = names(path.stem, packages)
        if len(where) > 1 or where == ("support",):
            wrong.append(f"{shown}: tests live in tests/ or one package folder below it")
        elif pkg and where != (pkg,):
            wrong.append(f"{shown}: its name names indexer.{pkg}, so it belongs in tests/{pkg}/")
        elif not where and path.stem not in WHOLE_PROJECT and not names(path.stem, modules):
            wrong.append(f"{shown}: move it to tests/<package>/ of the package it tests, or list it in "
                         "WHOLE_PROJECT (tests/test_layout.py) if it checks the whole project")
    return wrong


def test_tests_mirror_the_package():
    assert _misplaced(ROOT / "tests", PACKAGE) == []


def test_misplaced_tests_are_named(tmp_path):
    tests, package = tmp_path / "tests", tmp_path / "indexer"
    for rel in ["indexer/__init__.py", "indexer/load/__init__.py", "indexer/report.py", "tests/__init__.py",
                "tests/conftest.py", "tests/support/__init__.py", "tests/support/kit.py", "tests/load/__init__.py",
                "tests/load/test_ingest.py", "tests/test_report_html.py", "tests/cases/data/x.json"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert _misplaced(tests, package) == []
    for rel in ["tests/test_load_misfiled.py", "tests/test_stray.py", "tests/load/kit2.py", "tests/extra/test_x.py",
                "tests/load/deeper/test_y.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert _misplaced(tests, package) == [
        "tests/extra/: no package indexer/extra/ (tests of a package go in tests/<package>/, kits in tests/support/,"
        " data in tests/cases/)",
        "tests/load/deeper/test_y.py: tests live in tests/ or one package folder below it",
        "tests/load/kit2.py: a shared kit belongs in tests/support/",
        "tests/test_load_misfiled.py: its name names indexer.load, so it belongs in tests/load/",
        "tests/test_stray.py: move it to tests/<package>/ of the package it tests, or list it in WHOLE_PROJECT"
        " (tests/test_layout.py) if it checks the whole project",
    ]


def test_every_name_a_test_imports_from_the_tests_exists():
    """Imports inside a test function run only when that test does: a helper moved to tests/support must not leave
    one behind that names its old module."""
    import importlib.util

    root = Path(__file__).resolve().parent
    missing = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tests":
                module = importlib.import_module(node.module)
                missing += [f"{path.relative_to(root.parent)}:{node.lineno}: {node.module}.{alias.name}"
                            for alias in node.names if not hasattr(module, alias.name) and not (
                                hasattr(module, "__path__") and importlib.util.find_spec(f"{node.module}.{alias.name}"))]
    assert not missing
