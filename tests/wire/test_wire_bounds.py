"""A chain or host answer whose values are past their bound (indexer.records.BOUNDS) is refused with a one-line
reason naming the field, its length and the bound, before anything is fetched or stored from it."""
from __future__ import annotations

import pytest

from indexer.records import ADDRESS_LEN, ARGS, MAX_PARTICIPANTS, MAX_SLOTS, NAME_LEN, URL_LEN
from indexer.sources.gonka.urls import UnsafeUrl, check_host_url
from indexer.wire.chain_records import excluded_participants, validation_weights
from indexer.wire.normalize import NormalizeError, escrow_record, model_snapshot_record

ESCROW = {"id": "7", "epoch_index": "408", "model_id": "m", "slots": ["gonka1a"] * 16, "creator": "gonka1u"}


def _escrow(**over):
    return escrow_record({"escrow": {**ESCROW, **over}, "found": True})


def test_an_escrow_within_its_bounds_maps():
    rec = _escrow(slots=["g" * ADDRESS_LEN] * MAX_SLOTS, model_id="m" * NAME_LEN)
    assert len(rec["slots"]) == MAX_SLOTS


@pytest.mark.parametrize("over, message", [
    ({"slots": ["gonka1a"] * (MAX_SLOTS + 1)}, f"slots: {MAX_SLOTS + 1} entries, more than the {MAX_SLOTS} allowed"),
    ({"slots": ["gonka1a", "g" * (ADDRESS_LEN + 1)]}, f"slots[1]: {ADDRESS_LEN + 1} characters"),
    ({"model_id": "m" * 100_000}, f"model_id: 100000 characters, more than the {NAME_LEN} allowed"),
    ({"creator": "u" * (ADDRESS_LEN + 1)}, "creator: "),
])
def test_an_escrow_past_a_bound_is_refused_naming_the_field(over, message):
    with pytest.raises(NormalizeError) as caught:
        _escrow(**over)
    assert message in str(caught.value) and "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_a_model_snapshot_with_too_many_args_is_refused():
    group = {"epoch_group_data": {"epoch_index": "408", "model_id": "m",
                                  "model_snapshot": {"model_args": ["--x"] * (ARGS + 1)}}}
    with pytest.raises(NormalizeError, match=f"model_args: {ARGS + 1} entries"):
        model_snapshot_record(group)


def test_participant_lists_and_addresses_are_bounded():
    with pytest.raises(NormalizeError, match="validation_weights: .* entries"):
        validation_weights({"validation_weights": [{"member_address": "g"}] * (MAX_PARTICIPANTS + 1)})
    with pytest.raises(NormalizeError, match="member_address: .* characters"):
        validation_weights({"validation_weights": [{"member_address": "g" * (ADDRESS_LEN + 1)}]})
    with pytest.raises(NormalizeError, match=r"items\[\]\.reason: .* characters"):
        excluded_participants({"items": [{"address": "g", "reason": "r" * 10_000}]}, 1)


def test_a_host_url_past_its_bound_is_refused_before_it_is_parsed():
    url = "https://host.example/" + "a" * URL_LEN
    with pytest.raises(UnsafeUrl, match=f"characters, more than the {URL_LEN} allowed") as caught:
        check_host_url(url)
    assert len(str(caught.value)) < 400
