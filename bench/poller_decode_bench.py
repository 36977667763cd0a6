"""Where a poller decode process spends its CPU, per diff: the parts of one run's decode, measured one by one.

    python bench/poller_decode_bench.py [--epochs 1] [--escrows-per-epoch 10] [--inferences-per-escrow 200]
                                        [--repeat 5]

The runs are every escrow's diff log of an in-process devnet scenario as its hosts serve it (JSON entries, base64
DiffContent, the creator's signature), decoded as a decode process does (:func:`indexer.poller.decode.decode_entries`)
in this one process: no HTTP, no database, no pool. Figures are µs of CPU (process time) per diff, the best of
``--repeat`` passes over all runs:

* ``decode_entries``: the whole task, with the signed check and without it;
* ``entries → contents``: the entries checked and their DiffContent parsed (``diff_contents_from_host_json``);
* ``signed check``: every diff's user signature recovered and compared with the creator (``check_signed``), and of
  it the secp256k1 recovery alone (``recover_pubkey``) and, for comparison only, a verification of the same
  signature against the creator's key (coincurve ``PublicKey.verify``, the signature in DER): cheaper, but it cannot
  tell which of the two keys a signature's recovery byte names, so it is not the chain's check;
* ``lines``: the records' NDJSON lines and the ``signed_diff`` lines written from the parsed contents;
* ``typing``: the lines typed for COPY (``prepare_block``, the C block typer and the Python paths behind it);
* ``pickling``: a task's arguments and its result, out and back, as the pool moves them between processes.

What the pool adds beyond this (its processes' start, the queue threads, waiting for a free process) and the
poller's own process (HTTP, payloads, the commit) are measured by bench/poller_bench.py.
"""
from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import coincurve  # noqa: E402
from coincurve.ecdsa import cdata_to_der, deserialize_recoverable, recoverable_convert  # noqa: E402

from indexer.devnet import Scenario, ScenarioConfig  # noqa: E402
from indexer.load.assemble import PLACEHOLDER_SOURCE  # noqa: E402
from indexer.load.prepare import prepare_block  # noqa: E402
from indexer.poller.decode import check_signed, decode_entries, run_lines  # noqa: E402
from indexer.verify.signatures import recover_pubkey  # noqa: E402
from indexer.wire.diffs import diff_contents_from_host_json, diff_to_host_json  # noqa: E402


def cpu_per_item(fn, items: int, repeat: int) -> float:
    """µs of process CPU per item of the best of ``repeat`` calls of ``fn`` (a pass over every run)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best / items * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=1, help="devnet epochs to generate (default 1)")
    ap.add_argument("--escrows-per-epoch", type=int, default=10, help="devnet escrows per epoch (default 10)")
    ap.add_argument("--inferences-per-escrow", type=int, default=200,
                    help="devnet inferences per escrow (default 200)")
    ap.add_argument("--repeat", type=int, default=5, help="passes per figure, the best is reported (default 5)")
    args = ap.parse_args()

    scenario = Scenario(ScenarioConfig(epochs=args.epochs, escrows_per_epoch=args.escrows_per_epoch,
                                       inferences_per_escrow=args.inferences_per_escrow))
    version = scenario.config.protocol_version
    # one task per escrow, as decode_entries is called: (escrow, version, entries, hold refusals, member, creator)
    tasks = [(eid, version, [diff_to_host_json(d, version, sig, root) for d, sig, root in scenario.host_diff_log(esc)],
              True, "member", esc.creator) for eid, esc in scenario.escrows.items()]
    tasks = [t for t in tasks if t[2]]
    n = sum(len(t[2]) for t in tasks)
    contents = [diff_contents_from_host_json(entries, v, eid) for eid, v, entries, *_ in tasks]
    signed = [(s.signed_bytes(t[0]), s.user_sig) for t, run in zip(tasks, contents) for _, _, _, s in run]
    blobs = [b"\n".join(run_lines(*t[:5])[0].lines) + b"\n" for t in tasks]
    results = [decode_entries(*t) for t in tasks]  # every diff passes the check: the scenario is honest
    # the comparison with a verification: the first escrow's diffs against its creator's key, signatures as DER
    key = coincurve.PublicKey(recover_pubkey(*signed[0]))
    ders = [(cdata_to_der(recoverable_convert(deserialize_recoverable(s.user_sig))), s.signed_bytes(tasks[0][0]))
            for _, _, _, s in contents[0]]
    assert all(key.verify(der, msg) for der, msg in ders), "a diff of the first escrow does not verify"

    def all_tasks(check: bool):
        return lambda: [decode_entries(*t[:5], t[5] if check else None) for t in tasks]

    def lines():
        for t in tasks:
            run_lines(*t[:5])

    rows = [
        ("decode_entries, signed check on", cpu_per_item(all_tasks(True), n, args.repeat)),
        ("decode_entries, no signed check", cpu_per_item(all_tasks(False), n, args.repeat)),
        ("entries → contents", cpu_per_item(
            lambda: [diff_contents_from_host_json(t[2], t[1], t[0]) for t in tasks], n, args.repeat)),
        ("signed check", cpu_per_item(
            lambda: [check_signed(t[0], t[5], run) for t, run in zip(tasks, contents)], n, args.repeat)),
        ("  secp256k1 recovery", cpu_per_item(lambda: [recover_pubkey(m, s) for m, s in signed], n, args.repeat)),
        ("  (verify instead)", cpu_per_item(lambda: [key.verify(d, m) for d, m in ders], len(ders), args.repeat)),
        ("entries → lines", cpu_per_item(lines, n, args.repeat)),
        ("typing", cpu_per_item(lambda: [prepare_block(PLACEHOLDER_SOURCE, 1, b) for b in blobs], n, args.repeat)),
        ("pickling", cpu_per_item(
            lambda: [pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)) for x in (*tasks, *results)],
            n, args.repeat)),
    ]
    print(f"{n} diffs, {sum(r.txs for r in results)} txs in {len(tasks)} devnet escrows ({version}); "
          f"µs of CPU per diff, best of {args.repeat}")
    for label, us in rows:
        print(f"{label:<34}{us:>8.1f}")
    whole, check = rows[0][1], rows[3][1]
    print(f"the signed check is {check / whole:.0%} of a decode process's work per diff")


if __name__ == "__main__":
    main()
