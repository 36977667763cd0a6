"""What a record does to a stored (or staged) record of the same key: SQL fragments for the upsert
(indexer.load.statements.upsert_statement), so that the same records give the same rows in any load order.

Tx kinds are keyed without their ``diff_nonce`` (one Start per inference, one validation per slot, ...). Two records
of one key at different nonces are two txs, not an amendment: the protocol applies the first (a second
Start/Finish/timeout of an inference is refused by the state machine, a second validation or vote by the same address
is ignored: gonka-devshard.md 3.2-3.4), so the one with the LOWER diff_nonce is stored, whichever is loaded first,
and the other is quarantined with a reason naming its key, both nonces and where the kept one came from. A stored tx
that a lower-nonce one displaces is quarantined under its own file and line. Records of one key at the same nonce
are one tx: the later line amends the earlier, as for every other kind.

A later record that leaves an optional field out (absent and JSON null type alike) keeps the stored value: an
amendment replaces the values it carries, it does not erase the others (null is "not published here", never "zero"
or "cleared"). A stored ``response_payload`` is kept only while the Finish's ``response_hash`` is the one it was
served under. Kinds in :data:`WHOLE_READINGS` are one reading as a whole (a signed diff, a settlement transaction,
an epoch's parameter snapshot read at one height): mixing two readings' fields would make evidence no source ever
published, so a later one replaces the stored one whole. The one exception is the host a signed diff was served by:
the same evidence from several hosts keeps the least host name, so that which host is named does not depend on
which was loaded last.
"""
from __future__ import annotations

from indexer.records import KINDS, Kind

NONCE_KINDS = frozenset(name for name, kind in KINDS.items() if "diff_nonce" in kind.columns)
WHOLE_READINGS = frozenset({"signed_diff", "settlement", "epoch_params"})
_SHOWN = 80  # characters of a key value a quarantine reason shows (a peer's escrow id may be long)


def record_json(kind: Kind, alias: str = "") -> str:
    """SQL text: the record of a row (``alias.``-prefixed columns) as its normalized NDJSON object (what export
    writes, and what a quarantined stored record keeps as its raw line)."""
    pairs = ", ".join(f"'{c}', {alias}{c}" for c in kind.columns)
    return f"(jsonb_strip_nulls(jsonb_build_object('kind', '{kind.name}', {pairs})) || coalesce({alias}extra, '{{}}'))"


# a signed diff's evidence: two records of one diff that carry the same are one reading, whichever host served it
SIGNED_EVIDENCE = ("content", "user_sig", "post_state_root", "state_hash")


def src_order(kind: Kind) -> str:
    """ORDER BY after the key for the batch's one row per key: the lowest nonce, then the last line (a signed
    diff: the least host that served it first, as :func:`merged` keeps across batches; an epoch's parameters: the
    exact reading, then the highest height, as the upsert keeps them across batches)."""
    if kind.name == "signed_diff":
        return "source_host NULLS LAST, line DESC"
    if kind.name == "epoch_params":  # the reading that stays across batches (indexer.load.statements.KEEP_STORED)
        return "params_exact IS TRUE DESC, params_height DESC NULLS LAST, line DESC"
    return "diff_nonce, line DESC" if kind.name in NONCE_KINDS else "line DESC"


def src(kind: Kind, stage: str, columns: list[str], merge: bool) -> str:
    """The batch's one row per key (``line``, ``columns``, ``extra``). With ``merge`` (a batch that repeats a key),
    each optional field of that row takes the last value the key's lines of the same tx carry, so that lines of one
    key inside a batch combine as they do across batches (:func:`merged`); unknown fields are the chosen line's."""
    keys = ", ".join(kind.key)
    if not merge or kind.name in WHOLE_READINGS:
        return f"SELECT DISTINCT ON ({keys}) * FROM {stage} ORDER BY {keys}, {src_order(kind)}"
    tx = keys + (", diff_nonce" if kind.name in NONCE_KINDS else "")
    values = []
    for c in columns:
        if c in kind.key or c not in kind.columns or kind.field(c).required:
            values.append(c)
            continue
        part = tx + (", response_hash" if (kind.name, c) == ("finish", "response_payload") else "")
        first = "settled IS NOT TRUE, " if (kind.name, c) == ("escrow", "settled") else ""  # as merged() keeps it
        values.append(f"first_value({c}) OVER (PARTITION BY {part} ORDER BY {first}{c} IS NULL, line DESC) AS {c}")
    return (f"SELECT DISTINCT ON ({keys}) line, {', '.join(values)}, extra FROM {stage} "
            f"ORDER BY {keys}, {src_order(kind)}")


def displaces(kind: Kind) -> str:
    """SQL on the stored row t and the incoming row s: s is an earlier tx of t's key, stored in t's place."""
    return "t.diff_nonce > s.diff_nonce" if kind.name in NONCE_KINDS else "false"


def stays(kind: Kind) -> str:
    """SQL on t and s: t is the earlier tx of the key, so s is not stored (it is quarantined: :func:`other_txs`)."""
    return "t.diff_nonce < s.diff_nonce" if kind.name in NONCE_KINDS else "false"


def merged(kind: Kind, column: str) -> str:
    """SQL: the value ``column`` takes when s amends t (s's when it has one, else t's where the kind allows it)."""
    if (kind.name, column) == ("signed_diff", "source_host"):
        # the same diff served by several hosts: the least host names it, in any load order (a record with other
        # evidence replaces the stored one whole, its host with it)
        same = " AND ".join(f"t.{c} IS NOT DISTINCT FROM s.{c}" for c in SIGNED_EVIDENCE)
        return f"CASE WHEN {same} THEN least(t.source_host, s.source_host) ELSE s.source_host END"
    if kind.name in WHOLE_READINGS or (column != "extra" and kind.field(column).required):
        return f"s.{column}"
    if (kind.name, column) == ("escrow", "settled"):
        # the chain never unsettles an escrow: a reading that says settled stays, whichever is loaded last (an
        # earlier reading, or a node behind, says false)
        return "CASE WHEN t.settled OR s.settled THEN true ELSE coalesce(s.settled, t.settled) END"
    if column == "extra":  # unknown fields: the union, the incoming record's values first
        keep = "CASE WHEN t.extra IS NULL THEN s.extra WHEN s.extra IS NULL THEN t.extra ELSE t.extra || s.extra END"
    elif kind.name == "finish" and column == "response_payload":
        # self-authenticating against response_hash: kept only under the hash it was served for
        keep = ("CASE WHEN coalesce(s.response_hash, t.response_hash) IS NOT DISTINCT FROM t.response_hash "
                "THEN coalesce(s.response_payload, t.response_payload) ELSE s.response_payload END")
    else:
        keep = f"coalesce(s.{column}, t.{column})"
    return f"CASE WHEN {displaces(kind)} THEN s.{column} ELSE {keep} END"


def _key_text(kind: Kind, alias: str) -> str:
    parts = " || ', ' || ".join(f"'{k} ' || left({alias}.{k}::text, {_SHOWN})" for k in kind.key)
    return f"'{kind.name} (' || {parts} || ')'"


def _where(source_id: str, line: str) -> str:
    return (f"(SELECT left(uri, 200) FROM rec.source WHERE source_id = {source_id}) || ' line ' || {line}")


def met_columns(kind: Kind) -> str:
    """Extra columns of the upsert's join of the batch with the stored rows (``met``) that :func:`other_txs`
    reads: the stored tx's nonce and provenance, and the record of whichever side is not stored."""
    if kind.name not in NONCE_KINDS:
        return ""
    return (f", t.diff_nonce AS t_nonce, t.source_id AS t_source, t.source_line AS t_line, s.diff_nonce AS s_nonce,"
            f"\n         CASE WHEN {stays(kind)} THEN {record_json(kind, 's.')}::text END AS s_raw,"
            f"\n         CASE WHEN {displaces(kind)} THEN {record_json(kind, 't.')}::text END AS t_raw")


def _beaten(kind: Kind, alias: str, nonce: str, kept: str, where: str) -> str:
    return (f"{_key_text(kind, alias)} || ' at diff_nonce ' || {nonce} || ' is a second tx of its key: the one at '"
            f" || 'diff_nonce ' || {kept} || ' (' || {where} || ') comes first and is the one the protocol applies, '"
            f" || 'so this one is not stored'")


def other_txs(kind: Kind, stage: str, repeats_keys: bool) -> str:
    """CTEs (after ``met``) quarantining, for a tx kind, every record of a batch key that is not the tx the protocol
    applies: staged rows at another nonce than the key's lowest (staged or stored), and stored rows a lower-nonce
    staged one displaces. ``other_tx`` has one row per such record (``staged``: one of this batch's lines). Only
    ``met`` is read, never the table again: the batch's join with the stored rows is made once."""
    if kind.name not in NONCE_KINDS:
        return ", other_tx AS (SELECT NULL::boolean AS staged WHERE false)"
    if repeats_keys:  # any staged line of a key may be beaten: by the stored tx, or by a lower nonce in the batch
        m_on_s = " AND ".join(f"m.{k} = s.{k}" for k in kind.key)
        g_on_w = " AND ".join(f"g.{k} = w.{k}" for k in kind.key)
        staged = f"""SELECT true AS staged, %(source_id)s::bigint AS source_id, g.line,
         {_beaten(kind, 'g', 'g.diff_nonce', 'w.nonce', _where('w.w_source', 'w.w_line'))} AS reason,
         {record_json(kind, 'g.')}::text AS raw
  FROM {stage} g JOIN (
    SELECT {", ".join(f"s.{k}" for k in kind.key)}, coalesce(m.t_nonce, s.diff_nonce) AS nonce,
           coalesce(m.t_source, %(source_id)s) AS w_source, coalesce(m.t_line, s.line) AS w_line
    FROM src s LEFT JOIN met m ON {m_on_s} AND m.stays
  ) w ON {g_on_w}
  WHERE g.diff_nonce IS DISTINCT FROM w.nonce"""
    else:  # each staged line is its key's src row: beaten only by a stored tx
        staged = f"""SELECT true AS staged, %(source_id)s::bigint AS source_id, m.line,
         {_beaten(kind, 'm', 'm.s_nonce', 'm.t_nonce', _where('m.t_source', 'm.t_line'))} AS reason, m.s_raw AS raw
  FROM met m WHERE m.stays"""
    return f""", other_tx AS (
  {staged}
  UNION ALL
  SELECT false, m.t_source, m.t_line,
         {_key_text(kind, 'm')} || ' at diff_nonce ' || m.t_nonce || ' was stored, then displaced by another '
           || 'tx of its key at the lower diff_nonce ' || m.s_nonce || ' (' || {_where('%(source_id)s', 'm.line')}
           || '), the one the protocol applies',
         m.t_raw
  FROM met m WHERE m.displaced
), quarantined AS (
  INSERT INTO rec.quarantine (source_id, line, kind, reason, raw)
  SELECT source_id, line, '{kind.name}', reason, raw FROM other_tx ORDER BY source_id, line
  ON CONFLICT (source_id, line) DO NOTHING  -- a reload quarantines each line once
)"""


def applied_rows(kind: Kind, stage: str, keys: str) -> str:
    """The staged rows that are the tx of their key (for counting amendments superseded inside the batch)."""
    if kind.name not in NONCE_KINDS:
        return stage
    return f"(SELECT * FROM {stage} WHERE ({keys}, diff_nonce) IN (SELECT {keys}, diff_nonce FROM src))"
