from tests.support.helpers import escrow, ingest, tx, write_lines


def test_reference_challenge_is_invalidated_through_the_database(db_url, tmp_path, conn):
    f = write_lines(tmp_path / "a.ndjson", [
        escrow(),
        tx("start", 6149, 6149, prompt_hash="ab" * 32, model="m", input_length=395905, max_tokens=4096,
           started_at=1),
        tx("confirm_start", 6149, 6150, confirmed_at=2),
        tx("finish", 6149, 6151, executor_slot=5, input_tokens=0, output_tokens=0, response_hash="cd" * 32),
        {"kind": "validation", "escrow_id": "1971", "inference_id": 6149, "validator_slot": 9, "diff_nonce": 6170,
         "valid": False},
        {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 11, "diff_nonce": 6174,
         "vote_valid": True},
        {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 0, "diff_nonce": 6175,
         "vote_valid": False},
        {"kind": "validation_vote", "escrow_id": "1971", "inference_id": 6149, "voter_slot": 6, "diff_nonce": 6176,
         "vote_valid": False},
    ])
    ingest(db_url, f)
    row = conn.execute("SELECT vote_threshold, votes_valid, votes_invalid, outcome, resolved_nonce "
                       "FROM api.challenges").fetchall()
    assert row == [(8, 5, 9, "Invalidated", 6176)]
    assert conn.execute("SELECT penalty, executor_address FROM api.inferences").fetchone() == ("invalid",
                                                                                               "gonka1hostB")
