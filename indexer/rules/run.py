"""Run the rules stage over dirty epochs.

Per claim of dirty epochs, one transaction: parse the vLLM payloads of new or changed 0/0 Finishes (Python, the
only non-SQL step), then the set-based statements of sql/rules/ in file order. Results carry RULE_VERSION; when it
changes, every evaluated epoch is re-marked dirty so an upgrade re-evaluates history.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from functools import cache

import psycopg

from indexer.db.claims import claim_rows
from indexer.db.deadlocks import retrying_deadlocks
from indexer.db.lockorder import lock_every_parent
from indexer.db.marks import WHOLE_EPOCH
from indexer.db.quickstats import Deferred, analyze_deferred
from indexer.db.paths import SQL_DIR
from indexer import refusals

log = logging.getLogger(__name__)

RULE_VERSION = 3  # 2: vLLM spellings of --max-model-len; siblings from applied Finishes only; the hardened sibling
#                   check and error-misses not shown to fit (sql/rules/30, 60); 3: each record judged against the
#                   limit of its Start's model (fn.record_limit); an unknown limit leaves the suspect weight NULL
EPOCHS_PER_CLAIM = 8
# Connections that evaluate claims at once when the caller gives a URL. The rules are SQL: each claim's statements
# run in its connection's server process, so two claims of different epochs use both cores of a small machine,
# where one connection left the other core idle after a load (ten epochs: one after another, 0.7-1.2 s).
RULES_WORKERS = 2

_UNPARSED = """
SELECT f.escrow_id, f.inference_id, md5(f.response_payload), f.response_payload
FROM unnest(%(escrows)s::text[]) AS e(escrow_id)
CROSS JOIN LATERAL (  -- per escrow, so a few escrows never walk every epoch's refusals
  SELECT escrow_id, inference_id, response_payload FROM rec.finish_tx
  WHERE escrow_id = e.escrow_id AND epoch_index = ANY(%(parts)s)
    AND input_tokens = 0 AND output_tokens = 0 AND response_payload IS NOT NULL
  OFFSET 0) f
LEFT JOIN rules.refusal_parse p ON p.escrow_id = f.escrow_id AND p.inference_id = f.inference_id
WHERE p.escrow_id IS NULL OR p.parser_version <> %(parser)s OR p.payload_md5 <> md5(f.response_payload)
"""


# The escrows whose per-escrow findings (payload parses, limits and bounds, refusal verdicts, sibling findings)
# are recomputed: every escrow of a whole epoch, the escrows replayed since their last evaluation (a changed
# payload is a changed Finish, so its escrow is among them; a new parser version marks whole epochs), and escrows
# an amendment moved out of a claimed epoch (their old findings go). The escrow marks of the claimed epochs are taken.
# Each with the claimed epoch it was found under (its evaluation's).
_ESCROWS = """
WITH marked AS (
  DELETE FROM rules.dirty_escrow WHERE epoch_index = ANY(%(epochs)s) RETURNING escrow_id, epoch_index
)
SELECT escrow_id, epoch_index FROM marked
UNION SELECT escrow_id, epoch_index FROM rec.escrow WHERE epoch_index = ANY(%(whole)s)
UNION SELECT el.escrow_id, el.epoch_index FROM rules.escrow_limit el
      WHERE el.epoch_index = ANY(%(epochs)s)
        AND NOT EXISTS (SELECT 1 FROM rec.escrow e WHERE e.escrow_id = el.escrow_id AND e.epoch_index = el.epoch_index)
"""

# The epoch partitions an escrow's evaluation may read or rewrite besides the claimed epoch's: the epoch the escrow
# is in now and the one its previous findings are in (rules.escrow_limit is written with every per-escrow finding,
# so an escrow amended into another epoch has its old findings there). Usually the claimed epoch itself.
_PARTS = """
SELECT escrow_id, epoch_index FROM rec.escrow WHERE escrow_id = ANY(%(escrows)s) AND epoch_index IS NOT NULL
UNION SELECT escrow_id, epoch_index FROM rules.escrow_limit WHERE escrow_id = ANY(%(escrows)s)
"""


@dataclass
class RulesSummary:
    epochs: int = 0
    parsed: int = 0
    disputable: int = 0
    seconds: float = 0.0

    def add(self, part: "RulesSummary") -> None:
        """Count ``part``'s epochs, parsed payloads and disputable rows in this summary (its seconds are its own)."""
        self.epochs, self.parsed, self.disputable = (self.epochs + part.epochs, self.parsed + part.parsed,
                                                     self.disputable + part.disputable)


@cache
def rule_statements() -> tuple[tuple[str, str], ...]:
    """(file name, statement) pairs in execution order; files hold ';'-terminated statements."""
    out = []
    for path in sorted((SQL_DIR / "rules").glob("*.sql")):
        text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
        out += [(path.name, stmt.strip()) for stmt in re.split(r";\s*(?:\n|$)", text) if stmt.strip()]
    return tuple(out)


def mark_stale_versions(conn: psycopg.Connection) -> None:
    """Epochs evaluated by older rules, or holding payloads parsed by an older parser, are evaluated again. Every
    run asks, so the question costs what the stale rows cost, not what the history holds: rules.model_limit has a
    few rows an epoch, and the parses are found by their version's index (two ranges: ``<>`` cannot use it)."""
    conn.execute(f"INSERT INTO rules.dirty_epoch (epoch_index) {STALE_EPOCHS} ON CONFLICT {WHOLE_EPOCH}",
                 {"rules": RULE_VERSION, "parser": refusals.PARSER_VERSION})


STALE_EPOCHS = """
SELECT epoch_index FROM rules.model_limit WHERE rule_version <> %(rules)s
UNION SELECT e.epoch_index FROM rec.escrow e
      WHERE e.escrow_id IN (SELECT escrow_id FROM rules.refusal_parse
                            WHERE parser_version < %(parser)s OR parser_version > %(parser)s)
        AND e.epoch_index IS NOT NULL
"""


def mark_epochs(conn: psycopg.Connection, lo: int, hi: int) -> None:
    """An explicit request re-evaluates every escrow of the epochs, changed or not."""
    conn.execute(f"""INSERT INTO rules.dirty_epoch (epoch_index)
                     SELECT epoch_index FROM rec.escrow WHERE epoch_index BETWEEN %(lo)s AND %(hi)s
                     UNION SELECT epoch_index FROM rec.model_snapshot WHERE epoch_index BETWEEN %(lo)s AND %(hi)s
                     ON CONFLICT {WHOLE_EPOCH}""", {"lo": lo, "hi": hi})


def run_rules(conn: psycopg.Connection, epochs: tuple[int, int] | None = None, *,
              deferred_analyze: Deferred | None = None, url: str | None = None,
              workers: int = 1) -> RulesSummary:
    """Evaluate the dirty epochs (after marking the range `epochs`, when given, as dirty), after analysing the
    tables an earlier stage had to skip (``deferred_analyze``, indexer.db.quickstats), counted in these seconds.
    With ``url`` and more than one dirty epoch, up to ``workers`` connections claim and evaluate epochs at once
    (this one and threads with connections of their own), each claim a share of the dirty epochs: the claims are
    SKIP LOCKED marks, as between concurrent commands, so no epoch is evaluated twice."""
    summary, start = RulesSummary(), time.perf_counter()
    analyze_deferred(conn, deferred_analyze)
    with conn.transaction():
        mark_stale_versions(conn)
        if epochs is not None:
            mark_epochs(conn, *epochs)
    dirty = 0
    if url and workers > 1 and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        # (inside a caller's transaction, the marks it made are not for other connections to see: one connection)
        with conn.transaction():
            dirty = conn.execute("SELECT count(*) FROM rules.dirty_epoch").fetchone()[0]
    if dirty > 1:
        helpers = min(workers, dirty) - 1
        _claim_in_parallel(conn, url, helpers, min(EPOCHS_PER_CLAIM, -(-dirty // (helpers + 1))), summary)
    else:
        _claim_loop(conn, EPOCHS_PER_CLAIM, summary)
    summary.seconds = time.perf_counter() - start
    return summary


def _claim_loop(conn: psycopg.Connection, per_claim: int, summary: RulesSummary,
                stop: threading.Event | None = None) -> None:
    """Claim up to ``per_claim`` dirty epochs and evaluate them, one transaction a claim, until none is left or
    ``stop`` is set (checked between claims). A claim that the server cancels as a deadlock victim (two claims each
    marking the other's epoch, after an escrow moved between them) is rolled back whole, its marks with it, and
    claimed again."""
    lock = lock_every_parent(conn, "rules")
    while (stop is None or not stop.is_set()) and retrying_deadlocks(
            conn, lambda: _claim_once(conn, per_claim, summary, lock), "rules claim"):
        pass


def _claim_once(conn: psycopg.Connection, per_claim: int, summary: RulesSummary, lock: str) -> bool:
    """One claim in one transaction, which first locks the epoch-partitioned parents (``lock``: every one, as the
    statements read the rec and replay parents and write the rules ones, some of them through views), in the order
    a loader making an epoch's partitions locks them (indexer.db.lockorder)."""
    part = RulesSummary()
    with conn.transaction():
        conn.execute(lock)
        claimed = claim_rows(conn, "rules.dirty_epoch", "epoch_index", per_claim, "epoch_index, whole")
        if not claimed:
            return False
        _evaluate(conn, sorted(e for e, _ in claimed), [e for e, whole in claimed if whole], part)
    summary.add(part)
    return True


def _claim_in_parallel(conn: psycopg.Connection, url: str, helpers: int, per_claim: int,
                       summary: RulesSummary, stop: threading.Event | None = None) -> None:
    """_claim_loop on ``conn`` and on ``helpers`` threads with connections of their own; the first error of any
    of them is raised once all have stopped (what each committed stays). When this thread stops (an error, an
    interrupt), the helpers stop after the claim they hold: the stage is ending, and a helper that went on would
    claim every epoch left while the caller waits. A helper that cannot connect (the server's max_connections
    reached, say) is logged and left out: the stage carries on with the connections it has."""
    parts = [RulesSummary() for _ in range(helpers)]
    errors: list[BaseException] = []
    stop = stop or threading.Event()

    def helper(part: RulesSummary) -> None:
        try:
            own = psycopg.connect(url)
        except psycopg.Error as exc:
            log.warning("rules: a helper connection could not be opened, the claims go on without it: %s",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return
        try:
            with own:
                _claim_loop(own, per_claim, part, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=helper, args=(part,), name="rules-claims", daemon=True) for part in parts]
    for thread in threads:
        thread.start()
    try:
        _claim_loop(conn, per_claim, summary, stop)
    except BaseException:
        stop.set()  # (on a normal end the helpers go on: a claim of theirs may have marked epochs only they see)
        raise
    finally:
        for thread in threads:
            thread.join()
    for part in parts:
        summary.add(part)
    if errors:
        raise errors[0]


# Per claim (SET LOCAL). The rules probe rec/replay rows that stay cached, so an index probe costs little more than a
# sequential page: with the default cost one epoch would scan whole tables (e.g. every epoch's votes) to save probes.
# Statements are prepared once per connection (no re-parse per claim) but planned for each claim's epochs: a
# generic plan for "some epochs" suits neither one epoch nor eight.
_SETTINGS = "SET LOCAL random_page_cost = 1.1; SET LOCAL plan_cache_mode = force_custom_plan"


def _evaluate(conn: psycopg.Connection, epochs: list[int], whole: list[int], summary: RulesSummary) -> None:
    """The claimed epochs one at a time, each statement planned for one epoch (docs/partitioning.md): the epoch
    partitions it may touch are constants (%(parts)s), so the planner keeps one partition of each table and costs
    the plan for that partition's rows, not for every claimed epoch's (runtime pruning would still read one
    partition, but the planner would cost all of them and choose scans over probes)."""
    conn.execute(_SETTINGS)
    found_under = [tuple(r) for r in conn.execute(_ESCROWS, {"epochs": epochs, "whole": whole}, prepare=True)]
    escrows = sorted({escrow_id for escrow_id, _ in found_under})
    parts: dict[str, set[int]] = {}
    for escrow_id, epoch in conn.execute(_PARTS, {"escrows": escrows}, prepare=True):
        parts.setdefault(escrow_id, set()).add(epoch)
    # the payloads once per claim (Python parses them; no plan depends on the epoch)
    parsed = parse_payloads(conn, escrows, sorted(set(epochs).union(*parts.values())))
    for epoch in epochs:
        mine = sorted(escrow_id for escrow_id, under in found_under if under == epoch)
        touched = sorted({epoch}.union(*(parts.get(e, ()) for e in mine)))
        if len(touched) > 1:  # an escrow moved between epochs: both epochs' epoch-wide findings are rebuilt
            conn.execute(f"INSERT INTO rules.dirty_epoch (epoch_index) SELECT unnest(%s::bigint[]) "
                         f"ON CONFLICT {WHOLE_EPOCH}", ([e for e in touched if e != epoch],))
        _evaluate_epoch(conn, epoch, mine, touched, scoped=epoch not in whole and len(touched) == 1)
    summary.parsed += parsed
    found = conn.execute("SELECT count(*) FROM rules.disputable WHERE epoch_index = ANY(%s)", (epochs,)).fetchone()[0]
    # clock_timestamp: now() is the transaction's start, which started_at already holds
    conn.execute("INSERT INTO rules.run (epochs, rule_version, parsed_payloads, disputable, finished_at) "
                 "VALUES (%s, %s, %s, %s, clock_timestamp())", (epochs, RULE_VERSION, parsed, found))
    summary.epochs += len(epochs)
    summary.disputable += found


def _evaluate_epoch(conn: psycopg.Connection, epoch: int, escrows: list[str], parts: list[int], *,
                    scoped: bool) -> None:
    """Per-escrow findings for the epoch's escrows that changed (all of them when whole), then the epoch-wide ones,
    every statement reading and writing only the partitions `parts`.

    ``scoped``: the epoch-wide tables (suspects, challenges, disputable penalties) hold one escrow's evidence a row,
    so only the changed escrows' rows are rewritten, at a cost that follows the change, not the epoch. One input
    is the epoch's: a challenge's counterfactual reads the epoch's set of suspects (model, participant), so when the
    changed escrows' suspects change that set, every challenge and disputable penalty of the epoch is rebuilt.
    Not scoped: an epoch-level input changed (``whole``), or an escrow moved between epochs."""
    params = {"epochs": [epoch], "escrows": escrows, "parts": parts, "version": RULE_VERSION, "scoped": scoped}
    suspects = _suspect_set(conn, epoch) if scoped else None
    for name, statement in rule_statements():
        if suspects is not None and name > _SUSPECTS_FILE:  # the first statement after 40_suspects.sql
            params["scoped"] = _suspect_set(conn, epoch) == suspects
            suspects = None
        try:
            conn.execute(statement, params, prepare=True)
        except psycopg.errors.DeadlockDetected as exc:  # as it is: the claim's retry (_claim_loop) looks for it
            exc.add_note(f"in sql/rules/{name}")
            raise
        except psycopg.Error as exc:
            raise RuntimeError(f"rules statement in sql/rules/{name} failed: {exc}") from exc


_SUSPECTS_FILE = "40_suspects.sql"  # the statements after it read the epoch's set of suspects


def _suspect_set(conn: psycopg.Connection, epoch: int) -> set[tuple]:
    """The epoch's suspects as rules.challenge reads them: (model, participant) pairs."""
    return set(conn.execute("SELECT DISTINCT model_id, participant FROM rules.suspect WHERE epoch_index = %s",
                            (epoch,), prepare=True).fetchall())


def parse_payloads(conn: psycopg.Connection, escrows: list[str], parts: list[int]) -> int:
    """Parse the escrows' 0/0 Finish payloads that have no current parse (their Finishes are in the epoch
    partitions `parts`); returns how many were parsed."""
    # a plain query, not a server-side cursor: usually nothing is stale, and a cursor's fast-start plan is slower
    rows = [refusals.parse_row(escrow_id, inference_id, payload, md5) for escrow_id, inference_id, md5, payload
            in conn.execute(_UNPARSED, {"escrows": escrows, "parser": refusals.PARSER_VERSION, "parts": parts},
                            prepare=True)]
    refusals.store(conn, rows)
    return len(rows)
