"""Issue 9 item 3: `indexer migrate` replaces the api views and fn functions in place, so views that users built on
top of them survive; what cannot be replaced in place is dropped alone (never CASCADE), and a user's object in the
way fails the migration with its name."""
from __future__ import annotations

import psycopg
import pytest

from indexer.db import migrate
from indexer.db.replaceable import MARKER, DependentObjectsError


def _columns(conn, view: str) -> list[str]:
    return [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                                       "ORDER BY attnum", (view,))]


def _exists(conn, name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def test_a_users_view_on_api_survives_migrate(db_url, conn):
    conn.execute("CREATE VIEW public.my_hosts AS SELECT participant, count(*) AS n FROM api.disputable_penalties "
                 "GROUP BY 1")
    conn.execute("CREATE VIEW api.analyst_view AS SELECT escrow_id FROM api.inferences")  # unmarked: the user's
    migrate.upgrade(db_url)
    assert _exists(conn, "public.my_hosts") and _exists(conn, "api.analyst_view")
    assert conn.execute("SELECT count(*) FROM public.my_hosts").fetchone() == (0,)
    assert migrate.ensure_schema(db_url) is False  # the stamp is still written


def test_a_view_whose_columns_changed_is_recreated_alone(db_url, conn):
    want = _columns(conn, "api.model_limits")
    # as if an older release had shipped the view with another column: CREATE OR REPLACE cannot drop it
    conn.execute("DROP VIEW api.model_limits")
    conn.execute("CREATE VIEW api.model_limits AS SELECT 1 AS old_column")
    conn.execute(f"COMMENT ON VIEW api.model_limits IS '{MARKER} (old)'")
    conn.execute("CREATE VIEW public.on_inferences AS SELECT escrow_id FROM api.inferences")
    migrate.upgrade(db_url)
    assert _columns(conn, "api.model_limits") == want
    assert _exists(conn, "public.on_inferences")


def test_a_users_view_in_the_way_fails_the_migration_with_its_name(db_url, conn):
    conn.execute("DROP VIEW api.model_limits")
    conn.execute("CREATE VIEW api.model_limits AS SELECT 1 AS old_column")
    conn.execute("CREATE VIEW public.on_old AS SELECT old_column FROM api.model_limits")
    with pytest.raises(DependentObjectsError, match=r"view on_old depends on view api\.model_limits"):
        migrate.upgrade(db_url)
    assert _exists(conn, "public.on_old")  # nothing was dropped: the migration rolled back


def test_our_objects_no_longer_in_sql_are_dropped_and_others_kept(db_url, conn):
    conn.execute("CREATE VIEW api.retired AS SELECT 1 AS x")
    conn.execute(f"COMMENT ON VIEW api.retired IS '{MARKER} (sql/views/99_retired.sql)'")
    conn.execute("CREATE FUNCTION fn.retired() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    conn.execute(f"COMMENT ON FUNCTION fn.retired() IS '{MARKER} (sql/functions/99_retired.sql)'")
    conn.execute("CREATE VIEW api.mine AS SELECT 1 AS x")
    migrate.upgrade(db_url)
    assert not _exists(conn, "api.retired") and _exists(conn, "api.mine")
    assert conn.execute("SELECT to_regprocedure('fn.retired()')").fetchone() == (None,)


def test_downgrade_names_a_users_view_instead_of_dropping_it(empty_db_url):
    migrate.upgrade(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        c.execute("CREATE VIEW public.keep_me AS SELECT escrow_id FROM api.inferences")
    with pytest.raises(DependentObjectsError, match=r"view keep_me depends on view api\.inferences"):
        migrate.downgrade(empty_db_url)
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        assert _exists(c, "public.keep_me") and _exists(c, "api.inferences")
