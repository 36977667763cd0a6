"""The code's shape, checked: no import cycles (top-level and function-level imports alike), each package imports
only the layers below it (the data flow sources → load → replay → rules → api), every CLI option has a help line,
and every environment variable is documented in the README."""
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
    {"workers", "settings", "scheduling"},
    {"db", "migrations"},
    {"records"},
    {"wire"},
    {"verify"},  # pure proof checks (signatures, state roots, settlement): no database, poller or load code
    {"sources"},
    {"refusals"},
    {"load", "archive"},  # archive: the load format out to files (docs/partitioning.md)
    {"replay"},
    {"rules"},
    {"pipeline"},
    {"alerts"},
    {"poller", "devnet", "observe", "synth"},
    {"report", "report_html", "restitution"},
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
