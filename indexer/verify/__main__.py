"""``python -m indexer.verify FILE [--json]``: check an evidence bundle on its own, with no database, poller or network.

Prints one line per step (signed, replayed, settled, then each penalty derivation) with its outcome, the bundle's
notes (what its author could not check), then the level reached. A signature by a key a slot's grants do not list is
not checked (not failed) where the bundle says those grants were read live or not at all, and a settlement without
its raw transaction stops at replayed, as the indexer's own verification stage decides. Exit status: 0 when the
bundle reaches ``settled`` and every penalty derivation holds, 1 when a check fails or cannot be made, 2 when the
bundle is unusable (unreadable, not JSON, unknown format, wrong types or sizes)."""
from __future__ import annotations

import argparse
import json
import sys

from indexer.verify.bundle import BundleError, load_bundle
from indexer.verify.evidence import verify_bundle

MAX_LINE = 600


def terminal_safe(text: str) -> str:
    """One line for a terminal: control and other unprintable characters escaped, cut at :data:`MAX_LINE`."""
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return out if len(out) <= MAX_LINE else out[:MAX_LINE - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m indexer.verify",
                                     description="Verify a devshard evidence bundle without trusting its author.")
    parser.add_argument("file", help="the bundle (JSON, format devshard-evidence/1)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    args = parser.parse_args(argv)
    try:
        bundle = load_bundle(args.file)
    except BundleError as exc:
        print(f"error: {terminal_safe(str(exc))}", file=sys.stderr)
        return 2
    report = verify_bundle(bundle)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        print(terminal_safe(f"escrow {report.escrow_id} (protocol {bundle.protocol_version}, creator "
                            f"{bundle.creator})"))
        for step in report.steps:
            at = f"nonce {step.nonce}: " if step.nonce is not None else ""
            print(terminal_safe(f"{step.name:<9} {step.outcome.upper():<11} {at}{step.detail}"))
        for note in report.notes:  # the author's: what it could not check (never turns a step into a pass)
            print(terminal_safe(f"note      {note}"))
        print(f"level     {report.level.upper()}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
