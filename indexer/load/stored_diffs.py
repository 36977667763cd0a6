"""A ``signed_diff`` record as stored (base64 content, hex signature and roots) turned into the bytes its user signed:
the one reading shared by the verification stage's bundle (:mod:`indexer.replay.bundling`) and the loader, which
asks it only when two records of one diff disagree (:mod:`indexer.load.signed_conflicts`). It lives with the loader,
below the replay, because it needs the wire's ``signs_whole`` beside the pure checks of :mod:`indexer.verify`, which
import nothing of the indexer; the verifier's identity hashes it (:mod:`indexer.replay.verifier`)."""
from __future__ import annotations

import base64
import binascii

from indexer.verify import bundle as bd, diff, proto as pb, signatures as sig
from indexer.wire.diffs import signs_whole, user_signed_bytes

NO_ROOT = ("no signed root captured (neither post_state_root in the content nor a stored post_state_root or "
           "state_hash): the signed check is not made")


class StoredDiffError(ValueError):
    """A stored diff whose signed bytes cannot be formed. ``fails``: the record shows the signed check fails; False
    when something is only missing (the check is then not made)."""

    def __init__(self, reason: str, fails: bool = True):
        super().__init__(reason)
        self.fails = fails


def signed_diff(escrow_id: str, nonce: int, content: str, user_sig: str | None, root: str | None,
                state_hash: str | None) -> bd.SignedDiff:
    """The diff as the verifier reads it: the nonce it lists is the one inside its signed content (``nonce``, the
    record's, when the content cannot be read, which the replay check then reports). Content served as
    ``DiffContent{nonce, txs}`` is signed with the escrow id and the signed root appended; where the serving build
    left that omitempty root out, the host's ``state_hash`` stands in, as the poller's check takes it
    (:func:`indexer.poller.decode.check_signed`): the signature decides."""
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise StoredDiffError("content is not base64") from None
    if not user_sig:
        raise StoredDiffError("no user signature captured")
    parsed = _content_of(data)
    if parsed is None or not signs_whole(parsed.escrow_id, parsed.post_state_root, parsed.sealed_inference_ids):
        signed_root = root or state_hash
        if not signed_root and parsed is not None:
            # the user signed the content with its root appended: without one the check cannot be made, and
            # evidence that is only missing is not a failure (the poller does not store such a diff)
            raise StoredDiffError(NO_ROOT, fails=False)
        data = user_signed_bytes(data, escrow_id, bytes.fromhex(signed_root or ""))  # hex: checked at load
    if parsed is not None:  # the appended fields 3 and 4 change neither the nonce nor whether the content reads
        nonce = parsed.nonce
    return bd.SignedDiff(nonce, data, bytes.fromhex(user_sig))


def creator_signed(escrow_id: str, creator: str, content: str, user_sig: str | None, root: str | None,
                   state_hash: str | None) -> str | None:
    """None when the record passes the signed check against ``creator`` (its user signature recovers to it, over a
    diff of this escrow in the deterministic encoding: :func:`indexer.verify.diff.check_user_signed`), else why
    not (the signed check's reason)."""
    try:
        d = signed_diff(escrow_id, 0, content, user_sig, root, state_hash)
        diff.check_user_signed(d.content, d.user_sig, creator, escrow_id, sig.recover_address)
    except (StoredDiffError, diff.DiffError) as exc:
        return str(exc)
    return None


def _content_of(data: bytes):
    """The parsed DiffContent, None when it does not read as one (e.g. a truncated packed varint in field 5: the
    replay names it)."""
    try:
        return diff.content_of(pb.fields(data))
    except (diff.DiffError, pb.ProtoError):
        return None
