"""Refusals: what a 0-input/0-output Finish's stored response body says about why the request was refused.

One place for the whole job: :mod:`indexer.refusals.vllm` parses the body (vLLM's and OpenAI-compatible error
wordings) into a :class:`RefusalParse`; :mod:`indexer.refusals.store` turns parses into ``rules.refusal_parse`` rows
(column list derived from the dataclass, so the fields are written once) and upserts them. The loader parses while
it types a batch; the rules stage parses only what is missing or stale (a new parser version, an amended payload).
"""
from indexer.refusals.store import COLUMNS, PARSER_VERSION, parse_row, store
from indexer.refusals.vllm import RefusalParse, parse_response_payload

__all__ = ["COLUMNS", "PARSER_VERSION", "RefusalParse", "parse_response_payload", "parse_row", "store"]
