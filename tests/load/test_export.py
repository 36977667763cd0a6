"""`indexer export` writes normalized NDJSON that `ingest` reads back to the same records and the same replay."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.load.export import export_records, export_statement
from indexer.load.ingest import ingest_paths
from indexer.records import KINDS
from indexer.synth import generate
from tests.support.helpers import escrow, ingest, tx, write_lines

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = 'quote " backslash \\ newline \n tab \t cr \r unicode é ☃ 😀 nul-text \\u0000 {"events":["data: {}"]}'




def record_state(url: str) -> dict[str, list]:
    """Content columns + extra of every record table, and every replay table (without load-time columns)."""
    out = {}
    with psycopg.connect(url) as c:
        for kind in KINDS.values():
            cols = kind.columns + ["extra"]
            out[f"rec.{kind.table}"] = c.execute(
                f"SELECT {', '.join(cols)} FROM rec.{kind.table} ORDER BY {', '.join(kind.key)}").fetchall()
        for (t,) in c.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'replay' "
                              "AND table_type = 'BASE TABLE' ORDER BY 1").fetchall():
            cols = [r[0] for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'replay' "
                "AND table_name = %s AND column_name NOT IN ('replayed_at', 'marked_at', 'verified_at') "
                "ORDER BY ordinal_position", (t,))]
            order = ", ".join(str(i + 1) for i in range(len(cols)))
            out[f"replay.{t}"] = c.execute(f"SELECT {', '.join(cols)} FROM replay.{t} ORDER BY {order}").fetchall()
    return out


def _corpus() -> list:
    recs: list = list(generate(seed=21, escrows=2, inferences=30, epochs=2))
    recs += [
        {"kind": "epoch", "epoch_index": 408, "start_height": 1, "end_height": 2,
         "observed_at": "2026-11-29T12:34:56.789+00:00", "from_node": "n1"},
        {"kind": "model_snapshot", "epoch_index": 408, "model_id": "m/é", "model_args": ["--max-model-len", "4096"]},
        escrow(validation_rate=1000, max_model_len=4096, protocol_version="v7", settled=False,
               unknown={"nested": [1, {"x": None}], "flag": True}),
        tx("start", 100, 100, prompt_hash="AB" * 32, model="m", input_length=10, max_tokens=5,
           started_at=-5, tx_index=3, protocol_version="v7"),
        tx("confirm_start", 100, 101, confirmed_at=9223372036854775807),
        tx("finish", 100, 102, executor_slot=4, input_tokens=0, output_tokens=0, response_hash="",
           response_payload=PAYLOAD, **{"ignored ☃": "x\ny"}),
        tx("validation", 100, 103, validator_slot=9, valid=False),
        tx("validation_vote", 100, 104, voter_slot=0, vote_valid=False),
        tx("start", 116, 116), tx("timeout", 116, 119, reason="TIMEOUT_REASON_REFUSED",
                                  votes=[{"voter_slot": "0", "accept": True}, {"voter_slot": 11, "accept": True}]),
        tx("start", 132, 132), tx("confirm_start", 132, 133), tx("finish", 132, 134, executor_slot=4,
                                                                 input_tokens=1, output_tokens=2),
        tx("error_miss", 132, 135, votes=[{"voter_slot": 0, "accept": True}, {"voter_slot": 11, "accept": True}]),
        {"kind": "host_stats", "escrow_id": "1971", "slot_id": 4, "missed": 1, "invalid": 0,
         "cost": "18446744073709551615", "required_validations": 3, "completed_validations": 2},
        {"kind": "host_epoch_stats", "epoch_index": 408, "participant": "gonka1hostB", "missed": 1, "invalid": 0,
         "cost": 12345678901234567890, "required_validations": 3, "completed_validations": 2, "escrow_count": 1},
        tx("start", 5, 5, escrow_id="no-such-escrow"),  # a tx whose escrow is unknown is exported too
        {"kind": "epoch_params", "epoch_index": 408, "total_weight": "541415", "params_height": 4136542,
         "params_exact": False, "validation_params": {"binom_test_p0": {"value": "1", "exponent": -1},
                                                       "logprobs_mode": "processed_logprobs", "epochs_to_max": "30"},
         "devshard_escrow_params": {"validation_rate": 1000, "approved_versions": [{"name": "v5"}]}},
        {"kind": "participant_epoch", "epoch_index": 408, "participant": "gonka1hostB", "weight": "13120",
         "confirmation_weight": 11087, "inference_count": "17344", "rewarded_coins": "18446744073709551615",
         "excluded_reason": "statistical_invalidations", "excluded_height": "5652288"},
    ]
    # big integers beyond 64 bits in an unknown field are kept exactly (orjson cannot write them)
    recs.append(json.dumps({**tx("start", 148, 148), "huge": 2 ** 80}).encode())
    return recs


def test_export_round_trips_through_ingest(db_url, second_db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", _corpus()))
    counts = export_records(db_url, str(tmp_path / "out.ndjson"))
    assert counts["finish"] > 0 and counts["host_epoch_stats"] == 1
    summary = ingest(second_db_url, tmp_path / "out.ndjson")
    assert summary.quarantined == 0 and summary.amended == 0
    original, copy = record_state(db_url), record_state(second_db_url)
    for table in original:
        assert copy[table] == original[table], table
    with psycopg.connect(second_db_url) as c:
        assert c.execute("SELECT response_payload FROM rec.finish_tx WHERE escrow_id = '1971' AND inference_id = 100"
                         ).fetchone() == (PAYLOAD,)
        assert c.execute("SELECT extra FROM rec.start_tx WHERE inference_id = 148").fetchone() == ({"huge": 2 ** 80},)
        assert c.execute("SELECT cost::text FROM rec.host_stats WHERE escrow_id = '1971'").fetchone() == \
            ("18446744073709551615",)


def test_export_of_the_export_is_byte_identical(db_url, second_db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", _corpus()))
    export_records(db_url, str(tmp_path / "a.ndjson"))
    ingest(second_db_url, tmp_path / "a.ndjson")
    export_records(second_db_url, str(tmp_path / "b.ndjson"))
    assert (tmp_path / "a.ndjson").read_bytes() == (tmp_path / "b.ndjson").read_bytes()


def _cli(*args):
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True,
                          timeout=120)


def test_cli_export_gz_ingests_like_plain(db_url, second_db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", _corpus()))
    res = _cli("--database-url", db_url, "export", str(tmp_path / "out.ndjson.gz"))
    assert res.returncode == 0, res.stderr.decode()
    packed = (tmp_path / "out.ndjson.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b"
    export_records(db_url, str(tmp_path / "out.ndjson"))
    assert gzip.decompress(packed) == (tmp_path / "out.ndjson").read_bytes()
    ingest(second_db_url, tmp_path / "out.ndjson.gz")
    original, copy = record_state(db_url), record_state(second_db_url)
    for table in original:
        assert copy[table] == original[table], table


def test_epochs_filter_exports_only_that_epochs_records(db_url, tmp_path, conn):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", _corpus()))
    export_records(db_url, str(tmp_path / "e401.ndjson"), (401, 401))
    lines = [json.loads(line) for line in (tmp_path / "e401.ndjson").read_bytes().splitlines()]
    escrows_401 = {r[0] for r in conn.execute("SELECT escrow_id FROM rec.escrow WHERE epoch_index = 401")}
    assert escrows_401 and lines
    for rec in lines:
        if KINDS[rec["kind"]].scope == "epoch" or rec["kind"] == "escrow":
            assert int(rec["epoch_index"]) == 401, rec
        if "escrow_id" in rec:
            assert rec["escrow_id"] in escrows_401, rec
    expected = conn.execute(
        "SELECT (SELECT count(*) FROM rec.escrow WHERE epoch_index = 401)"
        " + (SELECT count(*) FROM rec.epoch WHERE epoch_index = 401)"
        " + (SELECT count(*) FROM rec.model_snapshot WHERE epoch_index = 401)"
        " + (SELECT count(*) FROM rec.start_tx s JOIN rec.escrow e USING (escrow_id) WHERE e.epoch_index = 401)"
        " + (SELECT count(*) FROM rec.finish_tx s JOIN rec.escrow e USING (escrow_id) WHERE e.epoch_index = 401)"
        " + (SELECT count(*) FROM rec.host_stats s JOIN rec.escrow e USING (escrow_id) WHERE e.epoch_index = 401)"
    ).fetchone()[0]
    kinds_counted = {"escrow", "epoch", "model_snapshot", "start", "finish", "host_stats"}
    assert sum(1 for r in lines if r["kind"] in kinds_counted) == expected
    assert {r["kind"] for r in lines} >= {"epoch", "model_snapshot", "escrow", "start", "confirm_start", "finish",
                                          "host_stats"}


def test_cli_export_epochs_range(db_url, tmp_path):
    ingest(db_url, write_lines(tmp_path / "in.ndjson", _corpus()))
    res = _cli("--database-url", db_url, "export", "--epochs", "400..400", str(tmp_path / "e400.ndjson"))
    assert res.returncode == 0, res.stderr.decode()
    epochs = {json.loads(line).get("epoch_index") for line in (tmp_path / "e400.ndjson").read_bytes().splitlines()}
    assert epochs - {None} == {400}


_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 80), max_value=2 ** 80) |
    st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8)
_FINISH_FIELDS = {"kind", *KINDS["finish"].columns}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=_text | st.sampled_from([PAYLOAD, "\\u0000", "\\\\u0000", "line\r\nbreak", "\u2028\u2029\x7f"]),
       extra=st.dictionaries(_text.filter(lambda k: k not in _FINISH_FIELDS), _json, max_size=4))
def test_payload_and_unknown_fields_survive_ingest_and_export(db_url, tmp_path, payload, extra):
    eid = uuid.uuid4().hex
    rec = {**tx("finish", 1, 3, escrow_id=eid, executor_slot=0, input_tokens=1, output_tokens=2, response_hash="ab",
                response_payload=payload), **extra}
    path = tmp_path / f"{eid}.ndjson"
    path.write_bytes(json.dumps(rec).encode() + b"\n")
    summary = ingest_paths(db_url, [str(path)])
    assert (summary.loaded, summary.quarantined) == (1, 0)
    with psycopg.connect(db_url) as c:
        stored_payload, stored_extra = c.execute("SELECT response_payload, extra::text FROM rec.finish_tx "
                                                 "WHERE escrow_id = %s", (eid,)).fetchone()
        sql, params = export_statement("finish", None)
        exported = [_decimal(line) for (line,) in c.execute(sql, params)]
    # JSON numbers are decimals: compare them as such (3.790421480392178e+16 == 37904214803921780)
    assert stored_payload == payload
    assert (_decimal(stored_extra) if stored_extra else None) == (_decimal(json.dumps(extra)) if extra else None)
    assert [r for r in exported if r["escrow_id"] == eid] == [_decimal(json.dumps(rec))]


def _decimal(text: str):
    return json.loads(text, parse_float=Decimal)
