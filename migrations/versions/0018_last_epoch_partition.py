"""part.ensure_epochs: the epoch 2^63 - 1 gets its partition (bounded by MAXVALUE), and epochs ahead stop there

An epoch's partition is FOR VALUES FROM (e) TO (e + 1), and the epochs ahead of the largest were max + 1, max + 2:
both overflowed bigint for the largest epoch a record can carry (epoch_index is typed up to 2^63 - 1). One record
with that epoch then failed the whole load with "bigint out of range" instead of being stored; and once such an
escrow was stored, every later ensure_ahead (each poll cycle, each ingest) would have failed the same way.

The function is 0014's with those two computations changed, made here from 0014's text (which never changes) so
that the body is written once; downgrade puts 0014's back.

Revision ID: 0018_last_epoch_partition
Revises: 0017_later_chain_upgrades
Create Date: 2026-12-03
"""
import importlib

from alembic import op

revision = "0018_last_epoch_partition"
down_revision = "0017_later_chain_upgrades"
branch_labels = None
depends_on = None

_SUPPORT = importlib.import_module("indexer.migrations.versions.0014_partitioned_history").SUPPORT
_START = _SUPPORT.index("CREATE FUNCTION part.ensure_epochs(")
OLD = "CREATE OR REPLACE" + _SUPPORT[_START + len("CREATE"):_SUPPORT.index("END $$;", _START) + len("END $$;")]

_CHANGES = (
    # the epochs wanted in numeric, so that max + g may pass bigint, and none past it kept
    ("""  SELECT array_agg(DISTINCT x ORDER BY x) INTO wanted
  FROM (SELECT unnest(epochs) UNION ALL
        SELECT max(m) + g FROM unnest(epochs) m, generate_series(1, greatest(ahead, 0)) g GROUP BY g) s(x)
  WHERE x >= 0;""",
     """  SELECT array_agg(DISTINCT x::bigint ORDER BY x::bigint) INTO wanted
  FROM (SELECT unnest(epochs)::numeric UNION ALL
        SELECT max(m)::numeric + g FROM unnest(epochs) m, generate_series(1, greatest(ahead, 0)) g GROUP BY g) s(x)
  WHERE x >= 0 AND x <= 9223372036854775807;"""),
    # the last epoch's partition reaches MAXVALUE (e + 1 has no bigint)
    ("name, parent.nspname, parent.relname, e, e + 1);",
     "name, parent.nspname, parent.relname, e,\n"
     "                       CASE WHEN e = 9223372036854775807 THEN 'MAXVALUE' ELSE (e + 1)::text END);"),
)


def _changed(text: str) -> str:
    for old, new in _CHANGES:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


NEW = _changed(OLD)


def upgrade() -> None:
    op.execute(NEW)


def downgrade() -> None:
    op.execute(OLD)
