"""Static check of the Citus property that matters (docs/scale.md "The road to Citus"): every join between distributed tables equates
their distribution columns, so Citus pushes it down to one node per shard group instead of moving rows.

Statements are parsed by PostgreSQL's own parser (pglast, libpg_query). Per statement the checker:
  * gives each column of each FROM item a term and unites the terms that a join condition equates: the top-level
    AND conjuncts `a = b` of WHERE and JOIN ... ON, and JOIN ... USING. Equality is transitive, as in Citus's own
    planner (a.escrow_id = x.escrow_id AND b.escrow_id = x.escrow_id joins a and b on escrow_id);
  * sees through derived relations: a subquery, CTE reference, api view or inlinable SQL function (LANGUAGE sql, one
    SELECT: inlined as the planner does, its parameters bound to the call's arguments) passes its output columns on,
    so `d.escrow_id` of a CTE is the escrow_id of the table inside it;
  * groups the distributed table occurrences into units that Citus would push down together. A derived relation
    that cannot be pushed down (grouped or DISTINCT without the distribution column, an aggregate over all rows,
    LIMIT, a set operation without the distribution column at one position in every branch, a window not
    partitioned by it) is what Citus plans as an intermediate result: its inside is a unit of its own and outside
    it is a local relation (like a reference table). A correlated subquery (LATERAL, EXISTS, IN, scalar) is always
    part of its outer query's unit: Citus cannot compute it separately;
  * requires every unit's occurrences to be one class of equated distribution columns (and one co-location group),
    and every correlated subquery over a distributed table to be correlated with a distributed table of its outer
    query on the distribution column.
Findings name the statement and the two table occurrences (table and alias) that are joined without the equality.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pglast
from pglast import ast, enums

from tests.support.citus_catalog import (  # noqa: F401 (re-exported for the tests)
    Catalog, Finding, Function, Placement, TableDDL, children, foreign_key_graph, load_functions, load_placements,
    migration_tables, walk_type)

PARAM = re.compile(r"%\((\w+)\)s")  # the rules' pyformat parameters; $1 parses as PostgreSQL's own parameter


# ---- the analysis --------------------------------------------------------------------------------------------------

def _expr_sublinks(node):
    """SubLinks of an expression, not those nested inside another SubLink's query (that query finds its own)."""
    if isinstance(node, ast.SubLink):
        yield node
        yield from _expr_sublinks(node.testexpr)
        return
    if isinstance(node, (ast.SelectStmt, ast.RangeSubselect)):
        return
    for child in children(node):
        yield from _expr_sublinks(child)


AGGREGATES = {"count", "sum", "min", "max", "avg", "array_agg", "string_agg", "bool_or", "bool_and", "every",
              "jsonb_agg", "jsonb_object_agg", "json_agg", "json_object_agg", "mode", "percentile_cont",
              "percentile_disc", "stddev", "variance", "bit_or", "bit_and"}


def _is_aggregate(node) -> bool:
    for call in walk_type(node, ast.FuncCall):
        if call.over is None and (call.agg_star or call.agg_within_group or call.agg_filter is not None
                                  or call.funcname[-1].sval in AGGREGATES):
            return True
    return False


@dataclass
class Occurrence:
    label: str
    term: int
    group: str


@dataclass
class Item:
    alias: str
    columns: dict[str, int]
    order: list[str]
    unknown: bool = False  # a table the catalog does not describe: any qualified column is accepted


@dataclass
class Block:
    items: list[Item] = field(default_factory=list)
    occ: list[Occurrence] = field(default_factory=list)
    correlated: bool = False


@dataclass
class Rel:
    columns: list[tuple[str, int]]
    occ: list[Occurrence]
    correlated: bool
    pushdown: bool
    reason: str = ""


class Analyzer:
    def __init__(self, catalog: Catalog, where: str):
        self.catalog, self.where = catalog, where
        self.parent: list[int] = []
        self.findings: list[Finding] = []
        self.intermediates: list[tuple[str, str]] = []
        self.requirements: list[tuple[str, list[Occurrence], list[Occurrence]]] = []

    # union-find over column terms
    def term(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, t: int) -> int:
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)

    def flag(self, message: str) -> None:
        if all(f.message != message for f in self.findings):
            self.findings.append(Finding(self.where, message))

    # statements
    def statement(self, stmt) -> None:
        if isinstance(stmt, ast.ViewStmt):
            self.close(self.query(stmt.query, [], {}).occ, "the view")
            self.catalog.views[f"{stmt.view.schemaname}.{stmt.view.relname}"] = stmt.query
        elif isinstance(stmt, ast.SelectStmt):
            self.close(self.query(stmt, [], {}).occ, "the statement")
        elif isinstance(stmt, ast.InsertStmt):
            ctes = self.with_clause(stmt.withClause, [], {})
            if stmt.selectStmt is not None:
                self.close(self.query(stmt.selectStmt, [], ctes).occ, "the statement")
        elif isinstance(stmt, (ast.DeleteStmt, ast.UpdateStmt, ast.MergeStmt)):
            ctes = self.with_clause(stmt.withClause, [], {})
            block = Block()
            env = [block]
            self.from_item(stmt.relation, env, ctes)
            extra = (stmt.usingClause if isinstance(stmt, ast.DeleteStmt)
                     else stmt.fromClause if isinstance(stmt, ast.UpdateStmt) else [stmt.sourceRelation])
            for item in extra or ():
                self.from_item(item, env, ctes)
            condition = stmt.joinCondition if isinstance(stmt, ast.MergeStmt) else stmt.whereClause
            self.condition(condition, env, ctes)
            self.close(block.occ, "the statement")
        self.check_requirements()

    def with_clause(self, clause, env, ctes) -> dict:
        ctes = dict(ctes)
        for cte in (clause.ctes if clause else ()):
            ctes[cte.ctename] = (cte.ctequery, list(env), dict(ctes))
        return ctes

    # queries
    def query(self, node, env: list[Block], ctes: dict) -> Rel:
        ctes = self.with_clause(node.withClause, env, ctes)
        if node.op != enums.SetOperation.SETOP_NONE:
            return self.set_operation(node, env, ctes)
        block = Block()
        env = env + [block]
        if node.valuesLists:
            return Rel([(f"column{i + 1}", self.term()) for i in range(len(node.valuesLists[0]))], [], False, True)
        for item in node.fromClause or ():
            self.from_item(item, env, ctes)
        self.condition(node.whereClause, env, ctes)
        columns = []
        for target in node.targetList or ():
            val = target.val
            if isinstance(val, ast.ColumnRef) and isinstance(val.fields[-1], ast.A_Star):
                items = block.items if len(val.fields) == 1 else [self.item(val.fields[0].sval, env)[0]]
                columns += [(c, item.columns[c]) for item in items if item for c in item.order]
                continue
            for link in _expr_sublinks(val):
                self.sublink(link, env, ctes)
            name = target.name or (val.fields[-1].sval if isinstance(val, ast.ColumnRef)
                                   else val.funcname[-1].sval if isinstance(val, ast.FuncCall) else "?column?")
            term = self.resolve(val, env) if isinstance(val, ast.ColumnRef) else None
            columns.append((name, term if term is not None else self.term()))
        for link in _expr_sublinks(node.havingClause):
            self.sublink(link, env, ctes)
        pushdown, reason = self.shape(node, block, columns, env)
        return Rel(columns, block.occ, block.correlated, pushdown, reason)

    def shape(self, node, block: Block, columns, env) -> tuple[bool, str]:
        """Could Citus push this query down as a derived table (not plan it as an intermediate result)?"""
        roots = {self.find(o.term) for o in block.occ}

        def dist(expr) -> bool:
            if isinstance(expr, ast.A_Const) and isinstance(expr.val, ast.Integer):
                term = columns[expr.val.ival - 1][1]
            elif isinstance(expr, ast.ColumnRef):
                names = [n for n, _ in columns]
                term = (columns[names.index(expr.fields[0].sval)][1]
                        if len(expr.fields) == 1 and expr.fields[0].sval in names else self.resolve(expr, env))
            else:
                return False
            return term is not None and self.find(term) in roots

        if node.groupClause:
            if not any(dist(k) for k in node.groupClause):
                return False, "grouped without the distribution column"
        elif any(_is_aggregate(t.val) for t in node.targetList or ()):
            return False, "an aggregate over all rows"
        if node.distinctClause:
            keys = [ast.A_Const(val=ast.Integer(ival=i + 1)) for i in range(len(columns))] \
                if node.distinctClause == (None,) else node.distinctClause
            if not any(dist(k) for k in keys):
                return False, "DISTINCT without the distribution column"
        if node.limitCount is not None or node.limitOffset is not None:
            return False, "LIMIT/OFFSET"
        windows = {w.name: w for w in node.windowClause or ()}
        for call in walk_type(node.targetList, ast.FuncCall):
            if call.over is not None:
                spec = windows.get(call.over.name or call.over.refname, call.over)
                if not any(dist(k) for k in spec.partitionClause or ()):
                    return False, "a window not partitioned by the distribution column"
        return True, ""

    def set_operation(self, node, env, ctes) -> Rel:
        left, right = self.query(node.larg, env, ctes), self.query(node.rarg, env, ctes)
        occ = left.occ + right.occ
        correlated = left.correlated or right.correlated
        columns = [(name, self.term()) for name, _ in left.columns]
        if not occ or correlated:
            return Rel(columns, occ, correlated, True)

        def dist(rel, position) -> bool:
            return not rel.occ or self.find(rel.columns[position][1]) in {self.find(o.term) for o in rel.occ}

        if left.pushdown and right.pushdown:
            for position in range(len(columns)):
                if dist(left, position) and dist(right, position):
                    for rel in (left, right):
                        self.union(columns[position][1], rel.columns[position][1])
                    return Rel(columns, occ, False, True)
        # each branch is computed on its own: a unit each
        for rel, side in ((left, "left"), (right, "right")):
            if rel.occ:
                self.close(rel.occ, f"the {side} branch of a set operation")
                self.intermediates.append((f"the {side} branch of a set operation",
                                           "a set operation without the distribution column at one position"))
        return Rel(columns, [], False, True)

    # FROM items
    def from_item(self, node, env: list[Block], ctes: dict) -> None:
        block = env[-1]
        if isinstance(node, ast.JoinExpr):
            start = len(block.items)
            self.from_item(node.larg, env, ctes)
            middle = len(block.items)
            self.from_item(node.rarg, env, ctes)
            for column in node.usingClause or ():
                name = column.sval
                left = next(i.columns[name] for i in block.items[start:middle] if name in i.columns)
                right = next(i.columns[name] for i in block.items[middle:] if name in i.columns)
                self.union(left, right)
            self.condition(node.quals, env, ctes)
        elif isinstance(node, ast.RangeVar):
            name = f"{node.schemaname}.{node.relname}" if node.schemaname else node.relname
            alias = node.alias.aliasname if node.alias else node.relname
            if node.schemaname is None and name in ctes:
                query, cte_env, cte_ctes = ctes[name]
                self.derived(self.query(query, cte_env, cte_ctes), alias, node.alias, f"CTE {name} {alias}", env)
            elif name in self.catalog.views:
                self.derived(self.query(self.catalog.views[name], [], {}), alias, node.alias, f"view {name} {alias}",
                             env)
            elif name in self.catalog.columns:
                cols = self.catalog.columns[name]
                item = Item(alias, {c: self.term() for c in cols}, list(cols))
                block.items.append(item)
                placement = self.catalog.placements.get(name)
                if placement and placement.kind == "distributed":
                    block.occ.append(Occurrence(f"{name} {alias}", item.columns[placement.column], placement.group))
            else:
                block.items.append(Item(alias, {}, [], unknown=True))
        elif isinstance(node, ast.RangeSubselect):
            self.derived(self.query(node.subquery, env, ctes), node.alias.aliasname, node.alias,
                         f"subquery {node.alias.aliasname}", env)
        elif isinstance(node, ast.RangeFunction):
            call = node.functions[0][0]
            fname = ".".join(n.sval for n in call.funcname)
            alias = node.alias.aliasname if node.alias else call.funcname[-1].sval
            fn = self.catalog.functions.get(fname)
            if fn is not None and fn.query is not None:
                self.derived(self.inline(fn, call, env, ctes), alias, node.alias, f"function {fname} {alias}", env)
            else:
                names = [c.sval for c in node.alias.colnames] if node.alias and node.alias.colnames else \
                    (fn.outputs if fn else [])
                block.items.append(Item(alias, {c: self.term() for c in names}, names, unknown=not names))
        else:
            raise TypeError(f"{self.where}: FROM item {type(node).__name__} not understood")

    def inline(self, fn: Function, call, env, ctes) -> Rel:
        """The function's SELECT in place of the call, its parameters bound to the arguments (planner inlining)."""
        params = Block()
        bound = {}
        for name, arg in zip(fn.params, call.args or ()):
            term = self.resolve(arg, env) if isinstance(arg, ast.ColumnRef) else None
            bound[name] = term if term is not None else self.term()
        params.items.append(Item(fn.name.split(".")[-1], bound, list(bound)))
        rel = self.query(fn.query, env + [params], ctes)
        rel.correlated = rel.correlated or any(isinstance(a, ast.ColumnRef) for a in call.args or ())
        rel.columns = [(name, term) for name, (_, term) in zip(fn.outputs, rel.columns)] or rel.columns
        return rel

    def derived(self, rel: Rel, alias: str, alias_node, label: str, env: list[Block]) -> None:
        block = env[-1]
        columns = rel.columns
        if alias_node is not None and alias_node.colnames:
            columns = [(c.sval, term) for c, (_, term) in zip(alias_node.colnames, columns)]
        if rel.occ and rel.correlated:
            self.require(label, rel.occ, env)
            block.occ += rel.occ
        elif rel.occ and rel.pushdown:
            block.occ += rel.occ
        elif rel.occ:
            self.close(rel.occ, label)
            self.intermediates.append((label, rel.reason))
            columns = [(name, self.term()) for name, _ in columns]
        block.items.append(Item(alias, dict(columns), [name for name, _ in columns]))

    # conditions and subqueries
    def condition(self, expr, env, ctes) -> None:
        for left, right in self.equalities(expr):
            a, b = self.resolve(left, env), self.resolve(right, env)
            if a is not None and b is not None:
                self.union(a, b)
        for link in _expr_sublinks(expr):
            self.sublink(link, env, ctes)

    def equalities(self, expr):
        if isinstance(expr, ast.BoolExpr) and expr.boolop == enums.BoolExprType.AND_EXPR:
            for arg in expr.args:
                yield from self.equalities(arg)
        elif (isinstance(expr, ast.A_Expr) and expr.kind == enums.A_Expr_Kind.AEXPR_OP
              and expr.name[-1].sval == "=" and isinstance(expr.lexpr, ast.ColumnRef)
              and isinstance(expr.rexpr, ast.ColumnRef)):
            yield expr.lexpr, expr.rexpr

    def sublink(self, link, env, ctes) -> None:
        rel = self.query(link.subselect, env, ctes)
        if not rel.occ:
            return
        label = f"{link.subLinkType.name.split('_')[0].lower()} subquery"
        if rel.correlated:
            self.require(label, rel.occ, env)
            env[-1].occ += rel.occ
        else:  # Citus computes an uncorrelated subquery first: a unit of its own
            self.close(rel.occ, label)
            self.intermediates.append((label, "an uncorrelated subquery"))

    def require(self, label: str, inner: list[Occurrence], env: list[Block]) -> None:
        """A correlated subquery over distributed tables must be correlated with an outer distributed table on the
        distribution column (checked once the whole statement's equalities are known)."""
        self.requirements.append((label, list(inner), [o for b in env for o in b.occ]))

    def check_requirements(self) -> None:
        for label, inner, outer in self.requirements:
            names = ", ".join(o.label for o in inner)
            if not outer:
                self.flag(f"{label} over {names} is correlated with an outer query that has no distributed table: "
                          "Citus cannot push it down (join it instead)")
            elif not {self.find(o.term) for o in inner} & {self.find(o.term) for o in outer}:
                self.flag(f"{label} over {names} is not correlated on the distribution column with "
                          f"{', '.join(o.label for o in outer)}")
        self.requirements.clear()

    def close(self, occ: list[Occurrence], label: str) -> None:
        """A unit: its distributed table occurrences must form one class of equated distribution columns."""
        first: dict[int, Occurrence] = {}
        for o in occ:
            first.setdefault(self.find(o.term), o)
        reps = list(first.values())
        for other in reps[1:]:
            self.flag(f"{reps[0].label} and {other.label} are joined without equating their distribution columns "
                      f"(in {label})")
        groups = {o.group for o in occ}
        if len(groups) > 1:
            self.flag(f"tables of different co-location groups {sorted(groups)} are joined (in {label})")

    # names
    def item(self, alias: str, env: list[Block]):
        for depth in range(len(env) - 1, -1, -1):
            for item in env[depth].items:
                if item.alias == alias:
                    return item, depth
        return None, None

    def resolve(self, ref, env: list[Block]) -> int | None:
        fields = [f.sval for f in ref.fields if isinstance(f, ast.String)]
        found = None
        if len(fields) == 1:
            for depth in range(len(env) - 1, -1, -1):
                item = next((i for i in env[depth].items if fields[0] in i.columns), None)
                if item is not None:
                    found = item.columns[fields[0]], depth
                    break
        elif len(fields) == 2:
            item, depth = self.item(fields[0], env)
            if item is not None:
                if fields[1] not in item.columns and item.unknown:
                    item.columns[fields[1]] = self.term()
                if fields[1] in item.columns:
                    found = item.columns[fields[1]], depth
        if found is None:
            return None
        term, depth = found
        for block in env[depth + 1:]:
            block.correlated = True
        return term


def statements_of(sql: str) -> list:
    return [raw.stmt for raw in pglast.parse_sql(PARAM.sub("$1", sql))]


def check_statement(catalog: Catalog, where: str, stmt) -> Analyzer:
    analyzer = Analyzer(catalog, where)
    analyzer.statement(stmt)
    return analyzer


def check_sql(catalog: Catalog, where: str, sql: str) -> list[Finding]:
    """Findings for every statement of `sql` (views it creates are registered for the statements after it)."""
    findings = []
    for number, stmt in enumerate(statements_of(sql), 1):
        findings += check_statement(catalog, f"{where} statement {number}", stmt).findings
    return findings


def opaque_function_findings(catalog: Catalog) -> list[Finding]:
    """A function the planner cannot inline (plpgsql, several statements) that reads a distributed table hides a
    query from both Citus's pushdown and this checker."""
    out = []
    for fn in catalog.functions.values():
        if fn.query is None:
            for table in catalog.distributed():
                if re.search(rf"\b{re.escape(table)}\b", fn.body):
                    out.append(Finding(f"function {fn.name}", f"reads distributed {table} in a body that cannot "
                                                                f"be inlined ({fn.language})"))
    return out


def check_function(catalog: Catalog, fn: Function) -> Analyzer:
    """An inlinable function's own SELECT, its parameters free (each call is checked again where it is inlined)."""
    analyzer = Analyzer(catalog, f"function {fn.name}")
    params = Block(items=[Item(fn.name.split(".")[-1], {p: analyzer.term() for p in fn.params}, list(fn.params))])
    analyzer.close(analyzer.query(fn.query, [params], {}).occ, "the function body")
    analyzer.requirements.clear()  # correlated with its parameters: checked where each call is inlined
    return analyzer
