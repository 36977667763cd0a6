"""Decode cost per DevshardTx, before and after, measured side by side in one run.

    python bench/decode_bench.py [--base-rev REV] [--epochs 2] [--escrows-per-epoch 10] [--inferences-per-escrow 200]
                                 [--repeat 5]

"Before" is the hand-written codec of ``--base-rev`` (default: the last revision that had it, the parent of the commit
that moved decoding to the protobuf library): its ``indexer/wire``
is taken out of git into a temporary package and imported beside the current one. Both decode the same txs, the
devnet's diff logs of one scenario (the old codec with its newest table ``v7``, the new one with ``v5``: the same
fields and numbers). Figures are µs per tx, best of ``--repeat`` passes over all txs:

* ``decode``: one serialized DevshardTx → the codec's form (old: dict; new: upb message object);
* ``decode → dict``: the new path's dict form (devnet, tests, tools), for comparison with the old dict;
* ``decode + record``: decode, then the normalizer's record for the tx (what the poller does per tx);
* ``entries → records``: whole host diff-log entries (JSON objects, base64 txs) → record dicts, per tx;
* ``entries → lines``: the same entries → NDJSON lines, the poller's decode step (before: the records serialized;
  after: :func:`indexer.poller.decode.run_lines`, lines written from the message objects).
"""
from __future__ import annotations

import argparse
import base64
import importlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The library codec landed in 294e0c8; its parent is the last revision with the hand-written one (a merge base with
# main no longer is: on main it is HEAD itself, whose wire has no "v7" table to compare against).
LAST_HAND_CODEC = "294e0c8^"
sys.path.insert(0, str(ROOT))
from indexer.devnet import Scenario, ScenarioConfig  # noqa: E402
from indexer.wire import SCHEMAS, normalize_diffs  # noqa: E402
from indexer.poller.decode import run_lines  # noqa: E402
from indexer.wire.diffs import diff_messages_from_host_json, diff_to_host_json  # noqa: E402
from indexer.wire.normalize import dumps_record_bytes, tx_record  # noqa: E402


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def load_old_wire(rev: str, into: Path):
    """``indexer/wire`` of ``rev`` as the package ``oldwire`` (its imports of indexer.wire rewritten)."""
    pkg = into / "oldwire"
    pkg.mkdir()
    for name in _git("ls-tree", "--name-only", f"{rev}:indexer/wire").split():
        if name.endswith(".py"):
            text = _git("show", f"{rev}:indexer/wire/{name}")
            (pkg / name).write_text(text.replace("indexer.wire.", "oldwire.").replace("from indexer.wire import",
                                                                                      "from oldwire import") + "\n")
    sys.path.insert(0, str(into))
    return importlib.import_module("oldwire.diffs"), importlib.import_module("oldwire.normalize")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-rev", default=LAST_HAND_CODEC,
                    help=f"git revision of the old codec (default: {LAST_HAND_CODEC}, the last one that had it)")
    ap.add_argument("--epochs", type=int, default=2, help="devnet epochs to generate")
    ap.add_argument("--escrows-per-epoch", type=int, default=10, help="devnet escrows per epoch")
    ap.add_argument("--inferences-per-escrow", type=int, default=200, help="devnet inferences per escrow")
    ap.add_argument("--repeat", type=int, default=5, help="passes per figure (the best is reported)")
    args = ap.parse_args()
    rev = _git("rev-parse", "--verify", f"{args.base_rev}^{{commit}}")

    scenario = Scenario(ScenarioConfig(epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                                       inferences_per_escrow=args.inferences_per_escrow))
    version = scenario.config.protocol_version
    host_logs = {eid: list(scenario.host_diff_log(esc)) for eid, esc in scenario.escrows.items()}
    logs = {eid: [diff_to_host_json(d, version, sig, root) for d, sig, root in log] for eid, log in host_logs.items()}
    # the old codec read an earlier reading of the host's framing (a list of base64 DevshardTx, one per tx): the
    # same txs in that framing, so both sides decode the same messages
    old_logs = {eid: [{"diff": {"nonce": d["nonce"], "escrow_id": eid,
                                "txs": [base64.b64encode(SCHEMAS[version].encode("DevshardTx", tx)).decode()
                                        for tx in d["txs"]]}}
                      for d, _, _ in log]
                for eid, log in host_logs.items()}
    raws = [SCHEMAS[version].encode("DevshardTx", tx) for esc in scenario.escrows.values() for d in esc.diffs
            for tx in d["txs"]]
    n = len(raws)

    with tempfile.TemporaryDirectory() as tmp:
        old_diffs, old_norm = load_old_wire(rev, Path(tmp))
        old_version = "v7"  # the old codec's newest table: the fields and numbers of v5
        cls = SCHEMAS[version].cls("DevshardTx")
        new_decode_dict = importlib.import_module("indexer.wire.diffs").decode_tx
        assert [old_diffs.decode_tx(r, old_version) for r in raws] == [new_decode_dict(r, version) for r in raws]

        def old_decode():
            for r in raws:
                old_diffs.decode_tx(r, old_version)

        def new_decode():
            for r in raws:
                cls.FromString(r)

        def new_dict():
            for r in raws:
                new_decode_dict(r, version)

        def old_records():
            for i, r in enumerate(raws):
                old_norm.tx_record("1", i, 0, old_diffs.decode_tx(r, old_version), old_version)

        def new_records():
            for i, r in enumerate(raws):
                tx_record("1", i, 0, cls.FromString(r), version)

        def old_entries():
            for eid, entries in old_logs.items():
                old_norm.normalize_diffs(eid, [old_diffs.diff_from_host_json(e, old_version) for e in entries],
                                         old_version)

        def new_entries():
            for eid, entries in logs.items():
                normalize_diffs(eid, [diff_messages_from_host_json(e, version, eid) for e in entries], version)

        def old_lines():
            for eid, entries in old_logs.items():
                out = old_norm.normalize_diffs(eid, [old_diffs.diff_from_host_json(e, old_version) for e in entries],
                                               old_version)
                [dumps_record_bytes(r) for r in out.records]

        def new_lines():  # the poller's decode (indexer.poller.decode): the lines written from the messages
            for eid, entries in logs.items():
                run_lines(eid, version, entries, False)

        rows = [("decode", old_decode, new_decode), ("decode → dict", old_decode, new_dict),
                ("decode + record", old_records, new_records), ("entries → records", old_entries, new_entries),
                ("entries → lines", old_lines, new_lines)]
        print(f"{n} DevshardTx from {len(logs)} devnet escrows; old codec at {rev[:12]}; best of {args.repeat}")
        print(f"{'µs per tx':<20}{'before':>10}{'after':>10}{'speed-up':>10}")
        for label, before, after in rows:
            b, a = best(before, args.repeat) / n * 1e6, best(after, args.repeat) / n * 1e6
            print(f"{label:<20}{b:>10.2f}{a:>10.2f}{b / a:>9.1f}×")


if __name__ == "__main__":
    main()
