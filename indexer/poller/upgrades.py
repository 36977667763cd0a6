"""Chain upgrade heights from the chain itself: for every ``chain.upgrade`` row whose height is not known, the
upgrade module's applied plan (``/cosmos/upgrade/v1beta1/applied_plan/{name}``); a plan the chain reports applied
gets its height, with the source it came from. Heights an operator set are never overwritten. The version in force
per epoch (fn.chain_version_at, shown in api.epochs) follows from them once every earlier version's height is
known."""
from __future__ import annotations

from indexer.sources.gonka.chain import ChainRest
from indexer.sources.gonka.http import FetchError
from indexer.wire import chain_records as cr
from indexer.wire.normalize import NormalizeError

_PENDING = """
SELECT chain_version, upgrade_name FROM chain.upgrade
WHERE height IS NULL AND upgrade_name <> '(genesis)'
ORDER BY chain_version"""
_SET = """
UPDATE chain.upgrade SET height = %(h)s, source = %(src)s
WHERE chain_version = %(v)s AND height IS NULL"""


def resolve_upgrade_heights(chain: ChainRest, conn, fail) -> list[tuple[str, int]]:
    """Ask the chain for each unknown upgrade height; store what it answers (committed here). ``fail(source, url,
    error, transient)`` records a read that failed (the poller's net.failure / api.ingest_status)."""
    found = []
    for version, name in conn.execute(_PENDING).fetchall():
        path = f"/cosmos/upgrade/v1beta1/applied_plan/{name}"
        try:
            height = cr.applied_plan_height(chain.applied_plan(name), name)
        except (FetchError, NormalizeError) as exc:
            fail(f"upgrade:{name}", getattr(exc, "url", "") or path, str(exc), bool(getattr(exc, "transient", False)))
            continue
        if height is not None:
            with conn.transaction():
                conn.execute(_SET, {"h": height, "src": f"chain: {path}", "v": version})
            found.append((version, height))
    return found
