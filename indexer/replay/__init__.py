"""Replay stage: protocol state derived from each escrow's signed log."""
