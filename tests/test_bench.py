"""The bench scripts keep working: each one runs end to end at a tiny size against the test server, and every option
of each has a help line. Nothing here times anything (the benches print ratios for people to read); these tests only
catch a bench that rotted, as bench/decode_bench.py once did (its default old-codec revision stopped existing on
main, and it failed at its own equality check with nobody noticing)."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*_bench.py"))


def _run(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def options_without_help(help_text: str) -> list[str]:
    """Options in argparse's --help output that have no help text: an option line ("  --name VALUE") with nothing
    after it, and no indented continuation on the next line."""
    lines = help_text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("options:"))
    missing = []
    for i, line in enumerate(lines[start + 1:], start + 1):
        if not line.startswith("  -"):
            continue
        invocation, _, text = line.strip().partition("  ")
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if not text.strip() and not (following.startswith(" " * 8) and not following.strip().startswith("-")):
            missing.append(invocation)
    return missing


def test_the_help_parser_finds_an_option_without_help():
    text = "usage: x\n\noptions:\n  -h, --help  show this help\n  --epochs EPOCHS\n  --keep      keep it\n" \
           "  --long-option-name LONG_OPTION_NAME\n                        said on the next line\n"
    assert options_without_help(text) == ["--epochs EPOCHS"]


@pytest.mark.parametrize("bench", BENCHES)
def test_every_bench_option_has_a_help_line(bench):
    out = _run([f"bench/{bench}", "--help"], timeout=60)
    assert out.returncode == 0, out.stderr
    assert options_without_help(out.stdout) == []


def _has_revision(rev: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                          capture_output=True).returncode == 0


def test_decode_bench_runs_and_both_codecs_agree():
    LAST_HAND_CODEC = re.search(r'^LAST_HAND_CODEC = "([^"]+)"', (ROOT / "bench/decode_bench.py").read_text(),
                                re.M).group(1)  # the bench's own default
    if not _has_revision(LAST_HAND_CODEC):
        pytest.skip(f"SKIPPED: this clone lacks {LAST_HAND_CODEC} (a shallow clone?); the bench needs its history")
    out = _run(["bench/decode_bench.py", "--epochs", "1", "--escrows-per-epoch", "2", "--inferences-per-escrow", "10",
                "--repeat", "1"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^entries → records\s+[\d.]+\s+[\d.]+", out.stdout, re.M), out.stdout
    assert re.search(r"^entries → lines\s+[\d.]+\s+[\d.]+", out.stdout, re.M), out.stdout  # the poller's decode


def test_poller_decode_bench_runs_and_splits_a_decode():
    out = _run(["bench/poller_decode_bench.py", "--epochs", "1", "--escrows-per-epoch", "2", "--inferences-per-escrow",
                "10", "--repeat", "1"])
    assert out.returncode == 0, out.stderr
    for row in ("decode_entries, signed check on", "signed check", "  secp256k1 recovery", "  (verify instead)",
                "entries → lines", "typing", "pickling"):
        assert re.search(rf"^{re.escape(row)}\s+[\d.]+$", out.stdout, re.M), out.stdout
    assert re.search(r"^the signed check is \d+% of a decode process's work per diff$", out.stdout, re.M), out.stdout


def test_refusal_bench_runs_both_sides():
    base = re.search(r'^BASE_REV = "([^"]+)"', (ROOT / "bench/refusal_bench.py").read_text(), re.M).group(1)
    if not _has_revision(base):
        pytest.skip(f"SKIPPED: this clone lacks {base} (a shallow clone?); the bench needs its history")
    out = _run(["bench/refusal_bench.py", "--epochs", "1", "--escrows-per-epoch", "2", "--inferences-per-escrow",
                "60", "--repeat", "1"])
    assert out.returncode == 0, out.stderr
    for row in ("payload parse", "parse row", "line typed"):  # each side typed every line (the bench asserts it)
        assert re.search(rf"^{row}\s+[\d.]+\s+[\d.]+\s+[\d.]+×$", out.stdout, re.M), out.stdout


def test_ingest_bench_runs(pg_admin_url, tmp_path):
    out = _run(["bench/ingest_bench.py", "--records", "2000", "--floor", "--database-url", pg_admin_url,
                "--scale-file", str(tmp_path / "scale.ndjson"), "--scale-rounds", "2"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^ratio\s+load \+ replay / baseline\s+: [\d.]+x", out.stdout, re.M), out.stdout
    assert re.search(r"^floor\s+the same rows, one COPY a table :\s+[\d.]+s", out.stdout, re.M), out.stdout
    for order in ("escrow", "interleaved"):  # both orders by default, each with both ratios
        assert re.search(rf"^order\s+{order}\s*: load \+ replay [\d.]+x, whole command [\d.]+x", out.stdout,
                         re.M), out.stdout
    assert "peak RSS" in out.stdout
    # the linearity check: two rounds of (small, small, big), two small loads after them, each load with the WAL it
    # wrote and the checkpoints it crossed; the medians compared, each big load's ratio shown
    alone = re.findall(r"^alone .* records: load \+ replay .*; WAL ([\d,]+) MB, (\d+) checkpoint", out.stdout, re.M)
    assert len(alone) == 8, out.stdout
    assert re.search(r"^linearity .*x \(each: [\d.]+x, [\d.]+x\) \(target within 10%\).*; WAL a record [\d.]+x",
                     out.stdout, re.M), out.stdout


def test_index_floor_bench_runs(pg_admin_url, tmp_path):
    from indexer.synth import generate, write_ndjson

    path = tmp_path / "f.ndjson"
    write_ndjson(str(path), generate(seed=3, escrows=3, inferences=20))
    out = _run(["bench/index_floor_bench.py", "--file", str(path), "--repeat", "1", "--database-url", pg_admin_url,
                "--drop", "rec.ix_start_tx_sibling_key"])
    assert out.returncode == 0, out.stderr
    for variant in ("every index", "rec.ix_start_tx_sibling_key"):
        assert re.search(rf"^{re.escape(variant)}\s+server CPU\s+[\d.]+s \(([\d.]+|n/a)x\)", out.stdout, re.M), \
            out.stdout


def test_interleaved_order_is_the_same_records_each_escrow_in_diff_order(monkeypatch):
    """The ingest bench's interleaved stream: every record of the generator once, each escrow's txs by nonce, the
    escrow record before its txs, and many escrows open at once (not one after another)."""
    import orjson

    from indexer.synth import generate

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("ingest_bench", ROOT / "bench" / "ingest_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    records = list(generate(seed=3, escrows=30, inferences=12, epochs=3, hosts=10))
    stream = list(bench.interleave(iter(records), 20))
    assert sorted(map(orjson.dumps, stream)) == sorted(map(orjson.dumps, records))
    seen, nonce, switches = set(), {}, 0
    for before, rec in zip([None, *stream], stream):
        escrow = rec.get("escrow_id")
        if rec["kind"] == "escrow":
            seen.add(escrow)
        elif escrow is not None:
            assert escrow in seen, rec
            if "diff_nonce" in rec:
                assert rec["diff_nonce"] >= nonce.get(escrow, 0), rec
                nonce[escrow] = rec["diff_nonce"]
        switches += before is not None and escrow != before.get("escrow_id")
    assert switches > len(records) / 10  # escrows alternate, a few records at a time
    assert len({r["escrow_id"] for r in stream[:200] if r["kind"] == "escrow"}) == 20  # twenty open at once


def test_poller_bench_runs(pg_admin_url):
    out = _run(["bench/poller_bench.py", "--epochs", "1", "--escrows-per-epoch", "2", "--inferences-per-escrow", "10",
                "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr
    assert re.search(r"poller ingest / NDJSON ingest = [\d.]+x", out.stdout), out.stdout
    # the two sides' CPU, so a ratio can be read by where the time went and not only by the wall clock
    assert re.search(r"^cpu of the NDJSON ingest: loader [\d.]+s \(\+ typing workers [\d.]+s\), PostgreSQL [\d.]+s$",
                     out.stdout, re.M), out.stdout


def test_quarantine_bench_runs_and_resolves_the_open_keys_it_loads(pg_admin_url):
    out = _run(["bench/quarantine_bench.py", "--open", "300", "--escrows", "10", "--starts", "5", "--batch", "40",
                "--repeat", "1", "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^160 lines in batches of 40, 300 open quarantine rows: load [\d.]+ s, resolving \d+ ms "
                     r"\(medians of 1\); afterwards 200 open, 100 resolved$", out.stdout, re.M), out.stdout


def test_replay_bench_runs_and_finds_its_tables_identical(pg_admin_url):
    out = _run(["bench/replay_bench.py", "--escrows", "4", "--runs", "1", "--workers", "1", "2",
                "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr + out.stdout
    assert "replay tables identical across all runs: True" in out.stdout


def test_verify_stage_bench_runs_and_every_escrow_settles(pg_admin_url):
    out = _run(["bench/verify_stage_bench.py", "--escrows", "2", "--runs", "1", "--devnet-inferences", "8",
                "--grow-every", "5", "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr + out.stdout
    # each case says what the verification costs beside the replay and how much of it is the crypto floor
    assert len(re.findall(r"^  verification / replay: [\d.]+x wall, [\d.]+x CPU .*; crypto floor / replay: "
                          r"[\d.]+x CPU", out.stdout, re.M)) == 2, out.stdout
    assert "escrows verified to settled: [2] of 2" in out.stdout
    # the growing log: kept recoveries make fewer of them than recovering every signature at every cycle
    kept, forgotten = (int(n) for n in re.findall(r"^  memo \w+ +wall .* recoveries per escrow (\d+)", out.stdout,
                                                   re.M))
    assert 0 < kept < forgotten, out.stdout


def test_rules_bench_runs(pg_admin_url):
    out = _run(["bench/rules_bench.py", "--inferences", "2000", "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^query\s+api\.disputable_penalties, one epoch\s+:\s+[\d.]+ms", out.stdout, re.M), out.stdout


def test_startup_bench_runs(empty_db_url):
    out = _run(["bench/startup_bench.py", "--runs", "1", "--database-url", empty_db_url])
    assert out.returncode == 0, out.stderr
    assert re.search(r"^indexer ingest \(empty file\)\s+[\d.]+ s", out.stdout, re.M), out.stdout


def test_verify_bench_runs_and_both_modes_reach_the_same_roots():
    out = _run(["bench/verify_bench.py", "--rounds", "1", "--nonces", "60"])
    assert out.returncode == 0, out.stderr + out.stdout
    assert "synthetic 60 nonces" in out.stdout and "roots identical in both modes: True" in out.stdout


def test_change_bench_runs(pg_admin_url):
    out = _run(["bench/change_bench.py", "--inferences", "3000", "--epochs", "2", "--repeat", "1", "--full-runs", "1",
                "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr + out.stdout
    assert re.search(r"^change work beyond start-up \(median of the pairs\) :\s+-?[\d.]+s = -?[\d.]+x the full rules "
                     r"run .*own clock [\d.]+x; rules alone [\d.]+x; 1 amendment\(s\) recorded$", out.stdout, re.M), \
        out.stdout


def test_history_bench_runs(pg_admin_url):
    out = _run(["bench/history_bench.py", "--history-records", "3000", "--template-records", "1000", "--repeat", "1",
                "--escrows-per-epoch", "1", "--inferences-per-escrow", "5", "--database-url", pg_admin_url])
    assert out.returncode == 0, out.stderr + out.stdout
    assert re.search(r"^history: [\d,]+ records in epochs \d+\.\.407", out.stdout, re.M), out.stdout
    for kind in ("empty", "history", "archived"):
        assert re.search(rf"^poll cycle, {kind}\s+history: median\s+[\d.]+s .*= [\d.]+x the empty one", out.stdout,
                         re.M), out.stdout


def test_ingest_bench_makes_its_files_in_a_child_process(tmp_path):
    """The bench's own RSS stays small while it makes a file whose interleaving holds every record at once (one
    epoch of 100 escrows): the peak RSS it reports for each ingest it starts afterwards starts from its own."""
    code = (
        "import resource, sys; from pathlib import Path; sys.path.insert(0, 'bench'); import ingest_bench as b; "
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
        f"n = b.make_file_apart(Path({str(tmp_path / 'one.ndjson')!r}), 150_000, 'mainnet', 'interleaved', 1); "
        "print(n, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines, grown_mb = map(int, out.stdout.split())
    assert lines > 140_000 and grown_mb < 30, out.stdout
