"""api.disputable_penalties (invalidated context refusals, timeouts on requests shown over the limit),
api.host_epoch_penalties and api.inferences.is_client_fault. Governance 400000; executor slots 4/5 are host B."""
from __future__ import annotations

from tests.support.rules_kit import (A, B, C, GOV, TOOL_CHOICE, Log, by_id, fam3, fam6_at_least, gov_snapshot, load,
                                     new_hash, rows, stored)


def test_invalidated_refusals_are_disputable_unless_they_fit(db_url, tmp_path, conn):
    log = Log()
    c = {}
    for name, payload in {
        "over_limit": stored(fam6_at_least(GOV, 4096)),
        "undetermined_no_payload": None,
        "undetermined_lower_local_limit": stored(fam6_at_least(300_000, 4096)),
        "fits": stored(fam3(100_000, GOV - 4096)),
        "tool_choice": stored(TOOL_CHOICE),
        "engine_500": stored("Internal Server Error", code=500),
    }.items():
        c[name] = log.refusal(4 + len(c) % 2, payload=payload)
        log.invalidate(c[name])
    # an over_limit refusal that was challenged but not invalidated carries no invalid penalty
    c["challenged"] = log.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))
    log.validation(c["challenged"], 9, False)
    c["validated"] = log.refusal(4, payload=stored(fam6_at_least(GOV, 4096)))
    log.validation(c["validated"], 9, False)
    log.vote(c["validated"], 0, True)
    log.vote(c["validated"], 11, True)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    statuses = by_id(conn, "api.inferences", "status, penalty")
    assert [statuses[c[k]] for k in ("over_limit", "fits", "challenged", "validated")] == \
        [("Invalidated", "invalid"), ("Invalidated", "invalid"), ("Challenged", None), ("Validated", None)]
    got = by_id(conn, "api.disputable_penalties",
                "epoch_index, escrow_id, participant, executor_slot, penalty, rule, verdict, "
                "evidence->>'refusal_kind', evidence->>'prompt_tokens_source'")
    name = {v: k for k, v in c.items()}
    assert {name[i]: v for i, v in got.items()} == {
        "over_limit": (408, "1971", B, c["over_limit"] % 16, "invalid", "invalidated_context_refusal", "over_limit",
                       "context_length", "error_text"),
        "undetermined_no_payload": (408, "1971", B, c["undetermined_no_payload"] % 16, "invalid",
                                    "invalidated_context_refusal", "undetermined", "unknown", "input_length"),
        "undetermined_lower_local_limit": (408, "1971", B, c["undetermined_lower_local_limit"] % 16, "invalid",
                                           "invalidated_context_refusal", "undetermined", "context_length",
                                           "error_text"),
    }
    ev = rows(conn, "SELECT evidence FROM api.disputable_penalties WHERE inference_id = %s", c["over_limit"])[0][0]
    assert ev["governance_limit"] == GOV and ev["max_tokens"] == 4096 and ev["prompt_tokens"] == 395905
    assert ev["prompt_is_lower_bound"] is True
    assert ev["challenge"]["votes_invalid"] == 9 and ev["challenge"]["vote_threshold"] == 8
    assert rows(conn, "SELECT detected_at IS NOT NULL FROM api.disputable_penalties") == [(True,)] * 3


def test_timeouts_on_requests_shown_over_the_limit(db_url, tmp_path, conn):
    log = Log()
    c = {}

    def request(name, reason, sibling_input=None, max_tokens=4096, voters=(0, 11)):
        h = new_hash()
        if sibling_input is not None:  # C served the same prompt and signed its input_tokens
            log.served(6, h, input_tokens=sibling_input, output_tokens=10)
        iid = log.start(5, h, input_length=1000, max_tokens=max_tokens)
        if reason == "execution":
            log.confirm(iid)
        log.timeout(iid, reason, voters)
        c[name] = iid

    request("refused_over", "refused", sibling_input=GOV - 4095)
    request("execution_over", "execution", sibling_input=GOV - 4095)
    request("execution_fits", "execution", sibling_input=GOV - 4096)
    request("refused_fits", "refused", sibling_input=1000)
    request("refused_no_sibling", "refused")
    request("execution_max_tokens_over", "execution", max_tokens=GOV + 1)
    request("execution_max_tokens_eq", "execution", max_tokens=GOV)
    request("sibling_alone_at_limit", "refused", sibling_input=GOV, max_tokens=0)
    request("not_applied", "refused", sibling_input=GOV - 4095, voters=(11,))  # 5 <= 8
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    statuses = by_id(conn, "api.inferences", "status")
    assert statuses[c["refused_over"]] == statuses[c["execution_fits"]] == "TimedOut"
    assert statuses[c["not_applied"]] == "Pending"
    got = by_id(conn, "api.disputable_penalties", "participant, penalty, rule, verdict, evidence->>'timeout_reason', "
                                                  "evidence->>'shown_by'")
    name = {v: k for k, v in c.items()}
    assert {name[i]: v for i, v in got.items()} == {
        "refused_over": (B, "missed", "timeout_over_limit", "over_limit", "refused", "sibling"),
        "execution_over": (B, "missed", "timeout_over_limit", "over_limit", "execution", "sibling"),
        "execution_max_tokens_over": (B, "missed", "timeout_over_limit", "over_limit", "execution", "max_tokens"),
        "sibling_alone_at_limit": (B, "missed", "timeout_over_limit", "over_limit", "refused", "sibling"),
    }


def test_host_epoch_penalties_recorded_against_disputable(db_url, tmp_path, conn):
    log = Log()
    over = log.refusal(5, payload=stored(fam6_at_least(GOV, 4096)))   # B: invalid, disputable
    log.invalidate(over)
    fits = log.refusal(4, payload=stored(fam3(100_000, 1000)))         # B: invalid, deserved
    log.invalidate(fits)
    h = new_hash()
    log.served(6, h, input_tokens=GOV - 100, output_tokens=10)
    t_over = log.start(4, h)                                           # B: missed, disputable
    log.timeout(t_over, "refused")
    t_plain = log.start(5)                                             # B: missed, deserved
    log.timeout(t_plain, "refused")
    a_miss = log.start(1)                                              # A: missed, deserved
    log.confirm(a_miss)
    log.timeout(a_miss, "execution", voters=(4, 6, 11))
    stats = {"kind": "host_epoch_stats", "epoch_index": 408, "participant": B, "missed": 2, "invalid": 2,
             "cost": "912345670", "required_validations": 40, "completed_validations": 38, "escrow_count": 1}
    load(db_url, tmp_path, [gov_snapshot()] + log.records + [stats])
    got = {r[0]: r[1:] for r in rows(conn, "SELECT participant, missed, invalid, disputable_missed, disputable_invalid "
                                           "FROM api.host_epoch_penalties WHERE epoch_index = 408")}
    assert got[B] == (2, 2, 1, 1)
    assert got[A] == (1, 0, 0, 0)
    assert got[C] == (0, 0, 0, 0)
    assert rows(conn, "SELECT reported_missed, reported_invalid FROM api.host_epoch_penalties "
                      "WHERE participant = %s", B) == [(2, 2)]


def test_is_client_fault_in_api_inferences(db_url, tmp_path, conn):
    log = Log()
    c = {
        "context_refusal": log.refusal(5, payload=stored(fam6_at_least(GOV, 4096))),
        "tool_choice": log.refusal(5, payload=stored(TOOL_CHOICE)),
        "zero_zero_no_payload": log.refusal(5),
        "engine_500": log.refusal(5, payload=stored("Internal Server Error", code=500)),
        "served": log.served(5),
        "pending": log.start(5),
    }
    billed = log.start(5)
    log.confirm(billed)
    log.finish(billed, 0, 4096, stored(fam6_at_least(GOV, 4096)))
    c["billed"] = billed
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.inferences", "is_client_fault")
    assert {k: got[i] for k, i in c.items()} == {
        "context_refusal": True, "tool_choice": True, "zero_zero_no_payload": None, "engine_500": False,
        "served": False, "pending": False, "billed": False}
