"""A disputable finding's evidence stated as a derivation the standalone verifier re-derives: the first of
fn.shown_over_limit's three cases its numbers decide, or why none can be stated."""
from __future__ import annotations

import pytest

from indexer.rules.evidence import derivation, snake

SOURCE = {"parameter": "max_model_len", "epoch": 272, "source": "escrow"}


@pytest.mark.parametrize("rule, evidence, terms, compare, holds", [
    ("timeout_over_limit", {"governance_limit": 40, "max_tokens": 50}, ("max_tokens",), ">", True),
    ("invalidated_context_refusal", {"governance_limit": 4096, "max_tokens": 10, "prompt_tokens": 4096},
     ("prompt_tokens",), ">=", True),
    ("error_miss_sibling", {"governance_limit": 4096, "max_tokens": 100, "sibling_input_tokens": 4000},
     ("sibling_input_tokens", "max_tokens"), ">", True),
    ("invalidated_context_refusal", {"governance_limit": 4096, "max_tokens": 10, "prompt_tokens": 100},
     ("prompt_tokens", "max_tokens"), ">", False),  # undetermined: the numbers do not show it over the limit
])
def test_the_case_the_numbers_decide_is_stated(rule, evidence, terms, compare, holds):
    p = derivation(rule, "over_limit", {**evidence, "input_length": 7, "unrelated": 1}, "TimedOut", 19, SOURCE)
    assert (p.sum, p.compare, p.against, p.holds) == (terms, compare, "governance_limit", holds)
    assert p.status == "timed_out" and p.rule == f"{rule} (over_limit)" and p.limit_source == SOURCE
    assert "unrelated" not in p.numbers and p.numbers["input_length"] == 7


@pytest.mark.parametrize("evidence, reason", [
    ({"max_tokens": 50}, "no governance limit in its evidence"),
    ({"governance_limit": 40, "max_tokens": 10}, "its prompt count and max_tokens are not both known"),
    ({"governance_limit": 40, "prompt_tokens": 10}, "its prompt count and max_tokens are not both known"),
    ({"governance_limit": "40", "max_tokens": 50}, "no governance limit in its evidence"),
])
def test_a_finding_without_deciding_numbers_says_why(evidence, reason):
    assert reason in derivation("invalidated_context_refusal", "undetermined", evidence, "Invalidated", 3, {})


def test_status_names_match_the_verifier():
    assert [snake(s) for s in ("Pending", "Started", "Finished", "Challenged", "Validated", "Invalidated",
                               "TimedOut")] == ["pending", "started", "finished", "challenged", "validated",
                                                "invalidated", "timed_out"]
