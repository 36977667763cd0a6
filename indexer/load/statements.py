"""Set-based SQL for one kind, from its typed staging table `pg_temp.stage_<kind>` (filled by COPY).

Every batch is staged; this upsert serves batches that touch existing keys (amendments, reloads), while batches of
new keys take one plain INSERT from the stage (indexer.load.ingest.BatchLoader._insert_new). One statement per kind
per batch:
  src          one row per key (the last line wins inside a batch; for a tx kind, the lowest nonce first)
  other_tx     a tx kind's records of a batch key at another nonce, quarantined (indexer.load.samekey)
  history      the previous content of every record a changed record amends
  up           the upsert; unchanged rows are not touched (no dead tuples, no dirty marks)
  dirty        escrows (or epochs) whose records changed, for the replay / rules stages, returned to the loader,
               which marks them with the batch's other marks as the batch's last writes (indexer.load.marks)
  raced        keys a concurrent transaction inserted while the statement waited: the batch is loaded again
"""
from __future__ import annotations

from functools import cache

from indexer.load import samekey
from indexer.load.partitions import ROUTED, routed_column
from indexer.records import KINDS, PG_TYPES, Kind


# Epoch-level records the verification stage reads beside each escrow's own (indexer.replay.verification): the
# grants that make a host's warm-key signatures its own, the approved versions and max_nonce of the escrow params
# and whether they were read as of the epoch, and whether the epoch has ended (live params then stop standing in for
# its own). A change to one re-marks the epoch's escrows for the replay, whose verification then re-checks them.
VERIFY_INPUTS = frozenset({"warm_key", "epoch_params", "epoch"})


def scope_column(kind: Kind) -> str:
    """The column naming what a changed record of ``kind`` dirties: its escrow for the replay, or its whole epoch
    for the rules (an epoch-level input re-evaluates every escrow)."""
    return "escrow_id" if kind.scope == "escrow" else "epoch_index"


def stage_table(kind: Kind) -> str:
    return f"pg_temp.stage_{kind.name}"


def stage_ddl(kind: Kind) -> str:
    cols = ", ".join(f"{f.name} {PG_TYPES[f.type]}" for f in kind.fields)
    routed = ", epoch_index bigint" if kind.name in ROUTED else ""  # the partition (indexer.load.partitions)
    # not ON COMMIT DELETE ROWS: a commit that touched any temp table truncates every such table, used or not
    # (~0.35 ms each: 5-6 ms a batch for the dozen kinds, as every batch stores refusal parses through one).
    # The loader empties the stages it filled before its batch commits (BatchLoader).
    return (f"CREATE TEMP TABLE IF NOT EXISTS stage_{kind.name} (line bigint, {cols}, extra jsonb, source_id bigint"
            f"{routed})")


# Kinds whose stored row outranks some incoming ones: (SQL on the stored row t and the incoming row s) true when the
# stored row stays. An epoch's parameters read as of the epoch (params_exact) are the epoch's own; live values read
# later, once the node pruned that height, only stand in for them (indexer.sources.gonka.snapshots), so they never
# replace an exact snapshot, whichever code path loads them; the same holds for a participant's warm-key grants read
# as of the epoch's end (read_exact) against a later live reading. This works row by row: a live row under another
# grantee is still stored, and readers take a participant with any exact row from its exact rows only
# (indexer.replay.material, Store.exactly_granted).
# Of two readings equally exact, the one read at the higher params_height is the later state of the chain and stays
# whichever is loaded last (a reading without a height never replaces one with it); a batch's own lines of one epoch
# are chosen the same way (indexer.load.samekey.src_order).
KEEP_STORED = {"epoch_params": "t.params_exact IS TRUE AND s.params_exact IS NOT TRUE"
                               " OR (t.params_exact IS TRUE) = (s.params_exact IS TRUE) AND t.params_height IS NOT NULL"
                               " AND (s.params_height IS NULL OR t.params_height > s.params_height)",
               "warm_key": "t.read_exact IS TRUE AND s.read_exact IS NOT TRUE"}


def _row(prefix: str, cols: list[str]) -> str:
    return "(" + ", ".join(f"{prefix}{c}" for c in cols) + ")"


# The columns of a VERIFY_INPUTS kind that verification reads, where it reads only some: an update that leaves them
# as they were re-marks nothing. The poller captures the open epoch's params every cycle with a new params_height
# and live values, and verification reads only devshard_escrow_params and params_exact from them; of the epoch
# record, only whether it has ended (end_height).
VERIFIED_COLUMNS = {"epoch_params": ("devshard_escrow_params", "params_exact"), "epoch": ("end_height",)}


def _reverify(kind_name: str, scope_col: str) -> str:
    """The upsert's extra output for :data:`VERIFY_INPUTS`: the epochs with a new record, or with an updated one
    whose verified columns (:data:`VERIFIED_COLUMNS`, else all) changed, whose escrows the replay re-checks."""
    if kind_name not in VERIFY_INPUTS:
        return "'{}'::bigint[]"
    updated = f"SELECT {scope_col} FROM upd"
    if kind_name in VERIFIED_COLUMNS:
        # `previous` is to_jsonb of the stored row: a NULL column there is JSON null
        differs = " OR ".join(f"coalesce(to_jsonb(c.{col}), 'null') IS DISTINCT FROM c.previous->'{col}'"
                              for col in VERIFIED_COLUMNS[kind_name])
        updated = f"SELECT c.{scope_col} FROM changed c WHERE {differs}"
    return f"ARRAY(SELECT {scope_col} FROM ins UNION {updated})"


@cache
def upsert_statement(kind_name: str, repeats_keys: bool = False) -> str:
    """The set-based upsert of one kind's stage; which record of a key stays, and what a later one keeps of the
    stored one (or of an earlier line of the batch, when ``repeats_keys``), are indexer.load.samekey's rules."""
    kind = KINDS[kind_name]
    # a routed kind's rows carry their partition: the unique index is the key plus epoch_index, and one key is only
    # ever in one partition (indexer.load.partitions), so matching on both is matching on the key
    routed = ["epoch_index"] if kind_name in ROUTED else []
    cols, key = kind.columns + routed, list(kind.key)
    match = key + routed
    content = kind.value_columns + ["extra"]
    table, stage = f"rec.{kind.table}", stage_table(kind)
    key_eq = " AND ".join(f"t.{k} = s.{k}" for k in match)
    scope_col = scope_column(kind)
    keys = ", ".join(key)
    not_inserted = " AND ".join(f"i.{k} = s.{k}" for k in key)
    keep = f"\n    AND NOT ({KEEP_STORED[kind_name]})" if kind_name in KEEP_STORED else ""
    values = {col: samekey.merged(kind, col) for col in content}
    return f"""
WITH src AS (
  {samekey.src(kind, stage, cols, repeats_keys)}
), ins AS (  -- new keys: a plain insert, no probe for history
  INSERT INTO {table} ({", ".join(cols)}, extra, source_id, source_line)
  SELECT {", ".join(cols)}, extra, %(source_id)s, line FROM src
  ON CONFLICT ({", ".join(match)}) DO NOTHING
  RETURNING {", ".join(dict.fromkeys([*key, scope_col]))}
), met AS (  -- keys that existed before this statement and whose content differs (for a tx kind: or another tx)
  SELECT s.line, {", ".join(f"s.{k}" for k in match)}, {", ".join(f"{v} AS {c}" for c, v in values.items())},
         {samekey.displaces(kind)} AS displaced, {samekey.stays(kind)} AS stays,
         to_jsonb(t){" - 'epoch_index'" if routed else ""} AS previous, t.revision AS stored_revision,
         coalesce(t.amended_at, t.loaded_at) AS stored_at{samekey.met_columns(kind)}
  FROM src s JOIN {table} t ON {key_eq}
  WHERE NOT EXISTS (SELECT 1 FROM ins i WHERE {not_inserted})
    AND {_row("t.", content)} IS DISTINCT FROM ({", ".join(values.values())})
    -- a later line of this same file already won (reloading a file must not replay its own amendments)
    AND ({samekey.displaces(kind)} OR {samekey.stays(kind)}
         OR NOT (t.source_id = %(source_id)s AND t.source_line > s.line)){keep}
){samekey.other_txs(kind, stage, repeats_keys)}, kept AS (  -- a restore: archived records older than the stored
  SELECT * FROM met                                               -- one (stored after the archive was written)
  WHERE NOT stays AND NOT displaced AND stored_at >= %(archived_at)s::timestamptz
), kept_out AS (  -- each such line is not applied; its quarantine row says why, with the line
  INSERT INTO rec.quarantine (source_id, line, kind, reason, raw)
  SELECT %(source_id)s, k.line, '{kind.name}',
         'archived {kind.name} ' || jsonb_build_array({", ".join("k." + c for c in key)})::text || ' is older than '
           || 'the stored record (revision ' || k.stored_revision || ', stored ' || k.stored_at
           || ', after the archive was written at ' || %(archived_at)s::timestamptz || '): the stored one is kept',
         {samekey.record_json(kind, 's.')}::text
  FROM kept k JOIN src s ON s.line = k.line ORDER BY k.line
  ON CONFLICT (source_id, line) DO NOTHING
), changed AS (  -- what the update writes: not a tx kept out because the stored one comes first, nor an older
  SELECT * FROM met WHERE NOT stays AND line NOT IN (SELECT line FROM kept)  -- archived record
), history AS (  -- a displaced tx is not an amendment: its quarantine row keeps it (other_tx)
  INSERT INTO rec.amendment (kind, record_key, previous, source_id, line)
  SELECT '{kind.name}', jsonb_build_array({", ".join("c." + k for k in key)}), c.previous, %(source_id)s, c.line
  FROM changed c WHERE NOT c.displaced
), upd AS (
  UPDATE {table} t SET
    ({", ".join(content)}, source_id, source_line, revision, amended_at) =
    ({", ".join("c." + col for col in content)}, %(source_id)s, c.line,
     CASE WHEN c.displaced THEN 1 ELSE t.revision + 1 END, CASE WHEN NOT c.displaced THEN now() END)
  FROM changed c WHERE {" AND ".join(f"t.{k} = c.{k}" for k in match)}
  RETURNING t.{scope_col}, c.displaced
)
SELECT (SELECT count(*) FROM ins) + (SELECT count(*) FROM upd WHERE displaced) AS inserted,
       (SELECT count(*) FROM upd WHERE NOT displaced) AS amended,
       CASE WHEN (SELECT count(*) FROM {stage}) > (SELECT count(*) FROM src)  -- duplicates of a key in one batch
            THEN (SELECT count(*) FROM (SELECT DISTINCT {keys}, {", ".join(content)}
                                        FROM {samekey.applied_rows(kind, stage, keys)} a) d)
                 - (SELECT count(*) FROM src) ELSE 0 END AS superseded_in_batch,
       (SELECT count(*) FROM {stage}) AS valid,
       ARRAY(SELECT {scope_col} FROM ins WHERE {scope_col} IS NOT NULL
             UNION SELECT {scope_col} FROM upd WHERE {scope_col} IS NOT NULL) AS dirty,
       {_reverify(kind_name, scope_col)} AS reverify,
       (SELECT count(*) FILTER (WHERE staged) FROM other_tx) AS quarantined_staged,
       (SELECT count(*) FILTER (WHERE NOT staged) FROM other_tx) AS quarantined_stored,
       (SELECT count(*) FROM kept) AS kept_newer,
       -- keys neither inserted here nor stored as this statement sees the table: a concurrent transaction inserted
       -- them and committed while `ins` waited on it, so `met` missed them (the loader loads the batch again)
       (SELECT count(*) FROM src s WHERE NOT EXISTS (SELECT 1 FROM ins i WHERE {not_inserted})
          AND NOT EXISTS (SELECT 1 FROM {table} t WHERE {key_eq})) AS raced
"""


@cache
def conflict_check(kind: str, table: str) -> str:
    """Whether any key of the stage exists in ``table`` (BatchLoader._insert_new)."""
    spec, stage = KINDS[kind], stage_table(KINDS[kind])
    key = ", ".join(spec.key) + routed_column(kind)  # one key is only ever in one partition
    return f"SELECT EXISTS (SELECT 1 FROM {stage} s JOIN {table} t USING ({key}))"


@cache
def insert_staged(kind: str, table: str) -> str:
    """The stage's rows, all of new keys, into ``table``."""
    spec = KINDS[kind]
    cols = ", ".join(spec.columns) + routed_column(kind)
    return (f"INSERT INTO {table} ({cols}, extra, source_id, source_line) "
            f"SELECT {cols}, extra, source_id, line FROM {stage_table(spec)}")
