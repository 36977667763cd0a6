"""One meaning of "client fault" everywhere (gonka-devshard.md §3.6: a 0/0 Finish whose stored payload is a client
fault), three-valued: a 0/0 Finish without a stored payload is unknown (NULL), not true and not false.

The same refusal, with (a) a context-length payload, (b) another client-fault payload, (c) a server-error payload,
(d) no payload, seen through api.inferences.is_client_fault, api.sibling_findings (the sibling rule of §2.4),
api.challenges and api.disputable_penalties. Before fn.is_client_fault_finish these disagreed on (d): the view said
unknown, the sibling rule and the challenges said client fault."""
from __future__ import annotations

import pytest

from tests.support.rules_kit import GOV, TOOL_CHOICE, B, Log, by_id, fam6_at_least, gov_snapshot, load, rows, stored

CASES = {  # payload, is it a client fault (None: unknown), is it (or may it be) a context-length refusal
    "a_context_length": (stored(fam6_at_least(GOV, 4096)), True, True),
    "b_other_client_fault": (stored(TOOL_CHOICE), True, False),
    "c_server_error": (stored("Internal Server Error", code=500), False, False),
    "d_no_payload": (None, None, True),
    # the chain's IsClientFaultError takes only codes printing as 400 or 422: a context-length wording with a null
    # code (vLLM 0.1-0.2's flat body) is not a client fault there, so the penalties on it stand
    "e_null_code": (stored(fam6_at_least(GOV, 4096), code=None, etype="invalid_request_error", flat=True), False,
                    False),
}


def not3(x: bool | None) -> bool | None:
    """SQL's three-valued NOT."""
    return None if x is None else not x


@pytest.fixture
def seen(db_url, tmp_path, conn):
    """Per case: one refusal error-missed (no sibling), one challenged and invalidated; each case's own prompt."""
    log = Log()
    ids = {}
    for name, (payload, _, _) in CASES.items():
        missed = log.refusal(5, payload=payload)
        log.error_miss(missed)
        invalidated = log.refusal(5, payload=payload)
        log.invalidate(invalidated)
        ids[name] = (missed, invalidated)
    load(db_url, tmp_path, [gov_snapshot()] + log.records)
    return ids


def test_every_view_agrees_on_the_client_fault(seen, conn):
    inferences = by_id(conn, "api.inferences", "status, is_client_fault")
    siblings = by_id(conn, "api.sibling_findings",
                     "applied, client_fault_basis, accepted_current_rule, accepted_hardened_rule")
    challenges = by_id(conn, "api.challenges", "outcome, is_client_fault_finish")
    disputable = {(r[0], r[1]) for r in rows(conn, "SELECT inference_id, rule FROM api.disputable_penalties "
                                                   "WHERE participant = %s", B)}
    for name, (missed, invalidated) in seen.items():
        _, fault, context = CASES[name]
        # api.inferences: the function's three values, for either inference
        assert inferences[missed] == ("TimedOut", fault), name
        assert inferences[invalidated] == ("Invalidated", fault), name
        # the sibling rule, no sibling: verifiers accept the error-miss iff the Finish is not a client fault; the
        # formula stays three-valued, and the basis names what the question rests on
        basis = {True: "payload", None: "zero_zero_presumed", False: None}[fault]
        assert siblings[missed] == (True, basis, not3(fault), not3(fault)), name
        # api.challenges: a NOT NULL column, where unknown is decided as a client fault (50_challenges.sql)
        assert challenges[invalidated] == ("Invalidated", True if fault is None else fault), name
        # a penalty on a Finish that is, or may be, a client fault is disputable (60_disputable.sql); the
        # invalidation family only for context-length refusals (or unknown ones), the miss family for any
        assert ((missed, "error_miss_sibling") in disputable) == (fault is not False), name
        assert ((invalidated, "invalidated_context_refusal") in disputable) == (fault is not False and context), name
    assert len(disputable) == 5


@pytest.mark.parametrize("tokens, has_payload, parsed, want", [
    ((None, None), False, None, False),    # no Finish
    ((1000, 100), False, None, False),     # served
    ((0, 4096), True, True, False),        # billed: output before or with the error is not a client fault Finish
    ((1000, 0), True, True, False),        # not 0/0 (a parse left by an earlier payload does not answer)
    ((0, 0), True, True, True),            # the payload says client fault
    ((0, 0), True, False, False),          # the payload says otherwise
    ((0, 0), False, None, None),           # no payload: unknown
    ((0, 0), False, True, None),           # no payload now; a parse of an earlier one does not answer
    ((0, 0), True, None, None),            # a payload not parsed yet: unknown
])
def test_is_client_fault_finish_truth_table(conn, tokens, has_payload, parsed, want):
    got = conn.execute("SELECT fn.is_client_fault_finish(%s::bigint, %s::bigint, %s, %s)",
                       (*tokens, has_payload, parsed)).fetchone()[0]
    assert got is want
