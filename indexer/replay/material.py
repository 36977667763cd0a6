"""One escrow's stored evidence as the verification stage and ``indexer evidence`` read it: ``rec.escrow`` (the
session inputs), ``rec.signed_diff`` in nonce order, ``rec.settlement``, the epoch's ``devshard_escrow_params`` and
warm-key grants, and optionally the recoveries the escrow's last verification kept (indexer.replay.verify_memo) and
the tx records the replay read, to compare with the signed log (indexer.verify.txrecords)."""
from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from indexer.records import KINDS
from indexer.replay import verify_memo as vm
from indexer.verify import txrecords as txr

_ESCROW = ("escrow_id", "epoch_index", "slots", "vote_threshold_factor", "protocol_version", "settled", "creator",
           "amount", "token_price", "create_devshard_fee", "fee_per_nonce", "inference_seal_grace_nonces",
           "inference_seal_grace_seconds", "auto_seal_every_n_nonces", "execution_timeout")
_SETTLEMENT = ("escrow_id", "tx_hash", "height", "settler", "state_root", "rest_hash", "nonce", "fees",
               "state_root_and_protocol_version", "host_stats", "signatures", "msg", "tx_raw", "extra")


@dataclass
class Material:
    """One escrow's stored evidence, as read from the database."""
    escrow: dict
    # (nonce, content, user_sig, source_host, post_state_root, state_hash)
    diffs: list[tuple] = field(default_factory=list)
    settlement: dict | None = None
    params: dict | None = None  # the epoch's devshard_escrow_params; None when not captured or not its own
    params_gap: str | None = None  # why captured params are not used: live values read after the epoch ended
    warm_keys: dict = field(default_factory=dict)  # participant -> its warm keys read as of the epoch's end
    captured: dict = field(default_factory=dict)  # participant -> some reading of its grants was as of the epoch end
    memo: vm.Memo | None = None  # the recoveries kept by the escrow's last verification (read with ``memo=True``)
    records: list[txr.Entry] | None = None  # its tx records, as the replay reads them (read with ``records=True``)


def record_columns(kind: str) -> tuple[str, str, list[str]]:
    """(table, slot column or NULL, compared columns) of one tx record kind: what the comparison with the signed
    log reads, and what the evidence digest covers (indexer.replay.verification)."""
    slot = txr.SLOT_KEYS.get(kind, "NULL::integer")
    return f"rec.{KINDS[kind].table}", slot, ["diff_nonce", "tx_index", *txr.FIELDS[kind]]


def load_material(conn: psycopg.Connection, ids: list[str], memo: bool = False,
                  records: bool = False) -> dict[str, Material]:
    """The stored evidence of the escrows ``ids`` (those in rec.escrow), one query per table; with ``memo``, also
    the recoveries their last verification kept; with ``records``, also their tx records."""
    out: dict[str, Material] = {}
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(_ESCROW)} FROM rec.escrow WHERE escrow_id = ANY(%s) ORDER BY escrow_id",
                    (ids,))
        for row in cur:
            out[row[0]] = Material(dict(zip(_ESCROW, row)))
        epochs = sorted({m.escrow["epoch_index"] for m in out.values() if m.escrow["epoch_index"] is not None})
        # the tables are partitioned by epoch (docs/partitioning.md): naming the epochs reads only those partitions
        cur.execute("SELECT escrow_id, nonce, content, user_sig, source_host, post_state_root, state_hash "
                    "FROM rec.signed_diff WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s) ORDER BY escrow_id, nonce", (ids, epochs))
        for escrow_id, *row in cur:
            if escrow_id in out:
                out[escrow_id].diffs.append(tuple(row))
        cur.execute(f"SELECT {', '.join(_SETTLEMENT)} FROM rec.settlement "
                    "WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s)", (ids, epochs))
        for row in cur:
            if row[0] in out:
                out[row[0]].settlement = dict(zip(_SETTLEMENT, row))
        params = _params(cur, epochs)
        grants, captured = _warm_key_rows(cur, epochs)
        if memo:
            cur.execute("SELECT escrow_id, prefix_nonces, prefix_chain, prefix_signers, prefix_recoveries "
                        "FROM replay.escrow_verification WHERE escrow_id = ANY(%s) AND prefix_nonces > 0", (ids,))
            for escrow_id, *stored in cur:
                if escrow_id in out:
                    out[escrow_id].memo = vm.unpack(*stored)
        if records:
            _tx_records(cur, out, ids, epochs)
    for m in out.values():
        m.params, m.params_gap = params.get(m.escrow["epoch_index"], (None, None))
        m.warm_keys = grants.get(m.escrow["epoch_index"], {})
        m.captured = captured.get(m.escrow["epoch_index"], {})
    return out


def _tx_records(cur: psycopg.Cursor, out: dict[str, Material], ids: list[str], epochs: list[int]) -> None:
    """The tx records of every kind of each escrow with a signed log (nothing to compare them with otherwise), one
    query per tx table (partitioned by epoch, as the replay reads)."""
    ids = [i for i in ids if i in out and out[i].diffs]
    if not ids:
        return
    for escrow_id in ids:
        out[escrow_id].records = []
    for kind in txr.FIELDS:
        table, slot, columns = record_columns(kind)
        cur.execute(f"SELECT escrow_id, inference_id, {slot}, {', '.join(columns)} FROM {table} "
                    "WHERE escrow_id = ANY(%s) AND epoch_index = ANY(%s)", (ids, epochs))
        votes = columns.index("votes") - 2 if "votes" in columns else None
        for escrow_id, inference_id, slot_id, nonce, tx_index, *values in cur:
            if out[escrow_id].records is not None:
                if votes is not None:
                    values[votes] = None if values[votes] is None else tuple(
                        (v["voter_slot"], v["accept"]) for v in values[votes])
                out[escrow_id].records.append(txr.record_entry(kind, inference_id, slot_id, nonce, tx_index,
                                                               tuple(values)))


# An ended epoch's params read live (params_exact not true: its end height pruned on the node asked, or not recorded)
# are today's, not the epoch's: governance may have changed approved_versions, max_nonce or execution_timeout since.
# While the epoch runs, the live values are its own.
_PARAMS = """
SELECT p.epoch_index, p.devshard_escrow_params, p.params_exact IS TRUE, e.end_height
FROM rec.epoch_params p LEFT JOIN rec.epoch e ON e.epoch_index = p.epoch_index
WHERE p.epoch_index = ANY(%s)
"""


def _params(cur: psycopg.Cursor, epochs: list[int]) -> dict:
    """epoch -> (devshard_escrow_params to use or None, why captured ones are not used or None)."""
    cur.execute(_PARAMS, (epochs,))
    out = {}
    for epoch, params, exact, end_height in cur.fetchall():
        if params is not None and not exact and end_height is not None:
            out[epoch] = (None, f"the devshard_escrow_params captured for epoch {epoch} were read from live values "
                                f"after the epoch ended (at height {end_height}), not as of it")
        else:
            out[epoch] = (params, None)
    return out


def _warm_key_rows(cur: psycopg.Cursor, epochs: list[int]) -> tuple[dict, dict]:
    """(epoch -> participant -> grantees read as of the epoch's end, epoch -> participant -> exact) from
    rec.warm_key: a participant is captured when it has any row (an empty grantee: read, none granted), and exact
    when any row of it was read as of the epoch's end (read_exact null, not recorded, counts as not). An exact
    participant's grants are its exact rows only: rows are never deleted, so a live reading stored before the
    exact one (or loaded after it with another grantee) stays beside it and must neither hide nor add a grant."""
    cur.execute("SELECT epoch_index, participant, grantee, read_exact IS TRUE FROM rec.warm_key "
                "WHERE epoch_index = ANY(%s) ORDER BY 1, 2, 3", (epochs,))
    grants: dict = {}
    captured: dict = {}
    for epoch, participant, grantee, exact in cur:
        seen = captured.setdefault(epoch, {})
        seen[participant] = seen.get(participant, False) or exact
        if grantee and exact:
            grants.setdefault(epoch, {}).setdefault(participant, []).append(grantee)
    return grants, captured
