"""`indexer demo` end to end: devnet over HTTP → poller → replay → rules → report, with every rule family found."""
import subprocess
import sys

import psycopg


def test_demo_polls_the_devnet_and_finds_every_rule_family(db_url, tmp_path):
    run = subprocess.run([sys.executable, "-m", "indexer", "demo", "--database-url", db_url, "--epochs", "3"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    with psycopg.connect(db_url) as conn:
        families = {r[0] for r in conn.execute("SELECT DISTINCT rule FROM api.disputable_penalties")}
        captured = conn.execute("SELECT count(*) FROM rec.escrow").fetchone()[0]
        mismatches = conn.execute("SELECT count(*) FROM api.host_stats_check WHERE mismatch").fetchone()[0]
        reported = conn.execute("SELECT count(*) FROM api.host_stats_check WHERE reported_missed IS NOT NULL"
                                ).fetchone()[0]
        levels = dict(conn.execute("SELECT v.level, count(*) FROM api.escrow_verification v JOIN rec.escrow e "
                                   "USING (escrow_id) WHERE e.settled GROUP BY 1").fetchall())
        penalty = conn.execute("SELECT escrow_id, inference_id FROM api.disputable_penalties "
                               "WHERE evidence_level = 'settled' ORDER BY 1, 2 LIMIT 1").fetchone()
        flips = conn.execute("SELECT epoch_index, participant, flipped_test, disputable_missed + disputable_invalid "
                             "FROM api.restitution_impact WHERE restitution_candidate").fetchall()
    assert families == {"invalidated_context_refusal", "error_miss_sibling", "timeout_over_limit"}
    assert captured == 9  # 3 epochs x 3 escrows, captured before the devnet pruned them
    assert reported > 0 and mismatches == 0  # the hosts' own counters were captured, and the replay reproduces them
    assert "Disputable penalties by rule family" in run.stdout + run.stderr
    # the devnet has hosts whose epoch outcome flips without the disputable penalties; the demo ends with them
    assert flips and all(n > 0 for *_, n in flips)
    lines = (run.stdout + run.stderr).splitlines()
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("restitution: ")):]
    epoch, host, _, _ = flips[0]
    assert f"  epoch {epoch} {host}" in summary and "GONKA" in summary[3 * len(flips)]
    # a heading, four lines per host (epoch, test, amount, evidence level), and one naming the undecided
    # host-epochs: readable in a terminal
    assert len(summary) == 1 + 4 * len(flips) + 1
    assert summary[-1].endswith("host-epoch(s) could not be evaluated (see the reports' \"Hosts that could not be "
                                "evaluated\")")
    assert all(len(line) <= 100 for line in summary), max(summary, key=len)
    # every settled escrow's log verified the way the protocol signs it, and a penalty's evidence bundle checks out
    # with the standalone verifier, which reads no database
    assert set(levels) == {"settled"} and penalty is not None, levels
    bundle = tmp_path / "evidence.json"
    made = subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "evidence", penalty[0],
                           str(penalty[1]), "--out", str(bundle)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    checked = subprocess.run([sys.executable, "-m", "indexer.verify", str(bundle)], capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "settled" in checked.stdout and "penalty" in checked.stdout
    assert "check one without trusting this database: " in run.stdout + run.stderr  # the demo shows how


def test_a_second_demo_on_the_same_database_shows_the_stored_findings(db_url):
    """The devnet starts over at its first epoch, behind what the first demo stored: the second demo does not poll it
    (the poller would refuse a chain behind the database), says so, and prints the stored findings."""
    def demo():
        return subprocess.run([sys.executable, "-m", "indexer", "demo", "--database-url", db_url, "--epochs", "1"],
                              capture_output=True, text=True, timeout=240)

    def stored():
        with psycopg.connect(db_url) as conn:
            return conn.execute("SELECT count(*), max(epoch_index) FROM rec.escrow").fetchone()

    first = demo()
    assert first.returncode == 0, first.stderr[-2000:]
    before = stored()
    second = demo()
    assert second.returncode == 0, second.stderr[-2000:]
    out = second.stdout + second.stderr
    assert "demo: the database already holds epochs " in out and "To start over: give it an empty database" in out
    assert "Disputable penalties by rule family" in out and "devnet on" not in out
    assert stored() == before
