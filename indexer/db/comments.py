"""What every `api` view and column means, from one source (sql/views/api_comments.toml): applied to the database
as COMMENT ON VIEW / COMMENT ON COLUMN, so psql's `\\d+` and a BI tool's column browser explain the views, and
rendered as the view tables of docs/interface.md.

`indexer migrate` applies the comments after it has (re)created the views (indexer.db.migrate), because a view that
is dropped and created again loses its comments. A view's comment keeps the marker that tells our objects from a
user's (indexer.db.replaceable.MARKER) on its last line.

    python -m indexer.db.comments --write-docs docs/interface.md   # rewrite the generated block of that page
"""
from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.db.paths import SQL_DIR
from indexer.db.replaceable import MARKER

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

COMMENTS_FILE = SQL_DIR / "views" / "api_comments.toml"
DOCS_BEGIN = "<!-- generated from indexer/sql/views/api_comments.toml by python -m indexer.db.comments: do not edit -->"
DOCS_END = "<!-- end of generated view tables -->"


class CommentsError(ValueError):
    """The comments source is malformed: the message names the file and the entry."""


@dataclass(frozen=True)
class View:
    name: str
    description: str
    columns: dict[str, str]  # column → description, in the view's column order


def _text(value, where: str) -> str:
    if not isinstance(value, str):
        raise CommentsError(f"{where}: expected a string, found {type(value).__name__}")
    return value.strip()


def parse(text: str, origin: str) -> list[View]:
    """The views of a comments source, shared descriptions resolved. Every defect is a CommentsError naming
    `origin` and the entry: a view without description or columns, a non-string value, an empty description with
    no shared one, a shared description no column uses."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CommentsError(f"{origin}: not valid TOML: {exc}") from None
    shared = {k: _text(v, f"{origin}: [columns] {k}") for k, v in doc.get("columns", {}).items()}
    used: set[str] = set()
    views = []
    for name, spec in doc.get("views", {}).items():
        where = f"{origin}: [views.{name}]"
        if not isinstance(spec, dict) or "description" not in spec or not isinstance(spec.get("columns"), dict):
            raise CommentsError(f"{where}: needs a description and a columns table")
        description = _text(spec["description"], f"{where} description")
        if not description:
            raise CommentsError(f"{where}: the description is empty")
        columns = {}
        for column, value in spec["columns"].items():
            text_ = _text(value, f"{where} column {column}")
            if not text_:
                if not shared.get(column):
                    raise CommentsError(f"{where} column {column}: empty, and [columns] has no {column}")
                used.add(column)
                text_ = shared[column]
            columns[column] = text_
        views.append(View(name, description, columns))
    unused = sorted(set(shared) - used)
    if unused:
        raise CommentsError(f"{origin}: [columns] entries no view uses: {', '.join(unused)}")
    return views


@cache
def catalog() -> tuple[View, ...]:
    return tuple(parse(COMMENTS_FILE.read_text(), str(COMMENTS_FILE)))


_LIVE = """
SELECT c.relname, obj_description(c.oid, 'pg_class'), array_agg(a.attname::text ORDER BY a.attnum)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = 'api'::regnamespace AND c.relkind = 'v'
GROUP BY c.oid, c.relname"""


def apply(conn: Connection, views=None) -> None:
    """Comment every described view and column that exists in schema api, in one round trip. A view or column the
    source names but the database lacks is skipped here; tests/test_interface.py requires the two to agree."""
    from psycopg import sql

    raw = conn.connection.driver_connection
    with raw.cursor() as cur:
        cur.execute(_LIVE)
        live = {name: (comment or "", set(columns)) for name, comment, columns in cur.fetchall()}
        statements = []
        for view in catalog() if views is None else views:
            if view.name not in live:
                continue
            current, columns = live[view.name]
            marker = [line for line in current.splitlines() if line.startswith(MARKER)]
            comment = view.description + ("\n\n" + marker[-1] if marker else "")
            statements.append(sql.SQL("COMMENT ON VIEW {}.{} IS {}").format(
                sql.Identifier("api"), sql.Identifier(view.name), sql.Literal(comment)))
            statements += [sql.SQL("COMMENT ON COLUMN {}.{}.{} IS {}").format(
                sql.Identifier("api"), sql.Identifier(view.name), sql.Identifier(column), sql.Literal(text_))
                for column, text_ in view.columns.items() if column in columns]
        if statements:
            cur.execute(sql.SQL("; ").join(statements))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(views=None) -> str:
    """The view tables of docs/interface.md, between the generated-block markers."""
    out = [DOCS_BEGIN, ""]
    for view in catalog() if views is None else views:
        out += [f"#### `api.{view.name}`", "", _cell(view.description), "", "| column | meaning |", "|---|---|"]
        out += [f"| `{column}` | {_cell(text)} |" for column, text in view.columns.items()]
        out.append("")
    out.append(DOCS_END)
    return "\n".join(out)


def replace_generated(page: str, origin: str) -> str:
    """`page` with its generated block replaced by the current one."""
    start, end = page.find(DOCS_BEGIN), page.find(DOCS_END)
    if start < 0 or end < start:
        raise CommentsError(f"{origin}: the generated-block markers are missing ({DOCS_BEGIN!r} … {DOCS_END!r})")
    return page[:start] + render_markdown() + page[end + len(DOCS_END):]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m indexer.db.comments", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-docs", type=Path, metavar="PAGE", required=True,
                    help="Markdown page whose generated view tables to rewrite (docs/interface.md)")
    args = ap.parse_args(argv)
    page = args.write_docs.read_text()
    args.write_docs.write_text(replace_generated(page, str(args.write_docs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
