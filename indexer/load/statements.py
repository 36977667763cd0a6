"""Generate the set-based SQL that types, validates and upserts one kind from the staging table.

Staging is `pg_temp.stage(line bigint, kind text, doc jsonb)`. For each kind, one statement:
  base     numeric fields pre-parsed once
  typed    typed columns (NULL when invalid: casts are guarded so one bad row never fails the batch)
           and the first type/requiredness problem as `reason`
  checked  + contradictions with the escrow (slot out of range)
  quarantine / upsert (amendments recorded with the previous content) / dirty marks
"""
from __future__ import annotations

from functools import cache

from indexer.load.kinds import (BOOL, HEX, I64, ID, KINDS, PG_TYPES, REASON, STR, STRS, TS, U32, U64, U64N,
                                VOTES, Kind)

_MAX = {U64: "9223372036854775807", I64: "9223372036854775807", U32: "2147483647",
        U64N: "18446744073709551615", ID: "18446744073709551615"}
_NUMERIC = {U64, U64N, I64, U32}
_INT_TEXT = r"^-?[0-9]{1,20}$"


def _v(name: str) -> str:
    return f"(doc->'{name}')"


def _present(name: str) -> str:
    return f"({_v(name)} IS NOT NULL AND jsonb_typeof({_v(name)}) <> 'null')"


def _num(name: str) -> str:
    v = _v(name)
    return (f"CASE jsonb_typeof({v}) WHEN 'number' THEN {v}::numeric WHEN 'string' THEN "
            f"CASE WHEN ({v}#>>'{{}}') ~ '{_INT_TEXT}' THEN ({v}#>>'{{}}')::numeric END END")


def _base_columns(kind: Kind) -> list[str]:
    cols = []
    for f in kind.fields:
        if f.type in _NUMERIC or f.type in (ID, TS):
            cols.append(f"{_num(f.name)} AS n_{f.name}")
    return cols


def _valid_votes(v: str) -> str:
    return (f"(jsonb_typeof({v}) = 'array' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements({v}) e "
            f"WHERE NOT (jsonb_typeof(e) = 'object' AND jsonb_typeof(e->'accept') = 'boolean' "
            f"AND (e->>'voter_slot') ~ '^[0-9]{{1,9}}$')))")


def _ts_text(v: str) -> str:
    return (f"(jsonb_typeof({v}) = 'string' AND ({v}#>>'{{}}') ~ "
            r"'^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$'"
            f" AND rec.try_timestamptz({v}#>>'{{}}') IS NOT NULL)")


def _typed(f) -> tuple[str, list[tuple[str, str]]]:
    """(value expression, [(failure condition, message)]) for one field; conditions assume presence."""
    v, n, name = _v(f.name), f"n_{f.name}", f.name
    if f.type in _NUMERIC:
        ok = f"({n} IS NOT NULL AND {n} >= 0 AND {n} = trunc({n}) AND {n} <= {_MAX[f.type]})"
        if f.type == I64:
            ok = f"({n} IS NOT NULL AND {n} = trunc({n}) AND abs({n}) <= {_MAX[I64]})"
        checks = [(f"{n} IS NULL", "not an integer"), (f"{n} <> trunc({n})", "not an integer")]
        if f.type != I64:
            checks.append((f"{n} < 0", "negative value"))
        checks.append((f"abs({n}) > {_MAX[f.type]}", "out of range"))
        return f"CASE WHEN {ok} THEN {n}::{PG_TYPES[f.type]} END", checks
    if f.type == ID:
        ok_str = f"(jsonb_typeof({v}) = 'string' AND length({v}#>>'{{}}') BETWEEN 1 AND 128)"
        ok_num = f"(jsonb_typeof({v}) = 'number' AND {n} >= 0 AND {n} = trunc({n}) AND {n} <= {_MAX[ID]})"
        return (f"CASE WHEN {ok_str} THEN {v}#>>'{{}}' WHEN {ok_num} THEN {n}::numeric(20,0)::text END",
                [(f"NOT ({ok_str} OR {ok_num})", "not a string id")])
    if f.type == BOOL:
        return (f"CASE WHEN jsonb_typeof({v}) = 'boolean' THEN {v}::boolean END",
                [(f"jsonb_typeof({v}) <> 'boolean'", "not a boolean")])
    if f.type == STR:
        return (f"CASE WHEN jsonb_typeof({v}) = 'string' THEN {v}#>>'{{}}' END",
                [(f"jsonb_typeof({v}) <> 'string'", "not a string")])
    if f.type == HEX:
        ok = f"(jsonb_typeof({v}) = 'string' AND ({v}#>>'{{}}') ~ '^[0-9a-fA-F]*$')"
        return f"CASE WHEN {ok} THEN lower({v}#>>'{{}}') END", [(f"NOT {ok}", "not a hex string")]
    if f.type == STRS:
        ok = (f"(jsonb_typeof({v}) = 'array' AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements({v}) e "
              f"WHERE jsonb_typeof(e) <> 'string'))")
        return (f"CASE WHEN {ok} THEN ARRAY(SELECT jsonb_array_elements_text({v})) END",
                [(f"NOT {ok}", "not an array of strings")])
    if f.type == VOTES:
        ok = _valid_votes(v)
        agg = (f"COALESCE((SELECT jsonb_agg(jsonb_build_object('voter_slot', (e->>'voter_slot')::int, "
               f"'accept', (e->'accept')::boolean) ORDER BY o) FROM jsonb_array_elements({v}) "
               f"WITH ORDINALITY AS x(e, o)), '[]'::jsonb)")
        return f"CASE WHEN {ok} THEN {agg} END", [(f"NOT {ok}", "not an array of {voter_slot, accept}")]
    if f.type == REASON:
        norm = f"regexp_replace(lower({v}#>>'{{}}'), '^timeout_reason_', '')"
        expr = (f"CASE WHEN {norm} IN ('refused', '1') THEN 'refused' "
                f"WHEN {norm} IN ('execution', '2') THEN 'execution' END")
        return expr, [(f"({expr}) IS NULL", "not refused or execution")]
    if f.type == TS:
        ok_num = f"(jsonb_typeof({v}) = 'number' AND {n} IS NOT NULL AND abs({n}) < 1e11)"
        expr = (f"CASE WHEN {ok_num} THEN to_timestamp({n}::double precision) "
                f"WHEN {_ts_text(v)} THEN rec.try_timestamptz({v}#>>'{{}}') END")
        return expr, [(f"({expr}) IS NULL", "not a timestamp")]
    raise ValueError(f.type)


def _reason_expr(kind: Kind) -> str:
    whens = []
    for f in kind.fields:
        if f.required:
            whens.append(f"WHEN NOT {_present(f.name)} THEN 'missing field {f.name}'")
        for cond, msg in _typed(f)[1]:
            whens.append(f"WHEN {_present(f.name)} AND ({cond}) THEN 'field {f.name}: {msg}: ' || left({_v(f.name)}::text, 60)")
    return "CASE " + " ".join(whens) + " END"


def _slot_reason(kind: Kind) -> str:
    whens = []
    for name in kind.slot_fields:
        if kind.field(name).type == VOTES:
            bad = (f"EXISTS (SELECT 1 FROM jsonb_array_elements(t.{name}) e "
                   f"WHERE (e->>'voter_slot')::int >= cardinality(e_.slots))")
            msg = f"'field {name}: a voter_slot is out of range for escrow with ' || cardinality(e_.slots) || ' slots'"
        else:
            bad = f"t.{name} >= cardinality(e_.slots)"
            msg = (f"'field {name}: slot ' || t.{name} || ' out of range for escrow with ' "
                   f"|| cardinality(e_.slots) || ' slots'")
        whens.append(f"WHEN e_.slots IS NOT NULL AND {bad} THEN {msg}")
    return ("CASE " + " ".join(whens) + " END") if whens else "NULL::text"


def _row(prefix: str, cols: list[str]) -> str:
    return "(" + ", ".join(f"{prefix}{c}" for c in cols) + ")"


@cache
def upsert_statement(kind_name: str) -> str:
    kind = KINDS[kind_name]
    cols, key = kind.columns, list(kind.key)
    content = kind.value_columns + ["extra"]
    known = "ARRAY[" + ", ".join(f"'{c}'" for c in ["kind", *cols]) + "]"
    base_cols = ", ".join(["line", "doc", *_base_columns(kind)])
    typed_cols = ", ".join(f"{_typed(f)[0]} AS {f.name}" for f in kind.fields)
    table = f"rec.{kind.table}"
    join = "LEFT JOIN rec.escrow e_ ON e_.escrow_id = t.escrow_id" if kind.slot_fields else ""
    key_eq = " AND ".join(f"t.{k} = s.{k}" for k in key)
    if kind.scope == "escrow":
        dirty = ("dirty AS (INSERT INTO replay.dirty_escrow (escrow_id) SELECT DISTINCT escrow_id FROM up "
                 "ON CONFLICT DO NOTHING)")
    else:
        dirty = ("dirty AS (INSERT INTO rules.dirty_epoch (epoch_index) SELECT DISTINCT epoch_index FROM up "
                 "ON CONFLICT DO NOTHING)")
    returning_col = "escrow_id" if kind.scope == "escrow" else "epoch_index"
    return f"""
WITH base AS (
  SELECT {base_cols} FROM pg_temp.stage WHERE kind = '{kind.name}'
), typed AS (
  SELECT line, doc, {typed_cols}, NULLIF(doc - {known}, '{{}}'::jsonb) AS extra,
         {_reason_expr(kind)} AS type_reason
  FROM base
), checked AS (
  SELECT t.*, COALESCE(t.type_reason, {_slot_reason(kind)}) AS problem FROM typed t {join}
), quarantined AS (
  INSERT INTO rec.quarantine (source_id, line, kind, reason, raw)
  SELECT %(source_id)s, line, '{kind.name}', problem, doc::text FROM checked WHERE problem IS NOT NULL
  ON CONFLICT (source_id, line) DO NOTHING
), good AS (
  SELECT * FROM checked WHERE problem IS NULL
), src AS (
  SELECT DISTINCT ON ({", ".join(key)}) * FROM good ORDER BY {", ".join(key)}, line DESC
), history AS (
  INSERT INTO rec.amendment (kind, record_key, previous, source_id, line)
  SELECT '{kind.name}', jsonb_build_array({", ".join("t." + k for k in key)}), to_jsonb(t), %(source_id)s, s.line
  FROM src s JOIN {table} t ON {key_eq}
  WHERE {_row("t.", content)} IS DISTINCT FROM {_row("s.", content)}
), up AS (
  INSERT INTO {table} AS t ({", ".join(cols)}, extra, source_id, source_line)
  SELECT {", ".join(cols)}, extra, %(source_id)s, line FROM src
  ON CONFLICT ({", ".join(key)}) DO UPDATE SET
    ({", ".join(content)}, source_id, source_line, revision, amended_at) =
    ({", ".join("excluded." + c for c in content)}, excluded.source_id, excluded.source_line, t.revision + 1, now())
  WHERE {_row("t.", content)} IS DISTINCT FROM {_row("excluded.", content)}
  RETURNING (t.xmax = 0) AS inserted, t.{returning_col}
), {dirty}
SELECT (SELECT count(*) FROM up WHERE inserted) AS inserted,
       (SELECT count(*) FROM up WHERE NOT inserted) AS amended,
       (SELECT count(*) FROM checked WHERE problem IS NOT NULL) AS quarantined,
       CASE WHEN (SELECT count(*) FROM good) > (SELECT count(*) FROM src)  -- duplicates of a key in one batch
            THEN (SELECT count(*) FROM (SELECT DISTINCT {", ".join(key)}, {", ".join(content)} FROM good) d)
                 - (SELECT count(*) FROM src) ELSE 0 END AS superseded_in_batch,
       (SELECT count(*) FROM good) AS valid
"""
