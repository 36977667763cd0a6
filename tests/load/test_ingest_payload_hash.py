"""A 0/0 Finish's response payload in a file is believed only when it hashes to the Finish's own response_hash:
one that does not is kept out of the Finish (its refusal stays unknown) and its line quarantined with the reason;
the Finish itself still loads."""
from __future__ import annotations

import json

import psycopg

from indexer.cli import main as cli_main
from indexer.wire.payloads import response_hash_of
from tests.support.helpers import escrow, ingest, tx, write_lines
from tests.support.rules_kit import fam3, stored

HONEST = stored(fam3(100_000, 1000), ident="devshard-1971-1")
MADE_UP = stored("This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens.",
                 ident="devshard-1971-2")


def _records() -> list[dict]:
    def refusal(iid: int, **fin) -> list[dict]:
        return [tx("start", iid, 10 * iid, prompt_hash="ab" * 32, input_length=10, max_tokens=5),
                tx("finish", iid, 10 * iid + 1, executor_slot=iid, input_tokens=0, output_tokens=0, **fin)]

    return [escrow(),
            *refusal(1, response_hash=response_hash_of(HONEST), response_payload=HONEST),            # lines 2, 3
            *refusal(2, response_hash=response_hash_of(HONEST).upper(), response_payload=MADE_UP),   # lines 4, 5
            *refusal(3, response_hash=response_hash_of(HONEST).upper(), response_payload=HONEST)]    # lines 6, 7


def test_a_payload_of_another_hash_is_kept_out_of_its_finish_and_its_line_quarantined(db_url, tmp_path):
    path = write_lines(tmp_path / "finishes.ndjson", _records())
    summary = ingest(db_url, path, rules=True)
    assert summary.quarantined == 1
    with psycopg.connect(db_url) as c:
        quarantined = c.execute("SELECT source, line, kind, reason FROM api.quarantine").fetchall()
        raw = c.execute("SELECT raw FROM rec.quarantine").fetchone()[0]
        finishes = dict(c.execute("SELECT inference_id, response_payload FROM rec.finish_tx").fetchall())
        kinds = dict(c.execute("SELECT inference_id, refusal_kind FROM api.context_refusals").fetchall())
    assert quarantined == [(str(path), 5, "finish",
                            f"field response_payload: sha256 of the payload is {response_hash_of(MADE_UP)}, not the "
                            f"Finish's response_hash {response_hash_of(HONEST)}; the Finish is loaded "
                            "without it")]
    assert json.loads(raw)["response_payload"] == MADE_UP  # nothing lost: the line is kept whole
    assert finishes == {1: HONEST, 2: None, 3: HONEST}  # the Finish loaded, without the payload it does not sign
    assert kinds == {1: "context_length", 2: "unknown", 3: "context_length"}


def test_the_ingest_command_names_the_quarantined_line_and_fails_without_allow_quarantine(db_url, tmp_path, capsys):
    path = write_lines(tmp_path / "finishes.ndjson", _records())
    assert cli_main(["ingest", "--database-url", db_url, str(path)]) == 2
    assert "1 line(s) quarantined; see api.quarantine" in capsys.readouterr().err
