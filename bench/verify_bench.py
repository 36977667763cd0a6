"""Microseconds per nonce of indexer.verify.apply.Session.apply, the replay every escrow's verification runs:
the 34-diff v4.1 release fixture (repeated) and a synthetic 1,000-nonce escrow of 16 slots whose live set grows to a
few hundred records (a Finished record seals 360 nonces after it confirms, as with a one-hour grace at 10 s a nonce).
Host signatures are given as the slots' addresses, so the figures are the state machine and the roots alone.

    .venv/bin/python bench/verify_bench.py [--rounds N] [--nonces N]

Both modes (with and without rollback) must end at the same roots; the last line says whether they did.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.verify import apply  # noqa: E402
from tests.support.verify_kit import CONFIG, ESCROW, HOSTS, script  # noqa: E402

SLOTS = tuple(f"gonka1slot{i:02d}" for i in range(16))
SYNTH = apply.Config(token_price=1, vote_threshold=5, seal_grace_nonces=160, seal_grace_seconds=3600,
                     auto_seal_every=1)


def synthetic(nonces: int = 1000) -> list[list[dict]]:
    """Each nonce starts one inference, confirms the one before and finishes the one before that; every fourth
    finished inference gets a validation from the next slot."""
    diffs = []
    for n in range(1, nonces + 1):
        txs = [{"kind": "start", "inference_id": n, "prompt_hash": bytes(32), "model": "m", "input_length": 900,
                "max_tokens": 300, "started_at": 1000 + 10 * n}]
        if n > 1:
            i = n - 1
            txs.append({"kind": "confirm_start", "inference_id": i, "confirmed_at": 1000 + 10 * n,
                        "signer": SLOTS[i % 16]})
        if n > 2:
            i = n - 2
            txs.append({"kind": "finish", "inference_id": i, "response_hash": bytes(32), "input_tokens": 900,
                        "output_tokens": 200, "executor_slot": i % 16, "escrow_id": ESCROW,
                        "signer": SLOTS[i % 16]})
        if n > 3 and (n - 3) % 4 == 0:
            i, v = n - 3, (n - 2) % 16
            txs.append({"kind": "validation", "inference_id": i, "validator_slot": v, "valid": True,
                        "escrow_id": ESCROW, "signer": SLOTS[v]})
        diffs.append(txs)
    return diffs


def run(make, diffs, rounds: int, **kw) -> tuple[float, bytes]:
    """Best of ``rounds`` replays: microseconds per nonce, and the last root."""
    best, root = None, b""
    for _ in range(rounds):
        s = make()
        t = time.perf_counter()
        for nonce, txs in enumerate(diffs, start=1):
            root = s.apply(nonce, txs, **kw)
        per = (time.perf_counter() - t) / len(diffs) * 1e6
        best = per if best is None else min(best, per)
    return best, root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="replays of each escrow; the best one is printed")
    ap.add_argument("--nonces", type=int, default=1000, help="nonces of the synthetic escrow")
    a = ap.parse_args()
    fixture, synth = script(), synthetic(a.nonces)
    roots = set()
    for label, kw in (("rollback", {}), ("no rollback", {"rollback": False})):
        f, f_root = run(lambda: apply.Session.new(ESCROW, CONFIG, tuple(HOSTS), 1_000_000, "v4.1"), fixture,
                        a.rounds, **kw)
        s, s_root = run(lambda: apply.Session.new(ESCROW, SYNTH, SLOTS, 10**12, "v4.1"), synth, a.rounds, **kw)
        roots.add((f_root, s_root))
        print(f"{label:12s} v4.1 fixture (34 nonces): {f:8.1f} us/nonce   synthetic {a.nonces:,} nonces: "
              f"{s:8.1f} us/nonce")
    print(f"roots identical in both modes: {len(roots) == 1}")


if __name__ == "__main__":
    main()
