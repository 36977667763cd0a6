"""Unknown stays unknown: a signed request without max_tokens, and a limit that is not in force for the request's
epoch and model, never become zero, `fits` or an accepted error-miss (interface.md §3, gonka-devshard.md §2.5, §2.6).
NDJSON in, api views out; governance is 400000 where a snapshot is given."""
from __future__ import annotations

from tests.support.rules_kit import (B, GOV, MINIMAX, Log, by_id, fam3, fam4, fam6_at_least, gov_snapshot, load,
                                     new_hash, rows, snapshot, stored)


def _without_max_tokens(log: Log, iid: int) -> None:
    """Drop max_tokens from the Start of `iid`, as a record that did not capture it."""
    start = next(r for r in log.records if r["kind"] == "start" and r["inference_id"] == iid)
    del start["max_tokens"]


def test_a_request_without_max_tokens_is_never_shown_to_fit(db_url, tmp_path, conn):
    log = Log()
    c = {}
    # an exact prompt count far below the limit: without max_tokens the sum is unknown, so not `fits`
    c["exact_small"] = log.refusal(5, payload=stored(fam3(100_000, 1000)))
    # ... but a prompt of the whole limit is over whatever max_tokens is
    c["exact_at_limit"] = log.refusal(5, payload=stored(fam3(500_000, GOV)))
    # a served sibling's count: the same
    h = new_hash()
    c["sibling_small"] = log.refusal(5, h, payload=stored(fam6_at_least(GOV, 4096)))
    log.served(6, h, input_tokens=1000, output_tokens=50)
    log.error_miss(c["sibling_small"])
    for iid in c.values():
        _without_max_tokens(log, iid)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    assert by_id(conn, "api.context_refusals", "max_tokens, prompt_tokens, verdict") == {
        c["exact_small"]: (None, 1000, "undetermined"),
        c["exact_at_limit"]: (None, GOV, "over_limit"),
        c["sibling_small"]: (None, 1000, "undetermined"),
    }
    assert by_id(conn, "api.inferences", "max_tokens", f"inference_id = {c['exact_small']}") == \
        {c["exact_small"]: None}
    # today's rule admits the error-miss on the sibling; whether the hardened one would is unknown, so it is disputable
    assert by_id(conn, "api.sibling_findings", "max_tokens, accepted_current_rule, accepted_hardened_rule") == \
        {c["sibling_small"]: (None, True, None)}
    assert by_id(conn, "api.disputable_penalties", "participant, penalty, rule, verdict") == \
        {c["sibling_small"]: (B, "missed", "error_miss_sibling", "undetermined")}


def test_a_timeout_without_max_tokens_is_shown_over_only_by_a_prompt_at_the_limit(db_url, tmp_path, conn):
    log = Log()
    c = {}
    for name, sibling_input in {"sibling_below": GOV - 1, "sibling_at_limit": GOV}.items():
        h = new_hash()
        log.served(6, h, input_tokens=sibling_input, output_tokens=10)
        c[name] = log.start(5, h)
        log.timeout(c[name], "refused")
        _without_max_tokens(log, c[name])
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert by_id(conn, "api.disputable_penalties", "rule, verdict, (evidence ? 'max_tokens')") == {
        c["sibling_at_limit"]: ("timeout_over_limit", "over_limit", False)}


def test_the_limit_in_force_is_the_requests_own_epoch_and_model(db_url, tmp_path, conn):
    # epoch 407 governs 400000 and epoch 409 300000 for the model; epoch 408 has a snapshot of another model only.
    # The same refusal (395904 + 4096 == 400000) fits in 407, is over in 409 and undetermined in 408: never judged
    # against a neighbouring epoch's or another model's limit.
    logs = {epoch: Log(f"e{epoch}", epoch=epoch, first_nonce=1000 * (epoch - 400)) for epoch in (407, 408, 409)}
    iid = {epoch: log.refusal(5, payload=stored(fam3(100_000, GOV - 4096))) for epoch, log in logs.items()}
    records = [gov_snapshot(epoch=407), gov_snapshot(300_000, epoch=409), snapshot(["--max-model-len", "900000"],
                                                                                  epoch=408, model=MINIMAX)]
    load(db_url, tmp_path, records + [r for log in logs.values() for r in log.records])
    assert by_id(conn, "api.context_refusals", "epoch_index, governance_limit, limit_source, verdict") == {
        iid[407]: (407, GOV, "model_args", "fits"),
        iid[408]: (408, None, None, "undetermined"),
        iid[409]: (409, 300_000, "model_args", "over_limit"),
    }


def test_a_sibling_error_miss_without_a_limit_in_force_is_unknown(db_url, tmp_path, conn):
    log = Log()
    h = new_hash()
    rid = log.refusal(5, h, payload=stored(fam6_at_least(GOV, 4096)))
    log.served(6, h, input_tokens=1000, output_tokens=50)
    log.error_miss(rid)
    load(db_url, tmp_path, [snapshot(["--max-model-len", "400000"], model=MINIMAX)] + log.records)
    assert by_id(conn, "api.sibling_findings", "governance_limit, accepted_current_rule, accepted_hardened_rule") == \
        {rid: (None, True, None)}
    assert by_id(conn, "api.disputable_penalties", "rule, verdict") == {rid: ("error_miss_sibling", "undetermined")}


def test_a_governance_limit_read_again_changes_the_epochs_verdicts(db_url, tmp_path, conn):
    # epoch 408's snapshot first read as 400000, then as 395000 (the args amended): the epoch is judged again against
    # the new limit, and a limit removed from the args leaves it unknown, not the old value
    log = Log()
    iid = log.refusal(5, payload=stored(fam3(100_000, GOV - 4096)))  # + 4096 == 400000
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert by_id(conn, "api.context_refusals", "governance_limit, verdict") == {iid: (GOV, "fits")}
    load(db_url, tmp_path, [gov_snapshot(395_000)], name="amended.ndjson")
    assert by_id(conn, "api.context_refusals", "governance_limit, verdict") == {iid: (395_000, "over_limit")}
    load(db_url, tmp_path, [snapshot(["--kv-cache-dtype", "fp8"])], name="removed.ndjson")
    assert by_id(conn, "api.context_refusals", "governance_limit, verdict") == {iid: (None, "undetermined")}


def test_a_prompt_served_in_another_escrow_or_model_is_no_sibling(db_url, tmp_path, conn):
    # the same prompt hash served by the DeepSeek escrow (limit 400000) proves nothing for the MiniMax escrow (180000):
    # a sibling is another inference of the same escrow (gonka-devshard.md §2.4), of its one model and tokenizer
    h = new_hash()
    deepseek = Log("ds", first_nonce=1000)
    deepseek.served(6, h, input_tokens=1000, output_tokens=50)
    deepseek.served(7, h, input_tokens=GOV - 4095, output_tokens=50)
    minimax = Log("mm", model=MINIMAX, first_nonce=5000)
    refusal = minimax.refusal(5, h, payload=stored(fam6_at_least(180_000, 4096)))
    minimax.error_miss(refusal)
    timeout = minimax.start(5, h)
    minimax.timeout(timeout, "refused")
    load(db_url, tmp_path, [gov_snapshot(), gov_snapshot(180_000, model=MINIMAX)] + deepseek.records
         + minimax.records)
    assert by_id(conn, "api.context_refusals", "governance_limit, prompt_tokens_source, verdict") == \
        {refusal: (180_000, "error_text", "over_limit")}
    assert by_id(conn, "api.sibling_findings", "sibling_inference_id, accepted_current_rule, accepted_hardened_rule") \
        == {refusal: (None, False, False)}
    # the error-miss no sibling admits is disputable; the timeout is not shown over by another escrow's count
    assert by_id(conn, "api.disputable_penalties", "rule") == {refusal: "error_miss_sibling"}


def test_a_finish_the_state_machine_rejected_is_no_signed_count(db_url, tmp_path, conn):
    # A sibling's input_tokens counts because its executor signed a Finish the escrow applied. A Finish the replay
    # rejected (on a Pending record, or naming a slot that is not the executor's) is no such count: it must neither
    # show a refusal fits (the invalidation would then stand) nor show a timed-out request over the limit.
    log = Log()
    h = new_hash()
    refusal = log.refusal(5, h)                  # no payload: the prompt is unknown
    log.invalidate(refusal)
    pending = log.start(6, h)                    # never confirmed: its Finish cannot apply
    log.finish(pending, 1000, 50)
    h2 = new_hash()
    started = log.start(6, h2)
    log.confirm(started)
    log.finish(started, GOV, 50, slot=7)         # the wrong executor slot: rejected, the record stays Started
    timeout = log.start(5, h2)
    log.timeout(timeout, "refused")
    h3 = new_hash()
    error_missed = log.refusal(5, h3, payload=stored(fam6_at_least(GOV, 4096)))
    rejected_sibling = log.start(6, h3)
    log.finish(rejected_sibling, 1000, 50)       # Pending again: no sibling for today's rule either
    log.error_miss(error_missed)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    assert {r[0] for r in rows(conn, "SELECT inference_id FROM api.replay_rejections WHERE kind = 'finish'")} == \
        {pending, started, rejected_sibling}
    assert by_id(conn, "api.context_refusals", "prompt_tokens_source, verdict") == {
        refusal: ("input_length", "undetermined"), error_missed: ("error_text", "over_limit")}
    assert by_id(conn, "api.sibling_findings", "sibling_inference_id, accepted_current_rule") == \
        {error_missed: (None, False)}
    assert by_id(conn, "api.disputable_penalties", "rule, verdict") == {
        refusal: ("invalidated_context_refusal", "undetermined"), error_missed: ("error_miss_sibling", "over_limit")}


def test_a_rejected_finish_makes_no_raised_limit_suspect(db_url, tmp_path, conn):
    # a Finish naming slot 9 (host D) for a record that slot 6 (C) executes is rejected: D served nothing, so D is no
    # suspect and D's invalid votes keep their weight in the tally without suspects
    log = Log()
    started = log.start(6)
    log.confirm(started)
    log.finish(started, 399_000, 1001, slot=9)   # 400001 > 400000, but not applied
    served = log.served(11, input_tokens=399_000, output_tokens=1001)   # E: applied, a suspect
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert rows(conn, "SELECT participant, inference_id, observed_tokens FROM api.raised_limit_suspects") == \
        [("gonka1hostE", served, GOV + 1)]


def test_a_rejected_zero_zero_finish_is_no_refusal(db_url, tmp_path, conn):
    # a 0/0 Finish naming slot 9 (host D) for a record that slot 6 (C) executes is rejected: it is no refusal of the
    # record, and the limit its text states (600000) is no one's evidence of a raised limit
    log = Log()
    started = log.start(6)
    log.confirm(started)
    log.finish(started, 0, 0, stored(fam4(600_000, 597_000, 4096)), slot=9)
    refusal = log.refusal(5, payload=stored(fam4(600_000, 597_000, 4096)))   # B's own: applied, a suspect
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert by_id(conn, "api.context_refusals", "executor_address, verdict") == {refusal: (B, "over_limit")}
    assert rows(conn, "SELECT participant, evidence_kind, inference_id FROM api.raised_limit_suspects") == \
        [(B, "stated_limit_above", refusal)]


def test_the_gateways_estimate_excuses_nothing_in_the_narrow_variant(db_url, tmp_path, conn):
    # narrow_prompt_ge_limit excuses a penalty only on a prompt count at or over the limit (exact or a lower bound,
    # docs/restitution.md); input_length is the gateway's estimate, recorded and never decisive
    log = Log()
    estimate_over = log.refusal(5, input_length=GOV + 10)                          # no payload, no sibling
    counted_at_limit = log.refusal(4, payload=stored(fam3(500_000, GOV)))          # the executor's exact count
    for iid in (estimate_over, counted_at_limit):
        log.invalidate(iid)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    assert by_id(conn, "api.policy_penalties", "prompt_tokens_source, excused_issue_2078, excused_tokenize_2093, "
                                               "excused_narrow_prompt_ge_limit") == {
        estimate_over: ("input_length", True, False, False),
        counted_at_limit: ("error_text", True, True, True)}
