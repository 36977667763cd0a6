"""Parsed refusals of 0/0 Finishes as ``rules.refusal_parse`` rows.

The row is the key, the payload digest and parser version, then every field of :class:`RefusalParse` in
declaration order: the dataclass is the one list of parse fields, and the table's columns must match it (a test
checks the table against :data:`COLUMNS`)."""
from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING

from indexer.refusals.vllm import RefusalParse, parse_response_payload

if TYPE_CHECKING:  # the loader's and the poller's typing processes parse rows here without a database driver
    import psycopg

PARSER_VERSION = 4  # 2: the vLLM 0.1-0.33 wording survey (families 7, 7c, window; null codes); 3: the chain's own
# client-fault and terminal-error predicates (indexer.refusals.consensus); 4: encoder-prompt and bare-total
# wordings keep no prompt count, "at least" only inside the wording, generic texts naming another refusal; the
# Responses truncation budget wording and vLLM's input_tokens / input_text parameter mark an overflow
PARSE_FIELDS = tuple(f.name for f in dataclasses.fields(RefusalParse))
COLUMNS = ("escrow_id", "inference_id", "payload_md5", "parser_version") + PARSE_FIELDS
_MESSAGE_AT = PARSE_FIELDS.index("message")
MESSAGE_CHARS = 2000  # the stored message is evidence, not an archive: the raw payload stays in rec.finish_tx


def parse_row(escrow_id: str, inference_id: int, payload: str, md5: str | None = None) -> tuple:
    parse = parse_response_payload(payload)
    md5 = md5 or hashlib.md5(payload.encode("utf-8", "surrogatepass")).hexdigest()
    values = [getattr(parse, name) for name in PARSE_FIELDS]
    values[_MESSAGE_AT] = (parse.message or "")[:MESSAGE_CHARS] or None
    return (escrow_id, inference_id, md5, PARSER_VERSION, *values)


def store(conn: psycopg.Connection, rows: list[tuple]) -> None:
    """Upsert parse rows (last one per key wins) inside the caller's transaction."""
    if not rows:
        return
    rows = list({(r[0], r[1]): r for r in rows}.values())
    # emptied below, not ON COMMIT DELETE ROWS (indexer.load.statements.stage_ddl says why)
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS new_parse (LIKE rules.refusal_parse)")
    with conn.cursor().copy(f"COPY new_parse ({', '.join(COLUMNS)}) FROM STDIN") as cp:
        for row in rows:
            cp.write_row(row)
    conn.execute(f"""INSERT INTO rules.refusal_parse ({", ".join(COLUMNS)})
                     SELECT {", ".join(COLUMNS)} FROM new_parse
                     ON CONFLICT (escrow_id, inference_id) DO UPDATE SET
                     ({", ".join(COLUMNS[2:])}) = ({", ".join("excluded." + c for c in COLUMNS[2:])})
                     -- the same payload under the same parser parses the same: no rewrite on a reload
                     WHERE (refusal_parse.payload_md5, refusal_parse.parser_version)
                           IS DISTINCT FROM (excluded.payload_md5, excluded.parser_version)""")
    conn.execute("TRUNCATE new_parse")
