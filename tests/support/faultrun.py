"""Runs a fault plan (tests/support/faultplan.py) against the devnet and PostgreSQL, and checks it.

After every cycle: it finished, or it failed visibly (no chain node answered, or the database connection was
terminated) and the next cycle completes; every injected 5xx, 429 and truncated body is one ``net.failure`` row;
every escrow that was due but not served, or pruned when fetched, has a ``net.failure`` row and a ``last_error`` in
``api.ingest_status``. After the last cycle: the tables equal a clean run's on everything capturable (see
faultplan's docstring), the rest is absent and its loss visible, and every epoch is final with honest counts; an
epoch's parameters are exact exactly where the plan says, and equal a clean run's there; the restitution views
(``api.restitution_*``, ``api.policy_whatif``: SPRT in settlement order, on the epoch's parameters) equal a clean
run's for every epoch whose escrows were all captured and whose parameters were read exactly.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from indexer.devnet import DevnetServer
from indexer.poller import poll_once
from indexer.poller.store import Store
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import WINDOW, Plan, chain_down, scenario, simulate

# 12 attempts: at the plans' worst odds (a quarter of answers faulty) a request exhausts them once in 6·10⁷, so a
# chain request never fails by chance and the plan alone decides what fails
FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=12)
IGNORED_COLUMNS = {"loaded_at", "amended_at", "replayed_at", "marked_at", "quarantined_at", "first_seen_at",
                   "last_loaded_at", "completed_at", "source_id", "source_line", "revision", "computed_at",
                   "evaluated_at", "created_at", "updated_at", "detected_at", "verified_at"}
# which group member served a diff depends on which members answered, not on the log, which is the same
IGNORED_COLUMNS |= {"source_host", "evidence_digest"}  # the digest covers which member served it
# bookkeeping, not results: provenance, amendments (a re-read row is amended once per differing load), work queues
SKIPPED_TABLES = {"rec.source", "rec.amendment", "replay.dirty_escrow", "rules.dirty_escrow", "rules.dirty_epoch",
                  "rules.run"}
# the views the settlement order (rec.escrow.extra settled_height) and the epoch's parameters feed
RESTITUTION_VIEWS = ("api.restitution_steps", "api.restitution_outcomes", "api.policy_whatif",
                     "api.restitution_impact")


class CheckFailed(AssertionError):
    pass


def policy() -> RetryPolicy:
    return RetryPolicy(**FAST)


# -- the clean reference ----------------------------------------------------------------------------------------------
def clean_run(url: str, shape: str) -> None:
    """The shape polled once per epoch with no fault, until every epoch left the window."""
    scn = scenario(shape)
    with DevnetServer(scn) as net:
        while True:
            poll_once(url, net.chain_rest_url, net.rpc_url, policy=policy(), decode_workers=0, private_hosts=True)
            if net.devnet.current_epoch >= scn.epochs[-1].epoch_index + WINDOW + 1:
                break
            net.advance_epoch()


def tables(url: str) -> dict[str, list[str]]:
    """Result tables of rec, replay, rules, and the restitution views → their compared columns."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(url) as c:
        for table, column in c.execute(
                "SELECT c.table_schema || '.' || c.table_name, c.column_name FROM information_schema.columns c "
                "JOIN information_schema.tables t USING (table_schema, table_name) WHERE (t.table_type = 'BASE TABLE' "
                "AND c.table_schema IN ('rec', 'replay', 'rules') OR c.table_schema || '.' || c.table_name = ANY(%s)) "
                "ORDER BY 1, c.ordinal_position", (list(RESTITUTION_VIEWS),)):
            if table not in SKIPPED_TABLES and column not in IGNORED_COLUMNS:
                out.setdefault(table, []).append(column)
    assert set(RESTITUTION_VIEWS) <= set(out), sorted(set(RESTITUTION_VIEWS) - set(out))
    return out


def snapshot(url: str, cols: dict[str, list[str]]) -> dict[str, set[tuple]]:
    out = {}
    with psycopg.connect(url) as c:
        for table, names in cols.items():
            # as text: arrays and jsonb become hashable, and equal values compare equal
            text = ", ".join(f"{n}::text" for n in names)
            out[table] = set(map(tuple, c.execute(f"SELECT {text} FROM {table}").fetchall()))
    return out


# -- database connection drops ------------------------------------------------------------------------------------
@contextmanager
def db_drop(url: str, where: tuple[str, int] | None):
    """Terminate the poller's main backend inside its k-th transaction (after the rows were written, before the
    commit), or its side connection before its k-th prepare: ``pg_terminate_backend`` from another connection, so
    the poller sees exactly what a server restart or a network cut would give it."""
    state = {"n": 0, "fired": False}
    if where is None:
        yield state
        return
    kind, k = where
    flush, prepare = Store._flush, Store.prepare

    def terminate(pid: int) -> None:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))  # waits until the backend is gone
        state["fired"] = True

    def dropping_flush(self, conn):
        if kind == "main" and conn is self.conn and not state["fired"]:
            state["n"] += 1
            if state["n"] == k:
                terminate(conn.info.backend_pid)
        return flush(self, conn)

    def dropping_prepare(self, items):
        if kind == "side" and not state["fired"] and any(lines for lines, _ in items):
            state["n"] += 1
            if state["n"] == k:
                terminate(self._side_conn().info.backend_pid)
        return prepare(self, items)

    Store._flush, Store.prepare = dropping_flush, dropping_prepare
    try:
        yield state
    finally:
        Store._flush, Store.prepare = flush, prepare


# -- running a plan ------------------------------------------------------------------------------------------------
@dataclass
class CycleResult:
    error: BaseException | None
    dropped: bool
    first_failure_id: int      # net.failure ids above this one were written by this cycle
    injected: dict[str, int]   # the devnet's injected faults during this cycle


def _max_failure_id(url: str) -> int:
    with psycopg.connect(url) as c:
        return c.execute("SELECT coalesce(max(id), 0) FROM net.failure").fetchone()[0]


def run_plan(url: str, plan: Plan) -> list[CycleResult]:
    scn = plan.scenario
    results = []
    with DevnetServer(scn, faults=plan.faults) as net:
        chain_urls, rpc_urls = net.chain_rest_urls(plan.nodes), net.rpc_urls(plan.nodes)
        for i, cycle in enumerate(plan.cycles):
            while net.devnet.current_epoch < cycle.clock:
                net.advance_epoch()
            for escrow_id in cycle.prune_early:
                net.devnet.prune_escrow(escrow_id)
            net.devnet.tick_after_settlement_search = cycle.tick
            net.app.options.state_retain_blocks = cycle.retain
            f = net.faults
            f.down_hosts, f.slow_hosts, f.down_nodes = set(cycle.down_hosts), set(cycle.slow_hosts), \
                set(cycle.down_nodes)
            before = dict(f.injected)
            first_id = _max_failure_id(url)
            error = None
            with db_drop(url, cycle.db_drop) as drop:
                try:
                    poll_once(url, chain_urls, rpc_urls, policy=policy(), **plan.workers, private_hosts=True)
                except Exception as exc:  # noqa: BLE001 - checked below against what the plan expects
                    error = exc
            injected = {k: f.injected[k] - before.get(k, 0) for k in f.injected}
            if net.devnet.tick_after_settlement_search:
                _fail(plan, i, "the settlement race did not happen: no settlement search was answered")
            results.append(CycleResult(error, drop["fired"], first_id, injected))
            check_cycle(url, plan, i, results[-1])
    return results


def _fail(plan: Plan, i: int | None, message: str) -> None:
    where = f"cycle {i} ({plan.cycles[i].describe()})" if i is not None else "after the last cycle"
    raise CheckFailed(f"{where}: {message}\nplan {plan.describe()}")


def check_cycle(url: str, plan: Plan, i: int, res: CycleResult) -> None:
    cycle = plan.cycles[i]
    should_fail = chain_down(plan, cycle) or res.dropped
    if res.error is not None and not should_fail:
        _fail(plan, i, f"the cycle died: {type(res.error).__name__}: {res.error}")
    if res.error is None and should_fail:
        _fail(plan, i, "the cycle should have failed (no chain node, or the database dropped) but returned")
    with psycopg.connect(url) as c:
        status = {s: (cur, err, lag) for s, cur, err, lag in c.execute(
            "SELECT source, cursor, last_error, lag_seconds FROM api.ingest_status")}
        failures = c.execute("SELECT source, url, error FROM net.failure WHERE id > %s", (res.first_failure_id,)
                             ).fetchall()
    if should_fail:
        if not (status.get("chain") and status["chain"][1]):
            _fail(plan, i, f"the failed cycle is not in api.ingest_status: chain = {status.get('chain')}")
        if not any(s == "chain" for s, _, _ in failures):
            _fail(plan, i, "the failed cycle left no net.failure row (source chain)")
    # every injected answer that failed a request is one failure row
    http = [e for s, _, e in failures if s == "http"]  # one row per failed request (others summarise them)
    counted = {"5xx": sum(e.startswith("HTTP 5") for e in http), "429": sum(e.startswith("HTTP 429") for e in http),
               "truncate": sum(e.startswith("truncated or invalid JSON") for e in http)}
    for key, n in counted.items():
        if n != res.injected[key]:
            _fail(plan, i, f"{res.injected[key]} injected {key} answer(s) but {n} net.failure row(s)")
    dropped_connections = sum(s == "http" and "RemoteProtocolError" in e for s, _, e in failures)
    if res.injected["down"] and not 0 < dropped_connections <= res.injected["down"]:
        _fail(plan, i, f"{res.injected['down']} connection(s) dropped by down hosts/nodes, "
                       f"{dropped_connections} net.failure row(s)")
    if not chain_down(plan, cycle):
        for k in cycle.down_nodes:
            if not any(f"/nodes/{k}/" in (u or "") for _, u, _ in failures):
                _fail(plan, i, f"chain node {k} was down and no net.failure row names it")
    if res.error is not None:
        return
    cap = simulate(plan)
    for escrow_id in sorted(cap.unserved.get(i, ())):
        row = status.get(f"escrow:{escrow_id}")
        if not row or not row[1]:
            _fail(plan, i, f"escrow {escrow_id} was not served (no member up, or a disputed log), but "
                           f"ingest_status shows no error: {row}")
        if not any(s == f"escrow:{escrow_id}" for s, _, _ in failures):
            _fail(plan, i, f"escrow {escrow_id} was not served, and no net.failure row says so")
    for escrow_id in sorted(cap.pruned_in.get(i, ())):
        row = status.get(f"escrow:{escrow_id}")
        if not row or not row[1] or "pruned" not in row[1]:
            _fail(plan, i, f"escrow {escrow_id} pruned before it was final, but ingest_status shows {row}")
        if not any(s == f"escrow:{escrow_id}" and "pruned" in e for s, _, e in failures):
            _fail(plan, i, f"escrow {escrow_id} pruned before it was final, and no net.failure row says so")


def _open_epoch_row(row: tuple, names: list[str], clean: set[tuple], plan: Plan) -> bool:
    """Whether a rec.epoch row is the clean run's row as a poller sees it while the epoch is current: its end not
    known yet. Only the epoch current at the last cycle that reached the chain can be left so (a later cycle that
    reaches the chain reads the ended epoch's heights again, in its window or when it prunes it; seed 3076: the
    last cycle found every chain node down)."""
    reached = [c.clock for c in plan.cycles if not chain_down(plan, c)]
    k, end = names.index("epoch_index"), names.index("end_height")
    if not reached or int(row[k]) != max(reached) or row[end] is not None:
        return False
    return any(c[:end] + (None,) + c[end + 1:] == row for c in clean if c[k] == row[k])


def _check_params(plan: Plan, cap, names: list[str], got: set[tuple], clean: set[tuple]) -> None:
    """rec.epoch_params of the scenario's ended epochs: a clean run's (exact) row where some cycle read the epoch's
    own parameters, else live values flagged inexact (or nothing, where no cycle read the epoch after it ended)."""
    k, exact = names.index("epoch_index"), names.index("params_exact")
    last_clock = max((c.clock for c in plan.cycles if not chain_down(plan, c)), default=-1)
    for ep in plan.scenario.epochs:
        e = str(ep.epoch_index)
        have, want = {r for r in got if r[k] == e}, {r for r in clean if r[k] == e}
        if ep.epoch_index in cap.exact_params:
            if have != want:
                _fail(plan, None, f"epoch {e}: its parameters were read exactly, but rec.epoch_params has {have}, "
                                  f"the clean run {want}")
        elif ep.epoch_index < last_clock and any(r[exact] == "true" for r in have):
            _fail(plan, None, f"epoch {e}: no cycle could read its parameters exactly, but the row says exact: {have}")


def _live_grants_standing_in(plan: Plan, names: list[str], extra: set[tuple], clean: set[tuple]) -> set[tuple]:
    """The rec.warm_key rows a clean run lacks, less those that are its grants read live: a cycle that reaches the
    chain only after the node pruned the epoch's end height reads today's grants (read_exact false, no height), as
    the parameters stand in live (_check_params). A live row must still name a grant the clean run read."""
    exact, height = names.index("read_exact"), names.index("read_height")
    grant = [names.index(n) for n in ("epoch_index", "participant", "grantee", "pub_key")]
    granted = {tuple(r[i] for i in grant) for r in clean}
    out = set()
    for r in extra:
        if r[exact] == "true":
            out.add(r)
        elif r[height] is not None or tuple(r[i] for i in grant) not in granted:
            _fail(plan, None, f"rec.warm_key has a live row that is not a clean run's grant read live: {r}")
    return out


def _statuses_not_read(plan: Plan, cap, names: list[str], extra: set[tuple], clean: set[tuple]) -> set[tuple]:
    """The rec.participant_epoch rows a clean run lacks, less those that are its rows with the status unknown: a cycle
    that reaches the chain only after the node pruned the epoch's end height cannot read the status as of it, and
    today's never stands in. Where some cycle read the epoch's parameters exactly (the end height was served), the
    status was read too."""
    k, status, height = names.index("epoch_index"), names.index("status"), names.index("status_height")
    bare = {r[:status] + (None, None) + r[height + 1:] for r in clean}
    out = set()
    for r in extra:
        if r[status] is not None or r not in bare:
            out.add(r)
        elif int(r[k]) in cap.exact_params:
            _fail(plan, None, f"epoch {r[k]}: its end height was served, yet a participant's status is unknown: {r}")
    return out


def _verified_as_clean(plan: Plan, got: dict[str, set[tuple]], cols: dict[str, list[str]], full: set[str],
                       epoch_of: dict[str, int]) -> set[str]:
    """The captured escrows whose verification must be the clean run's: those of epochs where every participant's
    warm keys were read as of the epoch's end by some cycle (live rows another cycle stored beside them change
    nothing). Where a participant could be read only live (the end height pruned), a host signature by a warm key is
    not checked, so the escrow stops short of the clean run's level, but never fails a check."""
    names = cols["rec.warm_key"]
    k, who, exact = names.index("epoch_index"), names.index("participant"), names.index("read_exact")
    read_exactly = {(r[k], r[who]) for r in got["rec.warm_key"] if r[exact] == "true"}
    live = {int(r[k]) for r in got["rec.warm_key"] if (r[k], r[who]) not in read_exactly}
    v = cols["replay.escrow_verification"]
    for r in got["replay.escrow_verification"]:
        eid = r[v.index("escrow_id")]
        if eid in full and epoch_of[eid] in live and r[v.index("failed_check")] is not None:
            _fail(plan, None, f"escrow {eid}: its epoch's grants were read live, yet its verification failed: {r}")
    return {e for e in full if epoch_of[e] not in live}


def check_final(url: str, plan: Plan, clean: dict[str, set[tuple]], cols: dict[str, list[str]]) -> None:
    scn = plan.scenario
    cap = simulate(plan)
    got = snapshot(url, cols)
    epoch_of = {e.escrow_id: e.epoch_index for e in scn.escrows.values()}
    whole_epochs = {ep.epoch_index for ep in scn.epochs if all(e.escrow_id in cap.full for e in ep.escrows)}
    tx_tables = {t for t in cols if t.startswith("rec.") and t.endswith("_tx")}
    last_epoch = scn.epochs[-1].epoch_index
    for table, names in cols.items():
        if table in RESTITUTION_VIEWS:
            continue  # below
        if table == "rec.quarantine":
            if got[table]:
                _fail(plan, None, f"quarantined rows: {sorted(got[table])[:3]}")
            continue
        if "escrow_id" in names:
            k = names.index("escrow_id")
            if table.startswith("rules."):  # findings may compare an escrow with its epoch's other escrows
                keep = {e for e in cap.full if epoch_of[e] in whole_epochs}
            elif table in tx_tables:
                keep = cap.full | cap.open_only
            elif table == "replay.escrow_verification":
                keep = _verified_as_clean(plan, got, cols, cap.full, epoch_of)
            else:
                keep = cap.full
            want = {r for r in clean[table] if r[k] in keep}
            have = {r for r in got[table] if r[k] in keep}
            if have != want:
                _fail(plan, None, f"{table} differs from the clean run on captured escrows: missing "
                                  f"{sorted(want - have)[:3]}, extra {sorted(have - want)[:3]}")
            stray = {r[k] for r in got[table]} & (cap.lost | cap.before_start)
            if stray:
                _fail(plan, None, f"{table} has rows of escrows never served: {sorted(stray)}")
        elif "epoch_index" in names:  # epochs of the scenario (a plan's clock may pass the clean run's last one)
            k = names.index("epoch_index")
            extra = {r for r in got[table] if int(r[k]) <= last_epoch + WINDOW + 1} - clean[table]
            if table == "rec.epoch_params":
                _check_params(plan, cap, names, got[table], clean[table])
                # live values stand in where no cycle read the epoch's own: checked by _check_params
                extra = {r for r in extra if r[names.index("params_exact")] == "true"}
            if table == "rec.epoch":
                extra = {r for r in extra if not _open_epoch_row(r, names, clean[table], plan)}
            if table == "rec.warm_key":
                extra = _live_grants_standing_in(plan, names, extra, clean[table])
            if table == "rec.participant_epoch":
                extra = _statuses_not_read(plan, cap, names, extra, clean[table])
            if extra:
                near = sorted(r for r in clean[table] if r[k] in {e[k] for e in extra})
                _fail(plan, None, f"{table} has rows a clean run does not: {sorted(extra)[:3]}; the clean run has "
                                  f"{near[:3]}")
        elif not got[table] <= clean[table]:
            _fail(plan, None, f"{table} has rows a clean run does not: {sorted(got[table] - clean[table])[:3]}")
    # the restitution of an epoch whose escrows (and their settlement heights) were all captured and whose
    # parameters were read as of the epoch is a clean run's, row for row
    for table in RESTITUTION_VIEWS:
        k = cols[table].index("epoch_index")
        for e in sorted(whole_epochs & cap.exact_params):
            have = {r for r in got[table] if r[k] == str(e)}
            want = {r for r in clean[table] if r[k] == str(e)}
            if have != want:
                _fail(plan, None, f"{table} of epoch {e} differs from the clean run: missing {sorted(want - have)[:2]}, "
                                  f"extra {sorted(have - want)[:2]}")
    with psycopg.connect(url) as c:
        status = {s: (cur, err, lag) for s, cur, err, lag in c.execute(
            "SELECT source, cursor, last_error, lag_seconds FROM api.ingest_status")}
        states = {e: (st, n, nf, reason) for e, st, n, nf, reason in c.execute(
            "SELECT epoch_index, state, escrows, escrows_final, reason FROM net.epoch_state")}
        failed_sources = {s for (s,) in c.execute("SELECT DISTINCT source FROM net.failure")}
    ran = [c.clock for c in plan.cycles if not chain_down(plan, c)]
    last_clock = max(ran) if ran else -1  # the last cycle that reached the chain
    for esc in scn.escrows.values():
        eid, row = esc.escrow_id, status.get(f"escrow:{esc.escrow_id}")
        if eid in cap.before_start:
            continue  # before the indexer's first cycle: not a gap
        if eid in cap.full:
            if row is None or row[1] is not None or row[2] is not None:
                _fail(plan, None, f"escrow {eid} was captured but ingest_status shows {row}")
            continue
        if esc.epoch_index >= last_clock - WINDOW:
            continue  # still in the window of the last cycle that ran: not lost (yet), nothing to notice
        # not fully captured: the loss is visible
        if row is None or not row[1] or row[2] is None:
            _fail(plan, None, f"escrow {eid} was not fully captured but ingest_status shows {row}")
        if f"escrow:{eid}" not in failed_sources:
            _fail(plan, None, f"escrow {eid} was not fully captured and no net.failure row names it")
    for ep in scn.epochs:
        e = ep.epoch_index
        st = states.get(e)
        if e >= last_clock - WINDOW or all(x.escrow_id in cap.before_start for x in ep.escrows):
            continue
        n_full = sum(x.escrow_id in cap.full for x in ep.escrows)
        if st is None or st[0] != "final" or st[1] != len(ep.escrows) or st[2] != n_full:
            _fail(plan, None, f"epoch {e}: net.epoch_state {st}, expected final with {len(ep.escrows)} escrows, "
                              f"{n_full} final")
        if st[3] == "complete" and n_full != len(ep.escrows):
            _fail(plan, None, f"epoch {e} is 'complete' with escrows missing")
