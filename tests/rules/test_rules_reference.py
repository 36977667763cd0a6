"""The reference scenario of gonka-devshard.md §7 (F1-F9) end to end: epoch 408, escrow 1971, model
deepseek-ai/DeepSeek-V4-Flash-0731 at --max-model-len 400000, slots A = 0-3, B = 4-5, C = 6-8, D = 9-10, E = 11-15.
A, C and D run a raised local limit; B and E run 400000."""
from __future__ import annotations

import pytest

from tests.support.helpers import escrow, tx
from tests.support.rules_kit import A, B, C, D, load, rows, stored

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
PROMPT = "5b1f0a3c00000000000000000000000000000000000000000000000000000001"
F6_MESSAGE = ("This model's maximum context length is 400000 tokens. However, you requested 4096 output tokens and "
              "your prompt contains at least 395905 input tokens, for a total of at least 400001 tokens.")
F1_ARGS = ["--max-model-len", "400000", "--kv-cache-dtype", "fp8", "--tokenizer-mode", "deepseek_v4",
           "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
           "--trust-remote-code"]


def votes(*slots):
    return [{"voter_slot": s, "accept": True} for s in slots]


def scenario(with_sibling: bool) -> list[dict]:
    start = dict(model=MODEL, started_at=1790812800, protocol_version="v7")
    recs = [
        {"kind": "epoch", "epoch_index": 408, "start_height": 2450000},
        {"kind": "model_snapshot", "epoch_index": 408, "model_id": MODEL, "model_args": F1_ARGS},          # F1
        escrow(validation_rate=1000, settled=False, protocol_version="v7"),                                # F3
        tx("start", 6149, 6149, prompt_hash=PROMPT, input_length=395905, max_tokens=4096, **start),        # F4
        tx("confirm_start", 6149, 6150, confirmed_at=1790812801),
        tx("finish", 6149, 6151, executor_slot=5, input_tokens=0, output_tokens=0,                         # F6
           response_hash="badc0de" + "0" * 56 + "3", response_payload=stored(F6_MESSAGE, ident="devshard-1971-6149")),
        tx("validation", 6149, 6170, validator_slot=9, valid=False),                                       # F7
        tx("validation_vote", 6149, 6174, voter_slot=11, vote_valid=True),
        tx("validation_vote", 6149, 6175, voter_slot=0, vote_valid=False),                                 # F8
        tx("validation_vote", 6149, 6176, voter_slot=6, vote_valid=False),
        tx("start", 6165, 6165, prompt_hash="65" * 32, input_length=2000, max_tokens=3072, **start),
        tx("confirm_start", 6165, 6166, confirmed_at=1790812900),
        tx("start", 6179, 6179, prompt_hash="79" * 32, input_length=1200, max_tokens=3072, **start),
        tx("confirm_start", 6179, 6180, confirmed_at=1790813000),
        tx("finish", 6179, 6181, executor_slot=3, input_tokens=1200, output_tokens=300,
           response_hash="e1e1" + "0" * 59 + "5"),
        tx("timeout", 6165, 6190, reason="execution", votes=votes(0, 6, 9, 11)),                           # F9
        tx("error_miss", 6179, 6201, votes=votes(4, 6, 9, 11)),
        {"kind": "host_epoch_stats", "epoch_index": 408, "participant": B, "missed": 1, "invalid": 1,      # F10
         "cost": "912345670", "required_validations": 40, "completed_validations": 38, "escrow_count": 3},
    ]
    if with_sibling:                                                                                       # F5
        recs += [tx("start", 6150, 6150, prompt_hash=PROMPT, input_length=395905, max_tokens=4096, **start),
                 tx("confirm_start", 6150, 6151, confirmed_at=1790812802),
                 tx("finish", 6150, 6152, executor_slot=6, input_tokens=395905, output_tokens=812,
                    response_hash="c0ffee" + "0" * 57 + "2")]
    return recs


@pytest.mark.parametrize("with_sibling", [True, False], ids=["F1-F10", "without-F5-sibling"])
def test_reference_scenario_end_to_end(db_url, tmp_path, conn, with_sibling):
    load(db_url, tmp_path, scenario(with_sibling))

    assert rows(conn, "SELECT epoch_index, model_id, governance_limit, limit_source FROM api.model_limits") == \
        [(408, MODEL, 400000, "model_args")]
    inf = {r[0]: r[1:] for r in rows(conn, "SELECT inference_id, executor_slot, executor_address, status, penalty, "
                                           "is_client_fault FROM api.inferences")}
    assert inf[6149] == (5, B, "Invalidated", "invalid", True)
    assert inf[6165] == (5, B, "TimedOut", "missed", False)
    assert inf[6179] == (3, A, "TimedOut", "missed", False)
    assert inf.get(6150) == ((6, C, "Finished", None, False) if with_sibling else None)

    # F6: the executor's "at least" text; the verdict is over_limit (395905 + 4096 > 400000) from the lower-bound text
    # alone, and the sibling's signed count (the more trusted source) agrees exactly
    source = ("sibling", False) if with_sibling else ("error_text", True)
    assert rows(conn, "SELECT inference_id, executor_address, refusal_kind, error_code, reported_limit, "
                      "reported_prompt_tokens, reported_prompt_is_lower_bound, reported_max_tokens, governance_limit, "
                      "max_tokens, prompt_tokens, prompt_tokens_source, prompt_is_lower_bound, verdict "
                      "FROM api.context_refusals") == \
        [(6149, B, "context_length", 400, 400000, 395905, True, 4096, 400000, 4096, 395905, *source, "over_limit")]

    # F8: 2 -> 6 -> 9 invalid; D (challenger), A and C voted invalid on a refusal shown over the limit
    assert rows(conn, "SELECT inference_id, vote_threshold, votes_valid, votes_invalid, outcome, "
                      "suspect_invalid_weight, outcome_without_suspects FROM api.challenges") == \
        [(6149, 8, 5, 9, "Invalidated", 9, "Finished")]
    assert set(rows(conn, "SELECT participant, evidence_kind, observed_tokens, inference_id "
                          "FROM api.raised_limit_suspects")) == \
        {(p, "voted_invalid_on_over_limit", 395905, 6149) for p in (A, C, D)}

    # F9: the error-miss on a served (non-client-fault) Finish is a plain miss under both rules
    assert rows(conn, "SELECT inference_id, applied, client_fault_basis, accepted_current_rule, "
                      "accepted_hardened_rule FROM api.sibling_findings") == [(6179, True, None, True, True)]

    # the invalidation of 6149 is the one disputable penalty; the timeout of 6165 and the miss of 6179 stand
    assert rows(conn, "SELECT epoch_index, escrow_id, inference_id, participant, executor_slot, penalty, rule, verdict "
                      "FROM api.disputable_penalties") == \
        [(408, "1971", 6149, B, 5, "invalid", "invalidated_context_refusal", "over_limit")]
    hep = {r[0]: r[1:] for r in rows(conn, "SELECT participant, missed, invalid, disputable_missed, "
                                           "disputable_invalid, reported_missed, reported_invalid "
                                           "FROM api.host_epoch_penalties")}
    assert hep[B] == (1, 1, 0, 1, 1, 1)
    assert hep[A] == (1, 0, 0, 0, None, None)
