"""api.context_refusals: one verdict per 0/0 Finish against the governance limit (interface.md §3 vocabulary,
gonka-devshard.md §2.5, §3.6, §3.9, §6). Governance is 400000 throughout; executor slot 5 is host B."""
from __future__ import annotations

from tests.support.rules_kit import (GOV, TOOL_CHOICE, Log, by_id, fam1, fam2, fam3, fam4, fam5, fam6_at_least,
                                     gov_snapshot, load, new_hash, stored)

COLS = "verdict, prompt_tokens, prompt_tokens_source, prompt_is_lower_bound"


def test_verdict_boundaries_from_exact_and_lower_bound_counts(db_url, tmp_path, conn):
    log = Log()
    exact = lambda P, M=4096: log.refusal(5, max_tokens=M, payload=stored(fam3(100_000, P)))  # noqa: E731
    at_least = lambda L, M: log.refusal(5, max_tokens=M, payload=stored(fam6_at_least(L, M)))  # noqa: E731
    c = {
        # exact prompt count: equality fits (vLLM accepts P + M == max_model_len), one more token does not
        "sum_eq_limit": exact(GOV - 4096),
        "sum_limit_plus_1": exact(GOV - 4095),
        "small": exact(1000),
        # the prompt alone at the limit leaves no room to generate, even with max_tokens 0 (P + M == limit)
        "prompt_eq_limit_m0": exact(GOV, M=0),
        "prompt_below_limit_m0": exact(GOV - 1, M=0),
        # lower bounds ("at least"): only over_limit can be shown
        "lb_f6_over": at_least(GOV, 4096),                    # at least 395905 + 4096 = 400001
        "lb_sum_eq_limit": at_least(GOV - 1, 4096),           # at least 395904 + 4096 = 400000: not proof of fit
        "lb_lower_local_limit": at_least(300_000, 3072),      # at least 296929 + 3072 = 300001 <= 400000
        "lb_f5": log.refusal(5, max_tokens=3072, payload=stored(fam5(GOV, GOV - 3072 + 1, 3072))),
        "lb_f5_lower_local": log.refusal(5, max_tokens=3072, payload=stored(fam5(300_000, 300_000 - 3071, 3072))),
    }
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.context_refusals", COLS)
    assert {k: got[i] for k, i in c.items()} == {
        "sum_eq_limit": ("fits", GOV - 4096, "error_text", False),
        "sum_limit_plus_1": ("over_limit", GOV - 4095, "error_text", False),
        "small": ("fits", 1000, "error_text", False),
        "prompt_eq_limit_m0": ("over_limit", GOV, "error_text", False),
        "prompt_below_limit_m0": ("fits", GOV - 1, "error_text", False),
        "lb_f6_over": ("over_limit", 395905, "error_text", True),
        "lb_sum_eq_limit": ("undetermined", 395904, "error_text", True),
        "lb_lower_local_limit": ("undetermined", 296929, "error_text", True),
        "lb_f5": ("over_limit", 396929, "error_text", True),
        "lb_f5_lower_local": ("undetermined", 296929, "error_text", True),
    }
    # the executor's own statement is recorded beside the verdict, never used as governance
    assert by_id(conn, "api.context_refusals", "reported_limit, reported_prompt_tokens, "
                 "reported_prompt_is_lower_bound, reported_max_tokens, governance_limit, max_tokens",
                 f"inference_id = {c['lb_lower_local_limit']}") == \
        {c["lb_lower_local_limit"]: (300000, 296929, True, 3072, GOV, 3072)}


def test_max_tokens_alone_and_unknown_prompt(db_url, tmp_path, conn):
    log = Log()
    c = {
        # no payload and no sibling: the prompt count is only the gateway's estimate, never decisive
        "unknown_small": log.refusal(5, input_length=1000),
        "unknown_estimate_over": log.refusal(5, input_length=GOV + 10),
        # ... unless max_tokens alone exceeds the limit
        "m_over": log.refusal(5, max_tokens=GOV + 1),
        "m_eq_limit": log.refusal(5, max_tokens=GOV),
        # the gateway's default cap 4096 with an exact count at the boundary (from the executor's text)
        "cap_fits": log.refusal(5, max_tokens=4096, payload=stored(fam4(GOV, GOV - 4096, 4096))),
        "cap_over": log.refusal(5, max_tokens=4096, payload=stored(fam4(GOV, GOV - 4095, 4096))),
    }
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.context_refusals", COLS + ", refusal_kind, max_tokens")
    assert {k: got[i] for k, i in c.items()} == {
        "unknown_small": ("undetermined", 1000, "input_length", False, "unknown", 4096),
        "unknown_estimate_over": ("undetermined", GOV + 10, "input_length", False, "unknown", 4096),
        "m_over": ("over_limit", 1000, "input_length", False, "unknown", GOV + 1),
        "m_eq_limit": ("undetermined", 1000, "input_length", False, "unknown", GOV),
        "cap_fits": ("fits", GOV - 4096, "error_text", False, "context_length", 4096),
        "cap_over": ("over_limit", GOV - 4095, "error_text", False, "context_length", 4096),
    }


def test_sibling_count_beats_the_error_text(db_url, tmp_path, conn):
    log = Log()
    h1, h2, h3, h4 = (new_hash() for _ in range(4))
    # the executor's text says 395905 (over); a served sibling signed 395904 (+4096 == limit): the sibling decides
    text_over_sibling_fits = log.refusal(5, h1, payload=stored(fam4(GOV, GOV - 4095, 4096)))
    log.served(6, h1, input_tokens=GOV - 4096, output_tokens=10)
    # text says "at least 395905"; the sibling's exact count decides and is not a lower bound
    lb_text_sibling_over = log.refusal(5, h2, payload=stored(fam6_at_least(GOV, 4096)))
    log.served(6, h2, input_tokens=GOV - 4095, output_tokens=10)
    # no payload at all: a sibling alone gives an exact count, so `fits` is possible
    unknown_sibling_fits = log.refusal(5, h3)
    log.served(7, h3, input_tokens=1000, output_tokens=10)
    # several siblings: the largest signed count is used (any served count showing over_limit protects the host)
    several = log.refusal(5, h4)
    log.served(6, h4, input_tokens=GOV - 5000, output_tokens=10)
    log.served(11, h4, input_tokens=GOV - 4000, output_tokens=10)
    # a different prompt hash is no sibling
    other = log.refusal(5, new_hash(), payload=stored(fam3(100_000, 2000)))
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.context_refusals", COLS + ", refusal_kind", "prompt_tokens_source IS NOT NULL")
    assert got == {
        text_over_sibling_fits: ("fits", GOV - 4096, "sibling", False, "context_length"),
        lb_text_sibling_over: ("over_limit", GOV - 4095, "sibling", False, "context_length"),
        unknown_sibling_fits: ("fits", 1000, "sibling", False, "unknown"),
        several: ("over_limit", GOV - 4000, "sibling", False, "unknown"),
        other: ("fits", 2000, "error_text", False, "context_length"),
    }
    # only 0/0 Finishes get a row: the served siblings do not
    assert conn.execute("SELECT count(*) FROM api.context_refusals").fetchone()[0] == 5


def test_refusal_kinds_and_wording_families(db_url, tmp_path, conn):
    log = Log(model="MiniMaxAI/MiniMax-M2.7")
    c = {
        "no_payload": log.refusal(5, max_tokens=3072),
        "family1_flat": log.refusal(5, max_tokens=3072, payload=stored(fam1(180000, 183500), flat=True)),
        "family2": log.refusal(5, max_tokens=3072, payload=stored(fam2(180000, 178976, 3072))),
        "family3": log.refusal(5, max_tokens=3072, payload=stored(fam3(180000, 181234))),
        "family4": log.refusal(5, max_tokens=3072, payload=stored(fam4(180000, 177000, 3072))),
        "family3_422": log.refusal(5, max_tokens=3072, payload=stored(fam3(170000, 176928), code=422)),
        "family5": log.refusal(5, max_tokens=3072, payload=stored(fam5(180000, 176929, 3072))),
        "family6": log.refusal(5, max_tokens=3072, payload=stored(fam6_at_least(180000, 3072))),
        "code_as_string": log.refusal(5, max_tokens=3072, payload=stored(fam3(180000, 181234), code="400")),
        "tool_choice": log.refusal(5, max_tokens=3072, payload=stored(TOOL_CHOICE)),
        "engine_500": log.refusal(5, max_tokens=3072, payload=stored(
            "Internal Server Error", code=500, etype="InternalServerError")),
        # a context-length wording inside a 500 body is still not a client fault
        "context_text_500": log.refusal(5, max_tokens=3072, payload=stored(fam3(180000, 181234), code=500)),
    }
    load(db_url, tmp_path, [{"kind": "model_snapshot", "epoch_index": 408, "model_id": "MiniMaxAI/MiniMax-M2.7",
                             "model_args": ["--max-model-len", "180000"]}] + log.records)
    got = by_id(conn, "api.context_refusals", "refusal_kind, error_code, reported_limit, reported_prompt_tokens, "
                                              "reported_prompt_is_lower_bound, verdict")
    got[c["context_text_500"]] = got[c["context_text_500"]][:-1] + ("-",)  # its verdict is not this test's concern
    assert {k: got[i] for k, i in c.items()} == {
        "no_payload": ("unknown", None, None, None, None, "undetermined"),
        "family1_flat": ("context_length", 400, 180000, 183500, False, "over_limit"),
        "family2": ("context_length", 400, 180000, 178976, False, "over_limit"),
        "family3": ("context_length", 400, 180000, 181234, False, "over_limit"),
        "family4": ("context_length", 400, 180000, 177000, False, "over_limit"),
        "family3_422": ("context_length", 422, 170000, 176928, False, "fits"),
        "family5": ("context_length", 400, 180000, 176929, True, "over_limit"),
        "family6": ("context_length", 400, 180000, 176929, True, "over_limit"),
        "code_as_string": ("context_length", 400, 180000, 181234, False, "over_limit"),
        # no count stated: whether it is a lower bound is unknown, not false
        "tool_choice": ("other_client_fault", 400, None, None, None, "undetermined"),
        "engine_500": ("not_client_fault", 500, None, None, None, "undetermined"),
        "context_text_500": ("not_client_fault", 500, 180000, 181234, False, "-"),
    }


def test_texts_whose_numbers_do_not_describe_the_prompt(db_url, tmp_path, conn):
    """Wordings whose numbers are not the decoder prompt's count give no error_text count (the verdict falls back to
    the next evidence); an exact count stays exact whatever a later sentence says."""
    log = Log()
    encoder = ("The encoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that "
               "`max_model_len` is no smaller than the number of text tokens plus multimodal tokens.")
    c = {
        # vllm v1 input_processor: E is the encoder input, 4096 the encoder cache size; 5000 + 4096 would "fit"
        "encoder": log.refusal(5, payload=stored(encoder)),
        # the bare total (a family-2 text cut short): 9000 is prompt + max_tokens, not the prompt
        "bare_total": log.refusal(5, payload=stored(
            "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens")),
        # a host at 8192 below governance refusing an exact 9000: shown to fit governance, whatever follows
        "later_at_least": log.refusal(5, payload=stored(fam3(8192, 9000) + " max_tokens must be at least 1.")),
        # the limit named beside a rate limit: not a context-length refusal
        "rate_limit": log.refusal(5, payload=stored(
            "Rate limit exceeded: 10000 tokens per minute. This model's maximum context length is 8192 tokens.")),
    }
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.context_refusals", "refusal_kind, reported_limit, reported_prompt_is_lower_bound, " + COLS)
    assert {k: got[i] for k, i in c.items()} == {
        "encoder": ("context_length", None, None, "undetermined", 1000, "input_length", False),
        "bare_total": ("context_length", 8192, None, "undetermined", 1000, "input_length", False),
        "later_at_least": ("context_length", 8192, False, "fits", 9000, "error_text", False),
        "rate_limit": ("other_client_fault", None, None, "undetermined", 1000, "input_length", False),
    }
