"""api.raised_limit_suspects (behavioural evidence of a local limit above governance, gonka-devshard.md §2.2, §3.9)
and api.challenges (the tally with the suspects' invalid weight removed, §3.3). Reference slots unless noted:
A = 0-3 (4), B = 4-5 (2), C = 6-8 (3), D = 9-10 (2), E = 11-15 (5); threshold 8."""
from __future__ import annotations

from tests.support.rules_kit import (A, C, D, GOV, Log, by_id, fam3, fam4, fam6_at_least, gov_snapshot, load, rows,
                                     stored)

CH_COLS = "vote_threshold, votes_valid, votes_invalid, outcome, suspect_invalid_weight, outcome_without_suspects"


def test_suspect_evidence_kinds_and_their_boundaries(db_url, tmp_path, conn):
    log = Log()
    log.served(6, input_tokens=399000, output_tokens=1000)                 # C: 400000 == limit, not suspect
    above = log.served(9, input_tokens=399000, output_tokens=1001)         # D: 400001 > limit
    stated_above = log.refusal(0, payload=stored(fam4(600000, 597000, 4096)))   # A states 600000
    log.refusal(11, payload=stored(fam3(400000, 401234)))                       # E states the governance limit
    over = log.refusal(4, payload=stored(fam6_at_least(GOV, 4096)))             # over_limit refusal by B
    log.validation(over, 6, False)   # C challenges it
    log.vote(over, 12, True)         # E votes valid
    log.vote(over, 10, False)        # D votes invalid
    fits = log.refusal(5, payload=stored(fam3(100_000, 1000)))                  # fits: invalid votes are no evidence
    log.validation(fits, 1, False)
    log.vote(fits, 11, False)
    unknown = log.refusal(4)                                                     # undetermined: no evidence either
    log.validation(unknown, 13, False)
    log.vote(unknown, 2, False)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = set(rows(conn, "SELECT participant, evidence_kind, observed_tokens, governance_limit, inference_id, "
                         "epoch_index, model_id FROM api.raised_limit_suspects"))
    m = "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert got == {(D, "served_above_limit", 400001, GOV, above, 408, m),
                   (A, "stated_limit_above", 600000, GOV, stated_above, 408, m),
                   (C, "voted_invalid_on_over_limit", 395905, GOV, over, 408, m),
                   (D, "voted_invalid_on_over_limit", 395905, GOV, over, 408, m)}


def test_tallies_at_and_over_the_threshold(db_url, tmp_path, conn):
    log = Log()
    inv8 = log.served(9)   # executor D
    log.validation(inv8, 6, False)   # C 3
    log.vote(inv8, 11, False)        # E 5 -> 8: not > 8
    inv9 = log.served(9)
    log.validation(inv9, 6, False)   # C 3
    log.vote(inv9, 0, False)         # A 4 -> 7
    log.vote(inv9, 4, False)         # B 2 -> 9
    val8 = log.served(10)
    log.validation(val8, 4, False)   # B 2 invalid
    log.vote(val8, 11, True)         # E 5
    log.vote(val8, 6, True)          # C 3 -> 8 valid
    val9 = log.served(10)
    log.validation(val9, 4, False)
    log.vote(val9, 0, True)          # A 4
    log.vote(val9, 11, True)         # E 5 -> 9 valid
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert by_id(conn, "api.challenges", CH_COLS) == {
        inv8: (8, 0, 8, "Challenged", 0, "Challenged"),
        inv9: (8, 0, 9, "Invalidated", 0, "Invalidated"),
        val8: (8, 8, 2, "Challenged", 0, "Challenged"),
        val9: (8, 9, 2, "Validated", 0, "Validated"),
    }
    # only challenged inferences are rows
    assert conn.execute("SELECT count(*) FROM api.challenges").fetchone()[0] == 4


def test_outcome_without_suspects(db_url, tmp_path, conn):
    # epoch 408, F8 with a refusal of unknown prompt (no payload), so the invalid votes on it are no evidence:
    # C is a suspect (served above the limit elsewhere), A is (stated 600000); D, the challenger, is not.
    f8 = Log("f8", epoch=408)
    f8.served(6, input_tokens=399000, output_tokens=2000)
    f8.refusal(1, payload=stored(fam4(600000, 597000, 4096)))
    r8 = f8.refusal(5)
    f8.validation(r8, 9, False)   # D 2
    f8.vote(r8, 11, True)         # E 5
    f8.vote(r8, 0, False)         # A 4 (suspect)
    f8.vote(r8, 6, False)         # C 3 (suspect) -> 9: Invalidated
    # epoch 409, the reference F8: the refusal is over_limit, so D (challenger), A and C all voted invalid on it
    ref = Log("ref", epoch=409)
    r9 = ref.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))
    ref.validation(r9, 9, False)
    ref.vote(r9, 11, True)
    ref.vote(r9, 0, False)
    ref.vote(r9, 6, False)
    # epoch 410, factor 30 (threshold 4): P (1 slot) challenges, suspect S (4) tips it; Q's (5) valid vote came
    # after the resolution and was ignored, but without S it would have validated the record.
    slots = ["gonka1P"] + ["gonka1S"] * 4 + ["gonka1Q"] * 5 + ["gonka1R"] * 6
    f30 = Log("f30", epoch=410, slots=slots, factor=30)
    f30.served(1, input_tokens=399000, output_tokens=2000)   # S serves 401000 > 400000
    v = f30.served(10)
    f30.validation(v, 0, False)   # P 1
    f30.vote(v, 1, False)         # S 4 -> 5 > 4: Invalidated
    f30.vote(v, 5, True)          # Q 5: ignored (resolved)
    w = f30.served(11)
    f30.validation(w, 0, False)   # P 1
    f30.vote(w, 5, False)         # Q 5 -> 6 > 4 without any suspect
    f30.vote(w, 1, False)         # S: ignored
    records = [gov_snapshot(epoch=e) for e in (408, 409, 410)] + f8.records + ref.records + f30.records
    load(db_url, tmp_path, records)

    got = {(r[0], r[1]): r[2:] for r in rows(conn, f"SELECT escrow_id, inference_id, {CH_COLS}, suspect_voters "
                                                   "FROM api.challenges")}
    assert got == {
        ("f8", r8): (8, 5, 9, "Invalidated", 7, "Challenged", sorted([A, C])),
        ("ref", r9): (8, 5, 9, "Invalidated", 9, "Finished", sorted([A, C, D])),
        ("f30", v): (4, 0, 5, "Invalidated", 4, "Validated", ["gonka1S"]),
        ("f30", w): (4, 0, 6, "Invalidated", 0, "Invalidated", None),
    }
    # the counterfactual travels with the disputable invalidation
    ev = dict(rows(conn, "SELECT escrow_id, evidence->'challenge' FROM api.disputable_penalties "
                         "WHERE rule = 'invalidated_context_refusal'"))
    assert ev["f8"]["outcome_without_suspects"] == "Challenged" and ev["f8"]["suspect_invalid_weight"] == 7
    assert ev["ref"]["outcome_without_suspects"] == "Finished" and ev["ref"]["suspect_invalid_weight"] == 9
    assert set(ev) == {"f8", "ref"}
