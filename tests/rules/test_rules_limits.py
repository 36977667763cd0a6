"""Governance limit (gonka-devshard.md §2.2, §2.6): model args -> api.model_limits, escrow max_model_len, and the
limit each verdict in api.context_refusals is judged against. NDJSON in, api views out."""
from __future__ import annotations

from tests.support.rules_kit import (GOV, MINIMAX, MODEL, Log, by_id, fam3, fam4, gov_snapshot, load, rows, snapshot,
                                     stored)

# One epoch per model-args spelling: (args, limit, occurrences, mixed_forms, loophole_risk)
ARGS_CASES = {
    1: (["--max-model-len", "400000", "--kv-cache-dtype", "fp8"], 400000, 1, False, False),
    2: (["--kv-cache-dtype", "fp8", "--max-model-len=400000"], 400000, 1, False, False),
    # last occurrence wins (argparse), whatever the form
    3: (["--max-model-len", "400000", "--trust-remote-code", "--max-model-len", "500000"], 500000, 2, False, True),
    4: (["--max-model-len", "400000", "--max-model-len=600000"], 600000, 2, True, True),
    5: (["--max-model-len=600000", "--enforce-eager", "--max-model-len", "400000"], 400000, 2, True, True),
    6: (["--max-model-len=400000", "--max-model-len=600000"], 600000, 2, False, True),
    # vLLM's human-readable values: k/m = 10^3/10^6, K/M = 2^10/2^20
    7: (["--max-model-len", "400k"], 400000, 1, False, False),
    8: (["--max-model-len=1K"], 1024, 1, False, False),
    9: (["--max-model-len", "25.6k"], 25600, 1, False, False),
    10: (["--max-model-len=1M"], 1048576, 1, False, False),
    11: (["--max-model-len", "2m"], 2000000, 1, False, False),
    # no flag (or a flag with no value) leaves the limit unknown
    12: (["--kv-cache-dtype", "fp8"], None, 0, False, False),
    13: (["--trust-remote-code", "--max-model-len"], None, 1, False, False),
    # near-miss spellings are not the flag
    14: (["--max-model-length", "100", "--max-model-len", "400000", "---max-model-len", "7"], 400000, 1, False, False),
    # vLLM reads '_' in an option's name as '-' (FlexibleArgumentParser): the same flag, in either form
    15: (["--max_model_len", "180000"], 180000, 1, False, False),
    16: (["--max-model-len", "400000", "--max_model_len=600000"], 600000, 2, True, True),
    17: (["--max-model_len=500000", "--max-model-len", "400000"], 400000, 2, True, True),
    # values as human_readable_int reads them: a decimal suffix is a double product truncated, a binary suffix takes
    # whole numbers only (vLLM refuses '1.5K' and '1.5': unknown), and a value past bigint is unknown, never capped
    18: (["--max-model-len", "4.1m"], 4099999, 1, False, False),
    19: (["--max-model-len=1.5K"], None, 1, False, False),
    20: (["--max-model-len", "400000.5"], None, 1, False, False),
    21: (["--max-model-len", "9223372036854775807"], 9223372036854775807, 1, False, False),
    22: (["--max-model-len", "9223372036854775808"], None, 1, False, False),
    23: (["--max-model-len", "0400000"], 400000, 1, False, False),
    # 0 is unknown (the escrow's max_model_len 0 likewise), never a limit that shows every request over it
    24: (["--max-model-len", "400000", "--max-model-len=0"], None, 2, True, True),
}


def test_model_args_forms_last_occurrence_and_human_readable_values(db_url, tmp_path, conn):
    load(db_url, tmp_path, [snapshot(args, epoch=e) for e, (args, *_) in ARGS_CASES.items()])
    got = {r[0]: r[1:] for r in rows(conn, "SELECT epoch_index, governance_limit, limit_source, flag_occurrences, "
                                           "mixed_forms, loophole_risk, model_args FROM api.model_limits")}
    want = {e: (limit, "model_args" if limit else None, occ, mixed, risk, args)
            for e, (args, limit, occ, mixed, risk) in ARGS_CASES.items()}
    assert got == want


def test_reference_models_deepseek_400000_and_minimax_180000(db_url, tmp_path, conn):
    f1_args = ["--max-model-len", "400000", "--kv-cache-dtype", "fp8", "--tokenizer-mode", "deepseek_v4",
               "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v4", "--reasoning-parser", "deepseek_v4",
               "--trust-remote-code"]
    load(db_url, tmp_path, [snapshot(f1_args), snapshot(["--max-model-len", "180000", "--trust-remote-code"],
                                                        model=MINIMAX)])
    assert set(rows(conn, "SELECT model_id, governance_limit, limit_source FROM api.model_limits "
                          "WHERE epoch_index = 408")) == {(MODEL, 400000, "model_args"),
                                                          (MINIMAX, 180000, "model_args")}


def _probe(log, prompt_tokens, max_tokens=4096):
    """A 0/0 refusal whose exact prompt count (family 3 text from a host at a lower limit) is `prompt_tokens`."""
    return log.refusal(5, max_tokens=max_tokens, payload=stored(fam3(100_000, prompt_tokens)))


def test_escrow_max_model_len_is_preferred_and_zero_is_ignored(db_url, tmp_path, conn):
    # epoch 408: args say 400000; escrow "e450" carries max_model_len 450000 (#1763), "e0" carries 0 (unknown)
    e450 = Log("e450", max_model_len=450000)
    over_args_fits_escrow = _probe(e450, 440000)          # 444096 <= 450000, but > 400000
    e0 = Log("e0", max_model_len=0, first_nonce=5000)
    fits_args = _probe(e0, GOV - 4096)                    # == 400000: fits the args limit
    over_args = _probe(e0, GOV - 4095)
    plain = Log("plain", first_nonce=9000)                # no max_model_len field at all
    fits_plain = _probe(plain, GOV - 4096)
    load(db_url, tmp_path, [gov_snapshot()] + e450.records + e0.records + plain.records)
    got = by_id(conn, "api.context_refusals", "escrow_id, governance_limit, limit_source, verdict")
    assert got == {over_args_fits_escrow: ("e450", 450000, "escrow", "fits"),
                   fits_args: ("e0", 400000, "model_args", "fits"),
                   over_args: ("e0", 400000, "model_args", "over_limit"),
                   fits_plain: ("plain", 400000, "model_args", "fits")}
    # the (epoch, model) row takes the escrows' non-zero max_model_len
    assert rows(conn, "SELECT governance_limit, limit_source, args_limit, escrow_limit FROM api.model_limits") == \
        [(450000, "escrow", 400000, 450000)]


def test_escrow_max_model_len_zero_alone_keeps_model_args(db_url, tmp_path, conn):
    e0 = Log("e0", max_model_len=0)
    _probe(e0, 1000)
    load(db_url, tmp_path, [gov_snapshot()] + e0.records)
    assert rows(conn, "SELECT governance_limit, limit_source, escrow_limit FROM api.model_limits") == \
        [(400000, "model_args", None)]


def test_escrow_limit_without_any_snapshot(db_url, tmp_path, conn):
    log = Log(max_model_len=180000, model=MINIMAX)
    iid = _probe(log, 175_904)  # + 4096 == 180000
    load(db_url, tmp_path, log.records)
    assert by_id(conn, "api.context_refusals", "governance_limit, limit_source, verdict") == \
        {iid: (180000, "escrow", "fits")}
    assert rows(conn, "SELECT model_id, governance_limit, limit_source FROM api.model_limits") == \
        [(MINIMAX, 180000, "escrow")]


def test_minimax_limit_judges_its_refusals(db_url, tmp_path, conn):
    log = Log(model=MINIMAX)
    fits = _probe(log, 180000 - 3072, max_tokens=3072)
    over = _probe(log, 180000 - 3071, max_tokens=3072)
    load(db_url, tmp_path, [snapshot(["--max-model-len", "180000"], model=MINIMAX)] + log.records)
    assert by_id(conn, "api.context_refusals", "governance_limit, verdict") == \
        {fits: (180000, "fits"), over: (180000, "over_limit")}


def test_a_refusing_hosts_stated_600000_is_never_the_governance_limit(db_url, tmp_path, conn):
    # Host B runs --max-model-len=600000 (the loophole) and refuses a 597000 + 4096 request; governance is 400000.
    log = Log()
    raised = log.refusal(5, payload=stored(fam4(600000, 597000, 4096)))
    # The same host states 600000 while the prompt would fit 400000 if 600000 were used: 395000 + 4096 <= 600000,
    # and also <= 400000 -> fits; judged against 400000 either way, but governance_limit must be 400000.
    stated = log.refusal(4, payload=stored(fam3(600000, 395000)))
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.context_refusals", "reported_limit, governance_limit, limit_source, verdict")
    assert got == {raised: (600000, 400000, "model_args", "over_limit"),
                   stated: (600000, 400000, "model_args", "fits")}
    assert rows(conn, "SELECT governance_limit FROM api.model_limits") == [(400000,)]


def test_without_governance_the_stated_limit_leaves_the_verdict_undetermined(db_url, tmp_path, conn):
    # No snapshot and no escrow max_model_len: the host's own 600000 must not become the limit.
    log = Log()
    iid = log.refusal(5, payload=stored(fam3(600000, 395000)))  # would "fit" 600000 (and 400000)
    load(db_url, tmp_path, log.records)
    assert by_id(conn, "api.context_refusals", "reported_limit, governance_limit, limit_source, verdict") == \
        {iid: (600000, None, None, "undetermined")}
    assert rows(conn, "SELECT model_id, governance_limit, limit_source FROM api.model_limits") == [(MODEL, None, None)]
