"""api.sibling_findings: one row per error-miss, judged by the sibling rule of gonka-devshard.md §2.4 / §3.5 pt 6
(current: a different inference with the same non-empty prompt hash, output_tokens > 0, status Finished or Validated
at the error-miss's nonce; hardened: also sibling.input_tokens + max_tokens <= governance limit). An applied
error-miss that the current or the hardened rule would reject is an api.disputable_penalties 'missed' row."""
from __future__ import annotations

import pytest

from indexer.reports.restitution.verdicts import sentence
from tests.support.helpers import tx
from tests.support.rules_kit import (B, GOV, Log, by_id, escrow, fam3, fam6_at_least, gov_snapshot, load, new_hash,
                                     rows, snapshot, stored)

CF = stored(fam6_at_least(GOV, 4096))  # an unbilled pure client fault (a context refusal) for the error-missed Finish


def test_sibling_status_hash_output_and_hardened_boundary(db_url, tmp_path, conn):
    log = Log()
    c = {}

    def case(name, sibling, payload=CF, after_em=None, refusal=None):
        """`sibling(h)` writes the sibling's txs before the error-miss; `after_em(sid)` after it."""
        h = new_hash()
        rid = refusal(h) if refusal else log.refusal(5, h, payload=payload)
        sid = sibling(h)
        log.error_miss(rid)
        if after_em:
            after_em(sid)
        c[name] = (rid, sid)

    def served(h, input_tokens=1000, output_tokens=50):
        return log.served(6, h, input_tokens=input_tokens, output_tokens=output_tokens)

    def validated(h):
        sid = served(h)
        log.validation(sid, 9, False)
        log.vote(sid, 0, True)
        log.vote(sid, 11, True)
        return sid

    def challenged(h):
        sid = served(h)
        log.validation(sid, 9, False)
        return sid

    def invalidated(h):
        sid = served(h)
        log.invalidate(sid)
        return sid

    def started_finish_rejected(h):  # the Finish names the wrong executor slot, so the record stays Started
        sid = log.start(6, h)
        log.confirm(sid)
        log.finish(sid, 1000, 50, slot=7)
        return sid

    def pending_finish_rejected(h):  # no receipt: a Pending record cannot take a Finish
        sid = log.start(6, h)
        log.finish(sid, 1000, 50)
        return sid

    def timed_out(h):
        sid = served(h)
        log.error_miss(sid)
        return sid

    def confirmed_only(h):
        sid = log.start(6, h)
        log.confirm(sid)
        return sid

    case("finished", served)
    case("validated", validated)
    case("challenged", challenged)
    case("challenged_validated_after_em", challenged, after_em=lambda s: (log.vote(s, 0, True), log.vote(s, 11, True)))
    case("invalidated", invalidated)
    case("invalidated_after_em", served, after_em=log.invalidate)
    case("started", started_finish_rejected)
    case("pending", pending_finish_rejected)
    case("timed_out", timed_out)
    case("finished_after_em", confirmed_only, after_em=lambda s: log.finish(s, 1000, 50))
    case("other_prompt", lambda h: served(new_hash()))
    case("zero_output", lambda h: served(h, output_tokens=0))
    case("same_executor_slot", lambda h: log.served(5, h, input_tokens=1000, output_tokens=50))
    case("hardened_eq_limit", lambda h: served(h, input_tokens=GOV - 4096))
    case("hardened_limit_plus_1", lambda h: served(h, input_tokens=GOV - 4095))
    case("no_payload", lambda h: served(new_hash()), payload=None)
    case("no_payload_sibling_plus_1", lambda h: served(h, input_tokens=GOV - 4095), payload=None)
    # billed client fault (output > 0): a miss under both rules, no sibling needed
    case("billed", lambda h: served(new_hash()),
         refusal=lambda h: (lambda i: (log.confirm(i), log.finish(i, 0, 4096, CF), i)[-1])(log.start(5, h)))
    # a 500 body is not a client fault: a plain miss
    case("engine_fault", lambda h: served(new_hash()), payload=stored("boom", code=500))
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    got = by_id(conn, "api.sibling_findings", "sibling_inference_id, accepted_current_rule, accepted_hardened_rule")
    want = {
        "finished": (True, True), "validated": (True, True), "challenged": (False, False),
        "challenged_validated_after_em": (False, False), "invalidated": (False, False),
        "invalidated_after_em": (True, True), "started": (False, False), "pending": (False, False),
        "timed_out": (False, False), "finished_after_em": (False, False), "other_prompt": (False, False),
        "zero_output": (False, False), "same_executor_slot": (True, True), "hardened_eq_limit": (True, True),
        "hardened_limit_plus_1": (True, False), "billed": (True, True), "engine_fault": (True, True),
        # a 0/0 Finish without payload: whether it is a client fault is unknown (fn.is_client_fault_finish is NULL),
        # so an acceptance that hangs on it is unknown too; a qualifying sibling settles today's rule either way
        "no_payload": (None, None), "no_payload_sibling_plus_1": (True, None),
    }
    assert {k: got[rid][1:] for k, (rid, _) in c.items()} == want
    # the named sibling is the qualifying one, or none
    sibling_expected = {k for k, v in want.items() if v[0]} - {"billed", "engine_fault"}
    assert {k for k, (rid, sid) in c.items() if got[rid][0] == sid} == sibling_expected
    assert all(got[c[k][0]][0] is None for k in want if k not in sibling_expected | {"billed", "engine_fault"})

    basis = by_id(conn, "api.sibling_findings", "applied, billed, client_fault_basis, governance_limit, max_tokens",
                  "inference_id IN (%s)" % ", ".join(str(c[k][0]) for k in ("finished", "no_payload", "billed",
                                                                             "engine_fault")))
    assert basis == {c["finished"][0]: (True, False, "payload", GOV, 4096),
                     c["no_payload"][0]: (True, False, "zero_zero_presumed", GOV, 4096),
                     c["billed"][0]: (True, True, None, GOV, 4096),
                     c["engine_fault"][0]: (True, False, None, GOV, 4096)}

    # every applied error-miss that the current or the hardened rule rejects is a disputable miss of host B
    disputable = by_id(conn, "api.disputable_penalties", "participant, executor_slot, penalty, rule",
                       "rule = 'error_miss_sibling'")
    assert {k for k, (rid, _) in c.items() if rid in disputable} == {k for k, v in want.items() if v != (True, True)}
    assert set(disputable.values()) == {(B, 5, "missed", "error_miss_sibling")}


def test_rejected_error_miss_is_reported_but_not_disputable(db_url, tmp_path, conn):
    log = Log()
    rid = log.refusal(5, payload=CF)
    log.error_miss(rid, voters=(11,))  # E alone: 5 <= 8, the error-miss does not apply
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert rows(conn, "SELECT inference_id, applied, accepted_current_rule FROM api.sibling_findings") == \
        [(rid, False, False)]
    assert rows(conn, "SELECT * FROM api.disputable_penalties") == []


@pytest.mark.parametrize("sibling_input, hardened, disputable", [(395905, False, True), (395901, True, False)])
def test_reference_f5_error_miss_through_sibling_6150(db_url, tmp_path, conn, sibling_input, hardened, disputable):
    h = "5b1f0a3c00000000000000000000000000000000000000000000000000000001"
    start = dict(prompt_hash=h, model="deepseek-ai/DeepSeek-V4-Flash-0731", input_length=395905, max_tokens=4096,
                 started_at=1790812800)
    f6 = stored(fam6_at_least(400000, 4096), ident="devshard-1971-6149")
    records = [
        snapshot(["--max-model-len", "400000", "--kv-cache-dtype", "fp8", "--trust-remote-code"]), escrow(),
        tx("start", 6149, 6149, **start), tx("start", 6150, 6150, **start),
        tx("confirm_start", 6149, 6150, confirmed_at=1790812801),
        tx("confirm_start", 6150, 6151, confirmed_at=1790812802),
        tx("finish", 6149, 6151, executor_slot=5, input_tokens=0, output_tokens=0, response_hash="badc0de0" + "0" * 55
           + "3", response_payload=f6),
        tx("finish", 6150, 6152, executor_slot=6, input_tokens=sibling_input, output_tokens=812,
           response_hash="c0ffee" + "0" * 57 + "2"),
        tx("error_miss", 6149, 6160, votes=[{"voter_slot": s, "accept": True} for s in (0, 6, 9, 11)]),
    ]
    load(db_url, tmp_path, records)
    assert rows(conn, "SELECT status, penalty FROM api.inferences WHERE inference_id = 6149") == \
        [("TimedOut", "missed")]
    assert rows(conn, "SELECT inference_id, sibling_inference_id, sibling_input_tokens, sibling_output_tokens, "
                      "governance_limit, max_tokens, accepted_current_rule, accepted_hardened_rule "
                      "FROM api.sibling_findings") == [(6149, 6150, sibling_input, 812, 400000, 4096, True, hardened)]
    got = rows(conn, "SELECT epoch_index, escrow_id, inference_id, participant, executor_slot, penalty, rule, verdict, "
                     "evidence->>'sibling_inference_id' FROM api.disputable_penalties")
    if disputable:
        assert got == [(408, "1971", 6149, "gonka1hostB", 5, "missed", "error_miss_sibling", "over_limit", "6150")]
    else:
        assert got == []


def test_hardened_rule_needs_a_signed_prompt_count_that_shows_the_request_fits(db_url, tmp_path, conn):
    # The hardened rule accepts an error-miss only on a sibling whose signed input_tokens, with THIS request's
    # max_tokens, shows the request fits (interface.md §3 `fits`: P + M <= limit and P < limit). A sibling that billed
    # output with input_tokens 0 (a billed client fault) signed no count of the prompt: it still qualifies today,
    # but what the hardened rule says is unknown, never true. An unknown hardened acceptance leaves the miss
    # disputable unless other evidence shows the request fits (the executor's own exact count).
    log = Log()
    c = {}

    def case(name, *siblings, max_tokens=4096, payload=CF):
        h = new_hash()
        rid = log.refusal(5, h, max_tokens=max_tokens, payload=payload)
        for input_tokens, sibling_max_tokens in siblings:
            log.served(6, h, input_tokens=input_tokens, output_tokens=50, max_tokens=sibling_max_tokens)
        log.error_miss(rid)
        c[name] = rid

    case("zero_input_sibling", (0, 4096))
    case("zero_input_text_fits", (0, 4096), payload=stored(fam3(100_000, GOV - 4096)))
    case("zero_input_and_fitting", (0, 4096), (1000, 4096))
    case("zero_input_and_over", (0, 4096), (GOV - 4095, 4096))
    # the sibling's own max_tokens is not what is checked: 395904 + 4096 (this request) fits, + 8192 would not
    case("this_requests_max_tokens", (GOV - 4096, 8192))
    case("sibling_small_but_request_max_tokens_over", (1000, 1), max_tokens=GOV + 1)
    # a prompt of the whole limit leaves no room to generate, whatever max_tokens says
    case("prompt_at_limit_max_tokens_0", (GOV, 4096), max_tokens=0)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    got = by_id(conn, "api.sibling_findings", "sibling_input_tokens, accepted_current_rule, accepted_hardened_rule")
    assert {k: got[rid] for k, rid in c.items()} == {
        "zero_input_sibling": (0, True, None),
        "zero_input_text_fits": (0, True, None),
        "zero_input_and_fitting": (1000, True, True),
        "zero_input_and_over": (GOV - 4095, True, False),
        "this_requests_max_tokens": (GOV - 4096, True, True),
        "sibling_small_but_request_max_tokens_over": (1000, True, False),
        "prompt_at_limit_max_tokens_0": (GOV, True, False),
    }
    disputable = by_id(conn, "api.disputable_penalties", "rule", "rule = 'error_miss_sibling'")
    assert {k for k, rid in c.items() if rid in disputable} == set(c) - {"zero_input_and_fitting",
                                                                          "this_requests_max_tokens",
                                                                          "zero_input_text_fits"}


def test_error_miss_disputable_when_a_larger_signed_count_shows_the_request_over(db_url, tmp_path, conn):
    # Two served siblings of one prompt signed different counts (tokenizers differ by a few tokens at the limit):
    # 395900 + 4096 fits, 395905 + 4096 does not. The hardened rule accepts on the first, but the request is not shown
    # to fit: the refusal's verdict (the largest signed count, api.context_refusals) is over_limit, and a refusal
    # counts against the host only when it fits. With both counts fitting, the miss stands.
    log = Log()
    c = {}
    for name, counts in {"conflict": (GOV - 4100, GOV - 4095), "both_fit": (GOV - 4100, GOV - 4096)}.items():
        h = new_hash()
        c[name] = log.refusal(5, h, payload=CF)
        for n in counts:
            log.served(6, h, input_tokens=n, output_tokens=50)
        log.error_miss(c[name])
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    assert by_id(conn, "api.sibling_findings", "sibling_input_tokens, accepted_current_rule, accepted_hardened_rule") \
        == {c["conflict"]: (GOV - 4100, True, True), c["both_fit"]: (GOV - 4100, True, True)}
    assert by_id(conn, "api.context_refusals", "verdict, prompt_tokens") == {
        c["conflict"]: ("over_limit", GOV - 4095), c["both_fit"]: ("fits", GOV - 4096)}
    assert by_id(conn, "api.disputable_penalties", "participant, penalty, rule, verdict") == {
        c["conflict"]: (B, "missed", "error_miss_sibling", "over_limit")}
    # the evidence names the count that shows it over, and the restitution sentence says why it is disputable
    penalty = dict(zip(("rule", "verdict", "evidence"), rows(
        conn, "SELECT rule, verdict, evidence FROM api.disputable_penalties")[0]))
    ev = penalty["evidence"]
    assert (ev["sibling_input_tokens"], ev["refusal_prompt_tokens"], ev["refusal_prompt_tokens_source"]) == \
        (GOV - 4100, GOV - 4095, "sibling")
    assert "not shown to fit: prompt 395,905 + max_tokens 4,096 = 400,001 > governance limit 400,000" \
        in sentence(penalty)
