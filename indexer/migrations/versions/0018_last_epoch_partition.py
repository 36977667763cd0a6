"""part.ensure_epochs: the epoch 2^63 - 1 gets its partition (bounded by MAXVALUE), and epochs ahead stop there

An epoch's partition is FOR VALUES FROM (e) TO (e + 1), and the epochs ahead of the largest were max + 1, max + 2:
both overflowed bigint for the largest epoch a record can carry (epoch_index is typed up to 2^63 - 1). One record
with that epoch then failed the whole load with "bigint out of range" instead of being stored; and once such an
escrow was stored, every later ensure_ahead (each poll cycle, each ingest) would have failed the same way. The
function is the same but for those two computations.

Downgrade keeps this body: the old one differs only by failing on that epoch.

Revision ID: 0018_last_epoch_partition
Revises: 0017_later_chain_upgrades
Create Date: 2026-12-03
"""
from alembic import op

revision = "0018_last_epoch_partition"
down_revision = "0017_later_chain_upgrades"
branch_labels = None
depends_on = None

ENSURE_EPOCHS = """
CREATE OR REPLACE FUNCTION part.ensure_epochs(epochs bigint[], ahead integer DEFAULT 0) RETURNS integer
LANGUAGE plpgsql AS $$
-- Creates, for every partitioned table in rec/replay/rules, the partitions of `epochs` and of the `ahead` epochs
-- after the largest (none past 2^63 - 1, whose partition reaches MAXVALUE). Rows of a new partition's epoch that
-- landed in the DEFAULT partition (the safety net) are moved into it first (a partition cannot be created while the
-- default holds rows of its range). Cheap when all exist: one catalog probe per table and epoch. Returns the number
-- of partitions created.
DECLARE
  wanted bigint[];
  parent record;
  e bigint;
  created integer := 0;
  name text;
  default_name text;
  stranded boolean;
BEGIN
  SELECT array_agg(DISTINCT x::bigint ORDER BY x::bigint) INTO wanted  -- numeric: max + g may pass bigint
  FROM (SELECT unnest(epochs)::numeric UNION ALL
        SELECT max(m)::numeric + g FROM unnest(epochs) m, generate_series(1, greatest(ahead, 0)) g GROUP BY g) s(x)
  WHERE x >= 0 AND x <= 9223372036854775807;
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
                       name, parent.nspname, parent.relname, e,
                       CASE WHEN e = 9223372036854775807 THEN 'MAXVALUE' ELSE (e + 1)::text END);
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
"""


def upgrade() -> None:
    op.execute(ENSURE_EPOCHS)


def downgrade() -> None:
    pass  # the body above stays: it differs from 0014's only where that one failed
