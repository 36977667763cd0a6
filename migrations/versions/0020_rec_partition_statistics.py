"""rec.* epoch partitions: their statistics are the indexer's, not autovacuum's ANALYZE

A load ANALYZEs the record partitions it wrote, with a small sample (indexer.load.summary.analyze_grown), and that
resets the modification count autovacuum's ANALYZE waits for. An autovacuum ANALYZE of a partition while a load is
still filling it (at the server's target: 30,000 sampled rows a partition) is therefore overwritten minutes or
seconds later and only took the load's cores: measured, the autovacuum worker used 0.99-1.25 CPU-s during three of
four 978k-record `indexer ingest` commands on a 2-core machine, against ~0.3 s for all the VACUUM it also does. So
an epoch partition of a rec table is made with autovacuum_analyze_threshold at its largest value (autovacuum still
VACUUMs it, and prevents wraparound, as before); the indexer applies autovacuum's own rule to each partition it
writes (grown by a tenth since its statistics), and analyses a settled epoch at the server's target
(indexer.poller.freezing). The replay and rules tables keep autovacuum's ANALYZE.

part.ensure_epochs is 0018's with the storage parameter where it makes a partition; existing rec epoch partitions
get it too. Downgrade puts 0018's function back and resets the parameter.

Revision ID: 0020_rec_partition_statistics
Revises: 0019_frozen_partitions
Create Date: 2026-12-04
"""
import importlib

from alembic import op

revision = "0020_rec_partition_statistics"
down_revision = "0019_frozen_partitions"
branch_labels = None
depends_on = None

OLD = importlib.import_module("indexer.migrations.versions.0018_last_epoch_partition").NEW
# INT_MAX: autovacuum never reaches it; the loader analyses these partitions itself (see above)
PARAMETER = "autovacuum_analyze_threshold = 2147483647"
# (0018's statement, the same with the parameter for rec tables): a pair, not module strings, so that the tools
# that read the migrations' SQL (tests/support/citus_catalog.py) see only whole statements
_CREATE = (
    """        EXECUTE format('CREATE TABLE part.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)',
                       name, parent.nspname, parent.relname, e,
                       CASE WHEN e = 9223372036854775807 THEN 'MAXVALUE' ELSE (e + 1)::text END);""",
    f"""        EXECUTE format('CREATE TABLE part.%I PARTITION OF %I.%I FOR VALUES FROM (%s) TO (%s)%s',
                       name, parent.nspname, parent.relname, e,
                       CASE WHEN e = 9223372036854775807 THEN 'MAXVALUE' ELSE (e + 1)::text END,
                       CASE WHEN parent.nspname = 'rec' THEN ' WITH ({PARAMETER})' ELSE '' END);""",
)
assert OLD.count(_CREATE[0]) == 1
NEW = OLD.replace(*_CREATE)

# every existing epoch partition of a rec table (not _unassigned, whose rows move out, nor _default)
_EACH_REC_EPOCH_PARTITION = """
DO $$
DECLARE p record;
BEGIN
  FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           JOIN pg_class parent ON parent.oid = i.inhparent JOIN pg_namespace n ON n.oid = parent.relnamespace
           WHERE n.nspname = 'rec' AND c.relname ~ '_e[0-9]+$' ORDER BY 1
  LOOP
    EXECUTE format('ALTER TABLE part.%I {action}', p.relname);
  END LOOP;
END $$;
"""


def upgrade() -> None:
    op.execute(NEW)
    op.execute(_EACH_REC_EPOCH_PARTITION.replace("{action}", f"SET ({PARAMETER})"))


def downgrade() -> None:
    op.execute(OLD)
    op.execute(_EACH_REC_EPOCH_PARTITION.replace("{action}", "RESET (autovacuum_analyze_threshold)"))
