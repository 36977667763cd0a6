"""Malformed or contradictory lines are quarantined with file, line and a reason naming the field; the rest loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import escrow, ingest, tx

ROOT = Path(__file__).resolve().parents[2]
H = "ab" * 32


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


def _finish(**over):
    return {**tx("finish", 116, 118, executor_slot=4, input_tokens=5, output_tokens=7, response_hash=H), **over}


# (line bytes, substrings the reason must contain); None = a line that loads. Line numbers are 1-based positions.
CASES: list[tuple[bytes, tuple[str, ...] | None]] = [
    (_j(escrow()), None),                                                                     # 1
    (_j(tx("start", 100, 100, prompt_hash=H, input_length=10, max_tokens=5)), None),         # 2
    (b'{"kind": "start", "escrow_id": "1971"', ("malformed JSON",)),                           # 3
    (b"[1, 2, 3]", ("not a JSON object",)),                                                    # 4
    (_j({"escrow_id": "1971", "inference_id": 1}), ("kind",)),                                 # 5
    (_j({"kind": "gossip", "escrow_id": "1971"}), ("unknown kind", "gossip")),                 # 6
    (_j({k: v for k, v in _finish().items() if k != "executor_slot"}), ("executor_slot", "missing")),  # 7
    (_j(tx("confirm_start", 100, "abc")), ("diff_nonce", "not an integer")),                   # 8
    (_j(tx("confirm_start", 100, 1.5)), ("diff_nonce",)),                                      # 9
    (_j(_finish(output_tokens=-1)), ("output_tokens", "negative")),                            # 10
    (_j(tx("start", 132, 132, input_length=9223372036854775808)), ("input_length", "range")),  # 11
    (_j(tx("start", 148, 148, input_length="99999999999999999999")), ("input_length",)),       # 12
    (_j(_finish(response_hash="zz12")), ("response_hash", "hex")),                            # 13
    (_j(_finish(executor_slot=16)), ("executor_slot", "16", "out of range")),                  # 14
    (_j(tx("timeout", 100, 103, reason="refused", votes=[{"voter_slot": 0, "accept": True},
                                                         {"voter_slot": 16, "accept": True}])),
     ("votes", "voter_slot", "out of range")),                                                 # 15
    (_j(_finish(response_payload="nul \x00 inside")), ("\\u0000",)),                           # 16
    (b'{"kind": "epoch", "epoch_index": 7, "note": "\xff\xfe"}', ("malformed JSON",)),         # 17
    (b"", None),                                                                               # 18 blank
    (b"   \t ", None),                                                                         # 19 blank
    (b'{"kind": "epoch", "epoch_index": 8, "x": NaN}', ("malformed JSON",)),                   # 20
    (b'{"kind": "epoch", "epoch_index": 9, "x": "\\ud800"}', ("malformed JSON",)),             # 21
    ('{"kind": "epoch", "epoch_index": 10}'.encode("utf-16-le"), ("malformed JSON",)),         # 22
    (_j(tx("validation", 116, 119, validator_slot=9, valid="yes")), ("valid", "boolean")),     # 23
    (_j(tx("timeout", 116, 120, reason="bored", votes=[])), ("reason",)),                      # 24
    (_j(tx("confirm_start", 100, True)), ("diff_nonce", "not an integer")),                    # 25
    (_j({"kind": "model_snapshot", "epoch_index": 408, "model_id": "m", "model_args": ["--x", 1]}),
     ("model_args",)),                                                                         # 26
    (_j(escrow("9", slots="gonka1hostA")), ("slots",)),                                        # 27
    (_j(tx("confirm_start", 100, 101, confirmed_at=2)), None),                                 # 28
    (_j(tx("start", 116, 116, prompt_hash=H)), None),                                          # 29
    (_j(tx("confirm_start", 116, 117)), None),                                                 # 30
    (_j(_finish()), None),                                                                     # 31
    (_j(tx("validation_vote", 116, 121, voter_slot=16, vote_valid=True)), ("voter_slot", "out of range")),  # 32
    (_j({"kind": "host_stats", "escrow_id": "1971", "slot_id": 3,
         "cost": "18446744073709551616"}), ("cost", "range")),                                 # 33
    (_j({"kind": "host_stats", "escrow_id": "1971", "slot_id": 2, "cost": 18446744073709551615}), None),  # 34
    (_j({"kind": "epoch", "epoch_index": 11, "observed_at": "yesterday"}), ("observed_at",)),  # 35
    (_j(tx("start", 130, 130, max_tokens=2**64 + 5)), ("max_tokens", "out of range: 18446744073709551621")),  # 36
    (b'{"kind": "epoch", "epoch_index": "\xe9t\xe9"}', ("not valid UTF-8 at byte 35 of the line",)),  # 37
    (b'{"kind": "epoch", "epoch_index": 1,}', ("trailing comma", "at byte 35 of the line")),        # 38
]


def _write(path: Path) -> Path:
    path.write_bytes(b"\n".join(line for line, _ in CASES) + b"\n")
    return path


def test_each_bad_line_is_quarantined_with_line_and_a_reason_naming_the_field(db_url, tmp_path, conn):
    path = _write(tmp_path / "mixed.ndjson")
    summary = ingest(db_url, path)
    bad = {n: want for n, (_, want) in enumerate(CASES, start=1) if want is not None}
    assert summary.quarantined == len(bad)
    rows = conn.execute("SELECT line, reason, source FROM api.quarantine ORDER BY line").fetchall()
    got = {line: reason for line, reason, _ in rows}
    assert sorted(got) == sorted(bad)
    wrong = {n: (got[n], want) for n, want in bad.items() if not all(w in got[n] for w in want)}
    assert not wrong, wrong
    assert {source for _, _, source in rows} == {str(path.resolve())}
    # the raw line is kept for inspection, including the ones that are not valid UTF-8
    assert conn.execute("SELECT raw FROM rec.quarantine WHERE line = 17").fetchone()[0].startswith('{"kind": "epoch"')


def test_the_rest_of_the_file_loads(db_url, tmp_path, conn):
    ingest(db_url, _write(tmp_path / "mixed.ndjson"))
    assert conn.execute("SELECT count(*) FROM rec.escrow").fetchone() == (1,)
    assert conn.execute("SELECT array_agg(inference_id ORDER BY inference_id) FROM rec.start_tx").fetchone() == \
        ([100, 116],)
    assert conn.execute("SELECT cost::text FROM rec.host_stats").fetchall() == [("18446744073709551615",)]
    assert dict(conn.execute("SELECT inference_id, status FROM api.inferences").fetchall()) == \
        {100: "Started", 116: "Finished"}
    # blank lines are neither loaded nor quarantined, but they count for line numbers
    assert conn.execute("SELECT count(*) FROM rec.quarantine WHERE line IN (18, 19)").fetchone() == (0,)
    assert conn.execute("SELECT lines_committed FROM rec.source").fetchone() == (len(CASES),)


def test_reloading_a_file_with_bad_lines_does_not_duplicate_quarantine(db_url, tmp_path, conn):
    path = _write(tmp_path / "mixed.ndjson")
    ingest(db_url, path)
    n = conn.execute("SELECT count(*) FROM rec.quarantine").fetchone()
    again = ingest(db_url, path)
    assert (again.loaded, again.amended) == (0, 0)
    assert conn.execute("SELECT count(*) FROM rec.quarantine").fetchone() == n


def test_slot_checks_use_an_escrow_loaded_from_an_earlier_file(db_url, tmp_path, conn):
    (tmp_path / "e.ndjson").write_bytes(_j(escrow(slots=["gonka1a", "gonka1b"])) + b"\n")
    ingest(db_url, tmp_path / "e.ndjson")
    (tmp_path / "t.ndjson").write_bytes(b"\n".join([
        _j(tx("validation", 1, 4, validator_slot=2, valid=True)),
        _j(tx("validation", 1, 4, validator_slot=1, valid=True))]) + b"\n")
    summary = ingest(db_url, tmp_path / "t.ndjson")
    assert (summary.loaded, summary.quarantined) == (1, 1)
    assert conn.execute("SELECT line, reason FROM api.quarantine").fetchone()[0] == 1


def _cli(*args, stdin=None):
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=ROOT, env=env, capture_output=True,
                          input=stdin, timeout=120)


def test_cli_exits_2_on_quarantine_unless_allowed(db_url, tmp_path, conn):
    path = tmp_path / "one-bad.ndjson"
    path.write_bytes(_j(escrow()) + b"\n{oops\n" + _j(tx("start", 100, 100)) + b"\n")
    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress")
    assert res.returncode == 2, res.stderr.decode()
    assert b"quarantined" in res.stderr
    assert f"{path}:2: malformed JSON".encode() in res.stderr  # which line, and why
    assert conn.execute("SELECT count(*) FROM rec.start_tx").fetchone() == (1,)  # the rest still loaded
    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress", "--allow-quarantine")
    assert res.returncode == 0, res.stderr.decode()
    assert conn.execute("SELECT count(*) FROM api.quarantine").fetchone() == (1,)


def test_cli_names_the_first_quarantined_lines_on_one_line_each(db_url, tmp_path):
    path = tmp_path / "many-bad.ndjson"
    bad = [_j({"kind": "epoch", "epoch_index": 11, "observed_at": "\x1b[31mred\nnext"})] + [b"{oops"] * 7
    path.write_bytes(_j(escrow()) + b"\n" + b"\n".join(bad) + b"\n")
    res = _cli("--database-url", db_url, "ingest", str(path), "--no-progress")
    err = res.stderr.decode()
    assert res.returncode == 2, err
    named = [line for line in err.splitlines() if line.startswith(f"  {path}:")]
    assert [line.split(":", 2)[1] for line in named] == ["2", "3", "4", "5", "6"]
    assert "\x1b" not in err and "\\x1b[31mred\\nnext" in named[0]  # a peer's text cannot drive the terminal
    assert "  and 3 more" in err
