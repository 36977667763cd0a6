"""The replaceable objects of sql/ (api views, fn functions), replaced in place so objects that users built on top
of them survive `indexer migrate`.

Each statement runs as CREATE OR REPLACE. When PostgreSQL cannot replace in place (a view's columns changed, a
function's result type changed), just that object is dropped without CASCADE and created again; our own views that
depend on it are dropped first and re-created too. A user's object in the way stops the migration with an error
naming it (PostgreSQL's DETAIL). Every object we create carries a comment marker (a view's comment starts with its
description, indexer.db.comments, and ends with the marker), so objects that are ours but no longer in sql/ are dropped (again without CASCADE), and nothing else in the schemas is ever touched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

MARKER = "devshard-indexer object"
_CREATE = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(VIEW|FUNCTION)\s+([\w.]+)", re.I | re.M)
_LEADING_COMMENTS = re.compile(r"--[^\n]*")
_OURS = f"""
SELECT 'VIEW', c.oid::regclass::text, c.oid, 'pg_class'::regclass::oid FROM pg_class c
WHERE c.relnamespace IN ('api'::regnamespace, 'fn'::regnamespace) AND c.relkind = 'v'
  AND obj_description(c.oid, 'pg_class') LIKE '%%{MARKER} (%%'
UNION ALL
SELECT 'FUNCTION', p.oid::regprocedure::text, p.oid, 'pg_proc'::regclass::oid FROM pg_proc p
WHERE p.pronamespace IN ('api'::regnamespace, 'fn'::regnamespace)
  AND obj_description(p.oid, 'pg_proc') LIKE '%%{MARKER} (%%'
"""
# the views that use an object (through their rewrite rules), one level
_DEPENDENT_VIEWS = """
SELECT DISTINCT r.ev_class::regclass::text FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = %(cls)s::oid AND d.refobjid = %(oid)s::oid
  AND r.ev_class <> %(oid)s::oid
"""


class DependentObjectsError(RuntimeError):
    """Replacing or dropping one of our objects would drop an object that is not ours."""


@dataclass
class Statement:
    kind: str | None   # VIEW, FUNCTION, or None for any other statement
    name: str | None   # schema-qualified name as written
    text: str
    source: str


def split_statements(sql: str) -> list[str]:
    """Split on top-level semicolons: not inside quotes, dollar quotes or comments."""
    out, start, i, n = [], 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "-" and sql.startswith("--", i):
            i = sql.find("\n", i) if sql.find("\n", i) != -1 else n
        elif ch == "/" and sql.startswith("/*", i):
            i = sql.find("*/", i) + 2 if sql.find("*/", i) != -1 else n
        elif ch in "'\"":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 1
            i = j + 1
        elif ch == "$" and (m := re.match(r"\$[A-Za-z_]*\$", sql[i:])):
            end = sql.find(m.group(0), i + len(m.group(0)))
            i = end + len(m.group(0)) if end != -1 else n
        elif ch == ";":
            if sql[start:i].strip():
                out.append(sql[start:i].strip())
            start = i = i + 1
        else:
            i += 1
    if sql[start:].strip():
        out.append(sql[start:].strip())
    return out


def statements(files) -> list[Statement]:
    out = []
    for path in files:
        for text in split_statements(path.read_text()):
            m = _CREATE.search(text)
            if m and not _LEADING_COMMENTS.sub("", text[:m.start()]).strip():  # the statement's head, after comments
                kind, name = m.group(1).upper(), m.group(2)
                text = _CREATE.sub(lambda mm: f"CREATE OR REPLACE {mm.group(1).upper()} {mm.group(2)}", text, 1)
                out.append(Statement(kind, name, text, f"{path.parent.name}/{path.name}"))
            else:
                out.append(Statement(None, None, text, f"{path.parent.name}/{path.name}"))
    return out


def _pg_error(exc):
    return getattr(exc, "orig", exc)


def _sqlstate(exc) -> str | None:
    return getattr(_pg_error(exc), "sqlstate", None)


def _detail(exc) -> str:
    diag = getattr(_pg_error(exc), "diag", None)
    return (getattr(diag, "message_detail", None) or str(_pg_error(exc))).strip()


def _objects(conn: Connection, kind: str, name: str) -> list[tuple[str, int, int]]:
    """(drop target, oid, catalog) of the existing views or functions called `name`."""
    if kind == "VIEW":
        row = conn.exec_driver_sql("SELECT to_regclass(%(n)s)::oid", {"n": name}).scalar()
        return [(name, row, conn.exec_driver_sql("SELECT 'pg_class'::regclass::oid").scalar())] if row else []
    schema, _, proc = name.rpartition(".")
    rows = conn.exec_driver_sql(
        "SELECT p.oid::regprocedure::text, p.oid, 'pg_proc'::regclass::oid FROM pg_proc p "
        "WHERE p.pronamespace = to_regnamespace(%(s)s) AND p.proname = %(p)s", {"s": schema or "public", "p": proc})
    return [tuple(r) for r in rows]


def _ours(conn: Connection) -> dict[str, tuple[str, int, int]]:
    return {name: (kind, oid, cls) for kind, name, oid, cls in conn.exec_driver_sql(_OURS)}


def _drop(conn: Connection, kind: str, target: str, oid: int, cls: int, ours: dict, dropped: list[str]) -> None:
    """Drop one object without CASCADE, after our own views that use it (recorded in `dropped` to be re-created).
    A dependent that is not ours stops the migration, named."""
    for (view,) in conn.exec_driver_sql(_DEPENDENT_VIEWS, {"cls": cls, "oid": oid}).fetchall():
        if view in ours:
            _, voi, vcls = ours[view]
            _drop(conn, "VIEW", view, voi, vcls, ours, dropped)
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(f"DROP {kind} {target}")
    except Exception as exc:  # noqa: BLE001 - re-raised unless it is PostgreSQL's dependent-objects refusal
        if _sqlstate(exc) == "2BP01":
            raise DependentObjectsError(
                f"the migration must drop {kind.lower()} {target} (to re-create or retire it), but objects that are "
                f"not the indexer's depend on it: {_detail(exc)}. Drop or change them, then migrate again.") from None
        raise
    dropped.append(target)


def _create(conn: Connection, st: Statement, ours: dict, dropped: list[str]) -> None:
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(st.text)
    except Exception as exc:  # noqa: BLE001
        # 42P16: a view's columns changed; 42P13: a function's result changed; 42809: a view became a function...
        if _sqlstate(exc) not in ("42P16", "42P13", "42809", "42P07"):
            raise
        for target, oid, cls in _objects(conn, st.kind, st.name):
            _drop(conn, st.kind, target, oid, cls, ours, dropped)
        conn.exec_driver_sql(st.text)
    for target, _, _ in _objects(conn, st.kind, st.name):
        conn.exec_driver_sql(f"COMMENT ON {st.kind} {target} IS '{MARKER} (sql/{st.source})'")


def apply(conn: Connection, files) -> None:
    """Create or replace every object of `files` in order, then drop our objects that are no longer there."""
    conn.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS fn")
    conn.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS api")
    todo = statements(files)
    ours = _ours(conn)
    dropped: list[str] = []
    done: list[Statement] = []
    for st in todo:
        if st.kind is None:
            conn.exec_driver_sql(st.text)
            continue
        _create(conn, st, ours, dropped)
        done.append(st)
        ours = _ours(conn)
    # our views dropped (as dependents) after their own statement ran: create them again, in file order
    for st in done:
        if st.kind == "VIEW" and not _objects(conn, st.kind, st.name):
            _create(conn, st, ours, dropped)
    wanted = {target for st in done for target, _, _ in _objects(conn, st.kind, st.name)}
    remove_ours(conn, keep=wanted)


def remove_our_views(conn: Connection, files=()) -> None:
    """Drop our views, dependents first, and keep our functions: for a migration that alters a column views read
    (PostgreSQL refuses the ALTER while a view uses it). A user's view on ours stops it, named. A database whose
    api and fn schemas do not exist yet (the first migration) has none."""
    if not conn.exec_driver_sql("SELECT to_regnamespace('api') IS NOT NULL AND to_regnamespace('fn') IS NOT NULL"
                                ).scalar():
        return
    functions = {name for name, (kind, _, _) in _ours(conn).items() if kind == "FUNCTION"}
    remove_ours(conn, keep=functions, files=files)


def remove_ours(conn: Connection, keep: set[str] = frozenset(), files=()) -> None:
    """Drop our objects not in `keep`, dependents (views) first, never with CASCADE: the marked ones, and those
    `files` create (a database migrated before the markers existed has them unmarked)."""
    named = {st.name for st in statements(files) if st.kind is not None}
    while True:
        found = _ours(conn)
        for st_name in named:
            for kind in ("VIEW", "FUNCTION"):
                for target, oid, cls in _objects(conn, kind, st_name):
                    found.setdefault(target, (kind, oid, cls))
        ours = {n: v for n, v in found.items() if n not in keep}
        if not ours:
            return
        name, (kind, oid, cls) = next(iter(sorted(ours.items(), key=lambda kv: kv[1][0] != "VIEW")))
        _drop(conn, kind, name, oid, cls, ours, [])
