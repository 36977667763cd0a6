"""Parsed vLLM refusals of 0/0 Finishes, stored in rules.refusal_parse.

Parsing is Python (indexer.sources.vllm_errors). Ingest parses while it types a batch, in the thread that
overlaps the database work; the rules stage only parses what is missing or stale (a new parser version, or a
payload changed by an amendment)."""
from __future__ import annotations

import hashlib

import psycopg

from indexer.sources.vllm_errors import parse_response_payload

PARSER_VERSION = 2  # 2: the vLLM 0.1-0.33 wording survey (families 7, 7c, window; null codes)
COLUMNS = ("escrow_id", "inference_id", "payload_md5", "parser_version", "refusal_kind", "is_client_fault",
           "is_terminal_error", "error_code", "error_type", "family", "reported_limit", "reported_prompt_tokens",
           "reported_prompt_is_lower_bound", "reported_max_tokens", "requested_total", "reported_prompt_chars",
           "suffix_parameter", "suffix_value", "message")


def parse_row(escrow_id: str, inference_id: int, payload: str, md5: str | None = None) -> tuple:
    p = parse_response_payload(payload)
    md5 = md5 or hashlib.md5(payload.encode("utf-8", "surrogatepass")).hexdigest()
    return (escrow_id, inference_id, md5, PARSER_VERSION, p.refusal_kind, p.is_client_fault, p.is_terminal_error,
            p.error_code, p.error_type, p.family, p.reported_limit, p.reported_prompt_tokens,
            p.reported_prompt_is_lower_bound, p.reported_max_tokens, p.requested_total, p.reported_prompt_chars,
            p.suffix_parameter, p.suffix_value, (p.message or "")[:2000] or None)


def store(conn: psycopg.Connection, rows: list[tuple]) -> None:
    """Upsert parse rows (last one per key wins) inside the caller's transaction."""
    if not rows:
        return
    rows = list({(r[0], r[1]): r for r in rows}.values())
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS new_parse (LIKE rules.refusal_parse) ON COMMIT DELETE ROWS")
    with conn.cursor().copy(f"COPY new_parse ({', '.join(COLUMNS)}) FROM STDIN") as cp:
        for row in rows:
            cp.write_row(row)
    conn.execute(f"""INSERT INTO rules.refusal_parse SELECT * FROM new_parse
                     ON CONFLICT (escrow_id, inference_id) DO UPDATE SET
                     ({", ".join(COLUMNS[2:])}) = ({", ".join("excluded." + c for c in COLUMNS[2:])})
                     -- the same payload under the same parser parses the same: no rewrite on a reload
                     WHERE (refusal_parse.payload_md5, refusal_parse.parser_version)
                           IS DISTINCT FROM (excluded.payload_md5, excluded.parser_version)""")
    conn.execute("DELETE FROM new_parse")
