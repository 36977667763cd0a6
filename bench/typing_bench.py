"""CPU cost of typing a synthetic log by each tier of the load's typing, one process, no database:

    python bench/typing_bench.py [--records 200000] [--mix mainnet|adversarial] [--repeat 3]

Rows: the C block typer with the Python paths behind it (what the load runs), the Python paths alone (INDEXER_IMPL=
python: Struct decoder, generated fast path, general path), without the Struct decoder, and the general path alone.
Each prints µs a line (best of --repeat) and checks it typed the same rows as the first.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer.load import prepare as p  # noqa: E402
from indexer.load.typed import IMPL, lines  # noqa: E402
from indexer.synth import generate  # noqa: E402


def _general_only(source_id: int, numbered) -> p.Prepared:
    out, rows = p.Prepared(0, 0, {}, []), {}
    sid = str(source_id)
    for number, raw in numbered:
        lines._general(out, lambda kind, got: rows.setdefault(kind, []).append(got), source_id, sid, number, raw)
    out.kinds = {kind: p._kind_batch(kind, got) for kind, got in rows.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000, help="about how many records to generate")
    ap.add_argument("--mix", choices=["mainnet", "adversarial"], default="mainnet", help="synthetic record mix")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tier; the best is printed")
    args = ap.parse_args()
    escrows = max(1, round(args.records / (300 * 3.35 + 17) / 2))
    records = [orjson.dumps(r) for r in generate(seed=1, escrows=escrows, inferences=300, epochs=2, hosts=10,
                                              mix=args.mix)]
    block, numbered = b"\n".join(records) + b"\n", list(enumerate(records, start=1))
    tiers = [
        ("C block typer + Python paths", lambda: p.prepare_block(1, 1, block) if IMPL == "c" else None),
        ("Struct + fast + general (Python)", lambda: p._prepare(1, numbered, orjson.loads, p.typed_line)),
        ("fast + general", lambda: p._prepare(1, numbered, orjson.loads, None)),
        ("general only", lambda: _general_only(1, numbered)),
    ]
    print(f"{len(records)} lines ({args.mix}), C typer {'built' if IMPL == 'c' else 'not in use'}")
    want = None
    for label, run in tiers:
        best, got = float("inf"), None
        for _ in range(args.repeat):
            start = time.process_time()
            got = run()
            best = min(best, time.process_time() - start)
        if got is None:
            print(f"{label:36} skipped")
            continue
        facts = {k: kb.copy for k, kb in got.kinds.items()}, got.rejects
        want = want or facts
        print(f"{label:36} {best / len(records) * 1e6:6.2f} µs/line {'same rows' if facts == want else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
