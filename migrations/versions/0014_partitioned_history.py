"""partitioned history: the large fact tables partitioned by epoch (declarative RANGE partitioning, one partition
per epoch in schema `part`), the escrow -> epoch registry the loader routes tx rows with, and part.ensure_epochs,
which creates partitions ahead of need and moves rows out of the DEFAULT safety net (docs/partitioning.md)

Revision ID: 0014_partitioned_history
Revises: 0013_poller_leases
Create Date: 2026-12-11
"""
from alembic import op

revision = "0014_partitioned_history"
down_revision = "0013_poller_leases"
branch_labels = None
depends_on = None

# The record tables keyed by escrow: their NDJSON records carry no epoch, so each gains epoch_index, filled by the
# loader from rec.escrow_epoch (-1 until the escrow is known: the `unassigned` partition). Key columns of each.
REC_BY_ESCROW = {
    "rec.start_tx": ("escrow_id", "inference_id"),
    "rec.confirm_start_tx": ("escrow_id", "inference_id"),
    "rec.finish_tx": ("escrow_id", "inference_id"),
    "rec.validation_tx": ("escrow_id", "inference_id", "validator_slot"),
    "rec.validation_vote_tx": ("escrow_id", "inference_id", "voter_slot"),
    "rec.timeout_tx": ("escrow_id", "inference_id"),
    "rec.error_miss_tx": ("escrow_id", "inference_id"),
    "rec.host_stats": ("escrow_id", "slot_id"),
}
# Derived tables that already carry epoch_index (None: the table has no primary key), and whether the column was
# nullable before (the writers never leave it null; a partition key in a primary key must be NOT NULL).
DERIVED = {
    "replay.inference": (("escrow_id", "inference_id"), True),
    "rules.context_refusal": (("escrow_id", "inference_id"), True),
    "rules.sibling_finding": (("escrow_id", "inference_id"), True),
    "rules.challenge": (("escrow_id", "inference_id"), True),
    "rules.disputable": (("escrow_id", "inference_id", "penalty"), True),
}
# Not partitioned: rules.suspect (a Citus reference table, read across escrows; Citus cannot partition one).
# Indexes on epoch_index alone: inside a one-epoch partition they index a constant, so they go; back on downgrade.
EPOCH_ONLY_INDEXES = {
    "replay.inference": "CREATE INDEX ix_inference_epoch_index ON replay.inference (epoch_index)",
    "rules.context_refusal": "CREATE INDEX ix_context_refusal_epoch_index ON rules.context_refusal (epoch_index)",
    "rules.sibling_finding": "CREATE INDEX ix_sibling_finding_epoch_index ON rules.sibling_finding (epoch_index)",
    "rules.challenge": "CREATE INDEX ix_challenge_epoch_index ON rules.challenge (epoch_index)",
    "rules.disputable": "CREATE INDEX ix_disputable_epoch_index ON rules.disputable (epoch_index)",
}

# The routing column, as plain DDL (the static Citus catalog, tests/support/citus_catalog.py, reads the migrations' SQL
# strings): added to the unpartitioned tables first (a constant default: no rewrite), then copied by LIKE.
ROUTING_COLUMN = """
ALTER TABLE rec.start_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.confirm_start_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.finish_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.validation_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.validation_vote_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.timeout_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.error_miss_tx ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
ALTER TABLE rec.host_stats ADD COLUMN epoch_index bigint NOT NULL DEFAULT -1;
"""

SUPPORT = """
CREATE SCHEMA IF NOT EXISTS part;
COMMENT ON SCHEMA part IS 'the epoch partitions of the partitioned rec/replay/rules tables (query the parents)';
CREATE TABLE rec.escrow_epoch (
    escrow_id text NOT NULL,
    epoch_index bigint NOT NULL,
    CONSTRAINT pk_escrow_epoch PRIMARY KEY (escrow_id)
);
COMMENT ON TABLE rec.escrow_epoch IS
  'the partition of each escrow''s tx rows (-1: escrow not yet loaded). A loader locks an escrow''s row (FOR SHARE) '
  'while it writes the escrow''s txs; loading the escrow updates it and moves the txs, so the two never miss '
  'each other and all rows of one key stay in one partition';

CREATE FUNCTION part.ensure_epochs(epochs bigint[], ahead integer DEFAULT 0) RETURNS integer
LANGUAGE plpgsql AS $$
-- Creates, for every partitioned table in rec/replay/rules, the partitions of `epochs` and of the `ahead` epochs
-- after the largest. Rows of a new partition's epoch that landed in the DEFAULT partition (the safety net) are
-- moved into it first (a partition cannot be created while the default holds rows of its range). Cheap when all
-- exist: one catalog probe per table and epoch. Returns the number of partitions created.
DECLARE
  wanted bigint[];
  parent record;
  e bigint;
  created integer := 0;
  name text;
  default_name text;
  stranded boolean;
BEGIN
  SELECT array_agg(DISTINCT x ORDER BY x) INTO wanted
  FROM (SELECT unnest(epochs) UNION ALL
        SELECT max(m) + g FROM unnest(epochs) m, generate_series(1, greatest(ahead, 0)) g GROUP BY g) s(x)
  WHERE x >= 0;
  IF wanted IS NULL THEN RETURN 0; END IF;
  FOR parent IN
    SELECT n.nspname, c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname IN ('rec', 'replay', 'rules') AND NOT c.relispartition ORDER BY 1, 2
  LOOP
    default_name := format('%s_%s_default', parent.nspname, parent.relname);
    FOREACH e IN ARRAY wanted LOOP
      name := format('%s_%s_e%s', parent.nspname, parent.relname, e);
      CONTINUE WHEN to_regclass(format('part.%I', name)) IS NOT NULL;
      -- two loaders creating the same partition: the second waits here, then finds it made
      PERFORM pg_advisory_xact_lock(hashtext('part.ensure_epochs'));
      CONTINUE WHEN to_regclass(format('part.%I', name)) IS NOT NULL;
      BEGIN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM part.%I WHERE epoch_index = $1)', default_name)
          INTO stranded USING e;
        IF stranded THEN
          EXECUTE format('CREATE TEMP TABLE part_moving ON COMMIT DROP AS SELECT * FROM part.%I WHERE false',
                         default_name);
          EXECUTE format('WITH moved AS (DELETE FROM part.%I WHERE epoch_index = $1 RETURNING *) '
                         'INSERT INTO part_moving SELECT * FROM moved', default_name) USING e;
        END IF;
        EXECUTE format('CREATE TABLE part.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
                       name, parent.nspname, parent.relname, e, e + 1);
        IF stranded THEN
          EXECUTE format('INSERT INTO %I.%I SELECT * FROM part_moving', parent.nspname, parent.relname);
          DROP TABLE part_moving;
        END IF;
        created := created + 1;
      EXCEPTION WHEN duplicate_table OR unique_violation THEN
        -- made by a concurrent call that committed while this one waited for the lock: the second to_regclass
        -- can miss it (this backend's catalog cache is refreshed at relation locks, not advisory ones). Its
        -- partition stands; this block (and any rows it moved) is undone.
        NULL;
      END;
    END LOOP;
  END LOOP;
  RETURN created;
END $$;
COMMENT ON FUNCTION part.ensure_epochs(bigint[], integer) IS
  'create the epoch partitions of every partitioned table for the given epochs and `ahead` more; idempotent';

CREATE FUNCTION part.ensure_ahead(ahead integer) RETURNS integer LANGUAGE sql AS $$
  -- the current epoch (the newest the indexer has seen) and `ahead` after it
  SELECT part.ensure_epochs(ARRAY[(SELECT max(x) FROM (SELECT max(epoch_index) FROM rec.escrow
                                                       UNION ALL SELECT max(epoch_index) FROM net.epoch_state) s(x))],
                            ahead)
$$;
"""


def _sql(statement: str) -> list[tuple]:
    return list(op.get_bind().exec_driver_sql(statement))


def _columns(table: str) -> list[str]:
    return [r[0] for r in _sql(f"SELECT attname FROM pg_attribute WHERE attrelid = '{table}'::regclass "
                               "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")]


def _secondary_indexes(table: str) -> list[tuple[str, str]]:
    """(name, definition) of every index but the primary key's; a partitioned parent's reads 'ON ONLY'."""
    return [(name, definition.replace(" ON ONLY ", " ON ")) for name, definition in _sql(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        f"WHERE i.indrelid = '{table}'::regclass AND NOT i.indisprimary ORDER BY 1")]


def _set_aside(table: str, suffix: str) -> tuple[str, list[tuple[str, str]]]:
    """Rename the table, its primary key and indexes out of the way; returns the new name and the index definitions
    (which name the original table, so they apply to its replacement)."""
    schema, name = table.split(".")
    indexes = _secondary_indexes(table)
    pk = _sql(f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'p'")
    op.execute(f"ALTER TABLE {table} RENAME TO {name}_{suffix}")
    if pk:
        op.execute(f"ALTER TABLE {schema}.{name}_{suffix} RENAME CONSTRAINT {pk[0][0]} TO {pk[0][0]}_{suffix}")
    for index, _ in indexes:
        op.execute(f"ALTER INDEX {schema}.{index} RENAME TO {index}_{suffix}")
    return f"{schema}.{name}_{suffix}", indexes


def _partition(table: str, key: tuple[str, ...] | None) -> str:
    schema, name = table.split(".")
    old, indexes = _set_aside(table, "unpartitioned")
    op.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS) "
               "PARTITION BY RANGE (epoch_index)")
    op.execute(f"ALTER TABLE {table} ALTER COLUMN epoch_index SET NOT NULL")  # a partition key in a primary key
    if key:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{name} PRIMARY KEY ({', '.join(key)}, epoch_index)")
    for index, definition in indexes:
        if not EPOCH_ONLY_INDEXES.get(table, "").startswith(f"CREATE INDEX {index} ON "):
            op.execute(definition)
    op.execute(f"CREATE TABLE part.{schema}_{name}_default PARTITION OF {table} DEFAULT")
    op.execute(f"CREATE TABLE part.{schema}_{name}_unassigned PARTITION OF {table} FOR VALUES FROM (MINVALUE) TO (0)")
    return old


def upgrade() -> None:
    # the api views and fn functions read these tables; indexer.db.migrate recreates both schemas after Alembic
    op.execute("DROP SCHEMA IF EXISTS api CASCADE")
    op.execute("DROP SCHEMA IF EXISTS fn CASCADE")
    op.execute(SUPPORT)
    op.execute(ROUTING_COLUMN)
    op.execute("INSERT INTO rec.escrow_epoch (escrow_id, epoch_index) "
               "SELECT escrow_id, coalesce(epoch_index, -1) FROM rec.escrow")
    moves = []
    for table in REC_BY_ESCROW:
        old = _partition(table, REC_BY_ESCROW[table])
        cols = [c for c in _columns(old) if c != "epoch_index"]
        moves.append((table, old, f"INSERT INTO {table} ({', '.join(cols)}, epoch_index) "
                                  f"SELECT {', '.join(f't.{c}' for c in cols)}, coalesce(e.epoch_index, -1) "
                                  f"FROM {old} t LEFT JOIN rec.escrow_epoch e ON e.escrow_id = t.escrow_id"))
    for table, (key, _) in DERIVED.items():
        old = _partition(table, key)
        cols = ", ".join(_columns(old))
        moves.append((table, old, f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {old}"))
    # every epoch that has rows gets its partition before the rows move (the default partition stays empty)
    op.execute("SELECT part.ensure_epochs(array(SELECT epoch_index FROM rec.escrow_epoch "
               + "".join(f" UNION SELECT epoch_index FROM {t}_unpartitioned" for t in DERIVED) + "), 0)")
    for _, old, statement in moves:
        op.execute(statement)
        op.execute(f"DROP TABLE {old}")
    for table in [*REC_BY_ESCROW, *DERIVED]:
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    op.execute("DROP SCHEMA IF EXISTS api CASCADE")
    op.execute("DROP SCHEMA IF EXISTS fn CASCADE")
    for table, (key, nullable) in [*((t, (k, None)) for t, k in REC_BY_ESCROW.items()), *DERIVED.items()]:
        schema, name = table.split(".")
        old, indexes = _set_aside(table, "partitioned")
        op.execute(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS)")
        if nullable is None:  # a record table: epoch_index was the loader's routing column
            op.execute(f"ALTER TABLE {table} DROP COLUMN epoch_index")
        elif nullable:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN epoch_index DROP NOT NULL")
        if key:
            op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{name} PRIMARY KEY ({', '.join(key)})")
        for _, definition in indexes:
            op.execute(definition)
        if table in EPOCH_ONLY_INDEXES:
            op.execute(EPOCH_ONLY_INDEXES[table])
        cols = ", ".join(_columns(table))
        op.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {old}")
        op.execute(f"DROP TABLE {old}")  # its partitions with it
    op.execute("DROP TABLE rec.escrow_epoch")
    op.execute("DROP SCHEMA part CASCADE")
