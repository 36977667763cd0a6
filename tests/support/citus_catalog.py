"""What tests/support/citus_check.py needs to know besides the statements: where each table is placed (sql/citus/,
the one definition), the tables' columns, keys and foreign keys (parsed from the migrations' DDL) and the SQL
functions."""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import pglast
from pglast import ast, enums


@dataclass(frozen=True)
class Placement:
    kind: str  # distributed | reference | local
    column: str | None = None
    group: str | None = None  # co-location group: the anchor table's name


@dataclass
class Function:
    name: str
    params: list[str]
    outputs: list[str]
    language: str
    body: str
    query: ast.Node | None = None  # the SELECT of an inlinable SQL function


@dataclass
class Catalog:
    placements: dict[str, Placement]
    columns: dict[str, list[str]]
    functions: dict[str, Function] = field(default_factory=dict)
    views: dict[str, ast.Node] = field(default_factory=dict)

    def distributed(self) -> dict[str, Placement]:
        return {t: p for t, p in self.placements.items() if p.kind == "distributed"}


@dataclass
class Finding:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


# ---- the one definition: sql/citus --------------------------------------------------------------------------------

def _const(node):
    if isinstance(node, ast.A_Const):
        if isinstance(node.val, ast.Boolean):
            return "true" if node.val.boolval else "false"
        return node.val.sval if isinstance(node.val, ast.String) else None
    if isinstance(node, ast.TypeCast):
        return _const(node.arg)
    return None


def load_placements(citus_dir: Path, foreign_keys: dict[str, set[str]] | None = None) -> dict[str, Placement]:
    """Every create_distributed_table / create_reference_table / citus_add_local_table_to_metadata call;
    cascade_via_foreign_keys => true places the tables tied to it by foreign keys (`foreign_keys`: table -> the
    tables it references or is referenced by) too, as Citus does."""
    out: dict[str, Placement] = {}
    for path in sorted(citus_dir.glob("*.sql")):
        for call in walk_type(pglast.parse_sql(path.read_text()), ast.FuncCall):
            name = call.funcname[-1].sval
            args = [a for a in call.args or () if not isinstance(a, ast.NamedArgExpr)]
            named = {a.name: _const(a.arg) for a in call.args or () if isinstance(a, ast.NamedArgExpr)}
            if name not in ("create_distributed_table", "create_reference_table",
                            "citus_add_local_table_to_metadata"):
                continue
            table = _const(args[0])
            if table in out:
                raise ValueError(f"{path.name}: {table} placed twice")
            if name == "create_distributed_table":
                column = _const(args[1])
                colocate = named.get("colocate_with", "default")
                group = table if colocate in ("default", "none") else out[colocate].group
                out[table] = Placement("distributed", column, group)
            else:
                out[table] = Placement("reference" if name == "create_reference_table" else "local")
                if named.get("cascade_via_foreign_keys") == "true":
                    todo = [table]
                    while todo:
                        for other in (foreign_keys or {}).get(todo.pop(), ()):
                            if other not in out:
                                out[other] = out[table]
                                todo.append(other)
    return out


# ---- tables and constraints from the migrations --------------------------------------------------------------------

def _migration_sql(versions_dir: Path) -> list[tuple[str, ast.Node]]:
    """(migration file, DDL statement) for every CREATE TABLE / ALTER TABLE in the migrations' SQL strings."""
    out = []
    for path in sorted(versions_dir.glob("[0-9]*.py")):
        spec = importlib.util.spec_from_file_location(f"_citus_check_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for value in vars(module).values():
            if isinstance(value, str) and re.search(r"\b(CREATE|ALTER) TABLE\b", value):
                out += [(path.name, raw.stmt) for raw in pglast.parse_sql(value)]
    return out


@dataclass
class TableDDL:
    columns: list[str]
    keys: list[tuple[str, list[str]]]  # (constraint kind, columns) of every PRIMARY KEY / UNIQUE
    references: set[str] = field(default_factory=set)  # tables its foreign keys reference
    replica_identity: str | None = None


def migration_tables(versions_dir: Path) -> dict[str, TableDDL]:
    tables: dict[str, TableDDL] = {}
    for _, stmt in _migration_sql(versions_dir):
        if isinstance(stmt, ast.CreateStmt):
            name = f"{stmt.relation.schemaname}.{stmt.relation.relname}"
            ddl = tables[name] = TableDDL([], [])
            for elt in stmt.tableElts:
                if isinstance(elt, ast.ColumnDef):
                    ddl.columns.append(elt.colname)
                    for c in elt.constraints or ():
                        if c.contype in (enums.ConstrType.CONSTR_PRIMARY, enums.ConstrType.CONSTR_UNIQUE):
                            ddl.keys.append((c.contype.name, [elt.colname]))
                        elif c.contype == enums.ConstrType.CONSTR_FOREIGN:
                            ddl.references.add(f"{c.pktable.schemaname}.{c.pktable.relname}")
                elif elt.contype in (enums.ConstrType.CONSTR_PRIMARY, enums.ConstrType.CONSTR_UNIQUE):
                    ddl.keys.append((elt.contype.name, [k.sval for k in elt.keys]))
                elif elt.contype == enums.ConstrType.CONSTR_FOREIGN:
                    ddl.references.add(f"{elt.pktable.schemaname}.{elt.pktable.relname}")
        elif isinstance(stmt, ast.AlterTableStmt):
            ddl = tables[f"{stmt.relation.schemaname}.{stmt.relation.relname}"]
            for cmd in stmt.cmds:
                if cmd.subtype == enums.AlterTableType.AT_AddColumn:
                    ddl.columns.append(cmd.def_.colname)
                elif cmd.subtype == enums.AlterTableType.AT_ReplicaIdentity:
                    ddl.replica_identity = cmd.def_.identity_type
    return tables


def foreign_key_graph(tables: dict[str, TableDDL]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, ddl in tables.items():
        for other in ddl.references:
            graph.setdefault(name, set()).add(other)
            graph.setdefault(other, set()).add(name)
    return graph


# ---- functions -----------------------------------------------------------------------------------------------------

def load_functions(functions_dir: Path) -> dict[str, Function]:
    out = {}
    for path in sorted(functions_dir.glob("*.sql")):
        for raw in pglast.parse_sql(path.read_text()):
            stmt = raw.stmt
            if not isinstance(stmt, ast.CreateFunctionStmt):
                continue
            options = {o.defname: o.arg for o in stmt.options}
            language = options["language"].sval
            body = options["as"][0].sval
            params = stmt.parameters or ()
            table_mode = (enums.FunctionParameterMode.FUNC_PARAM_TABLE, enums.FunctionParameterMode.FUNC_PARAM_OUT)
            fn = Function(".".join(n.sval for n in stmt.funcname),
                          [p.name for p in params if p.mode not in table_mode],
                          [p.name for p in params if p.mode in table_mode], language, body)
            if language == "sql":
                statements = pglast.parse_sql(body)
                if len(statements) == 1 and isinstance(statements[0].stmt, ast.SelectStmt):
                    fn.query = statements[0].stmt
            out[fn.name] = fn
    return out


# ---- AST helpers ------------------------------------------------------------------------------------------------

def children(node):
    if isinstance(node, (list, tuple)):
        yield from node
    elif isinstance(node, ast.Node):
        for name in node:
            yield getattr(node, name)


def walk_type(node, kind):
    if isinstance(node, kind):
        yield node
    for child in children(node):
        yield from walk_type(child, kind)
