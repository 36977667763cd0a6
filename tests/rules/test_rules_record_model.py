"""The limit a record is judged against is limit(rec.model) (gonka-devshard.md §2.4): the model its Start signed, which
the replay does not hold to the escrow's model (indexer.replay.machine checks no model), so a Start of another model
is an applied record. A model the epoch's snapshot has no limit for leaves the limit unknown, and an unknown limit
leaves the suspects' weight in a challenge unknown (api.challenges), never 0."""
from __future__ import annotations

from tests.support.rules_kit import EPOCH, GOV, MINIMAX, MODEL, Log, by_id, gov_snapshot, load, rows

MINIMAX_GOV = 200_000
UNLISTED = "unlisted/model-without-snapshot"


def start_of(log: Log, model: str, slot: int, **kw) -> int:
    """A Start in `log`'s escrow that signs `model` (the escrow stays of log.model)."""
    own, log.model = log.model, model
    try:
        return log.start(slot, **kw)
    finally:
        log.model = own


def test_each_record_is_judged_against_its_own_models_limit(db_url, tmp_path, conn):
    log = Log()   # an escrow of MODEL (400000); MINIMAX's governance limit is 200000
    prompt = "ab" * 32
    log.served(6, prompt=prompt, input_tokens=250_000, output_tokens=10)   # a sibling that signs 250000 prompt tokens
    foreign = start_of(log, MINIMAX, 4, prompt=prompt, max_tokens=4096)    # 250000 + 4096 > 200000
    log.confirm(foreign)
    log.finish(foreign, 0, 0)
    own = log.refusal(5, prompt=prompt, max_tokens=4096)                    # 254096 <= 400000: fits
    unlisted = start_of(log, UNLISTED, 1, prompt=prompt, max_tokens=4096)
    log.confirm(unlisted)
    log.finish(unlisted, 0, 0)
    big = start_of(log, MINIMAX, 9, max_tokens=4096)                        # D serves 250100 > 200000 for MINIMAX
    log.confirm(big)
    log.finish(big, 250_000, 100)
    challenged = {}
    for model in (MINIMAX, MODEL):   # A challenges, D and C vote invalid: D is a suspect for MINIMAX only
        challenged[model] = start_of(log, model, 12)
        log.confirm(challenged[model])
        log.finish(challenged[model], 1000, 100)
        log.invalidate(challenged[model], challenger=0, voters=(9, 6))
    refused = start_of(log, MINIMAX, 11, max_tokens=250_000)              # max_tokens alone over MINIMAX's limit
    log.timeout(refused, "refused")
    load(db_url, tmp_path, [gov_snapshot(), gov_snapshot(MINIMAX_GOV, model=MINIMAX)] + log.records)

    assert by_id(conn, "api.context_refusals", "model_id, governance_limit, limit_source, verdict") == {
        foreign: (MINIMAX, MINIMAX_GOV, "model_args", "over_limit"),
        own: (MODEL, GOV, "model_args", "fits"),
        unlisted: (UNLISTED, None, None, "undetermined"),   # no limit in the snapshot: unknown, never 'fits'
    }
    assert rows(conn, "SELECT participant, model_id, observed_tokens, governance_limit, inference_id "
                      "FROM api.raised_limit_suspects") == [("gonka1hostD", MINIMAX, 250_100, MINIMAX_GOV, big)]
    assert by_id(conn, "api.challenges", "outcome, suspect_invalid_weight, outcome_without_suspects") == {
        challenged[MINIMAX]: ("Invalidated", 2, "Challenged"),
        challenged[MODEL]: ("Invalidated", 0, "Invalidated"),
    }
    assert rows(conn, "SELECT inference_id, rule, evidence->>'governance_limit' FROM api.disputable_penalties "
                      "WHERE rule = 'timeout_over_limit'") == [(refused, "timeout_over_limit", str(MINIMAX_GOV))]


def test_an_unknown_limit_leaves_the_suspect_weight_unknown(db_url, tmp_path, conn):
    cols = "outcome, suspect_invalid_weight, suspect_voters, outcome_without_suspects"
    known = Log("known")              # MODEL has a limit in epoch 408
    k = known.served(12)
    known.invalidate(k)
    unlisted = start_of(known, UNLISTED, 10)   # a record of a model the snapshot has no limit for
    known.confirm(unlisted)
    known.finish(unlisted, 1000, 100)
    known.invalidate(unlisted)
    bare = Log("bare", epoch=409)     # no snapshot for epoch 409: the escrow's model has no known limit
    b = bare.served(12)
    bare.invalidate(b)
    load(db_url, tmp_path, [gov_snapshot()] + known.records + bare.records)

    got = {(r[0], r[1]): r[2:] for r in rows(conn, f"SELECT escrow_id, inference_id, {cols} FROM api.challenges")}
    assert got == {
        ("known", k): ("Invalidated", 0, None, "Invalidated"),
        ("known", unlisted): ("Invalidated", None, None, None),
        ("bare", b): ("Invalidated", None, None, None),
    }


def test_an_evidence_bundle_names_the_limit_of_the_records_own_model(db_url, tmp_path, conn):
    from indexer.rules.evidence import findings

    log = Log("frozen", max_model_len=GOV)   # the escrow froze MODEL's limit: its own records name max_model_len
    own = log.start(3, max_tokens=GOV + 1)
    log.timeout(own, "refused")
    foreign = start_of(log, MINIMAX, 11, max_tokens=MINIMAX_GOV + 1)   # MINIMAX's limit is its snapshot's args
    log.timeout(foreign, "refused")
    load(db_url, tmp_path, [gov_snapshot(), gov_snapshot(MINIMAX_GOV, model=MINIMAX)] + log.records)

    assert rows(conn, "SELECT inference_id, evidence->>'governance_limit' FROM api.disputable_penalties "
                      "ORDER BY inference_id") == [(own, str(GOV)), (foreign, str(MINIMAX_GOV))]
    sources = {row[4]: row[5] for row in findings(conn, "frozen", None, EPOCH)}
    assert sources[own]["parameter"] == "max_model_len"
    assert sources[foreign]["parameter"] == "model_args --max-model-len"
