"""Cost of typing a refusal (a 0/0 Finish with its stored payload), before and after, measured side by side in one run.

    python bench/refusal_bench.py [--base-rev REV] [--epochs 2] [--escrows-per-epoch 10]
                                  [--inferences-per-escrow 200] [--repeat 5]

A refusal's line takes the loader's general path: the line classified (duplicate keys included), its fields typed,
and its payload parsed into a ``rules.refusal_parse`` row (``indexer.refusals``), by far the dearest line of a log.
Both the NDJSON ingest's typing processes and the poller's decode processes pay it. The lines are the devnet's 0/0
Finishes with their payloads, as the poller writes them. "Before" is ``--base-rev`` (default: the revision before
the refusal parse was made cheaper), taken out of git into a temporary directory; each side runs in a process of its
own with its tree first on ``sys.path`` (the C typer is copied from this tree where the revision's source is this
one's, else built from the revision's own). Figures are µs per refusal, best of ``--repeat`` passes:

* ``payload parse``: ``parse_response_payload`` of the stored payload alone;
* ``parse row``: the ``rules.refusal_parse`` row (``indexer.refusals.store.parse_row``);
* ``line typed``: the whole line through ``prepare_batch`` (classify, type, render, parse row).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_REV = "0efc9b2^"  # the parent of the commit that made the refusal parse cheaper

# Run in each tree: time the three figures over the lines in argv[1], print them as JSON.
_MEASURE = r"""
import json, sys, time
from indexer.load.prepare import prepare_batch
from indexer.refusals.store import parse_row
from indexer.refusals.vllm import parse_response_payload
import orjson
lines = [line for line in open(sys.argv[1], "rb").read().split(b"\n") if line]
repeat = int(sys.argv[2])
recs = [orjson.loads(line) for line in lines]
numbered = list(enumerate(lines, 1))

def best(fn):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) / len(lines) * 1e6

out = {
    "payload parse": best(lambda: [parse_response_payload(r["response_payload"]) for r in recs]),
    "parse row": best(lambda: [parse_row(r["escrow_id"], r["inference_id"], r["response_payload"]) for r in recs]),
    "line typed": best(lambda: prepare_batch(1, numbered)),
}
typed = prepare_batch(1, numbered)
assert not typed.rejects and len(typed.parses) == len(lines), "every refusal line typed and parsed"
print(json.dumps(out))
"""


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


def refusal_lines(epochs: int, escrows: int, inferences: int) -> list[bytes]:
    """The devnet's 0/0 Finishes with their payloads, as the poller's lines."""
    sys.path.insert(0, str(ROOT))
    from indexer.devnet import Scenario, ScenarioConfig
    from indexer.wire.normalize import dumps_record_bytes
    scenario = Scenario(ScenarioConfig(epochs=epochs, escrows_per_epoch=escrows, inferences_per_escrow=inferences))
    version = scenario.config.protocol_version
    out = []
    for escrow_id, esc in scenario.escrows.items():
        for diff in esc.diffs:
            for index, tx in enumerate(diff["txs"]):
                m = tx.get("finish_inference")
                if m is None or m.get("input_tokens") or m.get("output_tokens") or m["inference_id"] not in \
                        esc.log.payloads:
                    continue
                out.append(dumps_record_bytes({
                    "kind": "finish", "escrow_id": escrow_id, "inference_id": m["inference_id"],
                    "diff_nonce": diff["nonce"], "tx_index": index, "protocol_version": version,
                    "executor_slot": m.get("executor_slot", 0), "input_tokens": 0, "output_tokens": 0,
                    "response_hash": bytes(m.get("response_hash", b"")).hex(),
                    "response_payload": esc.log.payloads[m["inference_id"]]}))
    return out


def build_typer(source: Path) -> None:
    """Compile a revision's ``_typer.c`` beside it, as setup.py does (-O2, the interpreter's headers)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    out = source.with_name("_typer" + sysconfig.get_config_var("EXT_SUFFIX"))
    done = subprocess.run([*cc, "-shared", "-fPIC", "-O2", f"-I{sysconfig.get_paths()['include']}", str(source),
                           "-o", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the base revision's C typer ({source.name}) did not build: "
                 f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")


def measure(tree: Path, lines_file: Path, repeat: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(lines_file), str(repeat)], cwd=tree,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"measuring the tree at {tree} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def extract_tree(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract an archive of plain files and directories into `dest`, refusing anything else: an absolute name, a
    `..` part, a name resolving outside `dest`, a link or a device. tarfile's own `filter="data"` arrived in Python
    3.11.4; it is applied as well where it exists, and the checks here stand alone on earlier 3.11 releases."""
    root = dest.resolve()
    members = tar.getmembers()
    for m in members:
        where = f"{tar.name or 'archive'}: member {m.name!r}"
        if not (m.isfile() or m.isdir()):
            raise ValueError(f"{where} is not a regular file or directory (tar type {m.type!r})")
        if m.name.startswith("/") or ".." in Path(m.name).parts or not (root / m.name).resolve().is_relative_to(root):
            raise ValueError(f"{where} would be written outside {dest}")
    extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    tar.extractall(root, members=members, **extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-rev", default=BASE_REV, help=f"git revision measured as before (default: {BASE_REV})")
    ap.add_argument("--epochs", type=int, default=2, help="devnet epochs to generate")
    ap.add_argument("--escrows-per-epoch", type=int, default=10, help="devnet escrows per epoch")
    ap.add_argument("--inferences-per-escrow", type=int, default=200, help="devnet inferences per escrow")
    ap.add_argument("--repeat", type=int, default=5, help="passes per figure (the best is reported)")
    args = ap.parse_args()
    rev = _git("rev-parse", "--verify", f"{args.base_rev}^{{commit}}").decode().strip()
    lines = refusal_lines(args.epochs, args.escrows_per_epoch, args.inferences_per_escrow)
    if not lines:
        sys.exit("the scenario has no refusals: raise --inferences-per-escrow")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        with tarfile.open(fileobj=BytesIO(_git("archive", rev, "indexer"))) as tar:
            extract_tree(tar, base)
        ours = (ROOT / "indexer/load/typed/_typer.c").read_bytes()
        for source in base.rglob("_typer.c"):  # wherever that revision keeps it: the C typer of its own source
            if source.read_bytes() == ours:
                for built in (ROOT / "indexer").rglob("_typer*.so"):
                    shutil.copy2(built, source.parent / built.name)
            else:
                build_typer(source)
        lines_file = Path(tmp) / "refusals.ndjson"
        lines_file.write_bytes(b"\n".join(lines) + b"\n")
        before, after = measure(base, lines_file, args.repeat), measure(ROOT, lines_file, args.repeat)
    print(f"{len(lines)} refusal lines from the devnet; before = {rev[:12]}; best of {args.repeat}")
    print(f"{'µs per refusal':<20}{'before':>10}{'after':>10}{'speed-up':>10}")
    for label in before:
        b, a = before[label], after[label]
        print(f"{label:<20}{b:>10.2f}{a:>10.2f}{b / a:>9.2f}×")


if __name__ == "__main__":
    main()
