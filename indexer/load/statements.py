"""Set-based SQL for one kind, from its typed staging table `pg_temp.stage_<kind>` (filled by COPY).

One statement per kind per batch:
  checked      + contradictions with the escrow (slot out of range), which need other records
  quarantined  those rows, with the reason
  src          one row per key (the last line wins inside a batch)
  history      the previous content of every record a changed record replaces
  up           the upsert; unchanged rows are not touched (no dead tuples, no dirty marks)
  dirty        escrows (or epochs) whose records changed, for the replay / rules stages
"""
from __future__ import annotations

from functools import cache

from indexer.load.kinds import KINDS, PG_TYPES, VOTES, Kind


def stage_table(kind: Kind) -> str:
    return f"pg_temp.stage_{kind.name}"


def stage_ddl(kind: Kind) -> str:
    cols = ", ".join(f"{f.name} {PG_TYPES[f.type]}" for f in kind.fields)
    return f"CREATE TEMP TABLE IF NOT EXISTS stage_{kind.name} (line bigint, {cols}, extra jsonb) ON COMMIT DELETE ROWS"


def _slot_problem(kind: Kind) -> str:
    whens = []
    for name in kind.slot_fields:
        if kind.field(name).type == VOTES:
            bad = (f"EXISTS (SELECT 1 FROM jsonb_array_elements(t.{name}) v "
                   f"WHERE (v->>'voter_slot')::int >= cardinality(e_.slots))")
            msg = f"'field {name}: a voter_slot is out of range for escrow with ' || cardinality(e_.slots) || ' slots'"
        else:
            bad = f"t.{name} >= cardinality(e_.slots)"
            msg = (f"'field {name}: slot ' || t.{name} || ' out of range for escrow with ' "
                   f"|| cardinality(e_.slots) || ' slots'")
        whens.append(f"WHEN {bad} THEN {msg}")
    return "CASE " + " ".join(whens) + " END"


def _row(prefix: str, cols: list[str]) -> str:
    return "(" + ", ".join(f"{prefix}{c}" for c in cols) + ")"


@cache
def upsert_statement(kind_name: str) -> str:
    kind = KINDS[kind_name]
    cols, key = kind.columns, list(kind.key)
    content = kind.value_columns + ["extra"]
    table, stage = f"rec.{kind.table}", stage_table(kind)
    if kind.slot_fields:
        checked = (f"SELECT t.*, {_slot_problem(kind)} AS problem FROM {stage} t "
                   f"LEFT JOIN rec.escrow e_ ON e_.escrow_id = t.escrow_id")
    else:
        checked = f"SELECT t.*, NULL::text AS problem FROM {stage} t"
    key_eq = " AND ".join(f"t.{k} = s.{k}" for k in key)
    if kind.scope == "escrow":
        dirty, scope_col = "replay.dirty_escrow (escrow_id)", "escrow_id"
    else:
        dirty, scope_col = "rules.dirty_epoch (epoch_index)", "epoch_index"
    return f"""
WITH checked AS (
  {checked}
), quarantined AS (
  INSERT INTO rec.quarantine (source_id, line, kind, reason, raw)
  SELECT %(source_id)s, line, '{kind.name}', problem, (to_jsonb(c) - 'line' - 'problem')::text
  FROM checked c WHERE problem IS NOT NULL
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
    AND NOT (t.source_id = %(source_id)s AND t.source_line > s.line)
), up AS (
  INSERT INTO {table} AS t ({", ".join(cols)}, extra, source_id, source_line)
  SELECT {", ".join(cols)}, extra, %(source_id)s, line FROM src
  ON CONFLICT ({", ".join(key)}) DO UPDATE SET
    ({", ".join(content)}, source_id, source_line, revision, amended_at) =
    ({", ".join("excluded." + c for c in content)}, excluded.source_id, excluded.source_line, t.revision + 1, now())
  WHERE {_row("t.", content)} IS DISTINCT FROM {_row("excluded.", content)}
    -- a later line of this same file already won (reloading a file must not replay its own amendments)
    AND NOT (t.source_id = excluded.source_id AND t.source_line > excluded.source_line)
  RETURNING (t.xmax = 0) AS inserted, t.{scope_col}
), dirty AS (
  INSERT INTO {dirty} SELECT DISTINCT {scope_col} FROM up WHERE {scope_col} IS NOT NULL ON CONFLICT DO NOTHING
)
SELECT (SELECT count(*) FROM up WHERE inserted) AS inserted,
       (SELECT count(*) FROM up WHERE NOT inserted) AS amended,
       (SELECT count(*) FROM checked WHERE problem IS NOT NULL) AS quarantined,
       CASE WHEN (SELECT count(*) FROM good) > (SELECT count(*) FROM src)  -- duplicates of a key in one batch
            THEN (SELECT count(*) FROM (SELECT DISTINCT {", ".join(key)}, {", ".join(content)} FROM good) d)
                 - (SELECT count(*) FROM src) ELSE 0 END AS superseded_in_batch,
       (SELECT count(*) FROM good) AS valid
"""
