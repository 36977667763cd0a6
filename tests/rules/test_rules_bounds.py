"""Per-escrow token bounds (rules.escrow_limit.max_input_tokens / max_served_tokens, from one walk over the escrow's
Finishes) only spare work: suspects are sought only in escrows that served above their limit, and a timeout's
sibling is probed only if the escrow's largest input could show it over the limit. They never hide a finding."""
from __future__ import annotations

from tests.support.rules_kit import B, D, GOV, Log, by_id, fam6_at_least, gov_snapshot, load, new_hash, rows, stored


def _timeout(log, name, ids, max_tokens=4096, sibling_input=None, reason="refused"):
    h = new_hash()
    if sibling_input is not None:
        log.served(6, h, input_tokens=sibling_input, output_tokens=10)
    ids[name] = log.start(5, h, max_tokens=max_tokens)
    if reason == "execution":
        log.confirm(ids[name])
    log.timeout(ids[name], reason)


def test_bounds_open_only_what_can_qualify_and_hide_nothing(db_url, tmp_path, conn):
    ids: dict[str, int] = {}
    # "open": the escrow's largest input (an unrelated prompt) is near the limit, so every timeout is probed
    near = Log("open")
    near.served(7, input_tokens=GOV - 10, output_tokens=5)
    _timeout(near, "small_sibling", ids, sibling_input=1000)                 # probed, fits: not disputable
    _timeout(near, "over_by_sibling", ids, sibling_input=GOV - 4095)         # GOV - 4095 + 4096 > GOV
    _timeout(near, "no_max_tokens", ids, max_tokens=None, sibling_input=GOV)  # sibling alone at the limit
    # "closed": every Finish is small, so no sibling can show a timeout over the limit
    far = Log("closed", first_nonce=5000)
    _timeout(far, "closed_small", ids, sibling_input=2000, reason="execution")
    _timeout(far, "closed_max_tokens", ids, max_tokens=GOV + 1, sibling_input=3000)  # over by max_tokens alone
    # "served": one Finish served exactly the limit, another one more: only the latter is a suspect
    served = Log("served", first_nonce=9000)
    served.served(9, input_tokens=GOV - 100, output_tokens=100)
    ids["served_above"] = served.served(9, input_tokens=GOV - 100, output_tokens=101)
    load(db_url, tmp_path, [gov_snapshot()] + near.records + far.records + served.records)

    assert dict(rows(conn, "SELECT escrow_id, (max_input_tokens, max_served_tokens)::text FROM rules.escrow_limit")) \
        == {"open": f"({GOV},{GOV + 10})", "closed": "(3000,3010)", "served": f"({GOV - 100},{GOV + 1})"}

    got = {r[0]: r[1:] for r in rows(conn, "SELECT inference_id, participant, evidence->>'shown_by', "
                                           "(evidence->>'sibling_input_tokens')::bigint "
                                           "FROM api.disputable_penalties WHERE rule = 'timeout_over_limit'")}
    name = {v: k for k, v in ids.items()}
    assert {name[i]: v for i, v in got.items()} == {
        "over_by_sibling": (B, "sibling", GOV - 4095),
        "no_max_tokens": (B, "sibling", GOV),
        # the sibling is still reported when max_tokens alone shows the request over the limit
        "closed_max_tokens": (B, "max_tokens", 3000),
    }
    assert rows(conn, "SELECT participant, escrow_id, inference_id, observed_tokens FROM rules.suspect "
                      "WHERE evidence_kind = 'served_above_limit' AND escrow_id = 'served'") \
        == [(D, "served", ids["served_above"], GOV + 1)]


TOP = 2 ** 63 - 1  # the largest count a record carries


def test_counts_at_the_top_of_their_range_add_without_stopping_the_rules(db_url, tmp_path, conn):
    # prompt + max_tokens and input + output are sums of two counts up to 2^63 - 1: in bigint they overflowed and
    # the rules stage of the epoch failed on every run. The limit is TOP too (the escrow's own max_model_len), so
    # only the exact sums decide.
    ids: dict[str, int] = {}
    log = Log("top", max_model_len=TOP)
    ids["served_past"] = log.served(9, input_tokens=TOP, output_tokens=TOP)           # a suspect, sum unknown
    ids["served_at"] = log.served(9, input_tokens=TOP - 1, output_tokens=1)          # exactly the limit: none
    ids["refused_over"] = log.refusal(5, max_tokens=TOP - 1, input_length=TOP - 1)    # shown over by the sum
    h = new_hash()
    ids["sibling"] = log.served(6, h, input_tokens=TOP - 1, output_tokens=10)       # its sibling (a suspect too)
    ids["timeout"] = log.start(5, h, max_tokens=TOP - 1)
    log.timeout(ids["timeout"], "refused")
    load(db_url, tmp_path, [gov_snapshot()] + log.records)

    assert rows(conn, "SELECT governance_limit, max_served_tokens FROM rules.escrow_limit") == [(TOP, TOP)]
    assert rows(conn, "SELECT inference_id, observed_tokens FROM api.raised_limit_suspects "
                      "WHERE evidence_kind = 'served_above_limit' ORDER BY 1") == [
        (ids["served_past"], None), (ids["sibling"], None)]
    verdicts = dict(rows(conn, "SELECT inference_id, verdict FROM api.disputable_penalties"))
    assert verdicts.get(ids["timeout"]) == "over_limit"


def test_the_sibling_rules_at_the_top_of_the_range(db_url, tmp_path, conn):
    # sibling input_tokens + this request's max_tokens, both up to 2^63 - 1, against a limit of 2^63 - 1: exact sums,
    # never an overflow or a float
    log = Log("top", max_model_len=TOP)
    c = {}
    for name, (sibling_input, max_tokens) in {"over": (1, TOP), "fits": (1, TOP - 1), "big_prompt_fits": (TOP - 5, 5),
                                              "big_prompt_over": (TOP - 5, 6)}.items():
        h = new_hash()
        c[name] = log.refusal(5, h, max_tokens=max_tokens, payload=stored(fam6_at_least(GOV, 4096)))
        log.served(6, h, input_tokens=sibling_input, output_tokens=1)
        log.error_miss(c[name])
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    got = by_id(conn, "api.sibling_findings", "accepted_current_rule, accepted_hardened_rule")
    assert {k: got[i] for k, i in c.items()} == {"over": (True, False), "fits": (True, True),
                                                  "big_prompt_fits": (True, True), "big_prompt_over": (True, False)}
    assert set(by_id(conn, "api.disputable_penalties", "rule")) == {c["over"], c["big_prompt_over"]}
