"""indexer.verify.inputs: a session's inputs from an escrow record, or the reason they cannot be read."""
from indexer.verify.inputs import SessionInputs, session_inputs, vote_threshold

ESCROW = {"escrow_id": "7", "protocol_version": "v4.1", "creator": "gonka1user", "amount": "1000000",
          "slots": ["gonka1a", "gonka1b", "gonka1c"], "vote_threshold_factor": 0, "token_price": "10",
          "create_devshard_fee": "10000", "fee_per_nonce": "1000", "inference_seal_grace_nonces": 160,
          "inference_seal_grace_seconds": 3600, "auto_seal_every_n_nonces": 150}


def test_inputs_of_a_complete_record():
    got = session_inputs(ESCROW)
    assert isinstance(got, SessionInputs)
    assert (got.escrow_id, got.version, got.creator, got.balance, got.slots) == (
        "7", "v4.1", "gonka1user", 1_000_000, ("gonka1a", "gonka1b", "gonka1c"))
    c = got.config
    assert (c.token_price, c.vote_threshold, c.seal_grace_nonces, c.seal_grace_seconds, c.auto_seal_every,
            c.fee_per_nonce, c.create_fee) == (10, 1, 160, 3600, 150, 1000, 10000)


def test_a_missing_field_is_named_not_defaulted():
    record = {k: v for k, v in ESCROW.items() if k not in ("creator", "fee_per_nonce")}
    assert session_inputs(record) == "escrow 7: not captured: creator, fee_per_nonce"
    assert session_inputs({**ESCROW, "slots": []}) == "escrow 7: not captured: slots"


def test_vote_threshold_floor_and_half():
    assert [vote_threshold(n, 0) for n in (1, 2, 3, 16)] == [0, 1, 1, 8]
    assert vote_threshold(16, 66) == 10 and vote_threshold(3, None) == 1


def test_execution_timeout_from_the_record_else_the_epoch_params():
    assert session_inputs(ESCROW).config.execution_timeout is None  # unknown stays unknown
    assert session_inputs(ESCROW, {"execution_timeout": "1920"}).config.execution_timeout == 1920
    assert session_inputs(ESCROW, {"execution_timeout": "1920s"}).config.execution_timeout == 1920
    own = session_inputs({**ESCROW, "execution_timeout": 60}, {"execution_timeout": "1920"})
    assert own.config.execution_timeout == 60
    assert session_inputs(ESCROW, {"execution_timeout": "soon"}).config.execution_timeout is None


def test_a_zero_field_is_the_compiled_default_where_one_is_shown():
    """0 published means the build's compiled default (gonka-devshard.md §4.6): the defaults upstream's
    DefaultSessionConfig compiles in, never a literal 0."""
    zero = {**ESCROW, "token_price": "0", "inference_seal_grace_seconds": 0, "auto_seal_every_n_nonces": 0}
    c = session_inputs(zero).config
    assert (c.token_price, c.seal_grace_seconds, c.auto_seal_every) == (1, 3600, 150)
    # no default that holds for every build: unknown, not 0
    assert session_inputs({**ESCROW, "inference_seal_grace_nonces": 0}).config.seal_grace_nonces is None


def test_a_zero_execution_timeout_is_not_stated():
    assert session_inputs({**ESCROW, "execution_timeout": 0}).config.execution_timeout is None
    got = session_inputs({**ESCROW, "execution_timeout": 0}, {"execution_timeout": "1920"})
    assert got.config.execution_timeout == 1920
    assert session_inputs(ESCROW, {"execution_timeout": "0"}).config.execution_timeout is None


def test_a_session_whose_seal_grace_is_unknown_is_not_checkable_under_sealing_rules():
    import pytest

    from indexer.verify.apply import Session
    from indexer.verify.versions import NotCheckable

    got = session_inputs({**ESCROW, "inference_seal_grace_nonces": 0})
    with pytest.raises(NotCheckable, match="inference_seal_grace_nonces is 0"):
        Session.new(got.escrow_id, got.config, got.slots, got.balance, got.version)
