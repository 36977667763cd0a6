"""The check that ties a stored response payload to the Finish that signed for it.

A Finish commits to its stored body with ``response_hash = sha256(storedBody)`` (gonka-devshard.md §2.1 step 3).
A validator takes a payload from a host only when it passes that check: ``fetchPayloadsFromExecutor`` hashes the
``[]byte`` the host served (``PayloadResponse.ResponsePayload``, base64 in the JSON answer, decoded) and compares the
32 raw bytes with the Finish's ``ResponseHash`` (``bytes.Equal``), rejecting the payload otherwise
(gonka-ai/gonka devshard/cmd/devshardd/inference/validate.go @ 03f084a3030b678d0caee15f604da5dca281f8e5). The
indexer keeps a payload as the UTF-8 text of those bytes (indexer.sources.gonka.host.stored_response_payload) and
a hash as lowercase hex, so the same check here is over ``payload.encode("utf-8")`` against the hex digest.

A Finish without a response hash cannot vouch for any payload: ``bytes.Equal`` of a sha256 with an empty hash is
false, so upstream no payload of it is ever accepted, and neither is one here (:func:`checkable`).
"""
from __future__ import annotations

import hashlib


def response_hash_of(payload: str) -> str:
    """sha256 of the payload's bytes, as lowercase hex (the form a Finish record carries ``response_hash`` in)."""
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def checkable(expected: str | None) -> bool:
    """Whether a Finish's ``response_hash`` can vouch for a payload at all (present and not empty)."""
    return bool(expected)


def mismatch(payload: str, expected: str | None) -> str | None:
    """None when ``payload`` is the body ``expected`` (a Finish's response hash, hex) commits to; else the reason,
    naming both hashes. A Finish without a response hash vouches for nothing: that is a reason too."""
    if not checkable(expected):
        return "the Finish carries no response_hash, so no payload can be checked against it"
    got = response_hash_of(payload)
    if got == expected.lower():  # type: ignore[union-attr]
        return None
    return f"sha256 of the payload is {got}, not the Finish's response_hash {expected}"
