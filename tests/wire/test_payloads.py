"""The payload check (indexer.wire.payloads): sha256 of the payload's UTF-8 bytes against the Finish's hex hash."""
from __future__ import annotations

import hashlib

from indexer.wire.payloads import checkable, mismatch, response_hash_of

BODY = '{"events":["data: {\\"error\\":{\\"code\\":400,\\"message\\":\\"é\\"}}","data: [DONE]"]}'


def test_the_hash_is_over_the_utf8_bytes_of_the_stored_body():
    assert response_hash_of(BODY) == hashlib.sha256(BODY.encode("utf-8")).hexdigest()
    assert response_hash_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_a_payload_matches_its_finish_s_hash_in_either_case_and_nothing_else():
    assert mismatch(BODY, response_hash_of(BODY)) is None
    assert mismatch(BODY, response_hash_of(BODY).upper()) is None
    assert mismatch(BODY + " ", response_hash_of(BODY)) == (
        f"sha256 of the payload is {response_hash_of(BODY + ' ')}, not the Finish's response_hash "
        f"{response_hash_of(BODY)}")


def test_a_finish_without_a_response_hash_vouches_for_no_payload():
    for missing in (None, ""):
        assert not checkable(missing)
        assert mismatch(BODY, missing) == "the Finish carries no response_hash, so no payload can be checked against it"
    assert checkable(response_hash_of(BODY))
